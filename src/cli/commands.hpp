// The `fsdptune` subcommands. Each area registers its own in its own file; main.cpp
// calls every register_* in a fixed order. Handlers throw fsdptune::Error; main maps
// it to the exit code.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "fsdptune/error.hpp"
#include "fsdptune/measured.hpp"
#include "fsdptune/program.hpp"
#include "fsdptune/schedule.hpp"

namespace fsdptune::cli {

// A validator of a whole-number option held in an int: refuses a value outside [low, high]
// before CLI11 converts it ("must be 1 to 1024, got 3000000000"; `low_text` in place of
// `low` where it says more: "0 (every core ...)"). A value beyond an int was "out of range
// for this option", its range unsaid (found by QA). Other values are check_option_values'.
CLI::Validator int_range(std::int64_t low, std::int64_t high, const std::string& low_text = "");

// A GPU's prediction replayed on CPUs (the README's loop does it to check the data and the
// memory): a note on stderr that its time errors say nothing of the model (found by QA:
// compare's, then report's, -99% unexplained). Nothing for another backend or a spec file's
// hardware (a profile of this host).
void note_cpu_replay(const ScheduleFile& schedule, const MeasuredResult& measured,
                     const std::string& measured_path);

// Registered subcommands (one line per area; keep the order of the README).
void register_model_commands(CLI::App& app);     // model, workload (model_commands.cpp)
void register_cost_commands(CLI::App& app);      // cost (cost_commands.cpp)
void register_profile_commands(CLI::App& app);   // profile ... (profile_commands.cpp)
void register_sim_commands(CLI::App& app);       // simulate (sim_commands.cpp)
void register_tune_commands(CLI::App& app);      // tune (tune_commands.cpp)
void register_validate_commands(CLI::App& app);  // validate, compare (validate_commands.cpp)
void register_report_commands(CLI::App& app);    // report (report_commands.cpp)
void register_sweep_commands(CLI::App& app);     // sweep, pipeline (sweep_commands.cpp)

// Runs `read`, which reads the file `path` given to `flag`: an error about the file as a
// whole (no such file, a folder, too large) or at a line and column of its text names the
// flag too ("--hardware spec.json: no such file", "--hardware spec.json:3:1: malformed
// JSON"; they named only the file). Errors about a field name the file and field.
template <typename Read>
auto read_flag_file(const char* flag, const std::string& path, Read&& read) -> decltype(read()) {
  try {
    return read();
  } catch (const Error& e) {
    const std::string& where = e.where();
    const bool at_line = where.size() > path.size() + 1 && where.starts_with(path) &&
                         where[path.size()] == ':' && where[path.size() + 1] >= '0' &&
                         where[path.size() + 1] <= '9';
    if (where != path && !at_line) throw;
    throw Error(e.kind(), fmt::format("{} {}", flag, where), e.message(), e.hint());
  }
}

// The any-timing peaks of a schedule's Program (include/fsdptune/memory_bound.hpp) for the
// text outputs of simulate and tune: "any timing         48.6 MiB allocated, 62.0 MiB
// reserved at most: compute in ...", a line of what that state holds by category and,
// when the reserved one passes `limit_bytes`, a line saying so (and whether the allocated
// one does too, or the predicted peak already: `fits_as_predicted` false).
std::string any_timing_text(const Program& program, std::int64_t limit_bytes,
                            bool fits_as_predicted = true);

// A plan's backward all-gather bucket count for simulate's and tune's plan lines, with how
// many gather anything where some do not (gathering_backward_buckets, plan.hpp): "34 (33
// gathering)"; `explained` adds why the others gather nothing, as tune says it.
std::string backward_buckets_text(const Plan& plan, bool explained);

// The rank a launcher (mpirun, srun) started this process as, where it is not the first:
// the first of OMPI_COMM_WORLD_RANK, PMIX_RANK and PMI_RANK that is set, else SLURM_PROCID
// within an srun step (SLURM_STEP_ID set), when not "0"; "" otherwise. An error of
// validate's command line, the same on every rank, is said by the first rank, the others
// waiting (below) and then naming their rank.
std::string later_launched_rank();

// A later rank's error of validate's command line is said after kLaterRankGraceSeconds:
// mpirun stops the job when the first rank exits with the same error (said once), and a
// rank whose error the first rank does not share (an MPMD launch), or a launcher that
// leaves the other ranks running (srun without --kill-on-bad-exit), still says it (found by
// QA: a later rank exiting silently at once got the first killed before it spoke, and the
// job's only output was mpirun's).
constexpr int kLaterRankGraceSeconds = 5;
void wait_as_a_later_rank();

// `text` ("fsdptune: error: ...") as later rank `rank` says it: "fsdptune: error: rank 2:
// ...".
std::string said_by_rank(const std::string& text, const std::string& rank);

// Runs `check` of what every rank of a launch finds alike (the command line, its files):
// its error is said by the first rank, a later rank's after the grace, naming its rank.
void said_once(const std::function<void()>& check);

}  // namespace fsdptune::cli
