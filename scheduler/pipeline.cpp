// Pipeline parallelism: chunking, per-chunk FSDP simulation and the microbatch schedule
// (docs/parallelism.md "Pipeline parallelism").
#include "fsdptune/pipeline.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <tuple>

#include "fsdptune/error.hpp"
#include "fsdptune/program.hpp"

namespace fsdptune {

namespace {

// One step's order (pipeline_order with steps 1).
std::vector<PipelineAction> step_order(int stages, int virtual_stages, int microbatches,
                                       PipelineSchedule schedule, int rank) {
  const int P = stages;
  const int V = virtual_stages;
  const int M = microbatches;
  std::vector<PipelineAction> order;
  auto add = [&](int chunk, int microbatch, bool backward) {
    PipelineAction action;
    action.chunk = chunk;
    action.microbatch = microbatch;
    action.backward = backward;
    order.push_back(action);
  };
  switch (schedule) {
    case PipelineSchedule::kGPipe:
      // All forwards, then all backwards (torch.distributed.pipelining's ScheduleGPipe).
      for (int m = 0; m < M; ++m) add(rank, m, false);
      for (int m = 0; m < M; ++m) add(rank, m, true);
      break;
    case PipelineSchedule::k1F1B: {
      // PipeDream-flush (Narayanan et al. 2021): P-1-rank warm-up forwards, then one
      // forward one backward, then the cool-down backwards.
      const int warmup = std::min(P - 1 - rank, M);
      for (int m = 0; m < warmup; ++m) add(rank, m, false);
      for (int i = 0; i < M - warmup; ++i) {
        add(rank, warmup + i, false);
        add(rank, i, true);
      }
      for (int m = M - warmup; m < M; ++m) add(rank, m, true);
      break;
    }
    case PipelineSchedule::kInterleaved1F1B: {
      // Megatron-LM's interleaved schedule (Narayanan et al. 2021, section 2.2) in rounds,
      // as torch.distributed.pipelining's ScheduleInterleaved1F1B runs it: M microbatches
      // in R = max(1, M / P) rounds of B = M / R (validate_pipeline: R divides M; B = P when
      // P divides M, Megatron's case). Virtual microbatch k runs local chunk (k / B) % V of
      // microbatch (k / (B V)) B + k % B; backwards walk the chunks in reverse. Warm-up:
      // 2 (P - rank - 1) + (V - 1) B.
      const int total = M * V;
      const int B = M / std::max(1, M / P);
      auto microbatch_of = [&](int k) { return (k / (B * V)) * B + k % B; };
      auto forward_chunk = [&](int k) { return ((k / B) % V) * P + rank; };
      auto backward_chunk = [&](int k) { return (V - 1 - (k / B) % V) * P + rank; };
      const int warmup = std::min(2 * (P - rank - 1) + (V - 1) * B, total);
      for (int k = 0; k < warmup; ++k) add(forward_chunk(k), microbatch_of(k), false);
      for (int i = 0; i < total - warmup; ++i) {
        add(forward_chunk(warmup + i), microbatch_of(warmup + i), false);
        add(backward_chunk(i), microbatch_of(i), true);
      }
      for (int k = total - warmup; k < total; ++k) add(backward_chunk(k), microbatch_of(k), true);
      break;
    }
  }
  return order;
}

}  // namespace

std::vector<PipelineAction> pipeline_order(int stages, int virtual_stages, int microbatches,
                                           PipelineSchedule schedule, int rank, int steps) {
  std::vector<PipelineAction> order =
      step_order(stages, virtual_stages, microbatches, schedule, rank);
  const std::size_t per_step = order.size();
  order.reserve(per_step * static_cast<std::size_t>(std::max(1, steps)));
  for (int g = 1; g < steps; ++g) {
    for (std::size_t k = 0; k < per_step; ++k) {
      PipelineAction action = order[k];
      action.microbatch += g * microbatches;
      order.push_back(action);
    }
  }
  return order;
}

PipelineResult simulate_pipeline(const PipelineSpec& spec) {
  const int P = spec.stages;
  const int C = spec.stages * spec.virtual_stages;
  const int M = spec.microbatches;
  const int G = spec.steps;
  FSDPTUNE_CHECK(P >= 1 && M >= 1 && G >= 1 && static_cast<int>(spec.chunks.size()) == C,
                 "simulate_pipeline: one ChunkTimes per chunk");
  constexpr double kPending = -1;
  // End times of every action, by (chunk, microbatch of all steps): -1 until it has run.
  const int total = M * G;
  std::vector<double> forward_end(static_cast<std::size_t>(C) * total, kPending);
  std::vector<double> backward_end(static_cast<std::size_t>(C) * total, kPending);
  auto at = [&](int chunk, int m) { return static_cast<std::size_t>(chunk) * total + m; };

  PipelineResult result;
  result.stages.resize(P);
  std::vector<std::size_t> next(P, 0);
  std::vector<double> free_at(P, 0.0);  // each rank's last action's end
  // When each rank's last reduce-scatters are done: its next action starts no earlier
  // (reduce_scatter_wait_s).
  std::vector<double> reduced_at(P, 0.0);
  // How long each rank was held up by those waits alone: not bubble (its own exposed
  // communication, not the schedule's idle time).
  std::vector<double> held_s(P, 0.0);
  for (int r = 0; r < P; ++r) {
    result.stages[r].rank = r;
    result.stages[r].actions = pipeline_order(P, spec.virtual_stages, M, spec.schedule, r, G);
  }
  // Sends cross ranks unless both chunks are on the same one (P == 1); between chunks c
  // and c + 1 over link c mod P.
  const auto send_s = [&](int c) {
    if (P == 1) return 0.0;
    return spec.link_send_s.empty() ? spec.send_s
                                    : spec.link_send_s[static_cast<std::size_t>(c % P)];
  };
  std::size_t remaining = static_cast<std::size_t>(2) * C * total;
  while (remaining > 0) {
    bool progressed = false;
    for (int r = 0; r < P; ++r) {
      StageResult& stage = result.stages[r];
      // Run every action of this rank whose inputs are ready, in the rank's order.
      while (next[r] < stage.actions.size()) {
        PipelineAction& action = stage.actions[next[r]];
        const int c = action.chunk;
        const int m = action.microbatch;
        const ChunkTimes& times = spec.chunks[c];
        double ready = 0;
        if (!action.backward) {
          if (c > 0) {
            if (forward_end[at(c - 1, m)] < 0) break;
            ready = forward_end[at(c - 1, m)] + send_s(c - 1);
          }
        } else {
          if (forward_end[at(c, m)] < 0) break;
          ready = forward_end[at(c, m)];
          if (c + 1 < C) {
            if (backward_end[at(c + 1, m)] < 0) break;
            ready = std::max(ready, backward_end[at(c + 1, m)] + send_s(c));
          }
        }
        double duration = 0;
        if (!action.backward) {
          duration = m % M == 0 ? times.first_forward_s : times.forward_s;
        } else {
          duration = m % M == M - 1 ? times.last_backward_s : times.backward_s;
        }
        action.start_s = std::max({ready, free_at[r], reduced_at[r]});
        held_s[r] += action.start_s - std::max(ready, free_at[r]);
        action.end_s = action.start_s + duration;
        free_at[r] = action.end_s;
        if (action.backward && backward_reduce_scatters(times, m, M)) {
          reduced_at[r] = action.end_s + reduce_scatter_wait_s(times);
        }
        stage.busy_s += duration;
        (action.backward ? backward_end : forward_end)[at(c, m)] = action.end_s;
        ++next[r];
        --remaining;
        progressed = true;
      }
    }
    FSDPTUNE_CHECK(progressed, "pipeline schedule deadlocked");
  }

  double makespan = 0;
  double busy = 0;
  for (StageResult& stage : result.stages) {
    stage.pipeline_end_s = free_at[stage.rank];
    makespan = std::max(makespan, stage.pipeline_end_s);
    stage.held_s = held_s[stage.rank];
    busy += stage.busy_s + stage.held_s;
    // Each chunk's reduce-scatters follow its last backward; the optimizers of the rank's
    // chunks run after all of them and after the rank's last action, one after another on
    // the compute stream (torchtitan steps the optimizers after the pipeline schedule; the
    // executor replays them so). An interleaved rank's earlier-ending chunk does not step
    // beside its other chunks' backwards.
    double optimizers_from_s = stage.pipeline_end_s;
    double optimizers_s = 0;
    for (int c = stage.rank; c < C; c += P) {
      const ChunkTimes& times = spec.chunks[c];
      optimizers_from_s = std::max(optimizers_from_s,
                                   backward_end[at(c, total - 1)] + reduce_scatter_wait_s(times));
      optimizers_s += times.optimizer_s;
    }
    stage.end_s = optimizers_from_s + optimizers_s;
    // Microbatches in flight: forwarded, not yet backwarded.
    int in_flight = 0;
    for (const PipelineAction& action : stage.actions) {
      in_flight += action.backward ? -1 : 1;
      stage.max_in_flight = std::max(stage.max_in_flight, in_flight);
    }
    // Memory: the rank's actions in order, each holding what it leaves and peaking while
    // it runs (a backward's reduce-scatters end before the next action starts).
    const StageMemory memory = stage_memory(spec, stage.rank, stage.actions);
    stage.peak_allocated_bytes = memory.peak_allocated_bytes;
    stage.peak_reserved_bytes = memory.peak_reserved_bytes;
    result.step_time_s = std::max(result.step_time_s, stage.end_s);
  }
  // At least 0: the stages' busy times, summed action by action, can round a little past
  // the makespan they add up to when nothing is idle. One stage (gradient accumulation)
  // runs its actions back to back: no bubble, not the 1e-16 rounding leaves (found by QA).
  if (makespan > 0 && P > 1) {
    result.bubble_fraction = std::max(0.0, 1.0 - busy / (static_cast<double>(P) * makespan));
  }
  return result;
}

std::vector<CommGroup> pipeline_link_groups(const JobSpec& job) {
  const std::int64_t stride = std::max<std::int64_t>(1, job.dp_replicate) *
                              std::max<std::int64_t>(1, job.dp_shard) *
                              std::max<std::int64_t>(1, job.tp);
  const std::int64_t node = std::max<std::int64_t>(1, job.gpus_per_node);
  const std::int64_t P = std::max<std::int64_t>(1, job.pp);
  std::vector<CommGroup> links;
  for (std::int64_t r = 0; r < P; ++r) {
    // Ranks q of the lower stage pair with q + d: some pair straddles a node boundary when
    // the node of the lowest q differs from that of the highest q + d.
    const std::int64_t low = std::min(r, (r + 1) % P);
    const std::int64_t d = std::abs((r + 1) % P - r) * stride;
    const bool crosses = ((low + 1) * stride - 1 + d) / node > (low * stride) / node;
    links.push_back(CommGroup{2, crosses ? 1 : 2});
  }
  return links;
}

namespace {

// What the forward phase (the tasks up to the last forward compute task) leaves allocated
// for the backward phase: the net of its memory events.
std::int64_t forward_phase_held_bytes(const Program& program) {
  const int last_forward = last_forward_task(program);
  std::int64_t held = 0;
  for (const Task& task : program.tasks) {
    if (task.id > last_forward) break;
    for (const MemoryEvent& event : task.memory) held += event.bytes;
  }
  return held;
}

// A unit's standalone seconds: compute (+ TP) forward, recompute + backward, and one
// microbatch's gradient accumulation (0 without microbatches).
struct UnitTimes {
  double forward_s = 0;
  double backward_s = 0;
  double accumulate_s = 0;
};

// chunk_times with the units' seconds from `unit_seconds(u)` (UnitTimes).
template <typename UnitSeconds>
ChunkTimes chunk_times_with(const Workload& chunk, const Program& program, const SimResult& result,
                            bool keep_gathered, const UnitSeconds& unit_seconds) {
  const JobSpec& job = chunk.job;
  FSDPTUNE_CHECK(result.timings.size() == program.tasks.size(), "chunk_times needs timings");
  ChunkTimes times;
  double accumulate_s = 0;
  double forward_end = 0, backward_end = 0;
  for (const Task& task : program.tasks) {
    const TaskTiming& timing = result.timings[task.id];
    if (task.kind == TaskKind::kForward) forward_end = std::max(forward_end, timing.end_s);
    if (task.kind == TaskKind::kBackward) backward_end = std::max(backward_end, timing.end_s);
  }
  times.first_forward_s = forward_end;
  times.last_backward_s = backward_end - forward_end;
  times.tail_s = result.step_time_s - backward_end;
  // What of the tail follows the reduce-scatters (and every other task): the optimizer.
  double before_optimizer = backward_end;
  for (const Task& task : program.tasks) {
    if (task.kind != TaskKind::kOptimizer) {
      before_optimizer = std::max(before_optimizer, result.timings[task.id].end_s);
    }
  }
  times.optimizer_s = std::clamp(result.step_time_s - before_optimizer, 0.0, times.tail_s);
  times.accumulates = chunk_accumulates(job, keep_gathered);
  for (std::size_t u = 0; u < chunk.units.size(); ++u) {
    const Unit& unit = chunk.units[u];
    times.activation_bytes += unit.saved_activation_bytes;
    if (!keep_gathered) continue;
    const UnitTimes seconds = unit_seconds(u);
    times.forward_s += seconds.forward_s;
    times.backward_s += seconds.backward_s;
    // Each backward adds its gradient into the accumulated one (the last before its
    // reduce-scatter), as FSDP2 does with gradient sync off and the executor replays it.
    if (times.accumulates) accumulate_s += seconds.accumulate_s;
    // Unsharded gradients held from the first backward to the reduce-scatters when
    // microbatches accumulate, in the reduce dtype: FSDP2 casts a parameter's unsharded
    // gradient to reduce_dtype before accumulating into it when the two differ
    // (FSDPParam.to_accumulated_grad_if_needed), so with torchtitan's bf16 params and
    // fp32 reduction they are held in fp32, twice the param-dtype gradient a single
    // microbatch's Program allocates: Unit::gradient_bytes (padded, reduce dtype).
    if (times.accumulates) times.accumulated_gradient_bytes += unit.gradient_bytes();
  }
  if (times.accumulates) {
    times.accumulate_s = accumulate_s;
    times.backward_s += accumulate_s;
    times.last_backward_s += accumulate_s;
  }
  if (!keep_gathered) {
    // Every microbatch runs the whole Program: its gathers, its compute, its
    // reduce-scatters (their exposed part, the tail less the optimizer, waited for after
    // every backward: reduce_scatter_wait_s).
    times.forward_s = times.first_forward_s;
    times.backward_s = times.last_backward_s;
    // ...and holds from its forward to its backward what the forward phase leaves
    // allocated: its saved activations and the unsharded copies of the buckets its plan
    // keeps gathered after forward (reshard_after_forward false), one copy per microbatch
    // in flight, as the executor replays it.
    times.activation_bytes = std::max(times.activation_bytes, forward_phase_held_bytes(program));
  }
  times.base_peak_allocated_bytes = result.peak_allocated_bytes;
  times.base_peak_reserved_bytes = result.peak_reserved_bytes;
  times.memory = chunk_memory(job, program, result.timings, times.accumulates);
  return times;
}

// One memory event of an action, where the chunk's simulated timeline applies it.
struct TimedEvent {
  double time_s = 0;
  // At one instant the simulator applies the ends of tasks that started earlier (order 0),
  // then starts (order 1, phase 0); a task that takes no time ends then too (order 1,
  // phase 1), before the tasks that depend on it start (their ids are higher).
  int order = 0;
  int task = 0;
  int phase = 0;
  MemoryEvent event;
  // Its place in the timeline; events of one key are one batch of one task.
  auto key() const { return std::tie(time_s, order, task, phase); }
};

// The ActionMemory of `events` in their timeline order, the peak sampled after each task's
// start or end (as the simulator notes memory), reserved as `options` estimate it.
ActionMemory action_memory(std::vector<TimedEvent> events, const SimOptions& options) {
  std::sort(events.begin(), events.end(),
            [](const TimedEvent& a, const TimedEvent& b) { return a.key() < b.key(); });
  ActionMemory memory;
  MemoryBreakdown level{};
  std::int64_t sharded_rounded = 0, transient_rounded = 0;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const MemoryEvent& event = events[i].event;
    memory.held_bytes += event.bytes;
    const std::int64_t rounded = round_to_segment(event.bytes, options.allocator_segment_bytes);
    (event.category == MemoryCategory::kShardedState ? sharded_rounded : transient_rounded) +=
        rounded;
    level[static_cast<int>(event.category)] += event.bytes;
    const bool batch_ends = i + 1 == events.size() || events[i + 1].key() != events[i].key();
    if (!batch_ends) continue;
    if (memory.held_bytes > memory.peak_bytes) {
      memory.peak_bytes = memory.held_bytes;
      memory.peak_breakdown = level;
    }
    const std::int64_t reserved =
        reserved_estimate_bytes(sharded_rounded, transient_rounded, options);
    if (reserved > memory.peak_reserved_bytes) {
      memory.peak_reserved_bytes = reserved;
      memory.peak_reserved_sharded_rounded_bytes = sharded_rounded;
      memory.peak_reserved_transient_rounded_bytes = transient_rounded;
    }
  }
  memory.held_breakdown = level;
  memory.held_sharded_rounded_bytes = sharded_rounded;
  memory.held_transient_rounded_bytes = transient_rounded;
  return memory;
}

}  // namespace

