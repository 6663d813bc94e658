// Lowering: Workload + Plan + CostModel -> Program. The rules (which tasks, which stream,
// which dependencies, which memory events) are written down in docs/plan-format.md; the
// comments here say where each one comes from.
#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "fsdptune/error.hpp"
#include "fsdptune/program.hpp"

namespace fsdptune {

std::string to_string(StreamRole role) {
  switch (role) {
    case StreamRole::kCompute:
      return "compute";
    case StreamRole::kAllGather:
      return "all_gather";
    case StreamRole::kReduceScatter:
      return "reduce_scatter";
    case StreamRole::kCommunication:
      return "comm";
  }
  return "compute";
}

std::string to_string(TaskKind kind) {
  switch (kind) {
    case TaskKind::kForward:
      return "forward";
    case TaskKind::kRecompute:
      return "recompute";
    case TaskKind::kBackward:
      return "backward";
    case TaskKind::kCopyIn:
      return "copy_in";
    case TaskKind::kAllGather:
      return "all_gather";
    case TaskKind::kCopyOut:
      return "copy_out";
    case TaskKind::kReduceScatter:
      return "reduce_scatter";
    case TaskKind::kAllReduce:
      return "all_reduce";
    case TaskKind::kOptimizer:
      return "optimizer";
  }
  return "forward";
}

std::string to_string(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::kShardedState:
      return "sharded_state";
    case MemoryCategory::kGatheredParams:
      return "gathered_params";
    case MemoryCategory::kGradients:
      return "gradients";
    case MemoryCategory::kActivations:
      return "activations";
    case MemoryCategory::kWorkspace:
      return "workspace";
    case MemoryCategory::kCount:
      break;
  }
  return "workspace";
}

CommGroup shard_group(const JobSpec& job) {
  CommGroup group;
  group.ranks = std::max<std::int64_t>(1, job.dp_shard);
  const std::int64_t per_node =
      std::max<std::int64_t>(1, job.gpus_per_node / std::max<std::int64_t>(1, job.tp));
  group.ranks_per_node = std::min(group.ranks, per_node);
  return group;
}

CommGroup replicate_group(const JobSpec& job) {
  CommGroup group;
  group.ranks = std::max<std::int64_t>(1, job.dp_replicate);
  // Replicas are dp_shard * tp ranks apart: they share a node only when that stride is
  // smaller than a node.
  const std::int64_t stride =
      std::max<std::int64_t>(1, job.dp_shard) * std::max<std::int64_t>(1, job.tp);
  const std::int64_t per_node = std::max<std::int64_t>(1, job.gpus_per_node);
  group.ranks_per_node = std::clamp<std::int64_t>(per_node / stride, 1, group.ranks);
  // Under PP a stage need not be whole nodes (24 GPUs, pp 2, 8 per node: ranks 0-11 and
  // 12-23), and its replica groups then split unevenly over nodes ({0, 4, 8}: two GPUs on
  // one node, one on the next). The node holding the fewest of a group's GPUs drives the
  // fewest NICs (docs/hardware.md): the fewest any node holds of any group, every stage's
  // (found by QA: such a group was priced at two NICs where one carries its ring).
  const std::int64_t stage_ranks = stride * group.ranks;
  if (group.ranks > 1 && stage_ranks % per_node != 0 && stride < per_node) {
    // A group is ranks base + k * stride, k < ranks: the nodes between its first and its
    // last hold per_node / stride of it each (stride divides per_node: a shard group does
    // not straddle nodes), those two what reaches into them. O(1) a group (found by review:
    // a walk of every rank, on every all-reduce task, took 80% of a large tune).
    std::int64_t fewest = group.ranks;
    std::int64_t most_nodes = 1;
    for (std::int64_t stage = 0; stage < std::max<std::int64_t>(1, job.pp); ++stage) {
      for (std::int64_t offset = 0; offset < stride; ++offset) {
        const std::int64_t first = stage * stage_ranks + offset;
        const std::int64_t last = first + (group.ranks - 1) * stride;
        const std::int64_t first_node = first / per_node;
        const std::int64_t last_node = last / per_node;
        if (first_node == last_node) continue;  // all of it on one node
        most_nodes = std::max(most_nodes, last_node - first_node + 1);
        fewest = std::min({fewest, ((first_node + 1) * per_node - 1 - first) / stride + 1,
                           (last - last_node * per_node) / stride + 1});
        if (last_node - first_node >= 2) fewest = std::min(fewest, per_node / stride);
      }
    }
    group.ranks_per_node = fewest;
    // And over the most nodes any group spans ({0, 4, 8}: 2, where 3 ranks at 1 per node
    // would say 3; found by review: a large group was priced over twice its nodes).
    if (most_nodes != group.nodes()) group.spanned_nodes = most_nodes;
  }
  return group;
}

namespace {

// One item of the compute stream, before ids are assigned.
struct ComputeItem {
  TaskKind kind = TaskKind::kForward;
  int unit = -1;
  int collective_group = -1;  // kCopyOut: which gather group it copies out
};

// The collectives of one bucket pass, issued together: a gather group (copy-in, all-gather
// on the gather stream; copy-out on the compute stream) or a reduce group (copy-in,
// reduce-scatter, copy-out, HSDP all-reduce on the reduce stream).
struct CollectiveGroup {
  bool gather = true;
  bool backward = false;
  int plan_bucket = 0;  // index in the plan's bucket list
  UnitRange units;
  std::vector<int> gathered_units;  // gather groups: units whose parameters travel
  int trigger_item = -1;            // issued when this compute item ends (-1: at step start)
  int order = 0;                    // issue order among groups with the same trigger
  // Filled at emission.
  std::vector<int> layout_ids;            // Program::buckets, one per collective
  std::vector<std::int64_t> alloc_bytes;  // gathered bytes per collective
  int last_comm_task = -1;                // the gather's all-gather / the reduce chain's last task
};

}  // namespace

