// A measured profile against a cost model, entry by entry (`fsdptune profile compare`,
// docs/profiling.md "How far is the analytic model"): e.g. a CUPTI profile of an H200
// against the analytic H200 model. Pure; printing goes to a caller's stream.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fsdptune/cost_model.hpp"
#include "fsdptune/profile.hpp"

namespace fsdptune {

// One compute entry: its measured median against the model's estimate.
struct OpComparison {
  std::string signature;
  Op op;
  std::int64_t samples = 0;
  double measured_s = 0;      // median_seconds of the samples
  double model_s = 0;         // CostModel::compute(op); copy(op.bytes) for "copy" entries
  double relative_error = 0;  // (model - measured) / measured
  // Achieved by the measurement: FLOP/s for GEMMs and attention, bytes/s for memory-bound
  // ops (flops / measured_s or bytes / measured_s; for a copy, the bytes copied per second).
  double measured_rate = 0;
  bool operator==(const OpComparison&) const = default;
};

// One point of a collective sweep.
struct CollectiveComparison {
  CollectiveKind kind = CollectiveKind::kAllGather;
  CommGroup group;
  std::int64_t bytes = 0;
  double measured_s = 0;
  double model_s = 0;
  double relative_error = 0;
  double measured_busbw_bytes_per_s = 0;  // bytes / measured_s * busbw_factor
  bool operator==(const CollectiveComparison&) const = default;
};

// Median |relative_error| of one group of rows ("gemm", "attention_fwd", "memory
// rmsnorm_fwd", "all_gather", ...), and the signed error of the largest row by time.
struct ComparisonSummary {
  std::string group;
  std::int64_t rows = 0;
  double median_abs_error = 0;
  double measured_s = 0;  // sum over the group's rows
  double model_s = 0;     // sum
  bool operator==(const ComparisonSummary&) const = default;
};

struct ProfileComparison {
  std::string profile_hardware;
  std::string model_hardware;
  std::vector<OpComparison> ops;                  // in profile order
  std::vector<CollectiveComparison> collectives;  // sweep by sweep, by bytes
  std::vector<ComparisonSummary> summaries;       // by group name
  bool operator==(const ProfileComparison&) const = default;
};

// Every compute entry and every collective point of `profile` against `model` (typically
// make_analytic_cost_model of the spec the profile was measured on). A model answer with
// measured == true is still taken: comparing against another profile is allowed.
ProfileComparison compare_profile(const Profile& profile, const CostModel& model);

nlohmann::json profile_comparison_to_json(const ProfileComparison& comparison);
// A table per section; `markdown` writes GitHub tables (for docs/validation.md).
void print_profile_comparison(std::ostream& out, const ProfileComparison& comparison,
                              bool markdown);

}  // namespace fsdptune
