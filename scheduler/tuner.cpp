// The schedule autotuner: structured seeds from a dynamic program over bucket boundaries,
// then simulator-in-the-loop local search (docs/tuner.md).
#include "fsdptune/tuner.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <system_error>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "fsdptune/error.hpp"
#include "fsdptune/memory_bound.hpp"
#include "fsdptune/plans.hpp"
#include "fsdptune/program.hpp"

namespace fsdptune {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();
// The largest bucket, in units, of the moves that space a partition evenly (Move::kRespace).
constexpr int kMaxRespaceUnits = 16;

// ---------------------------------------------------------------------------------------
// Plans as cut vectors. A partition of n units is the set of "cuts": cut[i] says a bucket
// ends after unit i (i in 0..n-2). Three partitions (forward all-gather, backward
// all-gather, reduce-scatter) make the bucketing part of a plan.

enum Dimension { kForwardDim = 0, kBackwardDim = 1, kReduceScatterDim = 2 };

std::vector<UnitRange>& buckets_of(Plan& plan, int dim) {
  if (dim == kForwardDim) return plan.forward_buckets;
  if (dim == kBackwardDim) return plan.backward_buckets;
  return plan.reduce_scatter_buckets;
}
const std::vector<UnitRange>& buckets_of(const Plan& plan, int dim) {
  return buckets_of(const_cast<Plan&>(plan), dim);
}

std::vector<bool> cuts_of(const std::vector<UnitRange>& buckets, int unit_count) {
  std::vector<bool> cuts(static_cast<std::size_t>(std::max(unit_count - 1, 0)), false);
  for (const UnitRange& bucket : buckets) {
    if (bucket.last < unit_count - 1) cuts[bucket.last] = true;
  }
  return cuts;
}

std::vector<UnitRange> ranges_of(const std::vector<bool>& cuts) {
  std::vector<UnitRange> ranges;
  int first = 0;
  const int unit_count = static_cast<int>(cuts.size()) + 1;
  for (int i = 0; i < unit_count - 1; ++i) {
    if (cuts[i]) {
      ranges.push_back({first, i});
      first = i + 1;
    }
  }
  ranges.push_back({first, unit_count - 1});
  return ranges;
}

// Replaces one partition of `plan`. New forward buckets take the reshard flag of the old
// bucket that held most of their units (ties: the first): a split gives both halves the
// old flag, a merge keeps the larger part's, and a boundary shifted by a unit leaves that
// unit the flag of the bucket it joins (found by QA: with the first unit's flag, the
// boundary between resharded and kept-gathered buckets could move later, never earlier).
Plan with_partition(const Plan& plan, int dim, const std::vector<bool>& cuts) {
  Plan out = plan;
  std::vector<UnitRange> ranges = ranges_of(cuts);
  if (dim == kForwardDim) {
    std::vector<bool> reshard;
    reshard.reserve(ranges.size());
    // Both lists are in unit order: one pass over the old buckets each range overlaps
    // (O(n + k), this runs for every neighbour generated).
    std::size_t b = 0;
    const std::size_t old_count = plan.forward_buckets.size();
    for (const UnitRange& range : ranges) {
      while (b < old_count && plan.forward_buckets[b].last < range.first) ++b;
      bool flag = true;
      int most = 0;
      for (std::size_t c = b; c < old_count && plan.forward_buckets[c].first <= range.last; ++c) {
        const int overlap = std::min(range.last, plan.forward_buckets[c].last) -
                            std::max(range.first, plan.forward_buckets[c].first) + 1;
        if (overlap > most) {
          most = overlap;
          flag = plan.reshard_after_forward[c];
        }
      }
      reshard.push_back(flag);
    }
    out.reshard_after_forward = std::move(reshard);
  }
  buckets_of(out, dim) = std::move(ranges);
  return out;
}

// A compact identity of a plan's knobs, to simulate each plan once.
std::string plan_key(const Plan& plan, int unit_count) {
  std::string key;
  key.reserve(static_cast<std::size_t>(4 * unit_count + 16));
  for (int dim = 0; dim < 3; ++dim) {
    for (const bool cut : cuts_of(buckets_of(plan, dim), unit_count)) key += cut ? '1' : '0';
    key += '|';
  }
  for (const bool flag : plan.reshard_after_forward) key += flag ? 'r' : 'k';
  key += fmt::format("|{}|{}|{}|{}{}{}{}", plan.forward_prefetch, plan.backward_prefetch,
                     static_cast<int>(plan.stream_layout), plan.reorder ? 1 : 0,
                     plan.copy_in_out ? 1 : 0, plan.one_collective_per_parameter ? 1 : 0,
                     plan.reduce_after_backward ? 1 : 0);
  return key;
}

// ---------------------------------------------------------------------------------------
// Evaluation.

struct Evaluation {
  Plan plan;
  std::string label;
  std::int64_t index = 0;  // order of generation: labels and tie-breaks
  bool aborted = false;
  bool fits = false;
  double step_time_s = kInfinity;
  // What the limit is compared with: the reserved peak (max when the simulation stopped
  // early over the limit, so that such a plan ranks last).
  std::int64_t peak_bytes = std::numeric_limits<std::int64_t>::max();
  // With fit_at_any_timing, of a plan that fits at the predicted timing: its
  // any_timing_reserved_bytes (0 otherwise).
  std::int64_t any_timing_reserved_bytes = 0;
  SimResult result;  // scalars only (no timings, no timeline)
  // A start of a DP seed with deeper prefetch, or a variant of one (its own slots among
  // the starts: TunerOptions::deep_prefetch_starts).
  bool deep_prefetch = false;
  // With fit_at_any_timing, of a plan that fits at the predicted timing whose bound is not
  // computed yet (Evaluator::evaluate's `defer_any_timing`): `fits` and `peak_bytes` are
  // then the predicted ones, as good as the plan can be, and Evaluator::settle makes them
  // exact.
  bool any_timing_pending = false;
};

// Strictly better: a plan that fits beats one that does not; among plans that fit the
// shorter step wins (then the smaller peak); among plans that do not, the smaller peak.
bool better(const Evaluation& a, const Evaluation& b) {
  if (a.fits != b.fits) return a.fits;
  if (a.fits) {
    if (a.step_time_s != b.step_time_s) return a.step_time_s < b.step_time_s;
    return a.peak_bytes < b.peak_bytes;
  }
  if (a.aborted != b.aborted) return !a.aborted;
  return a.peak_bytes < b.peak_bytes;
}

class Evaluator {
 public:
  Evaluator(const Workload& workload, const CostModel& costs, std::int64_t memory_limit_bytes,
            int threads, bool fit_at_any_timing)
      : memory_limit_bytes_(memory_limit_bytes),
        threads_(std::max(threads, 1)),
        fit_at_any_timing_(fit_at_any_timing) {
    // One lowerer, Program and simulation workspace per worker thread, reused for every
    // plan it evaluates (plan-independent costs once, memoized collective costs, no
    // reallocation).
    workers_.reserve(static_cast<std::size_t>(threads_));
    for (int w = 0; w < threads_; ++w) {
      workers_.push_back({Lowerer(workload, costs), Program{}, SimWorkspace{}});
    }
  }

  // Worker 0's lowerer (the calling thread's), for full lowerings between batches.
  Lowerer& lowerer() { return workers_.front().lowerer; }

  // Computes a pending bound at any timing (any_timing_pending) on the calling thread,
  // with worker 0's lowerer: `evaluation` as if evaluated without deferring it. Between
  // batches only.
  void settle(Evaluation& evaluation) {
    if (!evaluation.any_timing_pending) return;
    Worker& worker = workers_.front();
    worker.lowerer.lower_for_simulation(evaluation.plan, worker.program);
    settle_with(evaluation, worker.program);
  }