std::vector<OpOverlap> op_overlaps(const std::vector<Op>& ops, bool async_tp) {
  std::vector<OpOverlap> overlaps;
  std::vector<bool> paired(ops.size(), false);  // GEMMs paired with an async-TP collective
  // The nearest op of `kind` after (forward) or before `i`, with no collective between.
  auto neighbour = [&](std::size_t i, bool forward, OpKind kind) -> std::ptrdiff_t {
    if (forward) {
      for (std::size_t j = i + 1; j < ops.size() && ops[j].kind != OpKind::kCollective; ++j) {
        if (ops[j].kind == kind) return static_cast<std::ptrdiff_t>(j);
      }
    } else {
      for (std::size_t j = i; j-- > 0 && ops[j].kind != OpKind::kCollective;) {
        if (ops[j].kind == kind) return static_cast<std::ptrdiff_t>(j);
      }
    }
    return -1;
  };
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    if (op.kind != OpKind::kCollective) continue;
    const int ranks = static_cast<int>(std::max<std::int64_t>(op.group.ranks, 1));
    if (op.parallel_dim == ParallelDim::kContext) {
      // Context parallelism (PyTorch's all-gather rotate method): the K/V all-gather is
      // issued before the SDPA call of the rank's own chunk, which runs while it travels
      // (1/cp of the attention's work, load-balanced). The ring pass of the K/V gradients
      // overlaps the backward's later steps the same way, the last chunk's pass exposed.
      if (op.collective == CollectiveKind::kAllGather) {
        if (i + 1 < ops.size() && ops[i + 1].kind == OpKind::kAttention) {
          overlaps.push_back({OverlapKind::kBeforeFirstPart, i, i + 1, ranks});
        }
      } else if (const std::ptrdiff_t j = neighbour(i, false, OpKind::kAttention); j >= 0) {
        overlaps.push_back({OverlapKind::kAfterFirstPart, i, static_cast<std::size_t>(j), ranks});
      }
      continue;
    }
    // Async TP (PyTorch's micro-pipelined all-gather+matmul / matmul+reduce-scatter, as
    // torchtitan's --experimental.enable_async_tensor_parallel uses): the sequence-parallel
    // all-gather is split into tp chunks, each matmul chunk runs as soon as its chunk has
    // arrived; the reduce-scatter likewise after the preceding matmul. An all-gather pairs
    // with the next GEMM, a reduce-scatter with the previous one; all-reduces (loss
    // parallel) and collectives without a neighbouring GEMM stay exposed.
    // A GEMM pairs with one collective at most (an all-gather before it and a
    // reduce-scatter after it would both want it; the all-gather, first, gets it).
    if (!async_tp || ranks <= 1) continue;
    std::ptrdiff_t j = -1;
    if (op.collective == CollectiveKind::kAllGather) {
      j = neighbour(i, true, OpKind::kGemm);
    } else if (op.collective == CollectiveKind::kReduceScatter) {
      j = neighbour(i, false, OpKind::kGemm);
    }
    if (j < 0 || paired[static_cast<std::size_t>(j)]) continue;
    paired[static_cast<std::size_t>(j)] = true;
    overlaps.push_back({op.collective == CollectiveKind::kAllGather ? OverlapKind::kPipelinedBefore
                                                                    : OverlapKind::kPipelinedAfter,
                        i, static_cast<std::size_t>(j), ranks});
  }
  return overlaps;
}

double tp_ops_seconds(const std::vector<Op>& ops, bool async_tp, const CostModel& costs,
                      Program* counts) {
  auto count = [&](const CostEstimate& estimate) {
    if (counts != nullptr) {
      ++counts->cost_queries;
      if (!estimate.measured) ++counts->cost_fallbacks;
    }
    return estimate.seconds;
  };
  std::vector<double> seconds(ops.size(), 0.0);
  for (std::size_t i = 0; i < ops.size(); ++i) {
    // Tensor-parallel collectives sit inside the unit's op list: they are on the compute
    // critical path, costed as collectives over their own group.
    const Op& op = ops[i];
    seconds[i] = op.kind == OpKind::kCollective
                     ? count(costs.collective(op.collective, op.bytes, op.group))
                     : count(costs.compute(op));
  }
  double total = 0;
  for (double s : seconds) total += s;
  for (const OpOverlap& overlap : op_overlaps(ops, async_tp)) {
    const double c = seconds[overlap.collective];
    const double a = seconds[overlap.partner];
    const auto parts = static_cast<double>(overlap.parts);
    switch (overlap.kind) {
      case OverlapKind::kBeforeFirstPart:
        // c - min(c, a / cp) of the all-gather is exposed.
        total -= std::min(c, a / parts);
        break;
      case OverlapKind::kAfterFirstPart:
        // c - min(c, a (cp - 1) / cp) of the gradients' pass is exposed.
        total -= std::min(c, a * (parts - 1) / parts);
        break;
      case OverlapKind::kPipelinedBefore:
      case OverlapKind::kPipelinedAfter:
        // The pair takes max(c, g) + min(c, g) / tp (one chunk is never overlapped)
        // instead of c + g. The GEMM's slowdown from sharing SMs with the collective is
        // left to the remainder.
        total -= c + a - (std::max(c, a) + std::min(c, a) / parts);
        break;
    }
  }
  return total;
}

