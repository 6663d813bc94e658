#include <catch2/catch.hpp>

#include <cstdint>
#include <sstream>

#include "fsdptune/compare.hpp"
#include "fsdptune/error.hpp"
#include "fsdptune/io.hpp"

using namespace fsdptune;

namespace {

// Three tasks predicted at [0, 1], [1, 3], [0, 0.5] ms.
ScheduleFile small_schedule() {
  ScheduleFile schedule;
  schedule.job.gpus = 2;  // dp_shard 2
  schedule.program.streams = {{"compute", StreamRole::kCompute}, {"comm", StreamRole::kAllGather}};
  for (int i = 0; i < 3; ++i) {
    Task task;
    task.id = i;
    task.name = "task " + std::to_string(i);
    task.kind = i == 2 ? TaskKind::kAllGather : TaskKind::kForward;
    task.stream = i == 2 ? 1 : 0;
    schedule.program.tasks.push_back(task);
  }
  schedule.timings = {{0, 1e-3}, {1e-3, 3e-3}, {0, 0.5e-3}};
  schedule.predicted.step_time_s = 3e-3;
  schedule.predicted.compute_s = 3e-3;
  schedule.predicted.exposed_comm_s = 0;
  schedule.predicted.peak_allocated_bytes = 1000;
  return schedule;
}

MeasuredResult measurement_of(const ScheduleFile& schedule) {
  MeasuredResult measured;
  measured.schedule_hash = schedule_hash(schedule);
  measured.backend = "cpu";
  measured.world_size = 2;
  measured.step_time_s = 4e-3;
  measured.compute_s = 3e-3;
  measured.exposed_comm_s = 1e-3;
  measured.peak_allocated_bytes = 800;
  // Durations 1.5, 2.0 and 0.5 ms: task 0 differs by 0.5 ms, the others by 0.
  measured.timings = {{0, 1.5e-3}, {2e-3, 4e-3}, {0, 0.5e-3}};
  return measured;
}

// A measurement of a pp 2 schedule on 2 ranks (dp_shard 1), its figures left 0.
MeasuredResult pp2_measurement_of(const ScheduleFile& schedule) {
  MeasuredResult measured;
  measured.schedule_hash = schedule_hash(schedule);
  measured.backend = "cpu";
  measured.world_size = 2;
  measured.pp = 2;
  measured.dp_shard = 1;
  return measured;
}

}  // namespace

TEST_CASE("compare_values is (predicted - measured) / measured", "[compare]") {
  CHECK(compare_values(3, 4).relative_error == Approx(-0.25));
  CHECK(compare_values(5, 4).relative_error == Approx(0.25));
  CHECK(compare_values(0, 0).relative_error == 0);
  CHECK(compare_values(1, 0).relative_error == 1);
}

