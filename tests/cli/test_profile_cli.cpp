// End-to-end: `fsdptune profile --backend cpu` under mpirun and as one process, the
// flag errors, `--backend cuda` without a GPU, and `fsdptune profile import-kineto`.
// The cpu runs use the tiny model with 64 tokens, 2 repetitions and a 5-point sweep:
// seconds, not minutes.
#include <catch2/catch.hpp>

#include <filesystem>

#include <fmt/format.h>

#include "cli_support.hpp"
#include "fsdptune/collector.hpp"
#include "fsdptune/hardware.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/profile.hpp"
#include "fsdptune/units.hpp"
#include "fsdptune/workload.hpp"

using namespace fsdptune;
using namespace fsdptune::testing;

namespace {

const std::string kTinyJob = "--model tiny --gpus 2 --gpus-per-node 2 --batch 1 --seq 64";

// The ops `profile` must have measured for kTinyJob: the distinct compute ops and the bucket
// copies (the cpu collector caps copies at 256 MiB; tiny's whole gradients are far below).
std::size_t tiny_distinct_ops() {
  const ModelSpec model = builtin_model("tiny");
  JobSpec job;
  job.gpus = 2;
  job.gpus_per_node = 2;
  job.local_batch = 1;
  job.seq_len = 64;
  return ops_to_measure(build_workload(model, normalize_job(model, job)), 256 * kMiB).size();
}

}  // namespace

TEST_CASE("profile under mpirun says an error every rank finds once", "[cli][profile]") {
  // Found by QA: each rank said it (validate said it once).
  const std::string dir = make_temp_dir("fsdptune-profile-once");
  const std::string command = mpirun(2) + FSDPTUNE_BINARY + " profile --backend cpu " + kTinyJob +
                              " --reps 2 --warmup 1 --sizes 1KiB:16KiB --out " + dir + "/p.json";
  // Its files: the same path for both outputs.
  CommandResult run = run_command(command + " --hardware-out " + dir + "/./p.json");
  CHECK(run.exit_code != 0);
  CHECK(occurrences(run.err, "is the file of --out too") == 1);
  // A flag's value (read by the job's checks) and a mistyped flag.
  run = run_command(command + " --seq 0");
  CHECK(run.exit_code != 0);
  CHECK(occurrences(run.err, "--seq") == 1);
  run = run_command(command + " --rpes 2");
  CHECK(run.exit_code != 0);
  CHECK(occurrences(run.err, "profile has no option --rpes") == 1);
  CHECK_FALSE(std::filesystem::exists(dir + "/p.json"));
}

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
  // Compute ops keep every rank's samples: 2 reps x 2 ranks.
  for (const auto& entry : profile.compute) CHECK(entry.samples_s.size() == 4);
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
  // A reduce-scatter beside the largest GEMM, against alone: the factor (at least 1), and
  // the two times in the provenance.
  CHECK(profile.contention.comm_slowdown_with_compute >= 1.0);
  CHECK(profile.contention.comm_slowdown_with_compute <= kMaxCommSlowdownWithCompute);
  CHECK_THAT(profile.provenance.environment.at("comm_beside_compute"),
             Catch::Contains(" alone, ") && Catch::Contains("comm_slowdown_with_compute"));
  CHECK(profile.contention.copy_slowdown_with_compute >= 1.0);
  CHECK(profile.contention.compute_slowdown_with_copy >= 1.0);
  CHECK_THAT(profile.provenance.environment.at("copy_beside_compute"),
             Catch::Contains(" copy ") && Catch::Contains("beside the bf16 GEMM"));
  CHECK_THAT(run.out, Catch::Contains("comm slowdown with compute"));

  const HardwareSpec spec = hardware_from_json(read_json_file(hardware_out), hardware_out);
  CHECK(spec.id == "cpu");
  CHECK(spec.peak_fp32_flops_per_s > 0);
  CHECK(spec.gpus_per_node == 2);
}

