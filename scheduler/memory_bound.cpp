#include "fsdptune/memory_bound.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "fsdptune/cost_model.hpp"
#include "fsdptune/error.hpp"
#include "fsdptune/hardware.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/simulator.hpp"
#include "fsdptune/workload.hpp"

namespace fsdptune {
namespace {

// Maximum flow by Dinic's algorithm (level graph by BFS, blocking flow by an iterative
// depth-first search with current-arc pointers, so a long chain of events needs no deep
// recursion). Edges come in pairs: e and e ^ 1 are each other's residual.
class MaxFlow {
 public:
  explicit MaxFlow(int nodes) : head_(static_cast<std::size_t>(nodes), -1) {}

  void add_edge(int from, int to, std::int64_t capacity) {
    add_arc(from, to, capacity);
    add_arc(to, from, 0);
  }

  std::int64_t run(int source, int sink) {
    std::int64_t total = 0;
    while (build_levels(source, sink)) total += blocking_flow(source, sink);
    return total;
  }

  // After run(): the nodes reachable from `source` over edges with capacity left, the
  // source side of a minimum cut.
  std::vector<bool> source_side(int source) const {
    std::vector<bool> reached(head_.size(), false);
    std::vector<int> stack{source};
    reached[static_cast<std::size_t>(source)] = true;
    while (!stack.empty()) {
      const int node = stack.back();
      stack.pop_back();
      for (int e = head_[static_cast<std::size_t>(node)]; e != -1; e = next(e)) {
        const int to = arcs_[static_cast<std::size_t>(e)].to;
        if (arcs_[static_cast<std::size_t>(e)].capacity > 0 &&
            !reached[static_cast<std::size_t>(to)]) {
          reached[static_cast<std::size_t>(to)] = true;
          stack.push_back(to);
        }
      }
    }
    return reached;
  }

 private:
  struct Arc {
    int to;
    int next;
    std::int64_t capacity;
  };

  void add_arc(int from, int to, std::int64_t capacity) {
    arcs_.push_back({to, head_[static_cast<std::size_t>(from)], capacity});
    head_[static_cast<std::size_t>(from)] = static_cast<int>(arcs_.size()) - 1;
  }

  int next(int e) const { return arcs_[static_cast<std::size_t>(e)].next; }

  bool build_levels(int source, int sink) {
    level_.assign(head_.size(), -1);
    level_[static_cast<std::size_t>(source)] = 0;
    std::vector<int> queue{source};
    for (std::size_t i = 0; i < queue.size(); ++i) {
      const int node = queue[i];
      for (int e = head_[static_cast<std::size_t>(node)]; e != -1; e = next(e)) {
        const Arc& arc = arcs_[static_cast<std::size_t>(e)];
        if (arc.capacity > 0 && level_[static_cast<std::size_t>(arc.to)] < 0) {
          level_[static_cast<std::size_t>(arc.to)] = level_[static_cast<std::size_t>(node)] + 1;
          queue.push_back(arc.to);
        }
      }
    }
    return level_[static_cast<std::size_t>(sink)] >= 0;
  }

  std::int64_t blocking_flow(int source, int sink) {
    current_ = head_;
    std::int64_t total = 0;
    std::vector<int> path;  // arcs from the source
    int node = source;
    const auto tail = [&] {
      return path.empty() ? source : arcs_[static_cast<std::size_t>(path.back())].to;
    };
    while (true) {
      if (node == sink) {
        std::int64_t push = std::numeric_limits<std::int64_t>::max();
        for (const int e : path) push = std::min(push, arcs_[static_cast<std::size_t>(e)].capacity);
        for (const int e : path) {
          arcs_[static_cast<std::size_t>(e)].capacity -= push;
          arcs_[static_cast<std::size_t>(e ^ 1)].capacity += push;
        }
        total += push;
        // Retreat to the tail of the first saturated arc.
        std::size_t keep = 0;
        while (keep < path.size() && arcs_[static_cast<std::size_t>(path[keep])].capacity > 0) {
          ++keep;
        }
        path.resize(keep);
        node = tail();
        continue;
      }
      int& e = current_[static_cast<std::size_t>(node)];
      while (e != -1) {
        const Arc& arc = arcs_[static_cast<std::size_t>(e)];
        if (arc.capacity > 0 && level_[static_cast<std::size_t>(arc.to)] ==
                                    level_[static_cast<std::size_t>(node)] + 1) {
          break;
        }
        e = next(e);
      }
      if (e == -1) {
        if (node == source) return total;
        level_[static_cast<std::size_t>(node)] = -1;  // a dead end for this phase
        path.pop_back();
        node = tail();
        int& arc = current_[static_cast<std::size_t>(node)];
        arc = next(arc);
        continue;
      }
      path.push_back(e);
      node = arcs_[static_cast<std::size_t>(e)].to;
    }
  }

