#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_support.hpp"
#include "fsdptune/hardware.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/profile.hpp"

using namespace fsdptune;
using fsdptune::testing::run_command;
using fsdptune::testing::run_fsdptune;

namespace {

const std::string kData = FSDPTUNE_TEST_DATA;
const std::string kLogs = kData + "/nccl-tests/";

}  // namespace

TEST_CASE("cost --collective prints time and busbw", "[cli][cost]") {
  const auto result =
      run_fsdptune("cost --hardware h100-sxm --collective all_gather --bytes 1GiB --gpus 8 --json");
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  const auto json = nlohmann::json::parse(result.out);
  CHECK(json.at("format") == "fsdptune-cost");
  CHECK(json.at("version") == 1);
  CHECK(fsdptune::testing::readme_lists_format(json));
  // Golden case of tests/core/test_analytic_cost.cpp: 2770.3 us; busbw = 7/8 * 2^30 B / t.
  CHECK(json["time_s"].get<double>() == Approx(2770.3e-6).epsilon(1e-4));
  CHECK(json["busbw_bytes_per_s"].get<double>() ==
        Approx(0.875 * 1073741824.0 / 2770.3e-6).epsilon(1e-4));
  CHECK(json["measured"] == false);
  CHECK(json["gpus_per_node"] == 8);

  const auto human =
      run_fsdptune("cost --hardware h100-sxm --collective reduce_scatter --bytes 2e9 --gpus 16");
  CHECK(human.exit_code == 0);
  CHECK_THAT(human.out, Catch::Contains("busbw"));
  CHECK_THAT(human.out, Catch::Contains("2 nodes"));
}

TEST_CASE("cost --gemm prints time and FLOP/s", "[cli][cost]") {
  const auto result = run_fsdptune("cost --hardware h200 --gemm 8192,8192,8192 --json");
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  const auto json = nlohmann::json::parse(result.out);
  CHECK(json["flops_per_s"].get<double>() == Approx(790e12).epsilon(0.02));
  CHECK(json["time_s"].get<double>() == Approx(2.0 * 8192 * 8192 * 8192 / 787.6e12).epsilon(1e-3));
  const auto fp8 = run_fsdptune("cost --hardware h200 --gemm 8192,8192,8192 --dtype fp8 --json");
  REQUIRE(fp8.exit_code == 0);
  CHECK(nlohmann::json::parse(fp8.out)["time_s"].get<double>() <
        0.6 * json["time_s"].get<double>());
  // Same inputs, same bytes.
  CHECK(run_fsdptune("cost --hardware h200 --gemm 8192,8192,8192 --json").out == result.out);
  // No fp8 tensor cores: refused as --float8 is (it quoted the bf16 rate as fp8's).
  for (const char* what : {"--gemm 8192,4096,4096", "--attention 1,32,8192,128"}) {
    const auto a100 = run_fsdptune(std::string("cost --hardware a100-80g --dtype fp8 ") + what);
    CHECK(a100.exit_code == 2);
    CHECK_THAT(a100.err, Catch::Contains("--dtype") && Catch::Contains("no fp8 tensor cores"));
  }
}

