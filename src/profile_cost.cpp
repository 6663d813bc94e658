// The profile-backed cost model: measured tables first, the analytic model where a
// profile has nothing (docs/profile-format.md, "How a profile is used").
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "fsdptune/cost_model.hpp"
#include "fsdptune/error.hpp"
#include "fsdptune/profile.hpp"

namespace fsdptune {
namespace {

// Points of one measured size sweep (bytes -> median seconds), increasing in bytes, with
// latency/bandwidth fits of its two ends for sizes outside the table.
class SizeCurve {
 public:
  // At most this many points at each end feed the fit of that end: the ends of a sweep
  // are in different regimes (latency-bound vs bandwidth-bound), so a fit over the whole
  // sweep would describe neither.
  static constexpr std::size_t kFitPoints = 4;

  void add(std::int64_t bytes, double seconds) {
    bytes_.push_back(bytes);
    seconds_.push_back(seconds);
  }

  // REQUIRES: points added in strictly increasing bytes.
  void finish() {
    if (bytes_.size() < 2) return;
    const std::size_t count = std::min(kFitPoints, bytes_.size());
    low_ = fit_latency_bandwidth({bytes_.begin(), bytes_.begin() + static_cast<long>(count)},
                                 {seconds_.begin(), seconds_.begin() + static_cast<long>(count)});
    high_ = fit_latency_bandwidth({bytes_.end() - static_cast<long>(count), bytes_.end()},
                                  {seconds_.end() - static_cast<long>(count), seconds_.end()});
  }

  // Seconds for `bytes`, or nothing when the table cannot say (a single point, and
  // `bytes` is not that point).
  std::optional<double> seconds(std::int64_t bytes) const {
    const auto upper = std::lower_bound(bytes_.begin(), bytes_.end(), bytes);
    if (upper != bytes_.end() && *upper == bytes) {
      return seconds_[static_cast<std::size_t>(upper - bytes_.begin())];  // exact
    }
    if (bytes_.size() < 2) return std::nullopt;
    const auto size = static_cast<double>(bytes);
    if (upper == bytes_.begin()) {
      // Below the table: slide down the low end's fitted slope from the first point,
      // never below the fitted latency, never above the first point.
      const double first_bytes = static_cast<double>(bytes_.front());
      const double first_s = seconds_.front();
      const double floor_s =
          low_.latency_s > 0 ? std::min(low_.latency_s, first_s) : first_s * size / first_bytes;
      return std::clamp(first_s - (first_bytes - size) / low_.bytes_per_s, floor_s, first_s);
    }
    if (upper == bytes_.end()) {
      // Above the table: continue from the last point at the high end's fitted bandwidth;
      // proportionally to size when the fit found no bandwidth term.
      const double last_bytes = static_cast<double>(bytes_.back());
      const double last_s = seconds_.back();
      if (!(high_.bytes_per_s > 0) || std::isinf(high_.bytes_per_s)) {
        return last_s * size / last_bytes;
      }
      return last_s + (size - last_bytes) / high_.bytes_per_s;
    }
    // Between two measured sizes: straight line in log(bytes)-log(seconds).
    const std::size_t right = static_cast<std::size_t>(upper - bytes_.begin());
    const std::size_t left = right - 1;
    const double x0 = std::log(static_cast<double>(bytes_[left]));
    const double x1 = std::log(static_cast<double>(bytes_[right]));
    const double y0 = std::log(seconds_[left]);
    const double y1 = std::log(seconds_[right]);
    return std::exp(y0 + (std::log(size) - x0) * (y1 - y0) / (x1 - x0));
  }

  bool covers(std::int64_t bytes) const {
    return !bytes_.empty() && bytes >= bytes_.front() && bytes <= bytes_.back();
  }

  // The measured point at the end of the table nearest `bytes` (bytes, seconds), nothing
  // for an empty table.
  std::optional<std::pair<std::int64_t, double>> nearest_end(std::int64_t bytes) const {
    if (bytes_.empty()) return std::nullopt;
    if (bytes < bytes_.front()) return std::pair{bytes_.front(), seconds_.front()};
    return std::pair{bytes_.back(), seconds_.back()};
  }

