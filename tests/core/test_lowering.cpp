#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "fsdptune/cost_model.hpp"
#include "fsdptune/hardware.hpp"
#include "fsdptune/job.hpp"
#include "fsdptune/model.hpp"
#include "fsdptune/program.hpp"
#include "test_workloads.hpp"

using namespace fsdptune;
using fsdptune::testing::FixedCostModel;
using fsdptune::testing::FixedCosts;
using fsdptune::testing::make_uniform_workload;
using fsdptune::testing::make_workload;
using fsdptune::testing::SyntheticUnit;

namespace {

Plan per_unit_plan(int units) {
  Plan plan;
  plan.name = "per-unit";
  for (int u = 0; u < units; ++u) plan.forward_buckets.push_back({u, u});
  plan.backward_buckets = plan.forward_buckets;
  plan.reduce_scatter_buckets = plan.forward_buckets;
  plan.reshard_after_forward.assign(units, true);
  return plan;
}

int count_kind(const Program& program, TaskKind kind) {
  return static_cast<int>(std::count_if(program.tasks.begin(), program.tasks.end(),
                                        [&](const Task& task) { return task.kind == kind; }));
}

// Structural properties every lowered program must have.
void check_well_formed(const Program& program) {
  for (const Task& task : program.tasks) {
    CHECK(task.id == &task - program.tasks.data());
    CHECK(task.stream >= 0);
    CHECK(task.stream < static_cast<int>(program.streams.size()));
    for (int dep : task.deps) CHECK(dep < task.id);  // topological order
    CHECK(task.duration_s >= 0);
  }
  // Every allocation is freed within the step: the per-category sums are zero.
  std::map<MemoryCategory, std::int64_t> net;
  for (const Task& task : program.tasks) {
    for (const MemoryEvent& event : task.memory) net[event.category] += event.bytes;
  }
  for (const auto& [category, bytes] : net) {
    INFO(to_string(category));
    CHECK(bytes == 0);
  }
}

}  // namespace

