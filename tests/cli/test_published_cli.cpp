// fsdptune's analytic predictions held against end-to-end figures published by torchtitan
// (tests/data/published/torchtitan-runs.json, docs/calibration.md): each run is simulated
// with the flags of its published configuration and the ratio predicted / published must
// stay inside the band recorded for it. The bands say how far the model is today (it is
// optimistic on throughput, close on FSDP memory); a change that moves a prediction out
// of its band must update the band and docs/calibration.md with it, on purpose.
#include <catch2/catch.hpp>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_support.hpp"

using fsdptune::testing::run_fsdptune;

namespace {

nlohmann::json published_runs() {
  std::ifstream in(std::string(FSDPTUNE_TEST_DATA) + "/published/torchtitan-runs.json");
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

void check_band(const char* what, double ratio, const nlohmann::json& band) {
  INFO(what << ": predicted / published = " << ratio << ", band [" << band[0].get<double>() << ", "
            << band[1].get<double>() << "]");
  CHECK(ratio >= band[0].get<double>());
  CHECK(ratio <= band[1].get<double>());
}

}  // namespace

TEST_CASE("predictions stay in the recorded bands around torchtitan's published runs",
          "[cli][simulate][published]") {
  const nlohmann::json file = published_runs();
  REQUIRE(file.at("format") == "fsdptune-published-runs");
  REQUIRE(file.at("version") == 1);
  REQUIRE(file.at("runs").size() >= 10);
  for (const nlohmann::json& run : file.at("runs")) {
    const std::string name = run.at("name").get<std::string>();
    INFO(name);
    REQUIRE(file.at("sources").contains(run.at("source").get<std::string>()));
    const auto result = run_fsdptune("simulate " + run.at("args").get<std::string>() + " --json");
    REQUIRE(result.exit_code == 0);
    const nlohmann::json predicted = nlohmann::json::parse(result.out);
    check_band("tokens/s/GPU",
               predicted.at("tokens_per_s_per_gpu").get<double>() /
                   run.at("published_tokens_per_s_per_gpu").get<double>(),
               run.at("throughput_band"));
    if (run.contains("published_memory_gib")) {
      // torchtitan reports the caching allocator's max reserved memory (of the largest
      // stage with PP): compare the reserved estimate.
      const double predicted_gib =
          predicted.at("peak_reserved_bytes").get<double>() / (1024.0 * 1024.0 * 1024.0);
      check_band("peak reserved memory",
                 predicted_gib / run.at("published_memory_gib").get<double>(),
                 run.at("memory_band"));
    }
  }
}

TEST_CASE("torch.compile's published speed-up over eager is predicted within 10%",
          "[cli][simulate][published]") {
  // The published pairs that differ only in torch.compile (8B on 8 and on 128 H100s):
  // torchtitan measured x1.157 and x1.162; the model's eager runs unfused RoPE, SwiGLU and
  // (PyTorch of 2024) RMSNorm through fp32 (docs/workload.md "Eager").
  const nlohmann::json file = published_runs();
  const auto tokens_per_s = [](const nlohmann::json& run) {
    const auto result = run_fsdptune("simulate " + run.at("args").get<std::string>() + " --json");
    REQUIRE(result.exit_code == 0);
    return nlohmann::json::parse(result.out).at("tokens_per_s_per_gpu").get<double>();
  };
  int pairs = 0;
  for (const nlohmann::json& eager : file.at("runs")) {
    std::string name = eager.at("name").get<std::string>();
    if (!name.ends_with(", eager") || eager.at("source") != "torchtitan-h100") continue;
    name.replace(name.size() - 5, 5, "torch.compile");
    for (const nlohmann::json& compiled : file.at("runs")) {
      if (compiled.at("name") != name) continue;
      INFO(name);
      ++pairs;
      const double published = compiled.at("published_tokens_per_s_per_gpu").get<double>() /
                               eager.at("published_tokens_per_s_per_gpu").get<double>();
      const double predicted = tokens_per_s(compiled) / tokens_per_s(eager);
      INFO("published x" << published << ", predicted x" << predicted);
      CHECK(predicted > 1.0);
      CHECK(predicted / published >= 0.9);
      CHECK(predicted / published <= 1.1);
    }
  }
  CHECK(pairs == 2);
}
