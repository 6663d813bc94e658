#include <catch2/catch.hpp>

#include <string>

#include "fsdptune/error.hpp"
#include "fsdptune/plan.hpp"

using namespace fsdptune;

namespace {

Plan four_unit_plan() {
  Plan plan;
  plan.name = "hand";
  plan.forward_buckets = {{0, 0}, {1, 2}, {3, 3}};
  plan.backward_buckets = {{0, 1}, {2, 3}};
  plan.reduce_scatter_buckets = {{0, 3}};
  plan.forward_prefetch = 2;
  plan.backward_prefetch = 1;
  plan.reshard_after_forward = {true, true, false};
  plan.stream_layout = StreamLayout::kShared;
  return plan;
}

// Runs validate_plan and returns the Error's where ("" when it passed).
std::string rejected_at(const Plan& plan, int units) {
  try {
    validate_plan(plan, units, "plan.json");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kBadInput);
    CHECK(e.exit_code() == 2);
    return e.where();
  }
  return "";
}

}  // namespace

TEST_CASE("plan JSON round-trips", "[plan]") {
  const Plan plan = four_unit_plan();
  const nlohmann::json json = plan_to_json(plan);
  CHECK(json["version"] == kPlanFormatVersion);
  CHECK(json["stream_layout"] == "shared");
  CHECK(plan_from_json(json, "plan.json") == plan);
  CHECK_FALSE(json.contains("reduce_after_backward"));  // written where set only
  Plan other = plan;
  other.one_collective_per_parameter = true;
  other.copy_in_out = false;
  other.reorder = false;
  other.forward_prefetch = 0;
  other.backward_prefetch = 0;
  other.reduce_after_backward = true;
  CHECK(plan_to_json(other)["reduce_after_backward"] == true);
  CHECK(plan_from_json(plan_to_json(other), "plan.json") == other);
}

TEST_CASE("plan JSON defaults backward and reduce-scatter buckets to the forward ones", "[plan]") {
  const auto json = nlohmann::json::parse(
      R"({"version": 1, "name": "short", "forward_buckets": [[0, 1], [2, 2]]})");
  const Plan plan = plan_from_json(json, "short.json");
  CHECK(plan.backward_buckets == plan.forward_buckets);
  CHECK(plan.reduce_scatter_buckets == plan.forward_buckets);
  CHECK(plan.reshard_after_forward == std::vector<bool>{true, true});
  CHECK(plan.forward_prefetch == 1);
  CHECK(plan.stream_layout == StreamLayout::kSeparate);
  CHECK_NOTHROW(validate_plan(plan, 3, "short.json"));
}

TEST_CASE("plan JSON errors name the field", "[plan]") {
  auto where_of = [](const std::string& text) -> std::string {
    try {
      plan_from_json(nlohmann::json::parse(text), "p.json");
    } catch (const Error& e) {
      CHECK(e.exit_code() == 2);
      return e.where();
    }
    return "";
  };
  CHECK(where_of(R"({"name": "x", "forward_buckets": [[0, 0]]})") == "p.json: version");
  CHECK(where_of(R"({"version": 9, "name": "x", "forward_buckets": [[0, 0]]})") ==
        "p.json: version");
  // A newer plan's new field: its version named, not the field (found by QA).
  CHECK(where_of(R"({"version": 9, "name": "x", "forward_buckets": [[0, 0]], "foo": 1})") ==
        "p.json: version");
  CHECK(where_of(R"({"version": 1, "name": "x"})") == "p.json: forward_buckets");
  // A version of any size is named with the version read (found by QA: 99999999999 was
  // "out of range").
  try {
    plan_from_json(nlohmann::json::parse(
                       R"({"version": 99999999999, "name": "x", "forward_buckets": [[0, 0]]})"),
                   "p.json");
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(e.where() == "p.json: version");
    CHECK(e.message() == "is 99999999999, this fsdptune reads version 1");
  }
  CHECK(where_of(R"({"version": 1, "name": "x", "forward_buckets": [[0]]})") ==
        "p.json: forward_buckets[0]");
  CHECK(where_of(R"({"version": 1, "name": "x", "forward_buckets": [[0, 0]], "prefetch": 2})") ==
        "p.json: prefetch");
  CHECK(
      where_of(
          R"({"version": 1, "name": "x", "forward_buckets": [[0, 0]], "stream_layout": "one"})") ==
      "p.json: stream_layout");
  CHECK(where_of(R"({"version": 1, "name": "x", "forward_buckets": [[0, 0]], "reorder": "yes"})") ==
        "p.json: reorder");
  // An empty name names nothing in the tables (found by QA: "plan : 1 forward ...").
  CHECK(where_of(R"({"version": 1, "name": "", "forward_buckets": [[0, 0]]})") == "p.json: name");
  // Above INT64_MAX: refused as out of range, not read as -1; beyond 64 bits, read as a
  // double: out of range too, not "must be an integer" (QA, 2026-12-06).
  for (const std::string number : {"18446744073709551615", "100000000000000000000"}) {
    INFO(number);
    try {
      plan_from_json(
          nlohmann::json::parse(R"({"version": 1, "name": "x", "forward_buckets": [[0, )" + number +
                                "]]}"),
          "p.json");
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK_THAT(e.message(), Catch::Contains(" is out of range"));
    }
  }
}

