// The executor: turns each task of the Program into enqueued backend work in task-id order
// (ids are in issue order and dependencies point backwards, so enqueueing in id order
// never waits on work not yet enqueued), with an event at each task's start and end.
#include "fsdptune/executor.hpp"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <deque>
#include <map>
#include <new>
#include <thread>

#include <fmt/format.h>

#include "fsdptune/data_check.hpp"
#include "fsdptune/intervals.hpp"
#include "fsdptune/pipeline.hpp"
#include "fsdptune/units.hpp"
#include "fsdptune/workload.hpp"

namespace fsdptune {
namespace {

using Clock = std::chrono::steady_clock;

// An error every rank raised together (agree_on_errors): leave cleanly, no MPI_Abort.
struct AgreedError {
  Error error;
};

std::string iso_date_utc() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

std::string host_name() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

void broadcast_string(std::string& text, int root) {
  int size = static_cast<int>(text.size());
  MPI_Bcast(&size, 1, MPI_INT, root, MPI_COMM_WORLD);
  text.resize(static_cast<std::size_t>(size));
  MPI_Bcast(text.data(), size, MPI_CHAR, root, MPI_COMM_WORLD);
}

[[noreturn]] void abort_all_ranks(int rank, const std::string& message, int code) {
  std::fprintf(stderr, "fsdptune: error: rank %d: %s\n  aborting every rank (MPI_Abort)\n", rank,
               message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

const std::vector<Op>& task_ops(const Task& task, const Workload& workload) {
  static const std::vector<Op> kNone;
  const auto& units = workload.units;
  const bool has_unit = task.unit >= 0 && task.unit < static_cast<int>(units.size());
  switch (task.kind) {
    case TaskKind::kForward:
      return has_unit ? units[static_cast<std::size_t>(task.unit)].forward_ops : kNone;
    case TaskKind::kRecompute:
      return has_unit ? units[static_cast<std::size_t>(task.unit)].recompute_ops : kNone;
    case TaskKind::kBackward:
      return has_unit ? units[static_cast<std::size_t>(task.unit)].backward_ops : kNone;
    case TaskKind::kOptimizer:
      return workload.optimizer_ops;
    default:
      return kNone;
  }
}

bool is_compute(TaskKind kind) {
  return kind == TaskKind::kForward || kind == TaskKind::kRecompute ||
         kind == TaskKind::kBackward || kind == TaskKind::kOptimizer;
}

// The memory events of one step as real allocations: a positive event allocates a block,
// a negative one releases the oldest live block of its owner (a pipeline chunk; 0 for a
// single Program) and category with exactly that size (else the oldest blocks of the
// category until the bytes are covered).
class MemoryReplay {
 public:
  explicit MemoryReplay(Backend& backend) : backend_(backend) {}

  void apply(const MemoryEvent& event, int stream, int owner = 0) {
    auto& live = live_[owner][static_cast<std::size_t>(event.category)];
    if (event.bytes > 0) {
      const BlockId block = backend_.allocate(stream, event.bytes);
      live.push_back({block, event.bytes, stream, backend_.record(stream)});
      return;
    }
    std::int64_t remaining = -event.bytes;
    auto exact = std::find_if(live.begin(), live.end(),
                              [&](const Live& block) { return block.bytes == remaining; });
    if (exact != live.end()) {
      release(*exact, stream);
      live.erase(exact);
      return;
    }
    while (remaining > 0 && !live.empty()) {
      remaining -= live.front().bytes;
      release(live.front(), stream);
      live.pop_front();
    }
  }

  // Releases what the step left allocated (on stream 0, after everything).
  void release_all(int stream) {
    for (auto& [owner, categories] : live_) {
      for (auto& live : categories) {
        for (const Live& block : live) release(block, stream);
        live.clear();
      }
    }
  }

 private:
  struct Live {
    BlockId block;
    std::int64_t bytes;
    int stream;
    EventId allocated;
  };

  void release(const Live& block, int stream) {
    // Stream-ordered memory: a release on another stream waits for the allocation.
    if (block.stream != stream) backend_.wait(stream, block.allocated);
    backend_.release(stream, block.block);
  }

  Backend& backend_;
  std::map<int, std::array<std::deque<Live>, static_cast<std::size_t>(MemoryCategory::kCount)>>
      live_;
};

struct StepRecord {
  std::vector<TaskTiming> timings;  // per task id (a single Program; empty for a pipeline)
  double step_time_s = 0;           // this rank's; the executor then takes the max over ranks
  double own_step_time_s = 0;       // this rank's
  double compute_s = 0;
  double exposed_comm_s = 0;
  // Pipelines: the time this rank's actions ran (each from its start on the compute
  // stream, after its input arrived, to its last compute task's end) and the last one's end.
  double busy_s = 0;
  double pipeline_end_s = 0;
  // Pipelines: each action of the rank's plan with its start and end, and the durations
  // of every run of each task of its chunks (by local chunk, then task id).
  std::vector<PipelineAction> actions;
  std::vector<int> chunks;  // local index -> chunk of the schedule
  std::vector<std::vector<std::vector<double>>> task_runs_s;
};

// A pipeline rank's actions and chunk tasks over its measured steps (RankMeasurement):
// each action's start and end the median over the steps, each task's duration the median
// over every run in them, its runs those of one step.
void add_pipeline_view(const std::vector<StepRecord>& records, RankMeasurement& view) {
  if (records.empty()) return;
  const StepRecord& first = records.front();
  for (std::size_t a = 0; a < first.actions.size(); ++a) {
    std::vector<double> starts, ends;
    for (const StepRecord& record : records) {
      starts.push_back(record.actions[a].start_s);
      ends.push_back(record.actions[a].end_s);
    }
    PipelineAction action = first.actions[a];
    action.start_s = measured_median(starts);
    action.end_s = measured_median(ends);
    view.actions.push_back(action);
  }
  for (std::size_t local = 0; local < first.chunks.size(); ++local) {
    MeasuredChunk chunk{first.chunks[local], {}};
    for (std::size_t t = 0; t < first.task_runs_s[local].size(); ++t) {
      std::vector<double> durations;
      for (const StepRecord& record : records) {
        const std::vector<double>& runs = record.task_runs_s[local][t];
        durations.insert(durations.end(), runs.begin(), runs.end());
      }
      chunk.tasks.push_back({static_cast<std::int64_t>(first.task_runs_s[local][t].size()),
                             measured_median(std::move(durations))});
    }
    view.chunks.push_back(std::move(chunk));
  }
}

// add_pipeline_view's figures as doubles for MPI (counts and ids are exact): the actions'
// count, then each (chunk, microbatch, backward, start, end); the chunks' count, then each
// chunk, its tasks' count and each (runs, duration).
std::vector<double> pack_pipeline_view(const RankMeasurement& view) {
  std::vector<double> packed{static_cast<double>(view.actions.size())};
  for (const PipelineAction& action : view.actions) {
    packed.insert(packed.end(),
                  {static_cast<double>(action.chunk), static_cast<double>(action.microbatch),
                   action.backward ? 1.0 : 0.0, action.start_s, action.end_s});
  }
  packed.push_back(static_cast<double>(view.chunks.size()));
  for (const MeasuredChunk& chunk : view.chunks) {
    packed.push_back(static_cast<double>(chunk.chunk));
    packed.push_back(static_cast<double>(chunk.tasks.size()));
    for (const MeasuredChunkTask& task : chunk.tasks) {
      packed.push_back(static_cast<double>(task.runs));
      packed.push_back(task.duration_s);
    }
  }
  return packed;
}

void unpack_pipeline_view(const double* packed, RankMeasurement& view) {
  const double* at = packed;
  auto next_int = [&] { return static_cast<int>(*at++); };
  const int actions = next_int();
  for (int a = 0; a < actions; ++a) {
    PipelineAction action;
    action.chunk = next_int();
    action.microbatch = next_int();
    action.backward = next_int() != 0;
    action.start_s = *at++;
    action.end_s = *at++;
    view.actions.push_back(action);
  }
  const int chunks = next_int();
  for (int c = 0; c < chunks; ++c) {
    MeasuredChunk chunk;
    chunk.chunk = next_int();
    const int tasks = next_int();
    for (int t = 0; t < tasks; ++t) {
      const std::int64_t runs = next_int();
      chunk.tasks.push_back({runs, *at++});
    }
    view.chunks.push_back(std::move(chunk));
  }
}

// What a Program's tasks do with each of its buckets: whether it has copy tasks and an
// all-reduce, and so which task copies the bucket out.
class BucketTasks {
 public:
  explicit BucketTasks(const Program& program) {
    has_copy_in_.assign(program.buckets.size(), false);
    has_copy_out_.assign(program.buckets.size(), false);
    has_all_reduce_.assign(program.buckets.size(), false);
    for (const Task& task : program.tasks) {
      if (task.bucket < 0) continue;
      const auto bucket = static_cast<std::size_t>(task.bucket);
      if (task.kind == TaskKind::kCopyIn) has_copy_in_[bucket] = true;
      if (task.kind == TaskKind::kCopyOut) has_copy_out_[bucket] = true;
      if (task.kind == TaskKind::kAllReduce) has_all_reduce_[bucket] = true;
    }
    copy_outs_.assign(program.buckets.size(), 0);
    for (const Task& task : program.tasks) {
      if (task.kind == TaskKind::kCopyOut || ends_with_copy_out(task)) {
        ++copy_outs_[static_cast<std::size_t>(task.bucket)];
      }
    }
  }

  bool has_copy_in(int bucket) const { return has_copy_in_[static_cast<std::size_t>(bucket)]; }

  // Whether `task` ends with its bucket's copy-out although the Program has no copy-out
  // task for the bucket (copy_in_out = false): the collective does, or with HSDP the
  // all-reduce after it, so that the gradient shards accumulate the sum over every replica
  // as they do with a copy-out task (FSDP2's order, docs/plan-format.md).
  bool ends_with_copy_out(const Task& task) const {
    if (task.bucket < 0 || has_copy_out_[static_cast<std::size_t>(task.bucket)]) return false;
    if (task.kind == TaskKind::kAllReduce) return true;
    return (task.kind == TaskKind::kAllGather || task.kind == TaskKind::kReduceScatter) &&
           !has_all_reduce_[static_cast<std::size_t>(task.bucket)];
  }

  // How many times one run of the Program copies bucket `bucket` out (a reduce-scatter
  // bucket: adds it into the fp32 gradient shards).
  int copy_outs(int bucket) const { return copy_outs_[static_cast<std::size_t>(bucket)]; }

 private:
  std::vector<bool> has_copy_in_;
  std::vector<bool> has_copy_out_;
  std::vector<bool> has_all_reduce_;
  std::vector<int> copy_outs_;  // per bucket, per run of the Program
};

// How one Program's tasks become backend work: its bucket indices shifted by
// `bucket_offset` into the layout's buckets (a pipeline rank holds several chunks').
class ProgramWork {
 public:
  // overlap: replay the compute tasks' collectives beside the compute the model overlaps
  // them with (op_steps), else in op order (ExecutorOptions::serial_collectives).
  ProgramWork(const Program& program, const Workload& workload, int bucket_offset, bool overlap)
      : program_(program),
        workload_(workload),
        bucket_offset_(bucket_offset),
        tasks_(program),
        events_(program) {
    for (const Task& task : program_.tasks) {
      labels_.push_back(fmt::format("task {} ({})", task.id,
                                    task.name.empty() ? to_string(task.kind) : task.name));
      std::vector<OpStep> steps;
      if (overlap && is_compute(task.kind)) {
        // The compute-path collectives beside the compute the model overlaps them with.
        const std::vector<Op>& ops = task_ops(task, workload_);
        const std::vector<OpOverlap> overlaps = op_overlaps(ops, workload_.job.async_tp);
        std::vector<std::size_t> whole;
        if (!overlaps.empty()) steps = op_steps(ops, overlaps, &whole);
        for (const std::size_t op : whole) not_replayed_.push_back(ops[op].name);
      }
      steps_.push_back(std::move(steps));
    }
  }

  const Program& program() const { return program_; }
  // How an action tracks the Program's memory events (chunk_action_scope's rules).
  const ChunkActionEvents& action_events() const { return events_; }
  // Compute-path collectives the model overlaps that run whole instead (their partner op
  // does not split: op_steps), by name, once per compute task that has them.
  const std::vector<std::string>& overlaps_not_replayed() const { return not_replayed_; }
  int bucket_offset() const { return bucket_offset_; }

  void enqueue_work(Backend& backend, const Task& task) const {
    const int stream = task.stream;
    if (is_compute(task.kind)) {
      const std::vector<Op>& ops = task_ops(task, workload_);
      const auto id = static_cast<std::size_t>(task.id);
      if (!ops.empty()) backend.run_ops(stream, ops, steps_[id], labels_[id]);
      return;
    }
    const int index = bucket_offset_ + task.bucket;
    switch (task.kind) {
      case TaskKind::kCopyIn:
        backend.copy_in(stream, index);
        return;
      case TaskKind::kCopyOut:
        backend.copy_out(stream, index);
        return;
      default:
        break;
    }
    if (task.kind == TaskKind::kAllReduce) {
      backend.all_reduce(stream, index);
    } else if (is_collective(task.kind)) {
      // A plan without copy tasks (copy_in_out = false) still needs the data in place.
      if (!tasks_.has_copy_in(task.bucket)) backend.copy_in(stream, index);
      backend.collective(stream, index);
    }
    if (tasks_.ends_with_copy_out(task)) backend.copy_out(stream, index);
  }

 private:
  const Program& program_;
  const Workload& workload_;
  int bucket_offset_ = 0;
  BucketTasks tasks_;
  ChunkActionEvents events_;
  std::vector<std::string> labels_;         // per task, for data check messages
  std::vector<std::vector<OpStep>> steps_;  // per compute task with overlaps (op_steps)
  std::vector<std::string> not_replayed_;
};

// One timed step of whatever the schedule holds.
class StepReplay {
 public:
  virtual ~StepReplay() = default;
  virtual StepRecord step() = 0;
  // ProgramWork::overlaps_not_replayed of every Program this rank replays.
  virtual std::vector<std::string> overlaps_not_replayed() const = 0;
};

// The busy time of the compute stream and the communication not overlapped by it.
void add_overlap(std::vector<TimeInterval> compute, std::vector<TimeInterval> comm,
                 StepRecord& record) {
  const auto compute_union = merge_intervals(std::move(compute));
  const auto comm_union = merge_intervals(std::move(comm));
  record.compute_s = total_length(compute_union);
  record.exposed_comm_s = total_length(comm_union) - overlap_length(comm_union, compute_union);
}

// A version 1 schedule: its Program once per step.
class Replay final : public StepReplay {
 public:
  Replay(const ScheduleFile& schedule, const Workload& workload, Backend& backend, bool overlap)
      : program_(schedule.program),
        work_(schedule.program, workload, 0, overlap),
        backend_(backend) {}

  std::vector<std::string> overlaps_not_replayed() const override {
    return work_.overlaps_not_replayed();
  }

  StepRecord step() override {
    backend_.reset_events();
    const int streams = static_cast<int>(program_.streams.size());
    const EventId begin = backend_.record(0);
    for (int s = 1; s < streams; ++s) backend_.wait(s, begin);
    std::vector<EventId> starts(program_.tasks.size()), ends(program_.tasks.size());
    MemoryReplay memory(backend_);
    for (const Task& task : program_.tasks) {
      for (const int dep : task.deps) {
        if (program_.tasks[static_cast<std::size_t>(dep)].stream != task.stream) {
          backend_.wait(task.stream, ends[static_cast<std::size_t>(dep)]);
        }
      }
      starts[static_cast<std::size_t>(task.id)] = backend_.record(task.stream);
      for (const MemoryEvent& event : task.memory) {
        if (!event.at_end) memory.apply(event, task.stream);
      }
      work_.enqueue_work(backend_, task);
      for (const MemoryEvent& event : task.memory) {
        if (event.at_end) memory.apply(event, task.stream);
      }
      ends[static_cast<std::size_t>(task.id)] = backend_.record(task.stream);
    }
    memory.release_all(0);
    backend_.synchronize();

    StepRecord record;
    std::vector<TimeInterval> compute, comm;
    for (const Task& task : program_.tasks) {
      const TaskTiming timing{backend_.elapsed_s(begin, starts[static_cast<std::size_t>(task.id)]),
                              backend_.elapsed_s(begin, ends[static_cast<std::size_t>(task.id)])};
      record.timings.push_back(timing);
      record.step_time_s = std::max(record.step_time_s, timing.end_s);
      (on_compute_stream(program_, task) ? compute : comm)
          .push_back({timing.start_s, timing.end_s});
    }
    add_overlap(std::move(compute), std::move(comm), record);
    return record;
  }

 private:
  const Program& program_;
  ProgramWork work_;
  Backend& backend_;
};

// A version 2 schedule: this rank's pipeline actions (plan_pipeline_replay) per step, each
// a part of its chunk's Program, with the messages between stages; the chunks' optimizers
// after the last action (torchtitan steps the optimizer after the pipeline schedule).
class PipelineReplay final : public StepReplay {
 public:
  PipelineReplay(const ScheduleFile& schedule, const std::vector<Workload>& chunk_workloads,
                 const ReplayLayout& layout, Backend& backend, bool overlap)
      : plan_(plan_pipeline_replay(schedule, layout.mesh, layout.rank)),
        layout_(layout),
        microbatches_(static_cast<int>(schedule.job.microbatches * schedule.job.pipeline_steps)),
        step_microbatches_(static_cast<int>(schedule.job.microbatches)),
        backend_(backend) {
    const SchedulePipeline& pipeline = *schedule.pipeline;
    local_.assign(pipeline.chunks.size(), -1);
    for (const int c : plan_.chunks) {
      local_[static_cast<std::size_t>(c)] = static_cast<int>(work_.size());
      work_.push_back(std::make_unique<ProgramWork>(
          pipeline.chunks[static_cast<std::size_t>(c)].program,
          chunk_workloads[static_cast<std::size_t>(c)],
          plan_.bucket_offsets[static_cast<std::size_t>(c)], overlap));
    }
    program_streams_ = layout.first_pipeline_stream >= 0 ? layout.first_pipeline_stream
                                                         : static_cast<int>(layout.streams.size());
  }

  std::vector<std::string> overlaps_not_replayed() const override {
    std::vector<std::string> names;
    for (const auto& work : work_) {
      const std::vector<std::string>& chunk = work->overlaps_not_replayed();
      names.insert(names.end(), chunk.begin(), chunk.end());
    }
    return names;
  }

  StepRecord step() override {
    backend_.reset_events();
    const int streams = static_cast<int>(layout_.streams.size());
    const EventId begin = backend_.record(0);
    for (int s = 1; s < streams; ++s) backend_.wait(s, begin);
    // End events of this step's tasks by chunk (local), microbatch (of every pipeline
    // step) and task id.
    ends_.assign(work_.size(), {});
    for (std::size_t i = 0; i < work_.size(); ++i) {
      ends_[i].assign(static_cast<std::size_t>(microbatches_),
                      std::vector<EventId>(work_[i]->program().tasks.size(), -1));
    }
    spans_.clear();
    MemoryReplay memory(backend_);
    std::vector<std::pair<EventId, EventId>> actions;
    for (const ReplayAction& action : plan_.actions) {
      const int local = local_[static_cast<std::size_t>(action.chunk)];
      if (action.after_reduce_scatters) {
        for (int s = 1; s < program_streams_; ++s) backend_.wait(0, backend_.record(s));
      }
      if (action.receive_message >= 0) {
        // The input from the adjacent stage: the compute stream waits for it.
        const int stream = layout_.receive_stream(action.backward);
        backend_.receive(stream, action.receive_message);
        backend_.wait(0, backend_.record(stream));
      }
      // The action starts when the compute stream reaches it; its tasks on the other
      // streams start no earlier (the simulator composes each action from its start).
      const EventId action_begin = backend_.record(0);
      for (int s = 1; s < program_streams_; ++s) backend_.wait(s, action_begin);
      for (const int t : action.tasks) enqueue_task(local, action, t, memory);
      const EventId action_end = backend_.record(0);
      actions.emplace_back(action_begin, action_end);
      if (action.send_message >= 0) {
        const int stream = layout_.send_stream(action.backward);
        backend_.wait(stream, action_end);
        backend_.send(stream, action.send_message);
      }
    }
    ReplayAction tail;  // every memory event applies
    tail.microbatch = microbatches_ - 1;
    for (const auto& [chunk, task] : plan_.tail) {
      enqueue_task(local_[static_cast<std::size_t>(chunk)], tail, task, memory);
    }
    memory.release_all(0);
    std::vector<EventId> stream_ends;
    for (int s = 0; s < program_streams_; ++s) stream_ends.push_back(backend_.record(s));
    if (layout_.first_pipeline_stream >= 0) {
      for (const bool gradient : {false, true}) {
        backend_.complete_sends(layout_.send_stream(gradient));
      }
    }
    backend_.synchronize();

    StepRecord record;
    for (const EventId end : stream_ends) {
      record.step_time_s = std::max(record.step_time_s, backend_.elapsed_s(begin, end));
    }
    for (std::size_t a = 0; a < actions.size(); ++a) {
      const auto& [action_begin, action_end] = actions[a];
      const ReplayAction& planned = plan_.actions[a];
      record.actions.push_back({planned.chunk, planned.microbatch, planned.backward,
                                backend_.elapsed_s(begin, action_begin),
                                backend_.elapsed_s(begin, action_end)});
      record.busy_s += backend_.elapsed_s(action_begin, action_end);
      record.pipeline_end_s =
          std::max(record.pipeline_end_s, backend_.elapsed_s(begin, action_end));
    }
    record.chunks = plan_.chunks;
    record.task_runs_s.resize(work_.size());
    for (std::size_t i = 0; i < work_.size(); ++i) {
      record.task_runs_s[i].resize(work_[i]->program().tasks.size());
    }
    std::vector<TimeInterval> compute, comm;
    for (const Span& span : spans_) {
      const TimeInterval interval{backend_.elapsed_s(begin, span.start),
                                  backend_.elapsed_s(begin, span.end)};
      record.task_runs_s[static_cast<std::size_t>(span.local)][static_cast<std::size_t>(span.task)]
          .push_back(interval.end - interval.start);
      (span.on_compute ? compute : comm).push_back(interval);
    }
    add_overlap(std::move(compute), std::move(comm), record);
    return record;
  }

 private:
  struct Span {
    EventId start;
    EventId end;
    bool on_compute;
    int local;  // chunk
    int task;
  };

  // The latest run of task `task` of local chunk `local` at or before microbatch `m` in
  // this step (-1: not run: a dependency on work this action does not replay, e.g. a
  // reduce-scatter of a chunk kept gathered before its last microbatch).
  EventId end_of(int local, int m, int task) const {
    const auto& by_microbatch = ends_[static_cast<std::size_t>(local)];
    for (int at = m; at >= 0; --at) {
      const EventId event =
          by_microbatch[static_cast<std::size_t>(at)][static_cast<std::size_t>(task)];
      if (event >= 0) return event;
    }
    return -1;
  }

  void enqueue_task(int local, const ReplayAction& action, int id, MemoryReplay& memory) {
    const ProgramWork& work = *work_[static_cast<std::size_t>(local)];
    const Program& program = work.program();
    const Task& task = program.tasks[static_cast<std::size_t>(id)];
    for (const int dep : task.deps) {
      const EventId event = end_of(local, action.microbatch, dep);
      if (event >= 0 && program.tasks[static_cast<std::size_t>(dep)].stream != task.stream) {
        backend_.wait(task.stream, event);
      }
    }
    const EventId start = backend_.record(task.stream);
    // Each tracked event at its own time: a transient gradient is freed at the end.
    const auto apply_events = [&](bool at_end) {
      for (const MemoryEvent& event : task.memory) {
        for (const MemoryEvent& tracked : work.action_events()(action.scope, task, event)) {
          if (tracked.at_end == at_end) memory.apply(tracked, task.stream, local);
        }
      }
    };
    apply_events(false);
    work.enqueue_work(backend_, task);
    // With one microbatch (under PP) nothing is added: the reduce-scatter reads the
    // microbatch's gradients as they are (their cast to the reduce dtype is tracked memory).
    if (action.scope.accumulate_gradients && step_microbatches_ > 1 &&
        task.kind == TaskKind::kBackward) {
      // The backward of a reduce-scatter bucket's lowest unit (the last of it to run)
      // completes the bucket's gradients of this microbatch.
      for (std::size_t b = 0; b < program.buckets.size(); ++b) {
        const BucketLayout& bucket = program.buckets[b];
        if (bucket.kind == CollectiveKind::kReduceScatter && bucket.units.first == task.unit) {
          backend_.accumulate_gradients(task.stream, work.bucket_offset() + static_cast<int>(b),
                                        action.microbatch % step_microbatches_ == 0);
        }
      }
    }
    apply_events(true);
    const EventId end = backend_.record(task.stream);
    ends_[static_cast<std::size_t>(local)][static_cast<std::size_t>(action.microbatch)]
         [static_cast<std::size_t>(id)] = end;
    spans_.push_back({start, end, on_compute_stream(program, task), local, id});
  }

  PipelineReplayPlan plan_;
  const ReplayLayout& layout_;
  int microbatches_ = 1;       // of all pipeline steps
  int step_microbatches_ = 1;  // of one
  Backend& backend_;
  std::vector<std::unique_ptr<ProgramWork>> work_;  // per local chunk
  std::vector<int> local_;                          // per chunk of the job: local index or -1
  int program_streams_ = 0;
  std::vector<std::vector<std::vector<EventId>>> ends_;
  std::vector<Span> spans_;
};

// The buffers of every bucket and, for reduce-scatter buckets, the fp32 gradient shards
// their copy-outs (ReplayBucket::gradient_copy_outs per step) accumulated into over `steps`
// steps from zero; then the pipeline messages this rank received.
std::optional<std::string> check_all_buckets(Backend& backend, const ReplayLayout& layout,
                                             int steps, Watchdog& watchdog) {
  const std::vector<std::byte> gradient_shards = backend.read_gradient_shards();
  for (std::size_t b = 0; b < layout.buckets.size(); ++b) {
    const ReplayBucket& bucket = layout.buckets[b];
    const int index = static_cast<int>(b);
    // A sign of life per bucket: the host checks a few ns per element, and a bucket of
    // Llama 3 8B at world size 1 holds up to ~10^9 of them (tens of seconds for all of
    // them, near a --timeout of 60 s).
    watchdog.beat(fmt::format("checking the data of bucket {} of {}", b, layout.buckets.size()));
    const std::vector<BucketBuffer> buffers =
        bucket.kind == CollectiveKind::kAllGather
            ? std::vector<BucketBuffer>{BucketBuffer::kGathered, BucketBuffer::kUnsharded}
            : std::vector<BucketBuffer>{BucketBuffer::kReduced};
    for (const BucketBuffer which : buffers) {
      if (auto failure = check_bucket(bucket, index, which, layout.mesh, layout.rank,
                                      backend.read_bucket(index, which))) {
        return failure;
      }
    }
    if (bucket.kind == CollectiveKind::kAllGather) continue;
    if (auto failure = check_gradient_shards(bucket, index, layout.mesh, layout.rank,
                                             steps * bucket.gradient_copy_outs, gradient_shards)) {
      return failure;
    }
  }
  for (std::size_t m = 0; m < layout.messages.size(); ++m) {
    const ReplayMessage& message = layout.messages[m];
    if (message.outgoing) continue;
    if (auto failure =
            check_message(message, layout.rank, backend.read_message(static_cast<int>(m)))) {
      return failure;
    }
  }
  return std::nullopt;
}

// The test hooks of --check-data (ExecutorOptions): one element no data pattern holds
// (1000; it saturates to 448 in fp8), written on the last rank after the check step.
void corrupt_for_tests(Backend& backend, const ReplayLayout& layout,
                       const ExecutorOptions& options) {
  const auto buckets = static_cast<int>(layout.buckets.size());
  if (options.corrupt_bucket >= 0 && options.corrupt_bucket < buckets) {
    // The first element of the bucket's first parameter, in its wire dtype.
    const auto& bucket = layout.buckets[static_cast<std::size_t>(options.corrupt_bucket)];
    const DType wire = bucket.slots.empty() ? bucket.dtype : bucket.slots.front().wire;
    std::vector<std::byte> bytes(static_cast<std::size_t>(bytes_per_element(wire)));
    data_pattern::encode(wire, 1000.0f, bytes.data());
    backend.overwrite_bucket(options.corrupt_bucket,
                             bucket.kind == CollectiveKind::kAllGather ? BucketBuffer::kGathered
                                                                       : BucketBuffer::kReduced,
                             0, bytes);
  }
  if (options.corrupt_gradient_shard >= 0 && options.corrupt_gradient_shard < buckets) {
    // The first own element of the bucket's first parameter's fp32 gradient shard.
    const auto& bucket = layout.buckets[static_cast<std::size_t>(options.corrupt_gradient_shard)];
    if (bucket.kind == CollectiveKind::kAllGather || bucket.slots.empty()) return;
    std::vector<std::byte> bytes(4);
    data_pattern::encode(DType::kFP32, 1000.0f, bytes.data());
    backend.overwrite_gradient_shards(4 * bucket.slots.front().storage_offset, bytes);
  }
  const auto messages = static_cast<int>(layout.messages.size());
  if (options.corrupt_message >= 0 && options.corrupt_message < messages) {
    // Element 0 of that message buffer, in its dtype.
    const ReplayMessage& message =
        layout.messages[static_cast<std::size_t>(options.corrupt_message)];
    std::vector<std::byte> bytes(static_cast<std::size_t>(bytes_per_element(message.dtype)));
    data_pattern::encode(message.dtype, 1000.0f, bytes.data());
    backend.overwrite_message(options.corrupt_message, 0, bytes);
  }
}

// The test hooks given (ExecutorOptions), when the checks found nothing: they corrupted
// nothing the checks read. nullopt when none was given.
std::optional<std::string> unused_test_hooks(const ExecutorOptions& options) {
  std::vector<std::string> given;
  for (const CorruptionHook& hook : corruption_hooks(options)) {
    if (hook.value >= 0) given.push_back(fmt::format("{} {}", hook.flag, hook.value));
  }
  if (given.empty()) return std::nullopt;
  return fmt::format(
      "the test hook {} corrupted nothing the checks read on the last rank (an all-gather "
      "bucket has no gradient shard, a message it sends is checked where it is received, a "
      "job without TP or CP has no TP collective)",
      join_alternatives(given, " and "));
}

// The dtypes the backends move (docs/validation.md "What is replayed"): one wording for a
// bucket's and a parameter's (found probing: an fp16 schedule was refused in two ways).
std::string unreplayable_dtype(DType dtype) {
  return fmt::format(
      "the executor moves bf16 and fp32 buffers (and fp8 in float8 "
      "all-gathers), not {}",
      to_string(dtype));
}
constexpr const char* kReplayableDtypesHint =
    "tune the job with --param-dtype bf16 and --reduce-dtype fp32 or bf16 to replay it";

Workload workload_of(const ScheduleFile& schedule) {
  return build_workload(schedule.model, normalize_job(schedule.model, schedule.job));
}

}  // namespace

std::vector<CorruptionHook> corruption_hooks(const ExecutorOptions& options) {
  using Target = CorruptionHook::Target;
  return {
      {Target::kBucket, "--debug-corrupt-bucket", options.corrupt_bucket},
      {Target::kGradientShard, "--debug-corrupt-gradient-shard", options.corrupt_gradient_shard},
      {Target::kTpCollective, "--debug-corrupt-tp-collective", options.corrupt_tp_collective},
      {Target::kMessage, "--debug-corrupt-message", options.corrupt_message}};
}

MpiSession::MpiSession() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  FSDPTUNE_CHECK(!initialized, "MPI initialized twice");
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
    throw_runtime("MPI_Init_thread", "MPI failed to initialize");
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &local_rank_);
  MPI_Comm_size(node, &local_size_);
  MPI_Comm_free(&node);
  if (provided < MPI_THREAD_MULTIPLE && world_size_ > 1) {
    MPI_Finalize();
    throw_runtime("MPI_Init_thread", "the MPI library does not provide MPI_THREAD_MULTIPLE",
                  "the cpu backend runs collectives from one thread per stream; use an MPI "
                  "built with thread support (Open MPI: --enable-mpi-thread-multiple)");
  }
}

MpiSession::~MpiSession() { MPI_Finalize(); }

Watchdog::Watchdog(int rank, double timeout_s, std::string doing)
    : rank_(rank), timeout_s_(timeout_s), doing_(std::move(doing)), thread_([this] { loop(); }) {}

Watchdog::~Watchdog() {
  stop_ = true;
  thread_.join();
}

void Watchdog::beat(const std::string& doing) {
  std::lock_guard lock(mutex_);
  doing_ = doing;
  ++beats_;
}

void Watchdog::watch(const Backend* backend) {
  std::lock_guard lock(mutex_);
  backend_ = backend;
}

void Watchdog::loop() {
  std::int64_t last_progress = -1, last_beats = -1;
  auto last_change = Clock::now();
  while (!stop_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::string doing;
    std::int64_t beats = 0, progress = 0;
    {
      // Under the lock: watch(nullptr) returns only once the backend is no longer read.
      std::lock_guard lock(mutex_);
      doing = doing_;
      beats = beats_;
      progress = backend_ != nullptr ? backend_->progress() : 0;
    }
    if (progress != last_progress || beats != last_beats) {
      last_progress = progress;
      last_beats = beats;
      last_change = Clock::now();
      continue;
    }
    const double idle_s = std::chrono::duration<double>(Clock::now() - last_change).count();
    if (idle_s > timeout_s_) {
      abort_all_ranks(rank_,
                      fmt::format("no progress for {:.1f} s while {} (--timeout {} s): a rank "
                                  "stopped responding or a collective hangs",
                                  idle_s, doing, timeout_s_),
                      1);
    }
  }
}

void agree_on_errors(const std::optional<Error>& local_error) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int mine = local_error ? rank : size;
  int first = size;
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first == size) return;
  int kind = local_error ? static_cast<int>(local_error->kind()) : 0;
  std::string where = local_error ? local_error->where() : "";
  std::string what = local_error ? local_error->message() : "";
  std::string hint = local_error ? local_error->hint() : "";
  MPI_Bcast(&kind, 1, MPI_INT, first, MPI_COMM_WORLD);
  broadcast_string(where, first);
  broadcast_string(what, first);
  broadcast_string(hint, first);
  Error error(static_cast<ErrorKind>(kind),
              fmt::format("rank {}{}{}", first, where.empty() ? "" : ": ", where), what, hint);
  // Every rank has it now: rank 0 prints it, once (each rank printed it before, found
  // probing: a world of N ranks printed it N times), and before any rank exits: mpirun ends
  // the job at the first non-zero exit, and a rank that left while rank 0 was still to
  // print lost the message (a --check-data failure showed only mpirun's notice, now and
  // then under load).
  if (rank == 0) {
    std::fputs(error_report(error).c_str(), stderr);
    std::fflush(stderr);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  error.mark_printed_by_another_rank();
  throw error;
}

