// The tuner per pipeline stage (docs/parallelism.md "Tuning a pipelined job").
#include "fsdptune/pipeline_tuner.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "fsdptune/error.hpp"
#include "fsdptune/memory_bound.hpp"
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
  ChunkTimes times;
  // With TunerOptions::fit_at_any_timing: what its Program holds at any timing beyond
  // times' peaks (chunk_any_timing_excess); zero otherwise.
  ChunkAnyTimingExcess excess;
};

// Lowers and simulates the candidates of one chunk the tuner's way (Lowerer and
// SimWorkspace reused, no task names: the same SimResult as lower() +
// simulate()).
// Not copyable: the lowerer refers to `chunk`, which must outlive it.
class ChunkEvaluator {
 public:
  ChunkEvaluator(const Workload& chunk, const CostModel& costs, bool any_timing)
      : chunk_(&chunk), lowerer_(chunk, costs), any_timing_(any_timing) {
    options_.record_timeline = false;
  }

  // `shared_in_flight`: several microbatches of the chunk are in flight at once on its
  // rank. A chunk re-gathered per microbatch then reshards every bucket after forward: a
  // bucket kept gathered from one microbatch's forward to its backward would be shared by
  // the later microbatches' forwards (FSDP2 skips the gather of an unsharded module) and
  // re-gathered in their backwards, which the one-microbatch Program has no task for; the
  // replay gathers a copy per microbatch instead (docs/validation.md, "re-gathering").
  ChunkCandidate evaluate(Plan plan, bool keep_gathered, bool shared_in_flight) {
    ChunkCandidate candidate;
    set_keep_gathered(plan, chunk_->job, keep_gathered);
    if (shared_in_flight && !keep_gathered) {
      std::fill(plan.reshard_after_forward.begin(), plan.reshard_after_forward.end(), true);
    }
    candidate.keep_gathered = keep_gathered;
    lowerer_.lower_for_simulation(plan, program_);
    candidate.plan = std::move(plan);
    const SimResult result = simulate(program_, options_, workspace_);
    candidate.times = chunk_times(*chunk_, program_, result, keep_gathered, lowerer_.compute());
    if (any_timing_) {
      candidate.excess = chunk_any_timing_excess(chunk_->job, program_, candidate.times);
    }
    return candidate;
  }

  // The full Program of a plan (names and buffer slots: what a schedule file stores),
  // equal to lower(chunk, plan, costs).
  Program lower(const Plan& plan) { return lowerer_.lower(plan); }
  const ComputeCosts& compute() const { return lowerer_.compute(); }

 private:
  const Workload* chunk_;
  Lowerer lowerer_;
  Program program_;
  SimWorkspace workspace_;
  SimOptions options_;
  bool any_timing_;
};

// `times` with its one-microbatch peaks raised by `excess` and its actions' memory at any
// timing: what the compositions judge under --fit any-timing (the stage peaks then are
// pipeline_any_timing's).
ChunkTimes at_any_timing(ChunkTimes times, const ChunkAnyTimingExcess& excess) {
  times.base_peak_allocated_bytes += excess.allocated_bytes;
  times.base_peak_reserved_bytes += excess.reserved_bytes;
  times.memory = excess.memory;
  return times;
}

// The most microbatches of chunk `c` in flight at once (forwarded, not yet backwarded) in
// its rank's action order.
int chunk_max_in_flight(const std::vector<PipelineAction>& order, int c) {
  int in_flight = 0, most = 0;
  for (const PipelineAction& action : order) {
    if (action.chunk != c) continue;
    in_flight += action.backward ? -1 : 1;
    most = std::max(most, in_flight);
  }
  return most;
}