TEST_CASE("validate_plan accepts a partition and rejects bad bucket lists", "[plan]") {
  CHECK(rejected_at(four_unit_plan(), 4).empty());

  Plan twice = four_unit_plan();
  twice.forward_buckets = {{0, 1}, {1, 2}, {3, 3}};
  CHECK(rejected_at(twice, 4) == "plan.json: forward_buckets[1]");

  Plan missing = four_unit_plan();
  missing.backward_buckets = {{0, 1}, {3, 3}};
  CHECK(rejected_at(missing, 4) == "plan.json: backward_buckets[1]");

  Plan short_tail = four_unit_plan();
  short_tail.reduce_scatter_buckets = {{0, 2}};
  CHECK(rejected_at(short_tail, 4) == "plan.json: reduce_scatter_buckets");

  Plan unknown = four_unit_plan();
  unknown.reduce_scatter_buckets = {{0, 4}};
  CHECK(rejected_at(unknown, 4) == "plan.json: reduce_scatter_buckets[0]");

  Plan reversed = four_unit_plan();
  reversed.backward_buckets = {{1, 0}, {2, 3}};
  CHECK(rejected_at(reversed, 4) == "plan.json: backward_buckets[0]");

  Plan empty = four_unit_plan();
  empty.forward_buckets.clear();
  empty.reshard_after_forward.clear();
  CHECK(rejected_at(empty, 4) == "plan.json: forward_buckets");
}

TEST_CASE("validate_plan checks reshard length and prefetch against reorder", "[plan]") {
  Plan reshard = four_unit_plan();
  reshard.reshard_after_forward = {true, false};
  CHECK(rejected_at(reshard, 4) == "plan.json: reshard_after_forward");
  // Counted in English (QA: "has 0 entries but there are 1 forward buckets").
  reshard.forward_buckets = {{0, 3}};
  reshard.reshard_after_forward = {};
  CHECK_THROWS_WITH(validate_plan(reshard, 4, "plan.json"),
                    Catch::Contains("has 0 entries but there is 1 forward bucket"));
  reshard.reshard_after_forward = {true, false};
  CHECK_THROWS_WITH(validate_plan(reshard, 4, "plan.json"),
                    Catch::Contains("has 2 entries but there is 1 forward bucket"));

  Plan zero = four_unit_plan();
  zero.forward_prefetch = 0;  // reorder is true: gathers must run ahead
  CHECK(rejected_at(zero, 4) == "plan.json: forward_prefetch");

  Plan negative = four_unit_plan();
  negative.backward_prefetch = -1;
  CHECK(rejected_at(negative, 4) == "plan.json: backward_prefetch");

  Plan unordered = four_unit_plan();
  unordered.reorder = false;  // prefetch 2 and 1 left over
  CHECK(rejected_at(unordered, 4) == "plan.json: forward_prefetch");
  unordered.forward_prefetch = 0;
  unordered.backward_prefetch = 0;
  CHECK(rejected_at(unordered, 4).empty());
}