TEST_CASE("compare puts prediction and measurement side by side", "[compare]") {
  const ScheduleFile schedule = small_schedule();
  const Comparison c = compare(schedule, measurement_of(schedule), "m.json", 2);
  // Step 3 ms predicted vs 4 ms measured: -25%. Peak 1000 vs 800 bytes: +25%.
  CHECK(c.step_time_s.relative_error == Approx(-0.25));
  CHECK(c.compute_s.relative_error == Approx(0));
  CHECK(c.exposed_comm_s.predicted == 0);
  CHECK(c.exposed_comm_s.relative_error == -1);
  CHECK(c.peak_allocated_bytes.relative_error == Approx(0.25));
  REQUIRE(c.tasks_differing_most.size() == 2);
  // Task 0: 1 ms predicted, 1.5 ms measured -> first. Then the ties in id order: task 1.
  CHECK(c.tasks_differing_most[0].task == 0);
  CHECK(c.tasks_differing_most[0].duration_s.relative_error == Approx(-1.0 / 3));
  CHECK(c.tasks_differing_most[1].task == 1);
  CHECK(c.tasks_differing_most[1].start_s.predicted == Approx(1e-3));
  CHECK(c.tasks_differing_most[1].start_s.measured == Approx(2e-3));
  const auto json = comparison_to_json(c);
  CHECK(json.at("step_time_s").at("measured").get<double>() == 4e-3);
  CHECK(json.at("tasks_differing_most").size() == 2);
  // Bytes are integers: 1000, not 1000.0.
  CHECK(json.at("peak_allocated_bytes").at("predicted").is_number_integer());
  CHECK(json.at("peak_allocated_bytes").at("measured").get<std::int64_t>() == 800);
  std::ostringstream text;
  print_comparison(text, c);
  CHECK_THAT(text.str(), Catch::Contains("step time") && Catch::Contains("-25.0%") &&
                             Catch::Contains("task 0"));
  // A task faster than predicted ranks by the size of its difference too (found by mutation
  // testing, 2026-12-07: every task here was slower, so a signed order passed): task 1 at
  // 1.2 ms of its 2 ms (0.8 ms) before task 0's 0.5 ms.
  MeasuredResult faster = measurement_of(schedule);
  faster.timings[1] = {2e-3, 3.2e-3};
  const Comparison ranked = compare(schedule, faster, "m.json", 3);
  REQUIRE(ranked.tasks_differing_most.size() == 3);
  CHECK(ranked.tasks_differing_most[0].task == 1);
  CHECK(ranked.tasks_differing_most[1].task == 0);
  CHECK(ranked.tasks_differing_most[2].task == 2);
}

TEST_CASE("compare states the any-timing peak and whether the measured one is within it",
          "[compare]") {
  ScheduleFile schedule = small_schedule();
  // 600 persistent; task 0 (compute) allocates 300 at its start, the all-gather (its own
  // stream) 250 at its start and frees them at its end, task 1 frees task 0's at its end:
  // at worst 600 + 300 + 250 = 1150, the all-gather running beside task 0 or task 1.
  schedule.program.persistent_bytes = 600;
  schedule.program.tasks[0].memory = {{MemoryCategory::kActivations, 300, false}};
  schedule.program.tasks[1].memory = {{MemoryCategory::kActivations, -300, true}};
  schedule.program.tasks[2].memory = {{MemoryCategory::kGatheredParams, 250, false},
                                      {MemoryCategory::kGatheredParams, -250, true}};
  MeasuredResult measured = measurement_of(schedule);
  measured.peak_allocated_bytes = 1150;
  Comparison c = compare(schedule, measured, "m.json");
  CHECK(c.any_timing_peak_allocated_bytes == 1150);
  CHECK(comparison_to_json(c).at("any_timing_peak_allocated_bytes") == 1150);
  std::ostringstream within;
  print_comparison(within, c);
  CHECK_THAT(within.str(), Catch::Contains("any timing") && Catch::Contains("within"));

  // A replay that allocated more than any order can: said, as a bug.
  measured.peak_allocated_bytes = 1151;
  c = compare(schedule, measured, "m.json");
  std::ostringstream above;
  print_comparison(above, c);
  CHECK_THAT(above.str(), Catch::Contains("ABOVE") && Catch::Contains("a bug"));

  // Nothing allocated by the Program (a hand-made schedule): no bound, no row, no field.
  c = compare(small_schedule(), measurement_of(small_schedule()), "m.json");
  CHECK_FALSE(c.any_timing_peak_allocated_bytes.has_value());
  CHECK_FALSE(comparison_to_json(c).contains("any_timing_peak_allocated_bytes"));
}

