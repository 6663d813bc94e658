// End-to-end: fsdptune validate under mpirun with the cpu backend, and fsdptune compare.
// Each mpirun runs the tiny model (4 blocks, dim 256) with batch 1 x 128 tokens for a few
// steps: seconds, not minutes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

#include <sys/stat.h>

#include "cli_support.hpp"
#include "fsdptune/cost_model.hpp"
#include "fsdptune/hardware.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/measured.hpp"
#include "fsdptune/model.hpp"
#include "fsdptune/plans.hpp"
#include "fsdptune/schedule.hpp"
#include "fsdptune/simulator.hpp"
#include "fsdptune/tuner.hpp"
#include "fsdptune/units.hpp"

using namespace fsdptune;
using namespace fsdptune::testing;

namespace {

std::string binary() { return FSDPTUNE_BINARY; }

// A tuned schedule of the tiny model for 2 ranks, made once per test process.
const std::string& tiny_schedule() {
  static const std::string path = [] {
    const std::string dir = make_temp_dir("fsdptune-validate-schedule");
    const std::string out = dir + "/schedule.json";
    const auto result = run_fsdptune(
        "tune --model tiny --gpus 2 --gpus-per-node 2 --batch 1 --seq 128 --hardware h100-sxm "
        "--max-evaluations 40 --out " +
        out);
    INFO(result.err);
    REQUIRE(result.exit_code == 0);
    return out;
  }();
  return path;
}

bool exists(const std::string& path) { return std::filesystem::exists(path); }

// A schedule built here of `model` on h100-sxm running the plan `make_plan` gives its
// workload, with the prediction (step, timings, peaks) its Program simulates to, as readers
// require, within its memory limit.
ScheduleFile built_schedule(const std::string& model, const JobSpec& job,
                            Plan (*make_plan)(const Workload&)) {
  ScheduleFile schedule;
  schedule.model = builtin_model(model);
  schedule.hardware = builtin_hardware("h100-sxm");
  schedule.job = normalize_job(schedule.model, job);
  const Workload workload = build_workload(schedule.model, schedule.job);
  schedule.plan = make_plan(workload);
  schedule.program = lower(workload, schedule.plan, *make_analytic_cost_model(schedule.hardware));
  const SimResult result = simulate(schedule.program);
  schedule.memory_limit_bytes = result.peak_reserved_bytes;
  schedule.predicted = summarize_plan(schedule.plan.name, workload, schedule.hardware, result,
                                      schedule.memory_limit_bytes);
  schedule.timings = result.timings;
  return schedule;
}

// mpirun -np `ranks` validate --backend cpu --warmup 0 --check-data of `schedule`, plus
// `flags`, writing `out`.
CommandResult run_checked(const std::string& schedule, int ranks, const std::string& flags,
                          const std::string& out) {
  return run_command(mpirun(ranks) + binary() + " validate " + schedule +
                     " --backend cpu --warmup 0 --check-data " + flags + " --out " + out);
}

// Whatever order the replay's streams took, its peak stays within the most the Program can
// allocate at any timing (a schedule without a pipeline: compare --json names it).
void check_within_any_timing_peak(const nlohmann::json& comparison) {
  // A pipeline's comparison (its stages) has no bound; every other one has.
  const bool pipelined = !comparison.at("stages").empty();
  REQUIRE(comparison.contains("any_timing_peak_allocated_bytes") == !pipelined);
  if (pipelined) return;
  const auto bound = comparison.at("any_timing_peak_allocated_bytes").get<std::int64_t>();
  const auto peak = comparison.at("peak_allocated_bytes");
  CHECK(peak.at("measured").get<double>() <= static_cast<double>(bound));
  CHECK(peak.at("predicted").get<double>() <= static_cast<double>(bound));
}

// run_checked with 2 measured steps (plus `flags`); the measurement, which compare reads.
MeasuredResult validate_checked(const std::string& schedule, int ranks, const std::string& flags) {
  const std::string measured_path = schedule + ".measured.json";
  const auto run = run_checked(schedule, ranks, "--iters 2 " + flags, measured_path);
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  CHECK_THAT(run.out, Catch::Contains("data checked"));
  const MeasuredResult measured = measured_from_json(read_json_file(measured_path), measured_path);
  CHECK(measured.data_checked);
  CHECK(measured.world_size == ranks);
  const auto compared = run_fsdptune("compare " + schedule + " " + measured_path + " --json");
  INFO(compared.err);
  REQUIRE(compared.exit_code == 0);
  const nlohmann::json comparison = parse_json_text(compared.out, "compare --json");
  check_within_any_timing_peak(comparison);
  CHECK(fsdptune::testing::readme_lists_format(comparison));
  CHECK(fsdptune::testing::readme_lists_format(read_json_file(measured_path)));
  return measured;
}

// Index of the first reduce-scatter bucket of a schedule file.
int first_reduce_scatter_bucket(const std::string& schedule) {
  const auto buckets = read_json_file(schedule).at("program").at("buckets");
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    if (buckets[b].at("kind") == "reduce_scatter") return static_cast<int>(b);
  }
  FAIL("no reduce-scatter bucket in " << schedule);
  return -1;
}

// mpirun -np `ranks` validate --check-data with a corruption hook: every rank fails with
// the check's message (exit 1) and no measured file is written. stderr.
std::string validate_corrupted(const std::string& schedule, int ranks, const std::string& hook) {
  const std::string measured_path = schedule + ".corrupted.json";
  const auto run = run_checked(schedule, ranks, "--iters 1 " + hook, measured_path);
  INFO(run.out << run.err);
  CHECK(run.exit_code == 1);
  CHECK_THAT(run.err, Catch::Contains("--check-data"));
  CHECK_FALSE(exists(measured_path));
  return run.err;
}

}  // namespace