ReplayMesh make_replay_mesh(int rank, int dp_replicate, int dp_shard, int tp, int shards_per_rank,
                            int pp, int cp) {
  FSDPTUNE_CHECK(pp >= 1 && dp_replicate >= 1 && dp_shard >= 1 && tp >= 1 && shards_per_rank >= 1,
                 "mesh sizes must be positive");
  FSDPTUNE_CHECK(cp >= 1 && dp_shard % cp == 0, "cp must divide the shard group");
  FSDPTUNE_CHECK(rank >= 0 && rank < pp * dp_replicate * dp_shard * tp, "rank outside the mesh");
  ReplayMesh mesh;
  mesh.pp = pp;
  mesh.dp_replicate = dp_replicate;
  mesh.dp_shard = dp_shard;
  mesh.tp = tp;
  mesh.cp = cp;
  mesh.shards_per_rank = shards_per_rank;
  mesh.tp_rank = rank % tp;
  mesh.shard = (rank / tp) % dp_shard;
  mesh.replica = (rank / (tp * dp_shard)) % dp_replicate;
  mesh.stage = rank / (tp * dp_shard * dp_replicate);
  return mesh;
}

int cuda_device_of_rank(int local_rank, int visible) {
  return visible > 0 ? local_rank % visible : 0;
}

