#include <catch2/catch.hpp>

#include <algorithm>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "fsdptune/cost_model.hpp"
#include "fsdptune/error.hpp"
#include "fsdptune/hardware.hpp"
#include "fsdptune/profile.hpp"
#include "fsdptune/units.hpp"

using namespace fsdptune;

namespace {

Op gemm(std::int64_t m, std::int64_t n, std::int64_t k) {
  Op op;
  op.kind = OpKind::kGemm;
  op.name = "gemm";
  op.gemm = {m, n, k};
  op.flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  return op;
}

Op memory_op(const std::string& kind, std::int64_t bytes) {
  Op op;
  op.kind = OpKind::kMemoryBound;
  op.name = kind;
  op.memory_op = kind;
  op.bytes = bytes;
  return op;
}

// The public 8xH100 sweep as a profile: one sample per point.
Profile reference_profile() {
  std::ifstream in(std::string(FSDPTUNE_TEST_DATA) + "/h100x8_collectives.csv");
  REQUIRE(in);
  Profile profile;
  profile.hardware = "h100-sxm";
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) {
    std::stringstream fields(line);
    std::string kind, ranks, bytes, time_us;
    std::getline(fields, kind, ',');
    std::getline(fields, ranks, ',');
    std::getline(fields, bytes, ',');
    std::getline(fields, time_us, ',');
    const CollectiveKind parsed = collective_from_string(kind, "csv");
    if (profile.collectives.empty() || profile.collectives.back().kind != parsed) {
      profile.collectives.push_back({parsed, {std::stoll(ranks), 8}, {}});
    }
    profile.collectives.back().points.push_back({std::stoll(bytes), {std::stod(time_us) * 1e-6}});
  }
  return profile;
}

}  // namespace

TEST_CASE("profile model is exact at every measured point", "[profile-cost]") {
  const Profile profile = reference_profile();
  REQUIRE(profile.collectives.size() == 3);
  const auto model = make_profile_cost_model(profile, builtin_hardware("h100-sxm"));
  for (const CollectiveSweep& sweep : profile.collectives) {
    for (const CollectivePoint& point : sweep.points) {
      const CostEstimate estimate = model->collective(sweep.kind, point.bytes, sweep.group);
      CHECK(estimate.measured);
      CHECK(estimate.seconds == point.samples_s[0]);
    }
  }
}

TEST_CASE("profile model interpolates log-log between sizes", "[profile-cost]") {
  Profile profile;
  profile.hardware = "h100-sxm";
  // (1 MiB, 10 us) and (4 MiB, 20 us): in log-log a line of slope log 2 / log 4 = 0.5, so
  // 2 MiB -> 10 us * 2^0.5 = 14.1421 us.
  profile.collectives.push_back(
      {CollectiveKind::kAllGather, {8, 8}, {{kMiB, {10e-6, 11e-6, 9e-6}}, {4 * kMiB, {20e-6}}}});
  const auto model = make_profile_cost_model(profile, builtin_hardware("h100-sxm"));
  CHECK(model->collective(CollectiveKind::kAllGather, kMiB, {8, 8}).seconds == 10e-6);  // median
  CHECK(model->collective(CollectiveKind::kAllGather, 2 * kMiB, {8, 8}).seconds ==
        Approx(14.1421356e-6).epsilon(1e-6));
  // A per-node count above the group size is the same group.
  CHECK(model->collective(CollectiveKind::kAllGather, 2 * kMiB, {8, 16}).measured);
}