TEST_CASE("cost --attention prices a flash attention kernel", "[cli][cost]") {
  // The SDPA figure the H100 spec is calibrated to (docs/hardware.md): 329.5 TFLOP/s
  // at batch 1, 24 heads, seq 4608, head dim 128, non-causal forward.
  const auto sdpa =
      run_fsdptune("cost --hardware h100-sxm --attention 1,24,4608,128 --noncausal --json");
  INFO(sdpa.err);
  REQUIRE(sdpa.exit_code == 0);
  const auto sdpa_json = nlohmann::json::parse(sdpa.out);
  CHECK(sdpa_json["executed_flops_per_s"].get<double>() == Approx(329.5e12).epsilon(0.03));
  CHECK(sdpa_json["model_flops"].get<double>() == Approx(4.0 * 24 * 4608 * 4608 * 128));
  CHECK(sdpa_json["executed_flops"] == sdpa_json["model_flops"]);
  CHECK(sdpa_json["attention"]["kv_heads"] == 24);
  CHECK(sdpa_json["measured"] == false);
  // Llama 3 8B's causal forward at 8192 tokens: tests/core/test_analytic_cost.cpp's golden
  // case, 1.63784 ms + 4 us launch; the kernel executes half the model FLOPs.
  const std::string llama = "cost --hardware h100-sxm --attention 1,32,8192,128 --kv-heads 8";
  const auto forward = run_fsdptune(llama + " --json");
  REQUIRE(forward.exit_code == 0);
  const auto forward_json = nlohmann::json::parse(forward.out);
  CHECK(forward_json["time_s"].get<double>() == Approx(1.63784e-3 + 4e-6).epsilon(1e-4));
  CHECK(forward_json["executed_flops"].get<double>() ==
        Approx(0.5 * forward_json["model_flops"].get<double>()));
  // Its backward: twice the model FLOPs, 2.5 times the executed work, at 0.30 of peak
  // instead of 0.35 (attention_backward_efficiency).
  const auto backward = run_fsdptune(llama + " --backward --json");
  REQUIRE(backward.exit_code == 0);
  const auto backward_json = nlohmann::json::parse(backward.out);
  CHECK(backward_json["model_flops"].get<double>() ==
        Approx(2 * forward_json["model_flops"].get<double>()));
  CHECK(backward_json["executed_flops"].get<double>() ==
        Approx(2.5 * forward_json["executed_flops"].get<double>()));
  CHECK(backward_json["time_s"].get<double>() - 4e-6 ==
        Approx(2.5 * 0.35 / 0.30 * (forward_json["time_s"].get<double>() - 4e-6)).epsilon(1e-9));
  const auto human = run_fsdptune(llama);
  CHECK(human.exit_code == 0);
  CHECK_THAT(human.out, Catch::Contains("attention forward b=1 h=32 kv=8 s=8192 d=128 bf16 "
                                        "causal on h100-sxm"));
  CHECK_THAT(human.out, Catch::Contains("TFLOP/s executed"));
  CHECK(run_fsdptune(llama + " --json").out == forward.out);
}

TEST_CASE("cost prints a rate in the largest unit that keeps it at least 1", "[cli][cost]") {
  // A spec of a slow device (a CPU's figures): h100-sxm's at 1/10000 of its FLOP rates.
  nlohmann::json spec =
      read_json_file(std::string(FSDPTUNE_SOURCE_DIR) + "/profiles/h100-sxm.json");
  spec["id"] = "slow";
  for (const char* field :
       {"peak_bf16_flops_per_s", "peak_fp8_flops_per_s", "peak_fp32_flops_per_s"}) {
    spec[field] = spec[field].get<double>() / 1e4;
  }
  const std::string path = fsdptune::testing::make_temp_dir("fsdptune-cost-slow") + "/slow.json";
  write_file_atomically(path, spec.dump());
  const auto gemm = run_fsdptune("cost --hardware " + path + " --gemm 1024,1024,1024");
  INFO(gemm.err);
  REQUIRE(gemm.exit_code == 0);
  CHECK_THAT(gemm.out, Catch::Contains(" GFLOP/s (analytic model)"));
  CHECK_THAT(gemm.out, !Catch::Contains("TFLOP/s"));
  const auto attention = run_fsdptune("cost --hardware " + path + " --attention 1,8,1024,64");
  REQUIRE(attention.exit_code == 0);
  CHECK_THAT(attention.out, Catch::Contains(" GFLOP/s executed, "));
  CHECK_THAT(attention.out, Catch::Contains(" GFLOP/s in model FLOPs"));
  // Likewise a bandwidth under 1 GB/s in MB/s (a 1 KiB all-gather read "0.1 GB/s").
  const auto small =
      run_fsdptune("cost --hardware h100-sxm --collective all_gather --bytes 1KiB --gpus 8");
  REQUIRE(small.exit_code == 0);
  CHECK_THAT(small.out,
             Catch::Matches("(.|\n)*busbw [0-9]+\\.[0-9] MB/s, algbw [0-9]+\\.[0-9] MB/s(.|\n)*"));
  // Below 1 GFLOP/s in MFLOP/s or kFLOP/s (a 1x1x1 GEMM printed "0.0 GFLOP/s").
  const auto tiny = run_fsdptune("cost --hardware h100-sxm --gemm 1,1,1");
  REQUIRE(tiny.exit_code == 0);
  CHECK_THAT(tiny.out,
             Catch::Matches("(.|\n)*  [1-9][0-9]*\\.[0-9] kFLOP/s \\(analytic model\\)\n"));
  // One GPU: no bus bandwidth (it printed "busbw 0.0 MB/s").
  const auto one =
      run_fsdptune("cost --hardware h100-sxm --collective all_gather --bytes 1MiB --gpus 1");
  REQUIRE(one.exit_code == 0);
  CHECK_THAT(one.out, Catch::Contains("over 1 GPU (1 per node") &&
                          Catch::Contains("one GPU: nothing crosses a link (in place") &&
                          !Catch::Contains("busbw"));
}

