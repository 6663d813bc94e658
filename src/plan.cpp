// Plans: validation and the plan JSON format (docs/plan-format.md).
#include "fsdptune/plan.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include <fmt/format.h>

#include "fsdptune/error.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/units.hpp"

namespace fsdptune {
namespace {

using nlohmann::json;

std::string field(const std::string& where, const std::string& name) {
  return where.empty() ? name : where + ": " + name;
}

// Each bucket list must cover [0, unit_count) with contiguous, non-overlapping ranges in
// increasing order: the lowering walks it front to back in forward and back to front in
// backward, and every unit's parameters must be gathered (and its gradients reduced)
// exactly once per pass.
void validate_partition(const std::vector<UnitRange>& buckets, int unit_count,
                        const std::string& where) {
  if (buckets.empty()) {
    throw_bad_input(where, "is empty: every unit must be in one bucket",
                    fmt::format("give at least one bucket, e.g. [[0, {}]]", unit_count - 1));
  }
  int next = 0;
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    const UnitRange& bucket = buckets[i];
    const std::string at = fmt::format("{}[{}]", where, i);
    if (bucket.first < 0 || bucket.first >= unit_count || bucket.last < 0 ||
        bucket.last >= unit_count) {
      throw_bad_input(at, fmt::format("unknown unit in [{}, {}]: the workload has units 0..{}",
                                      bucket.first, bucket.last, unit_count - 1));
    }
    if (bucket.last < bucket.first) {
      throw_bad_input(
          at, fmt::format("[{}, {}] is empty: last comes before first", bucket.first, bucket.last));
    }
    if (bucket.first < next) {
      throw_bad_input(
          at, fmt::format("covers unit {} twice (already in an earlier bucket)", bucket.first));
    }
    if (bucket.first > next) {
      throw_bad_input(at, fmt::format("leaves unit {} out: buckets must be contiguous", next));
    }
    next = bucket.last + 1;
  }
  if (next != unit_count) {
    throw_bad_input(where, fmt::format("leaves units {}..{} out", next, unit_count - 1));
  }
}

json ranges_to_json(const std::vector<UnitRange>& ranges) {
  json out = json::array();
  for (const UnitRange& range : ranges) out.push_back(json::array({range.first, range.last}));
  return out;
}

const json& require(const json& object, const std::string& key, const std::string& source) {
  auto it = object.find(key);
  if (it == object.end()) throw_bad_input(field(source, key), "missing");
  return *it;
}

int read_int(const json& value, const std::string& where) {
  // A whole number beyond 64 bits is read as a double (found by QA: "forward_prefetch:
  // must be an integer" of 100000000000000000000).
  if (value.is_number_float() && std::fabs(value.get<double>()) >= 0x1p63) {
    throw_bad_input(where, fmt::format("{} is out of range", value.dump()));
  }
  if (!value.is_number_integer()) throw_bad_input(where, "must be an integer");
  // An unsigned value above INT64_MAX would wrap to a negative one.
  const bool huge = value.is_number_unsigned() && value.get<std::uint64_t>() > (1ULL << 30);
  const auto number = value.get<std::int64_t>();
  if (huge || number < -(1LL << 30) || number > (1LL << 30)) {
    throw_bad_input(where, fmt::format("{} is out of range", value.dump()));
  }
  return static_cast<int>(number);
}

bool read_bool(const json& value, const std::string& where) {
  if (!value.is_boolean()) throw_bad_input(where, "must be true or false");
  return value.get<bool>();
}

std::vector<UnitRange> ranges_from_json(const json& value, const std::string& where) {
  if (!value.is_array()) throw_bad_input(where, "must be an array of [first, last] pairs");
  std::vector<UnitRange> ranges;
  for (std::size_t i = 0; i < value.size(); ++i) {
    const std::string at = fmt::format("{}[{}]", where, i);
    const json& pair = value[i];
    if (!pair.is_array() || pair.size() != 2) {
      throw_bad_input(at, "must be a [first, last] pair of unit indices");
    }
    ranges.push_back({read_int(pair[0], at + "[0]"), read_int(pair[1], at + "[1]")});
  }
  return ranges;
}

}  // namespace