namespace {

// The cost model's answers for collectives and copies, memoized by their arguments. The
// CostModel is pure (cost_model.hpp), so a memoized answer is the answer it would give.
struct CollectiveKey {
  CollectiveKind kind = CollectiveKind::kAllGather;
  std::int64_t bytes = 0;
  CommGroup group;
  bool operator==(const CollectiveKey&) const = default;
};
struct CollectiveKeyHash {
  std::size_t operator()(const CollectiveKey& key) const {
    // splitmix64-style mixing of the four fields.
    std::uint64_t h = static_cast<std::uint64_t>(key.bytes) * 0x9E3779B97F4A7C15ULL;
    h ^= (static_cast<std::uint64_t>(key.group.ranks) << 20) ^
         (static_cast<std::uint64_t>(key.group.ranks_per_node) << 8) ^
         static_cast<std::uint64_t>(key.kind);
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ULL;
    h ^= h >> 29;
    return static_cast<std::size_t>(h);
  }
};

// Per-unit sums over its parameters. A bucket of whole units (any plan but
// one_collective_per_parameter) moves the sum over its units, so a lowering that needs no
// buffer slots never walks the parameters.
struct UnitTotals {
  std::vector<std::int64_t> shard_numel;         // sum of shard_numel
  std::vector<std::int64_t> gather_shard_bytes;  // sum of shard_numel * bytes(gather_dtype)
  std::vector<std::int64_t> reduce_shard_bytes;  // sum of shard_numel * bytes(reduce_dtype)
  std::vector<int> gather_dtype, reduce_dtype;   // the parameters' common wire dtype; -1: mixed
  std::int64_t persistent_bytes = 0;  // fp32 params, grads and AdamW states: 16 B per element
};

UnitTotals unit_totals(const Workload& workload) {
  UnitTotals totals;
  for (const Unit& unit : workload.units) {
    std::int64_t numel = 0, gather = 0, reduce = 0;
    int gather_dtype = -2, reduce_dtype = -2;  // -2: no parameter seen yet
    const auto common = [](int so_far, DType dtype) {
      const int value = static_cast<int>(dtype);
      return so_far == -2 || so_far == value ? value : -1;
    };
    for (const Param& param : unit.params) {
      numel += param.shard_numel;
      gather += param.shard_numel * bytes_per_element(param.gather_dtype);
      reduce += param.shard_numel * bytes_per_element(param.reduce_dtype);
      gather_dtype = common(gather_dtype, param.gather_dtype);
      reduce_dtype = common(reduce_dtype, param.reduce_dtype);
    }
    totals.shard_numel.push_back(numel);
    totals.gather_shard_bytes.push_back(gather);
    totals.reduce_shard_bytes.push_back(reduce);
    totals.gather_dtype.push_back(gather_dtype);
    totals.reduce_dtype.push_back(reduce_dtype);
    totals.persistent_bytes += 16 * numel;
  }
  return totals;
}

// Everything a lowering needs besides its inputs and output, kept between calls by a
// Lowerer so that lowering many plans reuses the storage instead of reallocating it.
struct LoweringScratch {
  std::vector<int> forward_bucket_of, backward_position_of;
  std::vector<bool> kept;
  std::vector<bool> gradients_made_by_reader;
  std::vector<ComputeItem> items;
  std::vector<int> forward_item, backward_item;
  std::vector<int> forward_group_end, backward_group_end;
  std::vector<int> forward_gather, backward_gather;  // index in groups, -1 = none
  std::vector<CollectiveGroup> groups;               // the first group_count are in use
  std::vector<int> issue_order;
  std::vector<int> trigger_counts;
  std::vector<int> item_task;
  std::vector<int> reduce_ends;
  std::vector<int> pending_reduce_waits;
  std::vector<std::vector<std::pair<int, const Param*>>> collectives;  // first collective_count
  std::vector<int> units;
  std::vector<MemoryEvent> free_grads;
  std::unordered_map<CollectiveKey, CostEstimate, CollectiveKeyHash> collective_costs;
  std::unordered_map<std::int64_t, CostEstimate> copy_costs;
};

class Lowering {
 public:
  // `detail`: task names and bucket slots (false: left empty, for the simulator only).
  Lowering(const Workload& workload, const Plan& plan, const CostModel& costs,
           const ComputeCosts& compute, const UnitTotals& totals, LoweringScratch& scratch,
           Program& program, bool detail)
      : workload_(workload),
        plan_(plan),
        costs_(costs),
        compute_(compute),
        totals_(totals),
        scratch_(scratch),
        program_(program),
        detail_(detail),
        forward_bucket_of_(scratch.forward_bucket_of),
        backward_position_of_(scratch.backward_position_of),
        kept_(scratch.kept),
        gradients_made_by_reader_(scratch.gradients_made_by_reader),
        items_(scratch.items),
        forward_item_(scratch.forward_item),
        backward_item_(scratch.backward_item),
        forward_group_end_(scratch.forward_group_end),
        backward_group_end_(scratch.backward_group_end),
        forward_gather_(scratch.forward_gather),
        backward_gather_(scratch.backward_gather),
        groups_(scratch.groups),
        issue_order_(scratch.issue_order),
        item_task_(scratch.item_task),
        reduce_ends_(scratch.reduce_ends),
        pending_reduce_waits_(scratch.pending_reduce_waits) {
    unit_count_ = static_cast<int>(workload.units.size());
    ranks_ = std::max<std::int64_t>(1, workload.job.dp_shard);
    param_bytes_ = bytes_per_element(workload.job.param_dtype);
    group_ = shard_group(workload.job);
    items_.clear();
    issue_order_.clear();
    reduce_ends_.clear();
    pending_reduce_waits_.clear();
  }

  void run() {
    program_.streams.clear();
    program_.persistent_bytes = 0;
    setup_streams();
    // Per unit at most: forward, recompute, backward, and per pass a copy-in, a collective
    // and a copy-out (plus an all-reduce) -- without one collective per parameter.
    const std::size_t per_unit = plan_.one_collective_per_parameter ? 16 : 13;
    program_.tasks.reserve(per_unit * workload_.units.size() + 1);
    program_.buckets.reserve(3 * workload_.units.size());
    program_.contention = costs_.contention();
    program_.cost_queries = compute_.queries;
    program_.cost_fallbacks = compute_.fallbacks;
    program_.persistent_bytes = totals_.persistent_bytes;
    build_compute_items();
    build_collective_groups();
    emit();
    // Storage reused from a previous, larger program: drop the tail.
    program_.tasks.resize(static_cast<std::size_t>(task_count_));
    program_.buckets.resize(static_cast<std::size_t>(bucket_count_));
  }

 private:
  void setup_streams() {
    program_.streams.push_back({"compute", StreamRole::kCompute});
    if (plan_.stream_layout == StreamLayout::kSeparate) {
      program_.streams.push_back({"all_gather", StreamRole::kAllGather});
      program_.streams.push_back({"reduce_scatter", StreamRole::kReduceScatter});
      gather_stream_ = 1;
      reduce_stream_ = 2;
    } else {
      program_.streams.push_back({"comm", StreamRole::kCommunication});
      gather_stream_ = 1;
      reduce_stream_ = 1;
    }
  }

  // A group in reused storage, reset to its defaults.
  CollectiveGroup& new_group() {
    if (group_count_ == static_cast<int>(groups_.size())) groups_.emplace_back();
    CollectiveGroup& group = groups_[group_count_++];
    group.gather = true;
    group.backward = false;
    group.plan_bucket = 0;
    group.units = {};
    group.gathered_units.clear();
    group.trigger_item = -1;
    group.order = 0;
    group.layout_ids.clear();
    group.alloc_bytes.clear();
    group.last_comm_task = -1;
    return group;
  }