TEST_CASE("lowering a per-unit plan with separate streams", "[lowering]") {
  // 3 units of 8 Mi elements on 4 ranks: shards of 2 Mi elements.
  const Workload workload = make_uniform_workload(3, 8 << 20, 1e-3, 2e-3, 1 << 20, 4);
  const FixedCostModel costs({.collective_latency_s = 1e-3});
  Plan plan = per_unit_plan(3);
  plan.reshard_after_forward.back() = false;  // FSDP2: the last unit stays gathered
  const Program program = lower(workload, plan, costs);
  check_well_formed(program);

  REQUIRE(program.streams.size() == 3);
  CHECK(program.streams[0].role == StreamRole::kCompute);
  CHECK(program.streams[1].role == StreamRole::kAllGather);
  CHECK(program.streams[2].role == StreamRole::kReduceScatter);
  // 3 forward gathers + 2 backward ones (the kept last unit is not gathered again).
  CHECK(count_kind(program, TaskKind::kAllGather) == 5);
  CHECK(count_kind(program, TaskKind::kReduceScatter) == 3);
  CHECK(count_kind(program, TaskKind::kCopyIn) == 8);
  CHECK(count_kind(program, TaskKind::kCopyOut) == 8);
  CHECK(count_kind(program, TaskKind::kForward) == 3);
  CHECK(count_kind(program, TaskKind::kBackward) == 3);
  CHECK(count_kind(program, TaskKind::kRecompute) == 0);
  CHECK(count_kind(program, TaskKind::kOptimizer) == 1);
  CHECK(program.persistent_bytes == 16 * 3 * (2 << 20));
  for (const Task& task : program.tasks) {
    if (task.kind == TaskKind::kAllGather) {
      CHECK(task.stream == 1);
      CHECK(task.bytes == (8 << 20) * 2);  // bf16 unsharded unit
      CHECK(task.group.ranks == 4);
      CHECK(task.duration_s == Approx(1e-3));
    }
    if (task.kind == TaskKind::kReduceScatter) {
      CHECK(task.stream == 2);
      CHECK(task.bytes == (8 << 20) * 4);  // fp32 reduce-scatter input
    }
    // AG copy-outs run on the compute stream, as FSDP2's foreach_all_gather_copy_out.
    if (task.kind == TaskKind::kCopyOut && task.name.rfind("copy-out AG", 0) == 0) {
      CHECK(task.stream == 0);
    }
  }
  // Forward prefetch 1: the gather of unit 2 (3rd all-gather) waits for unit 0's forward.
  std::vector<const Task*> gathers;
  for (const Task& task : program.tasks) {
    if (task.kind == TaskKind::kCopyIn && task.stream == 1) gathers.push_back(&task);
  }
  REQUIRE(gathers.size() == 5);
  CHECK(gathers[0]->deps.empty());
  CHECK(gathers[1]->deps.empty());
  REQUIRE(gathers[2]->deps.size() == 1);
  CHECK(program.tasks[gathers[2]->deps[0]].name == "fwd u0");
  // The first backward gather (unit 1; unit 2 is kept) waits for the end of forward.
  REQUIRE(gathers[3]->deps.size() == 1);
  CHECK(program.tasks[gathers[3]->deps[0]].name == "fwd u2");
  // The next one (unit 0) is issued when the backward of unit 2 ends (prefetch 1).
  CHECK(program.tasks[gathers[4]->deps[0]].name == "bwd u2");
  CHECK(program.cost_fallbacks == 0);
  CHECK(program.cost_queries > 0);
  // Reduce-scatter back-pressure: the first compute after RS u1 is issued (the copy-out
  // of unit 0's backward gather) waits for the reduce chain of u2 to end.
  const Task* copy_out = nullptr;
  for (const Task& task : program.tasks) {
    if (task.name == "copy-out AG bwd b0 u0") copy_out = &task;
  }
  REQUIRE(copy_out != nullptr);
  REQUIRE(copy_out->deps.size() == 2);
  CHECK(program.tasks[copy_out->deps[0]].kind == TaskKind::kAllGather);
  CHECK(program.tasks[copy_out->deps[1]].name == "copy-out RS b2 u2");
}

TEST_CASE("lowering: shared stream, per-parameter collectives, HSDP", "[lowering]") {
  std::vector<SyntheticUnit> units(2);
  units[0] = {
      .name = "a", .param_numel = 4 << 20, .param_count = 2, .forward_s = 1e-3, .backward_s = 1e-3};
  units[1] = {.name = "b",
              .param_numel = 4 << 20,
              .param_count = 3 * 4,
              .forward_s = 1e-3,
              .backward_s = 1e-3};
  Workload workload = make_workload(units, 4);
  Plan plan = per_unit_plan(2);
  plan.stream_layout = StreamLayout::kShared;
  plan.one_collective_per_parameter = true;
  plan.copy_in_out = false;
  const FixedCostModel costs({.collective_latency_s = 1e-4, .measured = false});
  const Program program = lower(workload, plan, costs);
  check_well_formed(program);
  REQUIRE(program.streams.size() == 2);
  CHECK(program.streams[1].role == StreamRole::kCommunication);
  // 14 parameters: 14 gathers in forward, 14 in backward, 14 reduce-scatters, no copies.
  CHECK(count_kind(program, TaskKind::kAllGather) == 28);
  CHECK(count_kind(program, TaskKind::kReduceScatter) == 14);
  CHECK(count_kind(program, TaskKind::kCopyIn) == 0);
  CHECK(count_kind(program, TaskKind::kCopyOut) == 0);
  CHECK(count_kind(program, TaskKind::kAllReduce) == 0);
  CHECK(program.buckets.size() == 42);
  CHECK(program.cost_fallbacks == program.cost_queries);

  workload.job.dp_replicate = 2;
  workload.job.gpus = 8;
  workload.job.gpus_per_node = 8;
  plan.one_collective_per_parameter = false;
  plan.copy_in_out = true;
  const Program hsdp = lower(workload, plan, costs);
  check_well_formed(hsdp);
  CHECK(count_kind(hsdp, TaskKind::kAllReduce) == 2);
  for (const Task& task : hsdp.tasks) {
    if (task.kind == TaskKind::kAllReduce) {
      CHECK(task.group.ranks == 2);
      CHECK(task.group.ranks_per_node == 2);  // replicas 4 ranks apart on an 8-GPU node
    }
  }
}

