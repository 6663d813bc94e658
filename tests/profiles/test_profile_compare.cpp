// A profile against a cost model (profile_compare.hpp), on a hand-made model whose answers
// are round numbers so that every error can be checked by hand.
#include <catch2/catch.hpp>

#include <sstream>

#include "fsdptune/hardware.hpp"
#include "fsdptune/profile_compare.hpp"
#include "fsdptune/units.hpp"
#include "fsdptune/workload.hpp"

using namespace fsdptune;

namespace {

// Every compute op 3 ms; a collective of S bytes S / 1 GB/s.
class RoundModel final : public CostModel {
 public:
  RoundModel() { hardware_.id = "round"; }
  CostEstimate compute(const Op& /*op*/) const override { return {3e-3, false}; }
  CostEstimate collective(CollectiveKind /*kind*/, std::int64_t bytes,
                          CommGroup /*group*/) const override {
    return {static_cast<double>(bytes) / 1e9, false};
  }
  CostEstimate copy(std::int64_t bytes) const override {
    return {static_cast<double>(bytes) / 1e9, false};
  }
  ContentionFactors contention() const override { return {}; }
  const HardwareSpec& hardware() const override { return hardware_; }

 private:
  HardwareSpec hardware_;
};

Profile measured_profile() {
  Profile profile;
  profile.hardware = "h200";
  Op gemm;
  gemm.kind = OpKind::kGemm;
  gemm.gemm = {1024, 1024, 1024};
  gemm.flops = 2.0 * 1024 * 1024 * 1024;
  gemm.bytes = 3 * 1024 * 1024 * 2;
  profile.compute.push_back({gemm.signature(), gemm, {1e-3, 4e-3, 2e-3}});
  Op norm;
  norm.kind = OpKind::kMemoryBound;
  norm.memory_op = "rmsnorm_fwd";
  norm.bytes = 6'000'000;
  profile.compute.push_back({norm.signature(), norm, {6e-3}});
  profile.collectives.push_back(
      {CollectiveKind::kAllGather, {4, 4}, {{1'000'000, {2e-3}}, {4'000'000, {2e-3, 3e-3, 1e-3}}}});
  return profile;
}

}  // namespace

TEST_CASE("compare_profile: op by op and size by size against a model", "[profiler][compare]") {
  const ProfileComparison comparison = compare_profile(measured_profile(), RoundModel());
  CHECK(comparison.profile_hardware == "h200");
  CHECK(comparison.model_hardware == "round");
  REQUIRE(comparison.ops.size() == 2);

  // GEMM: median of {1, 4, 2} ms = 2 ms; model 3 ms: (3 - 2) / 2 = +50%; achieved
  // 2 * 1024^3 flops / 2 ms = 1.073741824e12 FLOP/s.
  const OpComparison& gemm = comparison.ops[0];
  CHECK(gemm.samples == 3);
  CHECK(gemm.measured_s == Approx(2e-3));
  CHECK(gemm.model_s == Approx(3e-3));
  CHECK(gemm.relative_error == Approx(0.5));
  CHECK(gemm.measured_rate == Approx(1.073741824e12));
  // Norm: 6 ms measured, 3 ms model: -50%; 6e6 bytes / 6 ms = 1e9 bytes/s.
  const OpComparison& norm = comparison.ops[1];
  CHECK(norm.relative_error == Approx(-0.5));
  CHECK(norm.measured_rate == Approx(1e9));

  // All-gather over 4 ranks: 1 MB measured 2 ms, model 1 ms: -50%, busbw 1e6 / 2e-3 * 3/4
  // = 3.75e8; 4 MB median of {2, 3, 1} = 2 ms, model 4 ms: +100%.
  REQUIRE(comparison.collectives.size() == 2);
  CHECK(comparison.collectives[0].relative_error == Approx(-0.5));
  CHECK(comparison.collectives[0].measured_busbw_bytes_per_s == Approx(3.75e8));
  CHECK(comparison.collectives[1].measured_s == Approx(2e-3));
  CHECK(comparison.collectives[1].relative_error == Approx(1.0));

  // Groups, by name: the all-gathers (|errors| 0.5 and 1.0: median 0.75; 4 ms measured,
  // 5 ms model), the bf16 GEMMs, the rmsnorm_fwd kernels.
  REQUIRE(comparison.summaries.size() == 3);
  CHECK(comparison.summaries[0].group == "all_gather x4 (4 per node)");
  CHECK(comparison.summaries[0].rows == 2);
  CHECK(comparison.summaries[0].median_abs_error == Approx(0.75));
  CHECK(comparison.summaries[0].measured_s == Approx(4e-3));
  CHECK(comparison.summaries[0].model_s == Approx(5e-3));
  CHECK(comparison.summaries[1].group == "gemm bf16");
  CHECK(comparison.summaries[2].group == "memory rmsnorm_fwd");
  CHECK(comparison.summaries[2].median_abs_error == Approx(0.5));
}

