// The discrete-event simulator (docs/plan-format.md "Simulation").
//
// Each running task has remaining work measured in standalone seconds and a rate that
// depends only on the set of running tasks (ContentionFactors, cost_model.hpp):
//   collective, k collectives running:  rate = 1 if k == 1, else comm_share_efficiency / k,
//                                        times 1 / comm_slowdown_with_compute while a task
//                                        of a compute stream runs
//   bucket copy off the compute streams: rate = 1 / compute_slowdown_with_comm while a
//                                        collective runs (else 1), times
//                                        1 / copy_slowdown_with_compute while a task of a
//                                        compute stream runs
//   any other task:                       rate = 1 / the larger of
//                                        compute_slowdown_with_comm (a collective running)
//                                        and compute_slowdown_with_copy (a bucket copy
//                                        running off the compute streams), else 1
// Between two events the rates are constant, so the next event is the smallest
// remaining / rate. A stream runs its tasks in program order, one at a time: its head
// starts once every dependency has ended. Memory events apply at task start and end.
//
// The hot loop touches only flat arrays built once per call: no allocation per event, no
// strings. At most one task per stream runs, so each event costs O(streams).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "fsdptune/error.hpp"
#include "fsdptune/simulator.hpp"

namespace fsdptune {
namespace {

// What sets a running task's rate (the header comment).
enum TaskClass : std::uint8_t { kCollectiveTask, kOffComputeCopy, kOtherTask, kTaskClasses };

struct FlatEvent {
  int category = 0;
  std::int64_t bytes = 0;
  std::int64_t rounded_bytes = 0;  // allocator-segment rounded, same sign
};

}  // namespace

// The flat arrays a simulation builds from its Program; kept by a SimWorkspace between
// calls so that simulating many programs does not reallocate them.
struct SimWorkspace::Arrays {
  std::vector<double> remaining_s;
  std::vector<std::uint8_t> task_class;  // TaskClass
  std::vector<std::uint8_t> compute_stream;
  std::vector<int> unmet;
  std::vector<int> task_stream;
  std::vector<int> successor_offset, successors, successor_fill;
  std::vector<int> stream_offset, stream_tasks, stream_head, stream_running, stream_fill;
  std::vector<FlatEvent> events;
  std::vector<int> event_offset;
  std::vector<int> running, finished;
};

SimWorkspace::SimWorkspace() : arrays_(std::make_unique<Arrays>()) {}
SimWorkspace::~SimWorkspace() = default;
SimWorkspace::SimWorkspace(SimWorkspace&&) noexcept = default;
SimWorkspace& SimWorkspace::operator=(SimWorkspace&&) noexcept = default;

namespace {

class Simulation {
 public:
  Simulation(const Program& program, const SimOptions& options, SimWorkspace::Arrays& arrays)
      : program_(program),
        options_(options),
        remaining_s_(arrays.remaining_s),
        task_class_(arrays.task_class),
        compute_stream_(arrays.compute_stream),
        unmet_(arrays.unmet),
        task_stream_(arrays.task_stream),
        successor_offset_(arrays.successor_offset),
        successors_(arrays.successors),
        stream_offset_(arrays.stream_offset),
        stream_tasks_(arrays.stream_tasks),
        stream_head_(arrays.stream_head),
        stream_running_(arrays.stream_running),
        events_(arrays.events),
        event_offset_(arrays.event_offset),
        running_(arrays.running),
        finished_(arrays.finished) {
    const int task_count = static_cast<int>(program.tasks.size());
    const int stream_count = static_cast<int>(program.streams.size());
    remaining_s_.resize(task_count);
    task_class_.resize(task_count);
    unmet_.resize(task_count);
    task_stream_.resize(task_count);
    successor_offset_.assign(task_count + 1, 0);
    event_offset_.assign(2 * task_count + 1, 0);
    stream_offset_.assign(stream_count + 1, 0);
    compute_stream_.resize(stream_count);
    events_.clear();
    running_.clear();
    finished_.clear();
    for (int s = 0; s < stream_count; ++s) {
      compute_stream_[s] = program.streams[s].role == StreamRole::kCompute;
    }

    // Successor lists (CSR) and per-stream task lists (CSR), in task id order.
    for (const Task& task : program.tasks) {
      FSDPTUNE_CHECK(task.stream >= 0 && task.stream < stream_count, "task on unknown stream");
      for (int dep : task.deps) {
        FSDPTUNE_CHECK(dep >= 0 && dep < task_count, "dependency on unknown task");
        ++successor_offset_[dep + 1];
      }
      ++stream_offset_[task.stream + 1];
    }
    for (int i = 0; i < task_count; ++i) successor_offset_[i + 1] += successor_offset_[i];
    for (int s = 0; s < stream_count; ++s) stream_offset_[s + 1] += stream_offset_[s];
    successors_.resize(successor_offset_[task_count]);
    stream_tasks_.resize(task_count);
    std::vector<int>& successor_fill = arrays.successor_fill;
    std::vector<int>& stream_fill = arrays.stream_fill;
    successor_fill.assign(successor_offset_.begin(), successor_offset_.end() - 1);
    stream_fill.assign(stream_offset_.begin(), stream_offset_.end() - 1);
    // Memory events flattened: task t's start events at [offset[2t], offset[2t+1]), its
    // end events at [offset[2t+1], offset[2t+2]).
    for (const Task& task : program.tasks) {
      for (int dep : task.deps) successors_[successor_fill[dep]++] = task.id;
      stream_tasks_[stream_fill[task.stream]++] = task.id;
      remaining_s_[task.id] = std::max(0.0, task.duration_s);
      task_stream_[task.id] = task.stream;
      const bool copy = task.kind == TaskKind::kCopyIn || task.kind == TaskKind::kCopyOut;
      task_class_[task.id] = is_collective(task.kind)                ? kCollectiveTask
                             : copy && !compute_stream_[task.stream] ? kOffComputeCopy
                                                                     : kOtherTask;
      if (task_class_[task.id] == kCollectiveTask) comm_standalone_s_ += task.duration_s;
      unmet_[task.id] = static_cast<int>(task.deps.size());
      for (int phase = 0; phase < 2; ++phase) {
        for (const MemoryEvent& event : task.memory) {
          if (event.at_end != (phase == 1)) continue;
          events_.push_back({static_cast<int>(event.category), event.bytes,
                             round_to_segment(event.bytes, options.allocator_segment_bytes)});
        }
        event_offset_[2 * task.id + phase + 1] = static_cast<int>(events_.size());
      }
    }
    stream_head_.assign(stream_offset_.begin(), stream_offset_.end() - 1);
    stream_running_.assign(stream_count, -1);
    running_.reserve(stream_count);
    finished_.reserve(stream_count);
    if (options.record_timings) result_.timings.assign(task_count, TaskTiming{});
    if (options.record_timeline) result_.memory_timeline.reserve(2 * task_count + 2);
  }

