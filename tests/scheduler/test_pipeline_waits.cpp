// A backward that reduce-scatters makes its rank wait for them (docs/parallelism.md "A
// backward's reduce-scatters end before the next action"; reduce_scatter_wait_s).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "action_sequence.hpp"
#include "fsdptune/cost_model.hpp"
#include "fsdptune/hardware.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/job.hpp"
#include "fsdptune/model.hpp"
#include "fsdptune/pipeline.hpp"
#include "fsdptune/plans.hpp"
#include "fsdptune/program.hpp"
#include "fsdptune/schedule.hpp"
#include "fsdptune/simulator.hpp"
#include "fsdptune/trace.hpp"
#include "fsdptune/workload.hpp"
#include "pipeline_fixture.hpp"
#include "test_workloads.hpp"

using namespace fsdptune;
using fsdptune::testing::action_sequence_program;

namespace {

// One chunk on one rank (P = 1, M = 2), forwards of 1 s and backwards of 2 s; a
// microbatch's activations are 100 bytes, its one-microbatch peak 1000 (allocated; 1100
// reserved); its tail is 0.5 s, 0.2 s of it the optimizer: a backward that reduce-scatters
// holds the rank up for 0.3 s.
PipelineSpec waiting_spec(PipelineSchedule schedule) {
  PipelineSpec spec;
  spec.microbatches = 2;
  spec.schedule = schedule;
  ChunkTimes chunk;
  chunk.first_forward_s = chunk.forward_s = 1.0;
  chunk.backward_s = chunk.last_backward_s = 2.0;
  chunk.tail_s = 0.5;
  chunk.optimizer_s = 0.2;
  chunk.activation_bytes = 100;
  chunk.base_peak_allocated_bytes = 1000;
  chunk.base_peak_reserved_bytes = 1100;
  // As stage memory: 900 of sharded state, 100 per microbatch (105 reserved); no segments.
  chunk.memory = fsdptune::testing::activation_memory(900, 100, 105);
  spec.allocator_segment_bytes = 1;
  spec.chunks = {chunk};
  return spec;
}

// docs/validation.md's sweep winner: the tiny model on 2 stages x 2-way FSDP, local
// batch 2, seq 128, selective AC, here with `microbatches`.
Workload winner_workload(std::int64_t microbatches) {
  const ModelSpec model = builtin_model("tiny");
  JobSpec job;
  job.gpus = 4;
  job.pp = 2;
  job.microbatches = microbatches;
  job.local_batch = 2;
  job.seq_len = 128;
  job.ac = ActivationCheckpointing::kSelective;
  job = normalize_job(model, job);
  return build_workload(model, job);
}

// The winner's plan of stage 0's chunk (embedding, 2 blocks): its three units gathered in
// one forward bucket (8 MiB at the forward's start: gather buffer and unsharded copy), two
// backward and reduce-scatter buckets, resharded after forward.
Plan one_bucket_plan(const Workload& chunk) {
  Plan plan = fsdp2_plan(chunk);
  plan.name = "tuned";
  plan.forward_buckets = {{0, 2}};
  plan.backward_buckets = {{0, 1}, {2, 2}};
  plan.reduce_scatter_buckets = {{0, 1}, {2, 2}};
  plan.reshard_after_forward = {true};
  return plan;
}

// `chunk` lowered with `plan` and re-gathered per microbatch, composed alone as a rank of
// 3 microbatches under `schedule` (P = 1), and its actions replayed back to back as one
// Program (action_sequence_program).
struct AloneComposition {
  SimResult one;  // the one-microbatch simulation, with timings
  ChunkTimes times;
  StageResult stage;
  SimResult replay;
};
AloneComposition compose_alone(const Workload& chunk, const Plan& plan, PipelineSchedule schedule,
                               const CostModel& costs) {
  AloneComposition composed;
  const Program program = lower(chunk, plan, costs);
  SimOptions options;
  options.record_timings = true;
  composed.one = simulate(program, options);
  PipelineSpec spec;
  spec.microbatches = 3;
  spec.schedule = schedule;
  composed.times = chunk_times(chunk, program, composed.one, false, costs);
  spec.chunks = {composed.times};
  composed.stage = simulate_pipeline(spec).stages[0];
  composed.replay = simulate(action_sequence_program(program, composed.stage.actions));
  return composed;
}

}  // namespace