TEST_CASE("compare_profile output: JSON fields and tables", "[profiler][compare]") {
  const ProfileComparison comparison = compare_profile(measured_profile(), RoundModel());
  const nlohmann::json json = profile_comparison_to_json(comparison);
  CHECK(json.at("format") == "fsdptune-profile-comparison");
  CHECK(json.at("version") == 1);
  CHECK(json.at("ops").size() == 2);
  CHECK(json.at("ops")[1].at("rate_unit") == "bytes/s");
  CHECK(json.at("collectives")[1].at("relative_error").get<double>() == Approx(1.0));
  CHECK(json.at("summaries").size() == 3);

  std::ostringstream text;
  print_profile_comparison(text, comparison, false);
  CHECK_THAT(text.str(), Catch::Contains("gemm bf16 m=1024 n=1024 k=1024") &&
                             Catch::Contains("+50.0%") && Catch::Contains("1.1 TFLOP/s"));
  // A CPU's rate in GFLOP/s (found by QA: every CPU GEMM printed "0.0 TFLOP/s").
  Profile slow = measured_profile();
  slow.compute[0].samples_s = {1.0};
  std::ostringstream slow_text;
  print_profile_comparison(slow_text, compare_profile(slow, RoundModel()), false);
  CHECK_THAT(slow_text.str(), Catch::Contains("2.1 GFLOP/s"));
  // A collective's bus bandwidth in the unit it reads in (found by QA: a 1 KiB point's
  // 28.9 MB/s read 0.0 GB/s): 1e6 bytes in 2 ms over 4 ranks, x 3/4.
  CHECK_THAT(text.str(), Catch::Contains("375.0 MB/s"));
  std::ostringstream markdown;
  print_profile_comparison(markdown, comparison, true);
  CHECK_THAT(markdown.str(), Catch::Contains("| compute op | samples | measured | model |") &&
                                 Catch::Contains("|---|---:|") &&
                                 Catch::Contains("| all_gather 3.81 MiB | 4/4 |"));
}

TEST_CASE("compare_profile prices a bucket copy with the model's copy()", "[profiler][compare]") {
  // A 2 MB copy measured 4 ms; RoundModel::copy = 2e6 / 1e9 = 2 ms (its compute() would say
  // 3 ms): (2 - 4) / 4 = -50%; 2e6 bytes read and 2e6 written in 4 ms: 1e9 bytes/s of
  // traffic, as the other memory-bound rows count theirs.
  Profile profile;
  Op copy;
  copy.kind = OpKind::kMemoryBound;
  copy.name = "bucket_copy";
  copy.memory_op = "copy";
  copy.bytes = 2'000'000;
  profile.compute.push_back({copy.signature(), copy, {4e-3}});
  const ProfileComparison comparison = compare_profile(profile, RoundModel());
  REQUIRE(comparison.ops.size() == 1);
  CHECK(comparison.ops[0].model_s == Approx(2e-3));
  CHECK(comparison.ops[0].relative_error == Approx(-0.5));
  CHECK(comparison.ops[0].measured_rate == Approx(1e9));
  REQUIRE(comparison.summaries.size() == 1);
  CHECK(comparison.summaries[0].group == "memory copy");
}

TEST_CASE("compare_profile: attention's rate in the FLOPs its kernels execute",
          "[profiler][compare]") {
  // Found probing: a causal forward was quoted at its model FLOPs' rate, twice what its
  // kernel executes (1221.7 TFLOP/s on an H100, above the peak).
  Profile profile;
  profile.hardware = "h200";
  const Op attention = attention_op_of({1, 32, 8, 8192, 128, true, 1}, DType::kBF16, false);
  profile.compute.push_back({attention.signature(), attention, {2e-3}});
  const ProfileComparison comparison = compare_profile(profile, RoundModel());
  REQUIRE(comparison.ops.size() == 1);
  CHECK(comparison.ops[0].measured_rate == Approx(attention_executed_flops(attention) / 2e-3));
  CHECK(comparison.ops[0].measured_rate < attention.flops / 2e-3);
}
