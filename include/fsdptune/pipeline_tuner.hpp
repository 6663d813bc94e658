// The tuner per pipeline stage (docs/parallelism.md "Tuning a pipelined job"): each
// chunk's FSDP plan is searched with the Tuner (tuner.hpp) under the memory its rank can
// give it, each chunk chooses whether its parameters stay gathered across microbatches,
// and the step time is the pipeline composition (simulate_pipelined_programs). fsdp2 per
// chunk with parameters kept gathered (what simulate_pipelined_job does by default) is a
// candidate like any other: when it fits, the result is no slower than it beyond the step
// tolerance (TunerOptions::step_time_tolerance), and slower only while reserving less.
// Pure: no I/O.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fsdptune/cost_model.hpp"
#include "fsdptune/pipeline.hpp"
#include "fsdptune/tuner.hpp"
#include "fsdptune/workload.hpp"

namespace fsdptune {

struct PipelineTuning {
  PipelineSimulation best;   // the chosen plans, composed
  PipelineSimulation fsdp2;  // the baseline: fsdp2 per chunk, parameters kept gathered
  // "per-stage tuner", "fsdp2", or where fsdp2 does not fit and --keep-gathered allows the
  // other choice, "fsdp2 kept gathered" / "fsdp2 re-gathered per microbatch".
  std::string derived_from;
  // The reserved peak each chunk's one-microbatch Program was first tuned under: the
  // rank's limit less the activations of its other microbatches in flight, shared by its
  // chunks; and those searches, one per chunk, pipeline_chunks order. (The searches under
  // the headroom a pick leaves, docs/tuner.md "Pipelined jobs", add candidates only.)
  std::vector<std::int64_t> chunk_memory_limit_bytes;
  std::vector<TunerResult> chunk_tunings;
  std::int64_t memory_limit_bytes = 0;  // per GPU, against each stage's reserved peak
  // pipeline_fits(best.result, memory_limit_bytes); with TunerOptions::fit_at_any_timing,
  // every stage's reserved peak at any timing (best_any_timing) within the limit.
  bool fits = false;
  // With fit_at_any_timing: pipeline_any_timing of best and of fsdp2, by rank (what their
  // fit was judged by); empty otherwise.
  std::vector<StageAnyTiming> best_any_timing;
  std::vector<StageAnyTiming> fsdp2_any_timing;
  std::int64_t plans_evaluated = 0;  // all chunks' simulations, the headroom's searches too
  // Some chunk's search was cut short by time, or no time was left for the headroom's.
  bool budget_exhausted = false;
  bool max_evaluations_reached = false;  // some chunk's search stopped at max_evaluations
  // Whole-pipeline points (step_time_s: the composition's step; peak_allocated_bytes: its
  // largest stage allocated peak), non-dominated, by increasing peak: the chosen
  // composition ("tuned"), fsdp2 per chunk ("fsdp2") and every composition of the
  // candidates under a per-stage memory threshold ("composition #k",
  // pipeline_compositions). docs/tuner.md "Pipelined jobs".
  std::vector<ParetoPoint> pareto;
  double lower_bound_s = 0;  // pipeline_step_lower_bound(workload, costs)
  bool operator==(const PipelineTuning&) const = default;
};

// `options.memory_limit_bytes` (0: the hardware default) is the per-GPU limit; the time
// budget is shared evenly by the chunks' first searches, and what they leave by the
// headroom's; max_evaluations applies per chunk search.
// REQUIRES: validate_pipeline(workload.job) passed.
PipelineTuning tune_pipelined_job(const Workload& workload, const CostModel& costs,
                                  const TunerOptions& options);

// The stored chunk Programs of a pipeline schedule (version 2) simulated as they are: what
// `simulate --plan schedule.json` replays of a schedule that pipeline_schedule wrote.
// REQUIRES: schedule.pipeline, read for `workload` (schedule_from_json checked it).
PipelineSimulation replay_pipeline_schedule(const ScheduleFile& schedule, const Workload& workload,
                                            const CostModel& costs, const SimOptions& options);

}  // namespace fsdptune