TEST_CASE("a backward that reduce-scatters holds its rank up for its tail less the optimizer",
          "[pipeline]") {
  REQUIRE(reduce_scatter_wait_s(waiting_spec(PipelineSchedule::k1F1B).chunks[0]) == Approx(0.3));
  SECTION("1F1B re-gathered: F0 B0, 0.3 s, F1 B1, the tail") {
    const PipelineResult result = simulate_pipeline(waiting_spec(PipelineSchedule::k1F1B));
    // Waiting for its own reduce-scatters is not the pipeline's idle time.
    CHECK(result.bubble_fraction == Approx(0.0).margin(1e-12));
    const StageResult& stage = result.stages[0];
    REQUIRE(stage.actions.size() == 4);
    CHECK(stage.actions[1].end_s == Approx(3.0));
    CHECK(stage.actions[2].start_s == Approx(3.3));
    CHECK(stage.end_s == Approx(3.3 + 3.0 + 0.5));
    CHECK(stage.busy_s == Approx(6.0));
    // Nothing of the reduce-scatters under the next action: one microbatch in flight.
    CHECK(stage.peak_allocated_bytes == 900 + 100);
    CHECK(stage.peak_reserved_bytes == 900 + 105);
  }
  SECTION("GPipe re-gathered: the second backward waits for the first's reduce-scatters") {
    const StageResult stage = simulate_pipeline(waiting_spec(PipelineSchedule::kGPipe)).stages[0];
    CHECK(stage.actions[3].start_s == Approx(4.3));
    CHECK(stage.end_s == Approx(6.8));
    CHECK(stage.peak_allocated_bytes == 900 + 200);
  }
  SECTION("kept gathered: only the last backward reduce-scatters, nothing waits before it") {
    PipelineSpec spec = waiting_spec(PipelineSchedule::k1F1B);
    spec.chunks[0].accumulates = true;
    const StageResult stage = simulate_pipeline(spec).stages[0];
    CHECK(stage.actions[2].start_s == Approx(3.0));
    CHECK(stage.end_s == Approx(6.5));
    // Two steps of it: the second waits for the first's reduce-scatters.
    spec.steps = 2;
    const StageResult twice = simulate_pipeline(spec).stages[0];
    REQUIRE(twice.actions.size() == 8);
    CHECK(twice.actions[4].start_s == Approx(6.3));
    CHECK(twice.end_s == Approx(6.3 + 6.5));
  }
  SECTION("no wait where the tail is the optimizer alone") {
    PipelineSpec spec = waiting_spec(PipelineSchedule::k1F1B);
    spec.chunks[0].tail_s = 0.2;
    CHECK(simulate_pipeline(spec).stages[0].actions[2].start_s == Approx(3.0));
  }
}

TEST_CASE("no action starts before the reduce-scatters of the backward before it end",
          "[pipeline]") {
  // Every schedule, kept gathered or not, one step or two: after a backward that
  // reduce-scatters the rank's next action starts its wait later at the earliest, and
  // some action starts exactly then (the wait binds).
  struct Case {
    int P, V, M, G;
    PipelineSchedule schedule;
  };
  for (const Case& c :
       {Case{2, 1, 4, 1, PipelineSchedule::k1F1B}, Case{2, 1, 4, 2, PipelineSchedule::kGPipe},
        Case{2, 2, 4, 1, PipelineSchedule::kInterleaved1F1B},
        Case{2, 2, 2, 3, PipelineSchedule::kInterleaved1F1B}}) {
    for (const bool accumulates : {false, true}) {
      INFO(to_string(c.schedule) << " P " << c.P << " V " << c.V << " M " << c.M << " G " << c.G
                                 << (accumulates ? " kept" : " re-gathered"));
      PipelineSpec spec = waiting_spec(c.schedule);
      spec.stages = c.P;
      spec.virtual_stages = c.V;
      spec.microbatches = c.M;
      spec.steps = c.G;
      spec.send_s = 0.01;
      spec.chunks.assign(static_cast<std::size_t>(c.P * c.V), spec.chunks[0]);
      for (ChunkTimes& chunk : spec.chunks) chunk.accumulates = accumulates;
      const PipelineResult result = simulate_pipeline(spec);
      int waits = 0, binding = 0;
      for (const StageResult& stage : result.stages) {
        for (std::size_t k = 1; k < stage.actions.size(); ++k) {
          const PipelineAction& before = stage.actions[k - 1];
          const ChunkTimes& times = spec.chunks[static_cast<std::size_t>(before.chunk)];
          if (!before.backward || !backward_reduce_scatters(times, before.microbatch, c.M)) {
            continue;
          }
          ++waits;
          const double earliest = before.end_s + reduce_scatter_wait_s(times);
          CHECK(stage.actions[k].start_s >= earliest - 1e-12);
          if (stage.actions[k].start_s == Approx(earliest)) ++binding;
        }
      }
      // Kept gathered on one chunk per rank, a step's last backward is the rank's last
      // action: nothing follows it in one step.
      if (!accumulates || c.V > 1 || c.G > 1) {
        CHECK(waits > 0);
        CHECK(binding > 0);
      }
    }
  }
}