ChunkMemory chunk_memory(const JobSpec& job, const Program& program,
                         const std::vector<TaskTiming>& timings, bool accumulates,
                         const SimOptions& options) {
  FSDPTUNE_CHECK(timings.size() == program.tasks.size(), "chunk_memory needs timings");
  const ChunkActionEvents tracked(program);
  const auto timed = [&](const ChunkActionScope* scope, const std::vector<int>& tasks) {
    std::vector<TimedEvent> events;
    for (const int id : tasks) {
      const Task& task = program.tasks[static_cast<std::size_t>(id)];
      const TaskTiming& timing = timings[static_cast<std::size_t>(id)];
      for (const MemoryEvent& event : task.memory) {
        const TrackedEvents applied =
            scope != nullptr ? tracked(*scope, task, event) : TrackedEvents::one(event);
        for (const MemoryEvent& at : applied) {
          const bool earlier_start = timing.start_s < timing.end_s;
          const int order = at.at_end && earlier_start ? 0 : 1;
          const int phase = at.at_end ? 1 : 0;
          events.push_back({at.at_end ? timing.end_s : timing.start_s, order, id, phase, at});
        }
      }
    }
    return action_memory(std::move(events), options);
  };
  return chunk_memory_with(job, program, accumulates, timed);
}

ChunkTimes chunk_times(const Workload& chunk, const Program& program, const SimResult& result,
                       bool keep_gathered, const CostModel& costs) {
  const bool async_tp = chunk.job.async_tp;
  return chunk_times_with(chunk, program, result, keep_gathered, [&](std::size_t u) {
    const Unit& unit = chunk.units[u];
    return UnitTimes{tp_ops_seconds(unit.forward_ops, async_tp, costs),
                     tp_ops_seconds(unit.recompute_ops, async_tp, costs) +
                         tp_ops_seconds(unit.backward_ops, async_tp, costs),
                     chunk.job.microbatches > 1
                         ? costs.compute(gradient_accumulation_op(unit, chunk.job)).seconds
                         : 0.0};
  });
}