  // Which forward bucket holds each unit, and whether its parameters stay gathered from
  // forward to backward (reshard_after_forward false).
  void build_compute_items() {
    forward_bucket_of_.assign(unit_count_, 0);
    kept_.assign(unit_count_, false);
    for (int b = 0; b < static_cast<int>(plan_.forward_buckets.size()); ++b) {
      for (int u = plan_.forward_buckets[b].first; u <= plan_.forward_buckets[b].last; ++u) {
        forward_bucket_of_[u] = b;
        kept_[u] = !plan_.reshard_after_forward[b];
      }
    }
    // Position in the backward order of each unit's backward bucket (0 = the last bucket).
    backward_position_of_.assign(unit_count_, -1);
    const int backward_buckets = static_cast<int>(plan_.backward_buckets.size());
    for (int b = 0; b < backward_buckets; ++b) {
      for (int u = plan_.backward_buckets[b].first; u <= plan_.backward_buckets[b].last; ++u) {
        backward_position_of_[u] = backward_buckets - 1 - b;
      }
    }
    // Tied embeddings: a unit whose parameters another unit's compute reads (the output
    // GEMM reads tok_embeddings.weight) stays gathered from its forward to its backward,
    // as the FSDP2 root does: its whole forward bucket is kept. The reader's backward runs
    // first and creates the shared parameters' gradients (the output GEMM's grad of the
    // tied weight), which the owner's backward accumulates into: they live from the
    // reader's backward to the owner's reduce-scatter.
    gradients_made_by_reader_.assign(unit_count_, false);
    for (const Unit& unit : workload_.units) {
      for (int shared : unit.shared_param_units) {
        const UnitRange bucket = plan_.forward_buckets[forward_bucket_of_[shared]];
        for (int u = bucket.first; u <= bucket.last; ++u) kept_[u] = true;
        if (shared < unit.index) gradients_made_by_reader_[shared] = true;
      }
    }
    forward_item_.assign(unit_count_, -1);
    backward_item_.assign(unit_count_, -1);
    const int forward_count = static_cast<int>(plan_.forward_buckets.size());
    const int backward_count = static_cast<int>(plan_.backward_buckets.size());
    forward_group_end_.assign(forward_count, -1);
    backward_group_end_.assign(backward_count, -1);
    forward_gather_.assign(forward_count, -1);
    backward_gather_.assign(backward_count, -1);

    // Gather groups exist before the items so that copy-outs can name them.
    for (int b = 0; b < forward_count; ++b) {
      forward_gather_[b] = group_count_;
      CollectiveGroup& group = new_group();
      group.gather = true;
      group.plan_bucket = b;
      group.units = plan_.forward_buckets[b];
      for (int u = group.units.first; u <= group.units.last; ++u) group.gathered_units.push_back(u);
    }
    // Backward buckets run last to first; position j = 0 is the last bucket.
    for (int j = 0; j < backward_count; ++j) {
      const int b = backward_count - 1 - j;
      const int index = group_count_;
      CollectiveGroup& group = new_group();
      group.gather = true;
      group.backward = true;
      group.plan_bucket = b;
      group.units = plan_.backward_buckets[b];
      // Units kept since forward are not gathered again.
      for (int u = group.units.first; u <= group.units.last; ++u) {
        if (!kept_[u]) group.gathered_units.push_back(u);
      }
      if (group.gathered_units.empty()) {
        --group_count_;  // nothing to gather: no group
        continue;
      }
      backward_gather_[j] = index;
    }

    for (int b = 0; b < forward_count; ++b) {
      if (plan_.copy_in_out) {
        items_.push_back({TaskKind::kCopyOut, -1, forward_gather_[b]});
      }
      for (int u = plan_.forward_buckets[b].first; u <= plan_.forward_buckets[b].last; ++u) {
        forward_item_[u] = static_cast<int>(items_.size());
        items_.push_back({TaskKind::kForward, u, -1});
      }
      forward_group_end_[b] = static_cast<int>(items_.size()) - 1;
    }
    for (int j = 0; j < backward_count; ++j) {
      const UnitRange bucket = plan_.backward_buckets[backward_count - 1 - j];
      if (plan_.copy_in_out && backward_gather_[j] >= 0) {
        items_.push_back({TaskKind::kCopyOut, -1, backward_gather_[j]});
      }
      for (int u = bucket.last; u >= bucket.first; --u) {
        if (!workload_.units[u].recompute_ops.empty()) {
          items_.push_back({TaskKind::kRecompute, u, -1});
        }
        backward_item_[u] = static_cast<int>(items_.size());
        items_.push_back({TaskKind::kBackward, u, -1});
      }
      backward_group_end_[j] = static_cast<int>(items_.size()) - 1;
    }
    items_.push_back({TaskKind::kOptimizer, -1, -1});
  }

  // Prefetch by dependency. Forward and backward compute groups form one sequence
  // G_0..G_{n-1} (forward buckets), G_n..G_{n+m-1} (backward buckets in the order they
  // run). The gather for group g with prefetch depth d is issued when group g-d-1 ends,
  // so it overlaps groups g-d..g-1 and at most d+1 gathered buckets are alive while a
  // group computes. Backward gathers are never issued before the forward pass ends (the
  // backward is its own graph). Reduce-scatter bucket R is issued when the backward of its
  // lowest unit (the last of R to run) ends (with reduce_after_backward, when unit 0's
  // ends).
  void build_collective_groups() {
    const int forward_count = static_cast<int>(plan_.forward_buckets.size());
    const int backward_count = static_cast<int>(plan_.backward_buckets.size());
    const int forward_end = forward_group_end_[forward_count - 1];
    auto group_end = [&](int g) {
      return g < forward_count ? forward_group_end_[g] : backward_group_end_[g - forward_count];
    };
    for (int b = 0; b < forward_count; ++b) {
      const int g = b - plan_.forward_prefetch - 1;
      CollectiveGroup& group = groups_[forward_gather_[b]];
      group.trigger_item = g >= 0 ? group_end(g) : -1;
      group.order = 1'000'000 + b;
    }
    for (int j = 0; j < backward_count; ++j) {
      if (backward_gather_[j] < 0) continue;
      const int g = forward_count + j - plan_.backward_prefetch - 1;
      CollectiveGroup& group = groups_[backward_gather_[j]];
      group.trigger_item = g >= forward_count ? group_end(g) : forward_end;
      group.order = 2'000'000 + j;
    }
    const int reduce_count = static_cast<int>(plan_.reduce_scatter_buckets.size());
    for (int k = 0; k < reduce_count; ++k) {
      // In the order the backward makes their gradients, last bucket first; after the
      // backward in bucket order, first bucket first, as PyTorch's PipelineStage reduces a
      // stage (perform_reduce_grad: each FSDP state's post_backward in the order of
      // `modules()`, the embedding before layers.0).
      const int r = plan_.reduce_after_backward ? k : reduce_count - 1 - k;
      CollectiveGroup& group = new_group();
      group.gather = false;
      group.backward = true;
      group.plan_bucket = r;
      group.units = plan_.reduce_scatter_buckets[r];
      // SimpleFSDP issues RS_i right after the backward compute that produced it, before
      // the next all-gather; ties go to reduce-scatters first. With reduce_after_backward
      // every one waits for the last backward compute, unit 0's.
      group.trigger_item = backward_item_[plan_.reduce_after_backward ? 0 : group.units.first];
      group.order = k;
    }
    // Issue order: by trigger, then by `order`. The orders are distinct and, within each
    // kind of group, increase with the group's index, with reduce-scatters (order k) before
    // forward gathers (1e6 + b) before backward gathers (2e6 + j). So a stable counting
    // sort by trigger over the groups taken in that kind order is the sorted order.
    std::vector<int>& counts = scratch_.trigger_counts;
    counts.assign(items_.size() + 2, 0);  // trigger -1 .. items - 1, shifted by one
    for (int i = 0; i < group_count_; ++i) ++counts[groups_[i].trigger_item + 2];
    for (std::size_t t = 1; t < counts.size(); ++t) counts[t] += counts[t - 1];
    issue_order_.resize(static_cast<std::size_t>(group_count_));
    const int first_reduce = group_count_ - reduce_count;
    const auto place = [&](int begin, int end) {
      for (int i = begin; i < end; ++i) issue_order_[counts[groups_[i].trigger_item + 1]++] = i;
    };
    place(first_reduce, group_count_);  // reduce-scatters
    place(0, first_reduce);             // forward gathers, then backward gathers
  }