TEST_CASE("action_sequence_program: the phases of each action, waiting for the earlier compute",
          "[pipeline][memory]") {
  // Three tasks: a gather (comm stream), a forward that waits for it, a backward; then
  // the actions F0 F1 B0.
  Program program;
  program.streams = {{"compute", StreamRole::kCompute}, {"comm", StreamRole::kAllGather}};
  program.persistent_bytes = 10;
  Task gather;
  gather.id = 0;
  gather.stream = 1;
  gather.kind = TaskKind::kAllGather;
  gather.duration_s = 1;
  gather.memory = {{MemoryCategory::kGatheredParams, 40, false}};
  Task forward;
  forward.id = 1;
  forward.kind = TaskKind::kForward;
  forward.duration_s = 1;
  forward.deps = {0};
  forward.memory = {{MemoryCategory::kActivations, 5, true},
                    {MemoryCategory::kGatheredParams, -40, true}};
  Task backward;
  backward.id = 2;
  backward.kind = TaskKind::kBackward;
  backward.duration_s = 1;
  backward.memory = {{MemoryCategory::kActivations, -5, true}};
  program.tasks = {gather, forward, backward};
  const Program sequence =
      action_sequence_program(program, {{0, 0, false}, {0, 1, false}, {0, 0, true}});
  REQUIRE(sequence.tasks.size() == 5);
  CHECK(sequence.persistent_bytes == 10);
  // F0: gather 0, forward 1 (on the gather); F1: gather 2 waits for F0's compute (task 1),
  // forward 3 on gather 2 and task 1; B0: backward 4 after task 3.
  CHECK(sequence.tasks[1].deps == std::vector<int>{0});
  CHECK(sequence.tasks[2].deps == std::vector<int>{1});
  CHECK(sequence.tasks[3].deps == std::vector<int>{2, 1});
  CHECK(sequence.tasks[4].deps == std::vector<int>{3});
  CHECK(sequence.tasks[4].kind == TaskKind::kBackward);
  // Gathers one after the other, never together: 10 + 40 + 5 (F0's activations) at most.
  const SimResult result = simulate(sequence);
  CHECK(result.peak_allocated_bytes == 55);
  CHECK(result.step_time_s == Approx(5.0));  // 1 + 1, then 1 + 1, then 1
}

TEST_CASE("action_sequence_program: after a backward, the next action waits for every stream",
          "[pipeline]") {
  // A gather, a forward, a backward and its reduce-scatter (its own stream); F0 B0 F1.
  Program program;
  program.streams = {{"compute", StreamRole::kCompute},
                     {"ag", StreamRole::kAllGather},
                     {"rs", StreamRole::kReduceScatter}};
  Task gather;
  gather.id = 0;
  gather.stream = 1;
  gather.kind = TaskKind::kAllGather;
  gather.duration_s = 1;
  Task forward;
  forward.id = 1;
  forward.kind = TaskKind::kForward;
  forward.duration_s = 1;
  forward.deps = {0};
  Task backward;
  backward.id = 2;
  backward.kind = TaskKind::kBackward;
  backward.duration_s = 1;
  backward.deps = {1};
  Task reduce;
  reduce.id = 3;
  reduce.stream = 2;
  reduce.kind = TaskKind::kReduceScatter;
  reduce.duration_s = 3;
  reduce.deps = {2};
  program.tasks = {gather, forward, backward, reduce};
  const Program sequence =
      action_sequence_program(program, {{0, 0, false}, {0, 0, true}, {0, 1, false}});
  REQUIRE(sequence.tasks.size() == 6);
  // B0: backward 2 on forward 1 (and the compute barrier, 1); reduce-scatter 3 on 2 and 1.
  CHECK(sequence.tasks[2].deps == std::vector<int>{1, 1});
  CHECK(sequence.tasks[3].deps == std::vector<int>{2, 1});
  // F1: its gather waits for the last task of every stream: 2 (compute), 0, 3.
  CHECK(sequence.tasks[4].deps == std::vector<int>{2, 0, 3});
  // 1 + 1 + 1, the reduce-scatter's 3, then 1 + 1.
  CHECK(simulate(sequence).step_time_s == Approx(8.0));
}