TEST_CASE("compare sums each rank's compute tasks and names the slowest and fastest rank",
          "[compare]") {
  const ScheduleFile schedule = small_schedule();
  MeasuredResult measured = measurement_of(schedule);
  // Without every rank's own timings (measured.json before version 3): nothing by rank.
  CHECK(compare(schedule, measured, "m.json").rank_compute_s.empty());
  // Tasks 0 and 1 on the compute stream, task 2 an all-gather: rank 0 computes 1.5 + 2.0
  // = 3.5 ms, rank 1 1.0 + 3.0 = 4.0 ms (its all-gather's 5 ms does not count).
  measured.ranks.resize(2);
  measured.ranks[0].timings = {{0, 1.5e-3}, {2e-3, 4e-3}, {0, 0.5e-3}};
  measured.ranks[1].timings = {{0, 1e-3}, {1e-3, 4e-3}, {0, 5e-3}};
  const Comparison c = compare(schedule, measured, "m.json");
  REQUIRE(c.rank_compute_s.size() == 2);
  CHECK(c.rank_compute_s[0] == Approx(3.5e-3));
  CHECK(c.rank_compute_s[1] == Approx(4.0e-3));
  const nlohmann::json json = comparison_to_json(c);
  CHECK(json["version"] == 7);
  CHECK(json["rank_compute_s"].size() == 2);
  CHECK(json["rank_compute_s"][1].get<double>() == Approx(4.0e-3));
  // Against the median of the two, 3.75 ms: +6.7% and -6.7%.
  std::ostringstream text;
  print_comparison(text, c);
  CHECK_THAT(
      text.str(),
      Catch::Contains(
          "compute by rank (its compute tasks' medians summed): median 3.75 ms, slowest rank 1 "
          "4.00 ms (+6.7%), fastest rank 0 3.50 ms (-6.7%)"));
  // What the figures are: the error's sign, whose compute (rank 0 without a pipeline).
  CHECK_THAT(text.str(), Catch::Contains("\nerror = predicted / measured - 1; compute = rank 0's "
                                         "compute-stream busy time, median of the steps\n"));
  // A rank without its timings: nothing by rank.
  measured.ranks[1].timings.clear();
  CHECK(compare(schedule, measured, "m.json").rank_compute_s.empty());
}

TEST_CASE("compare refuses a measurement of another schedule", "[compare]") {
  const ScheduleFile schedule = small_schedule();
  MeasuredResult measured = measurement_of(schedule);
  measured.schedule_hash = "not-this-one";
  try {
    compare(schedule, measured, "m.json");
    FAIL("compared another schedule's measurement");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kBadInput);
    CHECK(e.where() == "m.json: schedule_hash");
  }
  measured = measurement_of(schedule);
  measured.timings.pop_back();
  CHECK_THROWS_AS(compare(schedule, measured, "m.json"), Error);
  // A measurement written before 2026-12-04 names the digest of the schedule's whole text
  // (provenance included): still this schedule's.
  measured = measurement_of(schedule);
  measured.schedule_hash = fnv1a64_hex(dump_json(schedule_to_json(schedule)));
  CHECK(compare(schedule, measured, "m.json").schedule_hash == schedule_hash(schedule));
}

