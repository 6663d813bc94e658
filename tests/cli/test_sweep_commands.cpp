// fsdptune sweep and fsdptune pipeline end to end on the tiny model (docs/parallelism.md).
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "cli_support.hpp"
#include "fsdptune/io.hpp"

using fsdptune::testing::make_temp_dir;
using fsdptune::testing::run_fsdptune;

TEST_CASE("sweep ranks configurations and writes the best", "[cli][sweep]") {
  const std::string dir = make_temp_dir("sweep");
  const std::string args =
      "sweep --model tiny --hardware h100-sxm --gpus 16 --global-batch 32 --seq 256 --threads 2 "
      "--json --top 3 --out " +
      dir + "/best.json";
  const auto result = run_fsdptune(args);
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  const auto json = nlohmann::json::parse(result.out);
  CHECK(json.at("format") == "fsdptune-sweep");
  CHECK(json.at("version") == 1);
  REQUIRE(json.at("top").size() == 3);
  // Ranked: tokens/s/GPU never increases down the list.
  CHECK(json["top"][0]["tokens_per_s_per_gpu"].get<double>() >=
        json["top"][1]["tokens_per_s_per_gpu"].get<double>());
  CHECK(json.at("evaluated").get<int>() > 10);
  CHECK(result.err.find("sweep: ") != std::string::npos);  // progress on stderr
  const auto best = fsdptune::read_json_file(dir + "/best.json");
  CHECK(best.at("format") == "fsdptune-sweep-best");
  CHECK(best.at("version") == 1);
  CHECK(best["best"]["job"] == json["top"][0]["job"]);
  // Same inputs, same bytes, whatever the thread count.
  const auto again = run_fsdptune(
      "sweep --model tiny --hardware h100-sxm --gpus 16 --global-batch 32 --seq 256 --threads 1 "
      "--json --top 3");
  CHECK(again.out == result.out);
}

TEST_CASE("sweep: a memory limit rejects configurations and says why", "[cli][sweep]") {
  const auto result = run_fsdptune(
      "sweep --model tiny --gpus 8 --global-batch 8 --seq 256 --memory-limit 1MiB --threads 1");
  REQUIRE(result.exit_code == 0);
  CHECK(result.out.find("0 fit") != std::string::npos);
  CHECK(result.out.find("rejected:") != std::string::npos);
}

TEST_CASE("sweep and pipeline: bad flags exit 2 naming the flag", "[cli][sweep]") {
  auto bad = run_fsdptune("sweep --model tiny --gpus 8 --global-batch lots --seq 256");
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("--global-batch") != std::string::npos);
  bad = run_fsdptune("sweep --model tiny --gpus 8 --global-batch 1000tok --seq 256");
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("--global-batch") != std::string::npos);
  bad = run_fsdptune(
      "pipeline --model tiny --gpus 8 --pp 2 --microbatches 3 --pp-schedule interleaved-1f1b "
      "--virtual-stages 2 --seq 256");
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("--microbatches") != std::string::npos);
  bad = run_fsdptune("pipeline --model tiny --gpus 8 --pp 2 --pp-schedule zigzag --seq 256");
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("--pp-schedule") != std::string::npos);
}

TEST_CASE("pipeline prints every stage, the first holding the most in flight", "[cli][pipeline]") {
  const auto result =
      run_fsdptune("pipeline --model tiny --gpus 8 --pp 4 --microbatches 8 --seq 256 --json");
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  const auto json = nlohmann::json::parse(result.out);
  CHECK(json.at("format") == "fsdptune-pipeline");
  REQUIRE(json.at("stages").size() == 4);
  CHECK(json["stages"][0]["max_in_flight"] == 4);
  CHECK(json["stages"][3]["max_in_flight"] == 1);
  CHECK(json["bubble_fraction"].get<double>() > 0);
  const auto table = run_fsdptune(
      "pipeline --model tiny --gpus 8 --pp 2 --microbatches 4 --pp-schedule interleaved-1f1b "
      "--virtual-stages 2 --seq 256");
  REQUIRE(table.exit_code == 0);
  CHECK(table.out.find("interleaved-1f1b") != std::string::npos);
}
