// Merging profiles (profile_merge.hpp): union of entries, the overlap rules, contention,
// provenance parts, and the merged format's round trip and validation.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "fsdptune/error.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/profile.hpp"
#include "fsdptune/profile_merge.hpp"
#include "fsdptune/units.hpp"
#include "test_workloads.hpp"

using namespace fsdptune;
using fsdptune::testing::bf16_gemm_op;

namespace {

Provenance provenance(const std::string& method) {
  return {
      "fsdptune 0.1.0", "2026-11-29T18:00:00Z", method, "fsdptune profile ...", {{"host", "a"}}};
}

// A CUPTI-like compute profile: two GEMMs, measured contention.
Profile compute_profile() {
  Profile profile;
  profile.hardware = "h200";
  const Op small = bf16_gemm_op(1024, 1024, 1024);
  const Op large = bf16_gemm_op(8192, 4096, 4096);
  profile.compute.push_back({small.signature(), small, {1e-5, 1.1e-5}});
  profile.compute.push_back({large.signature(), large, {4e-4}});
  profile.contention = {1.2, 0.8};
  profile.provenance = provenance("cupti");
  return profile;
}

// An nccl-tests-like import: sweeps only, default contention.
Profile collective_profile() {
  Profile profile;
  profile.hardware = "h200";
  profile.collectives.push_back(
      {CollectiveKind::kAllGather, {8, 8}, {{kMiB, {2.5e-5}}, {kGiB, {2.7e-3}}}});
  profile.collectives.push_back({CollectiveKind::kReduceScatter, {8, 8}, {{kMiB, {2.6e-5}}}});
  profile.provenance = provenance("nccl-tests import");
  return profile;
}

}  // namespace

TEST_CASE("merging a compute profile and a collective import keeps both and their provenance",
          "[profiler][merge]") {
  const ProfileMergeResult result =
      merge_profiles({{"cupti.json", compute_profile()}, {"nccl.json", collective_profile()}},
                     MergeOverlap::kError);
  const Profile& merged = result.profile;
  CHECK(result.notes.empty());
  CHECK(merged.hardware == "h200");
  REQUIRE(merged.compute.size() == 2);
  REQUIRE(merged.collectives.size() == 2);
  // Entries unchanged but for their part: 0 = cupti.json, 1 = nccl.json.
  for (std::size_t i = 0; i < 2; ++i) {
    ComputeEntry expected = compute_profile().compute[i];
    expected.part = 0;
    CHECK(merged.compute[i] == expected);
    CollectiveSweep expected_sweep = collective_profile().collectives[i];
    expected_sweep.part = 1;
    CHECK(merged.collectives[i] == expected_sweep);
  }
  REQUIRE(merged.parts.size() == 2);
  CHECK(merged.parts[0] == ProfilePart{"cupti.json", provenance("cupti")});
  CHECK(merged.parts[1] == ProfilePart{"nccl.json", provenance("nccl-tests import")});
  // Only cupti.json measured contention (nccl.json has the defaults).
  CHECK(merged.contention == ContentionFactors{1.2, 0.8, 1});
  CHECK(merged.contention_part == 0);
  CHECK(merged.provenance.method == "merge");
  CHECK(merged.provenance.environment.at("inputs") == "cupti.json, nccl.json");
}

TEST_CASE("merged profiles round-trip byte-identically and validate their parts",
          "[profiler][merge]") {
  const Profile merged =
      merge_profiles({{"cupti.json", compute_profile()}, {"nccl.json", collective_profile()}},
                     MergeOverlap::kError)
          .profile;
  const std::string text = dump_json(profile_to_json(merged));
  const Profile read = profile_from_json(parse_json_text(text, "m.json"), "m.json");
  CHECK(read == merged);
  CHECK(dump_json(profile_to_json(read)) == text);

  // An unmerged profile writes no parts at all (its bytes do not change with the format).
  const nlohmann::json plain = profile_to_json(compute_profile());
  CHECK_FALSE(plain.contains("parts"));
  CHECK_FALSE(plain.at("compute").at(0).contains("part"));
  CHECK_FALSE(plain.at("contention").contains("part"));

  auto rejected = [](const nlohmann::json& json, const std::string& field) {
    try {
      profile_from_json(json, "m.json");
      FAIL("accepted; expected an error about " << field);
    } catch (const Error& e) {
      CHECK(e.exit_code() == 2);
      CHECK_THAT(e.where(), Catch::Contains("m.json") && Catch::Contains(field));
    }
  };
  nlohmann::json json = profile_to_json(merged);
  json["compute"][1]["part"] = 2;  // only parts 0 and 1 exist
  rejected(json, "compute[1].part");
  json = profile_to_json(merged);
  json["collectives"][0].erase("part");
  rejected(json, "collectives[0].part");
  json = profile_to_json(merged);
  json["contention"]["part"] = -1;
  rejected(json, "contention.part");
  json = profile_to_json(merged);
  json["parts"] = nlohmann::json::array();
  rejected(json, "parts");
  json = profile_to_json(merged);
  json["parts"][0].erase("source");
  rejected(json, "parts[0].source");
  json = profile_to_json(merged);
  json["parts"][0]["extra"] = 1;  // found by QA: read, and dropped by merge
  rejected(json, "parts[0].extra");
  nlohmann::json unmerged = profile_to_json(compute_profile());
  unmerged["compute"][0]["part"] = 0;  // a part without parts
  rejected(unmerged, "compute[0].part");
}