TEST_CASE("validate replays a tuned tiny schedule on 2 cpu ranks with --check-data",
          "[cli][validate]") {
  const std::string dir = make_temp_dir("fsdptune-validate");
  const std::string measured_path = dir + "/measured.json";
  const auto run =
      run_command(mpirun(2) + binary() + " validate " + tiny_schedule() +
                  " --backend cpu --iters 3 --warmup 1 --check-data --out " + measured_path);
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  CHECK_THAT(run.out, Catch::Contains("data checked"));
  const MeasuredResult measured = measured_from_json(read_json_file(measured_path), measured_path);
  CHECK(measured.backend == "cpu");
  CHECK(measured.world_size == 2);
  CHECK(measured.iterations == 3);
  CHECK(measured.step_times_s.size() == 3);
  CHECK(measured.data_checked);
  CHECK(measured.step_time_s > 0);
  CHECK(measured.peak_allocated_bytes > 0);
  const auto schedule = read_json_file(tiny_schedule());
  CHECK(measured.timings.size() == schedule.at("program").at("tasks").size());
  for (const auto& timing : measured.timings) {
    CHECK(timing.start_s >= 0);
    CHECK(timing.end_s <= measured.step_time_s * 10);
  }

  const auto table = run_fsdptune("compare " + tiny_schedule() + " " + measured_path);
  INFO(table.err);
  CHECK(table.exit_code == 0);
  CHECK_THAT(table.out,
             Catch::Contains("step time") && Catch::Contains("peak memory") &&
                 Catch::Contains("tasks differing most") &&
                 Catch::Contains("compute by rank (its compute tasks' medians summed): median"));
  // An H100's prediction against the cpu backend: said (found by QA).
  CHECK_THAT(table.err, Catch::Contains(": measured by the cpu backend, predicted for h100-sxm: "
                                        "its time errors compare this host with that GPU"));
  const auto json = run_fsdptune("compare " + tiny_schedule() + " " + measured_path + " --json");
  REQUIRE(json.exit_code == 0);
  const auto comparison = parse_json_text(json.out, "compare --json");
  CHECK(comparison.at("step_time_s").at("measured").get<double>() == measured.step_time_s);
  CHECK(comparison.at("tasks_differing_most").size() == 10);
  // Each rank's compute, from its own timings.
  REQUIRE(comparison.at("rank_compute_s").size() == 2);
  for (const auto& seconds : comparison.at("rank_compute_s")) CHECK(seconds.get<double>() > 0);
  REQUIRE(comparison.contains("any_timing_peak_allocated_bytes"));
  check_within_any_timing_peak(comparison);
  CHECK_THAT(table.out, Catch::Contains("any timing") && Catch::Contains("within"));
  // The measured file where the schedule goes: the order is said (found by QA: the hint
  // asked whether it was a schedule written by tune).
  for (const std::string& command : {"compare " + measured_path + " " + tiny_schedule(),
                                     "report " + tiny_schedule() + " " + measured_path}) {
    const auto swapped = run_fsdptune(command);
    CHECK(swapped.exit_code == 2);
    CHECK_THAT(swapped.err, Catch::Contains("measured.json: format") &&
                                Catch::Contains("this is a measured file (validate --out)") &&
                                Catch::Contains("fsdptune report SCHEDULE --measured MEASURED"));
  }
  // More ranks on the host than it has hardware threads: said by compare and report (found
  // by QA: an 8-rank replay on 2 threads compared at -87%, unsaid).
  auto crowded = read_json_file(measured_path);
  crowded["environment"]["ranks_per_node"] = "8";
  crowded["environment"]["hardware_threads"] = "2";
  const std::string crowded_path = dir + "/crowded.json";
  write_file_atomically(crowded_path, dump_json(crowded));
  for (const std::string& command : {"compare " + tiny_schedule() + " " + crowded_path,
                                     "report " + tiny_schedule() + " --measured " + crowded_path}) {
    const auto noted = run_fsdptune(command);
    CHECK(noted.exit_code == 0);
    CHECK(occurrences(noted.err,
                      "8 ranks on a host of 2 hardware threads: the ranks' compute "
                      "threads took turns on its cores") == 1);
  }
  if (std::thread::hardware_concurrency() >= 2) {  // 2 ranks here: none
    CHECK(table.err.find("hardware threads") == std::string::npos);
  }
  // Also where no measured file goes: the same words fit (review: "takes the schedule
  // first" read oddly under simulate --plan).
  CHECK_THAT(run_fsdptune("simulate --plan " + measured_path).err,
             Catch::Contains("not a schedule: compare and report take it after the schedule"));
}

TEST_CASE("validate --out /dev/stdout under mpirun: the pipe holds the measured file alone",
          "[cli][validate]") {
  // Found by QA: under mpirun each rank's stdout is a pseudo-terminal mpirun forwards into
  // the pipe, and the report followed the measured file there (`| jq`: parse error).
  const auto run = run_command("{ " + mpirun(2) + binary() + " validate " + tiny_schedule() +
                               " --backend cpu --iters 1 --warmup 0 --out /dev/stdout | cat; }");
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  const auto measured = parse_json_text(run.out, "validate --out /dev/stdout");
  CHECK(measured.at("format") == "fsdptune-measured");
  CHECK_THAT(run.err, Catch::Contains("validated") && Catch::Contains("wrote /dev/stdout"));
}

TEST_CASE("validate with full AC: the measured peak stays within the any-timing peak",
          "[cli][validate]") {
  // On the CPU the reduce-scatters run long beside the recomputes, so a bucket's gradients
  // can still be in flight when the next backward allocates its own: measured 47.2-48.6 MiB
  // against 45.7 predicted at H100 timing (docs/validation.md "Peak memory at any
  // timing"), never above the 48.6 MiB the Program can reach at all.
  const std::string dir = make_temp_dir("fsdptune-validate");
  const std::string schedule = tuned_tiny(dir, "acfull", "--gpus 2 --gpus-per-node 2 --ac full");
  const auto json = parse_json_text(run_fsdptune("simulate --plan " + schedule + " --json").out,
                                    "simulate --json");
  const auto bound = json.at("any_timing_peak_allocated_bytes").get<std::int64_t>();
  CHECK(bound > json.at("peak_allocated_bytes").get<std::int64_t>());
  for (int run = 0; run < 2; ++run) {
    const MeasuredResult measured = validate_checked(schedule, 2, "");
    CHECK(measured.peak_allocated_bytes <= bound);
  }
}