  // --- costs ---------------------------------------------------------------------------

  double count(const CostEstimate& estimate) {
    ++program_.cost_queries;
    if (!estimate.measured) ++program_.cost_fallbacks;
    return estimate.seconds;
  }

  double collective_s(CollectiveKind kind, std::int64_t bytes, const CommGroup& group) {
    const CollectiveKey key{kind, bytes, group};
    auto it = scratch_.collective_costs.find(key);
    if (it == scratch_.collective_costs.end()) {
      it = scratch_.collective_costs.emplace(key, costs_.collective(kind, bytes, group)).first;
    }
    return count(it->second);
  }

  double copy_s(std::int64_t bytes) {
    auto it = scratch_.copy_costs.find(bytes);
    if (it == scratch_.copy_costs.end()) {
      it = scratch_.copy_costs.emplace(bytes, costs_.copy(bytes)).first;
    }
    return count(it->second);
  }

  // --- emission ------------------------------------------------------------------------

  // A task in reused storage (Program::tasks keeps the previous program's tasks until
  // run() trims it), reset to its defaults. Names are set by the caller when detail_.
  Task& add_task(int stream, TaskKind kind) {
    const int id = task_count_++;
    if (id == static_cast<int>(program_.tasks.size())) program_.tasks.emplace_back();
    Task& task = program_.tasks[id];
    task.id = id;
    task.stream = stream;
    task.kind = kind;
    task.name.clear();
    task.unit = -1;
    task.bucket = -1;
    task.bytes = 0;
    task.group = CommGroup{};
    task.duration_s = 0;
    task.deps.clear();
    task.memory.clear();
    return task;
  }

  std::string range_name(const UnitRange& range) const {
    if (range.first == range.last) return workload_.units[range.first].name;
    return workload_.units[range.first].name + ".." + workload_.units[range.last].name;
  }

  static void alloc(Task& task, MemoryCategory category, std::int64_t bytes, bool at_end) {
    if (bytes != 0) task.memory.push_back({category, bytes, at_end});
  }

  // A layout in reused storage, without slots.
  BucketLayout& new_layout(CollectiveKind kind, const UnitRange& units) {
    const int id = bucket_count_++;
    if (id == static_cast<int>(program_.buckets.size())) program_.buckets.emplace_back();
    BucketLayout& layout = program_.buckets[id];
    layout.kind = kind;
    layout.units = units;
    layout.slots.clear();
    layout.shard_elements = 0;
    return layout;
  }

  // Layout of one collective over all parameters of `members` (units of `units`), from
  // the unit totals: what add_layout gives for the same parameters, without slots.
  int add_unit_layout(CollectiveKind kind, const UnitRange& units, DType dtype,
                      const std::vector<int>& members) {
    BucketLayout& layout = new_layout(kind, units);
    int common = -2;  // as UnitTotals: -2 none yet, -1 mixed
    for (int u : members) {
      const int unit_dtype =
          kind == CollectiveKind::kAllGather ? totals_.gather_dtype[u] : totals_.reduce_dtype[u];
      common = common == -2 || common == unit_dtype ? unit_dtype : -1;
      layout.shard_elements += totals_.shard_numel[u];
    }
    layout.dtype = common >= 0 ? static_cast<DType>(common) : dtype;
    return bucket_count_ - 1;
  }

  // Layout of one collective's flat buffer over `params` of `units`.
  int add_layout(CollectiveKind kind, const UnitRange& units, DType dtype,
                 const std::vector<std::pair<int, const Param*>>& params) {
    const int id = bucket_count_;
    BucketLayout& layout = new_layout(kind, units);
    // The buffer's dtype: the parameters' wire dtype when they agree, else `dtype` (a
    // float8 bucket that also holds bf16 norms; the byte counts are per parameter).
    layout.dtype = dtype;
    if (!params.empty()) {
      const auto wire = [&](const Param& param) {
        return kind == CollectiveKind::kAllGather ? param.gather_dtype : param.reduce_dtype;
      };
      const DType first = wire(*params.front().second);
      bool uniform = true;
      for (const auto& entry : params) uniform = uniform && wire(*entry.second) == first;
      if (uniform) layout.dtype = first;
    }
    for (const auto& [unit, param] : params) {
      if (detail_) {
        BufferSlot slot;
        slot.param = param->name;
        slot.unit = unit;
        slot.offset = layout.shard_elements;
        slot.shard_numel = param->shard_numel;
        slot.numel = param->numel;
        layout.slots.push_back(std::move(slot));
      }
      layout.shard_elements += param->shard_numel;
    }
    return id;
  }

  // The collectives of a group: one per parameter (simplefsdp-none) or one per bucket.
  // Fills scratch_.collectives; returns how many of its entries are in use.
  int collective_params(const std::vector<int>& units) {
    auto& out = scratch_.collectives;
    int used = 0;
    for (int u : units) {
      for (const Param& param : workload_.units[u].params) {
        if (plan_.one_collective_per_parameter || used == 0) {
          if (used == static_cast<int>(out.size())) out.emplace_back();
          out[used++].clear();
        }
        out[used - 1].push_back({u, &param});
      }
    }
    return used;
  }

