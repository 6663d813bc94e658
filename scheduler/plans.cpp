// The built-in plans (docs/plan-format.md "Built-in plans").
#include "fsdptune/plans.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "fsdptune/error.hpp"
#include "fsdptune/program.hpp"

namespace fsdptune {
namespace {

int unit_count(const Workload& workload) { return static_cast<int>(workload.units.size()); }

std::vector<UnitRange> one_bucket_per_unit(const Workload& workload) {
  std::vector<UnitRange> buckets;
  for (int u = 0; u < unit_count(workload); ++u) buckets.push_back({u, u});
  return buckets;
}

Plan per_unit_plan(const Workload& workload, const std::string& name) {
  Plan plan;
  plan.name = name;
  plan.forward_buckets = one_bucket_per_unit(workload);
  plan.backward_buckets = plan.forward_buckets;
  plan.reduce_scatter_buckets = plan.forward_buckets;
  plan.forward_prefetch = 1;
  plan.backward_prefetch = 1;
  plan.reshard_after_forward.assign(plan.forward_buckets.size(), true);
  return plan;
}

// Per-unit figures the greedy scan adds up.
struct UnitFigures {
  std::int64_t gathered_bytes = 0;        // all-gather output, gather dtypes
  std::int64_t gradient_bytes = 0;        // reduce-scatter input, reduce dtypes
  std::int64_t unsharded_grad_bytes = 0;  // param dtype
  double backward_compute_s = 0;          // recompute + backward
};

double sum_ops(const std::vector<Op>& ops, const CostModel& costs) {
  double seconds = 0;
  for (const Op& op : ops) {
    seconds += op.kind == OpKind::kCollective
                   ? costs.collective(op.collective, op.bytes, op.group).seconds
                   : costs.compute(op).seconds;
  }
  return seconds;
}

}  // namespace

std::vector<std::string> builtin_plan_names() {
  return {"fsdp2", "simplefsdp-none", "simplefsdp-block", "simplefsdp-greedy"};
}

Plan fsdp2_plan(const Workload& workload) {
  Plan plan = per_unit_plan(workload, "fsdp2");
  // FSDP2 keeps the root's last module gathered: backward needs it at once.
  plan.reshard_after_forward.back() = false;
  plan.stream_layout = StreamLayout::kSeparate;
  plan.copy_in_out = true;
  return plan;
}

Plan simplefsdp_none_plan(const Workload& workload) {
  Plan plan = per_unit_plan(workload, "simplefsdp-none");
  // Each parameter's all-gather is its own collective into the parameter itself: no flat
  // buffer, so no copy-in/copy-out. Compiled collectives share one NCCL stream.
  plan.one_collective_per_parameter = true;
  plan.copy_in_out = false;
  plan.stream_layout = StreamLayout::kShared;
  return plan;
}

Plan simplefsdp_block_plan(const Workload& workload) {
  Plan plan = per_unit_plan(workload, "simplefsdp-block");
  plan.stream_layout = StreamLayout::kShared;
  plan.copy_in_out = true;
  return plan;
}

// SimpleFSDP's auto-wrap (arXiv 2411.00284, DESIGN.md): scan units in order; the first
// all-gather is never merged; a unit joins the current bucket unless that would
//  (a) make time(AG of the bucket) + time(RS of the previous bucket) exceed the backward
//      compute (recompute + backward) of the previous bucket, which is what hides them, or
//  (b) push the estimated peak past `memory_limit_bytes`: sharded state + every saved
//      activation (the peak sits at the start of backward) + the largest workspace +
//      twice the bucket's gathered parameters (it and the prefetched next bucket) + its
//      unsharded gradients (param dtype) + its reduce-scatter input (reduce dtype).
// Forward, backward and reduce-scatter buckets are the same, as in SimpleFSDP.
Plan simplefsdp_greedy_plan(const Workload& workload, const CostModel& costs,
                            std::int64_t memory_limit_bytes) {
  FSDPTUNE_CHECK(memory_limit_bytes > 0, "the greedy plan needs a memory limit");
  const int count = unit_count(workload);
  const CommGroup group = shard_group(workload.job);
  const std::int64_t param_bytes = bytes_per_element(workload.job.param_dtype);

  std::vector<UnitFigures> figures(count);
  std::int64_t baseline_bytes = workload.persistent_state_bytes();
  std::int64_t largest_workspace_bytes = 0;
  for (int u = 0; u < count; ++u) {
    const Unit& unit = workload.units[u];
    figures[u].gathered_bytes = unit.gathered_bytes();
    figures[u].gradient_bytes = unit.gradient_bytes();
    figures[u].unsharded_grad_bytes = unit.padded_numel() * param_bytes;
    figures[u].backward_compute_s =
        sum_ops(unit.recompute_ops, costs) + sum_ops(unit.backward_ops, costs);
    baseline_bytes += unit.saved_activation_bytes;
    largest_workspace_bytes = std::max(largest_workspace_bytes, unit.workspace_bytes);
  }
  baseline_bytes += largest_workspace_bytes;

  // A bucket being built: sums of its units' figures.
  struct Sums {
    std::int64_t gathered_bytes = 0, gradient_bytes = 0, unsharded_grad_bytes = 0;
    double backward_compute_s = 0;
    void add(const UnitFigures& unit) {
      gathered_bytes += unit.gathered_bytes;
      gradient_bytes += unit.gradient_bytes;
      unsharded_grad_bytes += unit.unsharded_grad_bytes;
      backward_compute_s += unit.backward_compute_s;
    }
  };
  auto gather_s = [&](const Sums& bucket) {
    return costs.collective(CollectiveKind::kAllGather, bucket.gathered_bytes, group).seconds;
  };
  auto reduce_s = [&](const Sums& bucket) {
    return costs.collective(CollectiveKind::kReduceScatter, bucket.gradient_bytes, group).seconds;
  };
  auto peak_bytes = [&](const Sums& bucket) {
    return baseline_bytes + 2 * bucket.gathered_bytes + bucket.unsharded_grad_bytes +
           bucket.gradient_bytes;
  };

  Plan plan = per_unit_plan(workload, "simplefsdp-greedy");
  plan.stream_layout = StreamLayout::kShared;
  plan.copy_in_out = true;
  plan.forward_buckets.clear();
  plan.forward_buckets.push_back({0, 0});  // the first all-gather is never merged
  Sums previous;
  previous.add(figures[0]);
  Sums current;
  for (int u = 1; u < count; ++u) {
    const bool open = plan.forward_buckets.back().first != 0;
    if (open) {
      Sums merged = current;
      merged.add(figures[u]);
      const bool too_slow = gather_s(merged) + reduce_s(previous) > previous.backward_compute_s;
      const bool too_big = peak_bytes(merged) > memory_limit_bytes;
      if (!too_slow && !too_big) {
        plan.forward_buckets.back().last = u;
        current = merged;
        continue;
      }
      previous = current;
    }
    plan.forward_buckets.push_back({u, u});
    current = Sums{};
    current.add(figures[u]);
  }
  plan.backward_buckets = plan.forward_buckets;
  plan.reduce_scatter_buckets = plan.forward_buckets;
  plan.reshard_after_forward.assign(plan.forward_buckets.size(), true);
  return plan;
}

Plan builtin_plan(const std::string& name, const Workload& workload, const CostModel& costs,
                  std::int64_t memory_limit_bytes, const std::string& where) {
  if (name == "fsdp2") return fsdp2_plan(workload);
  if (name == "simplefsdp-none") return simplefsdp_none_plan(workload);
  if (name == "simplefsdp-block") return simplefsdp_block_plan(workload);
  if (name == "simplefsdp-greedy") {
    return simplefsdp_greedy_plan(workload, costs, memory_limit_bytes);
  }
  std::string names;
  for (const std::string& known : builtin_plan_names())
    names += (names.empty() ? "" : ", ") + known;
  // A value that names a path ("./p.json", "plans/x.json") is a file that is not there.
  const bool path = name.find('/') != std::string::npos || name.ends_with(".json");
  throw_bad_input(
      where,
      path ? fmt::format("no such file '{}' (nor a built-in plan)", name)
           : fmt::format("unknown plan '{}'", name),
      fmt::format("built-in plans: {}; or give a plan file (docs/plan-format.md)", names));
}

std::int64_t default_memory_limit_bytes(const HardwareSpec& hardware) {
  return std::max<std::int64_t>(0, hardware.hbm_bytes - hardware.memory_reserve_bytes);
}

}  // namespace fsdptune