TEST_CASE("lowering: buckets that differ between forward, backward and reduce-scatter",
          "[lowering]") {
  std::vector<SyntheticUnit> units(4);
  for (int u = 0; u < 4; ++u) {
    units[u] = {.name = fsdptune::testing::numbered("u", u),
                .param_numel = 1 << 20,
                .forward_s = 1e-3,
                .backward_s = 2e-3,
                .recompute_s = 1e-3,
                .saved_activation_bytes = 1 << 20,
                .recompute_activation_bytes = 3 << 20};
  }
  const Workload workload = make_workload(units, 2);
  Plan plan;
  plan.forward_buckets = {{0, 0}, {1, 3}};
  plan.reshard_after_forward = {true, false};  // units 1..3 kept
  plan.backward_buckets = {{0, 1}, {2, 3}};
  plan.reduce_scatter_buckets = {{0, 2}, {3, 3}};
  plan.forward_prefetch = 2;
  const Program program = lower(workload, plan, FixedCostModel());
  check_well_formed(program);
  // Backward bucket [2,3] is all kept: no gather. [0,1] gathers unit 0 only.
  CHECK(count_kind(program, TaskKind::kAllGather) == 3);
  CHECK(count_kind(program, TaskKind::kReduceScatter) == 2);
  CHECK(count_kind(program, TaskKind::kRecompute) == 4);
  const Task* backward_gather = nullptr;
  for (const Task& task : program.tasks) {
    if (task.kind == TaskKind::kAllGather && task.name.rfind("AG bwd", 0) == 0) {
      backward_gather = &task;
    }
  }
  REQUIRE(backward_gather != nullptr);
  CHECK(backward_gather->bytes == (1 << 20) * 2);  // unit 0 only, bf16
  REQUIRE(program.buckets[backward_gather->bucket].slots.size() == 1);
  CHECK(program.buckets[backward_gather->bucket].slots[0].unit == 0);
  // Recompute precedes backward of each unit on the compute stream.
  std::vector<std::string> compute_order;
  for (const Task& task : program.tasks) {
    if (task.stream == 0 && task.kind != TaskKind::kCopyOut) compute_order.push_back(task.name);
  }
  CHECK(compute_order == std::vector<std::string>{"fwd u0", "fwd u1", "fwd u2", "fwd u3",
                                                  "recompute u3", "bwd u3", "recompute u2",
                                                  "bwd u2", "recompute u1", "bwd u1",
                                                  "recompute u0", "bwd u0", "optimizer"});
}

TEST_CASE("lowering without reordering waits for each reduce-scatter", "[lowering]") {
  const Workload workload = make_uniform_workload(3, 1 << 20, 1e-3, 1e-3, 0, 2);
  Plan plan = per_unit_plan(3);
  plan.reorder = false;
  plan.forward_prefetch = 0;
  plan.backward_prefetch = 0;
  const Program program = lower(workload, plan, FixedCostModel());
  check_well_formed(program);
  // bwd u1 waits for the reduce-scatter chain of u2 (its last task, the RS copy-out).
  for (const Task& task : program.tasks) {
    if (task.name == "bwd u1" || task.name == "copy-out AG bwd b1 u1") {
      // The copy-out of u1's backward gather is the first compute task after bwd u2.
      if (task.kind == TaskKind::kCopyOut) {
        bool waits_for_reduce = false;
        for (int dep : task.deps) {
          waits_for_reduce |= program.tasks[dep].stream == 2;
        }
        CHECK(waits_for_reduce);
      }
    }
    // Forward gather of unit 1 waits for forward of unit 0 (prefetch 0).
    if (task.kind == TaskKind::kCopyIn && task.name == "copy-in AG fwd b1 u1") {
      REQUIRE(task.deps.size() == 1);
      CHECK(program.tasks[task.deps[0]].name == "fwd u0");
    }
  }
}

