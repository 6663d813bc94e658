#include "fsdptune/memory_bound.hpp"

#include <algorithm>
#include <cstddef>
#include <limits>

#include <fmt/format.h>

#include "fsdptune/error.hpp"

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

}  // namespace

AnyTimingPeak any_timing_peak(const Program& program) {
  const int stream_count = static_cast<int>(program.streams.size());
  const int task_count = static_cast<int>(program.tasks.size());
  constexpr int kSource = 0;
  constexpr int kSink = 1;

  // One node per memory event plus one that opens each task, in a chain: the task's
  // start events in program order, then its end events.
  struct EventNode {
    std::int64_t bytes;
    MemoryCategory category;
  };
  std::vector<EventNode> nodes(2, EventNode{0, MemoryCategory::kWorkspace});
  std::vector<int> opens(static_cast<std::size_t>(task_count));
  std::vector<int> closes(static_cast<std::size_t>(task_count));
  std::vector<std::pair<int, int>> requires_edges;  // (node, node it requires)
  for (const Task& task : program.tasks) {
    FSDPTUNE_CHECK(task.stream >= 0 && task.stream < stream_count, "task on unknown stream");
    int last = static_cast<int>(nodes.size());
    opens[static_cast<std::size_t>(task.id)] = last;
    nodes.push_back({0, MemoryCategory::kWorkspace});
    for (const bool at_end : {false, true}) {
      for (const MemoryEvent& event : task.memory) {
        if (event.at_end != at_end) continue;
        const int node = static_cast<int>(nodes.size());
        nodes.push_back({event.bytes, event.category});
        requires_edges.emplace_back(node, last);
        last = node;
      }
    }
    closes[static_cast<std::size_t>(task.id)] = last;
  }
  std::vector<int> previous_on_stream(static_cast<std::size_t>(stream_count), -1);
  for (const Task& task : program.tasks) {
    const int open = opens[static_cast<std::size_t>(task.id)];
    int& previous = previous_on_stream[static_cast<std::size_t>(task.stream)];
    if (previous >= 0)
      requires_edges.emplace_back(open, closes[static_cast<std::size_t>(previous)]);
    previous = task.id;
    for (const int dep : task.deps) {
      FSDPTUNE_CHECK(dep >= 0 && dep < task_count, "dependency on an unknown task");
      requires_edges.emplace_back(open, closes[static_cast<std::size_t>(dep)]);
    }
  }

  // Maximum-weight closure: a source arc of capacity w to each allocation, an arc of
  // capacity -w from each release to the sink, an uncuttable arc from each node to what
  // it requires. The heaviest closure weighs (sum of allocations) - (minimum cut) and is
  // the source side of that cut.
  std::int64_t allocations = 0;
  for (const EventNode& node : nodes) allocations += std::max<std::int64_t>(node.bytes, 0);
  const std::int64_t uncuttable = allocations + 1;
  MaxFlow flow(static_cast<int>(nodes.size()));
  for (std::size_t n = 2; n < nodes.size(); ++n) {
    if (nodes[n].bytes > 0) flow.add_edge(kSource, static_cast<int>(n), nodes[n].bytes);
    if (nodes[n].bytes < 0) flow.add_edge(static_cast<int>(n), kSink, -nodes[n].bytes);
  }
  for (const auto& [node, required] : requires_edges) flow.add_edge(node, required, uncuttable);
  const std::int64_t cut = flow.run(kSource, kSink);
  const std::vector<bool> closure = flow.source_side(kSource);

  AnyTimingPeak peak;
  peak.peak_allocated_bytes = program.persistent_bytes + allocations - cut;
  peak.breakdown[static_cast<std::size_t>(MemoryCategory::kShardedState)] =
      program.persistent_bytes;
  for (std::size_t n = 2; n < nodes.size(); ++n) {
    if (closure[n]) peak.breakdown[static_cast<std::size_t>(nodes[n].category)] += nodes[n].bytes;
  }
  peak.running.assign(static_cast<std::size_t>(stream_count), -1);
  peak.ended.assign(static_cast<std::size_t>(stream_count), 0);
  for (const Task& task : program.tasks) {
    const bool opened = closure[static_cast<std::size_t>(opens[static_cast<std::size_t>(task.id)])];
    const bool closed =
        closure[static_cast<std::size_t>(closes[static_cast<std::size_t>(task.id)])];
    if (closed) ++peak.ended[static_cast<std::size_t>(task.stream)];
    if (opened && !closed) peak.running[static_cast<std::size_t>(task.stream)] = task.id;
  }
  return peak;
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

}  // namespace fsdptune
