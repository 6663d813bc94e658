// The CPU loop end to end (issue: profiler): profile the tiny model on 2 cpu ranks ->
// tune on that profile and the host spec derived from it -> validate the schedule under
// mpirun -np 2 -> compare. Asserts that every step completes and that the files agree
// with each other; prints the step-time error (recorded in docs/validation.md). It does
// not assert the error: wall-clock times on a shared CI machine are not a test oracle.
#include <catch2/catch.hpp>

#include <cmath>

#include "cli_support.hpp"
#include "fsdptune/io.hpp"

using namespace fsdptune;
using namespace fsdptune::testing;
using nlohmann::json;

#ifndef FSDPTUNE_MPIEXEC
#define FSDPTUNE_MPIEXEC "mpirun"
#endif

namespace {

std::string mpirun_two() {
  return std::string(
             "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
             "OMPI_MCA_rmaps_base_oversubscribe=1 ") +
         FSDPTUNE_MPIEXEC + " --oversubscribe -np 2 " + FSDPTUNE_BINARY + " ";
}

CommandResult step(const std::string& name, const CommandResult& result) {
  INFO(name << " failed:\n" << result.out << result.err);
  REQUIRE(result.exit_code == 0);
  return result;
}

}  // namespace

TEST_CASE("CPU loop: profile -> tune --profile -> validate (mpirun -np 2) -> compare",
          "[cli][profile][e2e]") {
  const std::string dir = make_temp_dir("fsdptune-cpu-loop");
  const std::string job = "--model tiny --gpus 2 --gpus-per-node 2 --batch 1 --seq 128";
  const std::string profile = dir + "/profile.json";
  const std::string host = dir + "/cpu-host.json";
  const std::string schedule = dir + "/schedule.json";
  const std::string measured = dir + "/measured.json";

  step("profile", run_command(mpirun_two() + "profile --backend cpu " + job +
                              " --reps 5 --warmup 2 --sizes 1KiB:8MiB --out " + profile +
                              " --hardware-out " + host));
  step("tune", run_fsdptune("tune " + job + " --hardware " + host + " --profile " + profile +
                            " --max-evaluations 40 --seed 1 --out " + schedule));
  step("validate", run_command(mpirun_two() + "validate " + schedule +
                               " --backend cpu --iters 5 --warmup 2 --out " + measured));
  const auto compared =
      step("compare", run_fsdptune("compare " + schedule + " " + measured + " --json"));

  // The files agree: the schedule was tuned on this profile and this host's spec, the
  // measurement replayed this schedule on 2 cpu ranks.
  const json profile_json = read_json_file(profile);
  const json host_json = read_json_file(host);
  const json schedule_json = read_json_file(schedule);
  const json measured_json = read_json_file(measured);
  const json comparison = parse_json_text(compared.out, "compare --json");
  CHECK(profile_json.at("hardware") == "cpu");
  CHECK(host_json.at("id") == "cpu");
  CHECK(schedule_json.at("hardware").at("id") == "cpu");
  CHECK(schedule_json.at("provenance").at("cost_source") == profile);
  const auto cost_queries = schedule_json.at("cost_queries").get<std::int64_t>();
  const auto cost_fallbacks = schedule_json.at("cost_fallbacks").get<std::int64_t>();
  CHECK(cost_queries > 0);
  CHECK(cost_fallbacks < cost_queries);  // most costs came from the profile
  CHECK(measured_json.at("backend") == "cpu");
  CHECK(measured_json.at("world_size") == 2);
  CHECK(comparison.at("schedule_hash") == measured_json.at("schedule_hash"));
  CHECK(comparison.at("world_size") == 2);

  const json& step_time = comparison.at("step_time_s");
  const double predicted_s = step_time.at("predicted").get<double>();
  const double measured_s = step_time.at("measured").get<double>();
  const double error = step_time.at("relative_error").get<double>();
  CHECK(predicted_s > 0);
  CHECK(measured_s > 0);
  CHECK(std::isfinite(error));
  WARN("CPU loop (tiny, 2 ranks): predicted step "
       << predicted_s * 1e3 << " ms, measured " << measured_s * 1e3 << " ms, error " << error * 100
       << " %; cost fallbacks " << cost_fallbacks << " of " << cost_queries);
}