TEST_CASE("cost with a profile uses its measurements", "[cli][cost]") {
  const std::string dir = fsdptune::testing::make_temp_dir("fsdptune-cost-cli");
  const std::string profile = dir + "/h100.json";
  const auto import = run_fsdptune("profile import-nccl-tests " + kLogs +
                                   "all_gather_perf_h100x8.log --out " + profile);
  INFO(import.err);
  REQUIRE(import.exit_code == 0);
  // The log's out-of-place and in-place times at 64 MiB: 214.11 us and 216.68 us; median
  // of the two = 215.395 us.
  const auto result = run_fsdptune("cost --profile " + profile +
                                   " --collective all_gather --bytes 64MiB --gpus 8 --json");
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  const auto json = nlohmann::json::parse(result.out);
  CHECK(json["time_s"].get<double>() == Approx(215.395e-6).epsilon(1e-9));
  CHECK(json["measured"] == true);
  CHECK(json["hardware"] == "h100-sxm");
  // The text says whether the size was measured, lies between two measured sizes or
  // beyond the sweep's ends (found by QA: 16 GiB from a sweep up to 2 GiB was "measured").
  const auto source = [&](const std::string& bytes) {
    const auto text = run_fsdptune("cost --profile " + profile +
                                   " --collective all_gather --gpus 8 --bytes " + bytes);
    REQUIRE(text.exit_code == 0);
    return text.out.substr(text.out.rfind('('));
  };
  CHECK(source("64MiB") == "(measured)\n");
  CHECK(source("96MiB") == "(interpolated between the profile's sizes)\n");
  CHECK(source("16GiB") == "(extrapolated from the profile's sizes, up to 2.00 GiB)\n");
  CHECK(source("4KiB") == "(extrapolated from the profile's sizes, from 1.00 MiB)\n");
  // One GPU: nothing measured, nothing to move (it said "measured": review).
  const auto one =
      run_fsdptune("cost --profile " + profile + " --collective all_gather --gpus 1 --bytes 64MiB");
  CHECK_THAT(one.out, Catch::EndsWith("(in place; no time)\n"));
  // Not in the profile: the analytic fallback of the profile's hardware.
  const auto fallback = run_fsdptune("cost --profile " + profile +
                                     " --collective all_reduce --bytes 64MiB --gpus 8 --json");
  REQUIRE(fallback.exit_code == 0);
  CHECK(nlohmann::json::parse(fallback.out)["measured"] == false);
  // ...and why, in the text (found by QA: "(analytic model)" alone).
  CHECK_THAT(
      run_fsdptune("cost --profile " + profile + " --collective all_reduce --bytes 64MiB --gpus 8")
          .out,
      Catch::Contains("(analytic model: the profile has no all_reduce sweep)"));
  CHECK_THAT(
      run_fsdptune("cost --profile " + profile + " --collective all_gather --bytes 64MiB --gpus 16")
          .out,
      Catch::Contains("(analytic model: the profile measured all_gather over 8 ranks (8 "
                      "per node) only)"));
  // Its own group measured at one size: that size alone is answered (review: it said the
  // group was not measured).
  nlohmann::json one_point = fsdptune::read_json_file(profile);
  for (auto& sweep : one_point.at("collectives")) {
    auto& points = sweep.at("points");
    points = nlohmann::json::array({points[points.size() / 2]});
  }
  const std::string single = dir + "/single.json";
  fsdptune::write_file_atomically(single, fsdptune::dump_json(one_point));
  CHECK_THAT(
      run_fsdptune("cost --profile " + single + " --collective all_gather --bytes 3GiB --gpus 8")
          .out,
      Catch::Contains("(analytic model: the profile measured all_gather over this group at ") &&
          Catch::Contains(" alone, which answers that size only)"));
  // A profile and another GPU's spec do not mix.
  const auto mismatch =
      run_fsdptune("cost --profile " + profile + " --hardware a100-80g --gemm 1024,1024,1024");
  CHECK(mismatch.exit_code == 2);
  CHECK_THAT(mismatch.err, Catch::Contains("a100-80g"));
  // One log given twice, here by two spellings, would pool its rows twice (found by QA).
  const auto twice =
      run_fsdptune("profile import-nccl-tests " + kLogs + "all_gather_perf_h100x8.log " + kLogs +
                   "../nccl-tests/all_gather_perf_h100x8.log --out " + dir + "/twice.json");
  CHECK(twice.exit_code == 2);
  CHECK_THAT(twice.err,
             Catch::Contains("given twice (as " + kLogs + "all_gather_perf_h100x8.log)"));
  CHECK_FALSE(std::filesystem::exists(dir + "/twice.json"));
}

