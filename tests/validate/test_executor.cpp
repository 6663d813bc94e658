// The parts of the executor that need no MPI: which schedules it accepts and the replay
// layout it builds. The replay itself is tested end to end under mpirun (tests/cli).
#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <tuple>

#include "fsdptune/cost_model.hpp"
#include "fsdptune/error.hpp"
#include "fsdptune/executor.hpp"
#include "fsdptune/hardware.hpp"
#include "fsdptune/mpi_count.hpp"
#include "fsdptune/pipeline.hpp"
#include "fsdptune/plans.hpp"
#include "fsdptune/schedule.hpp"
#include "test_workloads.hpp"

using namespace fsdptune;

namespace {

// The tiny model on `gpus` ranks, batch 1 x 128 tokens, lowered with the fsdp2 plan;
// `edit` changes the job (mesh, float8) before it is normalized.
template <typename Edit>
ScheduleFile tiny_fsdp2(std::int64_t gpus, Edit edit) {
  ScheduleFile schedule;
  schedule.model = builtin_model("tiny");
  JobSpec job;
  job.gpus = gpus;
  job.gpus_per_node = gpus;
  job.local_batch = 1;
  job.seq_len = 128;
  edit(job);
  schedule.job = job;
  const Workload workload = build_workload(schedule.model, normalize_job(schedule.model, job));
  const auto costs = make_analytic_cost_model(builtin_hardware("h100-sxm"));
  schedule.plan = fsdp2_plan(workload);
  schedule.program = lower(workload, schedule.plan, *costs);
  return schedule;
}

ScheduleFile tiny_fsdp2(std::int64_t gpus = 2) {
  return tiny_fsdp2(gpus, [](JobSpec&) {});
}

// A version 2 schedule of the tiny model (4 blocks) with fsdp2 per chunk: pp stages of
// `gpus / pp` shard ranks, `microbatches`, `schedule`, `virtual_stages`; keep_gathered as
// simulate_pipelined_job chooses (every chunk, with M > 1 or pp > 1), or `regather`;
// gradients reduced in `reduce_dtype`.
ScheduleFile tiny_pipeline(std::int64_t gpus, std::int64_t pp, std::int64_t microbatches,
                           PipelineSchedule order = PipelineSchedule::k1F1B,
                           std::int64_t virtual_stages = 1, bool regather = false,
                           const std::string& model_name = "tiny",
                           DType reduce_dtype = DType::kFP32, std::int64_t pipeline_steps = 1) {
  JobSpec job;
  job.reduce_dtype = reduce_dtype;
  job.pipeline_steps = pipeline_steps;
  job.gpus = gpus;
  job.gpus_per_node = gpus;
  job.local_batch = 1;
  job.seq_len = 128;
  job.pp = pp;
  job.microbatches = microbatches;
  job.pp_schedule = order;
  job.virtual_stages = virtual_stages;
  const ModelSpec model = fsdptune::testing::untied_model(model_name);
  const Workload workload = build_workload(model, normalize_job(model, job));
  const HardwareSpec hardware = builtin_hardware("h100-sxm");
  const auto costs = make_analytic_cost_model(hardware);
  std::vector<Plan> plans;
  std::vector<Program> programs;
  std::vector<bool> keep;
  for (const std::vector<int>& units : pipeline_chunks(workload)) {
    const Workload chunk = chunk_workload(workload, units);
    Plan plan = fsdp2_plan(chunk);
    set_keep_gathered(plan, workload.job, !regather);  // as the pipeline runs it
    programs.push_back(lower(chunk, plan, *costs));
    plans.push_back(std::move(plan));
    keep.push_back(!regather);
  }
  const PipelineSimulation sim =
      simulate_pipelined_programs(workload, *costs, plans, programs, keep);
  ScheduleFile schedule = pipeline_schedule(workload, sim, hardware, 80LL << 30, "fsdp2");
  schedule.model = model;
  return schedule;
}

Workload workload_of(const ScheduleFile& schedule) {
  return build_workload(schedule.model, normalize_job(schedule.model, schedule.job));
}

}  // namespace

// Found by mutation testing (2026-12-07): the pick of the fastest rank for the measured
// compute and exposed communication survived every test.
TEST_CASE("a pipeline replay's stages are their slowest ranks', its step the latest end's",
          "[executor]") {
  // 2 stages of 2 ranks: end, compute, exposed, busy, pipeline end, peak.
  const std::vector<RankStepFigures> ranks = {{9.0, 5.0, 1.0, 6.0, 8.0, 100},
                                              {9.5, 4.0, 2.0, 5.5, 8.5, 120},
                                              {8.0, 6.0, 0.5, 7.0, 7.5, 90},
                                              {8.5, 5.5, 0.7, 6.5, 7.0, 80}};
  const PipelineStageFigures figures = pipeline_stage_figures(ranks, 2);
  CHECK(figures.slowest_rank == 1);  // the latest end, 9.5
  REQUIRE(figures.stages.size() == 2);
  CHECK(figures.stages[0] == MeasuredStage{0, 6.0, 8.5, 9.5, 120});
  CHECK(figures.stages[1] == MeasuredStage{1, 7.0, 7.5, 8.5, 90});
  // Equal ends: the first.
  const std::vector<RankStepFigures> tied = {{1.0, 0.5, 0.1, 0.5, 1.0, 1},
                                             {1.0, 0.4, 0.2, 0.5, 1.0, 1}};
  CHECK(pipeline_stage_figures(tied, 1).slowest_rank == 0);
}

