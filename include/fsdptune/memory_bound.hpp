// The highest memory a Program can reach under any task durations. Pure: no I/O.
//
// simulate() accounts memory along one timeline: the one its costs predict. The real
// order of starts and ends across streams follows the real durations, and a collective
// that runs slower (or faster) than predicted keeps its buffers alive across other
// allocations: a CPU replay with activation checkpointing measured 48.6 MiB against a
// simulated 45.7 (docs/validation.md "Peak memory at any timing"). Every order the
// executor can take keeps each stream in program order and every dependency, so the states
// it can pass through are the order ideals of one partial order of the memory events:
//   - a task's start events in program order, then its end events (the executor applies
//     them one by one, around the task's work);
//   - a task's first event after the last event of the task before it on its stream
//     (streams are in-order queues) and after the last event of each of its deps.
// The allocated bytes of a state are the sum of the events in its ideal, so the highest
// over every timing is a maximum-weight closure, found exactly as a minimum cut (Picard,
// "Maximal closure of a graph and applications to combinatorial problems", 1976).
// Orders that no timing of this hardware produces are counted too: this is an upper
// bound on every measured peak, not a prediction.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fsdptune/pipeline.hpp"
#include "fsdptune/program.hpp"
#include "fsdptune/schedule.hpp"
#include "fsdptune/simulator.hpp"

namespace fsdptune {

struct AnyTimingPeak {
  // persistent_bytes plus the heaviest state's events, bytes; >= simulate()'s
  // peak_allocated_bytes (its timeline is one of the orders).
  std::int64_t peak_allocated_bytes = 0;
  MemoryBreakdown breakdown{};  // of the heaviest state, by category
  // Per stream, the task started and not yet ended in the heaviest state (some of its
  // events applied), or -1 when the stream sits between tasks.
  std::vector<int> running;
  // Per stream, the number of its tasks ended in the heaviest state.
  std::vector<int> ended;
  bool operator==(const AnyTimingPeak&) const = default;
};

// REQUIRES: a valid Program (tasks on its streams, deps on earlier task ids).
// Deterministic; O(events) nodes and edges, one maximum flow (Dinic's algorithm).
AnyTimingPeak any_timing_peak(const Program& program);

// The simulator's reserved-memory estimate (SimOptions: allocator_segment_bytes,
// allocator_fragmentation; docs/plan-format.md) at the state where it is highest under
// any task durations, bytes: >= simulate(program, options).peak_reserved_bytes. What
// `tune --fit any-timing` compares with the memory limit.
std::int64_t any_timing_reserved_bytes(const Program& program, const SimOptions& options = {});

// Where each stream is in `peak`'s state, for a person: `compute in "bwd layers.2",
// reduce_scatter after "RS b2 layers.3"` (a stream between tasks: after its last ended
// task, or "not started"). Task names as the Program has them.
std::string describe_any_timing_state(const Program& program, const AnyTimingPeak& peak);

// What a chunk's one-microbatch Program can hold at any timing beyond its simulated peaks
// (ChunkTimes::base_peak_allocated_bytes / base_peak_reserved_bytes), bytes, both >= 0,
// and its actions' memory at any timing.
struct ChunkAnyTimingExcess {
  std::int64_t allocated_bytes = 0;
  std::int64_t reserved_bytes = 0;
  ChunkMemory memory;  // chunk_any_timing_memory
  bool operator==(const ChunkAnyTimingExcess&) const = default;
};
// REQUIRES: `times` are chunk_times of `program` (a chunk of `job`) simulated with default
// SimOptions.
ChunkAnyTimingExcess chunk_any_timing_excess(const JobSpec& job, const Program& program,
                                             const ChunkTimes& times);

// ChunkTimes::memory of a chunk of `job` (accumulating or not) with each kind of action's
// peaks at any timing of its tasks, as a Program of their own: every order of their events
// that keeps their streams' order and their dependencies among them (the rank's earlier
// actions done); held bytes as predicted.
ChunkMemory chunk_any_timing_memory(const JobSpec& job, const Program& program, bool accumulates);

// A pipeline stage's peaks at any timing (docs/parallelism.md "Peak memory at any
// timing"): stage_memory over the rank's actions (each stage's `actions`, else
// pipeline_order) with its chunks' actions at any timing (`chunk_memory[c]`,
// chunk_any_timing_memory, one per chunk in pipeline_chunks order): at least the walk's predicted
// peaks; a schedule written before 2026-12-05 stores composed stage peaks, which can be above it.
// The rank's order of actions is the same at any timing. (StageAnyTiming is in pipeline.hpp, where
// reports take it too.) By rank.
std::vector<StageAnyTiming> pipeline_any_timing(const PipelineSpec& spec,
                                                const std::vector<StageResult>& stages,
                                                const std::vector<ChunkMemory>& chunk_memory);
// Of a simulated pipeline (its chunk Programs and times) and of a pipeline schedule (its
// chunks' stored Programs, its stages as predicted).
std::vector<StageAnyTiming> pipeline_any_timing(const PipelineSimulation& sim);
std::vector<StageAnyTiming> pipeline_any_timing(const ScheduleFile& schedule);
// The largest stage reserved peak at any timing: what `tune --fit any-timing` compares
// with the limit for a pipelined job.
std::int64_t largest_any_timing_reserved_bytes(const std::vector<StageAnyTiming>& stages);

// A version 1 schedule's prediction against its stored Program simulated (simulate() with
// the default SimOptions, as `simulate --plan` replays it): Error(kBadInput) naming
// `source` and predicted.step_time_s, timings[t], compute_s, comm_s, exposed_comm_s,
// idle_s (within a relative 1e-9), predicted.peak_allocated_bytes, peak_reserved_bytes
// or a peak_breakdown entry (exactly) where one differs (docs/schedule-format.md: a version 1
// schedule reproduces `predicted`). Nothing for a pipeline schedule, whose stage figures
// schedule_from_json holds to its stages.
void check_prediction(const ScheduleFile& schedule, const std::string& source);
// A version 1 schedule's plan against its stored Program: lowered again over the file's
// model and job (costed with its hardware's analytic model) it gives that Program up to
// the costs (durations, contention, cost counts); else Error(kBadInput) naming `source`'s
// plan and the first difference (found by QA: an edited plan was printed, replayed as the
// Program and started searches). Nothing for a pipeline schedule.
void check_plan(const ScheduleFile& schedule, const std::string& source);
// A schedule's hardware against its provenance (found by QA: an edited spec was printed and
// replayed): where the costs were a hardware spec's alone (cost_source is its id), the
// spec must be the one tuned on, its content hashing to cost_hash; a cost_source that is
// a built-in id other than hardware.id is refused too. Error(kBadInput) naming `source`'s
// hardware. A profile's schedule (cost_source a file) is not checked here.
void check_cost_hash(const ScheduleFile& schedule, const std::string& source);
// schedule_from_json, then check_cost_hash, check_plan and check_prediction: how every CLI
// reader takes a schedule file (simulate, validate, compare, report, pipeline).
ScheduleFile checked_schedule_from_json(const nlohmann::json& json, const std::string& source);

}  // namespace fsdptune
