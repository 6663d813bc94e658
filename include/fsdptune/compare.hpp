// Predicted vs measured: the schedule's prediction next to what the executor measured,
// step by step and task by task (`fsdptune compare`).
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fsdptune/measured.hpp"
#include "fsdptune/schedule.hpp"

namespace fsdptune {

// A predicted and a measured value; relative_error = (predicted - measured) / measured
// (0 when both are 0; +-inf-free: a zero measurement with a nonzero prediction gives 1).
struct ComparedValue {
  double predicted = 0;
  double measured = 0;
  double relative_error = 0;
  bool operator==(const ComparedValue&) const = default;
};
ComparedValue compare_values(double predicted, double measured);

struct TaskDifference {
  int task = 0;
  std::string name;
  std::string kind;  // to_string(TaskKind)
  ComparedValue duration_s;
  ComparedValue start_s;  // relative to the step start (0 and 0 for a chunk's task)
  // A pipeline chunk's task (its id in the chunk's Program; -1: the schedule's Program):
  // duration_s its modelled duration against the median of its runs on the first rank of
  // the chunk's stage, which ran it `runs` times a step (1 for the schedule's Program).
  int chunk = -1;
  std::int64_t runs = 1;
  bool operator==(const TaskDifference&) const = default;
};

// One pipeline action (chunk, microbatch, forward or backward) on the first rank of its
// stage: the schedule's pipeline.stages[].actions next to the measured ranks[].actions.
struct ActionDifference {
  int stage = 0;
  int chunk = 0;
  int microbatch = 0;
  bool backward = false;
  ComparedValue duration_s;
  ComparedValue start_s;  // relative to the step start
  bool operator==(const ActionDifference&) const = default;
};

// One pipeline stage: the schedule's pipeline.stages[] next to the measured stage.
struct StageComparison {
  int rank = 0;
  ComparedValue busy_s;
  ComparedValue end_s;
  ComparedValue peak_allocated_bytes;
  // The most the stage's actions can allocate under any timing (pipeline_any_timing,
  // memory_bound.hpp): the measured peak stays within it unless the replay allocates what
  // the actions do not. 0: not known (a pipeline without its chunks, not a schedule file's).
  std::int64_t any_timing_peak_allocated_bytes = 0;
  bool operator==(const StageComparison&) const = default;
};

struct Comparison {
  std::string schedule_hash;
  std::string backend;
  std::int64_t world_size = 0;
  // The run's mesh (MeasuredResult): shards_per_rank > 1 is a scaled-down replay.
  std::int64_t pp = 1;
  std::int64_t microbatches = 1;    // of one pipeline step
  std::int64_t pipeline_steps = 1;  // JobSpec::pipeline_steps
  // The pipeline schedule ("1f1b", ...) and its virtual stages: in the text only.
  std::string pp_schedule;
  std::int64_t virtual_stages = 1;
  std::int64_t dp_replicate = 1;
  std::int64_t dp_shard = 0;
  std::int64_t tp = 1;
  std::int64_t cp = 1;  // CP ranks inside each shard group
  std::int64_t shards_per_rank = 1;
  std::int64_t schedule_dp_shard = 0;
  // What a scaled-down replay keeps (docs/validation.md "Scaled-down replay"): each rank's
  // compute, memory events and collective buffers, so compute_s and peak memory compare
  // as usual. Its FSDP collectives run over dp_shard instead of schedule_dp_shard ranks,
  // each rank sending shards_per_rank times the bytes: step time, exposed communication
  // and communication task times are not the prediction's and are marked so.
  bool communication_comparable = true;
  bool data_checked = false;
  // Which overlapped collectives a replay with --serial-collectives (the measurement's
  // environment.compute_collectives "serial") ran in op order: "CP", "async TP", "CP and
  // async TP"; "" for a replay of the overlap, or a schedule without any.
  std::string serial_collectives;
  // The measurement's environment.overlaps_not_replayed: overlapped collectives that ran
  // whole because their partner op does not split (op_steps); "" when there were none.
  std::string overlaps_not_replayed;
  // A replay (not scaled down) whose ranks per node (environment.ranks_per_node) are not
  // the schedule's min(gpus, gpus_per_node): "4 ranks per node, the schedule's job 2"; its
  // communication ran over other links and is not comparable. "" when they agree or the
  // measurement does not say (measured before 2026-12-06).
  std::string node_layout;
  ComparedValue step_time_s;
  ComparedValue compute_s;
  ComparedValue exposed_comm_s;
  ComparedValue peak_allocated_bytes;
  // A schedule without a pipeline: the most its Program can allocate under any timing
  // (any_timing_peak, memory_bound.hpp), which every replay's peak must stay within;
  // none for a pipeline (its bounds are per stage: StageComparison) or a Program that
  // allocates nothing (a hand-made schedule, whose measured peak no bound of 0 says
  // anything about).
  std::optional<std::int64_t> any_timing_peak_allocated_bytes;
  // Tasks by |measured - predicted duration|, largest first (ties by task id); with
  // communication_comparable false only compute tasks (forward, recompute, backward,
  // optimizer and the compute stream's copies) are ranked.
  std::vector<TaskDifference> tasks_differing_most;
  // A pipeline schedule (version 2): per stage, by pipeline rank; tasks_differing_most
  // then ranks the chunks' tasks (TaskDifference::chunk) and actions_differing_most the
  // actions, by |measured - predicted duration|, largest first. Both empty for a
  // measurement without per-rank actions (measured.json before version 5), the actions
  // also for a schedule without predicted ones.
  std::vector<StageComparison> stages;
  std::vector<ActionDifference> actions_differing_most;
  // A schedule without a pipeline: each rank's compute (rank_compute_s in measured.hpp).
  std::vector<double> rank_compute_s;
  bool operator==(const Comparison&) const = default;
};

// Throws Error(kBadInput) naming `measured_source` when the measurement is of another
// schedule (hash), has a different number of tasks or a mesh that does not replay the
// schedule's (pp, tp, dp_replicate, dp_shard * shards_per_rank), or (pipeline schedule) no
// per-stage figures, or actions or chunk tasks that are not the schedule's. Predicted task times
// are the schedule's simulated timings (the standalone task durations where it has none); predicted
// stages its pipeline.stages.
Comparison compare(const ScheduleFile& schedule, const MeasuredResult& measured,
                   const std::string& measured_source, int top_tasks = 10);

nlohmann::json comparison_to_json(const Comparison& comparison);
// A human-readable table.
void print_comparison(std::ostream& out, const Comparison& comparison);

}  // namespace fsdptune