TEST_CASE("the composition of a re-gathered chunk is its actions replayed back to back",
          "[pipeline][memory]") {
  // Stage 0's chunk of docs/validation.md's sweep winner (winner_workload), re-gathered
  // per microbatch and composed alone as a rank of 3 microbatches (P = 1; 1F1B: F0 B0 F1
  // B1 F2 B2, GPipe: F0 F1 F2 B0 B1 B2): the composition's peak is the peak of the whole
  // action list replayed as one Program, and its end that replay's end plus the
  // optimizer, with the winner's plan and with fsdp2's (a bucket per unit, the last,
  // layers.1, kept gathered after forward).
  const auto costs = make_analytic_cost_model(builtin_hardware("h100-sxm"));
  const Workload workload = winner_workload(3);
  const Workload chunk = chunk_workload(workload, pipeline_chunks(workload)[0]);
  std::int64_t saved_bytes = 0;
  for (const Unit& unit : chunk.units) saved_bytes += unit.saved_activation_bytes;
  const Plan one_bucket = one_bucket_plan(chunk);
  for (const PipelineSchedule schedule : {PipelineSchedule::k1F1B, PipelineSchedule::kGPipe}) {
    for (const Plan& plan : {one_bucket, fsdp2_plan(chunk)}) {
      const auto [one, times, stage, replay] = compose_alone(chunk, plan, schedule, *costs);
      INFO(to_string(schedule) << ", " << plan.name << ": composed " << stage.peak_allocated_bytes
                               << ", one microbatch " << one.peak_allocated_bytes << ", replayed "
                               << replay.peak_allocated_bytes);
      CHECK(stage.peak_allocated_bytes == replay.peak_allocated_bytes);
      CHECK(stage.end_s == Approx(replay.step_time_s + times.optimizer_s).epsilon(1e-9));
      if (schedule == PipelineSchedule::k1F1B) {
        // One microbatch in flight, and the next forward's gathers wait for the backward's
        // reduce-scatters: the one-microbatch peak, no more.
        CHECK(stage.peak_allocated_bytes == one.peak_allocated_bytes);
      }
      if (plan.name == "fsdp2") {
        // Each forward gathers layers.1 again and keeps that copy (padded, bf16) until its
        // own backward: one per microbatch in flight (3 under GPipe), counted with the
        // microbatch's activations.
        REQUIRE_FALSE(plan.reshard_after_forward.back());
        CHECK(times.activation_bytes == saved_bytes + chunk.units.back().gathered_bytes());
      } else {
        CHECK(times.activation_bytes == saved_bytes);
      }
    }
  }
}