TEST_CASE("profile model extrapolates with latency/bandwidth fits", "[profile-cost]") {
  // An exact alpha + S/beta sweep (alpha 20 us, beta 350 GB/s) from 1 MiB to 1 GiB: the
  // fits of both ends recover the line, so extrapolation continues it.
  const double alpha_s = 20e-6;
  const double beta_bytes_per_s = 350e9;
  auto line_s = [&](double bytes) { return alpha_s + bytes / beta_bytes_per_s; };
  Profile profile;
  profile.hardware = "h200";
  CollectiveSweep sweep{CollectiveKind::kReduceScatter, {8, 8}, {}};
  for (std::int64_t bytes = kMiB; bytes <= kGiB; bytes *= 2) {
    sweep.points.push_back({bytes, {line_s(static_cast<double>(bytes))}});
  }
  profile.collectives.push_back(sweep);
  const auto model = make_profile_cost_model(profile, builtin_hardware("h200"));
  for (const std::int64_t bytes : {4 * kGiB, 3 * kGiB + 7, 16 * kGiB}) {
    const CostEstimate estimate = model->collective(CollectiveKind::kReduceScatter, bytes, {8, 8});
    CHECK(estimate.measured);
    CHECK(estimate.seconds == Approx(line_s(static_cast<double>(bytes))).epsilon(1e-6));
  }
  for (const std::int64_t bytes : {kKiB, 64 * kKiB, 512 * kKiB}) {
    const CostEstimate estimate = model->collective(CollectiveKind::kReduceScatter, bytes, {8, 8});
    CHECK(estimate.seconds == Approx(line_s(static_cast<double>(bytes))).epsilon(1e-6));
  }
  // Monotone across the whole range, inside and outside the table.
  double previous_s = 0;
  for (double bytes = 1; bytes < 64.0 * static_cast<double>(kGiB); bytes *= 1.5) {
    const double seconds =
        model->collective(CollectiveKind::kReduceScatter, static_cast<std::int64_t>(bytes), {8, 8})
            .seconds;
    CHECK(seconds >= previous_s);
    previous_s = seconds;
  }
}

