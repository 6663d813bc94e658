// Merging cost profiles of one kind of hardware into one (`fsdptune profile merge`,
// docs/profile-format.md "Merged profiles"), e.g. a CUPTI compute profile with an
// nccl-tests collective import. Pure: the CLI reads and writes the files.
#pragma once

#include <string>
#include <vector>

#include "fsdptune/profile.hpp"

namespace fsdptune {

// What to do when two inputs measured the same thing: the same compute signature, a sweep
// of the same (kind, ranks, ranks_per_node), or two different sets of measured contention
// factors.
enum class MergeOverlap {
  kError,  // refuse (the default): the caller decides which measurement to trust
  kFirst,  // keep the one from the input listed first
  kLast,   // keep the one from the input listed last
};
// "error", "first", "last"; throws Error(kBadInput) naming `where` otherwise.
MergeOverlap merge_overlap_from_string(const std::string& text, const std::string& where);

struct NamedProfile {
  std::string source;  // file name, for errors and ProfilePart::source
  Profile profile;
};

struct ProfileMergeResult {
  Profile profile;
  // One line per overlap resolved by kFirst / kLast: what was dropped, from which input.
  std::vector<std::string> notes;
};

// Merges `inputs` (at least two) in order:
// - every input must have the same `hardware` (else Error(kBadInput) naming the input);
// - compute entries: the union by signature; sweeps: the union by (kind, ranks,
//   ranks_per_node), a sweep taken whole from one input (points of two sweeps are never
//   mixed: their curves were measured under different conditions). Order: first
//   appearance; an entry replaced under kLast keeps the position of its first appearance;
// - contention factors: those of the inputs that measured them -- a merged input with a
//   contention_part, an unmerged one whose factors differ from the defaults
//   (ContentionFactors{}); none: the defaults; several equal ones: the first's;
//   several different ones: an overlap;
// - provenance: `parts` lists every input's provenance with its source; an input that is
//   itself merged contributes its parts (source "INPUT: PART SOURCE") instead, so parts are
//   always the measured ones. Every entry's `part` says where it came from. The merged
//   profile's own provenance.method is "merge"; its tool, date and command are left to the
//   caller, its environment lists the inputs ("inputs": "a.json, b.json").
// Throws Error(kBadInput) on an overlap under kError, naming both inputs and the entry.
ProfileMergeResult merge_profiles(const std::vector<NamedProfile>& inputs, MergeOverlap overlap);

}  // namespace fsdptune
