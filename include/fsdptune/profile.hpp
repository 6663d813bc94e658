// Cost profiles: measured compute and collective costs (docs/profile-format.md).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fsdptune/cost_model.hpp"
#include "fsdptune/workload.hpp"

namespace fsdptune {

inline constexpr int kProfileFormatVersion = 1;

// The longest sample a profile holds: far beyond any kernel, so that the steps simulated
// with the profile stay finite.
inline constexpr double kMaxSampleSeconds = 1e9;
// The shortest: a picosecond, far below any kernel or collective (and any clock's
// resolution), so that the rates computed from a sample stay finite (a denormal sample
// gave an infinite bus bandwidth).
inline constexpr double kMinSampleSeconds = 1e-12;

struct ComputeEntry {
  std::string signature;          // Op::signature()
  Op op;                          // the op measured (shape, dtype, flops, bytes)
  std::vector<double> samples_s;  // kernel durations, one per repetition
  int part = -1;                  // merged profiles: index in Profile::parts it came from
  bool operator==(const ComputeEntry&) const = default;
};

struct CollectivePoint {
  std::int64_t bytes = 0;  // full buffer, nccl-tests convention
  std::vector<double> samples_s;
  bool operator==(const CollectivePoint&) const = default;
};

struct CollectiveSweep {
  CollectiveKind kind = CollectiveKind::kAllGather;
  CommGroup group;
  std::vector<CollectivePoint> points;  // sorted by bytes
  int part = -1;                        // merged profiles: index in Profile::parts
  bool operator==(const CollectiveSweep&) const = default;
};

// The per-node count a sweep over `group` is keyed by (the reader, the cost model's lookup,
// profile merge, `cost`'s source label): one above the group's size is the group's size, so
// 8 ranks at 16 per node is the sweep at 8 per node.
std::int64_t sweep_ranks_per_node(const CommGroup& group);

struct Provenance {
  std::string tool;     // "fsdptune 0.1.0"
  std::string date;     // ISO 8601
  std::string method;   // "cupti", "cpu-steady-clock", "nccl-tests import", "kineto import"
  std::string command;  // command line that produced it
  std::map<std::string, std::string> environment;  // gpu, driver, cuda, nccl versions, host
  bool operator==(const Provenance&) const = default;
};

// One input of a merged profile (`fsdptune profile merge`, profile_merge.hpp): where it
// came from and how it was measured, so that each entry of the merge keeps its provenance.
struct ProfilePart {
  std::string source;     // the file merged in, as named on the command line
  Provenance provenance;  // that file's provenance, unchanged
  bool operator==(const ProfilePart&) const = default;
};

struct Profile {
  int version = kProfileFormatVersion;
  std::string hardware;  // HardwareSpec id this profile was measured on
  std::vector<ComputeEntry> compute;
  std::vector<CollectiveSweep> collectives;
  ContentionFactors contention;
  Provenance provenance;
  // Empty unless merged. When not empty, every compute entry and sweep names its part
  // (0 <= part < parts.size()), and contention_part is the part the contention factors
  // came from (-1: the defaults, no part measured them).
  std::vector<ProfilePart> parts;
  int contention_part = -1;
  bool operator==(const Profile&) const = default;
};

// Throws Error(kBadInput) naming `source` and the field (wrong version, negative time...).
// Checks: "format" is "fsdptune-profile" when present, version == kProfileFormatVersion,
// every sample finite and > 0, at least one sample per entry/point, points strictly
// increasing in bytes, each compute signature equal to its op's signature() and unique,
// each (kind, ranks, ranks_per_node) sweep unique, contention factors positive, and for a
// merged profile (non-empty "parts") every "part" index in range.
Profile profile_from_json(const nlohmann::json& json, const std::string& source);
// Deterministic: profile_to_json(profile_from_json(profile_to_json(p))) dumps to the same
// bytes as profile_to_json(p).
nlohmann::json profile_to_json(const Profile& profile);

// The statistic a profile-backed cost model takes of a list of samples: the median (the
// mean of the two middle samples for an even count). REQUIRES: !samples_s.empty().
double median_seconds(const std::vector<double>& samples_s);

// t = latency_s + bytes / bytes_per_s, fitted by least squares on relative error (each
// point weighted 1/t, so small sizes count as much as large ones). bytes_per_s is +inf
// when the times do not grow with size. REQUIRES: at least two distinct sizes.
struct LatencyBandwidthFit {
  double latency_s = 0;
  double bytes_per_s = 0;
  bool operator==(const LatencyBandwidthFit&) const = default;
};
LatencyBandwidthFit fit_latency_bandwidth(const std::vector<std::int64_t>& bytes,
                                          const std::vector<double>& seconds);

}  // namespace fsdptune