  void emit_gather(CollectiveGroup& group) {
    const std::string prefix = detail_ ? fmt::format("{} b{} {}", group.backward ? "bwd" : "fwd",
                                                     group.plan_bucket, range_name(group.units))
                                       : std::string();
    // Without slots a bucket of whole units needs only its units' totals.
    const bool whole_units = !detail_ && !plan_.one_collective_per_parameter;
    const int collective_count = whole_units ? 1 : collective_params(group.gathered_units);
    const int trigger_task = group.trigger_item >= 0 ? item_task_[group.trigger_item] : -1;
    for (int c = 0; c < collective_count; ++c) {
      int layout_id = 0;
      // Bytes on the wire in each parameter's gather dtype (fp8 for float8 linears).
      std::int64_t shard_bytes = 0;
      if (whole_units) {
        layout_id = add_unit_layout(CollectiveKind::kAllGather, group.units,
                                    workload_.job.param_dtype, group.gathered_units);
        for (int u : group.gathered_units) shard_bytes += totals_.gather_shard_bytes[u];
      } else {
        const auto& params = scratch_.collectives[c];
        layout_id =
            add_layout(CollectiveKind::kAllGather, group.units, workload_.job.param_dtype, params);
        for (const auto& [unit, param] : params) {
          shard_bytes += param->shard_numel * bytes_per_element(param->gather_dtype);
        }
      }
      const std::int64_t gathered_bytes = shard_bytes * ranks_;
      std::string label;
      if (detail_) {
        label = plan_.one_collective_per_parameter
                    ? fmt::format("{} {}", prefix, program_.buckets[layout_id].slots[0].param)
                    : prefix;
      }
      int first_task = -1;
      if (plan_.copy_in_out) {
        // FSDP2's foreach_all_gather: the copy-in allocates the all-gather output and
        // copies (casting) this rank's shards into its slice.
        Task& copy_in = add_task(gather_stream_, TaskKind::kCopyIn);
        if (detail_) copy_in.name = "copy-in AG " + label;
        copy_in.bucket = layout_id;
        copy_in.bytes = shard_bytes;
        copy_in.duration_s = copy_s(shard_bytes);
        alloc(copy_in, MemoryCategory::kGatheredParams, gathered_bytes, false);
        first_task = copy_in.id;
      }
      Task& gather = add_task(gather_stream_, TaskKind::kAllGather);
      if (detail_) gather.name = "AG " + label;
      gather.bucket = layout_id;
      gather.bytes = gathered_bytes;
      gather.group = group_;
      gather.duration_s = collective_s(CollectiveKind::kAllGather, gathered_bytes, group_);
      // Without copies the all-gather writes the unsharded parameter directly.
      if (!plan_.copy_in_out) alloc(gather, MemoryCategory::kGatheredParams, gathered_bytes, false);
      if (first_task < 0) first_task = gather.id;
      if (trigger_task >= 0) program_.tasks[first_task].deps.push_back(trigger_task);
      group.layout_ids.push_back(layout_id);
      group.alloc_bytes.push_back(gathered_bytes);
      group.last_comm_task = gather.id;
    }
  }

  void emit_reduce(CollectiveGroup& group) {
    const std::string prefix =
        detail_ ? fmt::format("b{} {}", group.plan_bucket, range_name(group.units)) : std::string();
    std::vector<int>& units = scratch_.units;
    units.clear();
    for (int u = group.units.first; u <= group.units.last; ++u) units.push_back(u);
    const bool whole_units = !detail_ && !plan_.one_collective_per_parameter;
    const int collective_count = whole_units ? 1 : collective_params(units);
    const int trigger_task = item_task_[group.trigger_item];
    for (int c = 0; c < collective_count; ++c) {
      int layout_id = 0;
      std::int64_t shard_bytes = 0;
      if (whole_units) {
        layout_id = add_unit_layout(CollectiveKind::kReduceScatter, group.units,
                                    workload_.job.reduce_dtype, units);
        for (int u : units) shard_bytes += totals_.reduce_shard_bytes[u];
      } else {
        const auto& params = scratch_.collectives[c];
        layout_id = add_layout(CollectiveKind::kReduceScatter, group.units,
                               workload_.job.reduce_dtype, params);
        for (const auto& [unit, param] : params) {
          shard_bytes += param->shard_numel * bytes_per_element(param->reduce_dtype);
        }
      }
      const std::int64_t full_bytes = shard_bytes * ranks_;
      std::string label;
      if (detail_) {
        label = plan_.one_collective_per_parameter
                    ? fmt::format("{} {}", prefix, program_.buckets[layout_id].slots[0].param)
                    : prefix;
      }
      // The unsharded gradients (param dtype) this collective consumes, freed once they
      // are copied into the reduce-scatter input (or reduced, without copies).
      std::vector<MemoryEvent>& free_grads = scratch_.free_grads;
      free_grads.clear();
      if (plan_.one_collective_per_parameter) {
        const Param& param = *scratch_.collectives[c][0].second;
        free_grads.push_back(
            {MemoryCategory::kGradients, -param.shard_numel * ranks_ * param_bytes_, true});
      } else {
        for (int u : units) {
          free_grads.push_back({MemoryCategory::kGradients, -unsharded_grad_bytes(u), true});
        }
      }
      int first_task = -1;
      if (plan_.copy_in_out) {
        // FSDP2's foreach_reduce: gradients are cast to reduce_dtype into one flat input.
        Task& copy_in = add_task(reduce_stream_, TaskKind::kCopyIn);
        if (detail_) copy_in.name = "copy-in RS " + label;
        copy_in.bucket = layout_id;
        copy_in.bytes = full_bytes;
        copy_in.duration_s = copy_s(full_bytes);
        alloc(copy_in, MemoryCategory::kGradients, full_bytes, false);
        for (const MemoryEvent& event : free_grads) {
          if (event.bytes != 0) copy_in.memory.push_back(event);
        }
        first_task = copy_in.id;
      }
      Task& reduce = add_task(reduce_stream_, TaskKind::kReduceScatter);
      if (detail_) reduce.name = "RS " + label;
      reduce.bucket = layout_id;
      reduce.bytes = full_bytes;
      reduce.group = group_;
      reduce.duration_s = collective_s(CollectiveKind::kReduceScatter, full_bytes, group_);
      // The output shard lives until it is accumulated into the sharded gradient.
      alloc(reduce, MemoryCategory::kGradients, shard_bytes, false);
      if (plan_.copy_in_out) {
        alloc(reduce, MemoryCategory::kGradients, -full_bytes, true);
      } else {
        for (const MemoryEvent& event : free_grads) {
          if (event.bytes != 0) reduce.memory.push_back(event);
        }
      }
      if (first_task < 0) first_task = reduce.id;
      int last = reduce.id;
      if (workload_.job.dp_replicate > 1) {
        // HSDP: the reduce-scatter output is all-reduced across replicas in place before it
        // is accumulated into the sharded gradient (FSDP2 foreach_reduce: reduce-scatter,
        // then all-reduce of its output, then the copy-out / accumulation).
        const CommGroup replicas = replicate_group(workload_.job);
        Task& all_reduce = add_task(reduce_stream_, TaskKind::kAllReduce);
        if (detail_) all_reduce.name = "AR " + label;
        all_reduce.bucket = layout_id;
        all_reduce.bytes = shard_bytes;
        all_reduce.group = replicas;
        all_reduce.duration_s = collective_s(CollectiveKind::kAllReduce, shard_bytes, replicas);
        last = all_reduce.id;
      }
      if (plan_.copy_in_out) {
        Task& copy_out = add_task(reduce_stream_, TaskKind::kCopyOut);
        if (detail_) copy_out.name = "copy-out RS " + label;
        copy_out.bucket = layout_id;
        copy_out.bytes = shard_bytes;
        copy_out.duration_s = copy_s(shard_bytes);
        alloc(copy_out, MemoryCategory::kGradients, -shard_bytes, true);
        last = copy_out.id;
      } else {
        alloc(program_.tasks[last], MemoryCategory::kGradients, -shard_bytes, true);
      }
      program_.tasks[first_task].deps.push_back(trigger_task);
      group.last_comm_task = last;
      reduce_ends_.push_back(last);
    }
  }