TEST_CASE("profile --backend cpu as one process measures compute only", "[cli][profile]") {
  const std::string dir = make_temp_dir("fsdptune-profile-one");
  const std::string out = dir + "/cpu.json";
  const std::string hardware_out = dir + "/cpu-hardware.json";
  const auto run = run_fsdptune("profile --backend cpu " + kTinyJob +
                                " --reps 1 --warmup 0 --hardware my-laptop --out " + out +
                                " --hardware-out " + hardware_out);
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  CHECK_THAT(run.out, Catch::Contains("one rank"));
  // No all-gather swept: the spec's collective figures are assumed, and both say so (they
  // were printed as measured).
  CHECK_THAT(run.out, Catch::Contains("not measured: no all-gather was swept (one rank)"));
  // Two ranks that sweep no all-gather say why (found by QA: "(one rank)" on 2 ranks).
  const auto reduce_only =
      run_command(mpirun(2) + FSDPTUNE_BINARY + " profile --backend cpu " + kTinyJob +
                  " --reps 1 --warmup 0 --sizes 1KiB:2KiB --collectives reduce_scatter --out " +
                  dir + "/rs.json --hardware-out " + dir + "/rs-hardware.json");
  INFO(reduce_only.out << reduce_only.err);
  REQUIRE(reduce_only.exit_code == 0);
  CHECK_THAT(reduce_only.out,
             Catch::Contains("not measured: no all-gather was swept (--collectives)"));
  CHECK_THAT(hardware_from_json(read_json_file(hardware_out), hardware_out).name,
             Catch::EndsWith("collectives not measured (assumed)"));
  const Profile profile = profile_from_json(read_json_file(out), out);
  CHECK(profile.hardware == "my-laptop");
  CHECK(profile.compute.size() == tiny_distinct_ops());
  CHECK(profile.collectives.empty());
  // The collective factors need a second rank: defaults. Copies beside compute need none:
  // the largest bucket copy and the largest GEMM, each alone and beside the other.
  ContentionFactors collective_factors = profile.contention;
  collective_factors.copy_slowdown_with_compute = 1;
  collective_factors.compute_slowdown_with_copy = 1;
  CHECK(collective_factors == ContentionFactors{});
  CHECK(profile.contention.copy_slowdown_with_compute >= 1.0);
  CHECK(profile.contention.copy_slowdown_with_compute <= kMaxCopySlowdown);
  CHECK(profile.contention.compute_slowdown_with_copy >= 1.0);
  CHECK(profile.contention.compute_slowdown_with_copy <= kMaxCopySlowdown);
  CHECK_THAT(profile.provenance.environment.at("copy_beside_compute"),
             Catch::Contains(" alone, ") && Catch::Contains("copy_slowdown_with_compute") &&
                 Catch::Contains("compute_slowdown_with_copy"));
  CHECK_THAT(run.out, Catch::Contains("copies beside compute: copy slowdown"));

  // --no-contention: nothing measured beside anything, the factors stay at the defaults.
  const auto plain =
      run_fsdptune("profile --backend cpu " + kTinyJob +
                   " --reps 1 --warmup 0 --no-contention --out " + dir + "/plain.json");
  INFO(plain.out << plain.err);
  REQUIRE(plain.exit_code == 0);
  const Profile unmeasured = profile_from_json(read_json_file(dir + "/plain.json"), "plain.json");
  CHECK(unmeasured.contention == ContentionFactors{});
  CHECK(unmeasured.provenance.environment.at("copy_beside_compute") ==
        "not measured (--no-contention)");
}