// The fastest composition whose largest stage fits `limit`; when none fits, the one with
// the smallest peak.
std::size_t fastest_composition(const std::vector<PipelineComposition>& compositions,
                                std::int64_t limit) {
  std::size_t pick = 0;
  for (std::size_t k = 1; k < compositions.size(); ++k) {
    const PipelineComposition& a = compositions[k];
    const PipelineComposition& b = compositions[pick];
    const bool a_fits = a.peak_reserved_bytes <= limit;
    const bool b_fits = b.peak_reserved_bytes <= limit;
    if (a_fits != b_fits ? a_fits
                         : (a_fits ? a.step_time_s < b.step_time_s
                                   : a.peak_reserved_bytes < b.peak_reserved_bytes)) {
      pick = k;
    }
  }
  return pick;
}

// Of the compositions that fit within the step-time tolerance of the fastest, and no
// slower than `cap_s` (a fitting fsdp2's step: the tolerance stops there, as at a fitting
// baseline for one Program), the one whose largest stage reserves the least
// (TunerOptions::step_time_tolerance); the fastest's pick when none fits or none is
// within.
std::size_t pick_composition(const std::vector<PipelineComposition>& compositions,
                             std::int64_t limit, double step_time_tolerance, double cap_s) {
  std::size_t pick = fastest_composition(compositions, limit);
  if (compositions[pick].peak_reserved_bytes > limit) return pick;
  const double within_s =
      std::min(compositions[pick].step_time_s * (1 + step_time_tolerance), cap_s);
  for (std::size_t k = 0; k < compositions.size(); ++k) {
    const PipelineComposition& a = compositions[k];
    const PipelineComposition& b = compositions[pick];
    if (a.peak_reserved_bytes > limit || a.step_time_s > within_s) continue;
    if (leaner_within_tolerance(a.peak_reserved_bytes, a.step_time_s, b.peak_reserved_bytes,
                                b.step_time_s)) {
      pick = k;
    }
  }
  return pick;
}

}  // namespace