std::optional<std::pair<int, int>> ranks_sharing_a_gpu(const std::vector<GpuClaim>& claims) {
  for (std::size_t j = 1; j < claims.size(); ++j) {
    if (claims[j].usable == 0) continue;
    for (std::size_t i = 0; i < j; ++i) {
      if (claims[i].usable != 0 &&
          std::memcmp(claims[i].uuid, claims[j].uuid, sizeof claims[j].uuid) == 0) {
        return std::pair{static_cast<int>(i), static_cast<int>(j)};
      }
    }
  }
  return std::nullopt;
}

int compute_collective_ranks(const Op& op, const ReplayMesh& mesh) {
  return op.parallel_dim == ParallelDim::kContext ? mesh.cp : mesh.tp;
}

int compute_collective_rank(const Op& op, const ReplayMesh& mesh) {
  return op.parallel_dim == ParallelDim::kContext ? mesh.cp_rank() : mesh.tp_rank;
}

ReplayMesh replay_mesh(const ScheduleFile& schedule, int rank, int world_size, bool scale_down,
                       const std::string& source) {
  const JobSpec job = normalize_job(schedule.model, schedule.job);
  if (job.pp != 1 && !schedule.pipeline) {
    throw_bad_input(source + ": job.pp",
                    fmt::format("pp = {} but the schedule has no per-stage Programs "
                                "(`pipeline`)",
                                job.pp),
                    "tune the job again: a pipelined job is written as a version 2 schedule");
  }
  // pp is the outermost mesh dimension (torchtitan; pipeline_link_groups): every stage has
  // the same [dp_replicate, dp_shard, tp] mesh, adjacent stages dp_replicate * dp_shard * tp
  // ranks apart.
  const std::int64_t others = job.pp * job.dp_replicate * job.tp;  // not scaled down
  const std::int64_t expected = job.dp_shard * others;
  const auto pp = static_cast<int>(job.pp);
  const auto cp = static_cast<int>(job.cp);
  if (world_size == expected) {
    return make_replay_mesh(rank, static_cast<int>(job.dp_replicate),
                            static_cast<int>(job.dp_shard), static_cast<int>(job.tp), 1, pp, cp);
  }
  // World sizes a scaled-down replay accepts (< expected): whole CP groups per shard group.
  std::vector<std::string> fitting;
  for (std::int64_t shard = job.cp; shard < job.dp_shard; shard += job.cp) {
    if (job.dp_shard % shard == 0) fitting.push_back(std::to_string(shard * others));
  }
  const std::string cp_text = job.cp > 1 ? fmt::format(" (cp {})", job.cp) : "";
  const std::string mesh =
      job.pp > 1 ? fmt::format("pp {} x dp_replicate {} x dp_shard {}{} x tp {}", job.pp,
                               job.dp_replicate, job.dp_shard, cp_text, job.tp)
                 : fmt::format("dp_replicate {} x dp_shard {}{} x tp {}", job.dp_replicate,
                               job.dp_shard, cp_text, job.tp);
  // A pipeline's world size is named by its outermost dimension.
  const std::string field = source + (job.pp > 1 ? ": job.pp" : ": job.dp_shard");
  if (!scale_down) {
    throw_bad_input(
        field,
        fmt::format("the schedule is for {} ranks but {} {} started ({})", expected, world_size,
                    world_size == 1 ? "was" : "were", mesh),
        fmt::format(
            "run it with mpirun -np {} (or srun -n {}){}", expected, expected,
            fitting.empty()
                ? std::string()
                : fmt::format(", or add --scale-down to replay it on {} {}",
                              join_alternatives(fitting, " or "),
                              fitting == std::vector<std::string>{"1"} ? "rank" : "ranks")));
  }
  if (world_size % others != 0 || job.dp_shard % (world_size / others) != 0 ||
      (world_size / others) % job.cp != 0) {
    throw_bad_input(field,
                    fmt::format("--scale-down keeps {}dp_replicate{} and tp and divides dp_shard: "
                                "{} {} not fit {}",
                                job.pp > 1 ? "pp, " : "", job.cp > 1 ? ", cp" : "", world_size,
                                world_size == 1 ? "rank does" : "ranks do", mesh),
                    fmt::format("start {} ranks", [&] {
                      // Listed as the other hint lists them (found by QA: "1 or 2 or 4 rank(s)"
                      // there).
                      std::vector<std::string> sizes = fitting;
                      sizes.push_back(std::to_string(expected));
                      return join_alternatives(sizes, " or ");
                    }()));
  }
  const auto shard = static_cast<int>(world_size / others);
  return make_replay_mesh(rank, static_cast<int>(job.dp_replicate), shard, static_cast<int>(job.tp),
                          static_cast<int>(job.dp_shard / shard), pp, cp);
}