  SimResult run() {
    const int sharded = static_cast<int>(MemoryCategory::kShardedState);
    allocated_[sharded] = program_.persistent_bytes;
    total_allocated_ = program_.persistent_bytes;
    persistent_rounded_ =
        round_to_segment(program_.persistent_bytes, options_.allocator_segment_bytes);
    transient_rounded_ = 0;
    note_memory();
    start_ready_tasks();
    const ContentionFactors& contention = program_.contention;
    // A slowdown as a rate (a non-positive one, which validation refuses, as no slowdown).
    auto rate_of = [](double slowdown) { return slowdown > 0 ? 1.0 / slowdown : 1.0; };
    const double compute_rate_with_comm = rate_of(contention.compute_slowdown_with_comm);
    const double comm_rate_with_compute = rate_of(contention.comm_slowdown_with_compute);
    const double copy_rate_with_compute = rate_of(contention.copy_slowdown_with_compute);
    const double compute_rate_with_copy = rate_of(contention.compute_slowdown_with_copy);
    double rates[kTaskClasses] = {};
    while (!running_.empty() && !result_.aborted) {
      int collectives = 0;
      int copies = 0;
      bool compute_busy = false;
      for (int task : running_) {
        collectives += task_class_[task] == kCollectiveTask;
        copies += task_class_[task] == kOffComputeCopy;
        compute_busy = compute_busy || compute_stream_[task_stream_[task]];
      }
      const double beside_comm = collectives > 0 ? compute_rate_with_comm : 1.0;
      rates[kCollectiveTask] =
          (collectives <= 1 ? 1.0 : contention.comm_share_efficiency / collectives) *
          (compute_busy ? comm_rate_with_compute : 1.0);
      rates[kOffComputeCopy] = beside_comm * (compute_busy ? copy_rate_with_compute : 1.0);
      rates[kOtherTask] = std::min(beside_comm, copies > 0 ? compute_rate_with_copy : 1.0);
      // Next event: the first running task to finish at the current rates.
      double step_s = -1;
      for (int task : running_) {
        const double rate = rates[task_class_[task]];
        const double finish_s = remaining_s_[task] / rate;
        if (step_s < 0 || finish_s < step_s) step_s = finish_s;
      }
      // Tasks finishing within rounding of the first one end at the same event.
      const double finish_limit_s = step_s * (1 + 1e-12);
      if (compute_busy) result_.compute_s += step_s;
      if (collectives > 0) {
        result_.comm_s += step_s;
        if (!compute_busy) result_.exposed_comm_s += step_s;
      } else if (!compute_busy) {
        result_.idle_s += step_s;
      }
      now_s_ += step_s;
      finished_.clear();
      for (int task : running_) {
        const double rate = rates[task_class_[task]];
        if (remaining_s_[task] / rate <= finish_limit_s) {
          remaining_s_[task] = 0;
          finished_.push_back(task);
        } else {
          remaining_s_[task] -= rate * step_s;
        }
      }
      // Ends in task id order: the same program always gives the same event sequence.
      if (finished_.size() > 1) std::sort(finished_.begin(), finished_.end());
      for (int task : finished_) finish(task);
      if (result_.aborted) break;
      start_ready_tasks();
    }
    if (!result_.aborted) {
      FSDPTUNE_CHECK(completed_ == static_cast<int>(program_.tasks.size()),
                     "the program deadlocked: a stream waits on a task that never ends");
    }
    result_.step_time_s = now_s_;
    result_.comm_standalone_s = comm_standalone_s_;
    return std::move(result_);
  }