TEST_CASE("the pipeline trace draws every reduce-scatter waited for, its memory at the peak",
          "[pipeline][memory][trace]") {
  // The winner's job with 3 microbatches on both stages, both chunks re-gathered: every
  // backward reduce-scatters, and the trace draws them after each (stage 0 on the
  // one-bucket plan: two reduce-scatter buckets per microbatch).
  const auto costs = make_analytic_cost_model(builtin_hardware("h100-sxm"));
  const Workload workload = winner_workload(3);
  const std::vector<std::vector<int>> chunks = pipeline_chunks(workload);
  const Plan first = one_bucket_plan(chunk_workload(workload, chunks[0]));
  SimOptions options;
  options.record_timings = true;
  const PipelineSimulation sim = simulate_pipelined_plans(
      workload, *costs, {first, fsdp2_plan(chunk_workload(workload, chunks[1]))}, {false, false},
      options);
  const StageResult& stage = sim.result.stages[0];
  double peak_mib = 0;
  std::vector<int> reduce_scatters(3, 0);
  const nlohmann::json trace = pipeline_chrome_trace(sim, "waits");
  for (const auto& event : trace.at("traceEvents")) {
    if (event["pid"] != 0) continue;
    if (event["ph"] == "C") peak_mib = std::max(peak_mib, event["args"]["MiB"].get<double>());
    if (event["ph"] == "X" && event["cat"] == "reduce_scatter") {
      ++reduce_scatters.at(event["args"]["microbatch"].get<std::size_t>());
    }
  }
  CHECK(peak_mib * 1024 * 1024 == Approx(static_cast<double>(stage.peak_allocated_bytes)));
  CHECK(reduce_scatters == std::vector<int>{2, 2, 2});
  // Every thread named draws something (found by QA: under 1F1B stage 0 had an empty "send
  // gradients" track, the last stage an empty "send activations").
  std::set<std::pair<int, int>> named, drawn;
  for (const auto& event : trace.at("traceEvents")) {
    const std::pair<int, int> thread{event["pid"].get<int>(), event.value("tid", -1)};
    if (event["ph"] == "M" && event["name"] == "thread_name") named.insert(thread);
    if (event["ph"] == "X") drawn.insert(thread);
  }
  CHECK(named.size() > 4);
  for (const auto& thread : named) {
    INFO("stage " << thread.first << " thread " << thread.second);
    CHECK(drawn.count(thread) == 1);
  }
}

TEST_CASE("a pipeline schedule stores the optimizer's part of the tail, reads older ones",
          "[pipeline][schedule]") {
  const auto costs = make_analytic_cost_model(builtin_hardware("h100-sxm"));
  const Workload workload = winner_workload(3);
  std::vector<Plan> plans;
  for (const std::vector<int>& units : pipeline_chunks(workload)) {
    Plan plan = fsdp2_plan(chunk_workload(workload, units));
    std::fill(plan.reshard_after_forward.begin(), plan.reshard_after_forward.end(), true);
    plans.push_back(std::move(plan));
  }
  for (const bool keep : {false, true}) {
    INFO((keep ? "kept" : "re-gathered"));
    const PipelineSimulation sim = simulate_pipelined_plans(workload, *costs, plans, {keep, keep});
    const ChunkTimes& times = sim.spec.chunks[0];
    CHECK(times.accumulates == keep);
    REQUIRE(times.optimizer_s > 0);
    REQUIRE(times.optimizer_s < times.tail_s);
    const ScheduleFile schedule =
        pipeline_schedule(workload, sim, costs->hardware(), 1LL << 30, "fsdp2");
    const nlohmann::json json = schedule_to_json(schedule);
    CHECK_FALSE(json["pipeline"]["chunks"][0]["times"].contains("accumulates"));
    const ScheduleFile back = schedule_from_json(json, "pp.json");
    CHECK(back == schedule);  // accumulates derived from keep_gathered and M
    CHECK(back.pipeline->chunks[0].times.accumulates == keep);
    // A schedule written before: its overlap figures kept as read, not used; without
    // optimizer_s the whole tail is waited for; written back as it was (so its hash).
    nlohmann::json old = json;
    nlohmann::json& old_times = old["pipeline"]["chunks"][0]["times"];
    old_times.erase("optimizer_s");
    old_times["tail_peak_bytes"] = 12345;
    old_times["persistent_bytes"] = 678;
    old_times["forward_after_backward_delay_s"] = 0.5;
    const ScheduleFile older = schedule_from_json(old, "old.json");
    const ChunkTimes& older_times = older.pipeline->chunks[0].times;
    CHECK(older_times.optimizer_s == 0);
    CHECK(reduce_scatter_wait_s(older_times) == times.tail_s);
    CHECK(older_times.first_forward_s == times.first_forward_s);
    CHECK(older.pipeline->chunks[0].retired_times.size() == 3);
    CHECK(dump_json(schedule_to_json(older)) == dump_json(old));
    for (const char* key : {"optimizer_s", "tail_peak_bytes", "backward_after_backward_delay_s"}) {
      nlohmann::json bad = old;
      bad["pipeline"]["chunks"][0]["times"][key] = -1;
      CHECK_THROWS_WITH(schedule_from_json(bad, "pp.json"),
                        Catch::Contains(std::string("pipeline.chunks[0].times.") + key));
    }
  }
}