TEST_CASE("compare marks a scaled-down replay's communication as not comparable", "[compare]") {
  ScheduleFile schedule = small_schedule();
  schedule.job.gpus = 8;  // dp_shard 8, replayed on 2 ranks with 4 shards each
  MeasuredResult measured = measurement_of(schedule);
  measured.dp_shard = 2;
  measured.shards_per_rank = 4;
  const Comparison c = compare(schedule, measured, "m.json", 10);
  CHECK_FALSE(c.communication_comparable);
  CHECK(c.schedule_dp_shard == 8);
  // Only the compute stream's tasks 0 and 1 are ranked; the all-gather (task 2) is not.
  REQUIRE(c.tasks_differing_most.size() == 2);
  CHECK(c.tasks_differing_most[0].task == 0);
  CHECK(c.tasks_differing_most[1].task == 1);
  const auto json = comparison_to_json(c);
  CHECK(json.at("communication_comparable") == false);
  CHECK(json.at("mesh").at("shards_per_rank") == 4);
  std::ostringstream text;
  print_comparison(text, c);
  CHECK_THAT(text.str(), Catch::Contains("scaled down: dp_shard 2 of the schedule's 8") &&
                             Catch::Contains("step time (*)") &&
                             !Catch::Contains("stages' busy and end times"));
  // A pipeline's stage rows hold communication too: marked (found by QA).
  Comparison staged = c;
  staged.stages.push_back(StageComparison{});
  std::ostringstream staged_text;
  print_comparison(staged_text, staged);
  CHECK_THAT(staged_text.str(),
             Catch::Contains("\nthe stages' busy and end times hold their communication too, "
                             "which ran over fewer ranks (*)\n") &&
                 !Catch::Contains("the actions hold"));
  // Its actions too (found by QA: a chunk kept gathered runs its all-gathers in microbatch
  // 0's forward).
  staged.actions_differing_most.push_back(ActionDifference{});
  std::ostringstream actions_text;
  print_comparison(actions_text, staged);
  CHECK_THAT(actions_text.str(),
             Catch::Contains("\nthe actions hold their chunk's communication too (a chunk kept "
                             "gathered: its all-gathers in microbatch 0's forward), which ran "
                             "over fewer ranks (*)\n"));
  // Not scaled down but on another node layout: other links (review).
  staged.node_layout = "2 ranks per node, the schedule's job 4";
  std::ostringstream layout_text;
  print_comparison(layout_text, staged);
  CHECK_THAT(layout_text.str(), Catch::Contains("end times hold their communication too, which "
                                                "ran over other links (*)") &&
                                    Catch::Contains("microbatch 0's forward), which ran over "
                                                    "other links (*)") &&
                                    !Catch::Contains("fewer ranks"));
  staged.node_layout.clear();
  staged.communication_comparable = true;
  std::ostringstream comparable_text;
  print_comparison(comparable_text, staged);
  CHECK(comparable_text.str().find("the actions hold") == std::string::npos);
  // A mesh that does not replay the schedule (2 x 2 shards != 8) names the field.
  measured.shards_per_rank = 2;
  try {
    compare(schedule, measured, "m.json", 10);
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(e.where() == "m.json: mesh");
  }
}

