// Cost profile JSON (docs/profile-format.md) and the statistics taken of its samples.
#include "fsdptune/profile.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <Eigen/Dense>

#include "fsdptune/error.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/units.hpp"

namespace fsdptune {
namespace {

constexpr const char* kFormat = "fsdptune-profile";

// The path of `key` in the object at `where`: "p.json: compute" at the top ("p.json: "),
// "p.json: compute[3].op" below it.
std::string key_path(const std::string& where, const char* key) {
  return where.ends_with(": ") ? where + key : fmt::format("{}.{}", where, key);
}

// A misspelt field would otherwise be ignored (a contention factor silently at its
// default); model, hardware and plan files refuse them too.
void reject_unknown_fields(const nlohmann::json& object, const std::vector<std::string>& known,
                           const std::string& where) {
  if (const auto key = unknown_field(object, known)) {
    throw_bad_input(key_path(where, key->c_str()), "unknown field",
                    "docs/profile-format.md lists the fields");
  }
}

const nlohmann::json& require(const nlohmann::json& object, const char* key,
                              const std::string& where) {
  const auto it = object.find(key);
  if (it == object.end()) throw_bad_input(key_path(where, key), "missing");
  return *it;
}

std::string require_string(const nlohmann::json& object, const char* key,
                           const std::string& where) {
  const nlohmann::json& value = require(object, key, where);
  if (!value.is_string()) throw_bad_input(key_path(where, key), "must be a string");
  return value.get<std::string>();
}

// A positive integer of at most `max`: rank counts as a job's (kMaxJobGpus), sizes as an
// op's (kMaxOpCount), far above any real measurement.
std::int64_t require_positive_integer(const nlohmann::json& object, const char* key,
                                      const std::string& where, std::int64_t max) {
  const nlohmann::json& value = require(object, key, where);
  if (!value.is_number_integer()) {
    throw_bad_input(key_path(where, key), "must be a positive integer");
  }
  // Above INT64_MAX said as such, not wrapped to a negative (review).
  const std::int64_t number = json_int64(value, key_path(where, key));
  if (number <= 0) throw_bad_input(key_path(where, key), "must be a positive integer");
  if (number > max) {
    throw_bad_input(key_path(where, key), fmt::format("is {}, expected at most {}", number, max));
  }
  return number;
}

double require_positive_number(const nlohmann::json& object, const char* key,
                               const std::string& where) {
  const nlohmann::json& value = require(object, key, where);
  if (!value.is_number()) throw_bad_input(key_path(where, key), "must be a number");
  const double number = value.get<double>();
  if (!std::isfinite(number) || number <= 0) {
    throw_bad_input(key_path(where, key),
                    fmt::format("must be a positive number (got {})", number));
  }
  return number;
}

const nlohmann::json& require_array(const nlohmann::json& object, const char* key,
                                    const std::string& where) {
  const nlohmann::json& value = require(object, key, where);
  if (!value.is_array()) throw_bad_input(key_path(where, key), "must be an array");
  return value;
}

std::vector<double> read_samples(const nlohmann::json& object, const std::string& where) {
  const nlohmann::json& array = require_array(object, "samples_s", where);
  if (array.empty()) {
    throw_bad_input(where + ".samples_s", "has no samples", "a measurement needs at least one");
  }
  std::vector<double> samples;
  samples.reserve(array.size());
  for (std::size_t i = 0; i < array.size(); ++i) {
    const std::string sample_where = fmt::format("{}.samples_s[{}]", where, i);
    if (!array[i].is_number()) throw_bad_input(sample_where, "time is not a number");
    const double seconds = array[i].get<double>();
    if (!std::isfinite(seconds) || seconds <= 0) {
      throw_bad_input(sample_where, fmt::format("time must be positive (got {})", seconds));
    }
    if (seconds < kMinSampleSeconds) {
      throw_bad_input(sample_where,
                      fmt::format("time {} s is less than {} s", seconds, kMinSampleSeconds));
    }
    if (seconds > kMaxSampleSeconds) {
      throw_bad_input(sample_where,
                      fmt::format("time {} s is more than {} s", seconds, kMaxSampleSeconds));
    }
    samples.push_back(seconds);
  }
  return samples;
}

Provenance read_provenance(const nlohmann::json& provenance, const std::string& where) {
  if (!provenance.is_object()) throw_bad_input(where, "must be an object");
  reject_unknown_fields(provenance, {"tool", "date", "method", "command", "environment"}, where);
  auto optional_string = [&](const char* key) {
    if (!provenance.contains(key)) return std::string();
    return require_string(provenance, key, where);
  };
  Provenance result;
  result.tool = optional_string("tool");
  result.date = optional_string("date");
  result.method = optional_string("method");
  result.command = optional_string("command");
  if (provenance.contains("environment")) {
    const nlohmann::json& environment = provenance["environment"];
    if (!environment.is_object()) throw_bad_input(where + ".environment", "must be an object");
    for (const auto& [key, value] : environment.items()) {
      if (!value.is_string()) {
        throw_bad_input(fmt::format("{}.environment.{}", where, key), "must be a string");
      }
      result.environment[key] = value.get<std::string>();
    }
  }
  return result;
}

nlohmann::json provenance_to_json(const Provenance& provenance) {
  nlohmann::json environment = nlohmann::json::object();
  for (const auto& [key, value] : provenance.environment) environment[key] = value;
  return {{"tool", provenance.tool},
          {"date", provenance.date},
          {"method", provenance.method},
          {"command", provenance.command},
          {"environment", environment}};
}

// The "part" of an entry of a merged profile (`parts` parts): required, in range. An
// unmerged profile (parts == 0) must not have one.
int read_part(const nlohmann::json& object, std::size_t parts, const std::string& where) {
  if (parts == 0) {
    if (object.contains("part")) {
      throw_bad_input(where + ".part", "only a merged profile (with \"parts\") names parts");
    }
    return -1;
  }
  const nlohmann::json& value = require(object, "part", where);
  if (!value.is_number_integer() || value.get<std::int64_t>() < 0 ||
      value.get<std::int64_t>() >= static_cast<std::int64_t>(parts)) {
    throw_bad_input(where + ".part", fmt::format("must be an index into parts (0..{})", parts - 1));
  }
  return value.get<int>();
}

}  // namespace

std::int64_t sweep_ranks_per_node(const CommGroup& group) {
  return std::min(group.ranks_per_node, group.ranks);
}

Profile profile_from_json(const nlohmann::json& json, const std::string& source) {
  if (!json.is_object()) throw_bad_input(source, "a profile must be a JSON object");
  check_format_field(json, kFormat, source + ": field 'format'");
  if (!json.contains("version") || !json["version"].is_number_integer()) {
    throw_bad_input(source + ": field 'version'", "missing or not an integer");
  }
  Profile profile;
  if (json["version"] != kProfileFormatVersion) {
    throw_bad_input(source + ": field 'version'",
                    fmt::format("unsupported profile version {} (this fsdptune reads version {})",
                                json["version"].dump(), kProfileFormatVersion),
                    "re-create the profile with this fsdptune");
  }
  profile.version = kProfileFormatVersion;
  const std::string root = source + ": ";
  reject_unknown_fields(json,
                        {"format", "version", "hardware", "parts", "compute", "collectives",
                         "contention", "provenance"},
                        root);
  profile.hardware = require_string(json, "hardware", root);
  if (profile.hardware.empty()) {
    throw_bad_input(source + ": field 'hardware'", "must name the hardware (e.g. \"h100-sxm\")");
  }

  if (json.contains("parts")) {
    const nlohmann::json& parts = json["parts"];
    if (!parts.is_array()) throw_bad_input(root + "parts", "must be an array");
    if (parts.empty())
      throw_bad_input(root + "parts", "empty: leave it out of an unmerged profile");
    for (std::size_t i = 0; i < parts.size(); ++i) {
      const std::string where = fmt::format("{}parts[{}]", root, i);
      if (!parts[i].is_object()) throw_bad_input(where, "must be an object");
      // Found by QA: a field beside source and provenance was read, and dropped by merge.
      reject_unknown_fields(parts[i], {"source", "provenance"}, where);
      ProfilePart part;
      part.source = require_string(parts[i], "source", where);
      part.provenance =
          read_provenance(require(parts[i], "provenance", where), where + ".provenance");
      profile.parts.push_back(std::move(part));
    }
  }

  std::set<std::string> signatures;
  const nlohmann::json& compute = require_array(json, "compute", root);
  for (std::size_t i = 0; i < compute.size(); ++i) {
    const std::string where = fmt::format("{}compute[{}]", root, i);
    if (!compute[i].is_object()) throw_bad_input(where, "must be an object");
    reject_unknown_fields(compute[i], {"signature", "op", "samples_s", "part"}, where);
    ComputeEntry entry;
    entry.signature = require_string(compute[i], "signature", where);
    entry.op = op_from_json(require(compute[i], "op", where), where + ".op");
    if (entry.op.signature() != entry.signature) {
      throw_bad_input(where + ".signature", fmt::format("'{}' does not match its op ('{}')",
                                                        entry.signature, entry.op.signature()));
    }
    if (!signatures.insert(entry.signature).second) {
      throw_bad_input(where + ".signature",
                      fmt::format("'{}' is measured twice; merge the samples", entry.signature));
    }
    entry.samples_s = read_samples(compute[i], where);
    entry.part = read_part(compute[i], profile.parts.size(), where);
    profile.compute.push_back(std::move(entry));
  }

  std::set<std::tuple<CollectiveKind, std::int64_t, std::int64_t>> sweeps;
  const nlohmann::json& collectives = require_array(json, "collectives", root);
  for (std::size_t i = 0; i < collectives.size(); ++i) {
    const std::string where = fmt::format("{}collectives[{}]", root, i);
    if (!collectives[i].is_object()) throw_bad_input(where, "must be an object");
    reject_unknown_fields(collectives[i], {"kind", "ranks", "ranks_per_node", "points", "part"},
                          where);
    CollectiveSweep sweep;
    sweep.kind =
        collective_from_string(require_string(collectives[i], "kind", where), where + ".kind");
    sweep.group.ranks = require_positive_integer(collectives[i], "ranks", where, kMaxJobGpus);
    sweep.group.ranks_per_node =
        require_positive_integer(collectives[i], "ranks_per_node", where, kMaxJobGpus);
    // Keyed as the cost model looks sweeps up: a per-node count above the group counts as
    // the group (profile_cost.cpp), so 8 ranks at 16 per node is the sweep at 8 per node
    // (a tester's file held both; the lookup took the later one).
    const std::int64_t per_node = sweep_ranks_per_node(sweep.group);
    if (!sweeps.insert({sweep.kind, sweep.group.ranks, per_node}).second) {
      throw_bad_input(
          where, fmt::format("a second {} sweep over {} ({} per node{})", to_string(sweep.kind),
                             counted(sweep.group.ranks, "rank"), per_node,
                             per_node != sweep.group.ranks_per_node
                                 ? fmt::format(": {} per node counts as {}",
                                               sweep.group.ranks_per_node, per_node)
                                 : std::string()));
    }
    const nlohmann::json& points = require_array(collectives[i], "points", where);
    if (points.empty()) throw_bad_input(where + ".points", "has no points");
    for (std::size_t j = 0; j < points.size(); ++j) {
      const std::string point_where = fmt::format("{}.points[{}]", where, j);
      if (!points[j].is_object()) throw_bad_input(point_where, "must be an object");
      reject_unknown_fields(points[j], {"bytes", "samples_s"}, point_where);
      CollectivePoint point;
      point.bytes = require_positive_integer(points[j], "bytes", point_where, kMaxOpCount);
      if (!sweep.points.empty() && point.bytes <= sweep.points.back().bytes) {
        throw_bad_input(point_where + ".bytes",
                        "points must be sorted by strictly increasing bytes");
      }
      point.samples_s = read_samples(points[j], point_where);
      sweep.points.push_back(std::move(point));
    }
    sweep.part = read_part(collectives[i], profile.parts.size(), where);
    profile.collectives.push_back(std::move(sweep));
  }

  if (json.contains("contention")) {
    const nlohmann::json& contention = json["contention"];
    const std::string where = root + "contention";
    if (!contention.is_object()) throw_bad_input(where, "must be an object");
    std::vector<std::string> known = {"compute_slowdown_with_comm", "comm_share_efficiency",
                                      "part"};
    for (const MeasuredOnlyFactor& factor : kMeasuredOnlyFactors) known.push_back(factor.name);
    reject_unknown_fields(contention, known, where);
    // Each factor is optional, at its default (docs/profile-format.md): a profile may
    // give the one it measured.
    if (contention.contains("compute_slowdown_with_comm")) {
      profile.contention.compute_slowdown_with_comm =
          require_positive_number(contention, "compute_slowdown_with_comm", where);
    }
    if (contention.contains("comm_share_efficiency")) {
      profile.contention.comm_share_efficiency =
          require_positive_number(contention, "comm_share_efficiency", where);
    }
    // Written only when measured (absent: 1, not modelled): comm_slowdown_with_compute
    // since 2026-12-02, the copy factors since 2026-12-04.
    for (const MeasuredOnlyFactor& factor : kMeasuredOnlyFactors) {
      if (contention.contains(factor.name)) {
        profile.contention.*factor.member = require_positive_number(contention, factor.name, where);
      }
    }
    validate_contention(profile.contention, where);
    // A merged profile names the part its factors came from, when one measured them.
    if (contention.contains("part")) {
      profile.contention_part = read_part(contention, profile.parts.size(), where);
    }
  }

  if (json.contains("provenance")) {
    profile.provenance = read_provenance(json["provenance"], root + "provenance");
  }
  return profile;
}

nlohmann::json profile_to_json(const Profile& profile) {
  nlohmann::json compute = nlohmann::json::array();
  for (const ComputeEntry& entry : profile.compute) {
    compute.push_back({{"signature", entry.signature},
                       {"op", op_to_json(entry.op)},
                       {"samples_s", entry.samples_s}});
    if (!profile.parts.empty()) compute.back()["part"] = entry.part;
  }
  nlohmann::json collectives = nlohmann::json::array();
  for (const CollectiveSweep& sweep : profile.collectives) {
    nlohmann::json points = nlohmann::json::array();
    for (const CollectivePoint& point : sweep.points) {
      points.push_back({{"bytes", point.bytes}, {"samples_s", point.samples_s}});
    }
    collectives.push_back({{"kind", to_string(sweep.kind)},
                           {"ranks", sweep.group.ranks},
                           {"ranks_per_node", sweep.group.ranks_per_node},
                           {"points", points}});
    if (!profile.parts.empty()) collectives.back()["part"] = sweep.part;
  }
  nlohmann::json contention = {
      {"compute_slowdown_with_comm", profile.contention.compute_slowdown_with_comm},
      {"comm_share_efficiency", profile.contention.comm_share_efficiency}};
  // Only where measured: a profile without them keeps its bytes.
  for (const MeasuredOnlyFactor& factor : kMeasuredOnlyFactors) {
    if (profile.contention.*factor.member != 1) {
      contention[factor.name] = profile.contention.*factor.member;
    }
  }
  if (!profile.parts.empty() && profile.contention_part >= 0) {
    contention["part"] = profile.contention_part;
  }
  nlohmann::json json = {
      {"format", kFormat},
      {"version", profile.version},
      {"hardware", profile.hardware},
      {"compute", compute},
      {"collectives", collectives},
      {"contention", contention},
      {"provenance", provenance_to_json(profile.provenance)},
  };
  // Only merged profiles carry parts: an unmerged profile writes the same bytes as before.
  if (!profile.parts.empty()) {
    nlohmann::json parts = nlohmann::json::array();
    for (const ProfilePart& part : profile.parts) {
      parts.push_back(
          {{"source", part.source}, {"provenance", provenance_to_json(part.provenance)}});
    }
    json["parts"] = parts;
  }
  return json;
}

double median_seconds(const std::vector<double>& samples_s) {
  FSDPTUNE_CHECK(!samples_s.empty(), "median of no samples");
  std::vector<double> sorted = samples_s;
  std::sort(sorted.begin(), sorted.end());
  const std::size_t middle = sorted.size() / 2;
  return sorted.size() % 2 == 1 ? sorted[middle] : 0.5 * (sorted[middle - 1] + sorted[middle]);
}

LatencyBandwidthFit fit_latency_bandwidth(const std::vector<std::int64_t>& bytes,
                                          const std::vector<double>& seconds) {
  FSDPTUNE_CHECK(bytes.size() == seconds.size(), "one time per size");
  FSDPTUNE_CHECK(std::set<std::int64_t>(bytes.begin(), bytes.end()).size() >= 2,
                 "a latency/bandwidth fit needs two distinct sizes");
  // Minimize sum_i ((alpha + gamma * S_i - t_i) / t_i)^2 with gamma = 1 / beta: rows
  // [1/t_i, S_i/t_i] . [alpha, gamma] = 1. Sizes are scaled to GiB to keep the columns of
  // comparable magnitude for the QR solve.
  constexpr double kScale = 1073741824.0;
  const auto count = static_cast<Eigen::Index>(bytes.size());
  Eigen::MatrixXd design(count, 2);
  Eigen::VectorXd target = Eigen::VectorXd::Ones(count);
  for (Eigen::Index i = 0; i < count; ++i) {
    const auto index = static_cast<std::size_t>(i);
    FSDPTUNE_CHECK(seconds[index] > 0, "times must be positive");
    design(i, 0) = 1.0 / seconds[index];
    design(i, 1) = static_cast<double>(bytes[index]) / kScale / seconds[index];
  }
  const Eigen::Vector2d solution = design.colPivHouseholderQr().solve(target);
  LatencyBandwidthFit fit;
  fit.latency_s = solution(0);
  const double seconds_per_gib = solution(1);
  fit.bytes_per_s =
      seconds_per_gib > 0 ? kScale / seconds_per_gib : std::numeric_limits<double>::infinity();
  return fit;
}

}  // namespace fsdptune