TEST_CASE("profile flag errors name the flag and exit 2", "[cli][profile]") {
  const std::string out = make_temp_dir("fsdptune-profile-bad") + "/p.json";
  struct Case {
    std::string flags;
    std::string named;
  };
  const std::vector<Case> cases = {
      // A word that is none of profile's commands: they are named.
      {"bogus", "(the commands of profile: import-nccl-tests, import-kineto, merge, compare)"},
      {"--backend tpu " + kTinyJob + " --out " + out, "--backend"},
      {kTinyJob + " --out " + out, "--backend"},
      {"--backend cpu " + kTinyJob, "--out"},
      {"--backend cpu " + kTinyJob + " --reps 0 --out " + out, "--reps"},
      {"--backend cpu " + kTinyJob + " --warmup -1 --out " + out, "--warmup"},
      {"--backend cpu " + kTinyJob + " --sizes 3KiB:1MiB --out " + out, "--sizes"},
      // The kinds a profile sweeps (found by QA: send_recv was listed, then refused).
      {"--backend cpu " + kTinyJob + " --collectives all_to_all --out " + out,
       "--collectives: unknown collective 'all_to_all' (expected all_gather, reduce_scatter or "
       "all_reduce)"},
      {"--backend cpu " + kTinyJob + " --collectives send_recv --out " + out,
       "--collectives: send_recv is not swept"},
      {"--backend cuda " + kTinyJob + " --hardware-out x.json --out " + out, "--hardware-out"},
      {"--backend cpu " + kTinyJob + " --attention cudnn --out " + out,
       "--attention: the cpu backend has one attention (Eigen), not cudnn"},
      {"--backend cuda " + kTinyJob + " --attention flash --out " + out,
       "--attention: unknown attention 'flash'"},
      {"--backend cpu --model no-such-model --out " + out, "no-such-model"},
      // 0 was the "not given" value, read as the ranks sharing this host (exit 0).
      {"--backend cpu " + kTinyJob + " --ranks-per-node 0 --out " + out,
       "--ranks-per-node: must be at least 1, got 0"},
      {"--backend cpu " + kTinyJob + " --timeout 0.01 --out " + out,
       "--timeout: must be a finite number of seconds >= 0.1, got 0.01"},
  };
  for (const auto& c : cases) {
    const auto run = run_fsdptune("profile " + c.flags);
    INFO("profile " << c.flags << "\n" << run.err);
    CHECK(run.exit_code == 2);
    CHECK_THAT(run.err, Catch::Contains(c.named));
  }
  CHECK_FALSE(std::filesystem::exists(out));
  // A size whose MPI count does not fit an int (a 4 GiB shard as bytes) was passed wrapped:
  // refused under mpirun before anything is measured or allocated.
  const auto huge = run_command(mpirun(2) + FSDPTUNE_BINARY + " profile --backend cpu " + kTinyJob +
                                " --sizes 8GiB --out " + out);
  INFO(huge.err);
  CHECK(huge.exit_code != 0);
  CHECK_THAT(huge.err, Catch::Contains("--sizes: all_gather of 8.00 GiB over 2 ranks"));
  CHECK_THAT(huge.err, Catch::Contains("more than an int count takes (2147483647)"));
  CHECK_FALSE(std::filesystem::exists(out));
}

// Found by QA: a rank that stopped responding left the others waiting forever.
TEST_CASE("profile --backend cpu aborts every rank when one stops responding", "[cli][profile]") {
  const std::string out = make_temp_dir("fsdptune-profile-stall") + "/p.json";
  const auto run = run_command(mpirun(2) + FSDPTUNE_BINARY + " profile --backend cpu " + kTinyJob +
                               " --reps 1 --warmup 0 --sizes 1KiB --no-contention --timeout 1 "
                               "--debug-stall-rank 1 --out " +
                               out);
  CHECK(run.exit_code != 0);
  CHECK_THAT(run.err, Catch::Contains("rank 0: no progress for") &&
                          Catch::Contains("(--timeout 1 s): a rank stopped responding") &&
                          Catch::Contains("aborting every rank"));
  CHECK_FALSE(std::filesystem::exists(out));
}

TEST_CASE("profile --backend cuda without a GPU is a runtime error", "[cli][profile]") {
  const std::string out = make_temp_dir("fsdptune-profile-cuda") + "/p.json";
  const auto run = run_fsdptune("profile --backend cuda " + kTinyJob + " --out " + out);
  INFO(run.err);
  // Built without CUDA: "built without CUDA"; built with it on a machine without a GPU:
  // no device visible (with the CUDA runtime's reason) and what to do. Either way exit 1,
  // the flag named, and no file.
  CHECK(run.exit_code == 1);
  CHECK_THAT(run.err, Catch::Contains("fsdptune: error: --backend cuda: "));
  CHECK_THAT(run.err, Catch::Contains("built without CUDA") ||
                          Catch::Contains("hint: run it where a GPU is, or profile this "
                                          "machine with --backend cpu"));
  CHECK_FALSE(std::filesystem::exists(out));
}