TEST_CASE("compare puts a pipeline's stages next to the measured ones", "[compare][pipeline]") {
  // pp 2 on 2 GPUs (dp_shard 1): stage 0 predicted busy 1 ms, end 4 ms, peak 1000 bytes;
  // stage 1 busy 2 ms, end 3 ms, peak 500.
  ScheduleFile schedule;
  schedule.version = 2;
  schedule.job.gpus = 2;
  schedule.job.pp = 2;
  schedule.job.microbatches = 4;
  schedule.predicted.step_time_s = 4e-3;
  schedule.predicted.peak_allocated_bytes = 1000;
  SchedulePipeline pipeline;
  pipeline.stages = {{0, 1e-3, 4e-3, 3, 1000, 1100, {}}, {1, 2e-3, 3e-3, 1, 500, 550, {}}};
  schedule.pipeline = pipeline;
  MeasuredResult measured = pp2_measurement_of(schedule);
  measured.step_time_s = 5e-3;
  measured.peak_allocated_bytes = 1250;
  MeasuredPipeline stages;
  stages.microbatches = 4;
  stages.schedule = "1f1b";
  // Stage 0 measured busy 2 ms, end 5 ms, peak 1250; stage 1 busy 2 ms, end 4 ms, peak 500.
  stages.stages = {{0, 2e-3, 4e-3, 5e-3, 1250}, {1, 2e-3, 3.5e-3, 4e-3, 500}};
  measured.pipeline = stages;
  const Comparison c = compare(schedule, measured, "m.json");
  CHECK(c.pp == 2);
  CHECK(c.microbatches == 4);
  CHECK(c.tasks_differing_most.empty());
  REQUIRE(c.stages.size() == 2);
  // (4 - 5) / 5 = -20%; (1 - 2) / 2 = -50%; (1000 - 1250) / 1250 = -20%; (3 - 4) / 4 = -25%.
  CHECK(c.step_time_s.relative_error == Approx(-0.2));
  CHECK(c.stages[0].busy_s.relative_error == Approx(-0.5));
  CHECK(c.stages[0].end_s.relative_error == Approx(-0.2));
  CHECK(c.stages[0].peak_allocated_bytes.relative_error == Approx(-0.2));
  CHECK(c.stages[1].end_s.relative_error == Approx(-0.25));
  CHECK(c.stages[1].peak_allocated_bytes.relative_error == 0);
  const nlohmann::json json = comparison_to_json(c);
  CHECK(json["version"] == 7);
  CHECK(json["stages"][1]["busy_s"]["measured"] == 2e-3);
  // Without its chunks (no schedule file's), a stage has no bound at any timing.
  CHECK(c.stages[0].any_timing_peak_allocated_bytes == 0);
  CHECK_FALSE(json["stages"][0].contains("any_timing_peak_allocated_bytes"));
  // A pipeline's stages stand for its ranks: no compute by rank.
  CHECK(c.rank_compute_s.empty());
  CHECK_FALSE(json.contains("rank_compute_s"));
  // No per-rank actions measured (measured.json before version 5): none compared.
  CHECK(c.actions_differing_most.empty());
  CHECK(json["actions_differing_most"].empty());
  std::ostringstream table;
  print_comparison(table, c);
  CHECK_THAT(table.str(), Catch::Contains("pipeline: 2 stages (1f1b), 4 microbatches"));
  // A pipeline's compute is the rank that ended last's (measured-format.md).
  CHECK_THAT(table.str(), Catch::Contains("compute = the last-ending rank's compute-stream"));
  // A pipeline run of other microbatches or another schedule is not this schedule's.
  MeasuredResult ran = measured;
  ran.pipeline->microbatches = 3;
  CHECK_THROWS_WITH(compare(schedule, ran, "m.json"),
                    Catch::Contains("is 3, the schedule's job has 4"));
  ran = measured;
  ran.pipeline->schedule = "gpipe";
  try {
    compare(schedule, ran, "m.json");
    FAIL("accepted a gpipe run of a 1f1b schedule");
  } catch (const Error& e) {
    CHECK(e.where() == "m.json: pipeline.schedule");
  }
  // A measurement without stages, or of another pp, is refused naming the field.
  MeasuredResult flat = measured;
  flat.pipeline.reset();
  CHECK_THROWS_WITH(compare(schedule, flat, "m.json"), Catch::Contains("per-stage figures"));
  MeasuredResult other = measured;
  other.pp = 1;
  other.dp_shard = 2;
  CHECK_THROWS_WITH(compare(schedule, other, "m.json"), Catch::Contains("does not replay"));
}