ChunkTimes chunk_times(const Workload& chunk, const Program& program, const SimResult& result,
                       bool keep_gathered, const ComputeCosts& compute) {
  return chunk_times_with(chunk, program, result, keep_gathered, [&](std::size_t u) {
    return UnitTimes{compute.forward_s[u], compute.recompute_s[u] + compute.backward_s[u],
                     compute.accumulate_s[u]};
  });
}

std::int64_t peak_in_flight_bytes(int stages, int virtual_stages, int microbatches,
                                  PipelineSchedule schedule, int rank,
                                  const std::vector<std::int64_t>& activation_bytes) {
  std::int64_t bytes = 0, peak = 0;
  for (const PipelineAction& action :
       pipeline_order(stages, virtual_stages, microbatches, schedule, rank)) {
    const std::int64_t chunk_bytes = activation_bytes.at(static_cast<std::size_t>(action.chunk));
    bytes += action.backward ? -chunk_bytes : chunk_bytes;
    peak = std::max(peak, bytes);
  }
  return peak;
}

std::int64_t largest_stage_peak_bytes(const PipelineResult& result) {
  std::int64_t peak = 0;
  for (const StageResult& stage : result.stages) peak = std::max(peak, stage.peak_allocated_bytes);
  return peak;
}

std::int64_t largest_stage_reserved_bytes(const PipelineResult& result) {
  std::int64_t peak = 0;
  for (const StageResult& stage : result.stages) peak = std::max(peak, stage.peak_reserved_bytes);
  return peak;
}

