// Chrome trace of a simulated step (Trace Event Format, JSON object form), which Perfetto
// (ui.perfetto.dev) and chrome://tracing open: one track per stream, one complete event
// per task named by its unit or bucket and kind, and a counter track of allocated memory.
// Pure: returns the JSON; the CLI writes it.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "fsdptune/program.hpp"
#include "fsdptune/simulator.hpp"

namespace fsdptune {

// Times are microseconds of simulated time from the start of the step (the format's
// unit). `title` names the process track (e.g. "llama3-8b fsdp2").
// REQUIRES: `result` simulated `program` with SimOptions::record_timings (and
// record_timeline for the memory track; without it the track is left out).
nlohmann::json chrome_trace(const Program& program, const SimResult& result,
                            const std::string& title);

}  // namespace fsdptune