TEST_CASE("profile import-nccl-tests writes a deterministic profile", "[cli][cost]") {
  const std::string dir = fsdptune::testing::make_temp_dir("fsdptune-import-cli");
  const std::string logs = kLogs + "all_gather_perf_h100x8.log " + kLogs +
                           "reduce_scatter_perf_h100x8.log " + kLogs + "all_reduce_perf_h100x8.log";
  const std::string binary = FSDPTUNE_BINARY;
  const auto first = run_command("SOURCE_DATE_EPOCH=0 " + binary + " profile import-nccl-tests " +
                                 logs + " --out " + dir + "/a.json");
  INFO(first.err);
  REQUIRE(first.exit_code == 0);
  CHECK_THAT(first.out, Catch::Contains("reduce_scatter over 8 ranks (8 per node): 12 sizes"));
  const auto second = run_command("SOURCE_DATE_EPOCH=0 " + binary + " profile import-nccl-tests " +
                                  logs + " --out " + dir + "/a.json");
  REQUIRE(second.exit_code == 0);
  const std::string text = read_text_file(dir + "/a.json");
  const Profile profile = profile_from_json(parse_json_text(text, "a.json"), "a.json");
  CHECK(profile.provenance.date == "1970-01-01T00:00:00Z");
  CHECK(profile.provenance.tool.rfind("fsdptune ", 0) == 0);
  CHECK(profile.collectives.size() == 3);
  CHECK(dump_json(profile_to_json(profile)) == text);
  // A time past year 9999 wrote "10000-01-01..." or a negative year (exit 0).
  const auto late = run_command("SOURCE_DATE_EPOCH=253402300800 " + binary +
                                " profile import-nccl-tests " + logs + " --out " + dir + "/b.json");
  CHECK(late.exit_code == 2);
  CHECK_THAT(late.err, Catch::Contains("SOURCE_DATE_EPOCH: 253402300800 is after 9999-12-31"));
  CHECK_FALSE(std::filesystem::exists(dir + "/b.json"));
  // A --hardware word that is no built-in spec is recorded with a note, as import-kineto
  // and profile --backend do (it was refused here alone).
  const auto device = run_command("SOURCE_DATE_EPOCH=0 " + binary + " profile import-nccl-tests " +
                                  logs + " --hardware b300 --out " + dir + "/c.json");
  CHECK(device.exit_code == 0);
  CHECK_THAT(device.err, Catch::Contains("note: --hardware b300: no built-in hardware"));
  CHECK(profile_from_json(parse_json_text(read_text_file(dir + "/c.json"), "c.json"), "c.json")
            .hardware == "b300");
  // ... and the logs' own device named where it is other hardware (found by QA).
  CHECK_THAT(device.err, Catch::Contains("note: --hardware: recorded as b300, the input names "
                                         "'NVIDIA H100 80GB HBM3' (h100-sxm)"));
  // ...and where it is no built-in (found by QA: an A100 40GB log recorded as a100-80g
  // without a word).
  std::string a100_40g = read_text_file(kLogs + "all_gather_perf_h100x8.log");
  for (std::size_t at = a100_40g.find("NVIDIA H100 80GB HBM3"); at != std::string::npos;
       at = a100_40g.find("NVIDIA H100 80GB HBM3")) {
    a100_40g.replace(at, std::string("NVIDIA H100 80GB HBM3").size(), "NVIDIA A100-SXM4-40GB");
  }
  write_file_atomically(dir + "/all_gather_perf_a100.log", a100_40g);
  const auto unknown =
      run_command(binary + " profile import-nccl-tests " + dir +
                  "/all_gather_perf_a100.log --hardware a100-80g --out " + dir + "/d.json");
  CHECK(unknown.exit_code == 0);
  CHECK_THAT(unknown.err, Catch::Contains("note: --hardware: recorded as a100-80g, the input "
                                          "names 'NVIDIA A100-SXM4-40GB' (no built-in hardware)"));
  // Not where it is recorded as asked, under an id of its own (review: every B200 import
  // said so).
  const auto own_id =
      run_command(binary + " profile import-nccl-tests " + dir +
                  "/all_gather_perf_a100.log --hardware a100-40g --out " + dir + "/e.json");
  CHECK(own_id.exit_code == 0);
  CHECK_THAT(own_id.err, !Catch::Contains("recorded as"));
  // A word no spec could take as its id is refused (review: a tab made a profile no spec
  // file could name).
  const auto tab = run_command(binary + " profile import-nccl-tests " + logs +
                               " --hardware \"$(printf 'b2\\t00')\" --out " + dir + "/f.json");
  CHECK(tab.exit_code == 2);
  CHECK_THAT(tab.err, Catch::Contains("--hardware: holds a control character"));
  // A spec file under a built-in's id with other figures: noted, as for every other command
  // (review: its figures dropped without a word).
  nlohmann::json faster = fsdptune::hardware_to_json(fsdptune::builtin_hardware("h100-sxm"));
  faster["peak_bf16_flops_per_s"] = 2e15;
  write_file_atomically(dir + "/faster.json", faster.dump());
  const auto spec_file =
      run_command(binary + " profile import-nccl-tests " + logs + " --hardware " + dir +
                  "/faster.json --out " + dir + "/g.json");
  CHECK(spec_file.exit_code == 0);
  CHECK_THAT(spec_file.err, Catch::Contains("its id \"h100-sxm\" is a built-in's, with other "
                                            "figures (peak_bf16_flops_per_s 989000000000000 "
                                            "(here: 2e+15))"));
}