TEST_CASE("validate rejects a world size that is not the schedule's", "[cli][validate]") {
  const std::string measured_path = make_temp_dir("fsdptune-validate") + "/measured.json";
  const auto run = run_command(mpirun(3) + binary() + " validate " + tiny_schedule() +
                               " --iters 1 --warmup 0 --out " + measured_path);
  CHECK(run.exit_code == 2);
  CHECK_THAT(run.err, Catch::Contains("job.dp_shard") &&
                          Catch::Contains("the schedule is for 2 ranks but 3 were started"));
  // Printed once, by rank 0 (found probing: once per rank, the hint too).
  std::size_t printed = 0;
  for (std::size_t at = run.err.find("fsdptune: error:"); at != std::string::npos;
       at = run.err.find("fsdptune: error:", at + 1)) {
    ++printed;
  }
  CHECK(printed == 1);
  CHECK_FALSE(exists(measured_path));
}

TEST_CASE("validate rejects a corrupted schedule with the file and field", "[cli][validate]") {
  const std::string dir = make_temp_dir("fsdptune-validate");
  const std::string text = read_text_file(tiny_schedule());
  const std::string truncated = dir + "/truncated.json";
  write_file_atomically(truncated, text.substr(0, text.size() / 2));
  auto run =
      run_command(mpirun(2) + binary() + " validate " + truncated + " --out " + dir + "/m.json");
  CHECK(run.exit_code == 2);
  CHECK_THAT(run.err, Catch::Contains("truncated.json"));

  auto json = read_json_file(tiny_schedule());
  json["program"]["tasks"][0]["stream"] = 99;
  const std::string bad_stream = dir + "/bad-stream.json";
  write_file_atomically(bad_stream, dump_json(json));
  run = run_command(mpirun(2) + binary() + " validate " + bad_stream + " --out " + dir + "/m.json");
  CHECK(run.exit_code == 2);
  CHECK_THAT(run.err, Catch::Contains("bad-stream.json"));
  CHECK_FALSE(exists(dir + "/m.json"));
}

// Found probing the CLI: a schedule whose buffers exceed the host died in std::bad_alloc (or,
// with overcommit, would swap or be killed mid-step); the cpu backend's memory is the host's.
TEST_CASE("validate --backend cpu refuses a schedule whose peak exceeds the host's memory",
          "[cli][validate]") {
  // Llama 3 70B on 2 ranks: about 600 GB per rank (its predicted peaks are its Program's,
  // as every reader checks; an edited 512 TiB is refused before this check).
  const std::string dir = make_temp_dir("fsdptune-validate");
  JobSpec job;
  job.gpus = 2;
  job.gpus_per_node = 2;
  job.seq_len = 128;
  const ScheduleFile schedule = built_schedule("llama3-70b", job, fsdp2_plan);
  REQUIRE(schedule.predicted.peak_allocated_bytes > (std::int64_t{1} << 39));
  const std::string huge = dir + "/huge.json";
  write_file_atomically(huge, dump_json(schedule_to_json(schedule)));
  const auto run = run_command(mpirun(2) + binary() + " validate " + huge +
                               " --iters 1 --warmup 0 --out " + dir + "/m.json");
  CHECK(run.exit_code == 1);
  CHECK_THAT(run.err, Catch::Contains("huge.json: predicted.peak_allocated_bytes") &&
                          Catch::Contains("2 ranks on this host at a predicted peak of " +
                                          format_bytes(schedule.predicted.peak_allocated_bytes)));
  CHECK_FALSE(exists(dir + "/m.json"));
}

// Found probing the CLI: the measured file replaced the schedule it replayed.
TEST_CASE("validate refuses --out naming the schedule", "[cli][validate]") {
  const std::string copy = make_temp_dir("fsdptune-validate") + "/schedule.json";
  const std::string text = read_text_file(tiny_schedule());
  write_file_atomically(copy, text);
  const auto run = run_command(mpirun(2) + binary() + " validate " + copy +
                               " --iters 1 --warmup 0 --out " + copy);
  CHECK(run.exit_code == 2);
  CHECK_THAT(run.err, Catch::Contains("--out " + copy) &&
                          Catch::Contains("is the file of the schedule too"));
  CHECK(read_text_file(copy) == text);
}

