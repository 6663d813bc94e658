// The parts of the executor that need no MPI: which schedules it accepts and the replay
// layout it builds. The replay itself is tested end to end under mpirun (tests/cli).
#include <catch2/catch.hpp>

#include <set>

#include "fsdptune/cost_model.hpp"
#include "fsdptune/error.hpp"
#include "fsdptune/executor.hpp"
#include "fsdptune/hardware.hpp"
#include "fsdptune/plans.hpp"

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

Workload workload_of(const ScheduleFile& schedule) {
  return build_workload(schedule.model, normalize_job(schedule.model, schedule.job));
}

}  // namespace

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
  expect(schedule, 2, "program.buckets[0].slots");
  schedule = tiny_fsdp2();
  schedule.program.buckets[0].dtype = DType::kFP8;
  expect(schedule, 2, "program.buckets[0].dtype");
  schedule = tiny_fsdp2();
  schedule.program.buckets[0].shard_elements += 1;  // a gap the slots do not explain
  expect(schedule, 2, "program.buckets[0].shard_elements");
  // A schedule for 4 ranks on 3, even scaled down (3 does not divide 4).
  try {
    check_replayable(tiny_fsdp2(4), 3, "s.json", true);
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(e.where() == "s.json: job.dp_shard");
    CHECK_THAT(e.hint(), Catch::Contains("start 1, 2 or 4 ranks"));
  }
  // Pipeline schedules name job.pp, or the version 2 file's pipeline section.
  schedule = tiny_fsdp2(4);
  schedule.job.pp = 2;
  expect(schedule, 2, "job.pp");
  schedule = tiny_fsdp2();
  schedule.pipeline.emplace();
  expect(schedule, 2, "s.json: pipeline");
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