TEST_CASE("profile import-kineto writes a profile from a trace", "[cli][profile]") {
  const std::string trace = std::string(FSDPTUNE_TEST_DATA) + "/kineto_fsdp_step.json";
  const std::string out = make_temp_dir("fsdptune-kineto") + "/trace-profile.json";
  const auto run = run_fsdptune("profile import-kineto " + trace + " --out " + out);
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  CHECK_THAT(run.out, Catch::Contains("4 GEMM, 1 attention and 0 memory-bound op calls into 4 "
                                      "compute entries"));
  CHECK_THAT(run.out, Catch::Contains("4 NCCL kernels into 3 collective points"));
  CHECK_THAT(run.out, Catch::Contains("skipped 3 kernels"));
  const std::string text = read_text_file(out);
  CHECK(fsdptune::testing::readme_lists_format(parse_json_text(text, out)));
  const Profile profile = profile_from_json(parse_json_text(text, out), out);
  CHECK(dump_json(profile_to_json(profile)) == text);
  CHECK(profile.hardware == "h100-sxm");
  CHECK(profile.provenance.method == "kineto import");
  // As "fsdptune ...", whatever path started the binary (found probing the CLI: the path made
  // two imports of one trace differ).
  CHECK_THAT(profile.provenance.command, Catch::StartsWith("fsdptune profile import-kineto "));

  // A file that is not a trace, and a trace that does not exist: exit 2, naming the file.
  const std::string not_a_trace = std::string(FSDPTUNE_SOURCE_DIR) + "/models/tiny.json";
  const auto bad = run_fsdptune("profile import-kineto " + not_a_trace + " --out " + out);
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("tiny.json"));
  const auto missing = run_fsdptune("profile import-kineto /no/such/trace.json --out " + out);
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.err, Catch::Contains("/no/such/trace.json"));

  // Found probing the CLI: --hardware FILE recorded the path as the hardware id (no reader
  // could use the profile), and a trace with no kernel wrote an empty profile.
  nlohmann::json spec =
      read_json_file(std::string(FSDPTUNE_SOURCE_DIR) + "/profiles/h100-sxm.json");
  spec["id"] = "my-h100";
  const std::string spec_path = make_temp_dir("fsdptune-kineto") + "/my-h100.json";
  write_file_atomically(spec_path, spec.dump());
  const auto with_file =
      run_fsdptune("profile import-kineto " + trace + " --hardware " + spec_path + " --out " + out);
  REQUIRE(with_file.exit_code == 0);
  CHECK(profile_from_json(read_json_file(out), out).hardware == "my-h100");
  // The flag wins over the trace's device, said on stderr (found by QA: without a word);
  // nothing said where they agree.
  CHECK_THAT(with_file.err, Catch::Contains("note: --hardware: recorded as my-h100, the input "
                                            "names 'NVIDIA H100 80GB HBM3' (h100-sxm)"));
  const auto agreeing =
      run_fsdptune("profile import-kineto " + trace + " --hardware h100-sxm --out " + out + ".2");
  REQUIRE(agreeing.exit_code == 0);
  CHECK_THAT(agreeing.err, !Catch::Contains("note: --hardware"));
  const auto priced =
      run_fsdptune("cost --profile " + out + " --hardware " + spec_path + " --gemm 8192,4096,4096");
  INFO(priced.err);
  CHECK(priced.exit_code == 0);
  const std::string empty = make_temp_dir("fsdptune-kineto") + "/empty-trace.json";
  write_file_atomically(empty, R"({"traceEvents": []})");
  const std::string untouched = read_text_file(out);
  const auto nothing =
      run_fsdptune("profile import-kineto " + empty + " --hardware h100-sxm --out " + out);
  CHECK(nothing.exit_code == 2);
  CHECK_THAT(nothing.err, Catch::Contains("empty-trace.json"));
  CHECK_THAT(nothing.err, Catch::Contains("no GEMM, attention, memory-bound or NCCL kernel"));
  CHECK(read_text_file(out) == untouched);
}