TEST_CASE("validate aborts every rank when ranks hold different schedules", "[cli][validate]") {
  const std::string dir = make_temp_dir("fsdptune-validate");
  // The same plan, but another search seed: a different file, so a different hash.
  auto json = read_json_file(tiny_schedule());
  json["provenance"]["seed"] = json["provenance"]["seed"].get<std::uint64_t>() + 1;
  const std::string other = dir + "/other.json";
  write_file_atomically(other, dump_json(json));
  // MPMD launch: rank 0 reads the tuned file, rank 1 the other one.
  const std::string m = " --iters 1 --warmup 0 --out " + dir + "/m.json";
  const auto run = run_command(mpirun(1) + binary() + " validate " + tiny_schedule() + m +
                               " : -np 1 " + binary() + " validate " + other + m);
  CHECK(run.exit_code == 2);
  // Each rank's file named.
  CHECK_THAT(run.err, Catch::Contains("rank 1: " + other + ": schedule hash") &&
                          Catch::Contains("differs from rank 0's") &&
                          Catch::Contains("(" + tiny_schedule() + ")"));
  CHECK_FALSE(exists(dir + "/m.json"));
  // The same schedule with other flags on rank 1 (found probing the CLI: --check-data on
  // one rank died in MPI_Allreduce with MPI_ERR_TRUNCATE, other --iters hung until the
  // watchdog).
  const auto flags =
      run_command(mpirun(1) + binary() + " validate " + tiny_schedule() + m + " : -np 1 " +
                  binary() + " validate " + tiny_schedule() + m + " --check-data");
  CHECK(flags.exit_code == 2);
  CHECK_THAT(flags.err, Catch::Contains("rank 1") && Catch::Contains("validate flags") &&
                            Catch::Contains("--check-data") &&
                            Catch::Contains("differ from rank 0's"));
  CHECK_FALSE(exists(dir + "/m.json"));
  // Another job's schedule on rank 1, which the world would refuse by itself: the ranks'
  // files differ, and that is what they are told (found by QA: a larger job's host memory
  // was the error).
  const std::string four = tuned_tiny(dir, "four", "--gpus 4");
  const auto job = run_command(mpirun(1) + binary() + " validate " + tiny_schedule() + m +
                               " : -np 1 " + binary() + " validate " + four + m);
  CHECK(job.exit_code == 2);
  CHECK_THAT(job.err, Catch::Contains("rank 1: " + four + ": schedule hash"));
  CHECK_THAT(job.err, !Catch::Contains("dp_shard"));
  CHECK_FALSE(exists(dir + "/m.json"));
}

TEST_CASE("validate --check-data names the bucket and parameter of a corrupted buffer",
          "[cli][validate]") {
  const std::string dir = make_temp_dir("fsdptune-validate");
  const auto run = run_command(mpirun(2) + binary() + " validate " + tiny_schedule() +
                               " --iters 1 --warmup 0 --check-data --debug-corrupt-bucket 0 "
                               "--out " +
                               dir + "/m.json");
  CHECK(run.exit_code == 1);
  CHECK_THAT(run.err, Catch::Contains("--check-data") && Catch::Contains("bucket 0") &&
                          Catch::Contains("parameter") && Catch::Contains("expected"));
  CHECK_FALSE(exists(dir + "/m.json"));
  // A hook naming no bucket, or without the check, is refused (found probing: it corrupted
  // nothing and the run passed "data checked").
  for (const std::string& hook :
       {std::string(" --check-data --debug-corrupt-bucket 99"),
        std::string(" --debug-corrupt-bucket 0"), std::string(" --debug-stall-rank 5")}) {
    INFO(hook);
    const auto refused = run_command(mpirun(2) + binary() + " validate " + tiny_schedule() +
                                     " --iters 1 --warmup 0" + hook + " --out " + dir + "/m.json");
    CHECK(refused.exit_code == 2);
    CHECK_THAT(refused.err, Catch::Contains(hook.substr(hook.rfind(" --") + 1,
                                                        hook.rfind(' ') - hook.rfind(" --") - 1)));
    CHECK_FALSE(exists(dir + "/m.json"));
  }
  // A message hook on a schedule that sends none (found by QA: "(0 to -1)").
  const auto no_messages = run_command(
      mpirun(2) + binary() + " validate " + tiny_schedule() +
      " --iters 1 --warmup 0 --check-data --debug-corrupt-message 0 --out " + dir + "/m.json");
  CHECK(no_messages.exit_code == 2);
  CHECK_THAT(no_messages.err, Catch::Contains("--debug-corrupt-message: the last rank sends no "
                                              "pipeline message to corrupt"));
}

TEST_CASE("validate aborts every rank when one stops responding", "[cli][validate]") {
  const std::string dir = make_temp_dir("fsdptune-validate");
  const auto run = run_command(mpirun(2) + binary() + " validate " + tiny_schedule() +
                               " --iters 1 --warmup 0 --timeout 1 --debug-stall-rank 1 --out " +
                               dir + "/m.json");
  CHECK(run.exit_code != 0);
  CHECK_THAT(run.err, Catch::Contains("no progress") && Catch::Contains("aborting every rank"));
  CHECK_FALSE(exists(dir + "/m.json"));
  // A rank that hangs before the replay, opening its schedule (a FIFO no one writes, as a
  // hung file system): found by QA, every rank waited in the first agreement forever.
  const std::string fifo = dir + "/fifo.json";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const std::string m = " --iters 1 --warmup 0 --timeout 1 --out " + dir + "/m.json";
  const auto hung = run_command(mpirun(1) + binary() + " validate " + tiny_schedule() + m +
                                " : -np 1 " + binary() + " validate " + fifo + m);
  CHECK(hung.exit_code != 0);
  CHECK_THAT(hung.err, Catch::Contains("no progress") &&
                           (Catch::Contains("while reading the schedule") ||
                            Catch::Contains("while waiting for every rank to read its schedule")));
  CHECK_FALSE(exists(dir + "/m.json"));
}

TEST_CASE("validate --backend cuda runs or fails cleanly without a GPU", "[cli][validate][cuda]") {
  const std::string dir = make_temp_dir("fsdptune-validate");
  // One rank holding both shards (--scale-down), so that a machine with one GPU runs it (two
  // ranks would need two GPUs).
  const auto run = run_command(mpirun(1) + binary() + " validate " + tiny_schedule() +
                               " --backend cuda --iters 1 --warmup 0 --check-data --scale-down "
                               "--out " +
                               dir + "/m.json");
  if (run.exit_code == 0) {
    CHECK(exists(dir + "/m.json"));
    return;
  }
  // No device here (or a CPU-only build): the rank stops with a clear error, no file.
  CHECK(run.exit_code == 1);
  CHECK_THAT(run.err, Catch::Contains("no CUDA device") || Catch::Contains("built without CUDA"));
  CHECK_FALSE(exists(dir + "/m.json"));
  WARN("skipped: no GPU (the cuda backend reported: no device)");
}