  std::vector<Arc> arcs_;
  std::vector<int> head_;
  std::vector<int> current_;
  std::vector<int> level_;
};

// The partial order of a Program's memory events (memory_bound.hpp): each task a chain
// of nodes (one that opens it, then its start events in program order, then its end
// events); a task's opening requires the last node of the task before it on its stream and
// of each of its deps. Within a chain only the next node requires a node (other tasks
// require its last), so some heaviest ideal ends each chain's part at a change of sign:
// it would rather take the rest of an allocating run, and leave out a releasing run it
// stopped inside. So each run of same-signed events (zero-byte ones and the opening
// joining either) is one node: fewer nodes and shorter paths for the flow.
struct EventOrder {
  static constexpr int kSource = 0;
  static constexpr int kSink = 1;
  std::vector<MemoryEvent> events;                  // grouped by node, in chain order
  std::vector<int> first_event;                     // per node, and one past the last
  std::vector<int> opens;                           // per task: its first node
  std::vector<int> closes;                          // per task: its last node
  std::vector<std::pair<int, int>> requires_edges;  // (node, node it requires)

  explicit EventOrder(const Program& program)
      : first_event{0, 0},  // the source and sink of the flow: no events
        opens(program.tasks.size()),
        closes(program.tasks.size()) {
    const int stream_count = static_cast<int>(program.streams.size());
    const int task_count = static_cast<int>(program.tasks.size());
    for (const Task& task : program.tasks) {
      FSDPTUNE_CHECK(task.stream >= 0 && task.stream < stream_count, "task on unknown stream");
      int node = static_cast<int>(first_event.size());  // its opening: the next node
      opens[static_cast<std::size_t>(task.id)] = node;
      first_event.push_back(static_cast<int>(events.size()));
      int sign = 0;  // of the current node's run; 0 while it holds no non-zero event
      for (const bool at_end : {false, true}) {
        for (const MemoryEvent& event : task.memory) {
          if (event.at_end != at_end) continue;
          const int event_sign = (event.bytes > 0) - (event.bytes < 0);
          if (event_sign != 0 && sign != 0 && event_sign != sign) {
            requires_edges.emplace_back(node + 1, node);
            ++node;
            first_event.push_back(static_cast<int>(events.size()));
          }
          if (event_sign != 0) sign = event_sign;
          events.push_back(event);
        }
      }
      closes[static_cast<std::size_t>(task.id)] = node;
    }
    first_event.push_back(static_cast<int>(events.size()));
    std::vector<int> previous_on_stream(static_cast<std::size_t>(stream_count), -1);
    for (const Task& task : program.tasks) {
      const int open = opens[static_cast<std::size_t>(task.id)];
      int& previous = previous_on_stream[static_cast<std::size_t>(task.stream)];
      if (previous >= 0) {
        requires_edges.emplace_back(open, closes[static_cast<std::size_t>(previous)]);
      }
      previous = task.id;
      for (const int dep : task.deps) {
        FSDPTUNE_CHECK(dep >= 0 && dep < task_count, "dependency on an unknown task");
        requires_edges.emplace_back(open, closes[static_cast<std::size_t>(dep)]);
      }
    }
  }

  // The nodes, the source and sink included (after construction).
  int node_count() const { return static_cast<int>(first_event.size()) - 1; }

  // Each node's weight: the sum of `weight(event)` over its events.
  template <typename Weight>
  std::vector<std::int64_t> node_weights(const Weight& weight) const {
    std::vector<std::int64_t> weights(static_cast<std::size_t>(node_count()), 0);
    for (std::size_t n = 0; n < weights.size(); ++n) {
      for (int e = first_event[n]; e < first_event[n + 1]; ++e) {
        weights[n] += weight(events[static_cast<std::size_t>(e)]);
      }
    }
    return weights;
  }