TEST_CASE("the replay layout places every parameter shard once in the fp32 storage", "[executor]") {
  const ScheduleFile schedule = tiny_fsdp2();
  REQUIRE_NOTHROW(check_replayable(schedule, 2, "s.json"));
  const Workload workload =
      build_workload(schedule.model, normalize_job(schedule.model, schedule.job));
  const ReplayLayout layout =
      make_replay_layout(schedule, workload, 1, replay_mesh(schedule, 1, 2, false, "s.json"));
  CHECK(layout.rank == 1);
  CHECK(layout.buckets.size() == schedule.program.buckets.size());
  std::int64_t shard_elements = 0;
  for (const Unit& unit : workload.units) shard_elements += unit.shard_numel();
  CHECK(layout.shard_storage_elements == shard_elements);
  // fp32 parameters and gradients fit in the persistent state (16 bytes per element).
  CHECK(layout.persistent_bytes >= 8 * shard_elements);
  std::set<std::string> gathered;
  for (const ReplayBucket& bucket : layout.buckets) {
    for (const ReplaySlot& slot : bucket.slots) {
      CHECK(slot.storage_offset + slot.slot.shard_numel <= layout.shard_storage_elements);
      CHECK(slot.slot.offset + slot.slot.shard_numel <= bucket.shard_elements);
      if (bucket.kind == CollectiveKind::kAllGather) gathered.insert(slot.slot.param);
    }
  }
  std::size_t params = 0;
  for (const Unit& unit : workload.units) params += unit.params.size();
  CHECK(gathered.size() == params);
}

TEST_CASE("check_replayable names what the executor cannot replay", "[executor]") {
  auto expect = [](const ScheduleFile& schedule, int world, const std::string& where_part) {
    try {
      check_replayable(schedule, world, "s.json");
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kBadInput);
      CHECK_THAT(e.where(), Catch::Contains(where_part));
    }
  };
  expect(tiny_fsdp2(), 3, "job.dp_shard");
  ScheduleFile schedule = tiny_fsdp2();
  schedule.program.tasks[3].deps.push_back(7);  // a dependency that points forward
  expect(schedule, 2, "program.tasks[3].deps");
  schedule = tiny_fsdp2();
  schedule.program.buckets[0].slots[0].param = "no.such.weight";
  expect(schedule, 2, "s.json: program.buckets[0].slots");
  // The layout's checks name the file too (found probing the CLI: "rank 0:
  // program.buckets[0].dtype: ...", without it).
  schedule = tiny_fsdp2();
  schedule.program.buckets[0].dtype = DType::kFP8;
  expect(schedule, 2, "s.json: program.buckets[0].dtype");
  // Two slots' offsets swapped: named as not packed in order (found probing: "slot outside
  // the bucket's flat buffer", though both were inside it).
  schedule = tiny_fsdp2();
  const auto several =
      std::find_if(schedule.program.buckets.begin(), schedule.program.buckets.end(),
                   [](const BucketLayout& bucket) { return bucket.slots.size() > 2; });
  REQUIRE(several != schedule.program.buckets.end());
  std::swap(several->slots[1].offset, several->slots[2].offset);
  const std::string expected = "s.json: program.buckets[" +
                               std::to_string(several - schedule.program.buckets.begin()) +
                               "].slots[1].offset (";
  try {
    check_replayable(schedule, 2, "s.json");
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK_THAT(e.where(), Catch::StartsWith(expected));
    CHECK_THAT(e.message(), Catch::Contains("the slots are packed in order: expected"));
  }
  schedule = tiny_fsdp2();
  schedule.program.buckets[0].shard_elements += 1;  // a gap the slots do not explain
  expect(schedule, 2, "s.json: program.buckets[0].shard_elements");
  // A schedule for 4 ranks on 3, even scaled down (3 does not divide 4).
  try {
    check_replayable(tiny_fsdp2(4), 3, "s.json", true);
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(e.where() == "s.json: job.dp_shard");
    CHECK_THAT(e.hint(), Catch::Contains("start 1, 2 or 4 ranks"));
  }
  // pp > 1 without per-stage Programs names job.pp; a pipeline section without its chunks
  // names them.
  schedule = tiny_fsdp2(4);
  schedule.job.pp = 2;
  expect(schedule, 2, "job.pp");
  schedule = tiny_fsdp2();
  schedule.pipeline.emplace();
  expect(schedule, 2, "s.json: pipeline.chunks");
  // A pipeline on the wrong world size names job.pp and the product.
  try {
    check_replayable(tiny_pipeline(4, 2, 4), 2, "p.json");
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(e.where() == "p.json: job.pp");
    CHECK_THAT(e.message(), Catch::Contains("for 4 ranks but 2 were started (pp 2 x "
                                            "dp_replicate 1 x dp_shard 2 x tp 1)"));
  }
  // A chunk kept gathered must not reshard after forward.
  schedule = tiny_pipeline(2, 2, 4);
  schedule.pipeline->chunks[1].plan.reshard_after_forward.front() = true;
  expect(schedule, 2, "pipeline.chunks[1].plan.reshard_after_forward");
  // Actions in another order than the executor runs (found probing: a stage's actions
  // reversed were replayed, and compare then refused the measurement).
  schedule = tiny_pipeline(2, 2, 4);
  std::vector<PipelineAction>& actions = schedule.pipeline->stages[1].actions;
  REQUIRE(actions.size() > 2);
  std::swap(actions[1].microbatch, actions[2].microbatch);
  std::swap(actions[1].backward, actions[2].backward);
  try {
    check_replayable(schedule, 2, "p.json");
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(e.where() == "p.json: pipeline.stages[1].actions[1]");
    CHECK_THAT(e.message(), Catch::Contains("where the 1f1b schedule runs the"));
  }
}