TEST_CASE("validate and compare reject bad flags and files", "[cli][validate]") {
  const std::string dir = make_temp_dir("fsdptune-validate");
  auto run = run_fsdptune("validate " + tiny_schedule() + " --iters 0 --out " + dir + "/m.json");
  CHECK(run.exit_code == 2);
  CHECK_THAT(run.err, Catch::Contains("--iters"));
  run = run_fsdptune("validate " + tiny_schedule() + " --backend tpu --out " + dir + "/m.json");
  CHECK(run.exit_code == 2);
  CHECK_THAT(run.err, Catch::Contains("--backend"));
  run =
      run_fsdptune("validate " + tiny_schedule() + " --attention cublas --out " + dir + "/m.json");
  CHECK(run.exit_code == 2);
  CHECK_THAT(run.err, Catch::Contains("--attention: the cpu backend has one attention (Eigen)"));
  run = run_fsdptune("validate " + tiny_schedule() + " --backend cuda --attention flash --out " +
                     dir + "/m.json");
  CHECK(run.exit_code == 2);
  CHECK_THAT(run.err, Catch::Contains("--attention: unknown attention 'flash'"));
  // Under mpirun each rank finds the same error of its command line: said once, by the
  // first rank (found by QA: once per rank), for a flag's value and a mistyped flag alike.
  run = run_command(mpirun(3) + binary() + " validate " + tiny_schedule() + " --iters 0 --out " +
                    dir + "/m.json");
  CHECK(run.exit_code != 0);
  CHECK(occurrences(run.err, "--iters: must be 1 to") == 1);
  run = run_command(mpirun(3) + binary() + " validate " + tiny_schedule() + " --itres 3 --out " +
                    dir + "/m.json");
  CHECK(run.exit_code != 0);
  CHECK(occurrences(run.err, "validate has no option --itres") == 1);
  CHECK_FALSE(std::filesystem::exists(dir + "/m.json"));
  // So is an --out each rank finds unwritable (found by QA: once per rank).
  run = run_command(mpirun(3) + binary() + " validate " + tiny_schedule() + " --out " +
                    tiny_schedule());
  CHECK(run.exit_code != 0);
  CHECK(occurrences(run.err, "would overwrite that input") == 1);
  // A later rank's own error, which the first rank does not share (an MPMD launch), is said
  // too: after its grace, by that rank (found by QA: said by no rank).
  run = run_command(mpirun(2) + binary() + " validate " + tiny_schedule() +
                    " --backend cpu --iters 1 --warmup 0 --out " + dir + "/m.json : -np 1 " +
                    binary() + " validate " + tiny_schedule() +
                    " --backend cpu --iters 1 --warmup 0 --out " + dir + "/m.json --chek-data");
  CHECK(run.exit_code != 0);
  CHECK(occurrences(run.err, "validate has no option --chek-data") == 1);
  CHECK_THAT(run.err, Catch::Contains("fsdptune: error: rank 2: validate has no option"));
  CHECK_FALSE(std::filesystem::exists(dir + "/m.json"));
  // Which process is a later rank: the launcher's own variable first, Slurm's task id only
  // in an srun step; other commands always say their errors at once (found by review). A
  // later rank that is not stopped says its error after the grace.
  const std::string bad_iters =
      binary() + " validate " + tiny_schedule() + " --iters 0 --out " + dir + "/m.json";
  for (const auto& [environment, later] : std::vector<std::pair<std::string, bool>>{
           {"env -u SLURM_STEP_ID PMI_RANK=1", true},
           {"env -u SLURM_STEP_ID OMPI_COMM_WORLD_RANK=0 SLURM_PROCID=2", false},
           {"env -u SLURM_STEP_ID SLURM_PROCID=1", false},  // a batch script's shell
           {"env SLURM_STEP_ID=0 SLURM_PROCID=1", true}}) {
    INFO(environment);
    const std::string unset =
        "env -u OMPI_COMM_WORLD_RANK -u PMIX_RANK -u PMI_RANK -u "
        "SLURM_PROCID " +
        environment + " ";
    run = run_command(unset + bad_iters);
    CHECK(run.exit_code == 2);
    CHECK(occurrences(run.err, "--iters: must be 1 to") == 1);
    // A later rank names itself (after its grace, kLaterRankGraceSeconds).
    CHECK((run.err.find("error: rank ") != std::string::npos) == later);
  }
  run = run_command("env PMI_RANK=1 " + binary() + " sweep --model tiny --gpus 8 --thread 2");
  CHECK(run.exit_code == 2);
  CHECK_THAT(run.err, Catch::Contains("--thread"));
  // A file each rank sees on its own node is said by a later rank too (after its grace).
  write_file_atomically(dir + "/file", "");
  run = run_command("env PMI_RANK=1 " + binary() + " validate " + tiny_schedule() + " --out " +
                    dir + "/file/m.json");
  CHECK(run.exit_code == 2);
  CHECK_THAT(run.err, Catch::Contains("error: rank 1: --out"));
  write_file_atomically(dir + "/m.json", "{\"format\": \"fsdptune-measured\", \"version\": 1}\n");
  run = run_fsdptune("compare " + tiny_schedule() + " " + dir + "/m.json");
  CHECK(run.exit_code == 2);
  CHECK_THAT(run.err, Catch::Contains("m.json: schedule_hash"));
}

TEST_CASE("validate --scale-down replays a dp_shard 8 schedule on 2 ranks with --check-data",
          "[cli][validate]") {
  const std::string dir = make_temp_dir("fsdptune-validate");
  const std::string schedule = tuned_tiny(dir, "dp8", "--gpus 8 --gpus-per-node 8");
  // Without the flag the world size is refused, and the hint names the flag.
  const auto refused = run_command(mpirun(2) + binary() + " validate " + schedule +
                                   " --iters 1 --warmup 0 --out " + dir + "/m.json");
  CHECK(refused.exit_code == 2);
  CHECK_THAT(refused.err, Catch::Contains("job.dp_shard") && Catch::Contains("--scale-down"));
  CHECK_FALSE(exists(dir + "/m.json"));

  const MeasuredResult measured = validate_checked(schedule, 2, "--scale-down");
  CHECK(measured.dp_shard == 2);
  CHECK(measured.shards_per_rank == 4);
  CHECK_THAT(measured.environment.at("command"), Catch::Contains("--scale-down"));
  const auto table = run_fsdptune("compare " + schedule + " " + schedule + ".measured.json");
  CHECK(table.exit_code == 0);
  CHECK_THAT(table.out, Catch::Contains("scaled down: dp_shard 2 of the schedule's 8") &&
                            Catch::Contains("compute tasks differing most"));
}

