// The lower bound and the compositions of a pipelined job (docs/tuner.md "Pipelined jobs").
#include "fsdptune/pipeline_bounds.hpp"

#include <algorithm>
#include <limits>
#include <optional>
#include <set>
#include <utility>

#include "fsdptune/error.hpp"
#include "fsdptune/plans.hpp"
#include "fsdptune/program.hpp"
#include "fsdptune/tuner.hpp"

namespace fsdptune {

ChunkTimes chunk_time_lower_bounds(const Workload& chunk, const CostModel& costs) {
  return chunk_time_lower_bounds(compute_costs(chunk, costs),
                                 lower(chunk, fsdp2_plan(chunk), costs), costs);
}

ChunkTimes chunk_time_lower_bounds(const ComputeCosts& compute, const Program& program,
                                   const CostModel& costs) {
  double forward_s = 0, backward_s = 0;
  for (std::size_t u = 0; u < compute.forward_s.size(); ++u) {
    forward_s += compute.forward_s[u];
    backward_s += compute.recompute_s[u] + compute.backward_s[u];
  }
  // fsdp2 has a bucket per unit: each unit's collective bytes, and the group, from its
  // tasks. No collective at all (one rank): nothing to wait for.
  const UnitCollectives unit =
      unit_collectives(program, static_cast<int>(compute.forward_s.size()));
  const double first_gather_s =
      least_bucketed_comm(costs, CollectiveKind::kAllGather, unit.gather_bytes, unit.gather_group)
          .first_s;
  const double first_reduce_s = least_bucketed_comm(costs, CollectiveKind::kReduceScatter,
                                                    unit.reduce_bytes, unit.reduce_group)
                                    .first_s;
  ChunkTimes times;
  times.first_forward_s = forward_s + first_gather_s;
  times.forward_s = forward_s;
  times.backward_s = times.last_backward_s = backward_s;
  times.tail_s = first_reduce_s + compute.optimizer_s;
  times.optimizer_s = compute.optimizer_s;  // not waited for after a backward
  return times;
}

double pipeline_step_lower_bound(const Workload& workload, const CostModel& costs) {
  std::vector<ComputeCosts> chunk_compute;
  std::vector<Program> chunk_fsdp2_programs;
  std::vector<double> chunk_step_bounds_s;
  for (const std::vector<int>& units : pipeline_chunks(workload)) {
    const Workload chunk = chunk_workload(workload, units);
    chunk_compute.push_back(compute_costs(chunk, costs));
    chunk_fsdp2_programs.push_back(lower(chunk, fsdp2_plan(chunk), costs));
    chunk_step_bounds_s.push_back(step_time_lower_bound(chunk, costs));
  }
  return pipeline_step_lower_bound(workload, chunk_compute, chunk_fsdp2_programs,
                                   chunk_step_bounds_s, costs);
}

double pipeline_step_lower_bound(const Workload& workload,
                                 const std::vector<ComputeCosts>& chunk_compute,
                                 const std::vector<Program>& chunk_fsdp2_programs,
                                 const std::vector<double>& chunk_step_bounds_s,
                                 const CostModel& costs) {
  FSDPTUNE_CHECK(chunk_compute.size() == chunk_step_bounds_s.size() &&
                     chunk_fsdp2_programs.size() == chunk_step_bounds_s.size(),
                 "pipeline_step_lower_bound: compute, fsdp2 program and step bound per chunk");
  const JobSpec& job = workload.job;
  PipelineSpec spec = pipeline_spec_of(job);
  set_pipeline_sends(workload, costs, spec);
  for (std::size_t c = 0; c < chunk_compute.size(); ++c) {
    spec.chunks.push_back(
        chunk_time_lower_bounds(chunk_compute[c], chunk_fsdp2_programs[c], costs));
    // Kept gathered (the fewest waits): a reduce-scatter wait per pipeline step only.
    spec.chunks.back().accumulates = chunk_accumulates(job, true);
  }
  const std::vector<double>& chunk_step_bound_s = chunk_step_bounds_s;
  // (a) The schedule at the least durations.
  const PipelineResult least = simulate_pipeline(spec);
  double bound_s = least.step_time_s;
  // (b) Per chunk: its first forward's earliest start, its one-microbatch step bound, the
  // other microbatches' compute (of every pipeline step).
  const double later = static_cast<double>(spec.microbatches * spec.steps - 1);
  for (const StageResult& stage : least.stages) {
    for (const PipelineAction& action : stage.actions) {
      if (action.backward || action.microbatch != 0) continue;
      const ChunkTimes& times = spec.chunks[action.chunk];
      bound_s = std::max(bound_s, action.start_s + chunk_step_bound_s[action.chunk] +
                                      later * (times.forward_s + times.backward_s));
    }
  }
  return bound_s;
}

PipelineSpec composed_spec(const PipelineSpec& spec,
                           const std::vector<std::vector<ChunkTimes>>& options,
                           const std::vector<int>& choice) {
  PipelineSpec composed = spec;
  composed.chunks.clear();
  for (std::size_t c = 0; c < options.size(); ++c) {
    composed.chunks.push_back(options[c].at(static_cast<std::size_t>(choice.at(c))));
  }
  return composed;
}

namespace {

// A combination of one rank's chunk options: what simulate_pipeline adds up for it.
struct RankCombination {
  double busy_s = 0;  // every microbatch's forward and backward, and the tails
  // Its chunks' reserved peaks (what fits is judged on) less their one microbatch of
  // activations, plus the gradients they accumulate.
  std::int64_t base_bytes = 0;
  std::vector<int> picks;  // option per chunk of the rank, in chunk order
};

// Non-dominated in (base_bytes, busy_s), by increasing bytes (so decreasing busy time).
std::vector<RankCombination> prune(std::vector<RankCombination> combinations) {
  std::stable_sort(combinations.begin(), combinations.end(),
                   [](const RankCombination& a, const RankCombination& b) {
                     return a.base_bytes != b.base_bytes ? a.base_bytes < b.base_bytes
                                                         : a.busy_s < b.busy_s;
                   });
  std::vector<RankCombination> front;
  for (RankCombination& combination : combinations) {
    if (front.empty() || combination.busy_s < front.back().busy_s) {
      front.push_back(std::move(combination));
    }
  }
  return front;
}

// Whether `choice` is one of `compositions`' already.
bool known(const std::vector<PipelineComposition>& compositions, const std::vector<int>& choice) {
  return std::any_of(
      compositions.begin(), compositions.end(),
      [&](const PipelineComposition& composition) { return composition.choice == choice; });
}

}  // namespace

std::vector<PipelineComposition> pipeline_compositions(
    const PipelineSpec& spec, const std::vector<std::vector<ChunkTimes>>& options,
    std::int64_t limit, const std::function<bool()>& out_of_time) {
  const int P = spec.stages;
  const int C = spec.stages * spec.virtual_stages;
  const double later = static_cast<double>(spec.microbatches - 1);
  const double steps = static_cast<double>(spec.steps);
  FSDPTUNE_CHECK(static_cast<int>(options.size()) == C, "pipeline_compositions: options per chunk");
  std::vector<std::int64_t> activation_bytes;
  for (const std::vector<ChunkTimes>& chunk : options) {
    FSDPTUNE_CHECK(!chunk.empty(), "pipeline_compositions: a chunk without options");
    // The saved activations are the same for every option; a re-gathered option whose
    // plan keeps buckets gathered holds their copies per microbatch in flight too
    // (ChunkTimes::activation_bytes): the peak in flight takes the least over the
    // options, and an option's excess over it is counted once in its base (exact for a
    // chunk with one microbatch in flight at a time, the only one whose tuned options
    // keep buckets gathered; a lower estimate otherwise, as the thresholds are without
    // the tails' overlap: simulate_pipeline judges each composition).
    std::int64_t least = chunk.front().activation_bytes;
    for (const ChunkTimes& times : chunk) least = std::min(least, times.activation_bytes);
    activation_bytes.push_back(least);
  }
  // Each option alone: what it adds to its rank's busy time and bytes. Every pipeline step
  // runs each microbatch's forward and backward, each backward but the last followed by
  // its reduce-scatters' wait where every one reduce-scatters, and the last one's; the
  // last step the optimizer too.
  std::vector<std::vector<RankCombination>> alone(static_cast<std::size_t>(C));
  // Per chunk, its options non-dominated alone (pick: the option), by increasing bytes.
  std::vector<std::vector<RankCombination>> chunk_fronts(static_cast<std::size_t>(C));
  for (int c = 0; c < C; ++c) {
    for (std::size_t o = 0; o < options[c].size(); ++o) {
      const ChunkTimes& times = options[c][o];
      const double wait_s = times.accumulates ? 0.0 : reduce_scatter_wait_s(times);
      RankCombination option;
      option.busy_s =
          steps * (times.first_forward_s + later * (times.forward_s + times.backward_s + wait_s) +
                   times.last_backward_s + reduce_scatter_wait_s(times)) +
          times.optimizer_s;
      option.base_bytes =
          chunk_base_reserved_bytes(times, spec.allocator_fragmentation) +
          transient_reserved_bytes(times.activation_bytes, spec.allocator_fragmentation) -
          transient_reserved_bytes(activation_bytes[static_cast<std::size_t>(c)],
                                   spec.allocator_fragmentation);
      option.picks = {static_cast<int>(o)};
      alone[c].push_back(std::move(option));
    }
    chunk_fronts[c] = prune(alone[c]);
  }
  // Per rank: its peak of activations in flight and the front of its chunks'
  // combinations, built one chunk at a time (a combination's busy time and bytes are sums
  // over its chunks).
  // Both as reserved, as simulate_pipeline estimates a stage's reserved peak.
  std::vector<std::int64_t> in_flight_reserved(P);
  std::vector<std::vector<RankCombination>> fronts(P);
  for (int r = 0; r < P; ++r) {
    in_flight_reserved[r] =
        transient_reserved_bytes(peak_in_flight_bytes(P, spec.virtual_stages, spec.microbatches,
                                                      spec.schedule, r, activation_bytes),
                                 spec.allocator_fragmentation);
    std::vector<RankCombination> front(1);
    for (int c = r; c < C; c += P) {
      std::vector<RankCombination> extended;
      for (const RankCombination& partial : front) {
        for (std::size_t o = 0; o < options[c].size(); ++o) {
          RankCombination next = partial;
          next.busy_s += alone[c][o].busy_s;
          next.base_bytes += alone[c][o].base_bytes;
          next.picks.push_back(static_cast<int>(o));
          extended.push_back(std::move(next));
        }
      }
      front = prune(std::move(extended));
    }
    fronts[r] = std::move(front);
  }
  std::vector<std::int64_t> thresholds;
  for (int r = 0; r < P; ++r) {
    for (const RankCombination& combination : fronts[r]) {
      thresholds.push_back(in_flight_reserved[r] + combination.base_bytes);
    }
  }
  std::sort(thresholds.begin(), thresholds.end());
  thresholds.erase(std::unique(thresholds.begin(), thresholds.end()), thresholds.end());

  std::vector<PipelineComposition> compositions;
  const auto add = [&](std::vector<int> choice, const PipelineResult& result) {
    PipelineComposition composition;
    composition.choice = std::move(choice);
    composition.step_time_s = result.step_time_s;
    composition.peak_allocated_bytes = largest_stage_peak_bytes(result);
    composition.peak_reserved_bytes = largest_stage_reserved_bytes(result);
    compositions.push_back(std::move(composition));
  };
  for (const std::int64_t threshold : thresholds) {
    std::vector<int> choice(static_cast<std::size_t>(C), 0);
    bool complete = true;
    for (int r = 0; r < P && complete; ++r) {
      // The front is by increasing bytes and decreasing busy time: the last one under the
      // threshold is the least busy.
      const RankCombination* pick = nullptr;
      for (const RankCombination& combination : fronts[r]) {
        if (in_flight_reserved[r] + combination.base_bytes <= threshold) pick = &combination;
      }
      if (pick == nullptr) {
        complete = false;
        break;
      }
      for (int c = r, k = 0; c < C; c += P, ++k) choice[c] = pick->picks[k];
    }
    if (!complete) continue;
    if (!compositions.empty() && compositions.back().choice == choice) continue;
    add(choice, simulate_pipeline(composed_spec(spec, options, choice)));
  }
  if (limit <= 0) return compositions;
  // Under a limit, also each rank stepped down its own front from its least busy
  // combination, only while its stage's simulated peak is over the limit: one threshold
  // for every rank lowers the ranks that fit along with the one that does not (405B,
  // TP 8 x PP 8, 16 microbatches under 53.5 GiB at any timing: 21.758 s picked where the
  // stages each at their own least busy fitting combination make 21.669 s or less).
  std::vector<std::size_t> at(static_cast<std::size_t>(P));
  for (int r = 0; r < P; ++r) at[r] = fronts[r].size() - 1;
  while (true) {
    std::vector<int> choice(static_cast<std::size_t>(C), 0);
    for (int r = 0; r < P; ++r) {
      for (int c = r, k = 0; c < C; c += P, ++k) choice[c] = fronts[r][at[r]].picks[k];
    }
    const PipelineResult result = simulate_pipeline(composed_spec(spec, options, choice));
    bool over = false, stuck = false;
    for (const StageResult& stage : result.stages) {
      if (stage.peak_reserved_bytes <= limit) continue;
      over = true;
      if (at[stage.rank] == 0) {
        stuck = true;
      } else {
        --at[stage.rank];
      }
    }
    if (stuck) break;
    if (!over) {
      if (!known(compositions, choice)) add(std::move(choice), result);
      break;
    }
  }
  // Then the fastest fitting composition improved one chunk at a time: the thresholds and
  // the step-down pick each rank's least busy combination, not the shortest pipeline (a
  // stage's forwards can sit on the critical path while its backwards wait), so each chunk
  // in turn tries its other options, keeping the one that shortens the step most while
  // every stage fits, then each rank's chunks together its front's combinations, until a
  // pass changes nothing (at most kDescentPasses).
  std::optional<std::size_t> start;
  for (std::size_t k = 0; k < compositions.size(); ++k) {
    const PipelineComposition& composition = compositions[k];
    if (composition.peak_reserved_bytes <= limit &&
        (!start || composition.step_time_s < compositions[*start].step_time_s)) {
      start = k;
    }
  }
  if (!start) return compositions;
  constexpr int kDescentPasses = 2;
  std::vector<int> choice = compositions[*start].choice;
  double best_s = compositions[*start].step_time_s;
  std::optional<PipelineResult> best;
  bool improved = false;
  // Every choice simulated so far: one that did not fit or was no shorter stays so, since
  // best_s only decreases (the second pass tried its first pass's rejects again).
  std::set<std::vector<int>> tried;
  for (const PipelineComposition& composition : compositions) tried.insert(composition.choice);
  // `trial` simulated: kept when every stage fits and the step is strictly shorter (a tie
  // keeps the earlier choice: deterministic, no cycling).
  const auto try_choice = [&](const std::vector<int>& trial) {
    // Out of time: no more trials (found by QA: 405B on PP 16 with 65536 microbatches ran
    // 30 s under --time-budget 2, each trial a whole pipeline's simulation).
    if (out_of_time && out_of_time()) return;
    if (!tried.insert(trial).second) return;
    PipelineResult result = simulate_pipeline(composed_spec(spec, options, trial));
    if (largest_stage_reserved_bytes(result) > limit || result.step_time_s >= best_s) return;
    best_s = result.step_time_s;
    best = std::move(result);
    choice = trial;
    improved = true;
  };
  // Each chunk in turn to each of its options, then (V > 1) a rank's chunks together to
  // each combination of its front (a move one chunk at a time can miss: two chunks of a
  // rank trading which one keeps its buckets).
  const auto local_pass = [&] {
    for (int c = 0; c < C; ++c) {
      std::vector<int> trial = choice;
      for (std::size_t o = 0; o < options[c].size(); ++o) {
        trial[c] = static_cast<int>(o);
        try_choice(trial);
      }
    }
    if (spec.virtual_stages == 1) return;
    for (int r = 0; r < P; ++r) {
      for (const RankCombination& combination : fronts[r]) {
        std::vector<int> trial = choice;
        for (int c = r, k = 0; c < C; c += P, ++k) trial[c] = combination.picks[k];
        try_choice(trial);
      }
    }
  };
  // Two chunks of a rank that both change whether they keep their buckets gathered, each
  // to an option non-dominated alone: the rank's front sums busy times and drops a
  // combination that can make the shorter pipeline, one whose busier chunk sits off the
  // critical path (QA, 2026-12-05: Llama 3 8B on 32 GPUs, PP 4 interleaved, 8
  // microbatches, seq 2048 under 22.4 GiB: 587.1 ms, where the last rank's output chunk
  // keeping its buckets gathered instead of its other chunk makes 570.4 ms).
  const auto swap_pass = [&] {
    for (int r = 0; r < P; ++r) {
      for (int c1 = r; c1 < C; c1 += P) {
        for (int c2 = c1 + P; c2 < C; c2 += P) {
          const std::vector<int> from = choice;
          for (const RankCombination& first : chunk_fronts[c1]) {
            const int o1 = first.picks.front();
            if (options[c1][o1].accumulates == options[c1][from[c1]].accumulates) continue;
            for (const RankCombination& second : chunk_fronts[c2]) {
              const int o2 = second.picks.front();
              if (options[c2][o2].accumulates == options[c2][from[c2]].accumulates) continue;
              std::vector<int> trial = choice;
              trial[c1] = o1;
              trial[c2] = o2;
              try_choice(trial);
            }
          }
        }
      }
    }
  };
  for (int pass = 0; pass < kDescentPasses; ++pass) {
    improved = false;
    local_pass();
    if (!improved) break;
  }
  // Then the swaps from that optimum, each improvement followed by a local pass: only
  // strictly shorter steps are kept, so the result is never slower than the local
  // passes' alone.
  for (int pass = 0; pass < kDescentPasses && spec.virtual_stages > 1; ++pass) {
    improved = false;
    swap_pass();
    if (!improved) break;
    local_pass();
  }
  if (best && !known(compositions, choice)) add(std::move(choice), *best);
  return compositions;
}

std::vector<ParetoPoint> pareto_front(const std::vector<ParetoPoint>& points) {
  std::vector<ParetoPoint> front;
  for (std::size_t i = 0; i < points.size(); ++i) {
    const ParetoPoint& point = points[i];
    bool dominated = false;
    for (std::size_t j = 0; j < points.size() && !dominated; ++j) {
      const ParetoPoint& other = points[j];
      if (j == i) continue;
      const bool no_worse = other.peak_allocated_bytes <= point.peak_allocated_bytes &&
                            other.peak_reserved_bytes <= point.peak_reserved_bytes &&
                            other.step_time_s <= point.step_time_s;
      const bool equal = other.peak_allocated_bytes == point.peak_allocated_bytes &&
                         other.peak_reserved_bytes == point.peak_reserved_bytes &&
                         other.step_time_s == point.step_time_s;
      // Strictly better somewhere, or equal and earlier.
      dominated = no_worse && (!equal || j < i);
    }
    if (!dominated) front.push_back(point);
  }
  std::stable_sort(front.begin(), front.end(), [](const ParetoPoint& a, const ParetoPoint& b) {
    return a.peak_allocated_bytes < b.peak_allocated_bytes;
  });
  return front;
}

}  // namespace fsdptune