std::string to_string(StreamLayout layout) {
  switch (layout) {
    case StreamLayout::kSeparate:
      return "separate";
    case StreamLayout::kShared:
      return "shared";
  }
  return "separate";
}

int gathering_backward_buckets(const Plan& plan) {
  int units = 0;
  for (const UnitRange& bucket : plan.forward_buckets) units = std::max(units, bucket.last + 1);
  std::vector<bool> resharded(static_cast<std::size_t>(units), false);
  for (std::size_t b = 0; b < plan.forward_buckets.size(); ++b) {
    for (int u = plan.forward_buckets[b].first; u <= plan.forward_buckets[b].last; ++u) {
      resharded[static_cast<std::size_t>(u)] = plan.reshard_after_forward[b];
    }
  }
  return static_cast<int>(std::count_if(
      plan.backward_buckets.begin(), plan.backward_buckets.end(), [&](const UnitRange& bucket) {
        for (int u = bucket.first; u <= bucket.last && u < units; ++u) {
          if (resharded[static_cast<std::size_t>(u)]) return true;
        }
        return false;
      }));
}

std::vector<std::string> fsdp2_differences(const Plan& plan) {
  // Found by QA: only the buckets were compared. Backward buckets matter only where a
  // bucket reshards after forward (else the backward gathers nothing).
  std::vector<std::string> differences;
  if (plan.one_collective_per_parameter) {
    differences.push_back("the plan issues one collective per parameter, FSDP2 one per group");
  }
  const bool regathers =
      std::find(plan.reshard_after_forward.begin(), plan.reshard_after_forward.end(), true) !=
      plan.reshard_after_forward.end();
  if (regathers && plan.backward_buckets != plan.forward_buckets) {
    differences.push_back("its backward all-gather buckets are not its forward ones");
  }
  if (plan.reduce_scatter_buckets != plan.forward_buckets) {
    differences.push_back("its reduce-scatter buckets are not its forward ones");
  }
  if (plan.stream_layout != StreamLayout::kSeparate) {
    differences.push_back(
        "it runs all-gathers and reduce-scatters on one stream, FSDP2 on one each");
  }
  if (!plan.copy_in_out) {
    differences.push_back("it collects without flat-buffer copies, which FSDP2 makes");
  }
  return differences;
}

std::vector<std::string> simplefsdp_differences(const Plan& plan) {
  // Found by QA: the export's SimpleFSDP section looked ready to use, and the one list its
  // manual bucketing takes did not fit where the tuned plan did.
  std::vector<std::string> differences;
  const bool regathers =
      std::find(plan.reshard_after_forward.begin(), plan.reshard_after_forward.end(), true) !=
      plan.reshard_after_forward.end();
  if ((regathers && plan.backward_buckets != plan.forward_buckets) ||
      plan.reduce_scatter_buckets != plan.forward_buckets) {
    differences.push_back(
        "its backward all-gather or reduce-scatter buckets are not its forward ones, where "
        "SimpleFSDP's manual bucketing takes one list for all");
  }
  const bool keeps = std::find(plan.reshard_after_forward.begin(), plan.reshard_after_forward.end(),
                               false) != plan.reshard_after_forward.end();
  if (regathers && keeps) {
    differences.push_back(
        "it reshards some buckets after forward and keeps others, where SimpleFSDP's "
        "fsdp_reshard_after_forward is one setting for all");
  }
  if (plan.stream_layout != StreamLayout::kShared) {
    differences.push_back(
        "it runs all-gathers and reduce-scatters on two streams, SimpleFSDP's functional "
        "collectives on one");
  }
  if (plan.forward_prefetch != 1 || plan.backward_prefetch != 1) {
    differences.push_back(
        fmt::format("it prefetches {} / {} buckets ahead, SimpleFSDP's reordering one",
                    plan.forward_prefetch, plan.backward_prefetch));
  }
  if (!plan.copy_in_out && !plan.one_collective_per_parameter) {
    differences.push_back("its buckets collect without the flat-buffer copies SimpleFSDP makes");
  }
  return differences;
}