TEST_CASE("lowering with reduce_after_backward: every reduce-scatter after the last backward",
          "[lowering]") {
  // 4 units, reduce-scatters of units 3 and 2 together, then 1, then 0.
  const Workload workload = make_uniform_workload(4, 1 << 20, 1e-3, 2e-3, 1 << 20, 2);
  Plan plan = per_unit_plan(4);
  plan.reduce_scatter_buckets = {{0, 0}, {1, 1}, {2, 3}};
  const auto reduce_triggers = [&](const Program& program) {
    std::vector<std::string> triggers;  // each chain's first task's wait and bucket, in order
    for (const Task& task : program.tasks) {
      if (task.kind == TaskKind::kCopyIn && task.name.rfind("copy-in RS", 0) == 0) {
        REQUIRE(task.deps.size() == 1);
        triggers.push_back(program.tasks[task.deps[0]].name + " " + task.name.substr(11, 2));
      }
    }
    return triggers;
  };
  const Program overlapped = lower(workload, plan, FixedCostModel());
  check_well_formed(overlapped);
  CHECK(reduce_triggers(overlapped) ==
        std::vector<std::string>{"bwd u2 b2", "bwd u1 b1", "bwd u0 b0"});
  plan.reduce_after_backward = true;
  const Program after = lower(workload, plan, FixedCostModel());
  check_well_formed(after);
  // In bucket order, as PyTorch's stage reduces (the embedding's first).
  CHECK(reduce_triggers(after) == std::vector<std::string>{"bwd u0 b0", "bwd u0 b1", "bwd u0 b2"});
  // The same tasks otherwise, and no backward compute waits for a reduce-scatter (the
  // back-pressure of the overlapped Program: docs/plan-format.md).
  CHECK(after.tasks.size() == overlapped.tasks.size());
  const auto waits_for_reduce = [](const Program& program) {
    bool waits = false;
    for (const Task& task : program.tasks) {
      if (!on_compute_stream(program, task) || task.kind == TaskKind::kOptimizer) continue;
      for (const int dep : task.deps) waits = waits || program.tasks[dep].stream == 2;
    }
    return waits;
  };
  CHECK(waits_for_reduce(overlapped));
  CHECK_FALSE(waits_for_reduce(after));
}

TEST_CASE("lowering with precomputed compute costs gives the same program", "[lowering]") {
  const Workload workload = make_uniform_workload(4, 1 << 20, 1e-3, 2e-3, 1 << 20, 2);
  const FixedCostModel costs({.collective_latency_s = 1e-4, .measured = false});
  Plan plan = per_unit_plan(4);
  const ComputeCosts compute = compute_costs(workload, costs);
  CHECK(compute.forward_s == std::vector<double>(4, 1e-3));
  CHECK(compute.queries == 8);  // one forward and one backward op per unit
  CHECK(lower(workload, plan, costs, compute) == lower(workload, plan, costs));
}