PipelineTuning tune_pipelined_job(const Workload& workload, const CostModel& costs,
                                  const TunerOptions& options) {
  const JobSpec& job = workload.job;
  validate_pipeline(job);
  FSDPTUNE_CHECK(options.start_plans.empty(),
                 "tune_pipelined_job: start plans are for a single Program (TunerOptions)");
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
  // Reserved, as fit is judged (transient_reserved_bytes: the allocator's inflation).
  const double fragmentation = PipelineSpec{}.allocator_fragmentation;
  std::vector<std::int64_t> in_flight_reserved(P);
  for (int r = 0; r < P; ++r) {
    in_flight_reserved[r] = transient_reserved_bytes(
        peak_in_flight_bytes(P, V, M, job.pp_schedule, r, activation_bytes), fragmentation);
  }

  // 1. Each chunk tuned alone (one microbatch, the plan as it is: no gradient
  //    accumulation) under its share of its rank's memory: the limit less the rank's
  //    peak of activations in flight, split evenly over its V chunks, plus the one
  //    microbatch the chunk's own Program holds.
  std::vector<std::vector<ChunkCandidate>> candidates(C);
  std::vector<bool> shared_in_flight(static_cast<std::size_t>(C));
  std::vector<ChunkEvaluator> evaluators;
  evaluators.reserve(static_cast<std::size_t>(C));  // they refer to chunk_workloads
  for (int c = 0; c < C; ++c) {
    evaluators.emplace_back(chunk_workloads[c], costs, options.fit_at_any_timing);
    shared_in_flight[c] =
        chunk_max_in_flight(pipeline_order(P, V, M, job.pp_schedule, c % P), c) > 1;
    tuning.chunk_memory_limit_bytes.push_back(std::max<std::int64_t>(
        1, (limit - in_flight_reserved[c % P]) / V +
               transient_reserved_bytes(activation_bytes[c], fragmentation)));
  }
  // Steps 1 and 2 for the chunks whose budget is given (> 0): each searched under it, its
  // candidates added where new. Their searches, by chunk (empty where not searched).
  // (rank, holds the embedding, units, holds the output) of each chunk searched so far.
  using ChunkShape = std::tuple<int, bool, std::size_t, bool>;
  const auto search_chunks = [&](const std::vector<std::int64_t>& budgets, double time_budget_s) {
    std::vector<TunerResult> tunings(static_cast<std::size_t>(C));
    std::vector<std::pair<ChunkShape, int>> tuned_alike;
    for (int c = 0; c < C; ++c) {
      if (budgets[c] <= 0) continue;
      const int rank = c % P;
      TunerOptions chunk_options = options;
      chunk_options.memory_limit_bytes = budgets[c];
      chunk_options.time_budget_s = time_budget_s;
      // Not the one-partition phase (review, 2026-12-07: on Llama 3 70B on 128 H100s, TP 8 x
      // PP 2, 8 microbatches, --keep-gathered no, seeds 0-3 gave up to 0.6% slower steps
      // with it: a chunk's faster one-microbatch plan is not a faster pipeline).
      chunk_options.one_partition_phase = false;
      // An earlier chunk of this rank of as many blocks, without the embedding or the
      // output, is the same workload up to its names (Llama's blocks are alike) under the
      // same budget: its search is this chunk's (an interleaved rank tuned each of its V
      // chunks).
      const ChunkShape shape{rank, c == 0, chunks[c].size(), c == C - 1};
      const auto alike = std::find_if(
          tuned_alike.begin(), tuned_alike.end(),
          [&](const std::pair<ChunkShape, int>& entry) { return entry.first == shape; });
      TunerResult& tuned = tunings[static_cast<std::size_t>(c)];
      if (alike != tuned_alike.end()) {
        tuned = tunings[static_cast<std::size_t>(alike->second)];
      } else {
        tuned = Tuner(chunk_options).tune(chunk_workloads[c], costs);
        tuning.plans_evaluated += tuned.plans_evaluated;
        tuning.budget_exhausted = tuning.budget_exhausted || tuned.budget_exhausted;
        tuning.max_evaluations_reached =
            tuning.max_evaluations_reached || tuned.max_evaluations_reached;
        tuned_alike.emplace_back(shape, c);
      }
      // 2. The candidates: the tuned plan, plans of the chunk's own Pareto front
      //    (one microbatch: peak against step) and fsdp2, each run per microbatch or with
      //    its parameters kept gathered across microbatches (the same thing when M == 1,
      //    where only the reshard choice of the tuned plan differs); run per microbatch
      //    with several microbatches in flight, every bucket is resharded after forward
      //    (ChunkEvaluator::evaluate).
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
      // The same candidates whatever --fit (SimpleFSDP's unbucketed plan only as the last
      // resort of step 3); fsdp2 not under simplefsdp_exact, which it is not (found by QA
      // and review: pipelined jobs came back with fsdp2 chunks).
      if (!options.simplefsdp_exact) plans.push_back(fsdp2_plan(chunk_workloads[c]));
      for (const Plan& plan : plans) {
        for (const bool keep : allowed_keep_gathered(options.keep_gathered, job)) {
          ChunkCandidate candidate = evaluators[c].evaluate(plan, keep, shared_in_flight[c]);
          const bool duplicate = std::any_of(
              candidates[c].begin(), candidates[c].end(), [&](const ChunkCandidate& other) {
                return other.plan == candidate.plan && other.keep_gathered == keep;
              });
          if (!duplicate) candidates[c].push_back(std::move(candidate));
        }
      }
    }
    return tunings;
  };
  const auto start = std::chrono::steady_clock::now();
  tuning.chunk_tunings = search_chunks(tuning.chunk_memory_limit_bytes,
                                       options.time_budget_s > 0 ? options.time_budget_s / C : 0);

  // fsdp2 per chunk (simulate_pipelined_job's: kept gathered as default_keep_gathered says
  // where options.keep_gathered allows it; the full Programs from the chunks' lowerers,
  // equal to lower()'s): the baseline, and a candidate of the pick (step 4).
  std::vector<ComputeCosts> compute;
  for (int c = 0; c < C; ++c) compute.push_back(evaluators[c].compute());
  SimOptions sim_options;
  sim_options.record_timeline = false;
  // fsdp2 in every chunk, each kept gathered across microbatches or each re-gathered per
  // microbatch (with fsdp2's own resharding, which a candidate re-gathered with several
  // microbatches in flight does not have: ChunkEvaluator::evaluate).
  const auto simulate_fsdp2 = [&](bool kept) {
    std::vector<Plan> fsdp2_plans;
    std::vector<Program> fsdp2_programs;
    for (int c = 0; c < C; ++c) {
      Plan fsdp2 = fsdp2_plan(chunk_workloads[c]);
      set_keep_gathered(fsdp2, job, kept);
      fsdp2_programs.push_back(evaluators[c].lower(fsdp2));
      fsdp2_plans.push_back(std::move(fsdp2));
    }
    return simulate_pipelined_programs(workload, chunk_workloads, &compute, costs,
                                       std::move(fsdp2_plans), std::move(fsdp2_programs),
                                       std::vector<bool>(C, kept), sim_options);
  };
  // The reserved peak a pipeline is judged by: its largest stage's, predicted or (under
  // --fit any-timing) at any timing.
  const auto judged_reserved = [&](const PipelineSimulation& sim) {
    return options.fit_at_any_timing ? largest_any_timing_reserved_bytes(pipeline_any_timing(sim))
                                     : largest_stage_reserved_bytes(sim.result);
  };
  const bool fsdp2_keep = baseline_keep_gathered(options.keep_gathered, job);
  tuning.fsdp2 = simulate_fsdp2(fsdp2_keep);
  // The candidates of step 4: the fsdp2 baseline and, when it does not fit, fsdp2 with the
  // other keep-gathered choice where --keep-gathered allows it (found by QA: tiny on 4
  // GPUs, PP 2, 4 microbatches under 46.3 MiB, where kept gathered nothing fits,
  // `--keep-gathered no` kept fsdp2 re-gathered at 2.404 ms and `any` picked a composition
  // of 2.452 ms).
  struct Alternative {
    const PipelineSimulation* sim;
    std::string name;
    std::int64_t reserved = 0;
  };
  std::vector<Alternative> alternatives;
  alternatives.push_back({&tuning.fsdp2, "fsdp2", judged_reserved(tuning.fsdp2)});
  std::vector<PipelineSimulation> other_fsdp2;
  other_fsdp2.reserve(2);  // at most one more: the alternatives point into it
  if (alternatives.front().reserved > limit) {
    for (const bool kept : allowed_keep_gathered(options.keep_gathered, job)) {
      if (kept == fsdp2_keep) continue;
      other_fsdp2.push_back(simulate_fsdp2(kept));
      alternatives.push_back({&other_fsdp2.back(),
                              kept ? "fsdp2 kept gathered" : "fsdp2 re-gathered per microbatch",
                              judged_reserved(other_fsdp2.back())});
    }
  }
  // Under simplefsdp_exact fsdp2 is simulated and listed, never picked (SimpleFSDP does not
  // run it).
  const auto candidate_alternative = [&](const Alternative& alternative) {
    return alternative.reserved <= limit && !options.simplefsdp_exact;
  };
  const bool an_alternative_fits =
      std::any_of(alternatives.begin(), alternatives.end(), candidate_alternative);

  // 3. The compositions of the candidates under every per-stage memory threshold
  //    (pipeline_compositions): the fastest whose largest stage peak fits; when none
  //    fits, the smallest peak.
  PipelineSpec spec = pipeline_spec_of(job);
  set_pipeline_sends(workload, costs, spec);
  // Under --fit any-timing the compositions are judged by their stages' peaks at any
  // timing (each chunk's actions at any timing of their tasks).
  const auto judged_times = [&] {
    std::vector<std::vector<ChunkTimes>> options_times(C);
    for (int c = 0; c < C; ++c) {
      for (const ChunkCandidate& candidate : candidates[c]) {
        options_times[c].push_back(options.fit_at_any_timing
                                       ? at_any_timing(candidate.times, candidate.excess)
                                       : candidate.times);
      }
    }
    return options_times;
  };
  // The compositions' improvements stop with the time budget (the compositions themselves,
  // the fsdp2 baselines and the pick's simulation are made regardless): then the search
  // says it stopped for time.
  bool cut = false;  // a trial left out for time (review: not merely the clock past it)
  const auto out_of_time = [&] {
    cut = cut || (options.time_budget_s > 0 &&
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >=
                      options.time_budget_s);
    return cut;
  };
  const auto compose = [&] {
    std::vector<PipelineComposition> composed =
        pipeline_compositions(spec, judged_times(), limit, out_of_time);
    if (cut) tuning.budget_exhausted = true;
    return composed;
  };
  std::vector<PipelineComposition> compositions = compose();
  FSDPTUNE_CHECK(!compositions.empty(), "tune_pipelined_job: no composition");
  // The last resort, under either criterion: when neither a composition nor fsdp2 fits,
  // SimpleFSDP's unbucketed plan joins each chunk's candidates (one collective per
  // parameter, prefetching one: little is gathered ahead of its use). It lies outside the
  // tuner's space (no buckets, no FSDP2 configuration, its host-side cost unmeasured;
  // docs/tuner.md), so it is never picked for speed: offered to --fit any-timing alone, it
  // made that criterion pick faster plans than the default (found by QA 2026-12-05).
  // Not under fsdp2_exact (found by review: FSDP2 runs no such plan), where nothing fitting
  // is said instead.
  if (compositions[fastest_composition(compositions, limit)].peak_reserved_bytes > limit &&
      !an_alternative_fits && !fsdp2_only(options, job)) {
    for (int c = 0; c < C; ++c) {
      const Plan none = simplefsdp_none_plan(chunk_workloads[c]);
      for (const bool keep : allowed_keep_gathered(options.keep_gathered, job)) {
        candidates[c].push_back(evaluators[c].evaluate(none, keep, shared_in_flight[c]));
      }
    }
    compositions = compose();
  }
  // 3b. The headroom a pick leaves, interleaved (V > 1; found by QA, 2026-12-05: Llama 3 8B
  //    on 64 GPUs, PP 2 interleaved, 4 microbatches, seq 2048: 566.1 ms under 16 GiB, where
  //    the pick under 22.4 GiB, 540.3 ms, reserves 15.8 GiB). A chunk's budget splits its
  //    rank's memory evenly over its V chunks and counts its whole one-microbatch peak,
  //    while a stage's walk holds one chunk's gathered buckets at a time: the chunks'
  //    searches can stop short of plans whose composition fits. While the fastest
  //    composition that fits leaves a rank at least 1/kHeadroomShare of the limit, that
  //    rank's chunks are searched again with their budgets raised by its headroom, their
  //    candidates join, and the compositions are composed again; they are kept only when
  //    their fastest that fits is strictly shorter (never slower than without this step).
  //    At most kHeadroomRounds rounds. (With V = 1 a chunk's budget is its rank's: on the
  //    README's 405B sweep the searches again made 33 of 273 such jobs shorter, by 0.27% at
  //    most, for about a third more CPU; not done.)
  constexpr int kHeadroomRounds = 2;
  constexpr std::int64_t kHeadroomShare = 32;
  std::vector<std::int64_t> budgets = tuning.chunk_memory_limit_bytes;
  for (int round = 0; V > 1 && round < kHeadroomRounds; ++round) {
    const PipelineComposition& fastest = compositions[fastest_composition(compositions, limit)];
    if (fastest.peak_reserved_bytes > limit) break;
    const PipelineResult walked =
        simulate_pipeline(composed_spec(spec, judged_times(), fastest.choice));
    std::vector<std::int64_t> raised(static_cast<std::size_t>(C), 0);
    bool any_raised = false;
    for (int c = 0; c < C; ++c) {
      const std::int64_t headroom = limit - walked.stages[c % P].peak_reserved_bytes;
      if (headroom < limit / kHeadroomShare) continue;
      raised[c] = budgets[c] + headroom;
      any_raised = true;
    }
    if (!any_raised) break;
    // Within --time-budget: what the searches before left of it, shared by these chunks.
    double time_budget_s = 0;
    if (options.time_budget_s > 0) {
      time_budget_s =
          options.time_budget_s -
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (time_budget_s <= 0) {
        tuning.budget_exhausted = true;  // the search stopped for time
        break;
      }
      time_budget_s /= static_cast<double>(std::count_if(
          raised.begin(), raised.end(), [](std::int64_t budget) { return budget > 0; }));
    }
    std::vector<std::size_t> before;
    for (const std::vector<ChunkCandidate>& chunk : candidates) before.push_back(chunk.size());
    search_chunks(raised, time_budget_s);
    std::vector<PipelineComposition> recomposed = compose();
    const PipelineComposition& shorter = recomposed[fastest_composition(recomposed, limit)];
    if (shorter.peak_reserved_bytes > limit || shorter.step_time_s >= fastest.step_time_s) {
      for (int c = 0; c < C; ++c) {
        candidates[c].erase(candidates[c].begin() + static_cast<std::ptrdiff_t>(before[c]),
                            candidates[c].end());
      }
      break;
    }
    compositions = std::move(recomposed);
    for (int c = 0; c < C; ++c) {
      if (raised[c] > 0) budgets[c] = raised[c];
    }
  }
  // The fastest fsdp2 alternative that fits: the tolerance stops at it (found by QA: a
  // composition 0.03% slower than a fitting fsdp2, reserving 0.1 GiB less, was returned,
  // where README promises nothing slower than a fitting baseline, and `sweep` then kept
  // the row's fsdp2 figures).
  double baseline_s = std::numeric_limits<double>::infinity();
  for (const Alternative& alternative : alternatives) {
    if (candidate_alternative(alternative)) {
      baseline_s = std::min(baseline_s, alternative.sim->result.step_time_s);
    }
  }
  const std::size_t pick =
      pick_composition(compositions, limit, options.step_time_tolerance, baseline_s);
  const std::size_t fastest = fastest_composition(compositions, limit);
  const bool any_fits = compositions[pick].peak_reserved_bytes <= limit;
  const std::vector<int>& chosen = compositions[pick].choice;

  // 4. Compose; weigh the fsdp2 alternatives against it. The tolerance counts from the
  //    fastest of the fitting compositions and alternatives and stops at the fastest
  //    fitting alternative, and of those within it the smaller reservation (then the
  //    faster; fsdp2 on a tie) is kept: the pick is no slower than a fitting fsdp2.
  //    (Comparing fsdp2 with the pick alone kept fsdp2 when the pick was the slower,
  //    smaller one and fsdp2 was faster but larger.)
  std::vector<Plan> plans;
  std::vector<Program> programs;
  std::vector<bool> keep;
  for (int c = 0; c < C; ++c) {
    const ChunkCandidate& candidate = candidates[c][chosen[c]];
    plans.push_back(candidate.plan);
    programs.push_back(evaluators[c].lower(candidate.plan));
    keep.push_back(candidate.keep_gathered);
  }
  tuning.best =
      simulate_pipelined_programs(workload, chunk_workloads, &compute, costs, std::move(plans),
                                  std::move(programs), keep, sim_options);
  tuning.derived_from = "per-stage tuner";
  std::int64_t best_reserved = judged_reserved(tuning.best);
  double fastest_s = tuning.best.result.step_time_s;
  if (any_fits) fastest_s = std::min(fastest_s, compositions[fastest].step_time_s);
  fastest_s = std::min(fastest_s, baseline_s);  // the fastest alternative that fits (if any)
  const double allowed_s = std::min(fastest_s * (1 + options.step_time_tolerance), baseline_s);
  for (const Alternative& alternative : alternatives) {
    if (!candidate_alternative(alternative)) continue;
    const double alternative_s = alternative.sim->result.step_time_s;
    const double best_s = tuning.best.result.step_time_s;
    const bool preferred = alternative.reserved < best_reserved ||
                           (alternative.reserved == best_reserved && alternative_s <= best_s);
    if (best_reserved > limit ||
        (alternative_s <= allowed_s && (best_s > allowed_s || preferred))) {
      tuning.best = *alternative.sim;
      tuning.derived_from = alternative.name;
      best_reserved = alternative.reserved;
    }
  }
  tuning.fits = best_reserved <= limit;
  if (options.fit_at_any_timing) {
    tuning.best_any_timing = pipeline_any_timing(tuning.best);
    tuning.fsdp2_any_timing = pipeline_any_timing(tuning.fsdp2);
  }

  // 5. The Pareto front (docs/tuner.md "Pipelined jobs"): the schedule's own composition
  //    first (labelled "tuned"; ties keep it), fsdp2's, then every composition of step 3.
  std::vector<ParetoPoint> points = {
      {tuning.best.result.step_time_s, largest_stage_peak_bytes(tuning.best.result), "tuned",
       largest_stage_reserved_bytes(tuning.best.result)},
      {tuning.fsdp2.result.step_time_s, largest_stage_peak_bytes(tuning.fsdp2.result), "fsdp2",
       largest_stage_reserved_bytes(tuning.fsdp2.result)}};
  // Not fsdp2 under simplefsdp_exact: SimpleFSDP does not run it (found by review: it
  // dominated the tuned point on the front).
  if (options.simplefsdp_exact) points.pop_back();
  for (std::size_t k = 0; k < compositions.size(); ++k) {
    PipelineComposition predicted = compositions[k];
    if (options.fit_at_any_timing) {
      // The front holds predicted peaks, as every schedule's: the chosen options' own.
      PipelineSpec as_predicted = spec;
      for (int c = 0; c < C; ++c) {
        as_predicted.chunks.push_back(candidates[c][predicted.choice[c]].times);
      }
      const PipelineResult result = simulate_pipeline(as_predicted);
      predicted.peak_allocated_bytes = largest_stage_peak_bytes(result);
      predicted.peak_reserved_bytes = largest_stage_reserved_bytes(result);
    }
    points.push_back({predicted.step_time_s, predicted.peak_allocated_bytes,
                      fmt::format("composition #{}", k), predicted.peak_reserved_bytes});
  }
  tuning.pareto = pareto_front(points);
  // Under --fit any-timing a composition that does not fit at every timing can dominate the
  // tuned one in predicted peaks and step: the tuned point stays on the front (by peak), as
  // the single-Program tuner keeps its chosen point.
  if (std::none_of(tuning.pareto.begin(), tuning.pareto.end(),
                   [](const ParetoPoint& point) { return point.label == "tuned"; })) {
    const auto at =
        std::find_if(tuning.pareto.begin(), tuning.pareto.end(), [&](const ParetoPoint& point) {
          return point.peak_allocated_bytes > points[0].peak_allocated_bytes;
        });
    tuning.pareto.insert(at, points[0]);
  }
  // Every chunk's compute costs (its lowerer's), fsdp2 Program (kept by the fsdp2
  // simulation) and one-microbatch bound (its tuner's) are at hand: not computed again.
  std::vector<double> chunk_bounds_s;
  for (const TunerResult& chunk : tuning.chunk_tunings)
    chunk_bounds_s.push_back(chunk.lower_bound_s);
  tuning.lower_bound_s = pipeline_step_lower_bound(workload, compute, tuning.fsdp2.chunk_programs,
                                                   chunk_bounds_s, costs);
  return tuning;
}

PipelineSimulation replay_pipeline_schedule(const ScheduleFile& schedule, const Workload& workload,
                                            const CostModel& costs, const SimOptions& options) {
  std::vector<Plan> plans;
  std::vector<Program> programs;
  std::vector<bool> keep;
  for (const ScheduleChunk& chunk : schedule.pipeline->chunks) {
    plans.push_back(chunk.plan);
    programs.push_back(chunk.program);
    keep.push_back(chunk.keep_gathered);
  }
  return simulate_pipelined_programs(workload, costs, std::move(plans), std::move(programs), keep,
                                     options);
}

}  // namespace fsdptune
