// The CPU loop end to end (issue: profiler): profile the tiny model on 2 cpu ranks ->
// tune on that profile and the host spec derived from it -> validate the schedule under
// mpirun -np 2 (with the data check) -> compare. Asserts that every step completes and
// that the files agree with each other (same model, job, hardware, profile hash and
// schedule hash; every file reads back to the same bytes). Prints the step-time error
// (recorded in docs/validation.md); it does not assert it: wall-clock times on a shared CI
// machine are not a test oracle (STYLE.md rule 9).
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "cli_support.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/measured.hpp"
#include "fsdptune/profile.hpp"
#include "fsdptune/schedule.hpp"

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
  const std::string profile_path = dir + "/profile.json";
  const std::string host_path = dir + "/cpu-host.json";
  const std::string schedule_path = dir + "/schedule.json";
  const std::string measured_path = dir + "/measured.json";

  step("profile", run_command(mpirun_two() + "profile --backend cpu " + job +
                              " --reps 3 --warmup 1 --sizes 1KiB:32MiB --out " + profile_path +
                              " --hardware-out " + host_path));
  const auto tuned = step(
      "tune", run_fsdptune("tune " + job + " --hardware " + host_path + " --profile " +
                           profile_path + " --max-evaluations 40 --seed 1 --out " + schedule_path));
  // Every cost measured: its throughput is no analytic upper bound (found by QA: said so).
  CHECK_THAT(tuned.out,
             Catch::Contains("0 from the analytic model") && !Catch::Contains("are upper bounds"));
  const std::string costs = " --hardware " + host_path + " --profile " + profile_path;
  CHECK_THAT(run_fsdptune("simulate " + job + costs).out,
             Catch::Contains("0 from the analytic model") && !Catch::Contains("are upper bounds"));
  // A pipeline's sends are priced by the analytic model (a profile measures no send/recv;
  // review): said there.
  CHECK_THAT(run_fsdptune("simulate " + job + costs + " --pp 2 --microbatches 2").out,
             Catch::Contains("are upper bounds"));
  const auto validated =
      step("validate",
           run_command(mpirun_two() + "validate " + schedule_path +
                       " --backend cpu --check-data --iters 3 --warmup 1 --out " + measured_path));
  CHECK_THAT(validated.out, Catch::Contains("data checked"));
  const auto compared =
      step("compare", run_fsdptune("compare " + schedule_path + " " + measured_path + " --json"));
  // Predicted on this host's costs: no note that the hardware differs.
  CHECK(compared.err.find("measured by the cpu backend") == std::string::npos);

  // Every file reads back, and writes back to the same bytes.
  const std::string profile_text = read_text_file(profile_path);
  const Profile profile =
      profile_from_json(parse_json_text(profile_text, profile_path), profile_path);
  CHECK(dump_json(profile_to_json(profile)) == profile_text);
  const std::string schedule_text = read_text_file(schedule_path);
  const ScheduleFile schedule =
      schedule_from_json(parse_json_text(schedule_text, schedule_path), schedule_path);
  const std::string measured_text = read_text_file(measured_path);
  const MeasuredResult measured =
      measured_from_json(parse_json_text(measured_text, measured_path), measured_path);
  CHECK(dump_json(measured_to_json(measured)) == measured_text);
  const json host = read_json_file(host_path);
  const json comparison = parse_json_text(compared.out, "compare --json");
  // Whatever order the streams took, the peak stays within the Program's any-timing peak.
  CHECK(comparison.at("peak_allocated_bytes").at("measured").get<double>() <=
        comparison.at("any_timing_peak_allocated_bytes").get<double>());

  // The schedule was tuned for this model and job, on this profile and this host's spec.
  CHECK(profile.hardware == "cpu");
  CHECK(profile.provenance.method == "cpu-steady-clock");
  CHECK_THAT(profile.provenance.command, Catch::Contains("--model tiny"));
  CHECK(host.at("id") == "cpu");
  CHECK(schedule.hardware.id == "cpu");
  CHECK(schedule.model.name == "tiny");
  CHECK(schedule.job.dp_shard == 2);
  CHECK(schedule.job.local_batch == 1);
  CHECK(schedule.job.seq_len == 128);
  CHECK(schedule.provenance.cost_source == profile_path);
  CHECK(schedule.provenance.cost_hash == fnv1a64_hex(profile_text));
  // The profile measured every cost of this job: its compute ops, the bucket copies (1 KiB
  // up to the whole model's fp32 gradients, under 32 MiB for tiny) and the collectives up
  // to 32 MiB (no bucket is larger): nothing falls back to the analytic model.
  CHECK(schedule.cost_queries > 0);
  CHECK(schedule.cost_fallbacks == 0);

  // The measurement replayed this schedule on 2 cpu ranks, with the data checked.
  const std::string hash = schedule_hash(schedule);
  CHECK(measured.schedule_hash == hash);
  CHECK(measured.backend == "cpu");
  CHECK(measured.world_size == 2);
  CHECK(measured.data_checked);
  CHECK(measured.iterations == 3);
  CHECK(measured.timings.size() == schedule.program.tasks.size());
  // Every rank's own view, for the skew between them (docs/validation.md).
  REQUIRE(measured.ranks.size() == 2);
  for (const RankMeasurement& rank : measured.ranks) {
    CHECK(rank.timings.size() == schedule.program.tasks.size());
    CHECK(rank.step_time_s <= measured.step_time_s * 1.5);  // own step vs max-over-ranks median
  }
  CHECK(comparison.at("schedule_hash") == hash);
  CHECK(comparison.at("world_size") == 2);

  const json& step_time = comparison.at("step_time_s");
  const double predicted_s = step_time.at("predicted").get<double>();
  const double measured_s = step_time.at("measured").get<double>();
  const double error = step_time.at("relative_error").get<double>();
  CHECK(predicted_s == Approx(schedule.predicted.step_time_s));
  CHECK(measured_s == Approx(measured.step_time_s));
  CHECK(std::isfinite(error));
  CHECK(error == Approx((predicted_s - measured_s) / measured_s).margin(1e-12));
  WARN("CPU loop (tiny, seq 128, 2 ranks): predicted step "
       << predicted_s * 1e3 << " ms, measured " << measured_s * 1e3 << " ms, error " << error * 100
       << " %; cost fallbacks " << schedule.cost_fallbacks << " of " << schedule.cost_queries);
}