TEST_CASE("lowering: a unit whose parameters another unit reads stays gathered", "[lowering]") {
  // Tied embeddings: the output unit (2) reads unit 0's weight, so unit 0's bucket is
  // kept from forward to backward even though the plan reshards everything.
  Workload workload = make_uniform_workload(3, 1 << 20, 1e-3, 2e-3, 1 << 20, 2);
  workload.units[2].shared_param_units = {0};
  const Program program = lower(workload, per_unit_plan(3), FixedCostModel());
  check_well_formed(program);
  int backward_gathers = 0;
  for (const Task& task : program.tasks) {
    if (task.kind == TaskKind::kAllGather && task.name.rfind("AG bwd", 0) == 0) {
      ++backward_gathers;
      CHECK(task.name.find("u0") == std::string::npos);
    }
    if (task.name == "fwd u0") {
      for (const MemoryEvent& event : task.memory) CHECK(event.bytes >= 0);  // no reshard
    }
    if (task.name == "bwd u0") {
      bool frees_params = false;
      for (const MemoryEvent& event : task.memory) {
        frees_params |= event.category == MemoryCategory::kGatheredParams && event.bytes < 0;
      }
      CHECK(frees_params);
    }
  }
  CHECK(backward_gathers == 2);  // units 1 and 2
}

TEST_CASE("lowering: a tied weight's gradient lives from the reader's backward", "[lowering]") {
  // The output unit (2) reads unit 0's weight: its backward (the output GEMM's) creates
  // that weight's unsharded gradient, which unit 0's backward accumulates into and unit
  // 0's reduce-scatter frees. Before, unit 0's backward allocated it, the last to run.
  Workload workload = make_uniform_workload(3, 1 << 20, 1e-3, 2e-3, 1 << 20, 2);
  workload.units[2].shared_param_units = {0};
  const std::int64_t unit_gradients = (1 << 20) * 2;  // bf16, unsharded
  for (const bool per_parameter : {false, true}) {
    INFO("one collective per parameter: " << per_parameter);
    Plan plan = per_unit_plan(3);
    plan.one_collective_per_parameter = per_parameter;
    const Program program = lower(workload, plan, FixedCostModel());
    check_well_formed(program);
    std::map<std::string, std::int64_t> allocated;
    std::int64_t held = 0;
    for (const Task& task : program.tasks) {
      for (const MemoryEvent& event : task.memory) {
        if (event.category != MemoryCategory::kGradients) continue;
        held += event.bytes;
        if (task.kind == TaskKind::kBackward) allocated[task.name] += event.bytes;
      }
    }
    CHECK(allocated["bwd u2"] == 2 * unit_gradients);
    CHECK(allocated["bwd u1"] == unit_gradients);
    CHECK(allocated["bwd u0"] == 0);
    CHECK(held == 0);  // every gradient freed by a reduce-scatter
  }
}

TEST_CASE("lowering: collectives carry each parameter's wire dtype", "[lowering]") {
  // Float8 all-gather: a 1 Mi-element weight travels as fp8 (1 B), a 1 Mi-element norm as
  // bf16 (2 B): 3 MiB gathered. Reduce-scatter stays fp32: 2 Mi * 4 B = 8 MiB.
  std::vector<SyntheticUnit> units(1);
  units[0] = {.name = "u0",
              .param_numel = 2 << 20,
              .param_count = 2,
              .forward_s = 1e-3,
              .backward_s = 1e-3};
  Workload workload = make_workload(units, 2);
  workload.units[0].params[0].gather_dtype = DType::kFP8;
  Plan plan = per_unit_plan(1);
  const Program program = lower(workload, plan, FixedCostModel());
  check_well_formed(program);
  for (const Task& task : program.tasks) {
    if (task.kind == TaskKind::kAllGather) {
      CHECK(task.bytes == 3 << 20);
      CHECK(program.buckets[task.bucket].dtype == DType::kBF16);  // mixed: the param dtype
    }
    if (task.kind == TaskKind::kReduceScatter) {
      CHECK(task.bytes == 8 << 20);
      CHECK(program.buckets[task.bucket].dtype == DType::kFP32);
    }
  }
}