TEST_CASE("compare marks the communication of a replay on another node layout", "[cli][validate]") {
  // Found by QA: a schedule of nodes of 2 GPUs replayed with 4 ranks on one host compared
  // its communication as usual. Here a schedule of 2 nodes of 1 GPU, on one host.
  const std::string dir = make_temp_dir("fsdptune-validate");
  const std::string schedule = tuned_tiny(dir, "two-nodes", "--gpus 2 --gpus-per-node 1");
  const MeasuredResult measured = validate_checked(schedule, 2, "");
  CHECK(measured.environment.at("ranks_per_node") == "2");
  const std::string measured_path = schedule + ".measured.json";
  const auto table = run_fsdptune("compare " + schedule + " " + measured_path);
  REQUIRE(table.exit_code == 0);
  CHECK_THAT(table.out, Catch::Contains("node layout: 2 ranks per node, the schedule's job 1 "
                                        "(--gpus-per-node)") &&
                            Catch::Contains("exposed comm (*)") && !Catch::Contains("scaled down"));
  const auto json = nlohmann::json::parse(
      run_fsdptune("compare " + schedule + " " + measured_path + " --json").out);
  CHECK(json.at("node_layout") == "2 ranks per node, the schedule's job 1");
  CHECK(json.at("communication_comparable") == false);
  // report --measured, as compare: its heading says so and it ranks compute tasks only
  // (found by review: it compared the communication as usual).
  const auto report = run_fsdptune("report " + schedule + " --measured " + measured_path);
  REQUIRE(report.exit_code == 0);
  CHECK_THAT(report.out, Catch::Contains("node layout: 2 ranks per node, the schedule's job 1: "
                                         "step time and communication are not the prediction's"));
  const auto summary = nlohmann::json::parse(
      run_fsdptune("report " + schedule + " --measured " + measured_path + " --json").out);
  const std::string summary_text = summary.dump();
  CHECK(summary_text.find("\"node_layout\":\"2 ranks per node, the schedule's job 1\"") !=
        std::string::npos);
  // The same layout as the job's (nodes of 2): comparable, no node_layout.
  const std::string same = tuned_tiny(dir, "one-node", "--gpus 2 --gpus-per-node 2");
  validate_checked(same, 2, "");
  const auto agreed = nlohmann::json::parse(
      run_fsdptune("compare " + same + " " + same + ".measured.json --json").out);
  CHECK_FALSE(agreed.contains("node_layout"));
  CHECK(agreed.at("communication_comparable") == true);
}

TEST_CASE("validate replays HSDP (2 replicas x 1 shard) with the replica all-reduce checked",
          "[cli][validate]") {
  const std::string dir = make_temp_dir("fsdptune-validate");
  const MeasuredResult measured = validate_checked(
      tuned_tiny(dir, "hsdp", "--gpus 2 --gpus-per-node 2 --dp-replicate 2"), 2, "");
  CHECK(measured.dp_replicate == 2);
  CHECK(measured.dp_shard == 1);
}

TEST_CASE("validate replays tensor parallelism (tp 2) with its activation collectives",
          "[cli][validate]") {
  const std::string dir = make_temp_dir("fsdptune-validate");
  const MeasuredResult measured =
      validate_checked(tuned_tiny(dir, "tp2", "--gpus 2 --gpus-per-node 2 --tp 2"), 2, "");
  CHECK(measured.tp == 2);
  CHECK(measured.dp_shard == 1);
  // The TP collectives ran on scratch buffers: counted with the kernel workspace.
  CHECK(std::stoll(measured.environment.at("kernel_workspace_bytes")) > 0);
}

TEST_CASE("validate replays float8 all-gathers (fp8 on the wire) exactly with --check-data",
          "[cli][validate]") {
  const std::string dir = make_temp_dir("fsdptune-validate");
  // float8 with HSDP scaled down: 2 replicas x dp_shard 2 of the schedule on 2 ranks.
  const MeasuredResult measured = validate_checked(
      tuned_tiny(dir, "fp8", "--gpus 4 --gpus-per-node 4 --dp-replicate 2 --float8"), 2,
      "--scale-down");
  CHECK(measured.dp_replicate == 2);
  CHECK(measured.shards_per_rank == 2);
  // float8 with TP 2: the sequence-parallel all-gathers in fp8 and the amax all-reduces
  // (fp32) before each cast of a TP-sharded tensor, checked like the other TP collectives.
  const MeasuredResult tp = validate_checked(
      tuned_tiny(dir, "fp8-tp2", "--gpus 2 --gpus-per-node 2 --tp 2 --float8"), 2, "");
  CHECK(tp.tp == 2);
}

