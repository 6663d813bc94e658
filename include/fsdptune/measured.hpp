// The measured results of replaying a schedule (docs/measured-format.md): the same shape
// as the prediction, so compare can put them side by side task by task.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fsdptune/job.hpp"
#include "fsdptune/pipeline.hpp"
#include "fsdptune/simulator.hpp"

namespace fsdptune {

// 2 added the run's mesh (dp_replicate, dp_shard, tp, shards_per_rank); 3 added every
// rank's own step time and task timings (`ranks`); 4 added mesh.pp, every rank's peak and,
// for a pipeline schedule, `pipeline` (per-stage busy, end, peak); 5 added, for a pipeline
// schedule, every rank's actions and its chunks' task durations. Versions 1 to 4 are
// still read (version 1: a mesh of world_size shard ranks; 1, 2: no per-rank views; 1-3:
// pp 1, rank peaks 0; 1-4: no actions or chunk tasks).
inline constexpr int kMeasuredFormatVersion = 5;
// The most measured steps a file holds (validate --iters refuses more: QA, 2026-12-05, a run
// could write a file its reader refuses).
inline constexpr std::int64_t kMaxMeasuredIterations = std::int64_t{1} << 24;

// One task of a pipeline chunk's Program as a rank ran it in the measured steps: how many
// times a step (each microbatch's action that replays it, or the tail) and the median
// duration over every run (its start, when its stream reached it after its dependencies,
// to its end).
struct MeasuredChunkTask {
  std::int64_t runs = 0;  // per step
  double duration_s = 0;
  bool operator==(const MeasuredChunkTask&) const = default;
};

// A pipeline chunk on the rank that ran it: its Program's tasks by task id.
struct MeasuredChunk {
  int chunk = 0;  // index in the schedule's pipeline.chunks
  std::vector<MeasuredChunkTask> tasks;
  bool operator==(const MeasuredChunk&) const = default;
};

// One rank's own view of the measured steps, each a median over them, relative to that
// rank's step start (the ranks start each step at a barrier).
struct RankMeasurement {
  double step_time_s = 0;                 // its last task's end
  std::vector<TaskTiming> timings;        // per task id (empty for a pipeline schedule)
  std::int64_t peak_allocated_bytes = 0;  // its tracked peak over the measured steps
  // A pipeline schedule (version 5; empty otherwise and when read from older versions):
  // its actions in execution order, each start (the compute stream reached it, its input
  // received) and end (its last compute task's end) a median over the measured steps, as
  // the schedule's pipeline.stages[].actions predict them; and its chunks (ascending).
  std::vector<PipelineAction> actions;
  std::vector<MeasuredChunk> chunks;
  bool operator==(const RankMeasurement&) const = default;
};

// One pipeline stage as measured: each figure the largest over the stage's ranks of their
// medians over the measured steps (the stage as its slowest rank).
struct MeasuredStage {
  int rank = 0;               // pipeline rank
  double busy_s = 0;          // time its actions ran (start on the compute stream, after the
                              // input arrived, to the last compute task's end)
  double pipeline_end_s = 0;  // its last action's end
  double end_s = 0;           // its last task's end (reduce-scatters, optimizer)
  std::int64_t peak_allocated_bytes = 0;
  bool operator==(const MeasuredStage&) const = default;
};

struct MeasuredPipeline {
  std::int64_t microbatches = 1;    // of one pipeline step
  std::int64_t pipeline_steps = 1;  // JobSpec::pipeline_steps
  std::int64_t virtual_stages = 1;
  std::string schedule;               // "1f1b", "interleaved-1f1b", "gpipe"
  std::int64_t message_bytes = 0;     // each point-to-point message (pipeline_send_bytes)
  std::vector<MeasuredStage> stages;  // by pipeline rank
  bool operator==(const MeasuredPipeline&) const = default;
};

struct MeasuredResult {
  int version = kMeasuredFormatVersion;
  std::string schedule_hash;    // schedule_hash() of the schedule replayed
  std::string backend;          // "cpu" or "cuda"
  std::int64_t world_size = 0;  // = pp * dp_replicate * dp_shard * tp
  std::int64_t pp = 1;          // pipeline stages
  // The run's mesh. shards_per_rank > 1: a scaled-down replay (--scale-down) of a schedule
  // for dp_shard * shards_per_rank shard ranks.
  std::int64_t dp_replicate = 1;
  std::int64_t dp_shard = 0;  // 0: not set, world_size / (dp_replicate * tp) (shard_ranks)
  std::int64_t tp = 1;
  // Context-parallel ranks inside each shard group (mesh.cp, written only when > 1;
  // absent: 1).
  std::int64_t cp = 1;
  std::int64_t shards_per_rank = 1;
  std::int64_t shard_ranks() const {
    return dp_shard > 0 ? dp_shard : world_size / std::max<std::int64_t>(1, pp * dp_replicate * tp);
  }
  std::int64_t iterations = 0;  // measured (after warm-up)
  std::int64_t warmup = 0;
  bool data_checked = false;         // ran with --check-data and every check passed
  std::vector<double> step_times_s;  // one per measured iteration (rank 0's view, max over ranks)
  double step_time_s = 0;            // median of step_times_s
  double compute_s = 0;              // median busy time of the compute stream
  double exposed_comm_s = 0;         // median
  std::int64_t peak_allocated_bytes = 0;  // max over ranks
  std::vector<TaskTiming> timings;        // per task id: median start/end relative to step start
  // Per rank (index = rank in MPI_COMM_WORLD); empty when read from versions 1 and 2.
  std::vector<RankMeasurement> ranks;
  // A pipeline schedule's run (version 4); its compute_s and exposed_comm_s are those of the
  // slowest rank, and `timings` is empty (there is no single Program).
  std::optional<MeasuredPipeline> pipeline;
  std::map<std::string, std::string> environment;  // host, devices, versions, date, command
  bool operator==(const MeasuredResult&) const = default;
};

// Per rank of MPI_COMM_WORLD, the sum of its compute-stream tasks' median durations
// (ranks[].timings) in the replay of `program`. Every rank replays the same Program, so a
// rank well above the median is a straggler that the others wait for at the next
// collective; the model has every rank alike. Empty for a pipeline's measurement and when
// a rank has no timings of `program` (measured.json before version 3).
std::vector<double> rank_compute_s(const Program& program, const MeasuredResult& measured);

// The median validate takes of the measured steps (and of each task's starts and ends):
// the middle value, the mean of the two middle ones of an even count; 0 of none.
double measured_median(std::vector<double> values);

// The error of a prediction against what was measured, (predicted - measured) / measured,
// as compare and report give it: 0 when both are 0, and 1 (+100%, not infinity) for a
// nonzero prediction of a zero measurement.
double prediction_error(double predicted, double measured);

// A replay (not scaled down) whose ranks per node (environment.ranks_per_node) are not
// `job`'s min(gpus, gpus_per_node), as "4 ranks per node, the schedule's job 2": its
// collectives crossed other links than the prediction's, and compare and report mark its
// communication not comparable. "" when they agree, or the measurement does not say (before
// 2026-12-06). The count only: ranks placed round-robin over nodes are not told apart.
std::string node_layout_difference(const MeasuredResult& measured, const JobSpec& job);

// A cpu replay whose ranks on one host (environment.ranks_per_node, the most) outnumber
// the host's hardware threads (environment.hardware_threads, rank 0's host), as "8 ranks on
// a host of 2 hardware threads" ("up to 8 ranks a host, rank 0's host of 2 hardware
// threads" where hosts held different counts): the ranks' compute threads took turns on the cores,
// so its times are the oversubscription's, not the model's (found by QA: an 8-rank replay on 2
// threads read -87% step error, unsaid). "" otherwise, for the cuda backend, and where the
// file does not say.
std::string host_oversubscription(const MeasuredResult& measured);

nlohmann::json measured_to_json(const MeasuredResult& measured);
MeasuredResult measured_from_json(const nlohmann::json& json, const std::string& source);

}  // namespace fsdptune