namespace {

// pp 2 on 2 GPUs, 1 microbatch: chunk c on stage c, each a Program of a forward (compute,
// 1 ms) and a reduce-scatter (its own stream, 2 ms); each stage predicted to run its
// forward then its backward. Measured with per-rank actions and chunk tasks (version 5).
std::pair<ScheduleFile, MeasuredResult> pipeline_with_actions() {
  ScheduleFile schedule;
  schedule.version = 2;
  schedule.job.gpus = 2;
  schedule.job.pp = 2;
  SchedulePipeline pipeline;
  for (int c = 0; c < 2; ++c) {
    ScheduleChunk chunk;
    chunk.rank = c;
    chunk.program.streams = {{"compute", StreamRole::kCompute},
                             {"reduce-scatter", StreamRole::kReduceScatter}};
    for (int t = 0; t < 2; ++t) {
      Task task;
      task.id = t;
      task.name = t == 0 ? "forward" : "reduce-scatter";
      task.kind = t == 0 ? TaskKind::kForward : TaskKind::kReduceScatter;
      task.stream = t;
      task.duration_s = (t + 1) * 1e-3;
      chunk.program.tasks.push_back(task);
    }
    pipeline.chunks.push_back(chunk);
  }
  pipeline.stages = {
      {0, 2e-3, 5e-3, 1, 100, 100, {{0, 0, false, 0, 1e-3}, {0, 0, true, 3e-3, 4e-3}}},
      {1, 2e-3, 4e-3, 1, 100, 100, {{1, 0, false, 1e-3, 2e-3}, {1, 0, true, 2e-3, 3e-3}}}};
  schedule.pipeline = pipeline;
  MeasuredResult measured = pp2_measurement_of(schedule);
  MeasuredPipeline stages;
  stages.microbatches = schedule.job.microbatches;
  stages.schedule = "1f1b";
  stages.stages = {{0, 2e-3, 4e-3, 5e-3, 100}, {1, 2e-3, 3e-3, 4e-3, 100}};
  measured.pipeline = stages;
  measured.ranks.resize(2);
  // Stage 0's backward ran 3 ms (2 ms long); stage 1's forward started 0.5 ms late.
  measured.ranks[0].actions = {{0, 0, false, 0, 1e-3}, {0, 0, true, 3e-3, 6e-3}};
  measured.ranks[1].actions = {{1, 0, false, 1.5e-3, 2.5e-3}, {1, 0, true, 2.5e-3, 3.5e-3}};
  // Chunk 0's forward ran twice at 1.25 ms; its reduce-scatter once at 2 ms; chunk 1's
  // reduce-scatter did not run.
  measured.ranks[0].chunks = {{0, {{2, 1.25e-3}, {1, 2e-3}}}};
  measured.ranks[1].chunks = {{1, {{1, 1e-3}, {0, 0}}}};
  return {schedule, measured};
}

// compare(schedule, bad) must refuse `bad` as bad input naming `where`.
void expect_refused(const ScheduleFile& schedule, const MeasuredResult& bad,
                    const std::string& where) {
  try {
    compare(schedule, bad, "m.json");
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kBadInput);
    CHECK(e.where() == where);
  }
}

}  // namespace

TEST_CASE("compare ranks a pipeline's actions and its chunks' tasks by duration",
          "[compare][pipeline]") {
  const auto [schedule, measured] = pipeline_with_actions();
  const Comparison c = compare(schedule, measured, "m.json");
  REQUIRE(c.actions_differing_most.size() == 4);
  const ActionDifference& first = c.actions_differing_most[0];
  CHECK(first.stage == 0);
  CHECK(first.backward);
  CHECK(first.duration_s.predicted == Approx(1e-3));
  CHECK(first.duration_s.measured == Approx(3e-3));
  // The other three ran as long as predicted: in stage, then execution, order.
  CHECK(c.actions_differing_most[1].stage == 0);
  CHECK_FALSE(c.actions_differing_most[1].backward);
  CHECK(c.actions_differing_most[2].stage == 1);
  CHECK(c.actions_differing_most[2].start_s.measured == Approx(1.5e-3));
  // Tasks: chunk 0's forward (0.25 ms long, 2 runs), then its reduce-scatter and chunk 1's
  // forward (as predicted); chunk 1's reduce-scatter never ran and is left out.
  REQUIRE(c.tasks_differing_most.size() == 3);
  CHECK(c.tasks_differing_most[0].chunk == 0);
  CHECK(c.tasks_differing_most[0].task == 0);
  CHECK(c.tasks_differing_most[0].runs == 2);
  CHECK(c.tasks_differing_most[0].duration_s.relative_error == Approx(-0.2));
  CHECK(c.tasks_differing_most[2].chunk == 1);
  const nlohmann::json json = comparison_to_json(c);
  CHECK(json["actions_differing_most"][0]["duration_s"]["measured"] == 3e-3);
  CHECK(json["tasks_differing_most"][0]["chunk"] == 0);
  CHECK(json["tasks_differing_most"][0]["runs"] == 2);
  CHECK_FALSE(json["tasks_differing_most"][0].contains("start_s"));
  std::ostringstream table;
  print_comparison(table, c);
  CHECK_THAT(table.str(), Catch::Contains("actions differing most") &&
                              Catch::Contains("backward") && Catch::Contains("runs"));
  // At most top_tasks of each.
  const Comparison two = compare(schedule, measured, "m.json", 2);
  CHECK(two.actions_differing_most.size() == 2);
  CHECK(two.tasks_differing_most.size() == 2);
  // Scaled down (the schedule's 2 shard ranks per stage on 1): only compute tasks, the
  // forward of each chunk.
  ScheduleFile wider = schedule;
  wider.job.gpus = 4;
  MeasuredResult scaled = measured;
  scaled.schedule_hash = schedule_hash(wider);
  scaled.shards_per_rank = 2;
  const Comparison scaled_down = compare(wider, scaled, "m.json");
  CHECK_FALSE(scaled_down.communication_comparable);
  REQUIRE(scaled_down.tasks_differing_most.size() == 2);
  for (const TaskDifference& task : scaled_down.tasks_differing_most) CHECK(task.task == 0);
}

