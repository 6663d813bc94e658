// Fuzz target: a cost profile (docs/profile-format.md), as `--profile FILE` reads it
// (read_profile_file: profile_from_json), then what simulate and tune do with it: the
// profile-backed cost model over its hardware (a built-in spec, or the H100 spec under the
// profile's id as a `--hardware FILE` would give), its lookups and interpolations at and
// between the measured sizes, the tiny workload lowered (fsdp2, simplefsdp-greedy) and
// simulated with it; `profile compare` against the analytic model, and `profile merge` of
// the profile with itself.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <sstream>
#include <vector>

#include "fsdptune/cost_model.hpp"
#include "fsdptune/hardware.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/plans.hpp"
#include "fsdptune/profile.hpp"
#include "fsdptune/profile_compare.hpp"
#include "fsdptune/profile_merge.hpp"
#include "fsdptune/program.hpp"
#include "fsdptune/simulator.hpp"
#include "fuzz_support.hpp"

namespace {

using namespace fsdptune;

HardwareSpec hardware_of(const Profile& profile) {
  for (const std::string& id : builtin_hardware_names()) {
    if (id == profile.hardware) return builtin_hardware(id);
  }
  HardwareSpec hardware = builtin_hardware("h100-sxm");
  hardware.id = profile.hardware;
  return hardware;
}

// Sizes at, just around and halfway between the measured ones (those that fit in 64 bits).
std::vector<std::int64_t> probe_sizes(const std::vector<std::int64_t>& measured) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  std::vector<std::int64_t> sizes;
  for (std::size_t i = 0; i < measured.size(); ++i) {
    const std::int64_t bytes = measured[i];
    for (const std::int64_t probe : {bytes, bytes / 2, bytes - 1, bytes < kMax ? bytes + 1 : bytes,
                                     bytes <= kMax / 2 ? 2 * bytes : bytes}) {
      if (probe >= 0) sizes.push_back(probe);
    }
    if (i + 1 < measured.size()) sizes.push_back(bytes + (measured[i + 1] - bytes) / 2);
  }
  return sizes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return fuzz::expect_errors([&] {
    const std::string source = "profile.json";
    const Profile profile =
        profile_from_json(parse_json_text(fuzz::text_of(data, size), source), source);
    fuzz::require(profile_from_json(profile_to_json(profile), source) == profile,
                  "a profile reads back as written");
    const HardwareSpec hardware = hardware_of(profile);
    const auto costs = make_profile_cost_model(profile, hardware);
    for (const ComputeEntry& entry : profile.compute) {
      (void)costs->compute(entry.op);
      if (entry.op.kind != OpKind::kMemoryBound) continue;
      Op other = entry.op;
      for (const std::int64_t bytes : probe_sizes({entry.op.bytes})) {
        other.bytes = bytes;
        (void)costs->compute(other);
        (void)costs->copy(bytes);
      }
    }
    for (const CollectiveSweep& sweep : profile.collectives) {
      std::vector<std::int64_t> measured;
      for (const CollectivePoint& point : sweep.points) measured.push_back(point.bytes);
      for (const std::int64_t bytes : probe_sizes(measured)) {
        (void)costs->collective(sweep.kind, bytes, sweep.group);
      }
    }
    const Workload& workload = fuzz::tiny_workload();
    for (const Plan& plan :
         {fsdp2_plan(workload),
          simplefsdp_greedy_plan(workload, *costs, default_memory_limit_bytes(hardware))}) {
      const SimResult result = simulate(lower(workload, plan, *costs));
      fuzz::require(std::isfinite(result.step_time_s), "an accepted profile costs a finite step");
      (void)step_metrics(workload, hardware, result);
    }

    // `profile compare`: every entry against the analytic model of its hardware.
    const auto analytic = make_analytic_cost_model(hardware);
    const ProfileComparison comparison = compare_profile(profile, *analytic);
    (void)dump_json(profile_comparison_to_json(comparison));
    std::ostringstream table;
    print_profile_comparison(table, comparison, false);
    print_profile_comparison(table, comparison, true);
    // `profile merge` of the profile with itself, the second's entries kept.
    const ProfileMergeResult merged =
        merge_profiles({{"a.json", profile}, {"b.json", profile}}, MergeOverlap::kLast);
    fuzz::require_no_error("a merged profile reads back", [&] {
      fuzz::require(profile_from_json(profile_to_json(merged.profile), source) == merged.profile,
                    "a merged profile reads back as merged");
    });
  });
}
