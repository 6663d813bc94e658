// Golden cases: a two-unit model with fixed costs, simulated step time and peak memory
// computed by hand (the arithmetic is in the comments).
#include <catch2/catch.hpp>

#include "fsdptune/plans.hpp"
#include "fsdptune/program.hpp"
#include "fsdptune/simulator.hpp"
#include "test_workloads.hpp"

using namespace fsdptune;
using fsdptune::testing::FixedCostModel;
using fsdptune::testing::FixedCosts;
using fsdptune::testing::make_workload;
using fsdptune::testing::SyntheticUnit;

namespace {

constexpr double kMs = 1e-3;

// Two units of 4 Mi parameters on 4 ranks (bf16 params, fp32 reduce):
//   shard 1 Mi elements per unit -> sharded state 16 B * 2 Mi = 32 MiB
//   gathered unit 4 Mi * 2 B = 8 MiB; unsharded grads 8 MiB (bf16);
//   reduce-scatter input 4 Mi * 4 B = 16 MiB, output shard 4 MiB
// u0: forward 1 ms, backward 2 ms, saves 10 MiB.
// u1: forward 2 ms, backward 4 ms, saves 20 MiB, 30 MiB workspace (logits) in fwd and bwd.
Workload two_units() {
  std::vector<SyntheticUnit> units(2);
  units[0] = {.name = "u0",
              .param_numel = 4 << 20,
              .forward_s = 1 * kMs,
              .backward_s = 2 * kMs,
              .saved_activation_bytes = 10 * kMiB};
  units[1] = {.name = "u1",
              .param_numel = 4 << 20,
              .forward_s = 2 * kMs,
              .backward_s = 4 * kMs,
              .saved_activation_bytes = 20 * kMiB,
              .workspace_bytes = 30 * kMiB};
  return make_workload(units, 4);
}

// Collectives: 0.5 ms + 1 ms per 8 MiB. AG of one unit (8 MiB) 1.5 ms, of both 2.5 ms;
// RS of one unit (16 MiB) 2.5 ms, of both (32 MiB) 4.5 ms. Copies are free.
FixedCosts golden_costs() {
  FixedCosts costs;
  costs.collective_latency_s = 0.5 * kMs;
  costs.collective_bytes_per_s = 8.0 * kMiB / kMs;
  return costs;
}

}  // namespace

TEST_CASE("golden: fsdp2 on two units", "[sim][golden]") {
  const Workload workload = two_units();
  const FixedCostModel costs(golden_costs());
  const Plan plan = fsdp2_plan(workload);  // per unit, prefetch 1, u1 kept, separate streams
  const SimResult result = simulate(lower(workload, plan, costs));
  // AG u0 0-1.5 (exposed). AG u1 1.5-3.0 under fwd u0 1.5-2.5, exposed 2.5-3.0.
  // fwd u1 3.0-5.0. Backward AG u0 (issued at end of forward; u1 is kept) 5.0-6.5 under
  // bwd u1 5.0-9.0. RS u1 9.0-11.5 under bwd u0 9.0-11.0; RS u0 waits for the RS stream:
  // 11.5-14.0, exposed from 11.0. Step 14.0 ms.
  CHECK(result.step_time_s == Approx(14.0 * kMs));
  CHECK(result.compute_s == Approx(9.0 * kMs));       // 1 + 2 + 4 + 2
  CHECK(result.exposed_comm_s == Approx(5.0 * kMs));  // 1.5 + 0.5 + 3.0
  CHECK(result.comm_s == Approx(9.5 * kMs));          // 3.0 + 1.5 + 5.0
  CHECK(result.idle_s == Approx(0).margin(1e-12));
  CHECK(result.comm_standalone_s == Approx(9.5 * kMs));  // 1.5 * 3 + 2.5 * 2
  // Peak at 5.0 ms when bwd u1 starts beside the backward gather of u0:
  //   gathered: u1 kept 8 + u0's all-gather buffer 8 = 16 MiB
  //   gradients of u1: 8 MiB; activations 10 + 20 = 30 MiB; u1 workspace 30 MiB
  //   32 + 16 + 8 + 30 + 30 = 116 MiB
  CHECK(result.peak_allocated_bytes == 116 * kMiB);
  const auto at = [&](MemoryCategory category) {
    return result.peak_breakdown[static_cast<int>(category)];
  };
  CHECK(at(MemoryCategory::kShardedState) == 32 * kMiB);
  CHECK(at(MemoryCategory::kGatheredParams) == 16 * kMiB);
  CHECK(at(MemoryCategory::kGradients) == 8 * kMiB);
  CHECK(at(MemoryCategory::kActivations) == 30 * kMiB);
  CHECK(at(MemoryCategory::kWorkspace) == 30 * kMiB);
  // Reserved: all sizes are whole 2 MiB segments; 5% on the 84 MiB transient part.
  CHECK(static_cast<double>(result.peak_reserved_bytes) ==
        Approx(32.0 * kMiB + 1.05 * 84.0 * kMiB).margin(1));
  // Back to the sharded state at the end.
  REQUIRE_FALSE(result.memory_timeline.empty());
  CHECK(result.memory_timeline.back().allocated_bytes == 32 * kMiB);
}