std::int64_t transient_reserved_bytes(std::int64_t bytes, double fragmentation) {
  return std::llround((1.0 + fragmentation) * static_cast<double>(bytes));
}

std::int64_t chunk_base_reserved_bytes(const ChunkTimes& times, double fragmentation) {
  return times.base_peak_reserved_bytes -
         transient_reserved_bytes(times.activation_bytes, fragmentation) +
         transient_reserved_bytes(times.accumulated_gradient_bytes, fragmentation);
}

bool stage_fits(const StageResult& stage, std::int64_t memory_limit_bytes) {
  // As plan_fits: the reserved estimate is what runs out of memory.
  return stage.peak_reserved_bytes <= memory_limit_bytes;
}

bool pipeline_fits(const PipelineResult& result, std::int64_t memory_limit_bytes) {
  return std::all_of(result.stages.begin(), result.stages.end(), [&](const StageResult& stage) {
    return stage_fits(stage, memory_limit_bytes);
  });
}

PipelineSimulation simulate_pipelined_programs(const Workload& workload, const CostModel& costs,
                                               std::vector<Plan> plans,
                                               std::vector<Program> programs,
                                               const std::vector<bool>& keep_gathered,
                                               const SimOptions& options) {
  std::vector<Workload> chunk_workloads;
  for (const std::vector<int>& units : pipeline_chunks(workload)) {
    chunk_workloads.push_back(chunk_workload(workload, units));
  }
  return simulate_pipelined_programs(workload, std::move(chunk_workloads), nullptr, costs,
                                     std::move(plans), std::move(programs), keep_gathered, options);
}

