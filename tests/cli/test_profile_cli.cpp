// End-to-end: `fsdptune profile --backend cpu` under mpirun and as one process, the
// flag errors, `--backend cuda` without a GPU, and `fsdptune profile import-kineto`.
// The cpu runs use the tiny model with 64 tokens, 2 repetitions and a 5-point sweep:
// seconds, not minutes.
#include <catch2/catch.hpp>

#include <filesystem>

#include "cli_support.hpp"
#include "fsdptune/collector.hpp"
#include "fsdptune/hardware.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/profile.hpp"
#include "fsdptune/workload.hpp"

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

const std::string kTinyJob = "--model tiny --gpus 2 --gpus-per-node 2 --batch 1 --seq 64";

// The distinct compute ops `profile` must have measured for kTinyJob.
std::size_t tiny_distinct_ops() {
  const ModelSpec model = builtin_model("tiny");
  JobSpec job;
  job.gpus = 2;
  job.gpus_per_node = 2;
  job.local_batch = 1;
  job.seq_len = 64;
  return distinct_compute_ops(build_workload(model, normalize_job(model, job))).size();
}

}  // namespace

TEST_CASE("profile --backend cpu under mpirun writes a profile that loads back identically",
          "[cli][profile]") {
  const std::string dir = make_temp_dir("fsdptune-profile-cpu");
  const std::string out = dir + "/cpu.json";
  const std::string hardware_out = dir + "/cpu-hardware.json";
  const auto run = run_command(mpirun(2) + FSDPTUNE_BINARY + " profile --backend cpu " + kTinyJob +
                               " --reps 2 --warmup 1 --sizes 1KiB:16KiB --out " + out +
                               " --hardware-out " + hardware_out);
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  CHECK_THAT(run.out, Catch::Contains("wrote " + out));

  const std::string text = read_text_file(out);
  const Profile profile = profile_from_json(parse_json_text(text, out), out);
  // Loads back identically: the same bytes when written again.
  CHECK(dump_json(profile_to_json(profile)) == text);
  CHECK(profile.hardware == "cpu");
  CHECK(profile.provenance.method == "cpu-steady-clock");
  CHECK(profile.provenance.environment.at("ranks") == "2");
  CHECK_THAT(profile.provenance.command, Catch::Contains("profile --backend cpu"));
  REQUIRE(profile.compute.size() == tiny_distinct_ops());
  for (const auto& entry : profile.compute) CHECK(entry.samples_s.size() == 2);
  // all_gather, reduce_scatter, all_reduce over both ranks; 1, 2, 4, 8, 16 KiB.
  REQUIRE(profile.collectives.size() == 3);
  for (const auto& sweep : profile.collectives) {
    CHECK(sweep.group == CommGroup{2, 2});
    REQUIRE(sweep.points.size() == 5);
    CHECK(sweep.points.front().bytes == 1024);
    CHECK(sweep.points.back().bytes == 16 * 1024);
  }
  CHECK(profile.contention.compute_slowdown_with_comm >= 1.0);
  CHECK(profile.contention.comm_share_efficiency <= 1.0);
  CHECK(profile.contention.comm_share_efficiency > 0.0);

  const HardwareSpec spec = hardware_from_json(read_json_file(hardware_out), hardware_out);
  CHECK(spec.id == "cpu");
  CHECK(spec.peak_fp32_flops_per_s > 0);
  CHECK(spec.gpus_per_node == 2);
}

TEST_CASE("profile --backend cpu as one process measures compute only", "[cli][profile]") {
  const std::string dir = make_temp_dir("fsdptune-profile-one");
  const std::string out = dir + "/cpu.json";
  const auto run = run_fsdptune("profile --backend cpu " + kTinyJob +
                                " --reps 1 --warmup 0 --hardware my-laptop --out " + out);
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  CHECK_THAT(run.out, Catch::Contains("one rank"));
  const Profile profile = profile_from_json(read_json_file(out), out);
  CHECK(profile.hardware == "my-laptop");
  CHECK(profile.compute.size() == tiny_distinct_ops());
  CHECK(profile.collectives.empty());
  CHECK(profile.contention == ContentionFactors{});  // defaults, not measured
}