namespace {

// check_replayable of one Program (the schedule's, or a pipeline chunk's at `prefix`, e.g.
// "s.json: pipeline.chunks[1].program") on its workload.
void check_program(const Program& program, const Workload& workload, const ReplayMesh& mesh,
                   const std::string& source, const std::string& prefix) {
  if (program.streams.empty()) throw_bad_input(prefix + ".streams", "no streams");
  for (std::size_t u = 0; u < workload.units.size(); ++u) {
    const Unit& unit = workload.units[u];
    for (const auto* ops : {&unit.forward_ops, &unit.recompute_ops, &unit.backward_ops}) {
      for (const Op& op : *ops) {
        if (op.kind != OpKind::kCollective) continue;
        const int ranks = compute_collective_ranks(op, mesh);
        if (op.group.ranks != ranks || op.collective == CollectiveKind::kSendRecv) {
          throw_bad_input(
              fmt::format("{}: job (unit {} op {})", source, unit.name, op.name),
              fmt::format("the executor runs {}-parallel all-gathers, "
                          "reduce-scatters and all-reduces over the {} = {} group, "
                          "not a {} over {} ranks",
                          op.parallel_dim == ParallelDim::kContext ? "context" : "tensor",
                          to_string(op.parallel_dim), ranks, to_string(op.collective),
                          op.group.ranks));
        }
      }
    }
  }
  for (std::size_t b = 0; b < program.buckets.size(); ++b) {
    const BucketLayout& bucket = program.buckets[b];
    const std::string where = fmt::format("{}.buckets[{}]", prefix, b);
    if (bucket.kind != CollectiveKind::kAllGather &&
        bucket.kind != CollectiveKind::kReduceScatter) {
      throw_bad_input(where, "the executor replays all-gather and reduce-scatter buckets only");
    }
    const bool fp8_allowed = bucket.kind == CollectiveKind::kAllGather;
    if (bucket.dtype != DType::kBF16 && bucket.dtype != DType::kFP32 &&
        !(fp8_allowed && bucket.dtype == DType::kFP8)) {
      throw_bad_input(where + ".dtype", unreplayable_dtype(bucket.dtype), kReplayableDtypesHint);
    }
  }
  for (const Task& task : program.tasks) {
    const std::string where = fmt::format("{}.tasks[{}]", prefix, task.id);
    if (task.stream < 0 || task.stream >= static_cast<int>(program.streams.size())) {
      throw_bad_input(where + ".stream", "unknown stream");
    }
    for (const int dep : task.deps) {
      if (dep < 0 || dep >= task.id)
        throw_bad_input(where + ".deps", "a dependency must point back");
    }
    if (is_compute(task.kind) && task.kind != TaskKind::kOptimizer &&
        (task.unit < 0 || task.unit >= static_cast<int>(workload.units.size()))) {
      throw_bad_input(where + ".unit", "unknown unit");
    }
    if (!is_compute(task.kind) &&
        (task.bucket < 0 || task.bucket >= static_cast<int>(program.buckets.size()))) {
      throw_bad_input(where + ".bucket", "unknown bucket");
    }
    if (task.kind == TaskKind::kAllReduce &&
        program.buckets[static_cast<std::size_t>(task.bucket)].kind !=
            CollectiveKind::kReduceScatter) {
      throw_bad_input(where + ".bucket",
                      "an all-reduce (HSDP) must follow a reduce-scatter bucket");
    }
  }
}

// The pipeline phases of a chunk's one-microbatch Program (the split simulate_pipeline's
// ChunkTimes and pipeline_chrome_trace make): the forward phase is every task up to the
// last forward compute task (its gathers, copies and forwards: the lowering issues
// backward gathers only after the forward pass), the backward phase the rest but the
// optimizer, which is the tail. Throws naming `prefix` when the Program is not so split.
void check_phases(const Program& program, const std::string& prefix) {
  if (program.streams.empty() || program.streams[0].role != StreamRole::kCompute) {
    throw_bad_input(prefix + ".streams[0]", "a pipeline chunk's first stream must be compute");
  }
  const int last_forward = last_forward_task(program);
  if (last_forward < 0) throw_bad_input(prefix + ".tasks", "no forward task");
  for (const Task& task : program.tasks) {
    const std::string where = fmt::format("{}.tasks[{}]", prefix, task.id);
    const bool backward_kind =
        task.kind == TaskKind::kRecompute || task.kind == TaskKind::kBackward ||
        task.kind == TaskKind::kReduceScatter || task.kind == TaskKind::kAllReduce ||
        task.kind == TaskKind::kOptimizer;
    if (task.id <= last_forward && backward_kind) {
      throw_bad_input(where + ".kind",
                      fmt::format("a {} task before the last forward task: the executor replays "
                                  "a chunk's forward and backward as separate pipeline actions",
                                  to_string(task.kind)));
    }
    if (task.kind == TaskKind::kOptimizer) {
      for (const Task& later : program.tasks) {
        if (std::find(later.deps.begin(), later.deps.end(), task.id) != later.deps.end()) {
          throw_bad_input(where, "a task depends on the optimizer: it must be the tail");
        }
      }
    }
  }
}

// make_replay_layout's checks of parameters and dtypes, its errors naming `source` (the
// schedule file) before the field.
void check_layout(const ScheduleFile& schedule, const Workload& workload, int rank,
                  const ReplayMesh& mesh, const std::string& source) {
  try {
    (void)make_replay_layout(schedule, workload, rank, mesh);
  } catch (const Error& e) {
    throw Error(e.kind(), source + ": " + e.where(), e.message(), e.hint());
  }
}

}  // namespace