PipelineSimulation simulate_pipelined_programs(const Workload& workload,
                                               std::vector<Workload> chunk_workloads,
                                               const std::vector<ComputeCosts>* chunk_compute,
                                               const CostModel& costs, std::vector<Plan> plans,
                                               std::vector<Program> programs,
                                               const std::vector<bool>& keep_gathered,
                                               const SimOptions& options) {
  const JobSpec& job = workload.job;
  PipelineSimulation sim;
  sim.chunk_units = pipeline_chunks(workload);
  const std::size_t chunk_count = sim.chunk_units.size();
  FSDPTUNE_CHECK(plans.size() == chunk_count && programs.size() == chunk_count &&
                     keep_gathered.size() == chunk_count && chunk_workloads.size() == chunk_count &&
                     (chunk_compute == nullptr || chunk_compute->size() == chunk_count),
                 "simulate_pipelined_programs: one plan, program and choice per chunk");
  sim.spec = pipeline_spec_of(job);
  SimOptions chunk_options = options;
  chunk_options.record_timings = true;
  for (std::size_t c = 0; c < chunk_count; ++c) {
    const Workload& chunk = chunk_workloads[c];
    SimResult result = simulate(programs[c], chunk_options);
    sim.spec.chunks.push_back(
        chunk_compute != nullptr
            ? chunk_times(chunk, programs[c], result, keep_gathered[c], (*chunk_compute)[c])
            : chunk_times(chunk, programs[c], result, keep_gathered[c], costs));
    if (!options.record_timings) result.timings.clear();
    sim.chunk_results.push_back(std::move(result));
  }
  sim.chunk_workloads = std::move(chunk_workloads);
  sim.chunk_plans = std::move(plans);
  sim.chunk_programs = std::move(programs);
  sim.chunk_keep_gathered = keep_gathered;
  set_pipeline_sends(workload, costs, sim.spec);
  sim.result = simulate_pipeline(sim.spec);
  fill_pipeline_throughput(job, static_cast<double>(workload.tokens_per_step()),
                           workload.model_flops_per_step(), costs.hardware(), sim);
  return sim;
}