TEST_CASE("compare refuses a pipeline measurement whose actions or chunks are not the schedule's",
          "[compare][pipeline]") {
  const auto [schedule, measured] = pipeline_with_actions();
  const auto expect = [&, schedule = schedule](const MeasuredResult& bad,
                                               const std::string& where) {
    expect_refused(schedule, bad, where);
  };
  MeasuredResult bad = measured;
  bad.ranks[1].actions[1].backward = false;
  expect(bad, "m.json: ranks[1].actions[1]");
  bad = measured;
  bad.ranks[0].actions.pop_back();
  expect(bad, "m.json: ranks[0].actions");
  bad = measured;
  bad.ranks[0].chunks[0].chunk = 1;
  expect(bad, "m.json: ranks[0].chunks[0]: chunk");
  bad = measured;
  bad.ranks[1].chunks[0].tasks.pop_back();
  expect(bad, "m.json: ranks[1].chunks[0]: tasks");
}

// Found probing: only each stage's first rank was checked; the other ranks' actions and
// chunks could be another stage's, out of order or short, and compare printed its table.
TEST_CASE("compare checks every rank of a stage and compares its first", "[compare][pipeline]") {
  auto [schedule, measured] = pipeline_with_actions();
  schedule.job.gpus = 4;
  schedule.job.dp_shard = 2;
  MeasuredResult wide = measured;
  wide.schedule_hash = schedule_hash(schedule);
  wide.world_size = 4;
  wide.dp_shard = 2;
  wide.ranks = {measured.ranks[0], measured.ranks[0], measured.ranks[1], measured.ranks[1]};
  const Comparison c = compare(schedule, wide, "m.json");
  CHECK(c.actions_differing_most.size() == 4);  // the first rank of each stage
  const auto expect = [&, schedule = schedule](const MeasuredResult& bad,
                                               const std::string& where) {
    expect_refused(schedule, bad, where);
  };
  MeasuredResult bad = wide;
  bad.ranks[1].chunks[0].tasks.pop_back();
  expect(bad, "m.json: ranks[1].chunks[0]: tasks");
  bad = wide;
  bad.ranks[1].chunks[0].chunk = 1;
  expect(bad, "m.json: ranks[1].chunks[0]: chunk");
  bad = wide;
  bad.ranks[3].actions[0].chunk = 0;
  expect(bad, "m.json: ranks[3].actions[0]");
  bad = wide;
  std::swap(bad.ranks[1].actions[0], bad.ranks[1].actions[1]);
  expect(bad, "m.json: ranks[1].actions[0]");
  bad = wide;
  bad.ranks[2].chunks.push_back(bad.ranks[2].chunks[0]);
  expect(bad, "m.json: ranks[2].chunks");
}