  // Simulates every plan of `batch` (in parallel when threads > 1); results in batch order.
  // `abort_over_limit` stops a simulation as soon as the reserved estimate passes the
  // limit (so such a plan cannot fit).
  // `defer_any_timing` leaves the bound at any timing of the plans that fit at the
  // predicted timing to settle() (any_timing_pending).
  std::vector<Evaluation> evaluate(std::vector<Evaluation> batch, bool abort_over_limit,
                                   bool defer_any_timing = false) {
    SimOptions options;
    options.record_timings = false;
    options.record_timeline = false;
    options.abort_above_bytes = abort_over_limit ? memory_limit_bytes_ : 0;
    const auto run_one = [&](Evaluation& evaluation, Worker& worker) {
      worker.lowerer.lower_for_simulation(evaluation.plan, worker.program);
      evaluation.result = simulate(worker.program, options, worker.simulation);
      evaluation.aborted = evaluation.result.aborted;
      if (evaluation.aborted) {
        evaluation.fits = false;
        evaluation.step_time_s = kInfinity;
        evaluation.peak_bytes = std::numeric_limits<std::int64_t>::max();
      } else {
        evaluation.fits = plan_fits(evaluation.result, memory_limit_bytes_);
        evaluation.step_time_s = evaluation.result.step_time_s;
        evaluation.peak_bytes = evaluation.result.peak_reserved_bytes;
        if (fit_at_any_timing_ && evaluation.fits) {
          // Only a plan that fits at the predicted timing pays for the bound (a maximum
          // flow, a few simulations' time: docs/performance.md), at least its predicted
          // peak; the others keep their predicted peak, a lower bound of it, to rank by.
          if (defer_any_timing) {
            evaluation.any_timing_pending = true;
          } else {
            settle_with(evaluation, worker.program);
          }
        }
      }
    };
    const int workers = std::min<int>(threads_, static_cast<int>(batch.size()));
    if (workers <= 1) {
      for (Evaluation& evaluation : batch) run_one(evaluation, workers_.front());
      return batch;
    }
    // Each worker takes the next index; results land in their own slot, so the outcome
    // does not depend on which thread ran what.
    // The calling thread is worker 0; workers - 1 helpers join it for the batch.
    std::atomic<std::size_t> next{0};
    const auto work = [&](int w) {
      for (std::size_t i = next.fetch_add(1); i < batch.size(); i = next.fetch_add(1)) {
        run_one(batch[i], workers_[static_cast<std::size_t>(w)]);
      }
    };
    run_workers(workers, work);
    return batch;
  }

 private:
  struct Worker {
    Lowerer lowerer;
    Program program;
    SimWorkspace simulation;
  };
  // The bound at any timing of `evaluation`, a plan that fits at the predicted timing,
  // lowered into `program`: its peak, and whether it fits by it.
  void settle_with(Evaluation& evaluation, const Program& program) const {
    SimOptions options;  // the bound reads the allocator's settings only
    evaluation.any_timing_reserved_bytes = any_timing_reserved_bytes(program, options);
    evaluation.peak_bytes = evaluation.any_timing_reserved_bytes;
    evaluation.fits = evaluation.peak_bytes <= memory_limit_bytes_;
    evaluation.any_timing_pending = false;
  }
  std::int64_t memory_limit_bytes_;
  int threads_;
  bool fit_at_any_timing_;
  std::vector<Worker> workers_;
};

// ---------------------------------------------------------------------------------------
// Per-unit costs for the dynamic program, read off the lowering of the one-unit-per-bucket
// plan (so they are exactly what the simulator is given).

struct UnitCosts : UnitCollectives {
  std::vector<double> forward_s;   // forward compute of each unit
  std::vector<double> backward_s;  // recompute + backward compute of each unit
  double compute_total_s = 0;      // every compute task, optimizer included
};

Plan one_unit_per_bucket_plan(int unit_count) {
  Plan plan;
  plan.name = "min-memory";
  for (int u = 0; u < unit_count; ++u) {
    plan.forward_buckets.push_back({u, u});
    plan.backward_buckets.push_back({u, u});
    plan.reduce_scatter_buckets.push_back({u, u});
  }
  plan.reshard_after_forward.assign(static_cast<std::size_t>(unit_count), true);
  plan.forward_prefetch = 1;
  plan.backward_prefetch = 1;
  plan.stream_layout = StreamLayout::kSeparate;
  return plan;
}

bool is_compute(TaskKind kind) {
  return kind == TaskKind::kForward || kind == TaskKind::kRecompute ||
         kind == TaskKind::kBackward || kind == TaskKind::kOptimizer;
}

// `lowerer`: of this workload and costs (its full lower() is fsdptune::lower()).
UnitCosts unit_costs(const Workload& workload, Lowerer& lowerer) {
  const int unit_count = static_cast<int>(workload.units.size());
  const Program program = lowerer.lower(one_unit_per_bucket_plan(unit_count));
  UnitCosts out;
  static_cast<UnitCollectives&>(out) = unit_collectives(program, unit_count);
  out.forward_s.assign(unit_count, 0.0);
  out.backward_s.assign(unit_count, 0.0);
  for (const Task& task : program.tasks) {
    if (is_compute(task.kind)) out.compute_total_s += task.duration_s;
    if (task.unit >= 0 && task.unit < unit_count) {
      if (task.kind == TaskKind::kForward) out.forward_s[task.unit] += task.duration_s;
      if (task.kind == TaskKind::kRecompute || task.kind == TaskKind::kBackward) {
        out.backward_s[task.unit] += task.duration_s;
      }
    }
  }
  return out;
}

// The lower bound of DESIGN.md "Searching" from the per-unit costs (step_time_lower_bound).
// Unit 0's gather opens the step and its reduce-scatter closes the backward: no compute
// can hide either (the first forward needs the gathered embedding; the optimizer needs
// every reduced gradient, and unit 0's backward is the last compute before it).
double lower_bound_of(const UnitCosts& unit, const CostModel& costs) {
  const BucketedCommBound gather =
      least_bucketed_comm(costs, CollectiveKind::kAllGather, unit.gather_bytes, unit.gather_group);
  const BucketedCommBound reduce = least_bucketed_comm(costs, CollectiveKind::kReduceScatter,
                                                       unit.reduce_bytes, unit.reduce_group);
  return std::max(unit.compute_total_s + gather.first_s + reduce.first_s,
                  gather.total_s + reduce.total_s);
}

// ---------------------------------------------------------------------------------------
// The dynamic program over bucket boundaries (DESIGN.md "Searching").
//
// Items 0..n-1 in the order they are computed, partitioned into contiguous groups
// g_1..g_k. With one group prefetched, the collective of g_{i+1} runs while g_i computes:
//   T = comm(g_1) + sum_i max(compute(g_i), comm(g_{i+1})) + tail(g_k),  comm(g_{k+1}) = 0,
// subject to memory(g_i) + memory(g_{i+1}) <= budget (both are gathered at once).
// State: the last group [s, e]; best[s][e] is the least time until it may start
// computing. O(n * w^2) transitions over precomputed range sums, where a group spans at
// most w items: w = n (exact) up to kDpWorkItems transitions, fewer on models of
// thousands of blocks, whose full O(n^3) program ran before the search whatever
// --time-budget said (2,000 blocks: 7.9 s, BM_TuneSeedsManyBlocks) on n x n tables of 8
// bytes a cell (65,536 blocks, the model format's limit: 34 GB a table).
constexpr double kDpWorkItems = 134217728.0;  // 2^27 transitions per partition

int dp_window(int n) {
  const double cube = static_cast<double>(n) * n * n;
  if (cube <= kDpWorkItems) return n;
  return std::clamp(static_cast<int>(std::sqrt(kDpWorkItems / n)), std::min(n, 16), n);
}

// A table of groups [s, e] with e - s < window: row s, column e - s.
using GroupTable = std::vector<std::vector<double>>;

struct GroupCosts {
  int window = 0;
  std::vector<double> compute_s;           // per item
  GroupTable comm_s;                       // [s][e - s]
  GroupTable tail_s;                       // [s][e - s]: exposed after the last group
  std::vector<std::int64_t> memory_bytes;  // per item
};

std::optional<std::vector<UnitRange>> partition_by_dp(const GroupCosts& costs,
                                                      std::int64_t pair_budget_bytes) {
  const int n = static_cast<int>(costs.compute_s.size());
  const int w = costs.window;
  std::vector<double> compute_prefix(n + 1, 0.0);
  std::vector<std::int64_t> memory_prefix(n + 1, 0);
  for (int i = 0; i < n; ++i) {
    compute_prefix[i + 1] = compute_prefix[i] + costs.compute_s[i];
    memory_prefix[i + 1] = memory_prefix[i] + costs.memory_bytes[i];
  }
  const auto compute = [&](int s, int e) { return compute_prefix[e + 1] - compute_prefix[s]; };
  const auto memory = [&](int s, int e) { return memory_prefix[e + 1] - memory_prefix[s]; };
  const auto span = [&](int s) { return std::min(w, n - s); };

  // best[s][e - s], parent[s][e - s]: the start of the group before [s, e].
  std::vector<std::vector<double>> best(n);
  std::vector<std::vector<int>> parent(n);
  for (int s = 0; s < n; ++s) {
    best[s].assign(span(s), kInfinity);
    parent[s].assign(span(s), -1);
  }
  for (int e = 0; e < span(0); ++e) {
    if (memory(0, e) <= pair_budget_bytes) best[0][e] = costs.comm_s[0][e];
  }
  for (int e = 0; e + 1 < n; ++e) {
    const int next = e + 1;
    for (int s = std::max(0, e - w + 1); s <= e; ++s) {
      const double time_so_far = best[s][e - s];
      if (time_so_far == kInfinity) continue;
      const double group_compute = compute(s, e);
      const std::int64_t group_memory = memory(s, e);
      for (int next_end = next; next_end < next + span(next); ++next_end) {
        if (group_memory + memory(next, next_end) > pair_budget_bytes) break;
        const double time =
            time_so_far + std::max(group_compute, costs.comm_s[next][next_end - next]);
        if (time < best[next][next_end - next]) {
          best[next][next_end - next] = time;
          parent[next][next_end - next] = s;
        }
      }
    }
  }
  double best_total = kInfinity;
  int best_start = -1;
  for (int s = std::max(0, n - w); s < n; ++s) {
    const double so_far = best[s][n - 1 - s];
    if (so_far == kInfinity) continue;
    const double total = so_far + compute(s, n - 1) + costs.tail_s[s][n - 1 - s];
    if (total < best_total) {
      best_total = total;
      best_start = s;
    }
  }
  if (best_start < 0) return std::nullopt;
  std::vector<UnitRange> groups;
  int s = best_start;
  int e = n - 1;
  while (s >= 0) {
    groups.push_back({s, e});
    const int previous_start = parent[s][e - s];
    e = s - 1;
    s = previous_start;
  }
  std::reverse(groups.begin(), groups.end());
  return groups;
}

// Collective time of a bucket of `bytes`: the collective and its copy-in/copy-out.
double bucket_comm_s(const CostModel& costs, CollectiveKind kind, std::int64_t bytes,
                     const CommGroup& group) {
  if (bytes <= 0) return 0.0;
  const std::int64_t shard_bytes = (bytes + group.ranks - 1) / group.ranks;
  return costs.collective(kind, bytes, group).seconds + costs.copy(bytes).seconds +
         costs.copy(shard_bytes).seconds;
}

// Seeds: the forward partition from the forward DP, the backward all-gather and
// reduce-scatter partitions from the backward DP, for a series of memory budgets.
std::vector<Plan> dp_seeds(const UnitCosts& unit, const CostModel& costs) {
  const int n = static_cast<int>(unit.forward_s.size());
  const int w = dp_window(n);
  // A group's cell of `cell(s, e)` for every group of at most w units.
  const auto table = [&](auto&& cell) {
    GroupTable out(n);
    for (int s = 0; s < n; ++s) {
      const int span = std::min(w, n - s);
      out[s].resize(span);
      for (int e = s; e < s + span; ++e) out[s][e - s] = cell(s, e);
    }
    return out;
  };
  // Bytes of units [s, e] from prefix sums.
  const auto prefix = [&](const std::vector<std::int64_t>& bytes) {
    std::vector<std::int64_t> sums(n + 1, 0);
    for (int i = 0; i < n; ++i) sums[i + 1] = sums[i] + bytes[i];
    return sums;
  };
  const std::vector<std::int64_t> gather_prefix = prefix(unit.gather_bytes);
  const std::vector<std::int64_t> reduce_prefix = prefix(unit.reduce_bytes);
  const auto gather_s = table([&](int s, int e) {
    return bucket_comm_s(costs, CollectiveKind::kAllGather, gather_prefix[e + 1] - gather_prefix[s],
                         unit.gather_group);
  });
  const auto reduce_s = table([&](int s, int e) {
    return bucket_comm_s(costs, CollectiveKind::kReduceScatter,
                         reduce_prefix[e + 1] - reduce_prefix[s], unit.reduce_group);
  });

  // Forward: items are units in order.
  GroupCosts forward;
  forward.window = w;
  forward.compute_s = unit.forward_s;
  forward.comm_s = gather_s;
  forward.tail_s = table([](int, int) { return 0.0; });
  forward.memory_bytes = unit.gather_bytes;

  // Backward: items are units in reverse order (item i = unit n-1-i). Under the backward
  // of one bucket run the next bucket's all-gather and the previous bucket's
  // reduce-scatter; the DP charges each group's own reduce-scatter to its successor's
  // slot instead (a pairwise surrogate: equal for equal-sized neighbours). The last
  // reduce-scatter is exposed.
  const auto unit_range = [&](int s, int e) { return std::pair<int, int>{n - 1 - e, n - 1 - s}; };
  GroupCosts backward;
  backward.window = w;
  backward.compute_s.resize(n);
  backward.memory_bytes.resize(n);
  for (int i = 0; i < n; ++i) {
    backward.compute_s[i] = unit.backward_s[n - 1 - i];
    backward.memory_bytes[i] = unit.gather_bytes[n - 1 - i] + unit.reduce_bytes[n - 1 - i];
  }
  backward.comm_s = table([&](int s, int e) {
    const auto [first, last] = unit_range(s, e);
    return gather_s[first][last - first] + reduce_s[first][last - first];
  });
  backward.tail_s = table([&](int s, int e) {
    const auto [first, last] = unit_range(s, e);
    return reduce_s[first][last - first];
  });

  // Memory budgets for two adjacent buckets: from the smallest that admits single units
  // up to the whole model, doubling.
  std::int64_t smallest = 0;
  for (int i = 0; i + 1 < n; ++i) {
    smallest = std::max(smallest, backward.memory_bytes[i] + backward.memory_bytes[i + 1]);
  }
  if (n == 1) smallest = backward.memory_bytes[0];
  const std::int64_t whole =
      std::accumulate(backward.memory_bytes.begin(), backward.memory_bytes.end(), std::int64_t{0});
  std::vector<std::int64_t> budgets;
  for (std::int64_t budget = std::max<std::int64_t>(smallest, 1); budget < 2 * whole; budget *= 2) {
    budgets.push_back(budget);
  }
  budgets.push_back(std::numeric_limits<std::int64_t>::max() / 4);

  std::vector<Plan> seeds;
  for (const std::int64_t budget : budgets) {
    const auto forward_groups = partition_by_dp(forward, budget);
    const auto backward_groups = partition_by_dp(backward, budget);
    if (!forward_groups || !backward_groups) continue;
    Plan plan = one_unit_per_bucket_plan(n);
    plan.forward_buckets = *forward_groups;
    std::vector<UnitRange> backward_buckets;
    for (auto it = backward_groups->rbegin(); it != backward_groups->rend(); ++it) {
      const auto [first, last] = unit_range(it->first, it->last);
      backward_buckets.push_back({first, last});
    }
    plan.backward_buckets = backward_buckets;
    plan.reduce_scatter_buckets = backward_buckets;
    // FSDP2's default: the last forward bucket stays gathered, backward needs it at once.
    plan.reshard_after_forward.assign(plan.forward_buckets.size(), true);
    plan.reshard_after_forward.back() = false;
    seeds.push_back(std::move(plan));
  }
  return seeds;
}

// ---------------------------------------------------------------------------------------
// The search.

class Search {
 public:
  Search(const Workload& workload, const CostModel& costs, const TunerOptions& options,
         std::int64_t memory_limit_bytes)
      : workload_(workload),
        costs_(costs),
        options_(options),
        unit_count_(static_cast<int>(workload.units.size())),
        // A batch is the unit of parallel work: more threads than its plans idle.
        evaluator_(workload, costs, memory_limit_bytes,
                   std::min(options.threads, std::max(options.batch_size, 1)),
                   options.fit_at_any_timing),
        rng_(options.seed),
        start_(std::chrono::steady_clock::now()) {}

