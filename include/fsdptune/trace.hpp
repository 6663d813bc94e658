// Chrome trace of a simulated step (Trace Event Format, JSON object form), which Perfetto
// (ui.perfetto.dev) and chrome://tracing open: one track per stream, one complete event
// per task named by its unit or bucket and kind, and a counter track of allocated memory.
// Pure: returns the JSON; the CLI writes it.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "fsdptune/pipeline.hpp"
#include "fsdptune/program.hpp"
#include "fsdptune/simulator.hpp"

namespace fsdptune {

// Times are microseconds of simulated time from the start of the step (the format's
// unit). `title` names the process track (e.g. "llama3-8b fsdp2").
// REQUIRES: `result` simulated `program` with SimOptions::record_timings (and
// record_timeline for the memory track; without it the track is left out).
nlohmann::json chrome_trace(const Program& program, const SimResult& result,
                            const std::string& title);

// The Chrome trace of a pipelined step (docs/parallelism.md "Trace of a pipelined job"):
// one process per pipeline stage (pid = rank), its threads the pipeline's actions (one
// event per forward or backward of a chunk and microbatch, cat "pipeline"), the streams of
// its chunks' Programs by name, and the point-to-point sends (cat "send"). Every action
// shows its chunk's tasks at their simulated times: the first forward, the last backward
// and the tail (exposed reduce-scatters, optimizer) as the chunk's one-microbatch Program
// ran them, shifted to where the composition placed the action; a chunk that keeps its
// parameters gathered runs only its compute tasks in the other microbatches, back to back
// at their standalone cost; one that re-gathers runs its forward (backward) tasks in every
// microbatch. Task events carry args chunk, microbatch and unit (the job's numbering).
// Each stage has a "memory allocated" counter: the pipeline's memory model (the chunks'
// one-microbatch peaks less their activations, plus accumulated gradients; activations
// held from a forward's end to its backward's end), whose largest sample is the stage's
// allocated peak.
// REQUIRES: `sim` from simulate_pipelined_* with SimOptions::record_timings.
nlohmann::json pipeline_chrome_trace(const PipelineSimulation& sim, const std::string& title);

}  // namespace fsdptune
