// Runs the fsdptune executable built with the tests and captures what it did.
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

namespace fsdptune::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs `FSDPTUNE_BINARY <arguments>` through the shell (arguments are not re-quoted).
CommandResult run_fsdptune(const std::string& arguments);
// Runs any shell command line.
CommandResult run_command(const std::string& command_line);

// The prefix that starts `ranks` processes under MPI (as root, oversubscribed), e.g.
// mpirun(2) + FSDPTUNE_BINARY + " validate ...".
std::string mpirun(int ranks);

// How many times `what` occurs in `text` (overlaps counted): an error said once by every
// rank of a launch, or once in all.
std::size_t occurrences(const std::string& text, const std::string& what);

// A fresh empty directory under the system temp dir, unique per call; removed with its
// contents when the test program exits (unless FSDPTUNE_KEEP_TEST_FILES is set).
std::string make_temp_dir(const std::string& prefix);

// `tune --model tiny <job> --batch 1 --seq 128 --hardware h100-sxm --max-evaluations 20`
// written to `dir`/`name`.json (e.g. job "--gpus 2 --tp 2" or "--gpus 2 --pp 2
// --microbatches 4"); fails the test (REQUIRE) when tune does not succeed.
std::string tuned_tiny(const std::string& dir, const std::string& name, const std::string& job);

// Whether README.md's table of formats lists `output`'s `format` at its `version`: the row
// naming "`fsdptune-tune`" says "v1", the schedule's "v1, v2 (pipelined jobs)". Keeps the
// README true when a writer's version changes (it said compare --json v5 after v6 landed).
bool readme_lists_format(const nlohmann::json& output);

}  // namespace fsdptune::testing
