// The tuner per pipeline stage (docs/parallelism.md "Tuning a pipelined job").
#include "fsdptune/pipeline_tuner.hpp"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "fsdptune/error.hpp"
#include "fsdptune/pipeline_bounds.hpp"
#include "fsdptune/plans.hpp"
#include "fsdptune/program.hpp"

namespace fsdptune {
namespace {

// One way to run a chunk: a plan, whether its parameters stay gathered across
// microbatches, and what that costs.
struct ChunkCandidate {
  Plan plan;
  bool keep_gathered = true;
  Program program;
  ChunkTimes times;
};

ChunkCandidate evaluate_candidate(const Workload& chunk, Plan plan, bool keep_gathered,
                                  const CostModel& costs) {
  ChunkCandidate candidate;
  if (keep_gathered) {
    std::fill(plan.reshard_after_forward.begin(), plan.reshard_after_forward.end(), false);
  }
  candidate.keep_gathered = keep_gathered;
  candidate.program = lower(chunk, plan, costs);
  candidate.plan = std::move(plan);
  SimOptions options;
  options.record_timeline = false;
  const SimResult result = simulate(candidate.program, options);
  candidate.times = chunk_times(chunk, candidate.program, result, keep_gathered, costs);
  return candidate;
}

}  // namespace

PipelineTuning tune_pipelined_job(const Workload& workload, const CostModel& costs,
                                  const TunerOptions& options) {
  const JobSpec& job = workload.job;
  validate_pipeline(job);
  const int P = static_cast<int>(job.pp);
  const int V = static_cast<int>(job.virtual_stages);
  const int M = static_cast<int>(job.microbatches);
  PipelineTuning tuning;
  tuning.memory_limit_bytes = options.memory_limit_bytes > 0
                                  ? options.memory_limit_bytes
                                  : default_memory_limit_bytes(costs.hardware());
  const std::int64_t limit = tuning.memory_limit_bytes;
  const std::vector<std::vector<int>> chunks = pipeline_chunks(workload);
  const int C = static_cast<int>(chunks.size());

  std::vector<Workload> chunk_workloads;
  std::vector<std::int64_t> activation_bytes;
  for (const std::vector<int>& units : chunks) {
    chunk_workloads.push_back(chunk_workload(workload, units));
    std::int64_t bytes = 0;
    for (const Unit& unit : chunk_workloads.back().units) bytes += unit.saved_activation_bytes;
    activation_bytes.push_back(bytes);
  }
  std::vector<std::int64_t> in_flight_bytes(P);
  for (int r = 0; r < P; ++r) {
    in_flight_bytes[r] = peak_in_flight_bytes(P, V, M, job.pp_schedule, r, activation_bytes);
  }

  // 1. Each chunk tuned alone (one microbatch, the plan as it is: no gradient
  //    accumulation) under its share of its rank's memory: the limit less the rank's
  //    peak of activations in flight, split evenly over its V chunks, plus the one
  //    microbatch the chunk's own Program holds.
  std::vector<std::vector<ChunkCandidate>> candidates(C);
  for (int c = 0; c < C; ++c) {
    const int rank = c % P;
    const std::int64_t budget =
        std::max<std::int64_t>(1, (limit - in_flight_bytes[rank]) / V + activation_bytes[c]);
    tuning.chunk_memory_limit_bytes.push_back(budget);
    TunerOptions chunk_options = options;
    chunk_options.memory_limit_bytes = budget;
    if (options.time_budget_s > 0) chunk_options.time_budget_s = options.time_budget_s / C;
    TunerResult tuned = Tuner(chunk_options).tune(chunk_workloads[c], costs);
    tuning.plans_evaluated += tuned.plans_evaluated;
    tuning.budget_exhausted = tuning.budget_exhausted || tuned.budget_exhausted;
    // 2. The candidates: the tuned plan, plans of the chunk's own Pareto front
    //    (one microbatch: peak against step) and fsdp2, each run per microbatch or with
    //    its parameters kept gathered across microbatches (the same thing when M == 1,
    //    where only the reshard choice of the tuned plan differs).
    std::vector<Plan> plans = {tuned.best_plan};
    // At most kFrontPlans of the front, evenly spread over it (both ends included), so
    // that the candidates stay few on long fronts.
    constexpr std::size_t kFrontPlans = 8;
    const std::size_t front = tuned.pareto_plans.size();
    for (std::size_t k = 0; k < std::min(front, kFrontPlans); ++k) {
      const std::size_t at = front <= kFrontPlans ? k : k * (front - 1) / (kFrontPlans - 1);
      Plan plan = tuned.pareto_plans[at];
      plan.name = "tuned";
      plans.push_back(std::move(plan));
    }
    plans.push_back(fsdp2_plan(chunk_workloads[c]));
    for (const Plan& plan : plans) {
      for (const bool keep : {false, true}) {
        ChunkCandidate candidate = evaluate_candidate(chunk_workloads[c], plan, keep, costs);
        const bool duplicate = std::any_of(
            candidates[c].begin(), candidates[c].end(), [&](const ChunkCandidate& other) {
              return other.plan == candidate.plan && other.keep_gathered == keep;
            });
        if (!duplicate) candidates[c].push_back(std::move(candidate));
      }
    }
    tuning.chunk_tunings.push_back(std::move(tuned));
  }

  // 3. The compositions of the candidates under every per-stage memory threshold
  //    (pipeline_compositions): the fastest whose largest stage peak fits; when none
  //    fits, the smallest peak.
  PipelineSpec spec;
  spec.stages = P;
  spec.virtual_stages = V;
  spec.microbatches = M;
  spec.schedule = job.pp_schedule;
  spec.send_s = pipeline_send_seconds(workload, costs);
  std::vector<std::vector<ChunkTimes>> options_times(C);
  for (int c = 0; c < C; ++c) {
    for (const ChunkCandidate& candidate : candidates[c]) {
      options_times[c].push_back(candidate.times);
    }
  }
  const std::vector<PipelineComposition> compositions = pipeline_compositions(spec, options_times);
  FSDPTUNE_CHECK(!compositions.empty(), "tune_pipelined_job: no composition");
  std::size_t pick = 0;
  for (std::size_t k = 1; k < compositions.size(); ++k) {
    const PipelineComposition& a = compositions[k];
    const PipelineComposition& b = compositions[pick];
    const bool a_fits = a.peak_allocated_bytes <= limit;
    const bool b_fits = b.peak_allocated_bytes <= limit;
    if (a_fits != b_fits ? a_fits
                         : (a_fits ? a.step_time_s < b.step_time_s
                                   : a.peak_allocated_bytes < b.peak_allocated_bytes)) {
      pick = k;
    }
  }
  const std::vector<int>& chosen = compositions[pick].choice;

  // 4. Compose; keep the fsdp2 composition when it is at least as good.
  std::vector<Plan> plans;
  std::vector<Program> programs;
  std::vector<bool> keep;
  for (int c = 0; c < C; ++c) {
    const ChunkCandidate& candidate = candidates[c][chosen[c]];
    plans.push_back(candidate.plan);
    programs.push_back(candidate.program);
    keep.push_back(candidate.keep_gathered);
  }
  SimOptions sim_options;
  sim_options.record_timeline = false;
  tuning.best = simulate_pipelined_programs(workload, costs, std::move(plans), std::move(programs),
                                            keep, sim_options);
  tuning.fsdp2 = simulate_pipelined_job(
      workload, costs, [](const Workload& chunk) { return fsdp2_plan(chunk); }, sim_options);
  tuning.derived_from = "per-stage tuner";
  const bool best_fits = pipeline_fits(tuning.best.result, limit);
  const bool fsdp2_fits = pipeline_fits(tuning.fsdp2.result, limit);
  if (fsdp2_fits &&
      (!best_fits || tuning.fsdp2.result.step_time_s <= tuning.best.result.step_time_s)) {
    tuning.best = tuning.fsdp2;
    tuning.derived_from = "fsdp2";
  }
  tuning.fits = pipeline_fits(tuning.best.result, limit);

  // 5. The Pareto front (docs/tuner.md "Pipelined jobs"): the schedule's own composition
  //    first (labelled "tuned"; ties keep it), fsdp2's, then every composition of step 3.
  std::vector<ParetoPoint> points = {
      {tuning.best.result.step_time_s, largest_stage_peak_bytes(tuning.best.result), "tuned"},
      {tuning.fsdp2.result.step_time_s, largest_stage_peak_bytes(tuning.fsdp2.result), "fsdp2"}};
  for (std::size_t k = 0; k < compositions.size(); ++k) {
    points.push_back({compositions[k].step_time_s, compositions[k].peak_allocated_bytes,
                      fmt::format("composition #{}", k)});
  }
  tuning.pareto = pareto_front(points);
  tuning.lower_bound_s = pipeline_step_lower_bound(workload, costs);
  return tuning;
}

}  // namespace fsdptune