void check_replayable(const ScheduleFile& schedule, int world_size, const std::string& source,
                      bool scale_down) {
  const ReplayMesh mesh = replay_mesh(schedule, 0, world_size, scale_down, source);
  const Workload workload = workload_of(schedule);
  if (!schedule.pipeline) {
    check_program(schedule.program, workload, mesh, source, source + ": program");
    check_layout(schedule, workload, 0, mesh, source);
    return;
  }
  const SchedulePipeline& pipeline = *schedule.pipeline;
  const JobSpec job = normalize_job(schedule.model, schedule.job);
  if (static_cast<std::int64_t>(pipeline.chunks.size()) != job.pp * job.virtual_stages) {
    throw_bad_input(source + ": pipeline.chunks",
                    fmt::format("{} chunks for pp {} x virtual_stages {}", pipeline.chunks.size(),
                                job.pp, job.virtual_stages));
  }
  // Message tags (sending chunk, microbatch, direction) must fit MPI's guaranteed range.
  if (2 * job.pp * job.virtual_stages * job.microbatches * job.pipeline_steps > 32767) {
    throw_bad_input(
        source + (job.pipeline_steps > 1 ? ": job.pipeline_steps" : ": job.microbatches"),
        "too many chunk-microbatches for the executor's message tags (32767)");
  }
  for (std::size_t c = 0; c < pipeline.chunks.size(); ++c) {
    const ScheduleChunk& chunk = pipeline.chunks[c];
    const std::string prefix = fmt::format("{}: pipeline.chunks[{}]", source, c);
    const Workload chunk_units = chunk_workload(workload, chunk.units);
    check_program(chunk.program, chunk_units, mesh, source, prefix + ".program");
    check_phases(chunk.program, prefix + ".program");
    if (chunk.keep_gathered &&
        std::any_of(chunk.plan.reshard_after_forward.begin(),
                    chunk.plan.reshard_after_forward.end(), [](bool reshard) { return reshard; })) {
      throw_bad_input(prefix + ".plan.reshard_after_forward",
                      "a chunk that keeps its parameters gathered across microbatches must not "
                      "reshard after forward");
    }
  }
  // Every stage's actions are the order the executor runs (pipeline_order; compare
  // measures against them): a schedule whose actions were reordered was replayed, and its
  // measurement then refused by compare.
  for (std::size_t r = 0; r < pipeline.stages.size(); ++r) {
    const std::vector<PipelineAction>& stored = pipeline.stages[r].actions;
    const std::vector<PipelineAction> order =
        pipeline_order(static_cast<int>(job.pp), static_cast<int>(job.virtual_stages),
                       static_cast<int>(job.microbatches), job.pp_schedule, static_cast<int>(r),
                       static_cast<int>(job.pipeline_steps));
    for (std::size_t k = 0; k < stored.size() && k < order.size(); ++k) {
      const PipelineAction& a = stored[k];
      const PipelineAction& b = order[k];
      if (a.chunk == b.chunk && a.microbatch == b.microbatch && a.backward == b.backward) continue;
      throw_bad_input(
          fmt::format("{}: pipeline.stages[{}].actions[{}]", source, r, k),
          fmt::format("the {} of chunk {} microbatch {}, where the {} schedule runs the {} of "
                      "chunk {} microbatch {}",
                      a.backward ? "backward" : "forward", a.chunk, a.microbatch,
                      to_string(job.pp_schedule), b.backward ? "backward" : "forward", b.chunk,
                      b.microbatch),
          "was this schedule edited? Tune again to get the schedule's own order");
    }
  }
  // Every stage's layout: parameters, dtypes and messages.
  for (int stage = 0; stage < mesh.pp; ++stage) {
    const ReplayMesh stage_mesh =
        replay_mesh(schedule, stage * mesh.stage_size(), world_size, scale_down, source);
    check_layout(schedule, workload, stage * mesh.stage_size(), stage_mesh, source);
  }
}

void check_host_memory(const ScheduleFile& schedule, int local_ranks, std::int64_t host_bytes,
                       const std::string& source) {
  const double needed = static_cast<double>(schedule.predicted.peak_allocated_bytes) *
                        static_cast<double>(std::max(local_ranks, 1));
  if (host_bytes <= 0 || needed <= static_cast<double>(host_bytes)) return;
  throw_runtime(
      source + ": predicted.peak_allocated_bytes",
      fmt::format("{} on this host at a predicted peak of {} each need {}, more than its "
                  "{} of memory (the cpu backend allocates what the schedule does)",
                  counted(local_ranks, "rank"),
                  format_bytes(schedule.predicted.peak_allocated_bytes),
                  format_bytes(static_cast<std::int64_t>(needed)), format_bytes(host_bytes)),
      "validate a scaled job on CPUs (e.g. --model tiny, docs/validation.md), fewer ranks per "
      "host, or replay this schedule with --backend cuda on its GPUs");
}

std::int64_t host_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page_size > 0 ? static_cast<std::int64_t>(pages) * page_size : 0;
}

