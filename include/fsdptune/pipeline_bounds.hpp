// What a pipelined job can do at best, and the trade-off between its stages' memory and
// its step time (docs/tuner.md "Pipelined jobs"): the lower bound of DESIGN.md
// "Searching" extended to the pipeline composition, and the compositions of per-chunk
// choices that make the v2 schedule's Pareto front. Pure: no I/O.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "fsdptune/cost_model.hpp"
#include "fsdptune/pipeline.hpp"
#include "fsdptune/program.hpp"
#include "fsdptune/schedule.hpp"
#include "fsdptune/workload.hpp"

namespace fsdptune {

// The least each per-microbatch duration of `chunk` (a chunk_workload) can be under any
// plan and either keep-gathered choice, seconds (memory fields 0):
//   first_forward_s = F + AG0     forward_s = F     backward_s = last_backward_s = B
//   tail_s = RS0 + optimizer
// with F its forward compute, B its recompute + backward compute (every task at its
// standalone cost: contention only slows tasks down), AG0 / RS0 the cheapest all-gather /
// reduce-scatter of a bucket holding its first unit (least_bucketed_comm: any [0, e]).
// Why these hold for every plan: compute runs in order on one stream; the first forward
// waits for a gather holding unit 0; the last backward is unit 0's, its reduce-scatter
// follows it and the optimizer waits for every reduce-scatter. Like step_time_lower_bound,
// it assumes that splitting a unit's collective (a collective per parameter) never makes
// it cheaper.
ChunkTimes chunk_time_lower_bounds(const Workload& chunk, const CostModel& costs);
// The same from what a caller already has: the chunk's compute_costs and a Program of its
// fsdp2 plan (lower(chunk, fsdp2_plan(chunk), costs), any reshard_after_forward: a bucket
// per unit either way), whose collectives give each unit's bytes and group.
ChunkTimes chunk_time_lower_bounds(const ComputeCosts& compute, const Program& fsdp2_program,
                                   const CostModel& costs);

// A step time no plan of `workload` (any per-chunk plans, either keep-gathered choice)
// can beat under `costs`, seconds: the larger of
//  (a) the schedule (simulate_pipeline, the job's P, V, M and schedule, the real
//      point-to-point send) run with every chunk at chunk_time_lower_bounds: the slowest
//      stage's compute over all microbatches plus the bubble and the sends that schedule
//      cannot avoid. simulate_pipeline is monotone (every start is a max of earlier ends
//      plus durations, in a fixed order per rank), so shorter durations never end later.
//  (b) for every chunk c: when its first forward can start in (a), plus its whole
//      single-microbatch step bound (step_time_lower_bound of the chunk: its first
//      forward, last backward and tail add up to its one-microbatch step), plus the
//      (M-1) other forwards and backwards of c, which its rank runs in between. This
//      is where communication-bound chunks show.
// REQUIRES: validate_pipeline(workload.job) passed.
double pipeline_step_lower_bound(const Workload& workload, const CostModel& costs);
// The same from what a caller already has, per chunk of pipeline_chunks(workload): its
// compute_costs, a Program of its fsdp2 plan (as chunk_time_lower_bounds takes it) and its
// step_time_lower_bound (the per-chunk tuners' TunerResult::lower_bound_s), so that none
// is computed or lowered again.
double pipeline_step_lower_bound(const Workload& workload,
                                 const std::vector<ComputeCosts>& chunk_compute,
                                 const std::vector<Program>& chunk_fsdp2_programs,
                                 const std::vector<double>& chunk_step_bounds_s,
                                 const CostModel& costs);

// One composition: an option per chunk, composed by simulate_pipeline.
struct PipelineComposition {
  std::vector<int> choice;  // per chunk (pipeline_chunks order): index into its options
  double step_time_s = 0;   // the composition's step: the slowest rank's end
  std::int64_t peak_allocated_bytes = 0;  // the largest stage allocated peak
  std::int64_t peak_reserved_bytes = 0;   // the largest stage reserved peak (fit)
  bool operator==(const PipelineComposition&) const = default;
};

// The compositions of per-chunk options (`options[c]`: the ways chunk c can run, as
// ChunkTimes; `spec` gives stages, virtual stages, microbatches, schedule and send_s, its
// `chunks` are ignored) that a per-stage choice under a memory threshold makes: per rank,
// the Pareto front of (busy time, reserved peak) over the combinations of its chunks'
// options (busy and peak add up over a rank's chunks); then for every threshold T among
// those peaks, each rank takes its least busy combination with a peak <= T (no composition for
// T when a rank has none). Distinct compositions, by increasing T. With a `limit` (> 0),
// then one more unless already there: every rank at its least busy combination, each rank
// whose simulated stage reserves more than `limit` stepped to its next smaller one until
// none does (none when a rank over the limit has no smaller one); and last, unless already
// there, the fastest composition that fits improved one chunk at a time: each chunk in
// turn takes the option that shortens the simulated step most with every stage within
// `limit`, then (V > 1) each rank's chunks together each combination of its front, for at
// most 2 passes (the least busy ranks do not always make the shortest pipeline); then
// (V > 1) from there two chunks of a rank that both change whether they keep their
// buckets gathered (ChunkTimes::accumulates), each to an option of its own front of (busy
// time, bytes), each improvement followed by one more pass of the above, at most 2
// times. Only strictly shorter steps are kept: never slower than without that last step.
// `out_of_time` (when given) ends those improvements early once it says true (a time
// budget; the compositions of the thresholds and the step-down are always made).
// REQUIRES: options.size() == stages * virtual_stages, every options[c] non-empty.
std::vector<PipelineComposition> pipeline_compositions(
    const PipelineSpec& spec, const std::vector<std::vector<ChunkTimes>>& options,
    std::int64_t limit = 0, const std::function<bool()>& out_of_time = {});

// The PipelineSpec of one composition (spec with chunks[c] = options[c][choice[c]]).
PipelineSpec composed_spec(const PipelineSpec& spec,
                           const std::vector<std::vector<ChunkTimes>>& options,
                           const std::vector<int>& choice);

// The non-dominated points (no other point has allocated peak <=, reserved peak <= and
// step <=), by increasing allocated peak; of equal points the earliest is kept. The
// reserved peak counts: the pick minimizes it, so a plan it picks over a faster one of
// the same allocated peak stays on the front.
std::vector<ParetoPoint> pareto_front(const std::vector<ParetoPoint>& points);

}  // namespace fsdptune