TEST_CASE("profile merge: a Kineto compute import + nccl-tests sweeps, overlap rules",
          "[cli][profile][merge]") {
  const std::string data = FSDPTUNE_TEST_DATA;
  const std::string dir = make_temp_dir("fsdptune-merge");
  const std::string kineto = dir + "/kineto.json";
  const std::string nccl = dir + "/nccl.json";
  const std::string merged = dir + "/merged.json";
  REQUIRE(run_fsdptune("profile import-kineto " + data + "/kineto_fsdp_step.json --out " + kineto)
              .exit_code == 0);
  REQUIRE(run_fsdptune("profile import-nccl-tests " + data +
                       "/nccl-tests/all_gather_perf_h100x8.log " + data +
                       "/nccl-tests/reduce_scatter_perf_h100x8.log --out " + nccl)
              .exit_code == 0);

  // Both have an all-gather and a reduce-scatter sweep over 8 ranks of one node: refused by
  // default, naming the second file and the first.
  const auto refused = run_fsdptune("profile merge " + kineto + " " + nccl + " --out " + merged);
  CHECK(refused.exit_code == 2);
  CHECK_THAT(refused.err, Catch::Contains(nccl + ": collectives[0]") && Catch::Contains(kineto) &&
                              Catch::Contains("--prefer"));
  CHECK_FALSE(std::filesystem::exists(merged));

  // --prefer last: the trace's GEMMs and all-reduce, nccl-tests' all-gather and
  // reduce-scatter sweeps.
  const auto run =
      run_fsdptune("profile merge " + kineto + " " + nccl + " --prefer last --out " + merged);
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  CHECK_THAT(run.out, Catch::Contains("merged 2 profiles (hardware h100-sxm)"));
  CHECK_THAT(run.out, Catch::Contains("kept " + nccl + " (collectives[0]), dropped " + kineto));
  const std::string text = read_text_file(merged);
  const Profile profile = profile_from_json(parse_json_text(text, merged), merged);
  CHECK(dump_json(profile_to_json(profile)) == text);  // loads back identically
  const Profile from_kineto = profile_from_json(read_json_file(kineto), kineto);
  const Profile from_nccl = profile_from_json(read_json_file(nccl), nccl);
  REQUIRE(profile.parts.size() == 2);
  CHECK(profile.parts[0].source == kineto);
  CHECK(profile.parts[0].provenance == from_kineto.provenance);
  CHECK(profile.parts[1].source == nccl);
  CHECK(profile.parts[1].provenance.method == "nccl-tests import");
  CHECK(profile.compute.size() == from_kineto.compute.size());
  REQUIRE(profile.collectives.size() == 3);
  for (const auto& sweep : profile.collectives) {
    CHECK(sweep.part == (sweep.kind == CollectiveKind::kAllReduce ? 0 : 1));
  }
  CHECK(profile.provenance.method == "merge");
  CHECK_THAT(profile.provenance.command, Catch::Contains("--prefer last"));

  // Bad input: a rule that does not exist, one profile, another GPU's profile.
  const auto bad_rule =
      run_fsdptune("profile merge " + kineto + " " + nccl + " --prefer newest --out " + merged);
  CHECK(bad_rule.exit_code == 2);
  CHECK_THAT(bad_rule.err, Catch::Contains("--prefer"));
  CHECK(run_fsdptune("profile merge " + kineto + " --out " + merged).exit_code == 2);
  // One profile twice, even with a rule for overlaps (found by QA: merged with itself).
  const auto twice =
      run_fsdptune("profile merge " + kineto + " " + kineto + " --prefer first --out " + merged);
  CHECK(twice.exit_code == 2);
  CHECK_THAT(twice.err, Catch::Contains(kineto + ": given twice (as " + kineto +
                                        "): it would be merged with itself"));
  const std::string h200 = dir + "/h200.json";
  REQUIRE(run_fsdptune("profile import-kineto " + data + "/kineto_llama_block.json --out " + h200)
              .exit_code == 0);
  const auto mixed = run_fsdptune("profile merge " + kineto + " " + h200 + " --out " + merged);
  CHECK(mixed.exit_code == 2);
  CHECK_THAT(mixed.err, Catch::Contains(h200 + ": field 'hardware'"));
}