  TunerResult run();

 private:
  double elapsed_s() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  bool out_of_budget() {
    if (stopped_ || capped_) return true;
    if (options_.time_budget_s > 0 && elapsed_s() >= options_.time_budget_s) stopped_ = true;
    if (!stopped_ && options_.max_evaluations > 0 && evaluated_ >= options_.max_evaluations) {
      capped_ = true;
    }
    return stopped_ || capped_;
  }

  // Simulates the plans not seen before; returns their evaluations in the given order.
  // `every_plan` simulates plans seen before too (the baselines: each gets its row even
  // when two build the same plan).
  // `defer_any_timing`: see Evaluator::evaluate; record() settles what it must, the caller
  // the rest it reads (improve()).
  std::vector<Evaluation> evaluate(const std::vector<std::pair<Plan, std::string>>& plans,
                                   bool abort_over_limit, bool every_plan = false,
                                   bool defer_any_timing = false);
  void record(Evaluation& evaluation);
  // Whether the local search under way has converged for practical purposes: its plan is
  // not kStallImprovement faster than the plan it held stall_evaluations simulations
  // before. Per local search (found by QA: one stall counter for the whole search ended
  // it in the first local search, before the other starts and the perturbations, and
  // counted a step against the previous best, so a run of small gains that together beat
  // 0.01% in the window went on unnoticed; a start plan at a local optimum then made the
  // pick slower than without it). Counted in simulations, not seconds, so it keeps the
  // search deterministic.
  bool local_search_stalled();
  // `plan` moved into the search space of the options (TunerOptions): fixed knobs set,
  // prefetch depths clamped, one shared partition when partitions are not independent.
  Plan project(Plan plan) const;
  // Whether the framework the options restrict to (fsdp2_exact, simplefsdp_exact) runs
  // `plan` as simulated; true without either.
  bool runs_as_simulated(const Plan& plan) const {
    return fsdptune::runs_as_simulated(options_, workload_.job, plan);
  }
  // One local move of a plan, cheap to list: the plan it leads to is built by apply().
  struct Move {
    enum Kind {
      kToggleCut,         // cut `index` of partition `dim` toggled (merge or split)
      kSetCutEverywhere,  // cut `index` set to `value` in all three partitions
      kShiftCut,          // cut `index` of partition `dim` moved to `value`
      kForwardPrefetch,   // forward prefetch depth := value
      kBackwardPrefetch,  // backward prefetch depth := value
      kFlipReshard,       // reshard_after_forward[index] flipped (index -1: every one)
      kSwitchLayout,      // the other stream layout
      kRespace,           // partition `dim` as buckets of `value` units each
    };
    Kind kind = kToggleCut;
    int dim = 0;
    int index = 0;
    int value = 0;
  };
  // The moves of `plan` in the search space, in a fixed order; `respace`: with the moves
  // that space a partition evenly (not among a perturbation's random moves).
  std::vector<Move> moves(const Plan& plan, bool respace = true) const;
  Plan apply(const Plan& plan, const Move& move) const;
  // apply() of every move, in order.
  std::vector<Plan> neighbours(const Plan& plan) const;
  Plan perturb(const Plan& plan);
  std::vector<Plan> pair_moves(const Plan& plan);
  std::vector<Evaluation> keep_gathered_variants(std::vector<Evaluation> starts);
  // Of `starts`, those that fit, best first: the best `restarts` of the others, then the
  // best `deep_prefetch_starts` deep-prefetch ones.
  std::vector<Evaluation> best_starts(std::vector<Evaluation> starts) const;
  // Simulates `candidates` in seeded order, batch by batch; moves `current` to the best
  // of the first batch that holds a strictly better plan. False when none does.
  bool improve(Evaluation& current, std::vector<Plan> candidates);
  // First-improvement local search from `start`; returns the local optimum reached.
  Evaluation descend(Evaluation start);
  // The local searches of FSDP2's part of the space (one partition for both collectives,
  // separate streams) from the best of `starts` moved into it; the best plan they reach
  // (TunerOptions::one_partition_phase).
  std::optional<Evaluation> one_partition_search(const std::vector<Evaluation>& starts);
  void report_progress();

