#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "fsdptune/error.hpp"
#include "fsdptune/hardware.hpp"
#include "fsdptune/io.hpp"

using namespace fsdptune;

namespace {

void require_bad_input_naming(const nlohmann::json& json, const std::string& field) {
  try {
    hardware_from_json(json, "spec.json");
    FAIL("accepted a bad spec; expected an error about " << field);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kBadInput);
    CHECK(e.exit_code() == 2);
    CHECK_THAT(e.where(), Catch::Contains("spec.json"));
    CHECK_THAT(e.where(), Catch::Contains(field));
  }
}

}  // namespace

TEST_CASE("built-in hardware specs load with their datasheet figures", "[hardware]") {
  CHECK(builtin_hardware_names() == std::vector<std::string>{"h100-sxm", "h200", "a100-80g"});
  const HardwareSpec h100 = builtin_hardware("h100-sxm");
  CHECK(h100.peak_bf16_flops_per_s == 989e12);
  CHECK(h100.peak_fp8_flops_per_s == 1979e12);
  CHECK(h100.hbm_bytes_per_s == 3.35e12);
  CHECK(h100.sm_count == 132);
  CHECK(h100.nvlink_bytes_per_s == 450e9);
  const HardwareSpec h200 = builtin_hardware("h200");
  // The memory CUDA reports, in MiB (the datasheets' "80 GB" and "141 GB" are decimal and
  // less: 80e9 bytes left 4.7 GiB of an H100 unused by the default limit).
  CHECK(h100.hbm_bytes == 81089LL << 20);
  CHECK(h200.hbm_bytes == 143156LL << 20);
  CHECK(builtin_hardware("a100-80g").hbm_bytes == 81050LL << 20);
  CHECK(h200.hbm_bytes_per_s == 4.8e12);
  const HardwareSpec a100 = builtin_hardware("a100-80g");
  CHECK(a100.peak_bf16_flops_per_s == 312e12);
  CHECK(a100.peak_fp8_flops_per_s == 0);
  CHECK(a100.sm_count == 108);
  for (const std::string& id : builtin_hardware_names()) {
    const HardwareSpec spec = builtin_hardware(id);
    CHECK(spec.id == id);
    // Achievable bus bandwidth never above the link's.
    CHECK(spec.nvlink_busbw_bytes_per_s <= spec.nvlink_bytes_per_s);
    CHECK(spec.nvlink_allreduce_busbw_bytes_per_s <= spec.nvlink_bytes_per_s);
  }
}

TEST_CASE("hardware spec JSON round-trips", "[hardware]") {
  for (const std::string& id : builtin_hardware_names()) {
    const HardwareSpec spec = builtin_hardware(id);
    const nlohmann::json json = hardware_to_json(spec);
    CHECK(hardware_from_json(json, "round-trip") == spec);
    CHECK(dump_json(hardware_to_json(hardware_from_json(json, "again"))) == dump_json(json));
  }
  // attention_backward_efficiency at 0 (= the forward's) is left out, as in specs and
  // schedules written before it, and reads back as 0.
  HardwareSpec same = builtin_hardware("h100-sxm");
  CHECK(same.attention_backward_efficiency == 0.30);
  CHECK(hardware_to_json(same).contains("attention_backward_efficiency"));
  same.attention_backward_efficiency = 0;
  const nlohmann::json without = hardware_to_json(same);
  CHECK_FALSE(without.contains("attention_backward_efficiency"));
  CHECK(hardware_from_json(without, "without") == same);
  CHECK(builtin_hardware("a100-80g").attention_backward_efficiency == 0);
}

TEST_CASE("unknown hardware lists the built-ins", "[hardware]") {
  try {
    builtin_hardware("tpu-v5");
    FAIL("accepted unknown hardware");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kBadInput);
    CHECK_THAT(e.where(), Catch::Contains("tpu-v5"));
    CHECK_THAT(e.hint(), Catch::Contains("h100-sxm"));
  }
  CHECK_THROWS_AS(resolve_hardware("tpu-v5"), Error);
  CHECK(resolve_hardware("h200") == builtin_hardware("h200"));
  // A word ending in .json is a spec file, missing or not (found by mutation testing,
  // 2026-12-07: read as an unknown id, untested).
  try {
    resolve_hardware("no-such-spec.json");
    FAIL("accepted a missing spec file");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("no such file") && !Catch::Contains("unknown hardware"));
  }
}