TEST_CASE("ops a profile lacks fall back to the analytic model, and simulate/tune say how many",
          "[cli][profile][fallback]") {
  // The Kineto block fixture measured llama3-8b's attention (forward and backward), its
  // norms and its embedding at batch 1, seq 8192 on an H200: those costs are measured,
  // everything else (GEMMs, SwiGLU, RoPE, collectives, copies) falls back.
  const std::string data = FSDPTUNE_TEST_DATA;
  const std::string dir = make_temp_dir("fsdptune-fallback");
  const std::string profile = dir + "/h200-trace.json";
  REQUIRE(
      run_fsdptune("profile import-kineto " + data + "/kineto_llama_block.json --out " + profile)
          .exit_code == 0);
  const std::string job = "--model llama3-8b --gpus 8 --batch 1 --seq 8192 --plan fsdp2";

  const auto analytic = run_fsdptune("simulate " + job + " --hardware h200 --json");
  REQUIRE(analytic.exit_code == 0);
  const auto analytic_json = parse_json_text(analytic.out, "simulate --json");
  const auto queries = analytic_json.at("cost_queries").get<std::int64_t>();
  CHECK(analytic_json.at("cost_fallbacks").get<std::int64_t>() == queries);  // nothing measured

  // A profile of another GPU than --hardware: refused, with a hint that works. Dropping
  // --hardware works for a built-in GPU; not for a host's profile ('cpu'), which needs the
  // spec file (the hint said "drop --hardware" there too).
  const auto other =
      run_fsdptune("simulate " + job + " --profile " + profile + " --hardware h100-sxm");
  CHECK(other.exit_code == 2);
  CHECK_THAT(other.err, Catch::Contains("measured on 'h200' but --hardware is 'h100-sxm'") &&
                            Catch::Contains("drop --hardware"));
  auto host = parse_json_text(fsdptune::read_text_file(profile), profile);
  host["hardware"] = "cpu-host";
  const std::string host_profile = dir + "/cpu-host.json";
  fsdptune::write_file_atomically(host_profile, host.dump());
  const auto host_run =
      run_fsdptune("simulate " + job + " --profile " + host_profile + " --hardware h200");
  CHECK(host_run.exit_code == 2);
  CHECK_THAT(host_run.err, Catch::Contains("pass --hardware FILE, the spec of 'cpu-host'") &&
                               !Catch::Contains("drop --hardware"));

  const auto measured = run_fsdptune("simulate " + job + " --profile " + profile + " --json");
  INFO(measured.err);
  REQUIRE(measured.exit_code == 0);
  const auto measured_json = parse_json_text(measured.out, "simulate --json");
  CHECK(measured_json.at("cost_queries").get<std::int64_t>() == queries);
  const auto fallbacks = measured_json.at("cost_fallbacks").get<std::int64_t>();
  // Per block: attention forward and backward and 2 rmsnorm_bwd (32 blocks x 4); the final
  // norm's backward; the embedding forward and backward; the AdamW, which the profile has
  // for other shards, anchored at that size (docs/profile-format.md): 132 costs from the
  // profile. The trace's forward norms are eager PyTorch's unfused composite
  // (rmsnorm_fwd_unfused), not this compiled job's fused rmsnorm_fwd: fallbacks.
  CHECK(fallbacks == queries - 132);
  // Simulated as that eager PyTorch ran, the 65 forward norms are measured and the 65
  // backward ones (the trace's fused backward) fall back: 132 again, another 132.
  const auto unfused = run_fsdptune("simulate " + job + " --execution eager-unfused-rmsnorm " +
                                    "--profile " + profile + " --json");
  REQUIRE(unfused.exit_code == 0);
  const auto unfused_json = parse_json_text(unfused.out, "simulate --json");
  CHECK(unfused_json.at("cost_fallbacks").get<std::int64_t>() ==
        unfused_json.at("cost_queries").get<std::int64_t>() - 132);
  CHECK(unfused_json.at("step_time_s") != measured_json.at("step_time_s"));
  // The text output says it too.
  const auto text = run_fsdptune("simulate " + job + " --profile " + profile);
  REQUIRE(text.exit_code == 0);
  CHECK_THAT(text.out, Catch::Contains(fmt::format("costs              {} looked up, {} from the "
                                                   "analytic model",
                                                   queries, fallbacks)));

  // tune: the tuned plan's counts in its text, its --json and the schedule file.
  const std::string schedule = dir + "/schedule.json";
  const std::string tune_job = "--model llama3-8b --gpus 8 --batch 1 --seq 8192 --profile " +
                               profile + " --max-evaluations 5 --seed 1 --out " + schedule;
  const auto tuned = run_fsdptune("tune " + tune_job + " --json");
  INFO(tuned.err);
  REQUIRE(tuned.exit_code == 0);
  const auto tuned_json = parse_json_text(tuned.out, "tune --json");
  const auto tuned_queries = tuned_json.at("cost_queries").get<std::int64_t>();
  const auto tuned_fallbacks = tuned_json.at("cost_fallbacks").get<std::int64_t>();
  CHECK(tuned_fallbacks < tuned_queries);
  // The same 132 compute costs are measured whatever the plan (it changes only buckets).
  CHECK(tuned_fallbacks == tuned_queries - 132);
  const auto schedule_json = read_json_file(schedule);
  CHECK(schedule_json.at("cost_fallbacks") == tuned_fallbacks);
  const auto tuned_text = run_fsdptune("tune " + tune_job);
  REQUIRE(tuned_text.exit_code == 0);
  CHECK_THAT(tuned_text.out,
             Catch::Contains(fmt::format("costs: {} looked up, {} from the analytic model ({})",
                                         tuned_queries, tuned_fallbacks, profile)));
}

