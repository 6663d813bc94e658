// End-to-end: fsdptune validate under mpirun with the cpu backend, and fsdptune compare.
// Each mpirun runs the tiny model (4 blocks, dim 256) with batch 1 x 128 tokens for a few
// steps: seconds, not minutes.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "cli_support.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/measured.hpp"

using namespace fsdptune;
using namespace fsdptune::testing;

#ifndef FSDPTUNE_MPIEXEC
#define FSDPTUNE_MPIEXEC "mpirun"
#endif

namespace {

std::string mpirun(int ranks) {
  return std::string(
             "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
             "OMPI_MCA_rmaps_base_oversubscribe=1 ") +
         FSDPTUNE_MPIEXEC + " --oversubscribe -np " + std::to_string(ranks) + " ";
}

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
  CHECK_THAT(table.out, Catch::Contains("step time") && Catch::Contains("peak memory") &&
                            Catch::Contains("tasks differing most"));
  const auto json = run_fsdptune("compare " + tiny_schedule() + " " + measured_path + " --json");
  REQUIRE(json.exit_code == 0);
  const auto comparison = parse_json_text(json.out, "compare --json");
  CHECK(comparison.at("step_time_s").at("measured").get<double>() == measured.step_time_s);
  CHECK(comparison.at("tasks_differing_most").size() == 10);
}

TEST_CASE("validate rejects a world size that is not the schedule's", "[cli][validate]") {
  const std::string measured_path = make_temp_dir("fsdptune-validate") + "/measured.json";
  const auto run = run_command(mpirun(3) + binary() + " validate " + tiny_schedule() +
                               " --iters 1 --warmup 0 --out " + measured_path);
  CHECK(run.exit_code == 2);
  CHECK_THAT(run.err, Catch::Contains("job.dp_shard") &&
                          Catch::Contains("the schedule is for 2 ranks but 3 were started"));
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

TEST_CASE("validate aborts every rank when ranks hold different schedules", "[cli][validate]") {
  const std::string dir = make_temp_dir("fsdptune-validate");
  // The same plan, but a different prediction: a different file, so a different hash.
  auto json = read_json_file(tiny_schedule());
  json["predicted"]["step_time_s"] = json["predicted"]["step_time_s"].get<double>() * 2;
  const std::string other = dir + "/other.json";
  write_file_atomically(other, dump_json(json));
  // MPMD launch: rank 0 reads the tuned file, rank 1 the other one.
  const std::string m = " --iters 1 --warmup 0 --out " + dir + "/m.json";
  const auto run = run_command(mpirun(1) + binary() + " validate " + tiny_schedule() + m +
                               " : -np 1 " + binary() + " validate " + other + m);
  CHECK(run.exit_code == 2);
  CHECK_THAT(run.err, Catch::Contains("rank 1") && Catch::Contains("schedule hash") &&
                          Catch::Contains("differs from rank 0"));
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
}

TEST_CASE("validate aborts every rank when one stops responding", "[cli][validate]") {
  const std::string dir = make_temp_dir("fsdptune-validate");
  const auto run = run_command(mpirun(2) + binary() + " validate " + tiny_schedule() +
                               " --iters 1 --warmup 0 --timeout 1 --debug-stall-rank 1 --out " +
                               dir + "/m.json");
  CHECK(run.exit_code != 0);
  CHECK_THAT(run.err, Catch::Contains("no progress") && Catch::Contains("aborting every rank"));
  CHECK_FALSE(exists(dir + "/m.json"));
}

TEST_CASE("validate --backend cuda runs or fails cleanly without a GPU", "[cli][validate][cuda]") {
  const std::string dir = make_temp_dir("fsdptune-validate");
  const auto run =
      run_command(mpirun(2) + binary() + " validate " + tiny_schedule() +
                  " --backend cuda --iters 1 --warmup 0 --check-data --out " + dir + "/m.json");
  if (run.exit_code == 0) {
    CHECK(exists(dir + "/m.json"));
    return;
  }
  // No device here (or a CPU-only build): every rank stops with a clear error, no file.
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
  write_file_atomically(dir + "/m.json", "{\"format\": \"fsdptune-measured\", \"version\": 1}\n");
  run = run_fsdptune("compare " + tiny_schedule() + " " + dir + "/m.json");
  CHECK(run.exit_code == 2);
  CHECK_THAT(run.err, Catch::Contains("m.json: schedule_hash"));
}
