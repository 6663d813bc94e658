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

// The tiny model on 2 ranks, batch 1 x 128 tokens, lowered with the fsdp2 plan.
ScheduleFile tiny_fsdp2(std::int64_t gpus = 2) {
  ScheduleFile schedule;
  schedule.model = builtin_model("tiny");
  JobSpec job;
  job.gpus = gpus;
  job.gpus_per_node = gpus;
  job.local_batch = 1;
  job.seq_len = 128;
  schedule.job = job;
  const Workload workload = build_workload(schedule.model, normalize_job(schedule.model, job));
  const auto costs = make_analytic_cost_model(builtin_hardware("h100-sxm"));
  schedule.plan = fsdp2_plan(workload);
  schedule.program = lower(workload, schedule.plan, *costs);
  return schedule;
}

}  // namespace

TEST_CASE("the replay layout places every parameter shard once in the fp32 storage", "[executor]") {
  const ScheduleFile schedule = tiny_fsdp2();
  REQUIRE_NOTHROW(check_replayable(schedule, 2, "s.json"));
  const Workload workload =
      build_workload(schedule.model, normalize_job(schedule.model, schedule.job));
  const ReplayLayout layout = make_replay_layout(schedule, workload, 1, 2);
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
  schedule = tiny_fsdp2(4);
  schedule.job.tp = 2;
  expect(schedule, 2, "job");
  // A pipeline schedule (version 2) has no single Program to replay.
  schedule = tiny_fsdp2();
  schedule.pipeline = SchedulePipeline{};
  expect(schedule, 2, "pipeline");
}