namespace {

// A random contiguous partition of n units (each cut with probability 1/2).
std::vector<UnitRange> random_partition(int n, std::mt19937_64& rng) {
  std::vector<UnitRange> out;
  int first = 0;
  for (int i = 0; i + 1 < n; ++i) {
    if (rng() % 2 == 0) {
      out.push_back({first, i});
      first = i + 1;
    }
  }
  out.push_back({first, n - 1});
  return out;
}

// Any plan validate_plan accepts: independent partitions, flags, depths, layout, with or
// without copies, reordering, or bucketing.
Plan random_plan(int n, std::mt19937_64& rng) {
  Plan plan;
  plan.name = "random";
  plan.forward_buckets = random_partition(n, rng);
  plan.backward_buckets = random_partition(n, rng);
  plan.reduce_scatter_buckets = random_partition(n, rng);
  for (std::size_t b = 0; b < plan.forward_buckets.size(); ++b) {
    plan.reshard_after_forward.push_back(rng() % 2 == 0);
  }
  plan.stream_layout = rng() % 2 == 0 ? StreamLayout::kSeparate : StreamLayout::kShared;
  plan.copy_in_out = rng() % 4 != 0;
  plan.one_collective_per_parameter = rng() % 5 == 0;
  plan.reorder = rng() % 5 != 0;
  plan.reduce_after_backward = rng() % 4 == 0;
  plan.forward_prefetch = plan.reorder ? 1 + static_cast<int>(rng() % 3) : 0;
  plan.backward_prefetch = plan.reorder ? 1 + static_cast<int>(rng() % 3) : 0;
  validate_plan(plan, n, "random plan");
  return plan;
}

// What lower_for_simulation leaves out.
Program without_names_and_slots(Program program) {
  for (Task& task : program.tasks) task.name.clear();
  for (BucketLayout& bucket : program.buckets) bucket.slots.clear();
  return program;
}

}  // namespace

TEST_CASE("a Lowerer lowers like lower(), and for simulation without names or slots",
          "[lowering][lowerer]") {
  // The tiny model (6 units) under jobs that exercise every branch of the lowering: tied
  // embeddings (a kept bucket), HSDP all-reduces, full AC (recompute tasks), float8
  // (mixed wire dtypes). One Lowerer and one reused Program per job, 60 random plans each,
  // so storage from a larger program is reused by a smaller one and vice versa.
  const HardwareSpec hardware = builtin_hardware("h100-sxm");
  const auto costs = make_analytic_cost_model(hardware);
  struct Case {
    std::string name;
    bool tied;
    std::int64_t replicas;
    ActivationCheckpointing ac;
    bool float8;
  };
  const std::vector<Case> cases = {
      {"plain", false, 1, ActivationCheckpointing::kNone, false},
      {"tied, HSDP", true, 2, ActivationCheckpointing::kSelective, false},
      {"full AC, float8", false, 1, ActivationCheckpointing::kFull, true},
  };
  std::mt19937_64 rng(11);
  for (const Case& c : cases) {
    DYNAMIC_SECTION(c.name) {
      ModelSpec model = builtin_model("tiny");
      model.tie_embeddings = c.tied;
      JobSpec job;
      job.gpus = 16;
      job.dp_replicate = c.replicas;
      job.local_batch = 2;
      job.seq_len = 512;
      job.ac = c.ac;
      job.float8 = c.float8;
      const Workload workload = build_workload(model, normalize_job(model, job));
      const int n = static_cast<int>(workload.units.size());
      Lowerer lowerer(workload, *costs);
      CHECK(lowerer.compute() == compute_costs(workload, *costs));
      Program reused;
      for (int trial = 0; trial < 60; ++trial) {
        const Plan plan = random_plan(n, rng);
        const Program full = lower(workload, plan, *costs);
        CHECK(lowerer.lower(plan) == full);
        lowerer.lower_for_simulation(plan, reused);
        REQUIRE(reused == without_names_and_slots(full));
        // Names and slots were there to leave out.
        CHECK_FALSE(full.tasks.front().name.empty());
        CHECK_FALSE(full.buckets.front().slots.empty());
      }
    }
  }
}