TEST_CASE(
    "a pipeline rank replays its chunks in the simulator's order, collectives once when "
    "kept gathered",
    "[executor][pipeline]") {
  // pp 2 x dp_shard 1, 4 microbatches, 1F1B, every chunk kept gathered.
  const ScheduleFile schedule = tiny_pipeline(2, 2, 4);
  REQUIRE_NOTHROW(check_replayable(schedule, 2, "p.json"));
  for (int rank = 0; rank < 2; ++rank) {
    const ReplayMesh mesh = replay_mesh(schedule, rank, 2, false, "p.json");
    CHECK(mesh.stage == rank);
    const PipelineReplayPlan plan = plan_pipeline_replay(schedule, mesh, rank);
    CHECK(plan.chunks == std::vector<int>{rank});
    const auto order = pipeline_order(2, 1, 4, PipelineSchedule::k1F1B, rank);
    REQUIRE(plan.actions.size() == order.size());  // 4 forwards, 4 backwards
    const Program& program = schedule.pipeline->chunks[static_cast<std::size_t>(rank)].program;
    for (std::size_t a = 0; a < order.size(); ++a) {
      const ReplayAction& action = plan.actions[a];
      INFO("rank " << rank << " action " << a);
      CHECK(action.chunk == order[a].chunk);
      CHECK(action.microbatch == order[a].microbatch);
      CHECK(action.backward == order[a].backward);
      int gathers = 0, reductions = 0, forwards = 0, backwards = 0;
      for (const int t : action.tasks) {
        const TaskKind kind = program.tasks[static_cast<std::size_t>(t)].kind;
        gathers += kind == TaskKind::kAllGather;
        reductions += kind == TaskKind::kReduceScatter;
        forwards += kind == TaskKind::kForward;
        backwards += kind == TaskKind::kBackward;
        CHECK(kind != TaskKind::kOptimizer);
      }
      // Every action computes all of the chunk's units (2 blocks + embedding or output:
      // 3 units); gathers only in the first forward, reduce-scatters only in the last
      // backward.
      CHECK((action.backward ? backwards : forwards) == 3);
      CHECK((gathers > 0) == (!action.backward && action.microbatch == 0));
      CHECK((reductions > 0) == (action.backward && action.microbatch == 3));
      CHECK(action.scope.gathered_params_events ==
            (action.backward ? action.microbatch == 3 : action.microbatch == 0));
      CHECK(action.scope.gradient_allocations == (action.backward && action.microbatch == 0));
      CHECK(action.scope.accumulate_gradients == action.backward);
      // Accumulated in the reduce dtype: fp32 over bf16.
      CHECK(action.scope.gradient_bytes_numerator == 4);
      CHECK(action.scope.gradient_bytes_denominator == 2);
    }
    CHECK(plan.tail.size() == 1);  // the chunk's optimizer
  }
  // Messages: rank 0 sends activations of microbatches 0..3 and receives their gradients;
  // rank 1 the reverse. Tags (c M + m) 2 + backward; each 1 x 128 tokens x dim 256 x bf16.
  const ReplayMesh mesh0 = replay_mesh(schedule, 0, 2, false, "p.json");
  const PipelineReplayPlan plan0 = plan_pipeline_replay(schedule, mesh0, 0);
  REQUIRE(plan0.messages.size() == 8);
  const ReplayMessage& first =
      plan0.messages[static_cast<std::size_t>(plan0.actions[0].send_message)];
  CHECK(first.outgoing);
  CHECK(first.peer == 1);
  CHECK(first.tag == 0);  // chunk 0, microbatch 0, forward
  CHECK(first.bytes == 128 * 256 * 2);
  CHECK(plan0.actions[0].receive_message == -1);  // the first stage's forward has no input
  const PipelineReplayPlan plan1 =
      plan_pipeline_replay(schedule, replay_mesh(schedule, 1, 2, false, "p.json"), 1);
  const ReplayMessage& received =
      plan1.messages[static_cast<std::size_t>(plan1.actions[0].receive_message)];
  CHECK(!received.outgoing);
  CHECK(received.peer == 0);
  CHECK(received.sender == 0);
  CHECK(received.tag == 0);
  // The last stage's backward of microbatch 2 sends chunk 1's gradient: tag (1*4+2)*2+1.
  for (const ReplayAction& action : plan1.actions) {
    if (action.backward && action.microbatch == 2) {
      CHECK(plan1.messages[static_cast<std::size_t>(action.send_message)].tag == 13);
    }
  }
}

namespace {

// The replay of rank 0 of `schedule` (2 ranks) tracks its chunk 0's unsharded gradients as
// the model counts them (`later_backwards`: the chunk runs backwards after its first).
void check_accumulated_gradients(const ScheduleFile& schedule, bool later_backwards) {
  const ReplayMesh mesh = replay_mesh(schedule, 0, 2, false, "p.json");
  const PipelineReplayPlan plan = plan_pipeline_replay(schedule, mesh, 0);
  const ScheduleChunk& chunk = schedule.pipeline->chunks[0];
  REQUIRE(chunk.keep_gathered);
  const Program& program = chunk.program;
  std::int64_t program_bytes = 0;  // the Program's own (bf16) unsharded gradients
  std::int64_t largest = 0;        // of one backward task
  for (const Task& task : program.tasks) {
    if (task.kind != TaskKind::kBackward) continue;
    std::int64_t made = 0;
    for (const MemoryEvent& event : task.memory) {
      if (event.category == MemoryCategory::kGradients && event.bytes > 0) made += event.bytes;
    }
    program_bytes += made;
    largest = std::max(largest, made);
  }
  REQUIRE(largest > 0);
  const ChunkActionEvents events(program);
  std::int64_t held = 0, most = 0, most_within = 0;
  for (const ReplayAction& action : plan.actions) {
    for (const int t : action.tasks) {
      const Task& task = program.tasks[static_cast<std::size_t>(t)];
      // What the replay applies, as it applies it: each task's start events, then its end
      // events (compute allocations only where the action allocates gradients, else the
      // transient of a later backward).
      for (const bool at_end : {false, true}) {
        for (const MemoryEvent& event : task.memory) {
          if (event.category != MemoryCategory::kGradients) continue;
          for (const MemoryEvent& tracked : events(action.scope, task, event)) {
            if (tracked.at_end != at_end) continue;
            const bool unsharded_gradient = task.kind == TaskKind::kBackward ||
                                            (task.kind == TaskKind::kCopyIn && tracked.bytes < 0);
            if (unsharded_gradient) held += tracked.bytes;
            most_within = std::max(most_within, held);
          }
        }
      }
    }
    most = std::max(most, held);
  }
  CHECK(held == 0);  // every tracked allocation freed by the last backward's copy-ins
  CHECK(chunk.times.accumulated_gradient_bytes == 2 * program_bytes);
  if (later_backwards) {
    // Held between actions; and a later backward holds the running unit's param-dtype
    // gradient beside them.
    CHECK(most == 2 * program_bytes);
    CHECK(most_within == most + largest);
  } else {
    // One backward: it allocates them (fp32), then its reduce-scatter copy-ins free them.
    CHECK(most == 0);
    CHECK(most_within == 2 * program_bytes);
  }
}

}  // namespace

