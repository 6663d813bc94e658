#include "fsdptune/hardware.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "fsdptune/embedded.hpp"
#include "fsdptune/error.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/job.hpp"
#include "fsdptune/units.hpp"

namespace fsdptune {
namespace {

constexpr const char* kFormat = "fsdptune-hardware";

// One table drives reading, writing and validation so the three cannot drift apart.
struct RealField {
  const char* name;
  double HardwareSpec::*member;
  bool required;
  bool must_be_positive;  // false: zero allowed (e.g. no fp8 support)
  // The range of a value other than 0, far around any real device (H200: 1.98e15 FLOP/s,
  // latencies of microseconds), so that every cost computed from the spec is finite.
  double low;
  double high;
};

struct IntegerField {
  const char* name;
  std::int64_t HardwareSpec::*member;
  bool required;
  bool must_be_positive;
  // Far above any GPU (H200: 141e9 bytes, 132 SMs), so that sizes and SM counts derived
  // from it stay within 64 bits.
  std::int64_t max;
};

constexpr double kMinRate = 1;  // per second: FLOP/s, bytes/s
constexpr double kMaxRate = 1e18;
constexpr double kMaxLatencySeconds = 1e3;
// Efficiencies are at most 1, and so is the ramp's exponent: above 1 a collective's time
// would decrease with size somewhere.
constexpr double kMinFraction = 1e-3;

constexpr RealField kRealFields[] = {
    {"peak_bf16_flops_per_s", &HardwareSpec::peak_bf16_flops_per_s, true, true, kMinRate, kMaxRate},
    {"peak_fp8_flops_per_s", &HardwareSpec::peak_fp8_flops_per_s, true, false, kMinRate, kMaxRate},
    {"peak_fp32_flops_per_s", &HardwareSpec::peak_fp32_flops_per_s, true, true, kMinRate, kMaxRate},
    {"hbm_bytes_per_s", &HardwareSpec::hbm_bytes_per_s, true, true, kMinRate, kMaxRate},
    {"nvlink_bytes_per_s", &HardwareSpec::nvlink_bytes_per_s, true, true, kMinRate, kMaxRate},
    {"nvlink_busbw_bytes_per_s", &HardwareSpec::nvlink_busbw_bytes_per_s, true, true, kMinRate,
     kMaxRate},
    {"nvlink_allreduce_busbw_bytes_per_s", &HardwareSpec::nvlink_allreduce_busbw_bytes_per_s, false,
     false, kMinRate, kMaxRate},
    {"network_bytes_per_s", &HardwareSpec::network_bytes_per_s, true, true, kMinRate, kMaxRate},
    {"network_efficiency_per_node_doubling", &HardwareSpec::network_efficiency_per_node_doubling,
     false, true, kMinFraction, 1},
    {"collective_base_latency_s", &HardwareSpec::collective_base_latency_s, true, false, 0,
     kMaxLatencySeconds},
    {"nvlink_hop_latency_s", &HardwareSpec::nvlink_hop_latency_s, true, false, 0,
     kMaxLatencySeconds},
    {"network_hop_latency_s", &HardwareSpec::network_hop_latency_s, true, false, 0,
     kMaxLatencySeconds},
    {"busbw_ramp_step_bytes", &HardwareSpec::busbw_ramp_step_bytes, false, true, 1, 0x1p50},
    {"busbw_ramp_exponent", &HardwareSpec::busbw_ramp_exponent, false, true, kMinFraction, 1},
    {"gemm_efficiency_ceiling", &HardwareSpec::gemm_efficiency_ceiling, false, true, kMinFraction,
     1},
    {"memory_bound_efficiency", &HardwareSpec::memory_bound_efficiency, false, true, kMinFraction,
     1},
    {"attention_efficiency", &HardwareSpec::attention_efficiency, false, true, kMinFraction, 1},
    {"attention_backward_efficiency", &HardwareSpec::attention_backward_efficiency, false, false,
     kMinFraction, 1},
    {"kernel_launch_s", &HardwareSpec::kernel_launch_s, false, false, 0, kMaxLatencySeconds},
};

constexpr std::int64_t kMaxHardwareBytes = std::int64_t{1} << 50;  // 1 PiB

constexpr IntegerField kIntegerFields[] = {
    {"hbm_bytes", &HardwareSpec::hbm_bytes, true, true, kMaxHardwareBytes},
    {"sm_count", &HardwareSpec::sm_count, true, true, std::int64_t{1} << 20},
    {"gpus_per_node", &HardwareSpec::gpus_per_node, false, true, kMaxJobGpus},
    {"memory_reserve_bytes", &HardwareSpec::memory_reserve_bytes, false, false, kMaxHardwareBytes},
};

bool is_known_field(const std::string& key) {
  if (key == "format" || key == "version" || key == "id" || key == "name") return true;
  for (const RealField& field : kRealFields) {
    if (key == field.name) return true;
  }
  for (const IntegerField& field : kIntegerFields) {
    if (key == field.name) return true;
  }
  return false;
}

std::string field_where(const std::string& source, const std::string& field) {
  return fmt::format("{}: field '{}'", source, field);
}

void check_sign(double value, bool must_be_positive, const std::string& where) {
  if (!std::isfinite(value)) throw_bad_input(where, "must be a finite number");
  if (must_be_positive ? !(value > 0) : value < 0) {
    throw_bad_input(where, fmt::format("must be {} (got {})",
                                       must_be_positive ? "positive" : "non-negative", value));
  }
}

// The numeric field `name` of `json`, or nullptr when it is absent and not required.
const nlohmann::json* number_field(const nlohmann::json& json, const char* name, bool required,
                                   const std::string& where) {
  const auto it = json.find(name);
  if (it == json.end()) {
    if (required) throw_bad_input(where, "missing");
    return nullptr;
  }
  if (!it->is_number()) throw_bad_input(where, "must be a number");
  return &*it;
}

}  // namespace

HardwareSpec hardware_from_json(const nlohmann::json& json, const std::string& source) {
  if (!json.is_object()) throw_bad_input(source, "a hardware spec must be a JSON object");
  check_format_field(json, kFormat, field_where(source, "format"));
  if (!json.contains("version") || !json["version"].is_number_integer()) {
    throw_bad_input(
        field_where(source, "version"), "missing or not an integer",
        fmt::format("hardware specs of this fsdptune are version {}", kHardwareFormatVersion));
  }
  if (json["version"] != kHardwareFormatVersion) {
    throw_bad_input(field_where(source, "version"),
                    fmt::format("unsupported version {} (this fsdptune reads version {})",
                                json["version"].dump(), kHardwareFormatVersion));
  }
  for (const auto& [key, value] : json.items()) {
    if (!is_known_field(key)) {
      throw_bad_input(field_where(source, key), "unknown field",
                      "see docs/hardware.md for the fields of a hardware spec");
    }
  }
  HardwareSpec spec;
  for (const char* key : {"id", "name"}) {
    if (!json.contains(key) || !json[key].is_string() || json[key].get<std::string>().empty()) {
      throw_bad_input(field_where(source, key), "missing or not a non-empty string");
    }
    // One line of text, as a model's name (found by QA: a newline split tune's heading).
    if (has_control_character(json[key].get<std::string>())) {
      throw_bad_input(field_where(source, key), "holds a control character (newline, tab, NUL...)",
                      "a spec's id and name are one line of text");
    }
  }
  spec.id = json["id"].get<std::string>();
  spec.name = json["name"].get<std::string>();
  for (const RealField& field : kRealFields) {
    const std::string where = field_where(source, field.name);
    const nlohmann::json* value = number_field(json, field.name, field.required, where);
    if (value == nullptr) continue;
    spec.*field.member = value->get<double>();
    check_sign(spec.*field.member, field.must_be_positive, where);
    const double real = spec.*field.member;
    if (real != 0 && !(real >= field.low && real <= field.high)) {
      throw_bad_input(where, fmt::format("{} is outside what fsdptune models ({} to {})", real,
                                         field.low, field.high));
    }
  }
  for (const IntegerField& field : kIntegerFields) {
    const std::string where = field_where(source, field.name);
    const nlohmann::json* value = number_field(json, field.name, field.required, where);
    if (value == nullptr) continue;
    // Accept 8e10 written as a float as long as it is a whole number (that fits in 64 bits).
    const double number = value->get<double>();
    if (value->is_number_float() && number != std::floor(number)) {
      throw_bad_input(where, "must be a whole number");
    }
    if (value->is_number_float() && !(std::fabs(number) < 0x1p63)) {
      throw_bad_input(where, fmt::format("{} does not fit in a 64-bit integer", number));
    }
    spec.*field.member =
        value->is_number_integer() ? value->get<std::int64_t>() : static_cast<std::int64_t>(number);
    check_sign(static_cast<double>(spec.*field.member), field.must_be_positive, where);
    if (spec.*field.member > field.max) {
      throw_bad_input(where, fmt::format("{} is more than fsdptune models (at most {})",
                                         spec.*field.member, field.max));
    }
  }
  // The default memory limit is the HBM less the reserve: a reserve of all of it left no
  // default, which simulate reported against --memory-limit without naming the file.
  if (spec.memory_reserve_bytes >= spec.hbm_bytes) {
    throw_bad_input(
        field_where(source, "memory_reserve_bytes"),
        fmt::format("{} is not below hbm_bytes ({})", spec.memory_reserve_bytes, spec.hbm_bytes),
        "the reserve is what the CUDA context and NCCL hold of the HBM, a few GiB");
  }
  // Achievable bus bandwidth cannot exceed the link's bandwidth.
  for (const char* key : {"nvlink_busbw_bytes_per_s", "nvlink_allreduce_busbw_bytes_per_s"}) {
    if (json.contains(key) && json[key].get<double>() > spec.nvlink_bytes_per_s) {
      throw_bad_input(field_where(source, key),
                      fmt::format("exceeds nvlink_bytes_per_s ({})", spec.nvlink_bytes_per_s));
    }
  }
  return spec;
}

nlohmann::json hardware_to_json(const HardwareSpec& spec) {
  nlohmann::json json;
  json["format"] = kFormat;
  json["version"] = kHardwareFormatVersion;
  json["id"] = spec.id;
  json["name"] = spec.name;
  for (const RealField& field : kRealFields) {
    // Added 2026-12-03: left out at its "same as the forward" value, so that a schedule
    // written before it keeps its text (and its schedule_hash, which measured files record).
    if (field.member == &HardwareSpec::attention_backward_efficiency && spec.*field.member == 0) {
      continue;
    }
    json[field.name] = spec.*field.member;
  }
  for (const IntegerField& field : kIntegerFields) json[field.name] = spec.*field.member;
  return json;
}

std::vector<std::string> builtin_hardware_names() {
  std::vector<std::string> names;
  for (const auto& [stem, content] : embedded::hardware_files()) names.push_back(stem);
  return names;
}

bool is_builtin_hardware(const std::string& id) {
  const std::vector<std::string> names = builtin_hardware_names();
  return std::find(names.begin(), names.end(), id) != names.end();
}

HardwareSpec builtin_hardware(const std::string& id) {
  for (const auto& [stem, content] : embedded::hardware_files()) {
    if (stem == id) {
      const std::string source = fmt::format("built-in hardware '{}'", id);
      return hardware_from_json(parse_json_text(content, source), source);
    }
  }
  throw_bad_input(fmt::format("hardware '{}'", id), "unknown hardware",
                  fmt::format("built-in hardware: {}", fmt::join(builtin_hardware_names(), ", ")));
}

bool same_figures(const HardwareSpec& a, const HardwareSpec& b) {
  HardwareSpec renamed = b;
  renamed.name = a.name;
  return a == renamed;
}

std::string figure_differences(const HardwareSpec& theirs_spec, const HardwareSpec& ours_spec) {
  const nlohmann::json theirs = hardware_to_json(theirs_spec);
  const nlohmann::json ours = hardware_to_json(ours_spec);
  std::string differences;
  // Over the fields of either, by name: hardware_to_json leaves out only an
  // attention_backward_efficiency of 0 ("same as attention_efficiency"), said as 0 (review:
  // "absent" of a field the file gave); numbers as JSON writes them, a whole number's ".0"
  // dropped.
  nlohmann::json both = ours;
  both.update(theirs);
  for (const auto& item : both.items()) {
    const std::string& key = item.key();
    if (key == "name") continue;
    const auto figure = [&key](const nlohmann::json& spec) {
      if (!spec.contains(key)) return std::string("0");
      const nlohmann::json& value = spec.at(key);
      std::string text = value.is_string() ? value.get<std::string>() : value.dump();
      if (value.is_number_float() && text.ends_with(".0")) text.resize(text.size() - 2);
      return text;
    };
    if (figure(theirs) == figure(ours)) continue;
    differences += fmt::format("{}{} {} (here: {})", differences.empty() ? "" : ", ", key,
                               figure(theirs), figure(ours));
  }
  return differences.empty() ? "(no field differs)" : differences;
}

}  // namespace fsdptune
