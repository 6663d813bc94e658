// Chrome trace export (Trace Event Format: "X" complete events, "C" counters, "M"
// metadata naming the tracks).
#include "fsdptune/trace.hpp"

#include <algorithm>
#include <map>
#include <vector>

#include <fmt/format.h>

#include "fsdptune/error.hpp"
#include "fsdptune/units.hpp"

namespace fsdptune {
namespace {

using nlohmann::json;

constexpr double kMicrosecondsPerSecond = 1e6;

void add_thread(json& events, int pid, int tid, const std::string& name) {
  events.push_back({{"ph", "M"},
                    {"name", "thread_name"},
                    {"pid", pid},
                    {"tid", tid},
                    {"args", {{"name", name}}}});
  events.push_back({{"ph", "M"},
                    {"name", "thread_sort_index"},
                    {"pid", pid},
                    {"tid", tid},
                    {"args", {{"sort_index", tid}}}});
}

// A complete ("X") event from start_s to end_s.
json span_event(const std::string& name, const std::string& category, int pid, int tid,
                double start_s, double end_s, json args) {
  return {{"ph", "X"},
          {"name", name},
          {"cat", category},
          {"pid", pid},
          {"tid", tid},
          {"ts", start_s * kMicrosecondsPerSecond},
          {"dur", (end_s - start_s) * kMicrosecondsPerSecond},
          {"args", std::move(args)}};
}

// A sample of the "memory allocated" counter track.
json memory_event(int pid, double time_s, std::int64_t allocated_bytes) {
  return {{"ph", "C"},
          {"name", "memory allocated"},
          {"pid", pid},
          {"ts", time_s * kMicrosecondsPerSecond},
          {"args", {{"MiB", static_cast<double>(allocated_bytes) / static_cast<double>(kMiB)}}}};
}

// A task of a Program as a complete event: its standalone cost, unit, bucket, bytes and
// dependencies in `args` (plus what the caller adds).
json task_event(const Task& task, const std::string& name, int pid, int tid, double start_s,
                double end_s, json args) {
  args["id"] = task.id;
  args["kind"] = to_string(task.kind);
  args["standalone_us"] = task.duration_s * kMicrosecondsPerSecond;
  if (task.unit >= 0 && !args.contains("unit")) args["unit"] = task.unit;
  if (task.bucket >= 0) args["bucket"] = task.bucket;
  if (task.bytes > 0) args["bytes"] = task.bytes;
  if (!task.deps.empty()) args["deps"] = task.deps;
  return span_event(name, to_string(task.kind), pid, tid, start_s, end_s, std::move(args));
}

}  // namespace

nlohmann::json chrome_trace(const Program& program, const SimResult& result,
                            const std::string& title) {
  FSDPTUNE_CHECK(result.timings.size() == program.tasks.size(),
                 "chrome_trace needs the per-task timings of this program");
  json events = json::array();
  events.push_back(
      {{"ph", "M"}, {"name", "process_name"}, {"pid", 0}, {"args", {{"name", title}}}});
  for (std::size_t s = 0; s < program.streams.size(); ++s) {
    add_thread(events, 0, static_cast<int>(s), program.streams[s].name);
  }
  for (const Task& task : program.tasks) {
    const TaskTiming& timing = result.timings[task.id];
    events.push_back(
        task_event(task, task.name, 0, task.stream, timing.start_s, timing.end_s, json::object()));
  }
  for (const MemorySample& sample : result.memory_timeline) {
    events.push_back(memory_event(0, sample.time_s, sample.allocated_bytes));
  }
  return {{"traceEvents", events},
          {"displayTimeUnit", "ms"},
          {"otherData",
           {{"step_time_s", result.step_time_s},
            {"peak_allocated_bytes", result.peak_allocated_bytes},
            {"peak_reserved_bytes", result.peak_reserved_bytes}}}};
}

namespace {

// Which part of a chunk's one-microbatch Program a task belongs to (the split chunk_times
// makes): the first forward (up to the last forward task's end), the last backward (up to
// the last backward task's end), the tail (reduce-scatters after it, the optimizer).
enum class Phase { kForward, kBackward, kTail };

Phase phase_of(const Task& task, const TaskTiming& timing, double forward_end_s,
               double backward_end_s) {
  switch (task.kind) {
    case TaskKind::kForward:
      return Phase::kForward;
    case TaskKind::kRecompute:
    case TaskKind::kBackward:
      return Phase::kBackward;
    case TaskKind::kOptimizer:
      return Phase::kTail;
    default:
      // Communication and copies: by when they start.
      if (timing.start_s < forward_end_s) return Phase::kForward;
      if (timing.start_s < backward_end_s) return Phase::kBackward;
      return Phase::kTail;
  }
}

}  // namespace

nlohmann::json pipeline_chrome_trace(const PipelineSimulation& sim, const std::string& title) {
  const int P = sim.spec.stages;
  const int C = static_cast<int>(sim.chunk_programs.size());
  const int M = sim.spec.microbatches;
  const int G = sim.spec.steps;
  FSDPTUNE_CHECK(sim.chunk_results.size() == sim.chunk_programs.size() &&
                     static_cast<int>(sim.result.stages.size()) == P,
                 "pipeline_chrome_trace: a simulation of every chunk and stage");
  struct ChunkPhases {
    double forward_end_s = 0;
    double backward_end_s = 0;
  };
  std::vector<ChunkPhases> phases(static_cast<std::size_t>(C));
  for (int c = 0; c < C; ++c) {
    const Program& program = sim.chunk_programs[c];
    const SimResult& result = sim.chunk_results[c];
    FSDPTUNE_CHECK(result.timings.size() == program.tasks.size(),
                   "pipeline_chrome_trace needs the chunks' per-task timings");
    for (const Task& task : program.tasks) {
      const TaskTiming& timing = result.timings[task.id];
      if (task.kind == TaskKind::kForward) {
        phases[c].forward_end_s = std::max(phases[c].forward_end_s, timing.end_s);
      }
      if (task.kind == TaskKind::kBackward) {
        phases[c].backward_end_s = std::max(phases[c].backward_end_s, timing.end_s);
      }
    }
  }
  // Sends cross ranks only when there is more than one (simulate_pipeline's rule).
  // Between chunks c and c + 1 over link c mod P.
  const auto send_s = [&](int c) {
    if (P == 1) return 0.0;
    return sim.spec.link_send_s.empty() ? sim.spec.send_s
                                        : sim.spec.link_send_s[static_cast<std::size_t>(c % P)];
  };

  json events = json::array();
  for (const StageResult& stage : sim.result.stages) {
    const int pid = stage.rank;
    events.push_back({{"ph", "M"},
                      {"name", "process_name"},
                      {"pid", pid},
                      {"args", {{"name", fmt::format("{}: stage {}", title, stage.rank)}}}});
    events.push_back({{"ph", "M"},
                      {"name", "process_sort_index"},
                      {"pid", pid},
                      {"args", {{"sort_index", pid}}}});
    // Threads: the pipeline's actions, the chunks' streams by name (interleaved chunks of
    // one rank share them), the sends.
    std::vector<std::string> threads = {"pipeline"};
    bool threads_named = false;  // after the first ones: a new thread is named as it comes
    auto thread_of = [&](const std::string& name) {
      const auto at = std::find(threads.begin(), threads.end(), name);
      if (at != threads.end()) return static_cast<int>(at - threads.begin());
      threads.push_back(name);
      const int tid = static_cast<int>(threads.size()) - 1;
      if (threads_named) add_thread(events, pid, tid, name);
      return tid;
    };
    for (int c = stage.rank; c < C; c += P) {
      for (const Stream& stream : sim.chunk_programs[c].streams) thread_of(stream.name);
    }
    // The sends it makes: activations from a chunk before the last, gradients from one
    // after the first (found by QA: 1F1B's first stage showed an empty "send gradients").
    bool sends_activations = false, sends_gradients = false;
    for (int c = stage.rank; c < C && P > 1; c += P) {
      sends_activations = sends_activations || c + 1 < C;
      sends_gradients = sends_gradients || c > 0;
    }
    if (sends_activations) thread_of("send activations");
    if (sends_gradients) thread_of("send gradients");
    for (std::size_t t = 0; t < threads.size(); ++t) {
      add_thread(events, pid, static_cast<int>(t), threads[t]);
    }
    threads_named = true;
    // Sends that overlap (a send longer than the actions between them: the model runs them
    // at once, each at the link's speed) each on a lane of their own: events of one thread
    // must nest or follow one another (found by QA: two sends overlapped on one thread).
    std::map<std::string, std::vector<double>> send_lanes_end_s;
    // The compute stream of chunk c's Program: where its gradient accumulation is drawn.
    auto compute_thread = [&](int c) {
      for (const Stream& stream : sim.chunk_programs[c].streams) {
        if (stream.role == StreamRole::kCompute) return thread_of(stream.name);
      }
      return 0;
    };

    // The stage's memory as simulate_pipeline models it (stage_memory): its chunks'
    // sharded states, then each action's peak from its start and what it leaves at its end.
    // The largest sample is the stage's allocated peak.
    const StageMemory memory = stage_memory(sim.spec, stage.rank, stage.actions);
    events.push_back(memory_event(pid, 0, memory.start_bytes));
    for (std::size_t a = 0; a < stage.actions.size(); ++a) {
      const PipelineAction& action = stage.actions[a];
      const int c = action.chunk;
      const int m = action.microbatch;
      events.push_back(memory_event(pid, action.start_s, memory.action_peak_bytes[a]));
      events.push_back(memory_event(pid, action.end_s, memory.action_end_bytes[a]));
      const Program& program = sim.chunk_programs[c];
      const SimResult& result = sim.chunk_results[c];
      const bool keep = sim.chunk_keep_gathered[c];
      const std::vector<int>& units = sim.chunk_units[c];
      const ChunkPhases& phase = phases[c];
      const json where = {{"chunk", c}, {"microbatch", m}};
      events.push_back(
          span_event(fmt::format("{} chunk {} mb {}", action.backward ? "B" : "F", c, m),
                     "pipeline", pid, 0, action.start_s, action.end_s, where));
      // The point-to-point send after the action, to chunk `to` (on the next rank).
      auto send = [&](const std::string& what, int to) {
        const double end_s = action.end_s + send_s(std::min(c, to));
        std::vector<double>& lanes = send_lanes_end_s[what];
        std::size_t lane = 0;
        while (lane < lanes.size() && lanes[lane] > action.end_s) ++lane;
        if (lane == lanes.size()) lanes.push_back(0);
        lanes[lane] = end_s;
        const std::string thread =
            lane == 0 ? "send " + what : fmt::format("send {} ({})", what, lane + 1);
        events.push_back(span_event(fmt::format("send {} chunk {}->{} mb {}", what, c, to, m),
                                    "send", pid, thread_of(thread), action.end_s, end_s, where));
      };
      auto emit = [&](const Task& task, double start_s, double end_s) {
        json args = where;
        // Units as the whole job numbers them.
        if (task.unit >= 0) args["unit"] = units.at(static_cast<std::size_t>(task.unit));
        events.push_back(task_event(task, fmt::format("{} mb{}", task.name, m), pid,
                                    thread_of(program.streams[task.stream].name), start_s, end_s,
                                    std::move(args)));
      };
      // The Program's tasks of one phase but the optimizer (after the rank's last action,
      // below), at their simulated times shifted to `origin_s` (where the phase starts in
      // the Program) -> `start_s`.
      auto emit_phase = [&](Phase wanted, double origin_s, double start_s) {
        for (const Task& task : program.tasks) {
          if (task.kind == TaskKind::kOptimizer) continue;
          const TaskTiming& timing = result.timings[task.id];
          if (phase_of(task, timing, phase.forward_end_s, phase.backward_end_s) != wanted) {
            continue;
          }
          emit(task, start_s + timing.start_s - origin_s, start_s + timing.end_s - origin_s);
        }
      };
      // Compute only (parameters kept gathered, not the first forward or last backward):
      // the compute tasks back to back, at their standalone cost (chunk_times' forward_s,
      // backward_s).
      auto emit_compute = [&](bool backward) {
        double at_s = action.start_s;
        for (const Task& task : program.tasks) {
          const bool wanted =
              backward ? (task.kind == TaskKind::kRecompute || task.kind == TaskKind::kBackward)
                       : task.kind == TaskKind::kForward;
          if (!wanted) continue;
          emit(task, at_s, at_s + task.duration_s);
          at_s += task.duration_s;
        }
      };
      if (!action.backward) {
        if (m % M == 0 || !keep) {
          emit_phase(Phase::kForward, 0, action.start_s);
        } else {
          emit_compute(false);
        }
        if (c + 1 < C && P > 1) send("activations", c + 1);
      } else {
        if (m % M == M - 1 || !keep) {
          emit_phase(Phase::kBackward, phase.forward_end_s, action.start_s);
        } else {
          emit_compute(true);
        }
        // A chunk kept gathered accumulates its gradients at the end of each backward
        // (ChunkTimes::accumulate_s, in backward_s and last_backward_s; found by QA: the
        // compute thread looked idle there).
        const double accumulate_s = sim.spec.chunks[c].accumulate_s;
        if (accumulate_s > 0) {
          events.push_back(span_event(fmt::format("gradient accumulation mb{}", m), "accumulate",
                                      pid, compute_thread(c), action.end_s - accumulate_s,
                                      action.end_s, where));
        }
        // The exposed reduce-scatters after each backward that reduce-scatters (the rank
        // waits for them); the optimizers come after the rank's last action (below).
        if (backward_reduce_scatters(sim.spec.chunks[c], m, M)) {
          emit_phase(Phase::kTail, phase.backward_end_s, action.end_s);
        }
        if (c > 0 && P > 1) send("gradients", c - 1);
      }
    }
    // The optimizers of the rank's chunks, one after another, ending at the stage's end
    // (simulate_pipeline: after its last action and its chunks' reduce-scatters).
    double optimizers_s = 0;
    for (int c = stage.rank; c < C; c += P) optimizers_s += sim.spec.chunks[c].optimizer_s;
    double from_s = stage.end_s - optimizers_s;
    events.push_back(memory_event(pid, from_s, memory.optimizer_peak_bytes));
    events.push_back(memory_event(pid, stage.end_s, memory.end_bytes));
    for (int c = stage.rank; c < C; c += P) {
      const Program& program = sim.chunk_programs[c];
      const SimResult& result = sim.chunk_results[c];
      double at_s = from_s;
      for (const Task& task : program.tasks) {
        if (task.kind != TaskKind::kOptimizer) continue;
        const TaskTiming& timing = result.timings[task.id];
        const double duration_s = timing.end_s - timing.start_s;
        events.push_back(task_event(task, fmt::format("{} mb{}", task.name, M * G - 1), pid,
                                    thread_of(program.streams[task.stream].name), at_s,
                                    at_s + duration_s, {{"chunk", c}, {"microbatch", M * G - 1}}));
        at_s += duration_s;
      }
      from_s += sim.spec.chunks[c].optimizer_s;
    }
  }
  json trace = {{"traceEvents", events},
                {"displayTimeUnit", "ms"},
                {"otherData",
                 {{"step_time_s", sim.result.step_time_s},
                  {"bubble_fraction", sim.result.bubble_fraction},
                  {"stages", P},
                  {"microbatches", M}}}};
  if (G > 1) trace["otherData"]["pipeline_steps"] = G;
  return trace;
}

}  // namespace fsdptune