TEST_CASE("profile flag errors name the flag and exit 2", "[cli][profile]") {
  const std::string out = make_temp_dir("fsdptune-profile-bad") + "/p.json";
  struct Case {
    std::string flags;
    std::string named;
  };
  const std::vector<Case> cases = {
      {"--backend tpu " + kTinyJob + " --out " + out, "--backend"},
      {kTinyJob + " --out " + out, "--backend"},
      {"--backend cpu " + kTinyJob, "--out"},
      {"--backend cpu " + kTinyJob + " --reps 0 --out " + out, "--reps"},
      {"--backend cpu " + kTinyJob + " --warmup -1 --out " + out, "--warmup"},
      {"--backend cpu " + kTinyJob + " --sizes 3KiB:1MiB --out " + out, "--sizes"},
      {"--backend cpu " + kTinyJob + " --collectives all_to_all --out " + out, "--collectives"},
      {"--backend cuda " + kTinyJob + " --hardware-out x.json --out " + out, "--hardware-out"},
      {"--backend cpu --model no-such-model --out " + out, "no-such-model"},
  };
  for (const auto& c : cases) {
    const auto run = run_fsdptune("profile " + c.flags);
    INFO("profile " << c.flags << "\n" << run.err);
    CHECK(run.exit_code == 2);
    CHECK_THAT(run.err, Catch::Contains(c.named));
  }
  CHECK_FALSE(std::filesystem::exists(out));
}

TEST_CASE("profile --backend cuda without a GPU is a runtime error", "[cli][profile]") {
  const std::string out = make_temp_dir("fsdptune-profile-cuda") + "/p.json";
  const auto run = run_fsdptune("profile --backend cuda " + kTinyJob + " --out " + out);
  INFO(run.err);
  // Built without CUDA: "built without CUDA"; built with it on a machine without a GPU:
  // the CUDA runtime's error. Either way exit 1, a message, and no file.
  CHECK(run.exit_code == 1);
  CHECK_THAT(run.err, Catch::Contains("fsdptune: error:"));
  CHECK_FALSE(std::filesystem::exists(out));
}

TEST_CASE("profile import-kineto writes a profile from a trace", "[cli][profile]") {
  const std::string trace = std::string(FSDPTUNE_TEST_DATA) + "/kineto_fsdp_step.json";
  const std::string out = make_temp_dir("fsdptune-kineto") + "/trace-profile.json";
  const auto run = run_fsdptune("profile import-kineto " + trace + " --out " + out);
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  CHECK_THAT(run.out, Catch::Contains("4 GEMM call(s) into 3 compute entries"));
  CHECK_THAT(run.out, Catch::Contains("4 NCCL kernel(s) into 3 collective point(s)"));
  CHECK_THAT(run.out, Catch::Contains("skipped 4 kernel(s)"));
  const std::string text = read_text_file(out);
  const Profile profile = profile_from_json(parse_json_text(text, out), out);
  CHECK(dump_json(profile_to_json(profile)) == text);
  CHECK(profile.hardware == "h100-sxm");
  CHECK(profile.provenance.method == "kineto import");
  CHECK_THAT(profile.provenance.command, Catch::Contains("import-kineto"));

  // A file that is not a trace, and a trace that does not exist: exit 2, naming the file.
  const std::string not_a_trace = std::string(FSDPTUNE_SOURCE_DIR) + "/models/tiny.json";
  const auto bad = run_fsdptune("profile import-kineto " + not_a_trace + " --out " + out);
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("tiny.json"));
  const auto missing = run_fsdptune("profile import-kineto /no/such/trace.json --out " + out);
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.err, Catch::Contains("/no/such/trace.json"));
}