TEST_CASE("an accumulating chunk's replay tracks the unsharded gradients the model counts",
          "[executor][pipeline]") {
  // pp 1, 3 microbatches of gradient accumulation, kept gathered, bf16 params, fp32
  // reduction: the first backward allocates the unsharded gradients, the last backward's
  // reduce-scatter copy-ins free them, and in between the replay holds exactly the bytes
  // the composition adds (ChunkTimes::accumulated_gradient_bytes: fp32, as FSDP2 upcasts
  // before accumulating), not the Program's bf16 gradients. Within a later backward each
  // unit's task also holds the bf16 gradient it makes until it is added in (its end).
  // And pp 2 with one microbatch (found by QA, 2026-12-06): gradient sync is off there
  // too, the gradients held in fp32 until the reduce-scatters after the backward.
  for (const auto& [pp, microbatches] : {std::pair{1, 3}, std::pair{2, 1}}) {
    INFO("pp " << pp << ", " << microbatches << " microbatches");
    check_accumulated_gradients(tiny_pipeline(2, pp, microbatches), microbatches > 1);
  }
}

TEST_CASE("a chunk that re-gathers runs its collectives in every microbatch",
          "[executor][pipeline]") {
  // pp 1: gradient accumulation over 3 microbatches, re-gathered each time.
  const ScheduleFile schedule = tiny_pipeline(2, 1, 3, PipelineSchedule::k1F1B, 1, true);
  REQUIRE_NOTHROW(check_replayable(schedule, 2, "p.json"));
  const ReplayMesh mesh = replay_mesh(schedule, 0, 2, false, "p.json");
  const PipelineReplayPlan plan = plan_pipeline_replay(schedule, mesh, 0);
  REQUIRE(plan.actions.size() == 6);
  CHECK(plan.messages.empty());  // one stage: no sends
  const Program& program = schedule.pipeline->chunks[0].program;
  for (const ReplayAction& action : plan.actions) {
    bool gathers = false, reduces = false;
    for (const int t : action.tasks) {
      gathers = gathers || program.tasks[static_cast<std::size_t>(t)].kind == TaskKind::kAllGather;
      reduces =
          reduces || program.tasks[static_cast<std::size_t>(t)].kind == TaskKind::kReduceScatter;
    }
    CHECK(gathers);  // fsdp2 reshards: backward gathers again
    CHECK(reduces == action.backward);
    CHECK(action.scope.gathered_params_events);
    CHECK(action.scope.gradient_allocations);
    CHECK_FALSE(action.scope.accumulate_gradients);
    CHECK(action.scope.gradient_bytes_numerator == action.scope.gradient_bytes_denominator);
  }
  // Its reduce-scatter buckets hold one microbatch's gradients (copied out 3 times).
  const ReplayLayout layout = make_replay_layout(schedule, workload_of(schedule), 0, mesh);
  for (const ReplayBucket& bucket : layout.buckets) CHECK(bucket.gradient_microbatches == 1);
}

TEST_CASE("pipeline layouts: a rank holds its chunks' buckets and shards, interleaved too",
          "[executor][pipeline]") {
  // pp 2 x dp_shard 2 (4 ranks), interleaved 1F1B with 2 virtual stages: 4 chunks, rank r
  // holds chunks r and r + 2. Rank 3 = stage 1, shard 1.
  const ScheduleFile schedule = tiny_pipeline(4, 2, 4, PipelineSchedule::kInterleaved1F1B, 2);
  REQUIRE_NOTHROW(check_replayable(schedule, 4, "p.json"));
  const ReplayMesh mesh = replay_mesh(schedule, 3, 4, false, "p.json");
  CHECK(mesh == make_replay_mesh(3, 1, 2, 1, 1, 2));
  CHECK(mesh.stage == 1);
  CHECK(mesh.shard == 1);
  const Workload workload = workload_of(schedule);
  const ReplayLayout layout = make_replay_layout(schedule, workload, 3, mesh);
  const PipelineReplayPlan plan = plan_pipeline_replay(schedule, mesh, 3);
  CHECK(plan.chunks == std::vector<int>{1, 3});
  const auto& chunks = schedule.pipeline->chunks;
  CHECK(layout.buckets.size() ==
        chunks[1].program.buckets.size() + chunks[3].program.buckets.size());
  CHECK(plan.bucket_offsets ==
        std::vector<int>{-1, 0, -1, static_cast<int>(chunks[1].program.buckets.size())});
  CHECK(layout.persistent_bytes ==
        chunks[1].program.persistent_bytes + chunks[3].program.persistent_bytes);
  std::int64_t shard_elements = 0;
  for (const int c : {1, 3}) {
    for (const int u : chunks[static_cast<std::size_t>(c)].units) {
      shard_elements += workload.units[static_cast<std::size_t>(u)].shard_numel();
    }
  }
  CHECK(layout.shard_storage_elements == shard_elements);
  // Kept gathered over 4 microbatches: its reduce-scatters carry 4 microbatches' gradients.
  for (const ReplayBucket& bucket : layout.buckets) {
    CHECK(bucket.gradient_microbatches == (bucket.kind == CollectiveKind::kReduceScatter ? 4 : 1));
  }
  // The messages go to the ranks at the same place (shard 1) of the other stage: rank 1.
  // Chunk 1 receives from chunk 0 and sends to chunk 2, chunk 3 receives from chunk 2.
  REQUIRE(!layout.messages.empty());
  for (const ReplayMessage& message : layout.messages) CHECK(message.peer == 1);
  // Four more streams: sends and receives of activations and of gradients.
  CHECK(layout.first_pipeline_stream == static_cast<int>(layout.streams.size()) - 4);
  CHECK(layout.receive_stream(true) == static_cast<int>(layout.streams.size()) - 1);
  for (const ReplayMessage& message : layout.messages) {
    CHECK(message.gradient == (message.tag % 2 == 1));
  }
  // 8 actions per chunk; chunk 1 receives and sends in both directions (4 per microbatch),
  // chunk 3 (the last) receives activations and sends gradients only (2).
  CHECK(plan.actions.size() == 16);
  CHECK(layout.messages.size() == 4 * 4 + 2 * 4);
}

