// A pipeline stage's memory, action by action (docs/parallelism.md "Memory per stage"):
// what each action of a chunk runs of its one-microbatch Program and how its memory events
// apply (the executor replays the same), and the walk over a rank's actions in order.
// Pure arithmetic: the events' timing within an action is the scheduler's (chunk_memory).
#include <algorithm>

#include "fsdptune/error.hpp"
#include "fsdptune/pipeline.hpp"
#include "fsdptune/simulator.hpp"
#include "fsdptune/units.hpp"

namespace fsdptune {

namespace {

bool is_compute_kind(TaskKind kind) {
  return kind == TaskKind::kForward || kind == TaskKind::kRecompute ||
         kind == TaskKind::kBackward || kind == TaskKind::kOptimizer;
}

}  // namespace

// Declared in simulator.hpp: the simulator's reserved estimate, defined here in the core
// so that stage_memory prices a stage's level as the simulator prices a Program's.
std::int64_t reserved_estimate_bytes(std::int64_t sharded_rounded, std::int64_t transient_rounded,
                                     const SimOptions& options) {
  return static_cast<std::int64_t>(static_cast<double>(sharded_rounded) +
                                   (1.0 + options.allocator_fragmentation) *
                                       static_cast<double>(transient_rounded));
}

std::int64_t round_to_segment(std::int64_t bytes, std::int64_t segment_bytes) {
  if (segment_bytes <= 1) return bytes;
  const std::int64_t magnitude = bytes >= 0 ? bytes : -bytes;
  // A power-of-two segment (the default 2 MiB) rounds with a mask: the same value as
  // round_up without a 64-bit division per memory event.
  const std::int64_t rounded = (segment_bytes & (segment_bytes - 1)) == 0
                                   ? (magnitude + segment_bytes - 1) & ~(segment_bytes - 1)
                                   : round_up(magnitude, segment_bytes);
  return bytes >= 0 ? rounded : -rounded;
}

ChunkActionScope chunk_action_scope(const JobSpec& job, bool accumulates, bool backward,
                                    int microbatch) {
  const int M = static_cast<int>(std::max<std::int64_t>(1, job.microbatches));
  const int m = microbatch % M;  // in its pipeline step
  ChunkActionScope scope;
  scope.backward = backward;
  scope.whole = !accumulates || (backward ? m == M - 1 : m == 0);
  scope.gathered_params_events = scope.whole;
  scope.gradient_allocations = !accumulates || (backward && m == 0);
  scope.accumulate_gradients = accumulates && backward;
  if (accumulates) {
    scope.gradient_bytes_numerator = bytes_per_element(job.reduce_dtype);
    scope.gradient_bytes_denominator = bytes_per_element(job.param_dtype);
  }
  return scope;
}

std::vector<int> chunk_action_tasks(const Program& program, const ChunkActionScope& scope) {
  const int last_forward = last_forward_task(program);
  std::vector<int> tasks;
  for (const Task& task : program.tasks) {
    if (task.kind == TaskKind::kOptimizer) continue;
    const bool forward_phase = task.id <= last_forward;
    if (forward_phase == scope.backward) continue;
    const bool compute =
        scope.backward ? (task.kind == TaskKind::kRecompute || task.kind == TaskKind::kBackward)
                       : task.kind == TaskKind::kForward;
    if (scope.whole || compute) tasks.push_back(task.id);
  }
  return tasks;
}

ChunkActionEvents::ChunkActionEvents(const Program& program)
    : program_(&program), has_copy_in_(program.buckets.size(), false) {
  for (const Task& task : program.tasks) {
    if (task.kind == TaskKind::kCopyIn && task.bucket >= 0 &&
        task.bucket < static_cast<int>(has_copy_in_.size())) {
      has_copy_in_[static_cast<std::size_t>(task.bucket)] = true;
    }
  }
}

TrackedEvents ChunkActionEvents::operator()(const ChunkActionScope& scope, const Task& task,
                                            const MemoryEvent& event) const {
  if (event.category == MemoryCategory::kGatheredParams && !scope.gathered_params_events) {
    return {};
  }
  const bool allocation = is_compute_kind(task.kind) && event.bytes > 0;
  if (event.category != MemoryCategory::kGradients) return TrackedEvents::one(event);
  if (allocation && !scope.gradient_allocations) {
    if (!scope.accumulate_gradients || task.kind != TaskKind::kBackward) return {};
    // A later backward of an accumulating chunk: the gradient it makes in the param dtype
    // lives until its task's end, when it is added into the accumulated one and freed (a
    // tied weight's, which the reader's backward makes, too: FSDP2 adds it at its own
    // unit's post-backward, a little later).
    MemoryEvent freed = event;
    freed.bytes = -event.bytes;
    freed.at_end = true;
    return TrackedEvents{{event, freed}, 2};
  }
  if (scope.gradient_bytes_numerator == scope.gradient_bytes_denominator)
    return TrackedEvents::one(event);
  // The task that frees the unsharded gradients of its reduce-scatter bucket: the copy-in,
  // or the reduce-scatter itself when the bucket has no copy-in. A reduce-scatter's own
  // -full_bytes frees the copy-in's reduce-dtype input, not gradients.
  bool consumes = false;
  if (task.bucket >= 0 && task.bucket < static_cast<int>(program_->buckets.size())) {
    const auto b = static_cast<std::size_t>(task.bucket);
    consumes = task.kind == TaskKind::kCopyIn
                   ? program_->buckets[b].kind == CollectiveKind::kReduceScatter
                   : task.kind == TaskKind::kReduceScatter && !has_copy_in_[b];
  }
  const bool consumed = event.bytes < 0 && consumes && event.bytes != -task.bytes;
  MemoryEvent tracked = event;
  if (allocation || consumed) {
    tracked.bytes = event.bytes * scope.gradient_bytes_numerator / scope.gradient_bytes_denominator;
  }
  return TrackedEvents::one(tracked);
}

ChunkMemory chunk_memory_with(
    const JobSpec& job, const Program& program, bool accumulates,
    const std::function<ActionMemory(const ChunkActionScope* scope, const std::vector<int>& tasks)>&
        action_memory) {
  const auto action = [&](bool backward, int microbatch) {
    const ChunkActionScope scope = chunk_action_scope(job, accumulates, backward, microbatch);
    return action_memory(&scope, chunk_action_tasks(program, scope));
  };
  const int M = static_cast<int>(std::max<std::int64_t>(1, job.microbatches));
  ChunkMemory memory;
  memory.persistent_bytes = program.persistent_bytes;
  memory.first_forward = action(false, 0);
  memory.forward = action(false, std::min(1, M - 1));
  memory.first_backward = action(true, 0);
  memory.backward = action(true, std::min(1, M - 1));
  memory.last_backward = action(true, M - 1);
  std::vector<int> optimizer;
  for (const Task& task : program.tasks) {
    if (task.kind == TaskKind::kOptimizer) optimizer.push_back(task.id);
  }
  memory.optimizer = action_memory(nullptr, optimizer);
  return memory;
}

PipelineSpec pipeline_spec_of(const JobSpec& job) {
  PipelineSpec spec;
  spec.stages = static_cast<int>(job.pp);
  spec.virtual_stages = static_cast<int>(job.virtual_stages);
  spec.microbatches = static_cast<int>(job.microbatches);
  spec.steps = static_cast<int>(job.pipeline_steps);
  spec.schedule = job.pp_schedule;
  return spec;
}

const ActionMemory& chunk_action_memory(const ChunkMemory& memory, bool backward, int microbatch,
                                        int microbatches) {
  const int M = std::max(1, microbatches);
  const int m = microbatch % M;
  if (!backward) return m == 0 ? memory.first_forward : memory.forward;
  if (m == M - 1) return memory.last_backward;
  return m == 0 ? memory.first_backward : memory.backward;
}

StageMemory stage_memory(const PipelineSpec& spec, int rank,
                         const std::vector<PipelineAction>& actions) {
  const int P = spec.stages;
  const int C = static_cast<int>(spec.chunks.size());
  FSDPTUNE_CHECK(rank >= 0 && rank < P, "stage_memory: a rank of the pipeline");
  SimOptions allocator;
  allocator.allocator_segment_bytes = spec.allocator_segment_bytes;
  allocator.allocator_fragmentation = spec.allocator_fragmentation;
  StageMemory stage;
  MemoryBreakdown level{};
  std::int64_t allocated = 0;
  for (int c = rank; c < C; c += P) {
    const ChunkMemory& memory = spec.chunks[static_cast<std::size_t>(c)].memory;
    allocated += memory.persistent_bytes;
    level[static_cast<int>(MemoryCategory::kShardedState)] += memory.persistent_bytes;
  }
  // The reserved estimate of what the rank holds: its sharded state rounded to segments
  // once (as the simulator rounds a Program's), every event its actions left rounded as it
  // was allocated (ActionMemory's held rounded sizes), so that one stage of one microbatch
  // is the simulator's Program.
  std::int64_t sharded_rounded = round_to_segment(
      level[static_cast<int>(MemoryCategory::kShardedState)], allocator.allocator_segment_bytes);
  std::int64_t transient_rounded = 0;
  const auto reserved = [&] {
    return reserved_estimate_bytes(sharded_rounded, transient_rounded, allocator);
  };
  stage.start_bytes = allocated;
  stage.peak_allocated_bytes = allocated;
  stage.peak_breakdown = level;
  stage.peak_reserved_bytes = reserved();
  const auto run = [&](const ActionMemory& action) {
    const std::int64_t peak = allocated + action.peak_bytes;
    if (peak > stage.peak_allocated_bytes) {
      stage.peak_allocated_bytes = peak;
      for (std::size_t k = 0; k < level.size(); ++k) {
        stage.peak_breakdown[k] = level[k] + action.peak_breakdown[k];
      }
    }
    // The two estimates added can truncate a byte under the estimate of the sums, which the
    // simulator takes: the larger (the estimate of the sums is no more than reserved()
    // where an action records no rounded sizes at its peak).
    stage.peak_reserved_bytes = std::max(
        {stage.peak_reserved_bytes, reserved() + action.peak_reserved_bytes,
         reserved_estimate_bytes(sharded_rounded + action.peak_reserved_sharded_rounded_bytes,
                                 transient_rounded + action.peak_reserved_transient_rounded_bytes,
                                 allocator)});
    sharded_rounded += action.held_sharded_rounded_bytes;
    transient_rounded += action.held_transient_rounded_bytes;
    allocated += action.held_bytes;
    for (std::size_t k = 0; k < level.size(); ++k) level[k] += action.held_breakdown[k];
    return peak;
  };
  for (const PipelineAction& action : actions) {
    FSDPTUNE_CHECK(action.chunk >= 0 && action.chunk < C && action.chunk % P == rank,
                   "stage_memory: an action of another rank's chunk");
    const ChunkTimes& times = spec.chunks[static_cast<std::size_t>(action.chunk)];
    stage.action_peak_bytes.push_back(run(
        chunk_action_memory(times.memory, action.backward, action.microbatch, spec.microbatches)));
    stage.action_end_bytes.push_back(allocated);
  }
  stage.optimizer_peak_bytes = allocated;
  for (int c = rank; c < C; c += P) {
    stage.optimizer_peak_bytes = std::max(
        stage.optimizer_peak_bytes, run(spec.chunks[static_cast<std::size_t>(c)].memory.optimizer));
  }
  stage.end_bytes = allocated;
  return stage;
}

}  // namespace fsdptune