  // The heaviest order ideal under `weights` (one per node; the source's and sink's
  // ignored): its weight and membership. A source arc of capacity w to each positive node,
  // an arc of capacity -w from each negative one to the sink, an uncuttable arc from each
  // node to what it requires; the heaviest closure weighs (sum of the positive weights) -
  // (minimum cut) and is the source side of that cut.
  std::pair<std::int64_t, std::vector<bool>> heaviest_ideal(
      const std::vector<std::int64_t>& weights) const {
    const auto nodes = static_cast<std::size_t>(node_count());
    std::int64_t positive = 0;
    for (std::size_t n = 2; n < nodes; ++n) {
      FSDPTUNE_CHECK(weights[n] < std::numeric_limits<std::int64_t>::max() / 4 - positive,
                     "memory event weights overflow the flow's capacities");
      positive += std::max<std::int64_t>(weights[n], 0);
    }
    MaxFlow flow(node_count());
    for (std::size_t n = 2; n < nodes; ++n) {
      if (weights[n] > 0) flow.add_edge(kSource, static_cast<int>(n), weights[n]);
      if (weights[n] < 0) flow.add_edge(static_cast<int>(n), kSink, -weights[n]);
    }
    for (const auto& [node, required] : requires_edges) {
      flow.add_edge(node, required, positive + 1);
    }
    const std::int64_t cut = flow.run(kSource, kSink);
    return {positive - cut, flow.source_side(kSource)};
  }
};

}  // namespace

AnyTimingPeak any_timing_peak(const Program& program) {
  const EventOrder order(program);
  const auto [heaviest, closure] = order.heaviest_ideal(
      order.node_weights([](const MemoryEvent& event) { return event.bytes; }));

  AnyTimingPeak peak;
  peak.peak_allocated_bytes = program.persistent_bytes + heaviest;
  peak.breakdown[static_cast<std::size_t>(MemoryCategory::kShardedState)] =
      program.persistent_bytes;
  for (std::size_t n = 2; n < closure.size(); ++n) {
    if (!closure[n]) continue;
    for (int e = order.first_event[n]; e < order.first_event[n + 1]; ++e) {
      const MemoryEvent& event = order.events[static_cast<std::size_t>(e)];
      peak.breakdown[static_cast<std::size_t>(event.category)] += event.bytes;
    }
  }
  const std::size_t stream_count = program.streams.size();
  peak.running.assign(stream_count, -1);
  peak.ended.assign(stream_count, 0);
  for (const Task& task : program.tasks) {
    const auto id = static_cast<std::size_t>(task.id);
    const bool opened = closure[static_cast<std::size_t>(order.opens[id])];
    const bool closed = closure[static_cast<std::size_t>(order.closes[id])];
    if (closed) ++peak.ended[static_cast<std::size_t>(task.stream)];
    if (opened && !closed) peak.running[static_cast<std::size_t>(task.stream)] = task.id;
  }
  return peak;
}

namespace {

// The reserved bound at any timing and, at the state that reaches it, the segment-rounded
// bytes of the events applied: the sharded state's and the rest's (the persistent bytes
// left out).
struct ReservedAtAnyTiming {
  std::int64_t bytes = 0;
  std::int64_t sharded_rounded_bytes = 0;
  std::int64_t transient_rounded_bytes = 0;
};

ReservedAtAnyTiming reserved_at_any_timing(const Program& program, const SimOptions& options) {
  // The simulator's estimate at a state: persistent + sharded-state events, rounded to
  // segments, plus (1 + fragmentation) x the other events rounded. Each event weighs its
  // whole segments (bytes when segments are off) times kScale, a transient one times
  // (1 + fragmentation) x kScale rounded up: exact for the default 5%, and never below the
  // estimate otherwise, also at a state whose rounded transient sum is negative (frees
  // split unlike their allocations, each rounded up on its own).
  constexpr std::int64_t kScale = 1000;
  const std::int64_t unit = std::max<std::int64_t>(options.allocator_segment_bytes, 1);
  const double factor = (1.0 + options.allocator_fragmentation) * kScale;
  const bool whole_factor = std::abs(factor - std::round(factor)) < 1e-6;
  // |units| below this keeps every weight within 2^52, exact in a double (the flow checks
  // that their sums stay within its capacities).
  const auto largest_units = static_cast<std::int64_t>(
      static_cast<double>(std::int64_t{1} << 52) / std::max(factor, static_cast<double>(kScale)));
  const EventOrder order(program);
  const auto [heaviest, closure] =
      order.heaviest_ideal(order.node_weights([&](const MemoryEvent& event) -> std::int64_t {
        const std::int64_t units = round_to_segment(event.bytes, unit) / unit;
        FSDPTUNE_CHECK(units < largest_units && units > -largest_units,
                       "memory event too large for the reserved bound");
        if (event.category == MemoryCategory::kShardedState) return units * kScale;
        if (whole_factor) return units * std::llround(factor);
        return static_cast<std::int64_t>(std::ceil(factor * static_cast<double>(units)));
      }));
  ReservedAtAnyTiming reserved;
  for (std::size_t n = 2; n < closure.size(); ++n) {
    if (!closure[n]) continue;
    for (int e = order.first_event[n]; e < order.first_event[n + 1]; ++e) {
      const MemoryEvent& event = order.events[static_cast<std::size_t>(e)];
      (event.category == MemoryCategory::kShardedState ? reserved.sharded_rounded_bytes
                                                       : reserved.transient_rounded_bytes) +=
          round_to_segment(event.bytes, options.allocator_segment_bytes);
    }
  }
  const std::int64_t persistent = round_to_segment(program.persistent_bytes, unit);
  // heaviest x unit / kScale in whole bytes, truncated as the simulator truncates its
  // estimate (so equal at the same state), without overflowing: whole and remainder apart.
  const std::int64_t whole = heaviest / kScale;
  const std::int64_t remainder = heaviest % kScale;
  reserved.bytes = persistent + whole * unit + remainder * unit / kScale;
  return reserved;
}

}  // namespace

std::int64_t any_timing_reserved_bytes(const Program& program, const SimOptions& options) {
  return reserved_at_any_timing(program, options).bytes;
}

std::string describe_any_timing_state(const Program& program, const AnyTimingPeak& peak) {
  // The tasks of each stream in program order, to name the last one ended.
  std::vector<std::vector<int>> stream_tasks(program.streams.size());
  for (const Task& task : program.tasks) {
    stream_tasks[static_cast<std::size_t>(task.stream)].push_back(task.id);
  }
  std::string text;
  for (std::size_t s = 0; s < program.streams.size(); ++s) {
    if (!text.empty()) text += ", ";
    text += program.streams[s].name;
    const int running = s < peak.running.size() ? peak.running[s] : -1;
    const int ended = s < peak.ended.size() ? peak.ended[s] : 0;
    if (running >= 0) {
      text += fmt::format(" in \"{}\"", program.tasks[static_cast<std::size_t>(running)].name);
    } else if (ended == 0) {
      text += " not started";
    } else if (ended == static_cast<int>(stream_tasks[s].size())) {
      text += " done";
    } else {
      const int last = stream_tasks[s][static_cast<std::size_t>(ended - 1)];
      text += fmt::format(" after \"{}\"", program.tasks[static_cast<std::size_t>(last)].name);
    }
  }
  return text;
}

namespace {

// The ActionMemory of one kind of action at any timing: its tasks (`tasks`, ascending) as a
// Program of their own, their memory events as the action tracks them (`scope`; every
// event as it is without one), each dependency on a task outside it met before it starts
// (the rank's actions run one after another). Its held bytes are the same at any timing.
ActionMemory any_timing_action(const Program& program, const ChunkActionEvents& tracked,
                               const ChunkActionScope* scope, const std::vector<int>& tasks,
                               const SimOptions& options) {
  Program part;
  part.streams = program.streams;
  part.buckets = program.buckets;
  std::vector<int> index(program.tasks.size(), -1);
  ActionMemory memory;
  for (const int id : tasks) {
    Task task = program.tasks[static_cast<std::size_t>(id)];
    index[static_cast<std::size_t>(id)] = static_cast<int>(part.tasks.size());
    task.id = static_cast<int>(part.tasks.size());
    std::vector<int> deps;
    for (const int dep : task.deps) {
      if (index[static_cast<std::size_t>(dep)] >= 0)
        deps.push_back(index[static_cast<std::size_t>(dep)]);
    }
    task.deps = std::move(deps);
    std::vector<MemoryEvent> events;
    for (const MemoryEvent& event : task.memory) {
      const TrackedEvents applied =
          scope != nullptr ? tracked(*scope, program.tasks[static_cast<std::size_t>(id)], event)
                           : TrackedEvents::one(event);
      for (const MemoryEvent& at : applied) {
        events.push_back(at);
        memory.held_bytes += at.bytes;
        memory.held_breakdown[static_cast<int>(at.category)] += at.bytes;
        (at.category == MemoryCategory::kShardedState ? memory.held_sharded_rounded_bytes
                                                      : memory.held_transient_rounded_bytes) +=
            round_to_segment(at.bytes, options.allocator_segment_bytes);
      }
    }
    task.memory = std::move(events);
    part.tasks.push_back(std::move(task));
  }
  const AnyTimingPeak peak = any_timing_peak(part);
  memory.peak_bytes = peak.peak_allocated_bytes;
  memory.peak_breakdown = peak.breakdown;
  const ReservedAtAnyTiming reserved = reserved_at_any_timing(part, options);
  memory.peak_reserved_bytes = reserved.bytes;
  memory.peak_reserved_sharded_rounded_bytes = reserved.sharded_rounded_bytes;
  memory.peak_reserved_transient_rounded_bytes = reserved.transient_rounded_bytes;
  return memory;
}

}  // namespace

ChunkMemory chunk_any_timing_memory(const JobSpec& job, const Program& program, bool accumulates) {
  const SimOptions options;
  const ChunkActionEvents tracked(program);
  return chunk_memory_with(job, program, accumulates,
                           [&](const ChunkActionScope* scope, const std::vector<int>& tasks) {
                             return any_timing_action(program, tracked, scope, tasks, options);
                           });
}

ChunkAnyTimingExcess chunk_any_timing_excess(const JobSpec& job, const Program& program,
                                             const ChunkTimes& times) {
  // Both bounds are at least the simulated peaks (the simulated order is one of those
  // bounded); the max guards a chunk's times from another simulation.
  ChunkAnyTimingExcess excess{
      std::max<std::int64_t>(
          0, any_timing_peak(program).peak_allocated_bytes - times.base_peak_allocated_bytes),
      std::max<std::int64_t>(0,
                             any_timing_reserved_bytes(program) - times.base_peak_reserved_bytes),
      chunk_any_timing_memory(job, program, times.accumulates)};
  return excess;
}

std::vector<StageAnyTiming> pipeline_any_timing(const PipelineSpec& spec,
                                                const std::vector<StageResult>& stages,
                                                const std::vector<ChunkMemory>& chunk_memory) {
  FSDPTUNE_CHECK(chunk_memory.size() == spec.chunks.size() &&
                     stages.size() == static_cast<std::size_t>(spec.stages),
                 "pipeline_any_timing: a bound per chunk, a stage per rank");
  PipelineSpec any = spec;
  for (std::size_t c = 0; c < chunk_memory.size(); ++c) any.chunks[c].memory = chunk_memory[c];
  std::vector<StageAnyTiming> bounds;
  for (const StageResult& stage : stages) {
    const std::vector<PipelineAction> order =
        !stage.actions.empty() ? stage.actions
                               : pipeline_order(spec.stages, spec.virtual_stages, spec.microbatches,
                                                spec.schedule, stage.rank, spec.steps);
    // The walk's alone: a schedule written before 2026-12-05 stores its stages' composed
    // peaks, which can be above it.
    const StageMemory memory = stage_memory(any, stage.rank, order);
    bounds.push_back({stage.rank, memory.peak_allocated_bytes, memory.peak_reserved_bytes});
  }
  return bounds;
}

std::vector<StageAnyTiming> pipeline_any_timing(const PipelineSimulation& sim) {
  std::vector<ChunkMemory> memory;
  for (std::size_t c = 0; c < sim.chunk_programs.size(); ++c) {
    memory.push_back(chunk_any_timing_memory(sim.chunk_workloads[c].job, sim.chunk_programs[c],
                                             sim.spec.chunks[c].accumulates));
  }
  return pipeline_any_timing(sim.spec, sim.result.stages, memory);
}

std::vector<StageAnyTiming> pipeline_any_timing(const ScheduleFile& schedule) {
  FSDPTUNE_CHECK(schedule.pipeline.has_value(), "pipeline_any_timing of a version 1 schedule");
  const SchedulePipeline& pipeline = *schedule.pipeline;
  const JobSpec& job = schedule.job;
  PipelineSpec spec = pipeline_spec_of(job);
  std::vector<ChunkMemory> memory;
  for (const ScheduleChunk& chunk : pipeline.chunks) {
    spec.chunks.push_back(chunk.times);
    memory.push_back(chunk_any_timing_memory(job, chunk.program, chunk.times.accumulates));
  }
  std::vector<StageResult> stages;
  for (const ScheduleStage& stage : pipeline.stages) {
    StageResult result;
    result.rank = stage.rank;
    result.peak_allocated_bytes = stage.peak_allocated_bytes;
    result.peak_reserved_bytes = stage.peak_reserved_bytes;
    result.actions = stage.actions;
    stages.push_back(result);
  }
  return pipeline_any_timing(spec, stages, memory);
}

std::int64_t largest_any_timing_reserved_bytes(const std::vector<StageAnyTiming>& stages) {
  std::int64_t peak = 0;
  for (const StageAnyTiming& stage : stages) peak = std::max(peak, stage.peak_reserved_bytes);
  return peak;
}

ScheduleFile checked_schedule_from_json(const nlohmann::json& json, const std::string& source) {
  ScheduleFile schedule = schedule_from_json(json, source);
  check_cost_hash(schedule, source);
  check_plan(schedule, source);
  check_prediction(schedule, source);
  return schedule;
}

void check_cost_hash(const ScheduleFile& schedule, const std::string& source) {
  const ScheduleProvenance& provenance = schedule.provenance;
  const std::string& id = schedule.hardware.id;
  const std::vector<std::string> builtin = builtin_hardware_names();
  const bool builtin_source =
      std::find(builtin.begin(), builtin.end(), provenance.cost_source) != builtin.end();
  if (builtin_source && provenance.cost_source != id) {
    throw_bad_input(fmt::format("{}: hardware.id", source),
                    fmt::format("is \"{}\", but the schedule was tuned on \"{}\" "
                                "(provenance.cost_source)",
                                id, provenance.cost_source),
                    "was this schedule edited? Tune again for other hardware");
  }
  if (provenance.cost_source != id || provenance.cost_hash.empty()) return;
  const std::string hash = fnv1a64_hex(dump_json(hardware_to_json(schedule.hardware)));
  if (hash != provenance.cost_hash) {
    throw_bad_input(fmt::format("{}: hardware", source),
                    fmt::format("hashes to {}, but the schedule was tuned on a spec that hashes "
                                "to {} (provenance.cost_hash)",
                                hash, provenance.cost_hash),
                    "was this schedule edited? Tune again for other hardware");
  }
}

void check_plan(const ScheduleFile& schedule, const std::string& source) {
  if (schedule.pipeline) return;
  // The model and job the file holds (its job hash checked by schedule_from_json), costed
  // with its hardware's analytic model: only the costs differ from what tune lowered.
  const Workload workload = build_workload(schedule.model, schedule.job);
  const std::unique_ptr<CostModel> costs = make_analytic_cost_model(schedule.hardware);
  Program lowered = lower(workload, schedule.plan, *costs);
  const Program& stored = schedule.program;
  if (lowered.tasks.size() == stored.tasks.size()) {
    for (std::size_t t = 0; t < lowered.tasks.size(); ++t) {
      lowered.tasks[t].duration_s = stored.tasks[t].duration_s;
    }
  }
  lowered.contention = stored.contention;
  lowered.cost_queries = stored.cost_queries;
  lowered.cost_fallbacks = stored.cost_fallbacks;
  if (lowered == stored) return;
  std::string difference;
  if (lowered.buckets != stored.buckets) {
    difference = fmt::format("{} buckets, the program has {}", lowered.buckets.size(),
                             stored.buckets.size());
    for (std::size_t b = 0; b < std::min(lowered.buckets.size(), stored.buckets.size()); ++b) {
      if (!(lowered.buckets[b] == stored.buckets[b])) {
        difference = fmt::format("its bucket {} differs from the program's", b);
        break;
      }
    }
  } else if (lowered.tasks.size() != stored.tasks.size()) {
    difference =
        fmt::format("{} tasks, the program has {}", lowered.tasks.size(), stored.tasks.size());
  } else {
    for (std::size_t t = 0; t < lowered.tasks.size(); ++t) {
      const Task& a = lowered.tasks[t];
      const Task& b = stored.tasks[t];
      if (a == b) continue;
      const char* field = a.name != b.name       ? "name"
                          : a.kind != b.kind     ? "kind"
                          : a.stream != b.stream ? "stream"
                          : a.deps != b.deps     ? "dependencies"
                          : a.bytes != b.bytes   ? "bytes"
                          : a.memory != b.memory ? "memory events"
                                                 : "unit, bucket or group";
      difference = fmt::format("its task {} ('{}') differs from the program's ('{}') in its {}", t,
                               a.name, b.name, field);
      break;
    }
    if (difference.empty())
      difference = "its streams or persistent bytes differ from the program's";
  }
  throw_bad_input(fmt::format("{}: plan", source),
                  fmt::format("does not lower to the schedule's program: {}", difference),
                  "was this schedule edited, or written by another fsdptune? Tune again");
}

void check_prediction(const ScheduleFile& schedule, const std::string& source) {
  if (schedule.pipeline) return;
  SimOptions options;
  options.record_timings = true;
  options.record_timeline = false;
  const SimResult result = simulate(schedule.program, options);
  const std::string hint =
      "was this schedule edited, or written by another fsdptune? Tune again to get a "
      "consistent prediction";
  // The step and each task's timing too (found by QA: a task's duration_s doubled was
  // replayed, and compare held the measurement to the step the file stated). Within a
  // relative 1e-9, as the reader holds a summary's figures to one another.
  const auto differ = [](double a, double b) {
    return std::abs(a - b) > 1e-9 * std::max(std::abs(a), std::abs(b)) + 1e-15;
  };
  if (differ(schedule.predicted.step_time_s, result.step_time_s)) {
    throw_bad_input(fmt::format("{}: predicted.step_time_s", source),
                    fmt::format("is {} s, but the schedule's program simulates to {} s",
                                schedule.predicted.step_time_s, result.step_time_s),
                    hint);
  }
  for (std::size_t t = 0; t < schedule.timings.size() && t < result.timings.size(); ++t) {
    const TaskTiming& stored = schedule.timings[t];
    const TaskTiming& simulated = result.timings[t];
    if (differ(stored.start_s, simulated.start_s) || differ(stored.end_s, simulated.end_s)) {
      throw_bad_input(
          fmt::format("{}: timings[{}]", source, t),
          fmt::format("is [{}, {}] s, but the schedule's program simulates task {} "
                      "to [{}, {}] s",
                      stored.start_s, stored.end_s, t, simulated.start_s, simulated.end_s),
          hint);
    }
  }
  // The parts of the step too, and the peak's breakdown (found by QA: an edited compute_s,
  // comm_s or breakdown entry was printed as read).
  const PlanSummary simulated = simulated_summary(result, schedule.predicted.plan_name);
  const std::pair<const char*, std::pair<double, double>> parts[] = {
      {"compute_s", {schedule.predicted.compute_s, simulated.compute_s}},
      {"comm_s", {schedule.predicted.comm_s, simulated.comm_s}},
      {"exposed_comm_s", {schedule.predicted.exposed_comm_s, simulated.exposed_comm_s}},
      {"idle_s", {schedule.predicted.idle_s, simulated.idle_s}},
  };
  for (const auto& [field, figures] : parts) {
    if (!differ(figures.first, figures.second)) continue;
    throw_bad_input(fmt::format("{}: predicted.{}", source, field),
                    fmt::format("is {} s, but the schedule's program simulates to {} s",
                                figures.first, figures.second),
                    hint);
  }
  std::vector<std::pair<std::string, std::pair<std::int64_t, std::int64_t>>> bytes = {
      {"peak_allocated_bytes",
       {schedule.predicted.peak_allocated_bytes, simulated.peak_allocated_bytes}},
      {"peak_reserved_bytes",
       {schedule.predicted.peak_reserved_bytes, simulated.peak_reserved_bytes}},
  };
  for (std::size_t k = 0; k < simulated.peak_breakdown.size(); ++k) {
    bytes.push_back({"peak_breakdown." + to_string(static_cast<MemoryCategory>(k)),
                     {schedule.predicted.peak_breakdown[k], simulated.peak_breakdown[k]}});
  }
  for (const auto& [field, figures] : bytes) {
    if (figures.first == figures.second) continue;
    throw_bad_input(fmt::format("{}: predicted.{}", source, field),
                    fmt::format("is {}, but the schedule's program simulates to {}", figures.first,
                                figures.second),
                    hint);
  }
}

}  // namespace fsdptune