TEST_CASE("cost and profile commands reject bad input with exit 2", "[cli][cost]") {
  struct Case {
    std::string arguments;
    std::string names;  // what the error message must name
  };
  const Case cases[] = {
      {"cost --hardware tpu-v5 --gemm 1,1,1", "tpu-v5"},
      {"cost --hardware h100-sxm --collective all_to_all --bytes 1MiB --gpus 8", "--collective"},
      {"cost --hardware h100-sxm --collective all_gather --bytes lots --gpus 8", "--bytes"},
      {"cost --hardware h100-sxm --collective all_gather --bytes 1MiB", "--gpus"},
      {"cost --hardware h100-sxm --gemm 8192,4096", "--gemm"},
      {"cost --hardware h100-sxm --gemm 8192,x,4096", "--gemm"},
      {"cost --hardware h100-sxm --gemm 64,64,64 --dtype int4", "--dtype"},
      {"cost --hardware h100-sxm --attention 1,32,8192", "--attention"},
      {"cost --hardware h100-sxm --attention 1,32,x,128", "--attention"},
      {"cost --hardware h100-sxm --attention 1,32,8192,128 --kv-heads 5", "--kv-heads"},
      {"cost --hardware h100-sxm --attention 1,32,8192,128 --gemm 64,64,64", "--attention"},
      {"cost --hardware h100-sxm --attention 4096,32,1048576,128", "--attention"},
      {"cost --hardware h100-sxm --gemm 64,64,64 --backward", "--backward"},
      // Found probing the CLI: flags of another kind of cost were ignored, 0 taken as the
      // default, sizes beyond the limits accepted.
      {"cost --hardware h100-sxm --gemm 64,64,64 --gpus 3", "--gpus"},
      {"cost --hardware h100-sxm --attention 1,8,128,64 --bytes 1MiB", "--bytes"},
      {"cost --hardware h100-sxm --collective all_gather --bytes 1MiB --gpus 8 --dtype fp8",
       "--dtype"},
      {"cost --hardware h100-sxm --collective all_gather --bytes 1MiB --gpus 8 "
       "--gpus-per-node 0",
       "--gpus-per-node"},
      {"cost --hardware h100-sxm --attention 1,32,8192,128 --kv-heads 0", "--kv-heads"},
      {"cost --hardware h100-sxm --attention 1,32,8192,128 --kv-heads -8", "must be positive"},
      {"cost --hardware h100-sxm --gemm 1073741825,1,1", "--gemm"},
      {"cost --hardware h100-sxm --collective all_gather --bytes 1MiB --gpus 16777217", "--gpus"},
      // Found by QA: a negative count was told "required".
      {"cost --hardware h100-sxm --collective all_gather --bytes 1MiB --gpus -8",
       "--gpus: must be > 0, got -8"},
      // And 0, given, too (it was told "required").
      {"cost --hardware h100-sxm --collective all_gather --bytes 1MiB --gpus 0",
       "--gpus: must be > 0, got 0"},
      {"cost --hardware h100-sxm --collective all_gather --bytes 1MiB",
       "--gpus: required with --collective"},
      // Found probing cost: a partly empty last node was priced as a full one (9 GPUs in
      // nodes of 8 at 338 GB/s busbw, where the ninth GPU's one NIC carries the ring).
      {"cost --hardware h100-sxm --collective reduce_scatter --bytes 1GiB --gpus 9", "--gpus"},
      {"cost --hardware h100-sxm --collective all_gather --bytes 1GiB --gpus 3 "
       "--gpus-per-node 2",
       "do not fill nodes of 2"},
      {"cost --hardware h100-sxm", "--collective"},
      {"cost --gemm 64,64,64", "--hardware"},
      {"cost --profile /nonexistent/p.json --gemm 64,64,64", "/nonexistent/p.json"},
      {"cost --hardware " + kData + "/nccl-tests/README.md --gemm 64,64,64", "README.md"},
      {"profile import-nccl-tests " + kLogs + "all_gather_perf_truncated.log --out /tmp/x.json",
       "all_gather_perf_truncated.log"},
      {"profile import-nccl-tests " + kLogs + "alltoall_perf_h100x8.log --out /tmp/x.json",
       "unknown collective"},
      {"profile import-nccl-tests /nonexistent.log --out /tmp/x.json", "/nonexistent.log"},
  };
  for (const Case& c : cases) {
    const auto result = run_fsdptune(c.arguments);
    INFO(c.arguments << "\nstderr: " << result.err);
    CHECK(result.exit_code == 2);
    CHECK_THAT(result.err, Catch::Contains(c.names));
  }
}