TEST_CASE("the replay mesh: torchtitan order, and --scale-down divides dp_shard only",
          "[executor]") {
  // HSDP 2 x shard 2 x tp 2 = 8 ranks: rank 5 = (replica 1 * 2 + shard 0) * 2 + tp 1.
  const ScheduleFile hsdp_tp = tiny_fsdp2(8, [](JobSpec& job) {
    job.dp_replicate = 2;
    job.tp = 2;
  });
  ReplayMesh mesh = replay_mesh(hsdp_tp, 5, 8, false, "s.json");
  CHECK(mesh == make_replay_mesh(5, 2, 2, 2, 1));
  CHECK(mesh.replica == 1);
  CHECK(mesh.shard == 0);
  CHECK(mesh.tp_rank == 1);
  CHECK(mesh.data_parallel_rank() == 2);
  // Scaled down to 4 ranks: 2 replicas x 1 shard rank (holding both shards) x tp 2.
  mesh = replay_mesh(hsdp_tp, 3, 4, true, "s.json");
  CHECK(mesh.dp_shard == 1);
  CHECK(mesh.shards_per_rank == 2);
  CHECK(mesh.schedule_dp_shard() == 2);
  CHECK(mesh.replica == 1);
  CHECK(mesh.tp_rank == 1);
  // dp_shard 8 on 2 ranks: 4 shards each, rank 1 starting at shard 4.
  mesh = replay_mesh(tiny_fsdp2(8), 1, 2, true, "s.json");
  CHECK(mesh.shards_per_rank == 4);
  CHECK(mesh.first_virtual_shard() == 4);
  // Without --scale-down the world must be the schedule's.
  CHECK_THROWS_AS(replay_mesh(tiny_fsdp2(8), 1, 2, false, "s.json"), Error);
  REQUIRE_NOTHROW(check_replayable(hsdp_tp, 8, "s.json"));
  REQUIRE_NOTHROW(check_replayable(hsdp_tp, 4, "s.json", true));
  CHECK_THROWS_AS(check_replayable(hsdp_tp, 4, "s.json", false), Error);
  // Replicas and TP ranks are never scaled: 2 ranks cannot hold 2 replicas x tp 2.
  CHECK_THROWS_AS(check_replayable(hsdp_tp, 2, "s.json", true), Error);
}

TEST_CASE("scaled-down layouts keep the schedule's buckets, ranks store several shards",
          "[executor]") {
  const ScheduleFile schedule = tiny_fsdp2(8);
  const Workload workload = workload_of(schedule);
  const ReplayLayout layout =
      make_replay_layout(schedule, workload, 1, replay_mesh(schedule, 1, 2, true, "s.json"));
  std::int64_t shard_elements = 0;
  for (const Unit& unit : workload.units) shard_elements += unit.shard_numel();
  // 4 of the 8 shards of every parameter on each of the 2 ranks.
  CHECK(layout.shard_storage_elements == 4 * shard_elements);
  // Tracked memory stays the schedule's rank's.
  CHECK(layout.persistent_bytes == schedule.program.persistent_bytes);
  for (std::size_t b = 0; b < layout.buckets.size(); ++b) {
    const ReplayBucket& bucket = layout.buckets[b];
    CHECK(bucket.shard_elements == schedule.program.buckets[b].shard_elements);
    CHECK(bucket.shard_bytes ==
          bucket.shard_elements * bytes_per_element(schedule.program.buckets[b].dtype));
    CHECK_FALSE(bucket.all_reduced);
  }
}

TEST_CASE("float8 buckets lay fp8 linears at 1 byte and bf16 norms at 2", "[executor]") {
  const ScheduleFile schedule = tiny_fsdp2(2, [](JobSpec& job) { job.float8 = true; });
  REQUIRE_NOTHROW(check_replayable(schedule, 2, "s.json"));
  const Workload workload = workload_of(schedule);
  const ReplayLayout layout =
      make_replay_layout(schedule, workload, 0, replay_mesh(schedule, 0, 2, false, "s.json"));
  int fp8_slots = 0;
  for (const ReplayBucket& bucket : layout.buckets) {
    std::int64_t bytes = 0;
    for (const ReplaySlot& slot : bucket.slots) {
      CHECK(slot.byte_offset == bytes);  // back to back in slot order
      bytes += slot.slot.shard_numel * bytes_per_element(slot.wire);
      if (bucket.kind == CollectiveKind::kAllGather && slot.wire == DType::kFP8) {
        ++fp8_slots;
        CHECK_THAT(slot.slot.param, Catch::Contains("layers."));
      }
      if (bucket.kind == CollectiveKind::kReduceScatter) CHECK(slot.wire == bucket.dtype);
    }
    CHECK(bucket.shard_bytes == bytes);
  }
  // 7 linears in each of 4 blocks, gathered in forward and in backward at least once.
  CHECK(fp8_slots >= 28);
}

TEST_CASE("HSDP layouts mark the reduce-scatter buckets that are all-reduced", "[executor]") {
  const ScheduleFile schedule = tiny_fsdp2(2, [](JobSpec& job) { job.dp_replicate = 2; });
  REQUIRE_NOTHROW(check_replayable(schedule, 2, "s.json"));
  const ReplayLayout layout = make_replay_layout(schedule, workload_of(schedule), 1,
                                                 replay_mesh(schedule, 1, 2, false, "s.json"));
  CHECK(layout.mesh.replica == 1);
  CHECK(layout.mesh.dp_shard == 1);
  int reduced = 0;
  for (const ReplayBucket& bucket : layout.buckets) {
    if (bucket.kind != CollectiveKind::kReduceScatter) continue;
    CHECK(bucket.all_reduced);
    ++reduced;
  }
  CHECK(reduced > 0);
}

