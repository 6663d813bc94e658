// Shared by the fuzz targets of tests/fuzz/ (README.md there): each target's
// LLVMFuzzerTestOneInput parses its bytes as one file format, the way the CLI does from
// the file's text to a validated value and what it runs right after, inside
// fuzz::expect_errors. An fsdptune::Error is the expected outcome of a bad file; anything
// else (another exception, a sanitizer report, an FSDPTUNE_CHECK abort, a
// fuzz::require failure) is a finding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fsdptune/error.hpp"
#include "fsdptune/job.hpp"
#include "fsdptune/model.hpp"
#include "fsdptune/report.hpp"
#include "fsdptune/workload.hpp"

namespace fsdptune::fuzz {

inline std::string text_of(const std::uint8_t* data, std::size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// Runs `body`; an fsdptune::Error is swallowed (the file was rejected, as it should be),
// any other exception escapes to libFuzzer (or the replay's main) as a finding. With
// FSDPTUNE_FUZZ_VERBOSE set in the environment, says why each input was rejected (to see
// how far a corpus gets).
template <typename Body>
int expect_errors(Body&& body) {
  static const bool verbose = std::getenv("FSDPTUNE_FUZZ_VERBOSE") != nullptr;
  try {
    body();
    if (verbose) std::fprintf(stderr, "accepted\n");
  } catch (const Error& error) {
    if (verbose) std::fprintf(stderr, "rejected: %s\n", error.what());
  }
  return 0;
}

// A property every accepted input must have (e.g. what was read writes back to the same
// value): aborts, as a finding, when it does not hold.
inline void require(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "fuzz property failed: %s\n", what);
  std::abort();
}

// Like require, for a step that must not throw even an fsdptune::Error once the input was
// accepted (reading back what was written).
template <typename Body>
void require_no_error(const char* what, Body&& body) {
  try {
    body();
  } catch (const Error& error) {
    std::fprintf(stderr, "fuzz property failed: %s: %s\n", what, error.what());
    std::abort();
  }
}

// What `fsdptune report` makes of `entries` (text, Markdown, HTML, the --json summary,
// which must read back).
inline void render_reports(const std::vector<ReportEntry>& entries) {
  (void)render_report_text(entries);
  (void)render_report_markdown(entries);
  (void)render_report_html(entries);
  const nlohmann::json report = report_to_json(summarize_report(entries));
  require_no_error("a report reads back as written",
                   [&] { (void)report_from_json(report, "report.json"); });
}

// The tiny model on 16 GPUs, 8 per node, tp 2: every kind of op and collective (groups
// inside a node and across nodes) in a few dozen tasks, cheap to lower and simulate.
inline const Workload& tiny_workload() {
  static const Workload workload = [] {
    const ModelSpec model = builtin_model("tiny");
    JobSpec job;
    job.gpus = 16;
    job.gpus_per_node = 8;
    job.tp = 2;
    job.seq_len = 256;
    return build_workload(model, normalize_job(model, job));
  }();
  return workload;
}

}  // namespace fsdptune::fuzz
