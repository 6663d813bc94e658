// Runs the fsdptune executable built with the tests and captures what it did.
#pragma once

#include <string>

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

// A fresh empty directory under the system temp dir, unique per call; removed with its
// contents when the test program exits (unless FSDPTUNE_KEEP_TEST_FILES is set).
std::string make_temp_dir(const std::string& prefix);

}  // namespace fsdptune::testing