TEST_CASE("every pipeline channel carries its messages in the same order at both ends",
          "[executor][pipeline]") {
  // A channel is (sending stage, kind): activations to the next stage (the last stage's to
  // stage 0 when interleaved), gradients to the previous. The cuda backend runs each as
  // one NCCL communicator used by one stream at each end, matched in issue order: the
  // sequence of tags the sender sends on it must be the sequence the receiver receives.
  struct Case {
    std::int64_t pp, microbatches, virtual_stages;
    PipelineSchedule order;
    const char* model;
    std::int64_t steps = 1;  // pipeline steps: each runs the schedule again
  };
  for (const Case& c : {Case{2, 4, 1, PipelineSchedule::k1F1B, "tiny"},
                        Case{2, 6, 2, PipelineSchedule::kInterleaved1F1B, "tiny"},
                        Case{4, 3, 1, PipelineSchedule::kGPipe, "tiny"},
                        Case{4, 8, 2, PipelineSchedule::kInterleaved1F1B, "llama3.2-1b"},
                        Case{2, 4, 3, PipelineSchedule::kInterleaved1F1B, "llama3.2-1b"},
                        Case{2, 2, 1, PipelineSchedule::k1F1B, "tiny", 3},
                        Case{2, 4, 2, PipelineSchedule::kInterleaved1F1B, "tiny", 2}}) {
    INFO("pp " << c.pp << " M " << c.microbatches << " V " << c.virtual_stages << " "
               << to_string(c.order) << " steps " << c.steps);
    const ScheduleFile schedule =
        tiny_pipeline(c.pp, c.pp, c.microbatches, c.order, c.virtual_stages, false, c.model,
                      DType::kFP32, c.steps);
    REQUIRE_NOTHROW(check_replayable(schedule, static_cast<int>(c.pp), "p.json"));
    // sent[from][kind][to] and received[to][kind][from]: tags in issue order.
    std::map<std::tuple<int, bool, int>, std::vector<int>> sent, received;
    std::size_t messages = 0;
    for (int rank = 0; rank < c.pp; ++rank) {
      const PipelineReplayPlan plan = plan_pipeline_replay(
          schedule, replay_mesh(schedule, rank, static_cast<int>(c.pp), false, "p.json"), rank);
      for (std::size_t k = 0; k < plan.actions.size(); ++k) {
        const ReplayAction& action = plan.actions[k];
        // Kept gathered, a chunk reduce-scatters in its last backward of each pipeline
        // step, and the rank's next action waits for them: so does each later step's
        // first action.
        const bool after_last_backward =
            k > 0 && plan.actions[k - 1].backward &&
            plan.actions[k - 1].microbatch % c.microbatches == c.microbatches - 1;
        CHECK(action.after_reduce_scatters == after_last_backward);
        if (k > 0 && k % (plan.actions.size() / c.steps) == 0) {
          CHECK(action.after_reduce_scatters);
        }
        for (const int m : {action.receive_message, action.send_message}) {
          if (m < 0) continue;
          const ReplayMessage& message = plan.messages[static_cast<std::size_t>(m)];
          CHECK(message.gradient == action.backward);
          if (message.outgoing) {
            sent[{rank, message.gradient, message.peer}].push_back(message.tag);
          } else {
            received[{message.peer, message.gradient, rank}].push_back(message.tag);
          }
        }
      }
      messages += plan.messages.size();
    }
    CHECK(sent == received);
    // Every chunk but the last sends M activations, every chunk but the first M gradients,
    // per pipeline step; each message is counted at both ends, each tag once per channel.
    const std::int64_t chunks = c.pp * c.virtual_stages;
    CHECK(static_cast<std::int64_t>(messages) == 2 * 2 * (chunks - 1) * c.microbatches * c.steps);
    for (const auto& [channel, tags] : sent) {
      CHECK(std::set<int>(tags.begin(), tags.end()).size() == tags.size());
    }
  }
}

TEST_CASE("re-gathered per microbatch, every action after a backward waits for its collectives",
          "[executor][pipeline]") {
  // Every backward reduce-scatters; FSDP2 makes the compute stream wait for them.
  for (const PipelineSchedule order : {PipelineSchedule::k1F1B, PipelineSchedule::kGPipe}) {
    const ScheduleFile schedule = tiny_pipeline(2, 2, 4, order, 1, true);
    for (int rank = 0; rank < 2; ++rank) {
      const PipelineReplayPlan plan =
          plan_pipeline_replay(schedule, replay_mesh(schedule, rank, 2, false, "p.json"), rank);
      int waits = 0;
      for (std::size_t k = 0; k < plan.actions.size(); ++k) {
        const bool after_backward = k > 0 && plan.actions[k - 1].backward;
        CHECK(plan.actions[k].after_reduce_scatters == after_backward);
        waits += after_backward ? 1 : 0;
      }
      CHECK(waits >= 3);  // each of 4 backwards but the rank's last, at least
    }
  }
}