TEST_CASE("replicate_group: the fewest GPUs of a replica group on any node", "[lowering]") {
  JobSpec job;
  job.gpus_per_node = 8;
  job.tp = 1;
  // Without PP the replicas lie evenly: dp_shard 2 puts 4 of 8 replicas on a node, dp_shard
  // 8 one per node.
  job.dp_shard = 2;
  job.dp_replicate = 8;
  job.pp = 1;
  CHECK(replicate_group(job).ranks == 8);
  CHECK(replicate_group(job).ranks_per_node == 4);
  job.dp_shard = 8;
  CHECK(replicate_group(job).ranks_per_node == 1);
  // PP with stages of whole nodes: 32 GPUs, pp 2, replicas {0, 4, 8, 12}: 2 per node.
  job.dp_shard = 4;
  job.dp_replicate = 4;
  job.pp = 2;
  CHECK(replicate_group(job).ranks_per_node == 2);
  // Found by QA: 24 GPUs, pp 2, 3 replicas of dp_shard 4: stages of 12 ranks, groups {0, 4,
  // 8} (node 0 holds two, node 1 one) and {12, 16, 20} (one, then two): one GPU drives a
  // node's NICs, not the two an even split would give.
  job.dp_replicate = 3;
  CHECK(replicate_group(job).ranks == 3);
  CHECK(replicate_group(job).ranks_per_node == 1);
  // Over 2 nodes, not the 3 that 3 ranks at 1 per node would fill (review).
  CHECK(replicate_group(job).nodes() == 2);
  // 48 GPUs, pp 2, 3 replicas of dp_shard 8: stages of 24, each replica its own node.
  job.dp_shard = 8;
  CHECK(replicate_group(job).ranks_per_node == 1);
  // 4-GPU nodes, 6 replicas of dp_shard 1 over pp 2 (stages of 6): {0..5} and {6..11}
  // split 4 + 2 and 2 + 4: 2.
  job.gpus_per_node = 4;
  job.dp_shard = 1;
  job.dp_replicate = 6;
  CHECK(replicate_group(job).ranks_per_node == 2);
  // Against a walk of every rank of every group, over meshes whose shard groups stay within
  // nodes (the counting is O(1) a group; review).
  for (const std::int64_t per_node : {2, 4, 8, 16}) {
    for (std::int64_t stride = 1; stride <= 2 * per_node; stride *= 2) {
      for (std::int64_t replicas = 2; replicas <= 13; ++replicas) {
        for (std::int64_t pp = 1; pp <= 5; ++pp) {
          JobSpec mesh;
          mesh.gpus_per_node = per_node;
          mesh.tp = 1;
          mesh.dp_shard = stride;
          mesh.dp_replicate = replicas;
          mesh.pp = pp;
          std::int64_t fewest = replicas;
          std::int64_t most_nodes = 1;
          for (std::int64_t stage = 0; stage < pp; ++stage) {
            for (std::int64_t offset = 0; offset < stride; ++offset) {
              std::map<std::int64_t, std::int64_t> on_node;
              for (std::int64_t k = 0; k < replicas; ++k) {
                ++on_node[(stage * stride * replicas + offset + k * stride) / per_node];
              }
              for (const auto& [node, count] : on_node) fewest = std::min(fewest, count);
              most_nodes = std::max(most_nodes, static_cast<std::int64_t>(on_node.size()));
            }
          }
          INFO(per_node << " per node, stride " << stride << ", " << replicas << " replicas, pp "
                        << pp);
          CHECK(replicate_group(mesh).ranks_per_node == fewest);
          CHECK(replicate_group(mesh).nodes() == most_nodes);
        }
      }
    }
  }
}