void check_data_exact(const ScheduleFile& schedule, int world_size, const std::string& source,
                      bool scale_down) {
  const Workload workload = workload_of(schedule);
  const ReplayMesh first = replay_mesh(schedule, 0, world_size, scale_down, source);
  // The stages differ in their chunks' buckets only: one layout per stage.
  for (int stage = 0; stage < first.pp; ++stage) {
    const int rank = stage * first.stage_size();
    const ReplayMesh mesh = replay_mesh(schedule, rank, world_size, scale_down, source);
    const ReplayLayout layout = make_replay_layout(schedule, workload, rank, mesh);
    for (std::size_t b = 0; b < layout.buckets.size(); ++b) {
      const ReplayBucket& bucket = layout.buckets[b];
      if (bucket.kind != CollectiveKind::kReduceScatter || bucket.gradient_amplitude > 0) continue;
      const int replicas = bucket.all_reduced ? mesh.dp_replicate : 1;
      const std::int64_t addends =
          std::int64_t{mesh.dp_shard} * replicas * bucket.gradient_microbatches;
      const bool in_dtype = data_pattern::sum_amplitude(addends, bucket.dtype) == 0;
      const std::string why =
          in_dtype ? fmt::format("{} holds integers exactly only up to {}", to_string(bucket.dtype),
                                 data_pattern::exact_integer_limit(bucket.dtype))
                   : fmt::format(
                         "the fp32 gradient shards add {} copies of it, {} addends, "
                         "beyond fp32's exact integers (2^24)",
                         bucket.gradient_copy_outs, addends * bucket.gradient_copy_outs);
      // Only the ways out open to this run (found by QA: --scale-down was offered with
      // one shard rank, --reduce-dtype fp32 to a bucket of fp32).
      std::vector<std::string> ways;
      if (in_dtype && bucket.dtype != DType::kFP32) {
        ways.push_back("tune the schedule with --reduce-dtype fp32 (exact up to 2^24 addends)");
      }
      if (mesh.dp_shard > 1) ways.push_back("replay it on fewer ranks (--scale-down)");
      if (bucket.gradient_microbatches > 1) ways.push_back("tune it with fewer microbatches");
      ways.push_back("validate without --check-data");
      const std::string hint = join_alternatives(ways, ", or ");
      throw_bad_input(
          "--check-data",
          fmt::format("{}: {}bucket {} (reduce_scatter, {}) sums {} gradients per element ({} "
                      "x {} x {}) and {}: no gradient "
                      "pattern keeps every partial sum exact, so correct data would be reported "
                      "as mismatches",
                      source, first.pp > 1 ? fmt::format("stage {} ", stage) : "", b,
                      to_string(bucket.dtype), addends, counted(mesh.dp_shard, "shard rank"),
                      counted(replicas, "replica"),
                      counted(bucket.gradient_microbatches, "microbatch", "microbatches"), why),
          hint);
    }
  }
  for (const Unit& unit : workload.units) {
    for (const std::vector<Op>* ops :
         {&unit.forward_ops, &unit.backward_ops, &unit.recompute_ops}) {
      for (const Op& op : *ops) {
        if (op.kind != OpKind::kCollective) continue;
        const TpCollective collective = tp_collective_of(op, compute_collective_ranks(op, first));
        if (collective.amplitude > 0) continue;
        const std::string dim = to_string(op.parallel_dim);
        throw_bad_input(
            "--check-data",
            fmt::format("{}: {} {} {} sums over {} {} ranks in {}, which holds integers exactly "
                        "only up to {}: no pattern keeps every partial sum exact",
                        source, dim, to_string(collective.kind), op.name, collective.ranks, dim,
                        to_string(collective.dtype),
                        data_pattern::exact_integer_limit(collective.dtype)),
            fmt::format("validate without --check-data, or with a smaller {}", dim));
      }
    }
  }
}

namespace {

// Where each parameter's fp32 shards live in the rank's shard storage.
struct StoredParam {
  std::int64_t offset;
  const Param* param;
};

// Appends the layouts of `program`'s buckets to `layout` (parameters from `storage`;
// `prefix` names the Program in errors, e.g. "program"): its reduce-scatters sum
// `gradient_microbatches` microbatches' gradients, and it runs `runs_per_step` times a step.
void append_buckets(const Program& program, const std::map<std::string, StoredParam>& storage,
                    int gradient_microbatches, int runs_per_step, const std::string& prefix,
                    ReplayLayout& layout) {
  const int shards = layout.mesh.schedule_dp_shard();
  const std::size_t first = layout.buckets.size();
  const BucketTasks tasks(program);
  for (std::size_t b = 0; b < program.buckets.size(); ++b) {
    const BucketLayout& bucket = program.buckets[b];
    ReplayBucket replay;
    replay.kind = bucket.kind;
    replay.dtype = bucket.dtype;
    replay.shard_elements = bucket.shard_elements;
    if (bucket.kind == CollectiveKind::kReduceScatter) {
      replay.gradient_microbatches = gradient_microbatches;
      replay.gradient_copy_outs = runs_per_step * tasks.copy_outs(static_cast<int>(b));
    }
    std::int64_t elements = 0;
    for (std::size_t k = 0; k < bucket.slots.size(); ++k) {
      const BufferSlot& slot = bucket.slots[k];
      const auto found = storage.find(slot.param);
      const std::string where = fmt::format("{}.buckets[{}].slots", prefix, b);
      if (found == storage.end()) throw_bad_input(where, "unknown parameter " + slot.param);
      // Each slot's own rule, named (found probing: two slots' offsets swapped were
      // "outside the bucket's flat buffer", though both were inside it).
      const auto at = [&](const char* field) {
        return fmt::format("{}[{}].{} ({})", where, k, field, slot.param);
      };
      if (slot.offset != elements) {
        throw_bad_input(at("offset"),
                        fmt::format("{}, but the slots are packed in order: expected {} (the "
                                    "shard elements of the slots before it)",
                                    slot.offset, elements));
      }
      if (slot.shard_numel < 0 || slot.offset + slot.shard_numel > bucket.shard_elements) {
        throw_bad_input(
            at("shard_numel"),
            fmt::format("[{}, {}) runs past the bucket's {} shard elements", slot.offset,
                        slot.offset + slot.shard_numel, bucket.shard_elements));
      }
      if (slot.numel > slot.shard_numel * shards) {
        throw_bad_input(at("numel"), fmt::format("{} elements do not fit in {} shards of {}",
                                                 slot.numel, shards, slot.shard_numel));
      }
      elements += slot.shard_numel;
      const Param& param = *found->second.param;
      const DType wire =
          bucket.kind == CollectiveKind::kAllGather ? param.gather_dtype : param.reduce_dtype;
      // Reductions sum in the bucket's dtype: every slot must be in it. An all-gather
      // moves bytes, so each parameter keeps its own wire dtype (fp8 next to bf16).
      if (wire != DType::kBF16 && wire != DType::kFP32 && wire != DType::kFP8) {
        throw_bad_input(fmt::format("{} ({})", where, slot.param), unreplayable_dtype(wire),
                        kReplayableDtypesHint);
      }
      if (bucket.kind != CollectiveKind::kAllGather && wire != bucket.dtype) {
        throw_bad_input(fmt::format("{}.buckets[{}].dtype", prefix, b),
                        fmt::format("a reduce-scatter bucket of {} holds {} gradients ({})",
                                    to_string(bucket.dtype), to_string(wire), slot.param));
      }
      replay.slots.push_back({slot, wire, replay.shard_bytes, found->second.offset,
                              data_pattern::param_salt(slot.param)});
      replay.shard_bytes += slot.shard_numel * bytes_per_element(wire);
    }
    if (elements != bucket.shard_elements) {
      throw_bad_input(
          fmt::format("{}.buckets[{}].shard_elements", prefix, b),
          fmt::format("{} elements per shard, its slots hold {}", bucket.shard_elements, elements));
    }
    if (bucket.kind == CollectiveKind::kAllGather && !replay.slots.empty()) {
      // The lowering names the wire dtype when the parameters agree on one.
      const DType wire = replay.slots.front().wire;
      const bool uniform = std::all_of(replay.slots.begin(), replay.slots.end(),
                                       [&](const ReplaySlot& s) { return s.wire == wire; });
      if (uniform && bucket.dtype != wire) {
        throw_bad_input(fmt::format("{}.buckets[{}].dtype", prefix, b),
                        fmt::format("the bucket says {} but its parameters are gathered in {}",
                                    to_string(bucket.dtype), to_string(wire)));
      }
    }
    layout.buckets.push_back(std::move(replay));
  }
  for (const Task& task : program.tasks) {
    if (task.kind == TaskKind::kAllReduce && task.bucket >= 0 &&
        task.bucket < static_cast<int>(program.buckets.size())) {
      layout.buckets[first + static_cast<std::size_t>(task.bucket)].all_reduced = true;
    }
  }
  // Each element of a reduced shard sums the gradients of the run's shard group (each rank
  // writes one pattern, however many virtual shards it holds), every replica's too when
  // all-reduced, each holding gradient_microbatches microbatches' sum.
  const ReplayMesh& mesh = layout.mesh;
  for (std::size_t b = first; b < layout.buckets.size(); ++b) {
    ReplayBucket& replay = layout.buckets[b];
    if (replay.kind != CollectiveKind::kReduceScatter) continue;
    const std::int64_t addends = std::int64_t{mesh.dp_shard} *
                                 (replay.all_reduced ? mesh.dp_replicate : 1) *
                                 replay.gradient_microbatches;
    replay.gradient_amplitude =
        data_pattern::gradient_amplitude(addends, replay.dtype, replay.gradient_copy_outs);
  }
}

// Each parameter of `units` gets its shards_per_rank consecutive shards, back to back.
void store_params(const Workload& workload, const std::vector<int>& units,
                  std::map<std::string, StoredParam>& storage, ReplayLayout& layout) {
  for (const int u : units) {
    for (const Param& param : workload.units[static_cast<std::size_t>(u)].params) {
      storage.emplace(param.name, StoredParam{layout.shard_storage_elements, &param});
      layout.shard_storage_elements += param.shard_numel * layout.mesh.shards_per_rank;
    }
  }
}

// Does chunk `chunk` of the schedule hold its gradients with sync off until its step's
// last backward (chunk_accumulates)?
bool accumulates(const ScheduleFile& schedule, int chunk) {
  return chunk_accumulates(
      schedule.job, schedule.pipeline->chunks[static_cast<std::size_t>(chunk)].keep_gathered);
}

}  // namespace

