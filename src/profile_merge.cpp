// Merging cost profiles (profile_merge.hpp, docs/profile-format.md "Merged profiles").
#include "fsdptune/profile_merge.hpp"

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "fsdptune/error.hpp"
#include "fsdptune/units.hpp"

namespace fsdptune {
namespace {

constexpr const char* kOverlapHint =
    "keep one with --prefer first or --prefer last, or remove it from one of the inputs";

// Where the first occurrence of an entry sits in the merged profile, and which input and
// which of its entries it came from (for messages).
struct Seen {
  std::size_t merged_index = 0;
  std::size_t input = 0;
  std::string field;  // e.g. "compute[3]"
};

// Resolves an overlap between `earlier` and the entry `field` of input `later`: true when
// the later one replaces the earlier one. Throws under MergeOverlap::kError.
bool take_later(MergeOverlap overlap, const std::string& what, const Seen& earlier,
                const std::string& later_field, std::size_t later,
                const std::vector<NamedProfile>& inputs, std::vector<std::string>& notes) {
  const std::string& earlier_source = inputs[earlier.input].source;
  const std::string& later_source = inputs[later].source;
  if (overlap == MergeOverlap::kError) {
    throw_bad_input(fmt::format("{}: {}", later_source, later_field),
                    fmt::format("{} is also in {} ({})", what, earlier_source, earlier.field),
                    kOverlapHint);
  }
  const bool later_wins = overlap == MergeOverlap::kLast;
  notes.push_back(fmt::format(
      "{}: kept {} ({}), dropped {} ({})", what, later_wins ? later_source : earlier_source,
      later_wins ? later_field : earlier.field, later_wins ? earlier_source : later_source,
      later_wins ? earlier.field : later_field));
  return later_wins;
}

}  // namespace

MergeOverlap merge_overlap_from_string(const std::string& text, const std::string& where) {
  if (text == "error") return MergeOverlap::kError;
  if (text == "first") return MergeOverlap::kFirst;
  if (text == "last") return MergeOverlap::kLast;
  throw_bad_input(where, fmt::format("'{}' is not an overlap rule", text),
                  "first, last, or error (the default)");
}

ProfileMergeResult merge_profiles(const std::vector<NamedProfile>& inputs, MergeOverlap overlap) {
  if (inputs.size() < 2) {
    throw_bad_input("profile merge", "needs at least two profiles to merge",
                    "fsdptune profile merge A.json B.json [...] --out C.json");
  }
  ProfileMergeResult result;
  Profile& merged = result.profile;
  merged.hardware = inputs.front().profile.hardware;
  for (const NamedProfile& input : inputs) {
    if (input.profile.hardware != merged.hardware) {
      throw_bad_input(fmt::format("{}: field 'hardware'", input.source),
                      fmt::format("measured on '{}' but {} on '{}'", input.profile.hardware,
                                  inputs.front().source, merged.hardware),
                      "merge only profiles of one kind of hardware");
    }
  }

  // Parts: one per unmerged input, the parts of a merged one. part_map[i][p] is the merged
  // index of input i's part p (an unmerged input's entries have part -1: its only part).
  std::vector<std::vector<int>> part_map(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const NamedProfile& input = inputs[i];
    if (input.profile.parts.empty()) {
      part_map[i].push_back(static_cast<int>(merged.parts.size()));
      merged.parts.push_back({input.source, input.profile.provenance});
      continue;
    }
    for (const ProfilePart& part : input.profile.parts) {
      part_map[i].push_back(static_cast<int>(merged.parts.size()));
      merged.parts.push_back({fmt::format("{}: {}", input.source, part.source), part.provenance});
    }
  }
  auto part_of = [&](std::size_t input, int part) {
    return inputs[input].profile.parts.empty() ? part_map[input].front()
                                               : part_map[input][static_cast<std::size_t>(part)];
  };

  std::map<std::string, Seen> signatures;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::vector<ComputeEntry>& compute = inputs[i].profile.compute;
    for (std::size_t j = 0; j < compute.size(); ++j) {
      ComputeEntry entry = compute[j];
      entry.part = part_of(i, entry.part);
      const std::string field = fmt::format("compute[{}]", j);
      const auto found = signatures.find(entry.signature);
      if (found == signatures.end()) {
        signatures.emplace(entry.signature, Seen{merged.compute.size(), i, field});
        merged.compute.push_back(std::move(entry));
        continue;
      }
      if (take_later(overlap, fmt::format("compute entry '{}'", entry.signature), found->second,
                     field, i, inputs, result.notes)) {
        merged.compute[found->second.merged_index] = std::move(entry);
        found->second.input = i;
        found->second.field = field;
      }
    }
  }

  std::map<std::tuple<CollectiveKind, std::int64_t, std::int64_t>, Seen> sweeps;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::vector<CollectiveSweep>& collectives = inputs[i].profile.collectives;
    for (std::size_t j = 0; j < collectives.size(); ++j) {
      CollectiveSweep sweep = collectives[j];
      sweep.part = part_of(i, sweep.part);
      const std::string field = fmt::format("collectives[{}]", j);
      // As the reader and the cost model key sweeps: a per-node count above the group's
      // size is the group's size (found in review: 8 ranks at 16 and at 8 per node were
      // merged as two sweeps, which the reader then refused).
      const auto key =
          std::make_tuple(sweep.kind, sweep.group.ranks, sweep_ranks_per_node(sweep.group));
      const auto found = sweeps.find(key);
      if (found == sweeps.end()) {
        sweeps.emplace(key, Seen{merged.collectives.size(), i, field});
        merged.collectives.push_back(std::move(sweep));
        continue;
      }
      const std::string what =
          fmt::format("the {} sweep over {} ({} per node)", to_string(sweep.kind),
                      counted(sweep.group.ranks, "rank"), sweep.group.ranks_per_node);
      if (take_later(overlap, what, found->second, field, i, inputs, result.notes)) {
        merged.collectives[found->second.merged_index] = std::move(sweep);
        found->second.input = i;
        found->second.field = field;
      }
    }
  }

  // Contention: only inputs that measured it count (see the header).
  std::optional<Seen> contention_from;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Profile& profile = inputs[i].profile;
    const bool measured = profile.parts.empty() ? profile.contention != ContentionFactors{}
                                                : profile.contention_part >= 0;
    if (!measured) continue;
    const int part = part_of(i, profile.parts.empty() ? -1 : profile.contention_part);
    if (contention_from && profile.contention == merged.contention) continue;
    if (!contention_from || take_later(overlap, "the measured contention", *contention_from,
                                       "contention", i, inputs, result.notes)) {
      merged.contention = profile.contention;
      merged.contention_part = part;
      contention_from = Seen{0, i, "contention"};
    }
  }

  merged.provenance.method = "merge";
  std::string sources;
  for (const NamedProfile& input : inputs) {
    sources += (sources.empty() ? "" : ", ") + input.source;
  }
  merged.provenance.environment["inputs"] = sources;
  return result;
}

}  // namespace fsdptune