  std::int64_t unsharded_grad_bytes(int unit) const {
    return totals_.shard_numel[unit] * ranks_ * param_bytes_;
  }

  // The unsharded gradients of `unit`'s parameters (param dtype), one block per parameter
  // where each has its own reduce-scatter, as its copy-in or reduce-scatter frees them.
  void alloc_unsharded_gradients(Task& task, int unit) {
    if (plan_.one_collective_per_parameter) {
      for (const Param& param : workload_.units[static_cast<std::size_t>(unit)].params) {
        alloc(task, MemoryCategory::kGradients, param.shard_numel * ranks_ * param_bytes_, false);
      }
    } else {
      alloc(task, MemoryCategory::kGradients, unsharded_grad_bytes(unit), false);
    }
  }

  // Frees of a gather group's buffers, one per collective (mirrors the allocations so the
  // reserved-memory estimate rounds them alike).
  void free_gathered(Task& task, const CollectiveGroup& group) {
    for (std::int64_t bytes : group.alloc_bytes) {
      alloc(task, MemoryCategory::kGatheredParams, -bytes, true);
    }
  }

  void emit_compute(int item_index) {
    const ComputeItem& item = items_[item_index];
    const int compute = 0;
    if (item.kind == TaskKind::kCopyOut) {
      CollectiveGroup& group = groups_[item.collective_group];
      // FSDP2's foreach_all_gather_copy_out runs in wait_for_unshard on the compute stream:
      // it allocates the unsharded parameters and frees the all-gather output.
      std::int64_t total = 0;
      for (std::int64_t bytes : group.alloc_bytes) total += bytes;
      Task& copy_out = add_task(compute, TaskKind::kCopyOut);
      if (detail_) {
        copy_out.name = fmt::format("copy-out AG {} b{} {}", group.backward ? "bwd" : "fwd",
                                    group.plan_bucket, range_name(group.units));
      }
      copy_out.bucket = group.layout_ids.front();
      copy_out.bytes = total;
      copy_out.duration_s = copy_s(total);
      copy_out.deps.push_back(group.last_comm_task);
      for (std::int64_t bytes : group.alloc_bytes) {
        alloc(copy_out, MemoryCategory::kGatheredParams, bytes, false);
      }
      free_gathered(copy_out, group);
      item_task_[item_index] = copy_out.id;
      return;
    }
    if (item.kind == TaskKind::kOptimizer) {
      Task& optimizer = add_task(compute, TaskKind::kOptimizer);
      if (detail_) optimizer.name = "optimizer";
      optimizer.duration_s = compute_.optimizer_s;
      optimizer.deps = reduce_ends_;
      item_task_[item_index] = optimizer.id;
      return;
    }
    const int u = item.unit;
    const Unit& unit = workload_.units[u];
    Task& task = add_task(compute, item.kind);
    if (detail_) {
      const char* verb = item.kind == TaskKind::kForward     ? "fwd"
                         : item.kind == TaskKind::kRecompute ? "recompute"
                                                             : "bwd";
      task.name = fmt::format("{} {}", verb, unit.name);
    }
    task.unit = u;
    if (item.kind == TaskKind::kForward) {
      task.duration_s = compute_.forward_s[u];
      alloc(task, MemoryCategory::kWorkspace, unit.workspace_bytes, false);
      alloc(task, MemoryCategory::kWorkspace, -unit.workspace_bytes, true);
      alloc(task, MemoryCategory::kActivations, unit.saved_activation_bytes, true);
      const int b = forward_bucket_of_[u];
      const CollectiveGroup& gather = groups_[forward_gather_[b]];
      if (!plan_.copy_in_out && u == plan_.forward_buckets[b].first) {
        task.deps.push_back(gather.last_comm_task);
      }
      // Reshard after forward: the bucket's parameters go when its last unit is done.
      if (!kept_[u] && u == plan_.forward_buckets[b].last) {
        free_gathered(task, gather);
      }
    } else if (item.kind == TaskKind::kRecompute) {
      task.duration_s = compute_.recompute_s[u];
      alloc(task, MemoryCategory::kActivations, unit.recompute_activation_bytes, false);
      add_backward_gather_dep(task, u);
    } else {
      task.duration_s = compute_.backward_s[u];
      alloc(task, MemoryCategory::kWorkspace, unit.workspace_bytes, false);
      alloc(task, MemoryCategory::kWorkspace, -unit.workspace_bytes, true);
      // Gradients of the unsharded parameters, in param dtype, until the reduce-scatter
      // bucket takes them: this unit's, unless a later unit's backward made them (tied
      // embeddings), and those of the earlier units whose parameters it reads.
      if (!gradients_made_by_reader_[u]) alloc_unsharded_gradients(task, u);
      for (int shared : unit.shared_param_units) {
        if (shared < u) alloc_unsharded_gradients(task, shared);
      }
      alloc(task, MemoryCategory::kActivations, -unit.saved_activation_bytes, true);
      if (!unit.recompute_ops.empty()) {
        alloc(task, MemoryCategory::kActivations, -unit.recompute_activation_bytes, true);
      }
      if (unit.recompute_ops.empty()) add_backward_gather_dep(task, u);
      const int b = forward_bucket_of_[u];
      // Parameters kept since forward go after the backward of the bucket's lowest unit,
      // the last of the bucket to run.
      if (kept_[u] && u == plan_.forward_buckets[b].first) {
        free_gathered(task, groups_[forward_gather_[b]]);
      }
      const int j = backward_position_of_[u];
      const int gather = backward_gather_[j];
      const UnitRange bucket = plan_.backward_buckets[plan_.backward_buckets.size() - 1 - j];
      if (gather >= 0 && u == bucket.first) free_gathered(task, groups_[gather]);
    }
    item_task_[item_index] = task.id;
  }