TEST_CASE("golden: both units in one bucket", "[sim][golden]") {
  const Workload workload = two_units();
  const FixedCostModel costs(golden_costs());
  Plan plan;
  plan.name = "one-bucket";
  plan.forward_buckets = {{0, 1}};
  plan.backward_buckets = {{0, 1}};
  plan.reduce_scatter_buckets = {{0, 1}};
  plan.reshard_after_forward = {true};
  const SimResult result = simulate(lower(workload, plan, costs));
  // AG [u0,u1] 16 MiB: 0-2.5 exposed. fwd u0 2.5-3.5, fwd u1 3.5-5.5. The backward
  // gather is issued at the end of forward: 5.5-8.0 exposed. bwd u1 8.0-12.0, bwd u0
  // 12.0-14.0, RS of both (32 MiB) 14.0-18.5 exposed. Step 18.5 ms.
  CHECK(result.step_time_s == Approx(18.5 * kMs));
  CHECK(result.compute_s == Approx(9.0 * kMs));
  CHECK(result.exposed_comm_s == Approx(9.5 * kMs));  // 2.5 + 2.5 + 4.5
  CHECK(result.comm_s == Approx(9.5 * kMs));
  // Peak when bwd u1 starts (8.0): gathered bucket 16 + grads u1 8 + activations 30 +
  // workspace 30 = 84 MiB, plus 32 MiB sharded = 116 MiB. (The copy-out at 8.0 holds
  // 16 + 16 + 30 = 62 MiB; forward peaks at 16 + 10 + 30 = 56 MiB.)
  CHECK(result.peak_allocated_bytes == 116 * kMiB);
  CHECK(result.peak_breakdown[static_cast<int>(MemoryCategory::kGatheredParams)] == 16 * kMiB);
  CHECK(result.memory_timeline.back().allocated_bytes == 32 * kMiB);
}

TEST_CASE("golden: fsdp2 with compute slowed by overlapping communication", "[sim][golden]") {
  const Workload workload = two_units();
  FixedCosts fixed = golden_costs();
  fixed.contention.compute_slowdown_with_comm = 2.0;  // compute at half speed beside comm
  const FixedCostModel costs(fixed);
  const SimResult result = simulate(lower(workload, fsdp2_plan(workload), costs));
  // AG u0 0-1.5. fwd u0 from 1.5 at rate 0.5 beside AG u1 (1.5-3.0): 0.75 ms of work by
  // 3.0, the remaining 0.25 at full speed -> 3.25. fwd u1 3.25-5.25 alone.
  // AG u0 (backward) 5.25-6.75 beside bwd u1: 0.75 done by 6.75, 3.25 left -> 10.0.
  // RS u1 10.0-12.5 beside bwd u0: 1.25 done by 12.5, 0.75 left -> 13.25.
  // RS u0 13.25-15.75 exposed.
  CHECK(result.step_time_s == Approx(15.75 * kMs));
  CHECK(result.compute_s == Approx(11.75 * kMs));     // 1.75 + 2 + 4.75 + 3.25
  CHECK(result.exposed_comm_s == Approx(4.0 * kMs));  // 1.5 + 2.5
  CHECK(result.comm_s == Approx(9.5 * kMs));
  CHECK(result.peak_allocated_bytes == 116 * kMiB);
}