TEST_CASE("replay layouts size each bucket's gradient amplitude to its addends",
          "[executor][data_check]") {
  // The reduce-scatter buckets of a layout on `world` ranks (rank 0).
  const auto reduce_scatters = [](const ScheduleFile& schedule, int world, bool scale_down) {
    const ReplayMesh mesh = replay_mesh(schedule, 0, world, scale_down, "s.json");
    std::vector<ReplayBucket> buckets;
    for (const ReplayBucket& bucket :
         make_replay_layout(schedule, workload_of(schedule), 0, mesh).buckets) {
      if (bucket.kind == CollectiveKind::kReduceScatter) buckets.push_back(bucket);
    }
    REQUIRE_FALSE(buckets.empty());
    return buckets;
  };
  const auto bf16 = [](JobSpec& job) { job.reduce_dtype = DType::kBF16; };
  // 64 shard ranks in bf16: 256 / 64 = 4; in fp32 the full 8.
  for (const ReplayBucket& bucket : reduce_scatters(tiny_fsdp2(64, bf16), 64, false)) {
    CHECK(bucket.gradient_amplitude == 4);
    CHECK(bucket.gradient_copy_outs == 1);
  }
  for (const ReplayBucket& bucket : reduce_scatters(tiny_fsdp2(64), 64, false)) {
    CHECK(bucket.gradient_amplitude == 8);
  }
  // HSDP: 2 replicas x 64 shards, all-reduced: 128 addends -> 2. Scaled down to 2 ranks
  // (2 replicas x 1 shard rank), each rank writes one pattern: 2 addends -> 8.
  const ScheduleFile hsdp = tiny_fsdp2(128, [](JobSpec& job) {
    job.reduce_dtype = DType::kBF16;
    job.dp_replicate = 2;
  });
  for (const ReplayBucket& bucket : reduce_scatters(hsdp, 128, false)) {
    CHECK(bucket.all_reduced);
    CHECK(bucket.gradient_amplitude == 2);
  }
  for (const ReplayBucket& bucket : reduce_scatters(hsdp, 2, true)) {
    CHECK(bucket.gradient_amplitude == 8);
  }
  // A chunk kept gathered over 33 microbatches on 2 ranks sums 66 bf16 addends: 256 / 66
  // -> 3. Re-gathered, each microbatch's 2 are reduced and copied out 33 times: 8.
  const auto pipeline = [](bool regather) {
    return tiny_pipeline(2, 1, 33, PipelineSchedule::k1F1B, 1, regather, "tiny", DType::kBF16);
  };
  for (const ReplayBucket& bucket : reduce_scatters(pipeline(false), 2, false)) {
    CHECK(bucket.gradient_microbatches == 33);
    CHECK(bucket.gradient_copy_outs == 1);
    CHECK(bucket.gradient_amplitude == 3);
  }
  for (const ReplayBucket& bucket : reduce_scatters(pipeline(true), 2, false)) {
    CHECK(bucket.gradient_microbatches == 1);
    CHECK(bucket.gradient_copy_outs == 33);
    CHECK(bucket.gradient_amplitude == 8);
  }
}

TEST_CASE("check_data_exact refuses sums no pattern keeps exact, naming --check-data",
          "[executor][data_check]") {
  const auto bf16 = [](JobSpec& job) { job.reduce_dtype = DType::kBF16; };
  std::string hint;  // of the last refusal
  const auto refusal = [&hint](const ScheduleFile& schedule, int world, bool scale_down) {
    try {
      check_data_exact(schedule, world, "s.json", scale_down);
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kBadInput);
      CHECK(e.where() == "--check-data");
      hint = e.hint();
      return std::string(e.message());
    }
    return std::string();
  };
  // 512 shard ranks sum 512 bf16 gradients: more than the 256 integers bf16 holds.
  const ScheduleFile wide = tiny_fsdp2(512, bf16);
  REQUIRE_NOTHROW(check_replayable(wide, 512, "s.json"));
  CHECK_THAT(refusal(wide, 512, false),
             Catch::Contains("s.json: bucket") &&
                 Catch::Contains("sums 512 gradients per element (512 shard ranks x 1 "
                                 "replica x 1 microbatch) and bf16 holds integers exactly "
                                 "only up to 256"));
  // The hint offers what is open to the run only (found by QA: --scale-down with one shard
  // rank, fewer microbatches with one).
  CHECK(hint ==
        "tune the schedule with --reduce-dtype fp32 (exact up to 2^24 addends), replay it on "
        "fewer ranks (--scale-down), or validate without --check-data");
  // 256 fit (amplitude 1), so do 512 scaled down to 2 ranks, or reduced in fp32.
  CHECK(refusal(tiny_fsdp2(256, bf16), 256, false).empty());
  CHECK(refusal(wide, 2, true).empty());
  CHECK(refusal(tiny_fsdp2(512), 512, false).empty());
  // A chunk kept gathered over 129 microbatches on 2 ranks: 258 addends.
  const ScheduleFile pipelined =
      tiny_pipeline(2, 1, 129, PipelineSchedule::k1F1B, 1, false, "tiny", DType::kBF16);
  CHECK_THAT(refusal(pipelined, 2, false),
             Catch::Contains("sums 258 gradients per element (2 shard ranks x 1 replica x "
                             "129 microbatches)"));
  CHECK_THAT(hint, Catch::Contains("--reduce-dtype fp32") &&
                       Catch::Contains("fewer microbatches") && Catch::Contains("--scale-down"));
  // One shard rank: nothing to scale down.
  const ScheduleFile alone =
      tiny_pipeline(1, 1, 257, PipelineSchedule::k1F1B, 1, false, "tiny", DType::kBF16);
  CHECK_THAT(refusal(alone, 1, false), Catch::Contains("(1 shard rank x 1 replica x 257"));
  CHECK(hint ==
        "tune the schedule with --reduce-dtype fp32 (exact up to 2^24 addends), tune it with "
        "fewer microbatches, or validate without --check-data");
  CHECK(refusal(tiny_pipeline(2, 1, 128, PipelineSchedule::k1F1B, 1, false, "tiny", DType::kBF16),
                2, false)
            .empty());
}