TEST_CASE("overlapping entries: an error by default, else the first or the last wins",
          "[profiler][merge]") {
  // a.json and b.json both measured the 1024^3 GEMM (1e-5 s vs 3e-5 s) and both have an
  // all-gather sweep over 8 ranks; b.json also has a 2048^3 GEMM of its own.
  Profile a = compute_profile();
  a.collectives = collective_profile().collectives;
  Profile b;
  b.hardware = "h200";
  const Op same = bf16_gemm_op(1024, 1024, 1024);
  const Op other = bf16_gemm_op(2048, 2048, 2048);
  b.compute.push_back({other.signature(), other, {8e-5}});
  b.compute.push_back({same.signature(), same, {3e-5}});
  b.collectives.push_back({CollectiveKind::kAllGather, {8, 8}, {{kGiB, {3e-3}}}});
  b.provenance = provenance("kineto import");

  // 8 ranks at 16 per node are 8 ranks at 8 per node, as the reader keys them: one sweep
  // (found in review: merged as two, the merged file then refused on reading).
  Profile wide = b;
  wide.compute.clear();
  wide.collectives.front().group.ranks_per_node = 16;
  try {
    merge_profiles({{"a.json", a}, {"wide.json", wide}}, MergeOverlap::kError);
    FAIL("the same sweep at another per-node count was merged twice");
  } catch (const Error& e) {
    CHECK(e.where() == "wide.json: collectives[0]");
  }
  const ProfileMergeResult wide_last =
      merge_profiles({{"a.json", a}, {"wide.json", wide}}, MergeOverlap::kLast);
  CHECK(wide_last.profile.collectives.size() == a.collectives.size());
  CHECK(profile_from_json(profile_to_json(wide_last.profile), "merged") == wide_last.profile);

  try {
    merge_profiles({{"a.json", a}, {"b.json", b}}, MergeOverlap::kError);
    FAIL("an overlap was accepted");
  } catch (const Error& e) {
    CHECK(e.exit_code() == 2);
    CHECK(e.where() == "b.json: compute[1]");
    CHECK_THAT(e.message(), Catch::Contains(same.signature()) && Catch::Contains("a.json"));
    CHECK_THAT(e.hint(), Catch::Contains("--prefer"));
  }

  const ProfileMergeResult first =
      merge_profiles({{"a.json", a}, {"b.json", b}}, MergeOverlap::kFirst);
  // a's two GEMMs, then b's new one; a's sweeps (all-gather and reduce-scatter).
  REQUIRE(first.profile.compute.size() == 3);
  CHECK(first.profile.compute[0].samples_s == std::vector<double>{1e-5, 1.1e-5});
  CHECK(first.profile.compute[0].part == 0);
  CHECK(first.profile.compute[2].signature == other.signature());
  CHECK(first.profile.compute[2].part == 1);
  REQUIRE(first.profile.collectives.size() == 2);
  CHECK(first.profile.collectives[0].points.size() == 2);  // a's, not mixed with b's point
  CHECK(first.profile.collectives[0].part == 0);
  CHECK(first.notes.size() == 2);  // the GEMM and the sweep

  const ProfileMergeResult last =
      merge_profiles({{"a.json", a}, {"b.json", b}}, MergeOverlap::kLast);
  REQUIRE(last.profile.compute.size() == 3);
  // Replaced in place: the position of the first appearance, b's samples and part.
  CHECK(last.profile.compute[0].signature == same.signature());
  CHECK(last.profile.compute[0].samples_s == std::vector<double>{3e-5});
  CHECK(last.profile.compute[0].part == 1);
  CHECK(last.profile.collectives[0].points.size() == 1);
  CHECK(last.profile.collectives[0].part == 1);
  REQUIRE(last.notes.size() == 2);
  CHECK_THAT(last.notes[0], Catch::Contains("kept b.json (compute[1]), dropped a.json"));
  // A third input drops the second's, the one kept until then (found by mutation testing,
  // 2026-12-07: the notes named the first, untested with two inputs).
  const ProfileMergeResult third =
      merge_profiles({{"a.json", a}, {"b.json", b}, {"c.json", b}}, MergeOverlap::kLast);
  std::string notes;
  for (const std::string& note : third.notes) notes += note + "\n";
  INFO(notes);
  CHECK_THAT(notes, Catch::Contains("kept c.json (compute[1]), dropped b.json") &&
                        Catch::Contains("kept c.json (collectives[0]), dropped b.json") &&
                        !Catch::Contains("kept c.json (compute[1]), dropped a.json") &&
                        !Catch::Contains("kept c.json (collectives[0]), dropped a.json"));
}