TEST_CASE("an action's memory follows the simulator's order through tasks that take no time",
          "[pipeline][memory]") {
  // Found by review: every start at an instant was put before every end of a task that
  // took no time, so a task depending on one "started" before it ended: two chained
  // zero-second forwards, each holding 8 MiB while it runs, peaked at 16 MiB, where the
  // simulator (and any order the Program allows) holds 8.
  Program program;
  program.streams = {{"compute", StreamRole::kCompute}};
  const std::vector<MemoryEvent> held = {{MemoryCategory::kWorkspace, 8 << 20, false},
                                         {MemoryCategory::kWorkspace, -(8 << 20), true}};
  fsdptune::testing::add_task(program, 0, TaskKind::kForward, 0.0, {}, held);
  fsdptune::testing::add_task(program, 0, TaskKind::kForward, 0.0, {0}, held);
  SimOptions options;
  options.record_timings = true;
  const SimResult simulated = simulate(program, options);
  REQUIRE(simulated.peak_allocated_bytes == 8 << 20);
  JobSpec job;
  job.microbatches = 1;
  const ChunkMemory memory = chunk_memory(job, program, simulated.timings, false);
  CHECK(memory.first_forward.peak_bytes == 8 << 20);
  CHECK(memory.first_forward.held_bytes == 0);
}

// Found by QA: a chunk kept gathered left its gradient accumulation undrawn (the compute
// thread idle in every accumulating backward), and two sends overlapped on one thread.
TEST_CASE("the pipeline trace draws the accumulation and puts overlapping sends on lanes",
          "[pipeline][trace]") {
  const auto costs = make_analytic_cost_model(builtin_hardware("h100-sxm"));
  // Interleaved over 6 chunks of one unit each: a forward is shorter than a send.
  const Workload workload =
      fsdptune::testing::tiny_pipelined(2, 4, PipelineSchedule::kInterleaved1F1B, 3);
  std::vector<Plan> plans;
  for (const std::vector<int>& units : pipeline_chunks(workload)) {
    plans.push_back(fsdp2_plan(chunk_workload(workload, units)));
  }
  SimOptions options;
  options.record_timings = true;
  const PipelineSimulation sim = simulate_pipelined_plans(
      workload, *costs, plans, std::vector<bool>(plans.size(), true), options);
  const nlohmann::json trace = pipeline_chrome_trace(sim, "lanes");
  // Per thread, events nest or follow one another.
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> spans;
  // Per (chunk, microbatch) backward: the compute drawn, accumulation included.
  std::map<std::pair<int, int>, double> backward_us;
  int lanes = 0;
  for (const auto& event : trace.at("traceEvents")) {
    if (event["ph"] == "M" && event["name"] == "thread_name" &&
        event["args"]["name"].get<std::string>().find("(2)") != std::string::npos) {
      ++lanes;
    }
    if (event["ph"] != "X") continue;
    const double start = event["ts"].get<double>();
    spans[{event["pid"].get<int>(), event["tid"].get<int>()}].push_back(
        {start, start + event["dur"].get<double>()});
    const std::string category = event["cat"];
    if (category == "backward" || category == "recompute" || category == "accumulate") {
      backward_us[{event["args"]["chunk"].get<int>(), event["args"]["microbatch"].get<int>()}] +=
          event["dur"].get<double>();
    }
  }
  CHECK(lanes > 0);
  for (auto& [thread, intervals] : spans) {
    std::sort(intervals.begin(), intervals.end());
    for (std::size_t k = 1; k < intervals.size(); ++k) {
      const bool follows = intervals[k].first >= intervals[k - 1].second - 1e-6;
      const bool nests = intervals[k].second <= intervals[k - 1].second + 1e-6;
      CHECK((follows || nests));
    }
  }
  for (std::size_t c = 0; c < sim.spec.chunks.size(); ++c) {
    const ChunkTimes& times = sim.spec.chunks[c];
    REQUIRE(times.accumulate_s > 0);
    // A middle microbatch's backward: its compute at standalone cost, then the accumulation.
    CHECK(backward_us[{static_cast<int>(c), 1}] == Approx(times.backward_s * 1e6).epsilon(1e-9));
  }
}