void validate_plan(const Plan& plan, int unit_count, const std::string& where) {
  if (unit_count <= 0) throw_bad_input(where, "the workload has no units");
  validate_partition(plan.forward_buckets, unit_count, field(where, "forward_buckets"));
  validate_partition(plan.backward_buckets, unit_count, field(where, "backward_buckets"));
  validate_partition(plan.reduce_scatter_buckets, unit_count,
                     field(where, "reduce_scatter_buckets"));
  if (plan.reshard_after_forward.size() != plan.forward_buckets.size()) {
    throw_bad_input(
        field(where, "reshard_after_forward"),
        fmt::format(
            "has {} but there {} {}",
            counted(static_cast<std::int64_t>(plan.reshard_after_forward.size()), "entry",
                    "entries"),
            plan.forward_buckets.size() == 1 ? "is" : "are",
            counted(static_cast<std::int64_t>(plan.forward_buckets.size()), "forward bucket")),
        "give one true/false per forward bucket");
  }
  const std::pair<const char*, int> depths[] = {{"forward_prefetch", plan.forward_prefetch},
                                                {"backward_prefetch", plan.backward_prefetch}};
  for (const auto& [name, depth] : depths) {
    if (depth < 0) {
      throw_bad_input(field(where, name), fmt::format("is {}: must be >= 0", depth));
    }
    if (plan.reorder && depth == 0) {
      throw_bad_input(field(where, name), "is 0 but reorder is true",
                      "reordering issues each all-gather at least one bucket ahead: set the "
                      "prefetch to 1 or more, or reorder to false");
    }
    if (!plan.reorder && depth != 0) {
      throw_bad_input(field(where, name), fmt::format("is {} but reorder is false", depth),
                      "without reordering nothing is gathered ahead: set the prefetch to 0");
    }
  }
}

nlohmann::json plan_to_json(const Plan& plan) {
  json out;
  out["version"] = kPlanFormatVersion;
  out["name"] = plan.name;
  out["forward_buckets"] = ranges_to_json(plan.forward_buckets);
  out["backward_buckets"] = ranges_to_json(plan.backward_buckets);
  out["reduce_scatter_buckets"] = ranges_to_json(plan.reduce_scatter_buckets);
  out["forward_prefetch"] = plan.forward_prefetch;
  out["backward_prefetch"] = plan.backward_prefetch;
  json reshard = json::array();
  for (bool value : plan.reshard_after_forward) reshard.push_back(value);
  out["reshard_after_forward"] = reshard;
  out["stream_layout"] = to_string(plan.stream_layout);
  out["one_collective_per_parameter"] = plan.one_collective_per_parameter;
  out["copy_in_out"] = plan.copy_in_out;
  out["reorder"] = plan.reorder;
  // Written where set only: a plan without it reads as before.
  if (plan.reduce_after_backward) out["reduce_after_backward"] = true;
  return out;
}