TEST_CASE("mesh group splits: every group has its size, keys 0..n-1, one coordinate varying",
          "[executor][cp]") {
  // pp 2 x dp_replicate 2 x dp_shard 4 (cp 2 inside) x tp 2 = 32 ranks.
  const int world = 32;
  std::vector<ReplayMesh> meshes;
  for (int rank = 0; rank < world; ++rank)
    meshes.push_back(make_replay_mesh(rank, 2, 4, 2, 1, 2, 2));
  using Split = ReplayMesh::GroupSplit;
  const auto check = [&](const char* name, Split (ReplayMesh::*split)() const, int size,
                         int (*coordinate)(const ReplayMesh&)) {
    INFO(name);
    std::map<int, std::vector<int>> groups;  // color -> ranks, by key
    for (int rank = 0; rank < world; ++rank) {
      const Split s = (meshes[rank].*split)();
      auto& members = groups[s.color];
      if (static_cast<int>(members.size()) <= s.key) members.resize(s.key + 1, -1);
      CHECK(members[s.key] == -1);  // no two ranks with one key
      members[s.key] = rank;
    }
    CHECK(static_cast<int>(groups.size()) == world / size);
    for (const auto& [color, members] : groups) {
      REQUIRE(static_cast<int>(members.size()) == size);
      for (int key = 0; key < size; ++key) {
        const ReplayMesh& a = meshes[members[0]];
        const ReplayMesh& b = meshes[members[key]];
        // Same stage always; only the group's own coordinate tells members apart.
        CHECK(a.stage == b.stage);
        CHECK(coordinate(b) == key);
      }
    }
  };
  check("shard", &ReplayMesh::shard_split, 4, [](const ReplayMesh& m) { return m.shard; });
  check("replica", &ReplayMesh::replica_split, 2, [](const ReplayMesh& m) { return m.replica; });
  check("tp", &ReplayMesh::tp_split, 2, [](const ReplayMesh& m) { return m.tp_rank; });
  check("cp", &ReplayMesh::cp_split, 2, [](const ReplayMesh& m) { return m.cp_rank(); });
  // A CP group is 2 consecutive shards: ranks 0 (shard 0) and 2 (shard 1), tp 2 apart.
  CHECK(meshes[0].cp_split().color == meshes[2].cp_split().color);
  CHECK(meshes[0].cp_split().color != meshes[4].cp_split().color);  // shard 2: the next group
  CHECK(meshes[0].cp_split().color != meshes[1].cp_split().color);  // another TP rank
}

TEST_CASE("check_host_memory: the ranks on a host times the predicted peak", "[executor]") {
  ScheduleFile schedule = tiny_fsdp2();
  schedule.predicted.peak_allocated_bytes = 3 << 20;  // 3 MiB per rank
  CHECK_NOTHROW(check_host_memory(schedule, 2, 6 << 20, "s.json"));
  CHECK_NOTHROW(check_host_memory(schedule, 2, 0, "s.json"));  // unknown: not checked
  try {
    check_host_memory(schedule, 3, 6 << 20, "s.json");
    FAIL("accepted 9 MiB on a 6 MiB host");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kRuntime);
    CHECK(e.where() == "s.json: predicted.peak_allocated_bytes");
    CHECK_THAT(e.message(), Catch::Contains("need 9.00 MiB, more than its 6.00 MiB"));
  }
  CHECK(host_memory_bytes() > 0);
}

// The cpu backend passed a bucket's count to MPI as static_cast<int>: a shard of more than
// 2 GiB (all-gathered as bytes) wrapped. prepare() checks every bucket and message first.
TEST_CASE("mpi_count refuses a count MPI's int cannot hold", "[executor]") {
  CHECK(mpi_count(0, 4, "bucket 0", "") == 0);
  CHECK(mpi_count(kMaxMpiCount, 1, "bucket 0", "") == 2147483647);
  for (const std::int64_t count : {kMaxMpiCount + 1, std::int64_t{1} << 40, std::int64_t{-1}}) {
    try {
      mpi_count(count, 2, "bucket 3 (reduce_scatter)", "hint");
      FAIL("accepted " << count);
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kRuntime);
      CHECK(e.where() == "bucket 3 (reduce_scatter)");
      CHECK_THAT(e.message(), Catch::Contains(std::to_string(count) + " elements of 2 bytes"));
    }
  }
}

TEST_CASE("the cuda backend's GPU per rank: bound by the launcher or by node index, never shared",
          "[executor]") {
  // srun --gpus-per-task=1 (or CUDA_VISIBLE_DEVICES per rank): each rank sees one device, its
  // own (ranks 1 and up of such a node stopped, found by review).
  CHECK(cuda_device_of_rank(0, 1) == 0);
  CHECK(cuda_device_of_rank(3, 1) == 0);
  // Every GPU visible to every rank: the rank's index on its node.
  CHECK(cuda_device_of_rank(3, 8) == 3);
  // --gpus-per-task=2: local rank 2 sees its own two GPUs and takes the first.
  CHECK(cuda_device_of_rank(2, 2) == 0);
  CHECK(cuda_device_of_rank(3, 2) == 1);
  // More ranks than the GPUs every rank sees: two ranks on one GPU, which the claims show.
  CHECK(cuda_device_of_rank(8, 8) == 0);
  const auto claim = [](unsigned char first, unsigned char last) {
    GpuClaim c;
    c.usable = 1;
    c.uuid[0] = first;
    c.uuid[15] = last;
    return c;
  };
  const GpuClaim none;  // a rank without a GPU (it stops for that)
  CHECK_FALSE(ranks_sharing_a_gpu({}).has_value());
  CHECK_FALSE(ranks_sharing_a_gpu({claim(1, 0)}).has_value());
  CHECK_FALSE(ranks_sharing_a_gpu({claim(1, 0), claim(2, 0)}).has_value());
  CHECK_FALSE(ranks_sharing_a_gpu({none, none}).has_value());
  // UUIDs are raw bytes: a leading zero, and ones that differ in their last byte only.
  CHECK_FALSE(ranks_sharing_a_gpu({claim(0, 1), claim(0, 2)}).has_value());
  CHECK(ranks_sharing_a_gpu({claim(0, 1), claim(0, 1)}) == std::pair{0, 1});
  // The first pair, by the later rank.
  CHECK(ranks_sharing_a_gpu({claim(1, 0), claim(2, 0), claim(2, 0), claim(1, 0)}) ==
        std::pair{1, 2});
  CHECK(ranks_sharing_a_gpu({claim(2, 0), claim(1, 0), none, claim(1, 0)}) == std::pair{1, 3});
}