  // Without copies the first compute of a backward bucket waits for its all-gathers.
  void add_backward_gather_dep(Task& task, int u) {
    if (plan_.copy_in_out) return;
    const int j = backward_position_of_[u];
    const int gather = backward_gather_[j];
    if (gather < 0) return;
    const UnitRange bucket = plan_.backward_buckets[plan_.backward_buckets.size() - 1 - j];
    if (u == bucket.last) task.deps.push_back(groups_[gather].last_comm_task);
  }

  void emit() {
    item_task_.assign(items_.size(), -1);
    std::size_t next_group = 0;
    auto issue_groups_triggered_by = [&](int trigger) {
      while (next_group < issue_order_.size() &&
             groups_[issue_order_[next_group]].trigger_item == trigger) {
        const int index = issue_order_[next_group++];
        if (groups_[index].gather) {
          emit_gather(groups_[index]);
        } else {
          emit_reduce(groups_[index]);
          // The compute stream waits for reduce-scatters, which bounds the unsharded
          // gradients alive. Without reordering the wait sits right after each one. With
          // it, the wait of RS_k is deferred until RS_{k+1} is issued (SimpleFSDP), which
          // is also FSDP2's rule: post_backward makes the current stream wait for the
          // previous reduce-scatter's event before issuing the next.
          if (!plan_.reorder) {
            pending_reduce_waits_.push_back(groups_[index].last_comm_task);
          } else if (previous_reduce_end_ >= 0) {
            pending_reduce_waits_.push_back(previous_reduce_end_);
          }
          previous_reduce_end_ = groups_[index].last_comm_task;
        }
      }
    };
    issue_groups_triggered_by(-1);
    for (int i = 0; i < static_cast<int>(items_.size()); ++i) {
      emit_compute(i);
      if (!pending_reduce_waits_.empty()) {
        Task& task = program_.tasks[item_task_[i]];
        for (int dep : pending_reduce_waits_) {
          if (std::find(task.deps.begin(), task.deps.end(), dep) == task.deps.end()) {
            task.deps.push_back(dep);
          }
        }
        pending_reduce_waits_.clear();
      }
      issue_groups_triggered_by(i);
    }
    FSDPTUNE_CHECK(next_group == issue_order_.size(), "a collective group was never issued");
  }

  const Workload& workload_;
  const Plan& plan_;
  const CostModel& costs_;
  const ComputeCosts& compute_;
  const UnitTotals& totals_;
  LoweringScratch& scratch_;
  Program& program_;
  const bool detail_;
  int unit_count_ = 0;
  std::int64_t ranks_ = 1;
  std::int64_t param_bytes_ = 2;
  CommGroup group_;
  int gather_stream_ = 1;
  int reduce_stream_ = 2;
  int task_count_ = 0;
  int bucket_count_ = 0;
  int group_count_ = 0;

  std::vector<int>& forward_bucket_of_;
  std::vector<int>& backward_position_of_;
  std::vector<bool>& kept_;
  std::vector<bool>& gradients_made_by_reader_;
  std::vector<ComputeItem>& items_;
  std::vector<int>&forward_item_, &backward_item_;
  std::vector<int>&forward_group_end_, &backward_group_end_;
  std::vector<int>&forward_gather_, &backward_gather_;  // index in groups_, -1 = none
  std::vector<CollectiveGroup>& groups_;                // the first group_count_ in use
  std::vector<int>& issue_order_;
  std::vector<int>& item_task_;
  std::vector<int>& reduce_ends_;
  std::vector<int>& pending_reduce_waits_;
  int previous_reduce_end_ = -1;
};

void check_lowerable(const Workload& workload, const ComputeCosts& compute) {
  FSDPTUNE_CHECK(!workload.units.empty(), "lower() needs at least one unit");
  for (const Unit& unit : workload.units) {
    FSDPTUNE_CHECK(!unit.params.empty(), "FSDP unit " + unit.name + " has no parameters");
  }
  FSDPTUNE_CHECK(compute.forward_s.size() == workload.units.size(),
                 "compute costs of another workload");
}

}  // namespace

ComputeCosts compute_costs(const Workload& workload, const CostModel& costs) {
  ComputeCosts out;
  auto sum = [&](const std::vector<Op>& ops) {
    // Compute ops and the TP collectives inside the unit's op list, in sequence, with the
    // async-TP overlap where the job asks for it (tp_ops_seconds).
    Program counts;
    const double seconds = tp_ops_seconds(ops, workload.job.async_tp, costs, &counts);
    out.queries += counts.cost_queries;
    out.fallbacks += counts.cost_fallbacks;
    return seconds;
  };
  for (const Unit& unit : workload.units) {
    out.forward_s.push_back(sum(unit.forward_ops));
    out.recompute_s.push_back(sum(unit.recompute_ops));
    out.backward_s.push_back(sum(unit.backward_ops));
    out.accumulate_s.push_back(
        workload.job.microbatches > 1 ? sum({gradient_accumulation_op(unit, workload.job)}) : 0.0);
  }
  out.optimizer_s = sum(workload.optimizer_ops);
  return out;
}

Program lower(const Workload& workload, const Plan& plan, const CostModel& costs) {
  return lower(workload, plan, costs, compute_costs(workload, costs));
}

Program lower(const Workload& workload, const Plan& plan, const CostModel& costs,
              const ComputeCosts& compute) {
  check_lowerable(workload, compute);
  LoweringScratch scratch;
  Program program;
  const UnitTotals totals = unit_totals(workload);
  Lowering(workload, plan, costs, compute, totals, scratch, program, /*detail=*/true).run();
  return program;
}

struct Lowerer::State {
  State(const Workload& workload_in, const CostModel& costs_in)
      : workload(workload_in),
        costs(costs_in),
        compute(compute_costs(workload_in, costs_in)),
        totals(unit_totals(workload_in)) {}
  const Workload& workload;
  const CostModel& costs;
  ComputeCosts compute;
  UnitTotals totals;
  LoweringScratch scratch;
};

Lowerer::Lowerer(const Workload& workload, const CostModel& costs)
    : state_(std::make_unique<State>(workload, costs)) {
  check_lowerable(workload, state_->compute);
}
Lowerer::~Lowerer() = default;
Lowerer::Lowerer(Lowerer&&) noexcept = default;
Lowerer& Lowerer::operator=(Lowerer&&) noexcept = default;

const ComputeCosts& Lowerer::compute() const { return state_->compute; }

Program Lowerer::lower(const Plan& plan) {
  Program program;
  Lowering(state_->workload, plan, state_->costs, state_->compute, state_->totals, state_->scratch,
           program,
           /*detail=*/true)
      .run();
  return program;
}

void Lowerer::lower_for_simulation(const Plan& plan, Program& program) {
  Lowering(state_->workload, plan, state_->costs, state_->compute, state_->totals, state_->scratch,
           program,
           /*detail=*/false)
      .run();
}

}  // namespace fsdptune