TEST_CASE("profile model falls back to the analytic model, and says so", "[profile-cost]") {
  const HardwareSpec h100 = builtin_hardware("h100-sxm");
  const auto analytic = make_analytic_cost_model(h100);
  Profile profile;
  profile.hardware = "h100-sxm";
  const Op measured_gemm = gemm(8192, 4096, 4096);
  profile.compute.push_back({measured_gemm.signature(), measured_gemm, {3e-4, 5e-4, 4e-4}});
  profile.compute.push_back(
      {memory_op("rmsnorm_fwd", kMiB).signature(), memory_op("rmsnorm_fwd", kMiB), {2e-6}});
  profile.compute.push_back(
      {memory_op("rmsnorm_fwd", 4 * kMiB).signature(), memory_op("rmsnorm_fwd", 4 * kMiB), {4e-6}});
  // A kernel measured faster than the analytic HBM rate (4 MiB in 1 us: in L2).
  profile.compute.push_back(
      {memory_op("swiglu_fwd", 4 * kMiB).signature(), memory_op("swiglu_fwd", 4 * kMiB), {1e-6}});
  profile.compute.push_back({memory_op("copy", kMiB).signature(), memory_op("copy", kMiB), {3e-6}});
  profile.compute.push_back({memory_op("copy", kGiB).signature(), memory_op("copy", kGiB), {5e-4}});
  profile.collectives.push_back({CollectiveKind::kAllGather, {8, 8}, {{kMiB, {25e-6}}}});
  profile.contention = {1.2, 0.8};
  const auto model = make_profile_cost_model(profile, h100);

  // Measured: the median of the samples.
  CHECK(model->compute(measured_gemm).measured);
  CHECK(model->compute(measured_gemm).seconds == 4e-4);
  // Unmeasured shape: analytic, counted as a fallback.
  const Op other = gemm(4096, 4096, 4096);
  CHECK_FALSE(model->compute(other).measured);
  CHECK(model->compute(other).seconds == analytic->compute(other).seconds);
  // Memory-bound: interpolated inside the measured sizes of the same kernel
  // (1 MiB -> 2 us, 4 MiB -> 4 us: 2 MiB -> 2 * 2^0.5 = 2.8284 us).
  CHECK(model->compute(memory_op("rmsnorm_fwd", 2 * kMiB)).measured);
  CHECK(model->compute(memory_op("rmsnorm_fwd", 2 * kMiB)).seconds ==
        Approx(2.8284271e-6).epsilon(1e-6));
  // Outside them, anchored at the nearest end: its time plus the analytic difference.
  const auto analytic_s = [&](std::int64_t bytes) {
    return analytic->compute(memory_op("rmsnorm_fwd", bytes)).seconds;
  };
  const CostEstimate above = model->compute(memory_op("rmsnorm_fwd", 64 * kMiB));
  CHECK(above.measured);
  CHECK(above.seconds == Approx(4e-6 + analytic_s(64 * kMiB) - analytic_s(4 * kMiB)));
  CHECK(above.seconds > 4e-6);
  // Below: the same from the first point, never under its time scaled by size (here the
  // analytic difference, 0.5 MiB at the HBM rate, is the larger step down).
  const CostEstimate below = model->compute(memory_op("rmsnorm_fwd", kMiB / 2));
  CHECK(below.measured);
  CHECK(below.seconds == Approx(std::max(2e-6 + analytic_s(kMiB / 2) - analytic_s(kMiB), 1e-6)));
  CHECK(below.seconds < 2e-6);
  // A kernel never measured: analytic.
  CHECK_FALSE(model->compute(memory_op("rope_fwd", 2 * kMiB)).measured);
  // Copies from the "copy" entries, anchored the same way outside them.
  CHECK(model->copy(kMiB).seconds == 3e-6);
  CHECK(model->copy(kMiB).measured);
  CHECK(model->copy(2 * kGiB).measured);
  CHECK(model->copy(2 * kGiB).seconds ==
        Approx(5e-4 + analytic->copy(2 * kGiB).seconds - analytic->copy(kGiB).seconds));
  // Going down from a point measured faster than the analytic rate, the analytic step
  // down would pass zero: the point's time scaled by size instead.
  const CostEstimate small = model->compute(memory_op("swiglu_fwd", 4 * kKiB));
  CHECK(small.measured);
  CHECK(small.seconds == Approx(1e-6 / 1024));
  // Over one rank a reduce-scatter is the profile's copy of its buffer, an all-gather
  // (in place) nothing.
  CHECK(model->collective(CollectiveKind::kReduceScatter, kMiB, {1, 1}).seconds == 3e-6);
  CHECK(model->collective(CollectiveKind::kReduceScatter, kMiB, {1, 1}).measured);
  CHECK(model->collective(CollectiveKind::kAllGather, kMiB, {1, 1}).seconds == 0);
  // A single-point sweep answers only its own size; other groups fall back.
  CHECK(model->collective(CollectiveKind::kAllGather, kMiB, {8, 8}).seconds == 25e-6);
  CHECK_FALSE(model->collective(CollectiveKind::kAllGather, 2 * kMiB, {8, 8}).measured);
  CHECK_FALSE(model->collective(CollectiveKind::kAllGather, kMiB, {16, 8}).measured);
  CHECK_FALSE(model->collective(CollectiveKind::kAllReduce, kMiB, {8, 8}).measured);
  CHECK(model->collective(CollectiveKind::kAllReduce, kMiB, {8, 8}).seconds ==
        analytic->collective(CollectiveKind::kAllReduce, kMiB, {8, 8}).seconds);
  // TP collectives inside compute use the sweeps.
  Op tp;
  tp.kind = OpKind::kCollective;
  tp.collective = CollectiveKind::kAllGather;
  tp.group = {8, 8};
  tp.bytes = kMiB;
  CHECK(model->compute(tp).measured);
  CHECK(model->contention() == ContentionFactors{1.2, 0.8, 1});
  CHECK(model->hardware() == h100);

  // Counting fallbacks over a list of ops, as a simulation result does.
  const std::vector<Op> ops = {measured_gemm, other, memory_op("rmsnorm_fwd", kMiB), tp};
  int fallbacks = 0;
  for (const Op& op : ops) fallbacks += model->compute(op).measured ? 0 : 1;
  CHECK(fallbacks == 1);
}

TEST_CASE("a profile of other hardware is refused", "[profile-cost]") {
  Profile profile;
  profile.hardware = "a100-80g";
  try {
    make_profile_cost_model(profile, builtin_hardware("h100-sxm"));
    FAIL("accepted a profile of other hardware");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kBadInput);
    CHECK_THAT(e.message(), Catch::Contains("a100-80g"));
  }
}