Plan plan_from_json(const nlohmann::json& json_value, const std::string& source) {
  if (!json_value.is_object()) throw_bad_input(source, "a plan must be a JSON object");
  static const std::set<std::string> kKnown = {"version",
                                               "name",
                                               "forward_buckets",
                                               "backward_buckets",
                                               "reduce_scatter_buckets",
                                               "forward_prefetch",
                                               "backward_prefetch",
                                               "reshard_after_forward",
                                               "stream_layout",
                                               "one_collective_per_parameter",
                                               "copy_in_out",
                                               "reorder",
                                               "reduce_after_backward"};
  // The version before the fields: a newer plan's new fields are named as a version this
  // fsdptune does not read, not as unknown fields (found by QA).
  const json& version = require(json_value, "version", source);
  if (json_integer_outside(version, kPlanFormatVersion, kPlanFormatVersion)) {
    throw_bad_input(field(source, "version"), fmt::format("is {}, this fsdptune reads version {}",
                                                          version.dump(), kPlanFormatVersion));
  }
  read_int(version, field(source, "version"));  // a whole number (a float or string named)
  for (const auto& item : json_value.items()) {
    if (!kKnown.count(item.key())) {
      throw_bad_input(field(source, item.key()), "unknown field",
                      "see docs/plan-format.md for the fields of a plan");
    }
  }
  Plan plan;
  const json& name = require(json_value, "name", source);
  if (!name.is_string()) throw_bad_input(field(source, "name"), "must be a string");
  plan.name = name.get<std::string>();
  // Reports and tables name a plan by it ("plan : 1 forward ..." for an empty one).
  if (plan.name.empty()) throw_bad_input(field(source, "name"), "must not be empty");
  plan.forward_buckets = ranges_from_json(require(json_value, "forward_buckets", source),
                                          field(source, "forward_buckets"));
  // Backward and reduce-scatter buckets default to the forward buckets.
  plan.backward_buckets =
      json_value.contains("backward_buckets")
          ? ranges_from_json(json_value["backward_buckets"], field(source, "backward_buckets"))
          : plan.forward_buckets;
  plan.reduce_scatter_buckets = json_value.contains("reduce_scatter_buckets")
                                    ? ranges_from_json(json_value["reduce_scatter_buckets"],
                                                       field(source, "reduce_scatter_buckets"))
                                    : plan.backward_buckets;
  if (json_value.contains("forward_prefetch")) {
    plan.forward_prefetch =
        read_int(json_value["forward_prefetch"], field(source, "forward_prefetch"));
  }
  if (json_value.contains("backward_prefetch")) {
    plan.backward_prefetch =
        read_int(json_value["backward_prefetch"], field(source, "backward_prefetch"));
  }
  if (json_value.contains("reshard_after_forward")) {
    const json& reshard = json_value["reshard_after_forward"];
    const std::string at = field(source, "reshard_after_forward");
    if (reshard.is_boolean()) {
      // One value for every bucket.
      plan.reshard_after_forward.assign(plan.forward_buckets.size(), reshard.get<bool>());
    } else if (reshard.is_array()) {
      for (std::size_t i = 0; i < reshard.size(); ++i) {
        plan.reshard_after_forward.push_back(read_bool(reshard[i], fmt::format("{}[{}]", at, i)));
      }
    } else {
      throw_bad_input(at, "must be true, false or an array of them (one per forward bucket)");
    }
  } else {
    plan.reshard_after_forward.assign(plan.forward_buckets.size(), true);
  }
  if (json_value.contains("stream_layout")) {
    const json& layout = json_value["stream_layout"];
    const std::string at = field(source, "stream_layout");
    if (layout == "separate") {
      plan.stream_layout = StreamLayout::kSeparate;
    } else if (layout == "shared") {
      plan.stream_layout = StreamLayout::kShared;
    } else {
      throw_bad_input(at, fmt::format("is {}: must be \"separate\" or \"shared\"", layout.dump()));
    }
  }
  if (json_value.contains("one_collective_per_parameter")) {
    plan.one_collective_per_parameter = read_bool(json_value["one_collective_per_parameter"],
                                                  field(source, "one_collective_per_parameter"));
  }
  if (json_value.contains("copy_in_out")) {
    plan.copy_in_out = read_bool(json_value["copy_in_out"], field(source, "copy_in_out"));
  }
  if (json_value.contains("reorder")) {
    plan.reorder = read_bool(json_value["reorder"], field(source, "reorder"));
  }
  if (json_value.contains("reduce_after_backward")) {
    plan.reduce_after_backward =
        read_bool(json_value["reduce_after_backward"], field(source, "reduce_after_backward"));
  }
  return plan;
}

}  // namespace fsdptune