  const Workload& workload_;
  const CostModel& costs_;
  TunerOptions options_;
  int unit_count_;
  Evaluator evaluator_;
  std::mt19937_64 rng_;
  std::chrono::steady_clock::time_point start_;

  std::unordered_set<std::string> seen_;
  std::int64_t evaluated_ = 0;
  std::int64_t aborted_ = 0;
  bool stopped_ = false;  // by the time budget or the progress callback
  bool capped_ = false;   // by max_evaluations
  bool stalled_ = false;  // some local search stopped by the stall rule
  // The local search under way: (evaluated_, step time) each time its plan improved, the
  // start first.
  std::vector<std::pair<std::int64_t, double>> local_steps_;
  std::optional<Evaluation> best_;
  std::optional<Evaluation> smallest_peak_;
  // Kept non-dominated, sorted by peak, with the evaluation of each point.
  std::vector<std::pair<ParetoPoint, Evaluation>> pareto_;
  int restart_ = 0;
  int restarts_ = 0;
  int perturbation_ = 0;
  bool one_partition_phase_ = false;
};

std::vector<Evaluation> Search::evaluate(const std::vector<std::pair<Plan, std::string>>& plans,
                                         bool abort_over_limit, bool every_plan,
                                         bool defer_any_timing) {
  std::vector<Evaluation> batch;
  for (const auto& [plan, label] : plans) {
    if (!seen_.insert(plan_key(plan, unit_count_)).second && !every_plan) continue;
    Evaluation evaluation;
    evaluation.plan = plan;
    evaluation.index = evaluated_ + static_cast<std::int64_t>(batch.size());
    evaluation.label = label.empty() ? fmt::format("candidate #{}", evaluation.index) : label;
    batch.push_back(std::move(evaluation));
  }
  batch = evaluator_.evaluate(std::move(batch), abort_over_limit, defer_any_timing);
  for (Evaluation& evaluation : batch) record(evaluation);
  evaluated_ += static_cast<std::int64_t>(batch.size());
  return batch;
}

void Search::record(Evaluation& evaluation) {
  // Under fsdp2_exact (simplefsdp_exact) a plan FSDP2 (SimpleFSDP) cannot run is no
  // candidate (only the baselines and start plans can be such: the space searched is its).
  const bool candidate = runs_as_simulated(evaluation.plan);
  if (evaluation.aborted) {
    ++aborted_;
  }
  if (!candidate) return;
  // A pending bound at any timing only makes the plan worse (no fit, a larger peak): it is
  // settled where the plan as good as it can be would be the smallest peak or the best.
  const bool could_be_smallest =
      !smallest_peak_ || evaluation.peak_bytes < smallest_peak_->peak_bytes;
  const bool could_be_best = !best_ || better(evaluation, *best_);
  if (evaluation.any_timing_pending && (could_be_smallest || could_be_best)) {
    evaluator_.settle(evaluation);
  }
  if (!evaluation.aborted) {
    if (!smallest_peak_ || evaluation.peak_bytes < smallest_peak_->peak_bytes) {
      smallest_peak_ = evaluation;
    }
    // Pareto front of (peak allocated, step time): drop what the new point dominates,
    // add it unless something dominates it (ties keep the earlier point).
    const ParetoPoint point{evaluation.step_time_s, evaluation.result.peak_allocated_bytes,
                            evaluation.label, evaluation.result.peak_reserved_bytes};
    const bool dominated = std::any_of(pareto_.begin(), pareto_.end(), [&](const auto& entry) {
      return entry.first.peak_allocated_bytes <= point.peak_allocated_bytes &&
             entry.first.step_time_s <= point.step_time_s;
    });
    if (!dominated) {
      std::erase_if(pareto_, [&](const auto& entry) {
        return point.peak_allocated_bytes <= entry.first.peak_allocated_bytes &&
               point.step_time_s <= entry.first.step_time_s;
      });
      const auto at = std::find_if(pareto_.begin(), pareto_.end(), [&](const auto& entry) {
        return entry.first.peak_allocated_bytes >= point.peak_allocated_bytes;
      });
      pareto_.insert(at, {point, evaluation});
    }
  }
  if (!best_ || better(evaluation, *best_)) best_ = evaluation;
}

bool Search::local_search_stalled() {
  if (!fsdptune::local_search_stalled(local_steps_, evaluated_, options_.stall_evaluations)) {
    return false;
  }
  stalled_ = true;
  return true;
}

void Search::report_progress() {
  if (!options_.progress) return;
  TunerProgress progress;
  progress.plans_evaluated = evaluated_;
  progress.best_step_time_s = best_ && best_->fits ? best_->step_time_s : 0.0;
  progress.elapsed_s = elapsed_s();
  progress.restart = restart_;
  progress.restarts = restarts_;
  progress.perturbation = perturbation_;
  progress.one_partition = one_partition_phase_;
  if (!options_.progress(progress)) stopped_ = true;
}

Plan Search::project(Plan plan) const {
  // Every plan of the space buckets its collectives with their copies and issues them
  // ahead (found by QA: a start plan without copies, or of one collective per parameter,
  // led the search to plans outside the space, which tune then returned).
  plan.one_collective_per_parameter = false;
  plan.copy_in_out = true;
  plan.reorder = true;
  if (!options_.independent_partitions) {
    plan.backward_buckets = plan.forward_buckets;
    plan.reduce_scatter_buckets = plan.forward_buckets;
  }
  const bool regathers =
      std::find(plan.reshard_after_forward.begin(), plan.reshard_after_forward.end(), true) !=
      plan.reshard_after_forward.end();
  if (!options_.search_reshard || (options_.simplefsdp_exact && regathers)) {
    plan.reshard_after_forward.assign(plan.forward_buckets.size(), true);
  }
  if (!options_.search_layout) {
    plan.stream_layout =
        options_.simplefsdp_exact ? StreamLayout::kShared : StreamLayout::kSeparate;
  }
  plan.forward_prefetch = std::clamp(plan.forward_prefetch, 1, options_.max_prefetch);
  plan.backward_prefetch = std::clamp(plan.backward_prefetch, 1, options_.max_prefetch);
  return plan;
}

std::vector<Search::Move> Search::moves(const Plan& plan, bool respace) const {
  std::vector<Move> out;
  const int n = unit_count_;
  if (plan.one_collective_per_parameter) return out;
  const int dims = options_.independent_partitions ? 3 : 1;
  const std::array<std::vector<bool>, 3> plan_cuts = {cuts_of(buckets_of(plan, 0), n),
                                                      cuts_of(buckets_of(plan, 1), n),
                                                      cuts_of(buckets_of(plan, 2), n)};
  // Merge / split: toggle one cut in one partition, or set it in all three at once.
  for (int i = 0; i + 1 < n; ++i) {
    for (int dim = 0; dim < dims; ++dim) out.push_back({Move::kToggleCut, dim, i, 0});
    if (options_.independent_partitions) {
      for (const bool value : {true, false}) {
        bool changes = false;
        for (int dim = 0; dim < 3; ++dim) changes = changes || plan_cuts[dim][i] != value;
        if (changes) out.push_back({Move::kSetCutEverywhere, 0, i, value ? 1 : 0});
      }
    }
  }
  // Shift a boundary by one unit.
  for (int dim = 0; dim < dims; ++dim) {
    const std::vector<bool>& cuts = plan_cuts[dim];
    for (int i = 0; i + 1 < n; ++i) {
      if (!cuts[i]) continue;
      for (const int step : {-1, 1}) {
        const int to = i + step;
        if (to < 0 || to + 1 >= n || cuts[to]) continue;
        out.push_back({Move::kShiftCut, dim, i, to});
      }
    }
  }
  // Prefetch depths (only with reordering: without it they must stay 0).
  if (plan.reorder) {
    for (const int step : {-1, 1}) {
      const int forward = plan.forward_prefetch + step;
      if (forward >= 1 && forward <= options_.max_prefetch) {
        out.push_back({Move::kForwardPrefetch, 0, 0, forward});
      }
      const int backward = plan.backward_prefetch + step;
      if (backward >= 1 && backward <= options_.max_prefetch) {
        out.push_back({Move::kBackwardPrefetch, 0, 0, backward});
      }
    }
  }
  if (options_.search_reshard && options_.simplefsdp_exact) {
    out.push_back({Move::kFlipReshard, 0, -1, 0});  // one setting for every bucket
  } else if (options_.search_reshard) {
    for (std::size_t b = 0; b < plan.reshard_after_forward.size(); ++b) {
      out.push_back({Move::kFlipReshard, 0, static_cast<int>(b), 0});
    }
  }
  if (options_.search_layout) out.push_back({Move::kSwitchLayout, 0, 0, 0});
  // One partition as buckets of k units (1 <= k <= kMaxRespaceUnits): found by QA, a pick
  // whose forward buckets of ~6 units, all kept gathered, were 0.7% slower than buckets of
  // 3 or 4 units (Llama 3 70B on 128 H100s, TP 8, full AC), with every single split on the
  // way 0.005% worse: a plateau no local move crossed. Not among a perturbation's moves
  // (there they made Llama 3 405B on 1024 H100s 0.3% slower), nor under max_evaluations
  // (a capped search's plans go to local moves: with them a pipelined job's chunks capped
  // at 1,000 plans each gave a 3% slower step).
  if (respace && options_.max_evaluations == 0) {
    for (int dim = 0; dim < dims; ++dim) {
      for (int k = 1; k <= kMaxRespaceUnits && k < n; ++k) {
        out.push_back({Move::kRespace, dim, 0, k});
      }
    }
  }
  return out;
}

Plan Search::apply(const Plan& plan, const Move& move) const {
  const int n = unit_count_;
  const auto set_all = [&](const Plan& from, const std::vector<bool>& cuts) {
    Plan next = from;
    for (int dim = 0; dim < 3; ++dim) next = with_partition(next, dim, cuts);
    return next;
  };
  switch (move.kind) {
    case Move::kToggleCut: {
      std::vector<bool> cuts = cuts_of(buckets_of(plan, move.dim), n);
      cuts[move.index] = !cuts[move.index];
      return options_.independent_partitions ? with_partition(plan, move.dim, cuts)
                                             : set_all(plan, cuts);
    }
    case Move::kSetCutEverywhere: {
      Plan next = plan;
      for (int dim = 0; dim < 3; ++dim) {
        std::vector<bool> cuts = cuts_of(buckets_of(next, dim), n);
        cuts[move.index] = move.value != 0;
        next = with_partition(next, dim, cuts);
      }
      return next;
    }
    case Move::kShiftCut: {
      std::vector<bool> cuts = cuts_of(buckets_of(plan, move.dim), n);
      cuts[move.index] = false;
      cuts[move.value] = true;
      return options_.independent_partitions ? with_partition(plan, move.dim, cuts)
                                             : set_all(plan, cuts);
    }
    case Move::kForwardPrefetch: {
      Plan next = plan;
      next.forward_prefetch = move.value;
      return next;
    }
    case Move::kBackwardPrefetch: {
      Plan next = plan;
      next.backward_prefetch = move.value;
      return next;
    }
    case Move::kFlipReshard: {
      Plan next = plan;
      if (move.index < 0) {
        next.reshard_after_forward.flip();
      } else {
        next.reshard_after_forward[move.index] = !next.reshard_after_forward[move.index];
      }
      return next;
    }
    case Move::kRespace: {
      std::vector<bool> cuts(static_cast<std::size_t>(n - 1), false);
      for (int i = 0; i + 1 < n; ++i) cuts[static_cast<std::size_t>(i)] = (i + 1) % move.value == 0;
      return options_.independent_partitions ? with_partition(plan, move.dim, cuts)
                                             : set_all(plan, cuts);
    }
    case Move::kSwitchLayout: {
      Plan next = plan;
      next.stream_layout = plan.stream_layout == StreamLayout::kSeparate ? StreamLayout::kShared
                                                                         : StreamLayout::kSeparate;
      return next;
    }
  }
  return plan;
}

std::vector<Plan> Search::neighbours(const Plan& plan) const {
  std::vector<Plan> out;
  for (const Move& move : moves(plan)) out.push_back(apply(plan, move));
  return out;
}

Plan Search::perturb(const Plan& plan) {
  // A few random moves at once: a kick out of the current local optimum.
  Plan current = plan;
  const int count = 2 + static_cast<int>(rng_() % 3);
  for (int m = 0; m < count; ++m) {
    const std::vector<Move> options = moves(current, /*respace=*/false);
    if (options.empty()) break;
    current = apply(current, options[rng_() % options.size()]);
  }
  return current;
}

std::vector<Evaluation> Search::best_starts(std::vector<Evaluation> starts) const {
  std::stable_sort(starts.begin(), starts.end(),
                   [](const Evaluation& a, const Evaluation& b) { return better(a, b); });
  std::erase_if(starts, [](const Evaluation& e) { return !e.fits; });
  std::vector<Evaluation> plain;
  std::vector<Evaluation> deep;
  for (Evaluation& start : starts) (start.deep_prefetch ? deep : plain).push_back(std::move(start));
  plain.resize(std::min(plain.size(), static_cast<std::size_t>(std::max(options_.restarts, 1))));
  deep.resize(
      std::min(deep.size(), static_cast<std::size_t>(std::max(options_.deep_prefetch_starts, 0))));
  plain.insert(plain.end(), deep.begin(), deep.end());
  return plain;
}

std::vector<Evaluation> Search::keep_gathered_variants(std::vector<Evaluation> starts) {
  // Keeping a bucket gathered from forward to backward (reshard_after_forward false)
  // saves its backward all-gather and costs its parameters' memory until its backward;
  // the last buckets are the cheapest to keep (backward reaches them first). Here the
  // number m of last forward buckets kept is swept for the best starting points: eight
  // values evenly spread over 1..k, then eight between the best that fits and the next,
  // so ~16 simulations per start find the most that memory allows.
  starts = best_starts(std::move(starts));

  const auto keep_last = [](const Plan& plan, int kept) {
    Plan out = plan;
    const int k = static_cast<int>(out.reshard_after_forward.size());
    for (int b = 0; b < k; ++b) out.reshard_after_forward[b] = b < k - kept;
    return out;
  };
  // Each start also with its forward partition one unit per bucket: the sweep below then
  // puts the boundary between resharded and kept on any unit at once (single moves shift
  // it one unit per move).
  const std::vector<UnitRange> unit_buckets = one_unit_per_bucket_plan(unit_count_).forward_buckets;
  std::vector<std::pair<Plan, std::string>> split_plans;
  for (const Evaluation& start : starts) {
    Plan split = start.plan;
    split.forward_buckets = unit_buckets;
    split.reshard_after_forward.assign(split.forward_buckets.size(), true);
    split_plans.emplace_back(project(std::move(split)), start.label + ", forward per unit");
  }
  if (!out_of_budget()) {
    // In split_plans' order, less those seen before: each its start's kind.
    std::size_t from = 0;
    for (Evaluation& split : evaluate(split_plans, /*abort_over_limit=*/true)) {
      while (split_plans[from].first != split.plan) ++from;
      split.deep_prefetch = starts[from].deep_prefetch;
      if (split.fits) starts.push_back(std::move(split));
    }
    report_progress();
  }
  constexpr int kSteps = 8;
  std::vector<Evaluation> found;
  for (const Evaluation& start : starts) {
    const int k = static_cast<int>(start.plan.forward_buckets.size());
    int low = 0;   // most buckets kept known to fit (0: the start itself, which fits)
    int high = k;  // search (low, high]
    for (int round = 0; round < 2 && high > low && !out_of_budget(); ++round) {
      std::vector<std::pair<Plan, std::string>> batch;
      std::vector<int> kept_counts;
      for (int j = 1; j <= kSteps; ++j) {
        const int kept = low + (j * (high - low) + kSteps - 1) / kSteps;
        if (kept <= low || (!kept_counts.empty() && kept == kept_counts.back())) continue;
        if (options_.simplefsdp_exact && kept < k) continue;  // one setting: all or none
        kept_counts.push_back(kept);
        batch.emplace_back(keep_last(start.plan, kept),
                           fmt::format("{}, last {} kept", start.label, kept));
      }
      std::vector<Evaluation> results = evaluate(batch, /*abort_over_limit=*/true);
      report_progress();
      int next_high = high;
      int next_low = low;
      for (Evaluation& result : results) {
        result.deep_prefetch = start.deep_prefetch;
        found.push_back(result);
        const int kept =
            static_cast<int>(std::count(result.plan.reshard_after_forward.begin(),
                                        result.plan.reshard_after_forward.end(), false));
        if (result.fits) {
          next_low = std::max(next_low, kept);
        } else {
          next_high = std::min(next_high, kept - 1);
        }
      }
      if (next_low == low && next_high == high) break;  // nothing new (already seen)
      low = next_low;
      high = std::max(next_high, low);
    }
  }
  return found;
}

std::vector<Plan> Search::pair_moves(const Plan& plan) {
  // Two moves at once: what a single move cannot reach when the knobs interact (a merge
  // that only pays with a deeper prefetch, a shift on two partitions together). All pairs
  // when there are few, else a seeded sample of `pair_moves` of them: a random first move,
  // then a random handful of second moves from it.
  // Moves are listed cheaply and only the plans drawn are built.
  const std::vector<Move> first = moves(plan);
  std::vector<Plan> out;
  const std::size_t cap = static_cast<std::size_t>(std::max(options_.pair_moves, 0));
  if (first.empty() || cap == 0) return out;
  if (first.size() * first.size() <= cap) {
    for (const Move& a : first) {
      for (Plan& b : neighbours(apply(plan, a))) out.push_back(std::move(b));
    }
    return out;
  }
  constexpr std::size_t kSecondMovesPerFirst = 16;
  while (out.size() < cap) {
    const Plan middle = apply(plan, first[rng_() % first.size()]);
    const std::vector<Move> second = moves(middle);
    if (second.empty()) break;
    for (std::size_t k = 0; k < kSecondMovesPerFirst && out.size() < cap; ++k) {
      out.push_back(apply(middle, second[rng_() % second.size()]));
    }
  }
  return out;
}

bool Search::improve(Evaluation& current, std::vector<Plan> candidates) {
  const std::size_t batch_size = static_cast<std::size_t>(std::max(options_.batch_size, 1));
  // Seeded shuffle (Fisher-Yates with the raw generator: the same on every platform).
  for (std::size_t i = candidates.size(); i > 1; --i) {
    std::swap(candidates[i - 1], candidates[rng_() % i]);
  }
  for (std::size_t begin = 0; begin < candidates.size(); begin += batch_size) {
    if (out_of_budget() || local_search_stalled()) return false;
    std::vector<std::pair<Plan, std::string>> batch;
    for (std::size_t i = begin; i < std::min(begin + batch_size, candidates.size()); ++i) {
      batch.emplace_back(std::move(candidates[i]), "");
    }
    // The bounds at any timing deferred (TunerOptions::defer_any_timing): the best of the
    // batch as good as each plan can be, settled until the best is exact -- the plan the
    // bounds of all would have given (settling only makes a plan worse).
    std::vector<Evaluation> results =
        evaluate(batch, /*abort_over_limit=*/true, /*every_plan=*/false,
                 options_.fit_at_any_timing && options_.defer_any_timing);
    report_progress();
    Evaluation* best_in_batch = nullptr;
    do {
      best_in_batch = nullptr;
      for (Evaluation& evaluation : results) {
        if (!best_in_batch || better(evaluation, *best_in_batch)) best_in_batch = &evaluation;
      }
      if (best_in_batch == nullptr || !best_in_batch->any_timing_pending) break;
      evaluator_.settle(*best_in_batch);
    } while (true);
    if (best_in_batch && better(*best_in_batch, current)) {
      current = *best_in_batch;
      local_steps_.emplace_back(evaluated_, current.step_time_s);
      return true;
    }
  }
  return false;
}

Evaluation Search::descend(Evaluation current) {
  // Variable neighbourhood descent: single moves until none improves, then pairs of
  // moves; back to single moves after any improvement.
  local_steps_ = {{evaluated_, current.step_time_s}};
  while (!out_of_budget() && !local_search_stalled()) {
    if (improve(current, neighbours(current.plan))) continue;
    if (improve(current, pair_moves(current.plan))) continue;
    break;  // a local optimum of both neighbourhoods (or out of budget)
  }
  return current;
}

std::optional<Evaluation> Search::one_partition_search(const std::vector<Evaluation>& starts) {
  const TunerOptions whole = options_;
  options_.independent_partitions = false;
  options_.search_layout = false;  // separate streams (project)
  one_partition_phase_ = true;
  // The starts moved into the part (each keeps its kind), and those already in it.
  std::vector<std::pair<Plan, std::string>> moved;
  std::vector<bool> moved_deep;
  std::vector<Evaluation> part_starts;
  for (const Evaluation& start : starts) {
    Plan plan = project(start.plan);
    if (plan == start.plan) {
      part_starts.push_back(start);
    } else {
      moved.emplace_back(std::move(plan), start.label + ", one partition");
      moved_deep.push_back(start.deep_prefetch);
    }
  }
  if (!out_of_budget()) {
    std::size_t from = 0;
    for (Evaluation& evaluation : evaluate(moved, /*abort_over_limit=*/true)) {
      while (moved[from].first != evaluation.plan) ++from;
      evaluation.deep_prefetch = moved_deep[from];
      part_starts.push_back(std::move(evaluation));
    }
  }
  part_starts = best_starts(std::move(part_starts));
  restarts_ = static_cast<int>(part_starts.size());
  std::optional<Evaluation> reached;
  for (std::size_t r = 0; r < part_starts.size() && !out_of_budget(); ++r) {
    restart_ = static_cast<int>(r);
    const Evaluation optimum = descend(part_starts[r]);
    if (!reached || better(optimum, *reached)) reached = optimum;
  }
  options_ = whole;
  one_partition_phase_ = false;
  if (reached) reached->deep_prefetch = false;
  return reached;
}

TunerResult Search::run() {
  TunerResult result;
  const HardwareSpec& hardware = costs_.hardware();
  const std::int64_t limit = options_.memory_limit_bytes;

  // 1. The baselines and the minimum-memory plan, simulated to the end (no abort) so the
  //    table can show them and "nothing fits" can say how far off the smallest peak is.
  std::vector<std::pair<Plan, std::string>> baselines = {
      {fsdp2_plan(workload_), "fsdp2"},
      {simplefsdp_block_plan(workload_), "simplefsdp-block"},
      {simplefsdp_greedy_plan(workload_, costs_, limit), "simplefsdp-greedy"},
      // The least memory within the space searched (not a baseline: not a candidate
      // unless it lies in the space).
      {project(min_memory_plan(unit_count_)), "min-memory"},
  };
  // The caller's start plans, as they are: candidates like the baselines (and, projected
  // where they lie outside the space, starts of local searches below), not listed as
  // baselines.
  for (std::size_t k = 0; k < options_.start_plans.size(); ++k) {
    const std::string label = fmt::format("start plan {}", k + 1);
    validate_plan(options_.start_plans[k], unit_count_, label);
    baselines.emplace_back(options_.start_plans[k], label);
  }
  const std::vector<Evaluation> fixed =
      evaluate(baselines, /*abort_over_limit=*/false, /*every_plan=*/true);
  for (const Evaluation& evaluation : fixed) {
    if (evaluation.label == "min-memory") continue;
    (evaluation.label.starts_with("start plan") ? result.start_plans : result.baselines)
        .push_back({evaluation.plan,
                    summarize_plan(evaluation.label, workload_, hardware, evaluation.result, limit),
                    evaluation.any_timing_reserved_bytes,
                    options_.fit_at_any_timing && evaluation.fits});
  }

  // 2. Structured seeds from the dynamic program, plus their variants with deeper
  //    prefetch and the shared stream layout.
  const UnitCosts unit = unit_costs(workload_, evaluator_.lowerer());
  std::vector<std::pair<Plan, std::string>> seed_plans;
  const std::vector<Plan> seeds = dp_seeds(unit, costs_);
  for (std::size_t s = 0; s < seeds.size(); ++s) {
    seed_plans.emplace_back(project(seeds[s]), fmt::format("dp seed {}", s));
  }
  // The baselines (and the minimum-memory plan) start local searches too, moved into the
  // space searched where they lie outside it.
  std::vector<std::pair<Plan, std::string>> projected_baselines;
  for (const Evaluation& evaluation : fixed) {
    Plan projected = project(evaluation.plan);
    if (projected != evaluation.plan) {
      projected_baselines.emplace_back(std::move(projected), evaluation.label + ", projected");
    }
  }
  std::vector<Evaluation> starts = evaluate(seed_plans, /*abort_over_limit=*/true);
  // The seeds with a deeper prefetch, in each stream layout (TunerOptions::
  // deep_prefetch_starts: starts of their own).
  std::vector<std::pair<Plan, std::string>> deep_plans;
  for (std::size_t s = 0; s < seeds.size() && options_.deep_prefetch_starts > 0; ++s) {
    for (int depth = 2; depth <= options_.max_prefetch; ++depth) {
      for (const StreamLayout layout : {StreamLayout::kSeparate, StreamLayout::kShared}) {
        Plan deeper = seeds[s];
        deeper.forward_prefetch = depth;
        deeper.backward_prefetch = depth;
        deeper.stream_layout = layout;
        deep_plans.emplace_back(
            project(std::move(deeper)),
            fmt::format("dp seed {}, prefetch {}, {} streams", s, depth,
                        layout == StreamLayout::kShared ? "shared" : "separate"));
      }
    }
  }
  for (Evaluation& deeper : evaluate(deep_plans, /*abort_over_limit=*/true)) {
    deeper.deep_prefetch = true;
    starts.push_back(std::move(deeper));
  }
  const std::vector<Evaluation> projected =
      evaluate(projected_baselines, /*abort_over_limit=*/true);
  report_progress();
  starts.insert(starts.end(), projected.begin(), projected.end());
  for (const Evaluation& evaluation : fixed) {
    if (project(evaluation.plan) == evaluation.plan) starts.push_back(evaluation);
  }
  if (options_.search_reshard) {
    const std::vector<Evaluation> kept = keep_gathered_variants(starts);
    starts.insert(starts.end(), kept.begin(), kept.end());
  }

  // 3. Local search from the most promising starts, best first (then the deep-prefetch
  //    ones). Then, where the space has independent partitions and both stream layouts,
  //    the local searches of FSDP2's part of it (TunerOptions::one_partition_phase), and
  //    one of the whole space from the plan they reach. (After the whole space's starts:
  //    first, it took a time budget's whole on large jobs, review.)
  if (best_ && best_->fits) {
    const bool one_partition_phase = options_.one_partition_phase &&
                                     options_.independent_partitions && options_.search_layout &&
                                     options_.max_evaluations == 0;
    const std::vector<Evaluation> every_start =
        one_partition_phase ? starts : std::vector<Evaluation>{};
    starts = best_starts(std::move(starts));
    const int whole_starts = static_cast<int>(starts.size());
    const int searched = whole_starts + (one_partition_phase ? 1 : 0);
    restarts_ = searched;
    for (std::size_t r = 0; r < starts.size() && !out_of_budget(); ++r) {
      restart_ = static_cast<int>(r);
      descend(starts[r]);
    }
    if (one_partition_phase && !out_of_budget()) {
      const std::optional<Evaluation> reached = one_partition_search(every_start);
      restarts_ = searched;
      restart_ = whole_starts;
      if (reached && reached->fits && !out_of_budget()) descend(*reached);
    }
    // 4. Perturbation restarts from the best plan found.
    for (int p = 0; p < options_.perturbations && !out_of_budget(); ++p) {
      perturbation_ = p + 1;
      // (The best may be a baseline outside the space: kick its projection.)
      const Plan kicked = perturb(project(best_->plan));
      if (seen_.contains(plan_key(kicked, unit_count_))) continue;
      const std::vector<Evaluation> kicked_result =
          evaluate({{kicked, ""}}, /*abort_over_limit=*/true);
      if (kicked_result.empty() || !kicked_result.front().fits) continue;
      descend(kicked_result.front());
    }
  }

  // 5. The result. The best is the best candidate of all, baselines included -- or, of
  //    the plans on the front that fit within the step-time tolerance of it, the one
  //    that reserves the least (then the faster; ties keep the front's order). Never
  //    slower than a baseline that fits; a start plan is a candidate like the search's
  //    own (found by QA: a start plan 0.006% faster than the search's best, reserving
  //    20 GiB more, capped the tolerance and was returned).
  const Evaluation* chosen = &*best_;
  if (chosen->fits && options_.step_time_tolerance > 0) {
    double within_s = best_->step_time_s * (1 + options_.step_time_tolerance);
    for (const Evaluation& evaluation : fixed) {
      if (evaluation.fits && evaluation.label != "min-memory" &&
          !evaluation.label.starts_with("start plan") && runs_as_simulated(evaluation.plan)) {
        within_s = std::min(within_s, evaluation.step_time_s);
      }
    }
    for (auto& [point, evaluation] : pareto_) {
      if (evaluation.step_time_s > within_s) continue;
      evaluator_.settle(evaluation);  // a bound deferred (record())
      if (!evaluation.fits) continue;
      if (leaner_within_tolerance(evaluation.peak_bytes, evaluation.step_time_s, chosen->peak_bytes,
                                  chosen->step_time_s)) {
        chosen = &evaluation;
      }
    }
  }
  result.memory_limit_bytes = limit;
  result.plans_evaluated = evaluated_;
  result.plans_aborted = aborted_;
  result.budget_exhausted = stopped_;
  result.max_evaluations_reached = capped_;
  result.stalled = stalled_;
  result.lower_bound_s = lower_bound_of(unit, costs_);
  const Evaluation& best = *chosen;
  result.fits = best.fits;
  result.derived_from = best.label;
  result.best_plan = best.plan;
  result.best_plan.name = "tuned";
  result.best = summarize_plan("tuned", workload_, hardware, best.result, limit);
  result.best_any_timing_reserved_bytes = best.any_timing_reserved_bytes;
  if (result.fits && best.step_time_s > 0) {
    result.efficiency = result.lower_bound_s / best.step_time_s;
  }
  if (smallest_peak_) {
    result.smallest_peak_bytes = smallest_peak_->peak_bytes;
    result.smallest_peak_plan = smallest_peak_->label;
    result.smallest_peak_breakdown = smallest_peak_->result.peak_breakdown;
  }
  bool labelled = false;
  for (const auto& [point, evaluation] : pareto_) {
    result.pareto.push_back(point);
    if (point.label == best.label) {
      result.pareto.back().label = "tuned";
      labelled = true;
    }
    result.pareto_plans.push_back(evaluation.plan);
  }
  // Under fit_at_any_timing a plan that does not fit at every timing can dominate the
  // chosen one in predicted peak and step: the chosen point is added (by peak; found by QA:
  // the demo's schedule had no "tuned" point, and its report's front left the plan out).
  if (!labelled) {
    const ParetoPoint point{best.step_time_s, best.result.peak_allocated_bytes, "tuned",
                            best.result.peak_reserved_bytes};
    const auto at = std::find_if(result.pareto.begin(), result.pareto.end(), [&](const auto& p) {
      return p.peak_allocated_bytes > point.peak_allocated_bytes;
    });
    const auto offset = at - result.pareto.begin();
    result.pareto.insert(at, point);
    result.pareto_plans.insert(result.pareto_plans.begin() + offset, best.plan);
  }
  return result;
}

}  // namespace