TEST_CASE("bad hardware specs name the field", "[hardware]") {
  const nlohmann::json good = hardware_to_json(builtin_hardware("h100-sxm"));
  CHECK_NOTHROW(hardware_from_json(good, "spec.json"));

  nlohmann::json json = good;
  json["version"] = 2;
  require_bad_input_naming(json, "version");

  json = good;
  json.erase("sm_count");
  require_bad_input_naming(json, "sm_count");

  json = good;
  json["hbm_bytes_per_s"] = -1;
  require_bad_input_naming(json, "hbm_bytes_per_s");

  json = good;
  json["nvlink_hop_latency_s"] = "fast";
  require_bad_input_naming(json, "nvlink_hop_latency_s");

  json = good;
  json["nvlink_bandwidth"] = 1e9;  // a typo of a real field
  require_bad_input_naming(json, "nvlink_bandwidth");

  json = good;
  json["nvlink_busbw_bytes_per_s"] = 500e9;  // above the 450 GB/s link
  require_bad_input_naming(json, "nvlink_busbw_bytes_per_s");
  json = good;  // the all-reduce's too (found by mutation testing: untested)
  json["nvlink_allreduce_busbw_bytes_per_s"] = 500e9;
  require_bad_input_naming(json, "nvlink_allreduce_busbw_bytes_per_s");

  json = good;
  json["busbw_ramp_exponent"] = 1.5;
  require_bad_input_naming(json, "busbw_ramp_exponent");

  json = good;
  json["gemm_efficiency_ceiling"] = 1.2;
  require_bad_input_naming(json, "gemm_efficiency_ceiling");

  // A reserve of all the HBM left no default memory limit; simulate blamed --memory-limit.
  json = good;
  json["memory_reserve_bytes"] = json["hbm_bytes"];
  require_bad_input_naming(json, "memory_reserve_bytes");

  // One line of text (found by QA: a newline in the id split tune's heading).
  for (const char* key : {"id", "name"}) {
    // Unicode's line breaks too: NEL (U+0085), the line separator U+2028 (review).
    for (const char* text : {"b200\nx", "b200\u0085x", "b200\u2028x", "b200\x7fx"}) {
      json = good;
      json[key] = text;
      require_bad_input_naming(json, key);
    }
  }
  json = good;
  json["name"] = "H100 \u00e9t\u00e9 \u2013 SXM";  // other non-ASCII text is taken
  CHECK_NOTHROW(hardware_from_json(json, "spec.json"));
}

TEST_CASE("figure_differences names each field that differs, the name aside", "[hardware]") {
  const HardwareSpec h100 = builtin_hardware("h100-sxm");
  HardwareSpec faster = h100;
  faster.name = "another name";
  CHECK(figure_differences(h100, faster) == "(no field differs)");
  faster.peak_bf16_flops_per_s = 2e15;
  faster.sm_count = 148;
  CHECK(figure_differences(h100, faster) ==
        "peak_bf16_flops_per_s 989000000000000 (here: 2e+15), sm_count 132 (here: 148)");
}

// Fuzzing found: a whole-number float too large for int64 (hbm_bytes 4.3e44) was cast to
// int64 (undefined behaviour), an sm_count of 2^63 - 1 overflowed the GEMM wave count,
// and version 4294967297 was read as an int, i.e. as version 1.
TEST_CASE("hardware specs reject values beyond what fsdptune models", "[hardware]") {
  const std::pair<const char*, nlohmann::json> bad_values[] = {
      {"hbm_bytes", 4.2949e44},
      {"sm_count", std::numeric_limits<std::int64_t>::max()},
      {"memory_reserve_bytes", 1e30},
      {"version", 4294967297},
      // Fuzzing found too: rates of 5e-324 and latencies of 1.8e308 made every cost, and so
      // the simulated step, infinite.
      {"peak_bf16_flops_per_s", 5e-324},
      {"attention_efficiency", 5e-324},
      {"attention_backward_efficiency", 5e-324},
      {"attention_backward_efficiency", -0.3},
      {"attention_backward_efficiency", 1.5},
      {"kernel_launch_s", 1.7976931348623157e308},
      {"busbw_ramp_step_bytes", 1e300}};
  for (const auto& [field, value] : bad_values) {
    nlohmann::json json = hardware_to_json(builtin_hardware("h100-sxm"));
    json[field] = value;
    require_bad_input_naming(json, field);
  }
}

TEST_CASE("optional hardware fields take their documented defaults", "[hardware]") {
  nlohmann::json json = hardware_to_json(builtin_hardware("h100-sxm"));
  json.erase("busbw_ramp_exponent");
  json.erase("kernel_launch_s");
  const HardwareSpec spec = hardware_from_json(json, "spec.json");
  CHECK(spec.busbw_ramp_exponent == HardwareSpec{}.busbw_ramp_exponent);
  CHECK(spec.kernel_launch_s == HardwareSpec{}.kernel_launch_s);
}
