// The schedule autotuner (DESIGN.md "Searching", docs/tuner.md): finds the Plan with the
// shortest simulated step whose peak memory fits under a limit (of the plans within
// TunerOptions::step_time_tolerance of that step, the one that reserves the least).
//
// Search space: forward all-gather buckets, backward all-gather buckets and
// reduce-scatter buckets (three independent contiguous partitions of the units), forward
// and backward prefetch depths, reshard-after-forward per forward bucket, stream layout.
//
// Method: the baselines (fsdp2, simplefsdp-block, simplefsdp-greedy) and a minimum-memory
// plan are simulated first; a dynamic program over bucket boundaries, fed with per-unit
// compute and collective costs, gives structured seeds; then simulator-in-the-loop local
// search (merge, split, shift a boundary, change prefetch, reshard or stream layout) with
// batches of candidates simulated in parallel and reduced in a fixed order, from the best
// starts, the plan reached in FSDP2's part of the space, and perturbations of the best
// (docs/tuner.md "How"). The result is never slower than a fitting baseline (the baselines are
// candidates like any other, and the step-time tolerance stops at them).
//
// Determinism: for a given seed the result does not depend on the thread count, and is
// identical run to run unless the time budget cuts the search short
// (TunerResult::budget_exhausted says so); `max_evaluations` is a budget that keeps it
// deterministic.
//
// Pure: no I/O. Reads the steady clock for the time budget only.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "fsdptune/cost_model.hpp"
#include "fsdptune/pipeline.hpp"
#include "fsdptune/plan.hpp"
#include "fsdptune/schedule.hpp"
#include "fsdptune/simulator.hpp"
#include "fsdptune/workload.hpp"