UnitCollectives unit_collectives(const Program& one_bucket_per_unit, int unit_count) {
  UnitCollectives out;
  out.gather_bytes.assign(static_cast<std::size_t>(unit_count), 0);
  out.reduce_bytes.assign(static_cast<std::size_t>(unit_count), 0);
  for (const Task& task : one_bucket_per_unit.tasks) {
    if (task.bucket < 0) continue;
    const int unit = one_bucket_per_unit.buckets[task.bucket].units.first;
    if (unit < 0 || unit >= unit_count) continue;
    if (task.kind == TaskKind::kAllGather) {
      out.gather_bytes[unit] = task.bytes;
      out.gather_group = task.group;
    } else if (task.kind == TaskKind::kReduceScatter) {
      out.reduce_bytes[unit] = task.bytes;
      out.reduce_group = task.group;
    }
  }
  return out;
}

BucketedCommBound least_bucketed_comm(const CostModel& costs, CollectiveKind kind,
                                      const std::vector<std::int64_t>& unit_bytes,
                                      const CommGroup& group) {
  BucketedCommBound bound;
  const int n = static_cast<int>(unit_bytes.size());
  if (n == 0) return bound;
  // 2^18 buckets costed a kind: exact up to 512 units (every Llama model: 405B has 128),
  // as the seeds' partitions are (dp_window). 405B: 8,256 buckets, about 3 ms a kind.
  constexpr double kWorkItems = 262144.0;
  const int window = static_cast<double>(n) * n <= kWorkItems
                         ? n
                         : std::clamp(static_cast<int>(kWorkItems / n), std::min(n, 16), n);
  std::vector<std::int64_t> prefix(static_cast<std::size_t>(n) + 1, 0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + unit_bytes[i];
  // A bucket over no bytes (units without parameters) runs no collective.
  const auto bucket_s = [&](int s, int e) {
    const std::int64_t bytes = prefix[e + 1] - prefix[s];
    return bytes > 0 ? costs.collective(kind, bytes, group).seconds : 0.0;
  };
  bound.first_s = std::numeric_limits<double>::infinity();
  for (int e = 0; e < window; ++e) bound.first_s = std::min(bound.first_s, bucket_s(0, e));
  // least[e]: the cheapest bucketing of units 0 .. e-1.
  std::vector<double> least(static_cast<std::size_t>(n) + 1,
                            std::numeric_limits<double>::infinity());
  least[0] = 0;
  for (int e = 0; e < n; ++e) {
    for (int s = std::max(0, e - window + 1); s <= e; ++s) {
      least[e + 1] = std::min(least[e + 1], least[s] + bucket_s(s, e));
    }
  }
  bound.total_s = least[n];
  return bound;
}

double step_time_lower_bound(const Workload& workload, const CostModel& costs) {
  Lowerer lowerer(workload, costs);
  return lower_bound_of(unit_costs(workload, lowerer), costs);
}

Plan min_memory_plan(int unit_count) {
  Plan plan = one_unit_per_bucket_plan(unit_count);
  plan.stream_layout = StreamLayout::kShared;
  return plan;
}

void run_workers(int workers, const std::function<void(int)>& work) {
  std::vector<std::thread> helpers;
  helpers.reserve(static_cast<std::size_t>(std::max(workers - 1, 0)));
  for (int w = 1; w < workers; ++w) {
    try {
      helpers.emplace_back(work, w);
    } catch (const std::system_error&) {
      break;  // no more threads: the ones started take the rest
    }
  }
  work(0);
  for (std::thread& thread : helpers) thread.join();
}

bool plan_fits(const SimResult& result, std::int64_t memory_limit_bytes) {
  // The caching allocator's reserved peak, not the allocated one, is what runs out of
  // memory (torch.cuda.max_memory_reserved); the limit already leaves the hardware's
  // reserve for the CUDA context, NCCL buffers and cuBLAS workspaces, not for the
  // allocator's slack. `simulate`, `tune`, pipelines and the sweep all judge this way.
  return !result.aborted && result.peak_reserved_bytes <= memory_limit_bytes;
}

PlanSummary summarize_plan(const std::string& plan_name, const Workload& workload,
                           const HardwareSpec& hardware, const SimResult& result,
                           std::int64_t memory_limit_bytes) {
  const StepMetrics metrics = step_metrics(workload, hardware, result);
  PlanSummary summary = simulated_summary(result, plan_name);
  summary.tokens_per_s_per_gpu = metrics.tokens_per_s_per_gpu;
  summary.mfu = metrics.mfu;
  summary.fits = plan_fits(result, memory_limit_bytes);
  return summary;
}

bool local_search_stalled(const std::vector<std::pair<std::int64_t, double>>& steps,
                          std::int64_t evaluated, std::int64_t window) {
  if (window <= 0 || steps.empty()) return false;
  const std::int64_t window_start = evaluated - window;
  if (window_start < steps.front().first) return false;  // not that many yet
  // The plan held at the window's start: the last improvement at or before it.
  const auto held =
      std::prev(std::upper_bound(steps.begin(), steps.end(), window_start,
                                 [](std::int64_t at, const std::pair<std::int64_t, double>& step) {
                                   return at < step.first;
                                 }));
  return steps.back().second >= held->second * (1 - TunerOptions::kStallImprovement);
}

bool leaner_within_tolerance(std::int64_t peak_bytes, double step_time_s,
                             std::int64_t chosen_peak_bytes, double chosen_step_time_s) {
  if (peak_bytes != chosen_peak_bytes) return peak_bytes < chosen_peak_bytes;
  return step_time_s < chosen_step_time_s;
}

bool fsdp2_only(const TunerOptions& options, const JobSpec& job) {
  return options.fsdp2_exact || job.execution != Execution::kCompiled;
}

bool runs_as_simulated(const TunerOptions& options, const JobSpec& job, const Plan& plan) {
  if (fsdp2_only(options, job)) return fsdp2_differences(plan).empty();
  if (options.simplefsdp_exact) return simplefsdp_differences(plan).empty();
  return true;
}

Tuner::Tuner(TunerOptions options) : options_(std::move(options)) {
  if (options_.threads < 1) throw_bad_input("--threads", "must be >= 1");
  if (options_.max_prefetch < 1) throw_bad_input("max_prefetch", "must be >= 1");
  if (options_.time_budget_s < 0) throw_bad_input("--time-budget", "must be >= 0");
  if (options_.memory_limit_bytes < 0) throw_bad_input("--memory-limit", "must be >= 0");
  if (!(options_.step_time_tolerance >= 0 && options_.step_time_tolerance < 1)) {
    throw_bad_input("--step-tolerance", "must be a fraction in [0, 1), e.g. 0.001 (0.1%)");
  }
}

void check_exactness(const TunerOptions& options, Execution execution, const std::string& what) {
  if (!options.simplefsdp_exact) return;
  if (options.fsdp2_exact) {
    throw_bad_input("--simplefsdp-exact",
                    "not with --fsdp2-exact: FSDP2 runs its collectives on two streams, "
                    "SimpleFSDP on one, so no plan runs as simulated under both",
                    "give one of them");
  }
  if (execution != Execution::kCompiled) {
    throw_bad_input("--simplefsdp-exact",
                    fmt::format("SimpleFSDP runs under torch.compile only, and the {} is {}", what,
                                to_string(execution)),
                    "give --execution compiled, or --fsdp2-exact");
  }
}

TunerResult Tuner::tune(const Workload& workload, const CostModel& costs) const {
  FSDPTUNE_CHECK(!workload.units.empty(), "tune() needs a workload with units");
  TunerOptions options = options_;
  // Without torch.compile only FSDP2 runs the job (SimpleFSDP runs compiled only): the plans
  // FSDP2 runs as simulated are the space (found by QA: an eager job was given a plan on one
  // shared stream, which neither runs).
  check_exactness(options, workload.job.execution, "job");
  options.fsdp2_exact = fsdp2_only(options, workload.job);
  if (options.simplefsdp_exact) {
    options.search_layout = false;  // one shared stream (project)
    options.independent_partitions = false;
    options.max_prefetch = 1;
  }
  if (options.fsdp2_exact) {
    options.search_layout = false;
    options.independent_partitions = false;
  }
  if (options.memory_limit_bytes == 0) {
    options.memory_limit_bytes = default_memory_limit_bytes(costs.hardware());
  }
  Search search(workload, costs, options, options.memory_limit_bytes);
  return search.run();
}

ScheduleFile schedule_of_tuned_plan(const Workload& workload, const HardwareSpec& hardware,
                                    const TunerResult& result, const CostModel& costs) {
  ScheduleFile schedule;
  schedule.hardware = hardware;
  schedule.memory_limit_bytes = result.memory_limit_bytes;
  schedule.plan = result.best_plan;
  schedule.program = lower(workload, schedule.plan, costs);
  const SimResult simulated = simulate(schedule.program);
  schedule.predicted =
      summarize_plan("tuned", workload, hardware, simulated, result.memory_limit_bytes);
  schedule.timings = simulated.timings;
  schedule.memory_timeline = simulated.memory_timeline;
  schedule.cost_queries = schedule.program.cost_queries;
  schedule.cost_fallbacks = schedule.program.cost_fallbacks;
  for (const EvaluatedPlan& baseline : result.baselines) {
    schedule.baselines.push_back(baseline.summary);
  }
  schedule.pareto = result.pareto;
  schedule.lower_bound_s = result.lower_bound_s;
  return schedule;
}

}  // namespace fsdptune