std::vector<double> pipeline_link_send_seconds(const Workload& workload, const CostModel& costs) {
  const std::int64_t bytes = pipeline_send_bytes(workload);
  std::vector<double> seconds;
  for (const CommGroup& group : pipeline_link_groups(workload.job)) {
    seconds.push_back(costs.collective(CollectiveKind::kSendRecv, bytes, group).seconds);
  }
  return seconds;
}

double pipeline_send_seconds(const Workload& workload, const CostModel& costs) {
  PipelineSpec spec;
  set_pipeline_sends(workload, costs, spec);
  return spec.send_s;
}

void set_pipeline_sends(const Workload& workload, const CostModel& costs, PipelineSpec& spec) {
  spec.link_send_s = pipeline_link_send_seconds(workload, costs);
  // One stage sends nothing (simulate_pipeline's rule; `send_s` was the price of a send no
  // job makes).
  spec.send_s = workload.job.pp > 1
                    ? *std::max_element(spec.link_send_s.begin(), spec.link_send_s.end())
                    : 0.0;
}

void fill_pipeline_throughput(const JobSpec& job, double tokens_per_step,
                              double model_flops_per_step, const HardwareSpec& hardware,
                              PipelineSimulation& sim) {
  // Op FLOPs are already per TP rank; the stages split the model.
  const StepThroughput throughput =
      step_throughput(job, tokens_per_step, model_flops_per_step / static_cast<double>(job.pp),
                      hardware, sim.result.step_time_s);
  sim.tokens_per_s_per_gpu = throughput.tokens_per_s_per_gpu;
  sim.mfu = throughput.mfu;
}