PipelineReplayPlan plan_pipeline_replay(const ScheduleFile& schedule, const ReplayMesh& mesh,
                                        int rank) {
  FSDPTUNE_CHECK(schedule.pipeline.has_value(), "plan_pipeline_replay of a version 1 schedule");
  const SchedulePipeline& pipeline = *schedule.pipeline;
  const JobSpec job = normalize_job(schedule.model, schedule.job);
  const int P = static_cast<int>(job.pp);
  const int V = static_cast<int>(job.virtual_stages);
  const int M = static_cast<int>(job.microbatches);
  const int G = static_cast<int>(job.pipeline_steps);
  const int C = static_cast<int>(pipeline.chunks.size());
  FSDPTUNE_CHECK(P == mesh.pp && C == P * V, "plan_pipeline_replay: pp x virtual stages chunks");
  PipelineReplayPlan plan;
  plan.bucket_offsets.assign(static_cast<std::size_t>(C), -1);
  int buckets = 0;
  for (int c = mesh.stage; c < C; c += P) {
    plan.chunks.push_back(c);
    plan.bucket_offsets[static_cast<std::size_t>(c)] = buckets;
    buckets +=
        static_cast<int>(pipeline.chunks[static_cast<std::size_t>(c)].program.buckets.size());
  }
  const Workload workload = workload_of(schedule);
  const std::int64_t message_bytes = pipeline_send_bytes(workload);
  // The rank at the same place in the stage of chunk c.
  auto rank_of_chunk = [&](int c) { return (c % P) * mesh.stage_size() + mesh.rank_in_stage(); };
  auto tag = [&](int sender_chunk, int m, bool backward) {
    return (sender_chunk * M * G + m) * 2 + (backward ? 1 : 0);
  };
  auto add_message = [&](bool outgoing, int sender_chunk, int receiver_chunk, int m,
                         bool backward) {
    ReplayMessage message;
    message.outgoing = outgoing;
    message.peer = rank_of_chunk(outgoing ? receiver_chunk : sender_chunk);
    message.sender = outgoing ? rank : message.peer;
    message.tag = tag(sender_chunk, m, backward);
    message.gradient = backward;
    message.dtype = job.param_dtype;
    message.bytes = message_bytes;
    message.what = fmt::format("{} of chunk {} microbatch {} (chunk {} -> chunk {})",
                               backward ? "gradient" : "activation", sender_chunk, m, sender_chunk,
                               receiver_chunk);
    plan.messages.push_back(std::move(message));
    return static_cast<int>(plan.messages.size()) - 1;
  };
  bool reduced = false;  // the previous action is a backward that reduce-scatters
  for (const PipelineAction& order : pipeline_order(P, V, M, job.pp_schedule, mesh.stage, G)) {
    const int c = order.chunk;
    const int m = order.microbatch % M;  // in its pipeline step
    const ScheduleChunk& chunk = pipeline.chunks[static_cast<std::size_t>(c)];
    const Program& program = chunk.program;
    ReplayAction action;
    action.chunk = c;
    action.microbatch = order.microbatch;
    action.backward = order.backward;
    action.scope = chunk_action_scope(job, accumulates(schedule, c), order.backward, m);
    action.after_reduce_scatters = reduced;
    reduced = order.backward && action.scope.whole;
    action.tasks = chunk_action_tasks(program, action.scope);
    if (P > 1) {
      // Adjacent chunks are on different ranks whenever there is more than one.
      const int n = order.microbatch;
      if (!order.backward) {
        if (c > 0) action.receive_message = add_message(false, c - 1, c, n, false);
        if (c + 1 < C) action.send_message = add_message(true, c, c + 1, n, false);
      } else {
        if (c + 1 < C) action.receive_message = add_message(false, c + 1, c, n, true);
        if (c > 0) action.send_message = add_message(true, c, c - 1, n, true);
      }
    }
    plan.actions.push_back(std::move(action));
  }
  for (const int c : plan.chunks) {
    for (const Task& task : pipeline.chunks[static_cast<std::size_t>(c)].program.tasks) {
      if (task.kind == TaskKind::kOptimizer) plan.tail.emplace_back(c, task.id);
    }
  }
  return plan;
}

ReplayLayout make_replay_layout(const ScheduleFile& schedule, const Workload& workload, int rank,
                                const ReplayMesh& mesh) {
  ReplayLayout layout;
  layout.rank = rank;
  layout.world_size = mesh.world_size();
  layout.mesh = mesh;
  std::map<std::string, StoredParam> storage;
  if (!schedule.pipeline) {
    layout.streams = schedule.program.streams;
    std::vector<int> units(workload.units.size());
    for (std::size_t u = 0; u < units.size(); ++u) units[u] = static_cast<int>(u);
    store_params(workload, units, storage, layout);
    append_buckets(schedule.program, storage, 1, 1, "program", layout);
    // Tracked as scheduled; the shard storage lives inside it when it fits (backend.hpp).
    layout.persistent_bytes = schedule.program.persistent_bytes;
    return layout;
  }
  const SchedulePipeline& pipeline = *schedule.pipeline;
  // Streams by index, the same number on every rank (communicators are split over the
  // world once per stream).
  for (const ScheduleChunk& chunk : pipeline.chunks) {
    for (std::size_t s = layout.streams.size(); s < chunk.program.streams.size(); ++s) {
      layout.streams.push_back(chunk.program.streams[s]);
    }
  }
  const PipelineReplayPlan plan = plan_pipeline_replay(schedule, mesh, rank);
  for (const int c : plan.chunks) {
    store_params(workload, pipeline.chunks[static_cast<std::size_t>(c)].units, storage, layout);
  }
  for (const int c : plan.chunks) {
    const ScheduleChunk& chunk = pipeline.chunks[static_cast<std::size_t>(c)];
    // A chunk kept gathered reduce-scatters each pipeline step's microbatches' sum once
    // a step, the others each microbatch's gradients every microbatch.
    const int microbatches = static_cast<int>(schedule.job.microbatches);
    const int steps = static_cast<int>(schedule.job.pipeline_steps);
    const bool keep = accumulates(schedule, c);
    append_buckets(chunk.program, storage, keep ? microbatches : 1,
                   keep ? steps : microbatches * steps,
                   fmt::format("pipeline.chunks[{}].program", c), layout);
    layout.persistent_bytes += chunk.program.persistent_bytes;
  }
  if (mesh.pp > 1) {
    layout.first_pipeline_stream = static_cast<int>(layout.streams.size());
    for (const char* name : {"pipeline send activations", "pipeline send gradients",
                             "pipeline receive activations", "pipeline receive gradients"}) {
      layout.streams.push_back({name, StreamRole::kCommunication});
    }
  }
  layout.messages = plan.messages;
  return layout;
}

std::string agree_on_schedule(const ScheduleFile& schedule, const ExecutorOptions& options) {
  std::string hash = schedule_hash(schedule);
  std::string root_hash = hash;
  broadcast_string(root_hash, 0);
  std::string root_source = options.source;
  broadcast_string(root_source, 0);
  // And on how to run it: ranks started with other flags (an MPMD launch, a wrapper script
  // per node) would post different collectives (--check-data's step, --iters) and hang or
  // fail inside MPI.
  const std::string run_flags =
      fmt::format("--backend {} --iters {} --warmup {}{}{}{} --timeout {}", options.backend,
                  options.iterations, options.warmup, options.check_data ? " --check-data" : "",
                  options.scale_down ? " --scale-down" : "",
                  options.serial_collectives ? " --serial-collectives" : "", options.timeout_s);
  std::string root_run_flags = run_flags;
  broadcast_string(root_run_flags, 0);
  std::optional<Error> mismatch;
  if (hash != root_hash) {
    // Each rank's file named (found by QA: a wrapper giving ranks their own files was
    // told "schedule" only).
    const auto named = [](const std::string& source) {
      return source.empty() ? std::string() : fmt::format(" ({})", source);
    };
    mismatch = Error(ErrorKind::kBadInput, options.source.empty() ? "schedule" : options.source,
                     fmt::format("schedule hash {} differs from rank 0's {}{}", hash, root_hash,
                                 named(root_source)),
                     "every rank must replay the same schedule file");
  } else if (run_flags != root_run_flags) {
    mismatch = Error(ErrorKind::kBadInput, "validate flags",
                     fmt::format("'{}' differ from rank 0's '{}'", run_flags, root_run_flags),
                     "start every rank with the same flags");
  }
  agree_on_errors(mismatch);
  return hash;
}

PipelineStageFigures pipeline_stage_figures(const std::vector<RankStepFigures>& ranks,
                                            int stage_size) {
  PipelineStageFigures figures;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const RankStepFigures& rank = ranks[r];
    const std::size_t s = r / static_cast<std::size_t>(stage_size);
    if (figures.stages.size() <= s) figures.stages.resize(s + 1);
    MeasuredStage& stage = figures.stages[s];
    stage.rank = static_cast<int>(s);
    stage.end_s = std::max(stage.end_s, rank.end_s);
    stage.busy_s = std::max(stage.busy_s, rank.busy_s);
    stage.pipeline_end_s = std::max(stage.pipeline_end_s, rank.pipeline_end_s);
    stage.peak_allocated_bytes = std::max(stage.peak_allocated_bytes, rank.peak_allocated_bytes);
    if (rank.end_s > ranks[figures.slowest_rank].end_s) figures.slowest_rank = r;
  }
  return figures;
}