TEST_CASE("a profile of another version is refused by cost", "[cli][cost]") {
  const std::string dir = fsdptune::testing::make_temp_dir("fsdptune-version-cli");
  const std::string path = dir + "/old.json";
  Profile profile;
  profile.hardware = "h100-sxm";
  nlohmann::json json = profile_to_json(profile);
  json["version"] = 99;
  write_file_atomically(path, dump_json(json));
  const auto result = run_fsdptune("cost --profile " + path + " --gemm 64,64,64");
  CHECK(result.exit_code == 2);
  CHECK_THAT(result.err, Catch::Contains("old.json"));
  CHECK_THAT(result.err, Catch::Contains("version"));
}

TEST_CASE("another of fsdptune's files given to a flag says which flag takes it", "[cli][cost]") {
  // Found by QA: a profile given to --hardware said only what its format field held.
  const std::string dir = fsdptune::testing::make_temp_dir("fsdptune-format-cli");
  const std::string path = dir + "/profile.json";
  Profile profile;
  profile.hardware = "h100-sxm";
  write_file_atomically(path, dump_json(profile_to_json(profile)));
  for (const std::string& command :
       {"cost --hardware " + path + " --gemm 64,64,64", "model --model " + path}) {
    const auto result = run_fsdptune(command);
    INFO(command);
    CHECK(result.exit_code == 2);
    CHECK_THAT(result.err, Catch::Contains("got \"fsdptune-profile\"") &&
                               Catch::Contains("hint: this is a cost profile: give it to "
                                               "--profile"));
  }
  std::filesystem::remove_all(dir);
}

// Found by QA: nodes of a spec's own gpus_per_node were blamed on --gpus-per-node, a flag
// never given, by the job commands (cost said "the hardware's").
TEST_CASE("nodes of the hardware spec's size are named as the hardware's", "[cli][cost]") {
  const std::string dir = fsdptune::testing::make_temp_dir("fsdptune-nodes-of-3");
  nlohmann::json spec =
      fsdptune::read_json_file(std::string(FSDPTUNE_SOURCE_DIR) + "/profiles/h100-sxm.json");
  spec["id"] = "nodes-of-3";
  spec["gpus_per_node"] = 3;
  const std::string path = dir + "/spec.json";
  fsdptune::write_file_atomically(path, fsdptune::dump_json(spec));
  for (const std::string& command :
       {"cost --hardware " + path + " --collective all_gather --bytes 1MiB --gpus 8",
        "simulate --model tiny --hardware " + path + " --gpus 8"}) {
    const auto result = run_fsdptune(command);
    CHECK(result.exit_code == 2);
    CHECK_THAT(result.err, Catch::Contains("8 GPUs do not fill nodes of 3 (--gpus-per-node, the "
                                           "hardware's)"));
  }
  // Given as a flag, the flag is named.
  CHECK_THAT(
      run_fsdptune("simulate --model tiny --hardware " + path + " --gpus 8 --gpus-per-node 3").err,
      Catch::Contains("do not fill nodes of 3 (--gpus-per-node)") &&
          // Found by QA: no value offered.
          Catch::Contains("give whole nodes: --gpus 6 or 9"));
  std::filesystem::remove_all(dir);
}