PipelineSimulation simulate_pipelined_plans(const Workload& workload, const CostModel& costs,
                                            const std::vector<Plan>& plans,
                                            const std::vector<bool>& keep_gathered,
                                            const SimOptions& options) {
  const std::vector<std::vector<int>> chunks = pipeline_chunks(workload);
  FSDPTUNE_CHECK(plans.size() == chunks.size() && keep_gathered.size() == chunks.size(),
                 "simulate_pipelined_plans: one plan and choice per chunk");
  std::vector<Plan> lowered_plans;
  std::vector<Program> programs;
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    const Workload chunk = chunk_workload(workload, chunks[c]);
    Plan plan = plans[c];
    set_keep_gathered(plan, workload.job, keep_gathered[c]);
    programs.push_back(lower(chunk, plan, costs));
    lowered_plans.push_back(std::move(plan));
  }
  return simulate_pipelined_programs(workload, costs, std::move(lowered_plans), std::move(programs),
                                     keep_gathered, options);
}

PipelineSimulation simulate_pipelined_job(const Workload& workload, const CostModel& costs,
                                          const ChunkPlanner& planner, const SimOptions& options) {
  std::vector<Plan> plans;
  for (const std::vector<int>& units : pipeline_chunks(workload)) {
    plans.push_back(planner(chunk_workload(workload, units)));
  }
  const std::vector<bool> keep(plans.size(), default_keep_gathered(workload.job));
  return simulate_pipelined_plans(workload, costs, plans, keep, options);
}

}  // namespace fsdptune