MeasuredResult execute(const ScheduleFile& schedule, const std::string& hash,
                       const ExecutorOptions& options, const MpiSession& mpi, Watchdog& watchdog) {
  const int rank = mpi.rank();
  const int world = mpi.world_size();

  // How many ranks share each node, fewest and most (compare: the job's layout or not).
  int node_ranks[2] = {-mpi.local_size(), mpi.local_size()};
  MPI_Allreduce(MPI_IN_PLACE, node_ranks, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  const std::string ranks_per_node = -node_ranks[0] == node_ranks[1]
                                         ? std::to_string(node_ranks[1])
                                         : fmt::format("{} to {}", -node_ranks[0], node_ranks[1]);

  // Setting up the backend is local: agree on its outcome before the replay.
  watchdog.beat("laying out the replay's buffers");
  const Workload workload = workload_of(schedule);
  const ReplayMesh mesh = replay_mesh(schedule, rank, world, options.scale_down, "schedule");
  const ReplayLayout layout = make_replay_layout(schedule, workload, rank, mesh);
  std::vector<Workload> chunk_workloads;
  if (schedule.pipeline) {
    for (const ScheduleChunk& chunk : schedule.pipeline->chunks) {
      chunk_workloads.push_back(chunk_workload(workload, chunk.units));
    }
  }
  watchdog.beat("creating the backend");
  std::unique_ptr<Backend> backend;
  std::optional<Error> setup_error;
  try {
    if (options.backend == "cpu") {
      backend = make_cpu_backend();
    } else if (options.backend == "cuda") {
      backend = make_cuda_backend(mpi.local_rank(), options.attention);
    } else {
      throw_bad_input("--backend", "unknown backend '" + options.backend + "'", "cpu or cuda");
    }
  } catch (const Error& e) {
    setup_error = e;
  }
  watchdog.beat("waiting for every rank to create its backend");
  agree_on_errors(setup_error);

  MeasuredResult measured;
  try {
    // Watched from here to the end of the try: the backend outlives it.
    watchdog.watch(backend.get());
    const std::unique_ptr<Watchdog, void (*)(Watchdog*)> unwatch(
        &watchdog, [](Watchdog* w) { w->watch(nullptr); });
    watchdog.beat("preparing the backend's buffers and communicators");
    backend->prepare(layout);
    watchdog.beat("building the replay");
    std::unique_ptr<StepReplay> replay;
    if (schedule.pipeline) {
      replay = std::make_unique<PipelineReplay>(schedule, chunk_workloads, layout, *backend,
                                                !options.serial_collectives);
    } else {
      replay = std::make_unique<Replay>(schedule, workload, *backend, !options.serial_collectives);
    }
    if (rank == options.stall_rank) {
      watchdog.beat("stalled on purpose (--debug-stall-rank)");
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    }

    std::vector<StepRecord> records;
    const int total = (options.check_data ? 1 : 0) + options.warmup + options.iterations;
    for (int step = 0; step < total; ++step) {
      const bool checking = options.check_data && step == 0;
      const bool measuring = step >= total - options.iterations;
      if (step == total - options.iterations) backend->reset_peak();
      if (checking) {
        backend->set_data_check({true, rank == world - 1 ? options.corrupt_tp_collective : -1});
      }
      watchdog.beat(fmt::format("waiting for the other ranks before step {}", step));
      MPI_Barrier(MPI_COMM_WORLD);
      watchdog.beat(fmt::format("replaying step {}", step));
      StepRecord record = replay->step();
      record.own_step_time_s = record.step_time_s;
      double slowest_s = 0;
      MPI_Allreduce(&record.step_time_s, &slowest_s, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      record.step_time_s = slowest_s;
      if (checking) {
        watchdog.beat("checking data");
        std::optional<std::string> message = backend->tp_check_failure();
        backend->set_data_check({});
        if (rank == world - 1) corrupt_for_tests(*backend, layout, options);
        if (!message) message = check_all_buckets(*backend, layout, 1, watchdog);
        // A test hook must corrupt what the checks read (found by QA: a gradient shard of an
        // all-gather bucket, a message the last rank sends, a TP collective of a job without
        // TP were corrupted nowhere, and the run passed "data checked").
        if (!message && rank == world - 1) message = unused_test_hooks(options);
        std::optional<Error> failure;
        if (message) failure = Error(ErrorKind::kRuntime, "--check-data", *message);
        try {
          agree_on_errors(failure);
        } catch (const Error& e) {
          throw AgreedError{e};
        }
      }
      if (measuring) records.push_back(std::move(record));
    }
    watchdog.beat("collecting results");

    const std::int64_t peak = backend->peak_tracked_bytes();
    std::int64_t max_peak = 0;
    MPI_Allreduce(&peak, &max_peak, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
    std::vector<std::int64_t> peaks(static_cast<std::size_t>(world), 0);
    MPI_Gather(&peak, 1, MPI_INT64_T, peaks.data(), 1, MPI_INT64_T, 0, MPI_COMM_WORLD);

    measured.schedule_hash = hash;
    measured.backend = backend->name();
    measured.world_size = world;
    measured.pp = mesh.pp;
    measured.dp_replicate = mesh.dp_replicate;
    measured.dp_shard = mesh.dp_shard;
    measured.tp = mesh.tp;
    measured.cp = mesh.cp;
    measured.shards_per_rank = mesh.shards_per_rank;
    measured.iterations = options.iterations;
    measured.warmup = options.warmup;
    measured.data_checked = options.check_data;
    std::vector<double> compute, exposed, own_steps, busy, pipeline_end;
    for (const StepRecord& record : records) {
      measured.step_times_s.push_back(record.step_time_s);
      compute.push_back(record.compute_s);
      exposed.push_back(record.exposed_comm_s);
      own_steps.push_back(record.own_step_time_s);
      busy.push_back(record.busy_s);
      pipeline_end.push_back(record.pipeline_end_s);
    }
    measured.step_time_s = measured_median(measured.step_times_s);
    measured.compute_s = measured_median(compute);
    measured.exposed_comm_s = measured_median(exposed);
    measured.peak_allocated_bytes = max_peak;
    const std::size_t task_count = records.empty() ? 0 : records.front().timings.size();
    for (std::size_t t = 0; t < task_count; ++t) {
      std::vector<double> starts, ends;
      for (const StepRecord& record : records) {
        starts.push_back(record.timings[t].start_s);
        ends.push_back(record.timings[t].end_s);
      }
      measured.timings.push_back({measured_median(starts), measured_median(ends)});
    }
    // Every rank's own view (medians over the measured steps), gathered to rank 0: a
    // collective's time on one rank includes waiting for the others to join it.
    constexpr std::size_t kHead = 5;  // step, compute, exposed, busy, pipeline end
    std::vector<double> mine{measured_median(own_steps), measured_median(compute),
                             measured_median(exposed), measured_median(busy),
                             measured_median(pipeline_end)};
    for (const TaskTiming& timing : measured.timings) {
      mine.push_back(timing.start_s);
      mine.push_back(timing.end_s);
    }
    std::vector<double> all(rank == 0 ? mine.size() * static_cast<std::size_t>(world) : 0);
    MPI_Gather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(),
               static_cast<int>(mine.size()), MPI_DOUBLE, 0, MPI_COMM_WORLD);
    std::vector<std::array<double, kHead>> heads;
    for (int r = 0; rank == 0 && r < world; ++r) {
      const double* values = all.data() + static_cast<std::size_t>(r) * mine.size();
      RankMeasurement view;
      view.step_time_s = values[0];
      view.peak_allocated_bytes = peaks[static_cast<std::size_t>(r)];
      for (std::size_t t = 0; t < measured.timings.size(); ++t) {
        view.timings.push_back({values[kHead + 2 * t], values[kHead + 1 + 2 * t]});
      }
      measured.ranks.push_back(std::move(view));
      heads.push_back({values[0], values[1], values[2], values[3], values[4]});
    }
    if (schedule.pipeline) {
      // Every rank's actions and chunk tasks, gathered to rank 0 (sizes differ by stage).
      RankMeasurement own;
      add_pipeline_view(records, own);
      const std::vector<double> packed = pack_pipeline_view(own);
      const int count = static_cast<int>(packed.size());
      std::vector<int> counts(static_cast<std::size_t>(world), 0);
      MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
      std::vector<int> offsets(static_cast<std::size_t>(world), 0);
      for (std::size_t r = 1; r < offsets.size(); ++r) {
        offsets[r] = offsets[r - 1] + counts[r - 1];
      }
      std::vector<double> views(rank == 0 ? static_cast<std::size_t>(offsets.back() + counts.back())
                                          : 0);
      MPI_Gatherv(packed.data(), count, MPI_DOUBLE, views.data(), counts.data(), offsets.data(),
                  MPI_DOUBLE, 0, MPI_COMM_WORLD);
      for (int r = 0; rank == 0 && r < world; ++r) {
        unpack_pipeline_view(views.data() + offsets[static_cast<std::size_t>(r)],
                             measured.ranks[static_cast<std::size_t>(r)]);
      }
    }
    if (schedule.pipeline && rank == 0) {
      // Each stage as its slowest rank; compute and exposed communication of the slowest
      // rank of the step (what the prediction's summary reports).
      MeasuredPipeline pipeline;
      pipeline.microbatches = schedule.job.microbatches;
      pipeline.pipeline_steps = schedule.job.pipeline_steps;
      pipeline.virtual_stages = schedule.job.virtual_stages;
      pipeline.schedule = to_string(schedule.job.pp_schedule);
      pipeline.message_bytes = pipeline_send_bytes(workload);
      std::vector<RankStepFigures> figures;
      for (std::size_t r = 0; r < heads.size(); ++r) {
        figures.push_back(
            {heads[r][0], heads[r][1], heads[r][2], heads[r][3], heads[r][4], peaks[r]});
      }
      const PipelineStageFigures stages =
          pipeline_stage_figures(figures, static_cast<int>(mesh.stage_size()));
      pipeline.stages = stages.stages;
      measured.compute_s = figures[stages.slowest_rank].compute_s;
      measured.exposed_comm_s = figures[stages.slowest_rank].exposed_comm_s;
      measured.pipeline = std::move(pipeline);
    }
    measured.environment = backend->environment();
    measured.environment["host"] = host_name();
    measured.environment["ranks_per_node"] = ranks_per_node;
    measured.environment["date"] = iso_date_utc();
    measured.environment["command"] = options.command;
    measured.environment["compute_collectives"] =
        options.serial_collectives ? "serial" : "overlapped";
    // Overlaps the model counts whose partner op does not split (op_steps), in rank 0's
    // Programs: how many compute-task collectives run whole instead, and the first.
    if (const std::vector<std::string> whole = replay->overlaps_not_replayed();
        !options.serial_collectives && !whole.empty()) {
      measured.environment["overlaps_not_replayed"] =
          fmt::format("{} compute-task collectives, the first {}", whole.size(), whole.front());
    }
    measured.environment["staging_bytes"] = std::to_string(backend->staging_bytes());
    measured.environment["kernel_workspace_bytes"] =
        std::to_string(backend->kernel_workspace_bytes());
  } catch (const AgreedError& agreed) {
    throw agreed.error;
  } catch (const Error& e) {
    abort_all_ranks(rank, e.what(), e.exit_code());
  } catch (const std::bad_alloc&) {
    // Found probing validate: a schedule whose buffers exceed the host printed only
    // "std::bad_alloc".
    abort_all_ranks(rank,
                    fmt::format("schedule: out of memory: the replay's buffers (persistent {}, "
                                "staging and the step's allocations besides) do not fit in "
                                "this host's memory; replay a smaller job or fewer ranks per host",
                                format_bytes(layout.persistent_bytes)),
                    1);
  } catch (const std::exception& e) {
    abort_all_ranks(rank, e.what(), 1);
  }
  return measured;
}

// A backend without pipeline support (every backend here has it: cpu and cuda override
// these).
namespace {
[[noreturn]] void no_pipelines(const Backend& backend) {
  throw_runtime("--backend " + backend.name(),
                "this backend replays version-1 schedules only (no pipeline messages or "
                "gradient accumulation)",
                "replay pipeline schedules with --backend cpu");
}
}  // namespace

void Backend::accumulate_gradients(int, int, bool) { no_pipelines(*this); }
void Backend::send(int, int) { no_pipelines(*this); }
void Backend::receive(int, int) { no_pipelines(*this); }
void Backend::complete_sends(int) { no_pipelines(*this); }
std::vector<std::byte> Backend::read_message(int) { no_pipelines(*this); }
void Backend::overwrite_message(int, std::int64_t, const std::vector<std::byte>&) {
  no_pipelines(*this);
}

}  // namespace fsdptune