 private:
  void finish(int task) {
    running_.erase(std::find(running_.begin(), running_.end(), task));
    const int stream = task_stream_[task];
    stream_running_[stream] = -1;
    ++stream_head_[stream];
    ++completed_;
    ++result_.event_count;
    if (options_.record_timings) result_.timings[task].end_s = now_s_;
    apply_events(event_offset_[2 * task + 1], event_offset_[2 * task + 2]);
    for (int i = successor_offset_[task]; i < successor_offset_[task + 1]; ++i) {
      --unmet_[successors_[i]];
    }
  }

  void start_ready_tasks() {
    const int stream_count = static_cast<int>(program_.streams.size());
    for (int s = 0; s < stream_count && !result_.aborted; ++s) {
      if (stream_running_[s] >= 0 || stream_head_[s] == stream_offset_[s + 1]) continue;
      const int task = stream_tasks_[stream_head_[s]];
      if (unmet_[task] != 0) continue;
      stream_running_[s] = task;
      running_.push_back(task);
      ++result_.event_count;
      if (options_.record_timings) result_.timings[task].start_s = now_s_;
      apply_events(event_offset_[2 * task], event_offset_[2 * task + 1]);
    }
  }

  void apply_events(int begin, int end) {
    if (begin == end) return;
    for (int i = begin; i < end; ++i) {
      const FlatEvent& event = events_[i];
      allocated_[event.category] += event.bytes;
      total_allocated_ += event.bytes;
      if (event.category == static_cast<int>(MemoryCategory::kShardedState)) {
        persistent_rounded_ += event.rounded_bytes;
      } else {
        transient_rounded_ += event.rounded_bytes;
      }
      FSDPTUNE_CHECK(allocated_[event.category] >= 0, "memory of a category went negative");
    }
    const std::int64_t reserved_bytes = note_memory();
    if (options_.abort_above_bytes > 0 && reserved_bytes > options_.abort_above_bytes) {
      result_.aborted = true;
    }
  }

  // Records the peaks; returns the reserved estimate now.
  std::int64_t note_memory() {
    if (total_allocated_ > result_.peak_allocated_bytes) {
      result_.peak_allocated_bytes = total_allocated_;
      result_.peak_breakdown = allocated_;
    }
    const std::int64_t reserved_bytes =
        reserved_estimate_bytes(persistent_rounded_, transient_rounded_, options_);
    result_.peak_reserved_bytes = std::max(result_.peak_reserved_bytes, reserved_bytes);
    if (options_.record_timeline) result_.memory_timeline.push_back({now_s_, total_allocated_});
    return reserved_bytes;
  }

  const Program& program_;
  const SimOptions& options_;
  SimResult result_;
  double now_s_ = 0;
  double comm_standalone_s_ = 0;  // summed in task id order while flattening
  int completed_ = 0;
  MemoryBreakdown allocated_{};
  std::int64_t total_allocated_ = 0;
  std::int64_t persistent_rounded_ = 0;
  std::int64_t transient_rounded_ = 0;

  std::vector<double>& remaining_s_;
  std::vector<std::uint8_t>& task_class_;
  std::vector<std::uint8_t>& compute_stream_;
  std::vector<int>& unmet_;
  std::vector<int>& task_stream_;  // flat copy of Task::stream (the hot loop's reads)
  std::vector<int>&successor_offset_, &successors_;
  std::vector<int>&stream_offset_, &stream_tasks_, &stream_head_, &stream_running_;
  std::vector<FlatEvent>& events_;
  std::vector<int>& event_offset_;
  std::vector<int>&running_, &finished_;
};

}  // namespace

SimResult simulate(const Program& program, const SimOptions& options) {
  SimWorkspace workspace;
  return simulate(program, options, workspace);
}

SimResult simulate(const Program& program, const SimOptions& options, SimWorkspace& workspace) {
  return Simulation(program, options, *workspace.arrays_).run();
}

}  // namespace fsdptune