TEST_CASE("contention: measured factors win over defaults, two different ones overlap",
          "[profiler][merge]") {
  Profile a = collective_profile();  // defaults
  Profile b = compute_profile();     // measured {1.2, 0.8}
  b.compute.clear();
  const ProfileMergeResult one =
      merge_profiles({{"a.json", a}, {"b.json", b}}, MergeOverlap::kError);
  CHECK(one.profile.contention == ContentionFactors{1.2, 0.8, 1});
  CHECK(one.profile.contention_part == 1);

  // Neither measured: the defaults and no part.
  const Profile c = collective_profile();
  Profile d;
  d.hardware = "h200";
  const ProfileMergeResult none =
      merge_profiles({{"c.json", c}, {"d.json", d}}, MergeOverlap::kFirst);
  CHECK(none.profile.contention == ContentionFactors{});
  CHECK(none.profile.contention_part == -1);

  // Two equal measured factors are no conflict; two different ones are.
  Profile e = b;
  const ProfileMergeResult equal =
      merge_profiles({{"b.json", b}, {"e.json", e}}, MergeOverlap::kError);
  CHECK(equal.profile.contention_part == 0);
  e.contention = {1.3, 0.7};
  CHECK_THROWS_AS(merge_profiles({{"b.json", b}, {"e.json", e}}, MergeOverlap::kError), Error);
  const ProfileMergeResult later =
      merge_profiles({{"b.json", b}, {"e.json", e}}, MergeOverlap::kLast);
  CHECK(later.profile.contention == ContentionFactors{1.3, 0.7, 1});
  CHECK(later.profile.contention_part == 1);
}

TEST_CASE("merging a merged profile flattens its parts", "[profiler][merge]") {
  const Profile ab =
      merge_profiles({{"a.json", compute_profile()}, {"b.json", collective_profile()}},
                     MergeOverlap::kError)
          .profile;
  Profile c;
  c.hardware = "h200";
  c.collectives.push_back({CollectiveKind::kAllReduce, {8, 8}, {{kMiB, {4e-5}}}});
  c.provenance = provenance("cpu-steady-clock");
  const Profile abc =
      merge_profiles({{"ab.json", ab}, {"c.json", c}}, MergeOverlap::kError).profile;
  REQUIRE(abc.parts.size() == 3);
  CHECK(abc.parts[0].source == "ab.json: a.json");
  CHECK(abc.parts[0].provenance.method == "cupti");
  CHECK(abc.parts[1].source == "ab.json: b.json");
  CHECK(abc.parts[2].source == "c.json");
  CHECK(abc.compute[0].part == 0);
  CHECK(abc.collectives[0].part == 1);
  CHECK(abc.collectives[2].part == 2);
  CHECK(abc.contention_part == 0);  // measured by a.json, through ab.json
}

TEST_CASE("merge refuses mixed hardware, fewer than two inputs, unknown rules",
          "[profiler][merge]") {
  Profile other = collective_profile();
  other.hardware = "h100-sxm";
  try {
    merge_profiles({{"a.json", compute_profile()}, {"b.json", other}}, MergeOverlap::kFirst);
    FAIL("mixed hardware accepted");
  } catch (const Error& e) {
    CHECK(e.where() == "b.json: field 'hardware'");
  }
  CHECK_THROWS_AS(merge_profiles({{"a.json", compute_profile()}}, MergeOverlap::kError), Error);
  CHECK(merge_overlap_from_string("last", "--prefer") == MergeOverlap::kLast);
  try {
    merge_overlap_from_string("newest", "--prefer");
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(e.where() == "--prefer");
  }
}