TEST_CASE("profile compare: a profile against the analytic model, and its flag errors",
          "[cli][profile][compare]") {
  const std::string data = FSDPTUNE_TEST_DATA;
  const std::string dir = make_temp_dir("fsdptune-compare");
  const std::string profile = dir + "/h200-trace.json";
  REQUIRE(
      run_fsdptune("profile import-kineto " + data + "/kineto_llama_block.json --out " + profile)
          .exit_code == 0);

  const auto json_run = run_fsdptune("profile compare " + profile + " --json");
  INFO(json_run.err);
  REQUIRE(json_run.exit_code == 0);
  const auto comparison = parse_json_text(json_run.out, "profile compare --json");
  CHECK(comparison.at("format") == "fsdptune-profile-comparison");
  CHECK(fsdptune::testing::readme_lists_format(comparison));
  CHECK(comparison.at("model_hardware") == "h200");  // the profile's own hardware
  REQUIRE(comparison.at("ops").size() == 7);
  for (const auto& op : comparison.at("ops")) {
    const double measured = op.at("measured_s").get<double>();
    const double model = op.at("model_s").get<double>();
    CHECK(op.at("relative_error").get<double>() == Approx((model - measured) / measured));
  }
  // Against another GPU's analytic model: allowed, and says so.
  const auto other = run_fsdptune("profile compare " + profile + " --hardware h100-sxm --markdown");
  REQUIRE(other.exit_code == 0);
  CHECK_THAT(other.out, Catch::Contains("profile measured on h200 vs the model of h100-sxm") &&
                            Catch::Contains("| attention_fwd bf16 b=1 h=32 kv=8 s=8192 d=128 |"));

  const auto both = run_fsdptune("profile compare " + profile + " --json --markdown");
  CHECK(both.exit_code == 2);
  CHECK_THAT(both.err, Catch::Contains("--json/--markdown"));
  const auto unknown = run_fsdptune("profile compare " + profile + " --hardware no-such-gpu");
  CHECK(unknown.exit_code == 2);
  CHECK_THAT(unknown.err, Catch::Contains("no-such-gpu"));
  const auto missing = run_fsdptune("profile compare " + dir + "/none.json");
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.err, Catch::Contains("none.json"));
  CHECK(json_run.err.find("TF32") == std::string::npos);  // no fp32 GEMM there

  // An fp32 GEMM past the fp32 peak ran on TF32 tensor cores: said (found by QA: a real
  // trace's cutlass tensorop GEMM read +476.7% with no word). The step trace's 8192 x 4096
  // x 4096 GEMM, made fp32.
  const std::string step = dir + "/step.json";
  REQUIRE(run_fsdptune("profile import-kineto " + data + "/kineto_fsdp_step.json --out " + step)
              .exit_code == 0);
  auto edited = read_json_file(step);
  int made_fp32 = 0;
  for (auto& entry : edited.at("compute")) {
    if (entry.at("signature") != "gemm bf16 m=8192 n=4096 k=4096") continue;
    entry["signature"] = "gemm fp32 m=8192 n=4096 k=4096";
    entry["op"]["signature"] = entry["signature"];
    entry["op"]["dtype"] = "fp32";
    ++made_fp32;
  }
  REQUIRE(made_fp32 == 1);
  const std::string tf32 = dir + "/tf32.json";
  write_file_atomically(tf32, dump_json(edited));
  for (const char* flags : {"", " --json", " --markdown"}) {
    const auto noted = run_fsdptune("profile compare " + tf32 + flags);
    REQUIRE(noted.exit_code == 0);
    CHECK_THAT(noted.err, Catch::Contains(": 1 fp32 GEMM at up to ") &&
                              Catch::Contains("past the fp32 peak of h100-sxm (67.0 TFLOP/s): "
                                              "TF32 tensor cores"));
  }
  // Below the fp32 peak (20 times slower, about 28 TFLOP/s): no note (review: untested).
  for (auto& entry : edited.at("compute")) {
    if (entry.at("signature") != "gemm fp32 m=8192 n=4096 k=4096") continue;
    for (auto& sample : entry.at("samples_s")) sample = sample.get<double>() * 20;
  }
  write_file_atomically(tf32, dump_json(edited));
  const auto slow = run_fsdptune("profile compare " + tf32);
  REQUIRE(slow.exit_code == 0);
  CHECK(slow.err.find("TF32") == std::string::npos);
}
