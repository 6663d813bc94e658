// A backward's reduce-scatters under the rank's next action (docs/parallelism.md "Memory
// per stage"; docs/validation.md "A sweep winner that re-gathers").
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "fsdptune/cost_model.hpp"
#include "fsdptune/hardware.hpp"
#include "fsdptune/job.hpp"
#include "fsdptune/model.hpp"
#include "fsdptune/pipeline.hpp"
#include "fsdptune/plans.hpp"
#include "fsdptune/program.hpp"
#include "fsdptune/schedule.hpp"
#include "fsdptune/simulator.hpp"
#include "fsdptune/trace.hpp"
#include "fsdptune/workload.hpp"

using namespace fsdptune;

namespace {

// One chunk on one rank (P = 1, M microbatches), forwards of 1 s and backwards of 2 s; a
// microbatch's activations are 100 bytes, its one-microbatch peak 1000 (allocated; 1100
// reserved), its backward's reduce-scatters hold up to 300 bytes for 0.5 s after it; run
// back to back as the executor runs them, F B F peaks at 1250 and F F B B at 1400.
PipelineSpec overlapping_spec(PipelineSchedule schedule) {
  PipelineSpec spec;
  spec.microbatches = 2;
  spec.schedule = schedule;
  ChunkTimes chunk;
  chunk.first_forward_s = chunk.forward_s = 1.0;
  chunk.backward_s = chunk.last_backward_s = 2.0;
  chunk.tail_s = 0.5;
  chunk.activation_bytes = 100;
  chunk.base_peak_allocated_bytes = 1000;
  chunk.base_peak_reserved_bytes = 1100;
  chunk.tail_peak_bytes = 300;
  chunk.persistent_bytes = 700;  // share of transient memory: 1000 - 700 - 100 = 200
  chunk.forward_after_backward_peak_allocated_bytes = 1250;
  chunk.backward_after_backward_peak_allocated_bytes = 1400;
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
// 3 microbatches under `schedule` (P = 1, every action at the previous one's end), and its
// actions replayed back to back as one Program (action_sequence_program).
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

TEST_CASE("a backward's reduce-scatters under the next action raise the stage's peak",
          "[pipeline][memory]") {
  REQUIRE(PipelineSpec{}.allocator_fragmentation == 0.05);
  SECTION("1F1B: F0 B0 F1 B1, the second forward meets the first backward's tail") {
    const PipelineResult result = simulate_pipeline(overlapping_spec(PipelineSchedule::k1F1B));
    const StageResult& stage = result.stages[0];
    // Base 1000 - 100 = 900. Samples: F0 100, B0 100, F1 100 + (1250 - 1000) = 350 (it
    // starts at B0's end, inside B0's 0.5 s tail), B1 100 (after a forward: no tail).
    CHECK(stage.peak_allocated_bytes == 900 + 350);
    // Reserved: 1100 - 1.05 * 100 = 995, + 1.05 * 350 = 367.5 -> 368: 1363.
    CHECK(stage.peak_reserved_bytes == 995 + 368);
    CHECK(stage.max_in_flight == 1);
  }
  SECTION("GPipe: F0 F1 B0 B1, the second backward meets the first's tail") {
    const PipelineResult result = simulate_pipeline(overlapping_spec(PipelineSchedule::kGPipe));
    // Samples: F0 100, F1 200, B0 200, B1 100 + (1400 - 1000) = 500: 900 + 500.
    CHECK(result.stages[0].peak_allocated_bytes == 1400);
    CHECK(result.stages[0].max_in_flight == 2);
  }
  SECTION("no tail left, no overlap: the composition as before") {
    PipelineSpec spec = overlapping_spec(PipelineSchedule::k1F1B);
    spec.chunks[0].tail_s = 0;  // F1 starts at B0's end: the tail is over
    CHECK(simulate_pipeline(spec).stages[0].peak_allocated_bytes == 900 + 100);
    spec = overlapping_spec(PipelineSchedule::kGPipe);
    spec.chunks[0].tail_peak_bytes = 0;
    CHECK(simulate_pipeline(spec).stages[0].peak_allocated_bytes == 900 + 200);
  }
}

TEST_CASE("tail_overlap_bytes: only a backward that reduce-scatters, only within its tail",
          "[pipeline][memory]") {
  PipelineSpec spec = overlapping_spec(PipelineSchedule::kInterleaved1F1B);
  spec.stages = 1;
  spec.virtual_stages = 2;
  spec.chunks.push_back(spec.chunks[0]);
  spec.chunks[1].tail_peak_bytes = 270;
  PipelineAction backward{0, 0, true, 0.0, 2.0};
  PipelineAction forward{0, 1, false, 2.0, 3.0};
  // Same chunk: the F B F sequence's excess over the one-microbatch peak, 1250 - 1000.
  CHECK(tail_overlap_bytes(spec, backward, forward) == 250);
  // Starting 0.5 s (the tail) or later after the backward: nothing left.
  forward.start_s = 2.5;
  CHECK(tail_overlap_bytes(spec, backward, forward) == 0);
  forward.start_s = 2.4;
  CHECK(tail_overlap_bytes(spec, backward, forward) == 250);
  // Another chunk's action (interleaved): what chunk 0's tail holds beyond its share of
  // the stage's base (1000 - 700 persistent - 100 activations = 200): 300 - 200.
  forward.chunk = 1;
  CHECK(tail_overlap_bytes(spec, backward, forward) == 100);
  // A tail within the share adds nothing.
  spec.chunks[0].tail_peak_bytes = 200;
  CHECK(tail_overlap_bytes(spec, backward, forward) == 0);
  spec.chunks[0].tail_peak_bytes = 300;
  backward.chunk = 1;
  forward.chunk = 0;
  CHECK(tail_overlap_bytes(spec, backward, forward) == 270 - 200);
  // After a forward: nothing.
  CHECK(tail_overlap_bytes(spec, forward, backward) == 0);
  // A chunk that accumulates its gradients reduce-scatters in its last backward only.
  spec.chunks[1].accumulated_gradient_bytes = 500;
  CHECK(tail_overlap_bytes(spec, backward, forward) == 0);
  backward.microbatch = 1;  // M - 1
  CHECK(tail_overlap_bytes(spec, backward, forward) == 70);
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

TEST_CASE("action_sequence_program into reused storage equals the fresh Program",
          "[pipeline][memory]") {
  // chunk_times' scratch (ChunkTimesScratch) is warmed by one chunk's sequences and then
  // used for another's, longer and shorter: every result equals the value version, and
  // chunk_times with the scratch equals chunk_times without it.
  const auto costs = make_analytic_cost_model(builtin_hardware("h100-sxm"));
  const Workload workload = winner_workload(3);
  Program sequence;
  std::vector<int> ids;
  ChunkTimesScratch scratch;
  int sequenced = 0;
  const std::vector<std::vector<PipelineAction>> lists = {
      {{0, 0, false}, {0, 1, false}, {0, 2, false}, {0, 0, true}, {0, 1, true}, {0, 2, true}},
      {{0, 0, false}, {0, 0, true}, {0, 1, false}},
      {{0, 0, false}, {0, 1, false}, {0, 0, true}, {0, 1, true}}};
  for (const std::vector<int>& units : pipeline_chunks(workload)) {
    const Workload chunk = chunk_workload(workload, units);
    for (const Plan& plan : {one_bucket_plan(chunk), fsdp2_plan(chunk)}) {
      const Program program = lower(chunk, plan, *costs);
      for (const std::vector<PipelineAction>& actions : lists) {
        action_sequence_program(program, actions, sequence, ids);
        CHECK(sequence == action_sequence_program(program, actions));
      }
      const SimResult result = simulate(program);
      const ComputeCosts compute = compute_costs(chunk, *costs);
      const ChunkTimes reused = chunk_times(chunk, program, result, false, compute, &scratch);
      if (reused.forward_after_backward_peak_allocated_bytes > 0) ++sequenced;
      CHECK(reused == chunk_times(chunk, program, result, false, compute));
    }
  }
  CHECK(sequenced > 0);  // the tail simulations ran
}

TEST_CASE("the composition holds what its chunk's actions hold replayed back to back",
          "[pipeline][memory]") {
  // Stage 0's chunk of docs/validation.md's sweep winner (winner_workload), re-gathered
  // per microbatch and composed alone as a rank of 3 microbatches (P = 1, every action at
  // the previous one's end; 1F1B: F0 B0 F1 B1 F2 B2, GPipe: F0 F1 F2 B0 B1 B2): the
  // composition's peak is the peak of the whole action list replayed as one Program, with
  // the winner's plan and with fsdp2's (a bucket per unit, the last, layers.1, kept
  // gathered after forward).
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
      if (plan.name == "tuned" && schedule == PipelineSchedule::k1F1B) {
        // The next forward's 8 MiB gather meets the backward's last reduce-scatter (its
        // fp32 input, 5 MiB, and output shard, 2.5 MiB): above the one-microbatch peak,
        // which is all the composition counted before (one microbatch in flight).
        CHECK(stage.peak_allocated_bytes > one.peak_allocated_bytes);
      }
      if (plan.name == "fsdp2") {
        // Each forward gathers layers.1 again and keeps that copy (padded, bf16) until its
        // own backward: one per microbatch in flight (3 under GPipe), counted with the
        // microbatch's activations (30.7 MiB composed before, 32.2 MiB replayed).
        REQUIRE_FALSE(plan.reshard_after_forward.back());
        CHECK(times.activation_bytes == saved_bytes + chunk.units.back().gathered_bytes());
      } else {
        CHECK(times.activation_bytes == saved_bytes);
      }
    }
  }
}

TEST_CASE("the pipeline trace's memory counter peaks at the stage's peak, overlap included",
          "[pipeline][memory][trace]") {
  // The winner's job with 3 microbatches on both stages, stage 0's chunk on the one-bucket
  // plan, both chunks re-gathered: stage 0 runs F0 F1 B0 F2 B1 B2, and F2 meets B0's
  // reduce-scatters.
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
  std::int64_t overlap_bytes = 0;
  for (std::size_t k = 1; k < stage.actions.size(); ++k) {
    overlap_bytes = std::max(overlap_bytes,
                             tail_overlap_bytes(sim.spec, stage.actions[k - 1], stage.actions[k]));
  }
  CHECK(overlap_bytes > 0);
  double peak_mib = 0;
  const nlohmann::json trace = pipeline_chrome_trace(sim, "overlap");
  for (const auto& event : trace.at("traceEvents")) {
    if (event["ph"] == "C" && event["pid"] == 0) {
      peak_mib = std::max(peak_mib, event["args"]["MiB"].get<double>());
    }
  }
  CHECK(peak_mib * 1024 * 1024 == Approx(static_cast<double>(stage.peak_allocated_bytes)));
}

TEST_CASE("a pipeline schedule stores the overlap figures, one written before reads them as 0",
          "[pipeline][memory][schedule]") {
  const auto costs = make_analytic_cost_model(builtin_hardware("h100-sxm"));
  const Workload workload = winner_workload(3);
  std::vector<Plan> plans;
  for (const std::vector<int>& units : pipeline_chunks(workload)) {
    Plan plan = fsdp2_plan(chunk_workload(workload, units));
    std::fill(plan.reshard_after_forward.begin(), plan.reshard_after_forward.end(), true);
    plans.push_back(std::move(plan));
  }
  const PipelineSimulation sim = simulate_pipelined_plans(workload, *costs, plans, {false, false});
  const ChunkTimes& times = sim.spec.chunks[0];
  REQUIRE(times.tail_peak_bytes > 0);
  REQUIRE(times.forward_after_backward_peak_allocated_bytes > 0);
  REQUIRE(times.backward_after_backward_peak_allocated_bytes > 0);
  const ScheduleFile schedule =
      pipeline_schedule(workload, sim, costs->hardware(), 1LL << 30, "fsdp2");
  const nlohmann::json json = schedule_to_json(schedule);
  CHECK(schedule_from_json(json, "pp.json") == schedule);
  nlohmann::json old = json;
  for (auto& chunk : old["pipeline"]["chunks"]) {
    for (const char* key : {"tail_peak_bytes", "forward_after_backward_peak_allocated_bytes",
                            "backward_after_backward_peak_allocated_bytes", "persistent_bytes"}) {
      chunk["times"].erase(key);
    }
  }
  const ScheduleFile back = schedule_from_json(old, "pp.json");
  CHECK(back.pipeline->chunks[0].times.tail_peak_bytes == 0);
  CHECK(back.pipeline->chunks[0].times.forward_after_backward_peak_allocated_bytes == 0);
  // No persistent_bytes: the whole share of the base, so another chunk's tail counts whole.
  CHECK(back.pipeline->chunks[0].times.persistent_bytes ==
        times.base_peak_allocated_bytes - times.activation_bytes);
  REQUIRE(times.persistent_bytes > 0);
  CHECK(times.persistent_bytes < times.base_peak_allocated_bytes);
  CHECK(back.pipeline->chunks[0].times.first_forward_s == times.first_forward_s);
  nlohmann::json bad = json;
  bad["pipeline"]["chunks"][0]["times"]["tail_peak_bytes"] = -1;
  CHECK_THROWS_WITH(schedule_from_json(bad, "pp.json"),
                    Catch::Contains("pipeline.chunks[0].times.tail_peak_bytes"));
}