namespace fsdptune {

// Where the search stands, handed to the progress callback after every batch.
struct TunerProgress {
  std::int64_t plans_evaluated = 0;
  double best_step_time_s = 0;  // of the best plan that fits; 0 while none fits
  double elapsed_s = 0;         // wall clock since tune() began
  int restart = 0;              // which seed the local search is refining (0-based)
  int restarts = 0;      // how many starts are searched (restarts + deep_prefetch_starts at most)
  int perturbation = 0;  // which perturbation restart (1-based); 0 before them
  // In the local searches of FSDP2's part of the space (TunerOptions::one_partition_phase).
  bool one_partition = false;
};

struct TunerOptions {
  // Peak memory a plan may reserve (compared with the simulator's reserved-peak estimate,
  // as `simulate` does: plan_fits). 0 = default_memory_limit_bytes (plans.hpp): the
  // hardware's HBM minus its memory_reserve_bytes.
  std::int64_t memory_limit_bytes = 0;
  // Judge fit by the reserved estimate at the worst order of starts and ends under any
  // durations (any_timing_reserved_bytes, memory_bound.hpp) instead of at the predicted
  // timing: a plan chosen so still fits when its collectives run much faster or slower
  // than the costs say. Pipelined jobs too (tune_pipelined_job judges each chunk's budget
  // and each composition at any timing).
  bool fit_at_any_timing = false;
  // With fit_at_any_timing, compute a local search's bounds at any timing only where the
  // search reads them: for the best plan of a batch, a plan that could be the best or the
  // smallest peak so far, and the Pareto points within the step tolerance of the pick.
  // Bounds only make plans worse, so the search and its result are those of computing
  // every bound (a test compares them), for a fraction of the maximum flows.
  bool defer_any_timing = true;
  // Wall-clock budget of the whole search; 0 = none. Checked between batches.
  double time_budget_s = 10.0;
  // Deterministic budget: stop after this many simulations; 0 = none.
  std::int64_t max_evaluations = 0;
  int threads = 1;         // plans simulated in parallel (>= 1)
  std::uint64_t seed = 0;  // orders the neighbours tried and the perturbations
  // The search space. Every plan the search generates lies in it (starting points from
  // outside, e.g. a baseline's deeper prefetch, are projected into it first); the
  // baselines themselves are evaluated as they are and stay candidates for the best.
  // Largest prefetch depth tried (forward and backward); >= 1.
  int max_prefetch = 3;
  // Try reshard_after_forward per bucket; false = every forward bucket resharded.
  bool search_reshard = true;
  // Try both stream layouts; false = separate all-gather and reduce-scatter streams.
  bool search_layout = true;
  // Independent forward / backward / reduce-scatter partitions; false = one partition
  // shared by all three (a smaller space, FSDP2-expressible).
  bool independent_partitions = true;
  // Only plans FSDP2's fully_shard groups run as simulated (fsdp2_differences empty; `tune
  // --fsdp2-exact`): one partition, separate streams; a baseline or start plan outside
  // them is simulated and listed but never returned, nor caps the step tolerance (fsdp2
  // does). Found by QA: a torchtitan user could not apply the plans tune picked. Always on
  // for a job without torch.compile (JobSpec::execution not compiled): only FSDP2 runs it
  // (fsdp2_only).
  bool fsdp2_exact = false;
  // Only plans SimpleFSDP's manual bucketing runs as simulated (simplefsdp_differences
  // empty; `tune --simplefsdp-exact`): one bucket list for every collective, one
  // reshard-after-forward setting for every bucket, one shared stream, one bucket ahead; a
  // baseline or start plan outside them (fsdp2) is simulated and listed but never returned,
  // nor caps the step tolerance. Found by QA: a SimpleFSDP user could only read in the
  // export whether the pick ran as simulated. Compiled jobs only; not with fsdp2_exact.
  bool simplefsdp_exact = false;
  // Pipelined jobs (tune_pipelined_job): whether a chunk may keep its parameters gathered
  // across microbatches, re-gather them in each, or either (the faster that fits).
  KeepGatheredChoice keep_gathered = KeepGatheredChoice::kAny;
  // Candidates simulated per batch: the unit of parallel work and of first-improvement
  // (fixed, so the result does not depend on `threads`).
  int batch_size = 32;
  // Local searches from the best starting points (seeds and baselines), best first.
  int restarts = 3;
  // ...and from the best this many starts of the DP seeds with a deeper prefetch (both
  // depths 2..max_prefetch, each stream layout) and their kept-gathered variants, which
  // compete only among themselves: a deeper backward prefetch pays only with coarser
  // backward buckets all over the model, which no local move reaches from a start of
  // prefetch 1 (found by QA: on Llama 3 70B, 128 H100s, TP 8, selective AC under 40 GiB,
  // seeds 0-5 picked 1.511-1.532 s; with these 1.510-1.513 s).
  int deep_prefetch_starts = 2;
  // After the local searches of the whole space from its starts, local searches of FSDP2's
  // part of it (one partition for all-gathers and reduce-scatters, separate streams: what
  // --fsdp2-exact searches) from the best starts moved into it; the plan they reach starts
  // a local search of the whole space, before the perturbations. Where the space has
  // independent partitions and both layouts, and no max_evaluations (a capped search spends
  // its plans on the whole space). Found in review: on Llama 3 70B on 64 H100s, TP 8,
  // --fsdp2-exact found 1.199-1.202 s, the whole space 1.202-1.205 s (its moves change one
  // partition at a time and did not reach FSDP2's coarse, deep-prefetch region); with this
  // phase, seeds 0-5, 1.193-1.204 s (mean 1.1965 s) for ~40% more plans.
  bool one_partition_phase = true;
  // Pairs of moves tried when no single move improves: all of them when there are at
  // most this many, else a seeded sample of this many. 0 = single moves only.
  int pair_moves = 1024;
  // Perturbation restarts after the local search from every seed has converged.
  int perturbations = 8;
  // Stop a local search (from a start or a perturbation; the search goes on with the next)
  // once its plan is not kStallImprovement (0.01%) faster than the one it held this many
  // simulations before (deterministic, unlike the time budget); 0 = every local search to
  // its local optimum.
  std::int64_t stall_evaluations = 1500;
  static constexpr double kStallImprovement = 1e-4;  // relative step time
  // Which plan the search returns: of the plans that fit within this fraction of the
  // fastest plan's step time (on the Pareto front of peak against step), the one with the
  // smallest reserved peak (then the faster). Simulated step times that differ by 0.1%
  // are a tie for any real run (docs/calibration.md), while the memory they trade is
  // headroom against the model's memory error: on the demo's 405B job the fastest plan
  // once reserved 2.3 GiB more than one 0.07% slower (0.1 GiB for 0.03% on 2026-12-07).
  // 0 = the fastest plan that fits.
  double step_time_tolerance = 0.001;
  // Plans the caller starts from (`tune --start-plan`: a plan tuned before, for other
  // hardware or another mesh of the same model), each of the workload's units. Simulated
  // as they are, like the baselines: candidates for the best, and the pick is never slower
  // than one that fits beyond step_time_tolerance (within it only while reserving less;
  // unlike a baseline, a start plan does not stop the tolerance); each (projected into the space
  // where it lies outside it) starts a local search too. Labelled "start plan 1", ... Not listed in
  // TunerResult::baselines. Single-Program jobs only.
  std::vector<Plan> start_plans;
  // Called after every batch; returning false stops the search (keeping the best so far).
  std::function<bool(const TunerProgress&)> progress;
};

// Whether only plans FSDP2 runs as simulated may be returned for `job`: under
// TunerOptions::fsdp2_exact, or for a job without torch.compile (SimpleFSDP runs compiled
// only, and FSDP2 runs no plan on one stream). The single-Program and the pipelined tuner
// and tune's output all ask this (found by review: the pipelined tuner asked the option
// alone).
bool fsdp2_only(const TunerOptions& options, const JobSpec& job);

// The stall rule (TunerOptions::stall_evaluations): whether a local search has converged
// for practical purposes after `evaluated` simulations of the whole search, its plan not
// kStallImprovement faster than the plan it held `window` simulations before. `steps`:
// (simulations so far, step time) each time its plan improved, its start first. False
// while the search is younger than `window`, and for `window` <= 0.
bool local_search_stalled(const std::vector<std::pair<std::int64_t, double>>& steps,
                          std::int64_t evaluated, std::int64_t window);

// The pick among plans within the step-time tolerance of the fastest
// (TunerOptions::step_time_tolerance): whether a plan of `peak_bytes` reserved and
// `step_time_s` replaces the one chosen so far. The smaller reserved peak wins, then the
// shorter step; a full tie keeps the chosen one (the front's order).
bool leaner_within_tolerance(std::int64_t peak_bytes, double step_time_s,
                             std::int64_t chosen_peak_bytes, double chosen_step_time_s);

// Whether `plan` is one the tuner may return for `job` under `options`: FSDP2 runs it as
// simulated where fsdp2_only, SimpleFSDP where simplefsdp_exact, any plan otherwise. The
// search and tune's baseline comparison both ask it.
bool runs_as_simulated(const TunerOptions& options, const JobSpec& job, const Plan& plan);

// Refuses (exit 2, naming --simplefsdp-exact) simplefsdp_exact with fsdp2_exact (no plan
// runs as simulated under both) or for an `execution` other than compiled (SimpleFSDP runs
// under torch.compile only); `what` names the job ("job", "sweep") in the message.
void check_exactness(const TunerOptions& options, Execution execution, const std::string& what);

// Everything the tuner learned about one plan it evaluated in full.
struct EvaluatedPlan {
  Plan plan;
  PlanSummary summary;
  // With TunerOptions::fit_at_any_timing, when the plan fits at the predicted timing:
  // any_timing_reserved_bytes of its Program (what its fit was judged by); 0 otherwise.
  std::int64_t any_timing_reserved_bytes = 0;
  // With fit_at_any_timing: the tuner's verdict, that bound within the limit (`summary`
  // keeps the fit at the predicted timing, as a schedule file stores it); false otherwise.
  bool fits_at_any_timing = false;
  bool operator==(const EvaluatedPlan&) const = default;
};

struct TunerResult {
  Plan best_plan;    // named "tuned"
  PlanSummary best;  // of best_plan
  // The picked plan's label: "fsdp2", "dp seed 2", "start plan 1", ... where the pick is
  // that plan unchanged, else "candidate #N", the plan found after N simulations (QA: said
  // to be where the search started).
  std::string derived_from;
  std::vector<EvaluatedPlan> baselines;    // fsdp2, simplefsdp-block, simplefsdp-greedy
  std::vector<EvaluatedPlan> start_plans;  // TunerOptions::start_plans', in their order
  std::vector<ParetoPoint> pareto;         // non-dominated (peak allocated, step time), by peak
  std::vector<Plan> pareto_plans;          // the plan of each point of `pareto`
  double lower_bound_s = 0;                // max(compute + unavoidable exposed comm, total comm)
  double efficiency = 0;                   // lower_bound_s / best.step_time_s
  std::int64_t memory_limit_bytes = 0;     // the limit used
  bool fits = false;                       // best fits under the limit
  // With fit_at_any_timing: best's any_timing_reserved_bytes (0 otherwise).
  std::int64_t best_any_timing_reserved_bytes = 0;
  // When nothing fits: the smallest reserved peak seen and the plan that had it (with
  // fit_at_any_timing, a plan's any-timing bound where its predicted peak fits, else its
  // predicted peak: a lower bound of its bound).
  std::int64_t smallest_peak_bytes = 0;
  std::string smallest_peak_plan;
  MemoryBreakdown smallest_peak_breakdown{};  // its allocated peak by category
  std::int64_t plans_evaluated = 0;           // simulations run (including aborted ones)
  std::int64_t plans_aborted = 0;             // stopped early: over the memory limit
  bool budget_exhausted = false;              // the time budget or the callback stopped the search
  bool max_evaluations_reached = false;       // max_evaluations stopped it (deterministic)
  // Some local search was stopped by the stall rule (stall_evaluations without a notable
  // gain); the search itself ends when the starts and perturbations are searched (or a
  // budget above stops it).
  bool stalled = false;
  bool operator==(const TunerResult&) const = default;
};

// The lower bound of DESIGN.md "Searching" for `workload`, seconds: the larger of
// (compute of every op, standalone, + the first all-gather and the last reduce-scatter,
// which nothing can hide: the cheapest bucket holding unit 0) and (the whole model
// gathered once and its gradients reduce-scattered once, in the cheapest contiguous
// bucketing: the least communication any plan does). docs/tuner.md.
double step_time_lower_bound(const Workload& workload, const CostModel& costs);

// The least time of `kind` collectives over units of `unit_bytes` (each unit's whole
// collective buffer, in order) bucketed in contiguous ranges, as plans bucket them:
// `first_s` of one bucket holding unit 0 (the cheapest [0, e]), `total_s` of every unit
// moved once (the cheapest bucketing). Each bucket is costed at its own size: a measured
// profile's times need neither grow with size nor be subadditive, so unit 0 alone and the
// whole model as one collective are not the least. Exact up to 512 units; above, a bucket
// spans at most 2^18 / units of them (a longer one costed as its cheapest split).
// Each unit's whole all-gather and reduce-scatter buffer (0: none) and the groups they run
// over, read off a Program of a bucket per unit (fsdp2's, the min-memory plan's): what
// least_bucketed_comm takes.
struct UnitCollectives {
  std::vector<std::int64_t> gather_bytes;
  std::vector<std::int64_t> reduce_bytes;
  CommGroup gather_group;
  CommGroup reduce_group;
};
UnitCollectives unit_collectives(const Program& one_bucket_per_unit, int unit_count);

struct BucketedCommBound {
  double first_s = 0;
  double total_s = 0;
};
BucketedCommBound least_bucketed_comm(const CostModel& costs, CollectiveKind kind,
                                      const std::vector<std::int64_t>& unit_bytes,
                                      const CommGroup& group);

// Runs work(w) for w in [0, workers) at once, the calling thread as worker 0 and a
// std::thread for each other; where the system refuses a thread, the workers started so
// far do the work. `work` must take its items from a shared counter, so that any number of
// workers finishes them (the tuner's batches and the sweep's configurations do).
void run_workers(int workers, const std::function<void(int)>& work);

// The most threads `tune --threads` and `sweep --threads` take (a tuner batch is 32 plans;
// far beyond any machine's cores, within what a process may start).
inline constexpr int kMaxThreads = 1024;

// Does a simulated plan fit under `memory_limit_bytes`? (not aborted and the reserved
// peak, SimResult::peak_reserved_bytes, <= limit)
bool plan_fits(const SimResult& result, std::int64_t memory_limit_bytes);

// The least memory a plan of the search space needs (with the default TunerOptions), as
// far as the knobs go: one unit per bucket, every bucket resharded after forward, one
// bucket prefetched, one communication stream shared by the all-gathers and the
// reduce-scatters (so their buffers are never held at once). The search starts from it.
Plan min_memory_plan(int unit_count);

// The summary of one simulated plan, as the schedule file and the tables report it.
PlanSummary summarize_plan(const std::string& plan_name, const Workload& workload,
                           const HardwareSpec& hardware, const SimResult& result,
                           std::int64_t memory_limit_bytes);

// The schedule file of `result.best_plan`: the plan, its full Program (names and buffer
// layouts), the prediction with per-task timings and the memory timeline, the baselines,
// the Pareto front and the lower bound. Model, job and provenance are the caller's to set.
ScheduleFile schedule_of_tuned_plan(const Workload& workload, const HardwareSpec& hardware,
                                    const TunerResult& result, const CostModel& costs);

// Search over plans (ensmallen style: configured by value, then run).
class Tuner {
 public:
  explicit Tuner(TunerOptions options = {});
  const TunerOptions& options() const { return options_; }

  // REQUIRES: `workload` built by build_workload; `costs` shared by the worker threads
  // (CostModel is thread-safe).
  TunerResult tune(const Workload& workload, const CostModel& costs) const;

 private:
  TunerOptions options_;
};

}  // namespace fsdptune