TEST_CASE("validate --check-data checks the accumulated fp32 gradient shards", "[cli][validate]") {
  // Plain FSDP, fp32 reduce: the reduced shards pass; one element of the fp32 gradient
  // shard they were accumulated into, overwritten on the last rank, is caught.
  const int bucket = first_reduce_scatter_bucket(tiny_schedule());
  const std::string err = validate_corrupted(
      tiny_schedule(), 2, "--debug-corrupt-gradient-shard " + std::to_string(bucket));
  CHECK_THAT(err, Catch::Contains("rank 1: --check-data: bucket " + std::to_string(bucket) +
                                  " (reduce_scatter") &&
                      Catch::Contains("accumulated fp32 gradient shard of parameter") &&
                      Catch::Contains("got 1000"));
  // A hook that corrupts nothing the checks read fails the run (found by QA: an all-gather
  // bucket's gradient shard, a TP collective of a job without TP: "data checked").
  for (const std::string hook :
       {"--debug-corrupt-gradient-shard 0", "--debug-corrupt-tp-collective 0"}) {
    INFO(hook);
    REQUIRE(bucket != 0);  // bucket 0 is an all-gather bucket
    CHECK_THAT(validate_corrupted(tiny_schedule(), 2, hook),
               Catch::Contains("rank 1: --check-data: the test hook " + hook +
                               " corrupted nothing the checks read on the last rank"));
  }
}

TEST_CASE("validate --check-data checks the TP collectives' outputs", "[cli][validate]") {
  const std::string dir = make_temp_dir("fsdptune-validate");
  const std::string schedule = tuned_tiny(dir, "tp2", "--gpus 2 --gpus-per-node 2 --tp 2");
  // The first TP collective of the step (the embedding's sequence-parallel reduce-scatter),
  // corrupted on the last rank after it completed.
  const std::string err = validate_corrupted(schedule, 2, "--debug-corrupt-tp-collective 0");
  CHECK_THAT(err, Catch::Contains("rank 1: --check-data: task ") && Catch::Contains(" op ") &&
                      Catch::Contains(": TP ") && Catch::Contains("output element 0") &&
                      Catch::Contains("got 1000"));
}

TEST_CASE("validate --check-data on a 4-rank mesh: tp 2 x 2 replicas, bf16 reduce",
          "[cli][validate]") {
  // HSDP and TP together: the replica groups {0, 2} and {1, 3} cross the TP groups {0, 1}
  // and {2, 3}; bf16 gradients sum exactly (integers below 256).
  const std::string dir = make_temp_dir("fsdptune-validate");
  const MeasuredResult measured = validate_checked(
      tuned_tiny(dir, "mesh4",
                 "--gpus 4 --gpus-per-node 4 --tp 2 --dp-replicate 2 --reduce-dtype bf16"),
      4, "");
  CHECK(measured.dp_replicate == 2);
  CHECK(measured.tp == 2);
  CHECK(measured.dp_shard == 1);
}

TEST_CASE("validate --check-data on a 4-rank mesh: tp 2 x 2 shards", "[cli][validate]") {
  // The shard groups {0, 2} and {1, 3} cross the TP groups {0, 1} and {2, 3}.
  const std::string dir = make_temp_dir("fsdptune-validate");
  const MeasuredResult measured =
      validate_checked(tuned_tiny(dir, "tp2-shard2", "--gpus 4 --gpus-per-node 4 --tp 2"), 4, "");
  CHECK(measured.dp_shard == 2);
  CHECK(measured.tp == 2);
}

TEST_CASE("validate --check-data: HSDP without copy tasks accumulates the all-reduced shard",
          "[cli][validate]") {
  // simplefsdp-none (copy_in_out = false): the executor copies out inside the collective
  // task, and with HSDP only after the all-reduce, so the fp32 gradient shards hold the
  // sum over both replicas (bf16 gradients). 2 replicas x dp_shard 2, scaled down to 2 ranks.
  JobSpec job;
  job.gpus = 4;
  job.gpus_per_node = 4;
  job.dp_replicate = 2;
  job.local_batch = 1;
  job.seq_len = 128;
  job.reduce_dtype = DType::kBF16;
  const ScheduleFile schedule = built_schedule("tiny", job, simplefsdp_none_plan);
  REQUIRE_FALSE(schedule.plan.copy_in_out);
  const std::string path = make_temp_dir("fsdptune-validate") + "/none-hsdp.json";
  write_file_atomically(path, dump_json(schedule_to_json(schedule)));
  const MeasuredResult measured = validate_checked(path, 2, "--scale-down");
  CHECK(measured.dp_replicate == 2);
  CHECK(measured.shards_per_rank == 2);
}

TEST_CASE("validate --check-data on a 4-rank mesh: cp 2 x tp 2", "[cli][validate][cp]") {
  // Context parallelism inside the shard group: the CP groups {0, 2} and {1, 3} (tp apart)
  // all-gather K and V and reduce-scatter their gradients, crossing the TP groups {0, 1}
  // and {2, 3}; the FSDP shard group is the same 2 ranks.
  const std::string dir = make_temp_dir("fsdptune-validate");
  const MeasuredResult measured = validate_checked(
      tuned_tiny(dir, "cp2-tp2", "--gpus 4 --gpus-per-node 4 --tp 2 --cp 2"), 4, "");
  CHECK(measured.cp == 2);
  CHECK(measured.tp == 2);
  CHECK(measured.dp_shard == 2);
  const std::string schedule = dir + "/cp2-tp2.json";
  const auto compared =
      run_fsdptune("compare " + schedule + " " + schedule + ".measured.json --json");
  REQUIRE(compared.exit_code == 0);
  CHECK(parse_json_text(compared.out, "compare --json").at("mesh").at("cp") == 2);
}

TEST_CASE("validate --check-data checks the CP collectives, and --scale-down keeps whole CP groups",
          "[cli][validate][cp]") {
  const std::string dir = make_temp_dir("fsdptune-validate");
  const std::string cp2 = tuned_tiny(dir, "cp2", "--gpus 2 --gpus-per-node 2 --cp 2");
  // The first compute-path collective of the step is layers.0's K/V all-gather.
  const std::string err = validate_corrupted(cp2, 2, "--debug-corrupt-tp-collective 0");
  CHECK_THAT(err, Catch::Contains("layers.0.attention.cp_all_gather") &&
                      Catch::Contains(": CP all_gather") && Catch::Contains("(CP rank 1)") &&
                      Catch::Contains("got 1000"));
  // dp_shard 8 with cp 2 on 2 ranks: one CP group, 4 shards per rank.
  const std::string cp2_8 = tuned_tiny(dir, "cp2-8", "--gpus 8 --cp 2");
  const MeasuredResult measured = validate_checked(cp2_8, 2, "--scale-down");
  CHECK(measured.cp == 2);
  CHECK(measured.shards_per_rank == 4);
  // cp 4 needs 4 ranks of a shard group at least: 2 do not hold one CP group.
  const std::string cp4 = tuned_tiny(dir, "cp4", "--gpus 8 --cp 4");
  const CommandResult result = run_checked(cp4, 2, "--scale-down", dir + "/never.json");
  CHECK(result.exit_code == 2);
  CHECK_THAT(result.err,
             Catch::Contains("keeps dp_replicate, cp and tp") && Catch::Contains("start 4 or 8"));
}