// Found by QA: a replica group split unevenly over nodes (24 GPUs, PP 2, 3 replicas: {0, 4,
// 8} over 2 nodes) could not be priced by cost, which took 3 GPUs at 1 per node over 3. With
// --nodes it gives the schedule's all-reduce exactly.
TEST_CASE("cost --nodes prices a group split unevenly over nodes as a schedule does",
          "[cli][cost]") {
  const std::string dir = fsdptune::testing::make_temp_dir("fsdptune-cost-nodes");
  const std::string schedule = dir + "/s.json";
  const auto tuned = run_fsdptune("tune --model " + kData +
                                  "/models/llama3.2-1b-untied.json --gpus 24 --pp 2 "
                                  "--dp-replicate 3 --microbatches 2 --seq 256 --hardware h100-sxm "
                                  "--max-evaluations 20 --threads 1 --out " +
                                  schedule);
  INFO(tuned.err);
  REQUIRE(tuned.exit_code == 0);
  const nlohmann::json file = read_json_file(schedule);
  int checked = 0;
  for (const auto& task : file["pipeline"]["chunks"][0]["program"]["tasks"]) {
    if (task["kind"] != "all_reduce" || checked > 0) continue;
    REQUIRE(task["group"] == nlohmann::json{{"ranks", 3}, {"ranks_per_node", 1}, {"nodes", 2}});
    const std::string bytes = std::to_string(task["bytes"].get<std::int64_t>());
    const auto priced = run_fsdptune(
        "cost --hardware h100-sxm --collective all_reduce --gpus 3 --gpus-per-node 1 --nodes 2 "
        "--json --bytes " +
        bytes);
    INFO(priced.err);
    REQUIRE(priced.exit_code == 0);
    const auto json = nlohmann::json::parse(priced.out);
    CHECK(json["nodes"] == 2);
    CHECK(json["time_s"].get<double>() == Approx(task["duration_s"].get<double>()).epsilon(1e-12));
    // Over 3 nodes (no --nodes), two network hops' latency more.
    const auto spread = run_fsdptune(
        "cost --hardware h100-sxm --collective all_reduce --gpus 3 --gpus-per-node 1 --json "
        "--bytes " +
        bytes);
    CHECK(nlohmann::json::parse(spread.out)["time_s"].get<double>() > json["time_s"].get<double>());
    ++checked;
  }
  CHECK(checked == 1);
  const auto text = run_fsdptune(
      "cost --hardware h100-sxm --collective all_reduce --bytes 1MiB --gpus 3 --gpus-per-node 1 "
      "--nodes 2");
  CHECK_THAT(text.out, Catch::Contains("over 3 GPUs (at fewest 1 per node, 2 nodes)"));
  for (const auto& [arguments, says] :
       {std::pair{std::string("--gpus 3 --gpus-per-node 1 --nodes 4"),
                  std::string("--nodes: 4 nodes holding at least 1 of the 3 GPUs each")},
        std::pair{std::string("--gpus 3 --gpus-per-node 1 --nodes 0"),
                  std::string("--nodes: must be > 0, got 0")}}) {
    const auto refused =
        run_fsdptune("cost --hardware h100-sxm --collective all_reduce --bytes 1MiB " + arguments);
    CHECK(refused.exit_code == 2);
    CHECK_THAT(refused.err, Catch::Contains(says));
  }
  const auto gemm = run_fsdptune("cost --hardware h100-sxm --gemm 8,8,8 --nodes 2");
  CHECK(gemm.exit_code == 2);
  CHECK_THAT(gemm.err, Catch::Contains("--nodes: only with --collective"));
  std::filesystem::remove_all(dir);
}