 private:
  std::vector<std::int64_t> bytes_;
  std::vector<double> seconds_;
  LatencyBandwidthFit low_;
  LatencyBandwidthFit high_;
};

using SweepKey = std::tuple<CollectiveKind, std::int64_t, std::int64_t>;

SweepKey sweep_key(CollectiveKind kind, const CommGroup& group) {
  // A per-node count above the group size means the same thing as the group size.
  return {kind, group.ranks, sweep_ranks_per_node(group)};
}

// Memory-bound entries of this name are device-to-device copies (CostModel::copy).
constexpr const char* kCopyMemoryOp = "copy";

// A memory-bound kernel of a measured kind at `bytes`, outside its measured sizes: the
// nearest measured point (`end`) plus what the analytic model adds or takes away between
// the two sizes (`analytic_s` at `bytes`, `analytic_end_s` at the point's), so the
// kernel's own launch overhead and efficiency at that point carry over and only the
// difference is modelled, as a collective's sweep continues past its ends. Below the
// table never under the point's time scaled down by size (a smaller pass is no faster
// per byte).
double anchored_seconds(std::pair<std::int64_t, double> end, std::int64_t bytes, double analytic_s,
                        double analytic_end_s) {
  const auto [end_bytes, end_s] = end;
  const double seconds = end_s + (analytic_s - analytic_end_s);
  if (bytes >= end_bytes || end_bytes <= 0) return seconds;
  return std::max(seconds, end_s * static_cast<double>(bytes) / static_cast<double>(end_bytes));
}

// `op` at another size: bytes, and FLOPs in proportion.
Op resized(Op op, std::int64_t bytes) {
  if (op.bytes > 0) op.flops *= static_cast<double>(bytes) / static_cast<double>(op.bytes);
  op.bytes = bytes;
  return op;
}

class ProfileCostModel final : public CostModel {
 public:
  ProfileCostModel(const Profile& profile, const HardwareSpec& hardware)
      : analytic_(make_analytic_cost_model(hardware)), contention_(profile.contention) {
    std::map<std::string, std::vector<std::pair<std::int64_t, double>>> memory_points;
    for (const ComputeEntry& entry : profile.compute) {
      const double seconds = median_seconds(entry.samples_s);
      compute_s_[entry.signature] = seconds;
      if (entry.op.kind == OpKind::kMemoryBound) {
        memory_points[entry.op.memory_op].emplace_back(entry.op.bytes, seconds);
      }
    }
    for (auto& [memory_op, points] : memory_points) {
      std::sort(points.begin(), points.end());
      SizeCurve& curve = memory_curves_[memory_op];
      for (const auto& [bytes, seconds] : points) curve.add(bytes, seconds);
      curve.finish();
    }
    for (const CollectiveSweep& sweep : profile.collectives) {
      SizeCurve& curve = collective_curves_[sweep_key(sweep.kind, sweep.group)];
      for (const CollectivePoint& point : sweep.points) {
        curve.add(point.bytes, median_seconds(point.samples_s));
      }
      curve.finish();
    }
  }

  CostEstimate compute(const Op& op) const override {
    if (op.kind == OpKind::kCollective) return collective(op.collective, op.bytes, op.group);
    const auto exact = compute_s_.find(op.signature());
    if (exact != compute_s_.end()) return {exact->second, true};
    if (op.kind == OpKind::kMemoryBound) {
      // Another size of a measured memory-bound kernel: interpolated inside the measured
      // range; outside it anchored at the nearest end, the rest the analytic model's (a
      // kernel may change regime there, e.g. fall out of L2, which the analytic difference
      // only partly follows).
      const auto curve = memory_curves_.find(op.memory_op);
      if (curve != memory_curves_.end()) {
        if (curve->second.covers(op.bytes)) return {*curve->second.seconds(op.bytes), true};
        if (const auto end = curve->second.nearest_end(op.bytes)) {
          return {anchored_seconds(*end, op.bytes, analytic_->compute(op).seconds,
                                   analytic_->compute(resized(op, end->first)).seconds),
                  true};
        }
      }
    }
    return analytic_->compute(op);
  }

  CostEstimate collective(CollectiveKind kind, std::int64_t bytes, CommGroup group) const override {
    FSDPTUNE_CHECK(bytes >= 0, "negative collective size");
    if (bytes == 0) return {0, true};
    // One rank: a copy for a reduce-scatter, nothing else (analytic model's collective()).
    if (group.ranks == 1) {
      return kind == CollectiveKind::kReduceScatter ? copy(bytes) : CostEstimate{0, true};
    }
    const auto curve = collective_curves_.find(sweep_key(kind, group));
    if (curve != collective_curves_.end()) {
      if (const std::optional<double> seconds = curve->second.seconds(bytes)) {
        return {*seconds, true};
      }
    }
    return analytic_->collective(kind, bytes, group);
  }

  CostEstimate copy(std::int64_t bytes) const override {
    FSDPTUNE_CHECK(bytes >= 0, "negative copy size");
    if (bytes == 0) return {0, true};
    const auto curve = memory_curves_.find(kCopyMemoryOp);
    if (curve != memory_curves_.end()) {
      if (curve->second.covers(bytes)) return {*curve->second.seconds(bytes), true};
      if (const auto end = curve->second.nearest_end(bytes)) {
        return {anchored_seconds(*end, bytes, analytic_->copy(bytes).seconds,
                                 analytic_->copy(end->first).seconds),
                true};
      }
    }
    return analytic_->copy(bytes);
  }

  ContentionFactors contention() const override { return contention_; }
  const HardwareSpec& hardware() const override { return analytic_->hardware(); }

 private:
  std::unique_ptr<CostModel> analytic_;
  ContentionFactors contention_;
  std::map<std::string, double> compute_s_;
  std::map<std::string, SizeCurve> memory_curves_;
  std::map<SweepKey, SizeCurve> collective_curves_;
};

}  // namespace

std::unique_ptr<CostModel> make_profile_cost_model(const Profile& profile,
                                                   const HardwareSpec& hardware) {
  if (profile.hardware != hardware.id) {
    throw_bad_input(
        "profile",
        fmt::format("measured on '{}' but the hardware is '{}'", profile.hardware, hardware.id),
        "pass the hardware the profile was measured on");
  }
  return std::make_unique<ProfileCostModel>(profile, hardware);
}

}  // namespace fsdptune