TEST_CASE("validate replays async TP's chunks and the CP gather beside the compute",
          "[cli][validate][tp][cp]") {
  // The timed steps run each sequence-parallel collective in tp chunks beside its GEMM's
  // parts and the CP K/V gather beside the attention's first part (op_steps; the checked
  // step runs them whole and checks them); --serial-collectives runs them in op order.
  const std::string dir = make_temp_dir("fsdptune-validate");
  const std::string async_tp =
      tuned_tiny(dir, "async-tp", "--gpus 4 --gpus-per-node 4 --tp 2 --cp 2 --async-tp");
  for (const std::string flags : {"", "--serial-collectives"}) {
    CAPTURE(flags);
    const MeasuredResult measured = validate_checked(async_tp, 4, flags);
    CHECK(measured.tp == 2);
    CHECK(measured.cp == 2);
    CHECK(measured.step_time_s > 0);
    const bool serial =
        measured.environment.at("command").find("--serial-collectives") != std::string::npos;
    CHECK(serial == !flags.empty());
    CHECK(measured.environment.at("compute_collectives") == (serial ? "serial" : "overlapped"));
    // compare says which collectives the measurement holds whole.
    const std::string measured_path = async_tp + ".measured.json";
    const auto text = run_fsdptune("compare " + async_tp + " " + measured_path);
    REQUIRE(text.exit_code == 0);
    const auto json = run_fsdptune("compare " + async_tp + " " + measured_path + " --json");
    REQUIRE(json.exit_code == 0);
    const nlohmann::json comparison = parse_json_text(json.out, "compare --json");
    if (serial) {
      CHECK_THAT(text.out, Catch::Contains("replayed with --serial-collectives: the compute "
                                           "tasks' CP and async TP collectives ran in op order"));
      CHECK(comparison.at("serial_collectives") == "CP and async TP");
    } else {
      CHECK_THAT(text.out, !Catch::Contains("--serial-collectives"));
      CHECK_FALSE(comparison.contains("serial_collectives"));
      // Without the key, a replay from before it, which ran them serially (QA, 2026-12-05:
      // read as overlapped); another value is refused naming the key.
      nlohmann::json edited = read_json_file(measured_path);
      edited["environment"].erase("compute_collectives");
      std::ofstream(dir + "/old.json") << dump_json(edited);
      const auto old = run_fsdptune("compare " + async_tp + " " + dir + "/old.json --json");
      REQUIRE(old.exit_code == 0);
      CHECK(parse_json_text(old.out, "compare --json").at("serial_collectives") ==
            "CP and async TP");
      edited["environment"]["compute_collectives"] = "sideways";
      std::ofstream(dir + "/bogus.json") << dump_json(edited);
      const auto bogus = run_fsdptune("compare " + async_tp + " " + dir + "/bogus.json");
      CHECK(bogus.exit_code == 2);
      CHECK_THAT(bogus.err, Catch::Contains("bogus.json: environment.compute_collectives: is "
                                            "'sideways', expected overlapped or serial"));
    }
    CHECK_FALSE(comparison.contains("overlaps_not_replayed"));
  }
  // cp 3 over tiny's 8 heads (batch 1): the attention does not split in 3, so its K/V
  // gathers and gradient passes run whole, and the measurement and compare say so.
  const std::string cp3 = dir + "/cp3.json";
  REQUIRE(run_fsdptune("tune --model tiny --gpus 3 --gpus-per-node 3 --cp 3 --batch 1 --seq 192 "
                       "--hardware h100-sxm --max-evaluations 10 --out " +
                       cp3)
              .exit_code == 0);
  const MeasuredResult whole = validate_checked(cp3, 3, "");
  // Forward gather, backward gather and gradient pass of each of the 4 blocks.
  CHECK(whole.environment.at("overlaps_not_replayed") ==
        "12 compute-task collectives, the first layers.0.attention.cp_all_gather");
  const auto text = run_fsdptune("compare " + cp3 + " " + cp3 + ".measured.json");
  CHECK_THAT(text.out, Catch::Contains("overlaps not replayed (12 compute-task collectives"));
  // cp 4 over 2 heads: each part is 2 heads over half the sequence (a quarter of the
  // work), so every overlap is replayed.
  ModelSpec two_heads = builtin_model("tiny");
  two_heads.name = "tiny-2-heads";
  two_heads.n_heads = 2;
  two_heads.n_kv_heads = 1;
  two_heads.head_dim = 128;
  const std::string model = dir + "/tiny-2-heads.json";
  write_file_atomically(model, dump_json(model_to_json(two_heads)));
  const std::string cp4 = dir + "/cp4.json";
  REQUIRE(run_fsdptune("tune --model " + model +
                       " --gpus 4 --gpus-per-node 4 --cp 4 --batch 1 --seq 256 --hardware "
                       "h100-sxm --max-evaluations 10 --out " +
                       cp4)
              .exit_code == 0);
  const MeasuredResult shorter = validate_checked(cp4, 4, "");
  CHECK(shorter.environment.count("overlaps_not_replayed") == 0);
  CHECK(shorter.environment.at("compute_collectives") == "overlapped");
}
