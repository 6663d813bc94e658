// The schedule file (docs/schedule-format.md): the Plan, the lowered Program the executor
// replays, the predicted metrics, the baselines and Pareto front the tuner found, and the
// provenance. Versioned JSON; `fsdptune simulate --plan schedule.json` re-simulates it.
// The executor rebuilds the Workload from `model` + `job` (build_workload is
// deterministic) to get the op shapes of each compute task.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "fsdptune/hardware.hpp"
#include "fsdptune/job.hpp"
#include "fsdptune/model.hpp"
#include "fsdptune/pipeline.hpp"
#include "fsdptune/plan.hpp"
#include "fsdptune/program.hpp"
#include "fsdptune/simulator.hpp"
#include "fsdptune/workload.hpp"

namespace fsdptune {

// Version 1: one FSDP Program for the whole job (pp = 1, one microbatch). Version 2 adds
// `pipeline` (pipelined jobs: pp > 1 or microbatches > 1) and leaves out the whole-job
// plan, program, timings and memory timeline. A writer writes the lowest version that
// holds its schedule, so pp = 1 files stay version 1; the reader takes both.
inline constexpr int kScheduleFormatVersion = 1;
inline constexpr int kPipelineScheduleFormatVersion = 2;
inline constexpr int kTorchtitanPlanFormatVersion = 1;
// The torchtitan export of a pipelined job (per-stage groups): version 2 of the same format.
inline constexpr int kTorchtitanPipelineFormatVersion = 2;

// The largest time a schedule or a measured file holds, far beyond any real step (a 405B
// step takes seconds): the simulator's clock and the reports' axes stay finite under it
// (docs/schedule-format.md "Limits").
inline constexpr double kMaxScheduleSeconds = 1e9;
// The largest byte or element count a schedule holds (its memory limit among them).
inline constexpr std::int64_t kMaxScheduleBytes = std::int64_t{1} << 50;

// What the simulator predicted for one plan.
struct PlanSummary {
  std::string plan_name;
  double step_time_s = 0;
  double tokens_per_s_per_gpu = 0;
  double mfu = 0;
  double compute_s = 0;
  double comm_s = 0;
  double exposed_comm_s = 0;
  double idle_s = 0;
  std::int64_t peak_allocated_bytes = 0;
  std::int64_t peak_reserved_bytes = 0;
  MemoryBreakdown peak_breakdown{};
  bool fits = false;
  bool operator==(const PlanSummary&) const = default;
};

struct ParetoPoint {
  double step_time_s = 0;
  std::int64_t peak_allocated_bytes = 0;  // the front's memory axis
  // Which plan: "tuned" (the schedule's own), a baseline's name, "min-memory",
  // "candidate #k", ...; in version 2 "fsdp2" or "composition #k" (docs/report.md).
  std::string label;
  // Its reserved estimate: whether it fits (<= memory_limit_bytes, as plan_fits).
  std::int64_t peak_reserved_bytes = 0;
  bool operator==(const ParetoPoint&) const = default;
};

struct ScheduleProvenance {
  std::string tool;         // "fsdptune 0.1.0"
  std::string cost_source;  // hardware id or profile path
  std::string cost_hash;    // hash of the hardware spec / profile content
  std::uint64_t seed = 0;
  std::int64_t threads = 1;
  std::string command;
  // schedule_job_hash of the job the Program was made for: a reader refuses a file whose
  // `job` no longer hashes to it (edited after tuning). Empty: not written (files written
  // before 2026-12-03, which keep their text and are not checked).
  std::string job_hash;
  bool operator==(const ScheduleProvenance&) const = default;
};

// One chunk of a pipeline schedule: what its rank runs for every microbatch.
struct ScheduleChunk {
  int rank = 0;               // pipeline rank: chunk index % pp
  std::vector<int> units;     // its units, indices in build_workload(model, job)
  bool keep_gathered = true;  // parameters stay gathered across microbatches
  Plan plan;                  // over chunk_workload(workload, units), units from 0
  Program program;            // lower(chunk workload, plan): one microbatch
  PlanSummary predicted;      // that Program simulated alone (one microbatch)
  ChunkTimes times;           // per microbatch, as the pipeline composition used them
  // Fields of `times` that a schedule written before 2026-12-02 14:24 UTC holds and the
  // model no longer has (the reduce-scatters' overlap with the next action: tail_peak_bytes,
  // persistent_bytes, *_after_backward_*), as read: written back unchanged, so that such a
  // file keeps its text and schedule_hash. Empty for a schedule written since.
  nlohmann::json retired_times = nlohmann::json::object();
  bool operator==(const ScheduleChunk&) const = default;
};

// One pipeline rank as predicted.
struct ScheduleStage {
  int rank = 0;
  double busy_s = 0;
  double end_s = 0;
  int max_in_flight = 0;
  std::int64_t peak_allocated_bytes = 0;
  std::int64_t peak_reserved_bytes = 0;
  // Its forward and backward actions in execution order with their simulated times
  // (StageResult::actions): 2 x virtual_stages x microbatches of them, or none in a
  // schedule written before they were stored (docs/schedule-format.md). The last one's
  // end is the stage's pipeline_end_s; end_s adds the tail after it.
  std::vector<PipelineAction> actions;
  bool operator==(const ScheduleStage&) const = default;
};

// What a pipelined job needs (the schedule kind, pp, V, M are in `job`).
struct SchedulePipeline {
  double send_s = 0;  // one microbatch's activation (or gradient) between stages
  double bubble_fraction = 0;
  std::vector<ScheduleChunk> chunks;  // pipeline_chunks order: chunk c on rank c % pp
  std::vector<ScheduleStage> stages;  // by rank
  bool operator==(const SchedulePipeline&) const = default;
};

struct ScheduleFile {
  int version = kScheduleFormatVersion;
  ModelSpec model;
  JobSpec job;
  HardwareSpec hardware;
  std::int64_t memory_limit_bytes = 0;
  Plan plan;
  Program program;
  PlanSummary predicted;            // of `plan`
  std::vector<TaskTiming> timings;  // predicted per task of `program`
  std::vector<MemorySample> memory_timeline;
  std::int64_t cost_queries = 0;
  std::int64_t cost_fallbacks = 0;
  std::vector<PlanSummary> baselines;  // fsdp2, simplefsdp-* as evaluated by the tuner
  std::vector<ParetoPoint> pareto;     // peak memory vs step time explored by the tuner
  double lower_bound_s = 0;            // DESIGN.md "Searching"
  ScheduleProvenance provenance;
  // Version 2 only: the per-chunk plans and Programs of a pipelined job. `plan`,
  // `program`, `timings` and `memory_timeline` are then empty (not written); `predicted`
  // is the whole step (see docs/schedule-format.md "Pipeline schedules").
  std::optional<SchedulePipeline> pipeline;
  bool operator==(const ScheduleFile&) const = default;
};

nlohmann::json schedule_to_json(const ScheduleFile& schedule);
// The text a schedule file `path` holds (dump_json of schedule_to_json), read back first
// with schedule_from_json: a schedule the reader would refuse (a job whose predicted step
// is beyond kMaxScheduleSeconds) throws Error(kBadInput) naming `path` and the field
// instead of being written unreadable.
std::string schedule_file_text(const ScheduleFile& schedule, const std::string& path);

// One pipeline action as both the schedule's pipeline.stages[].actions and measured.json's
// ranks[].actions write it: {chunk, microbatch, backward, start_s, end_s}.
nlohmann::json pipeline_action_to_json(const PipelineAction& action);

// Throws Error(kBadInput) naming `source` and the field: wrong version, missing field,
// a plan or program inconsistent with the model and job (the plan must partition the
// units of build_workload(model, job), every bucket slot must name a parameter of that
// workload with its numel and shard size).
ScheduleFile schedule_from_json(const nlohmann::json& json, const std::string& source);
// Does `json` claim to be a schedule file (an object whose "format" is the schedule's)?
// Any version: schedule_from_json then says whether it can read it.
bool is_schedule_json(const nlohmann::json& json);
// Refuses (Error(kBadInput) naming `source`) what is neither a schedule nor a plan file: a
// JSON value that is not an object, or a file whose "format" names another fsdptune format
// (a measured.json given as a plan was called "a plan"), or one with a schedule's "plan" or
// "program" and no "format" (it was read as its plan alone, unchecked).
void refuse_other_format(const nlohmann::json& json, const std::string& source);
// The schedule of a pipelined job from its simulation: version 2, `pipeline` filled from
// `sim`, `predicted` the whole step (pipeline_summary). Model, job (= workload.job),
// hardware, baselines and provenance are left to the caller.
ScheduleFile pipeline_schedule(const Workload& workload, const PipelineSimulation& sim,
                               const HardwareSpec& hardware, std::int64_t memory_limit_bytes,
                               const std::string& plan_name);

// The figures of one simulation as a summary named `plan_name`: times, peaks and the peak's
// breakdown; the throughput fields and `fits` are left to the caller.
PlanSummary simulated_summary(const SimResult& result, const std::string& plan_name);

// The whole-step summary of a pipeline simulation, as pipeline_schedule writes it, named
// `plan_name`: the step (the slowest rank's end); compute_s, comm_s and exposed_comm_s of
// the slowest rank from its chunks' single-microbatch simulations (compute per microbatch
// times M, the optimizer once; a chunk's collectives M times when it re-gathers per
// microbatch, once when it keeps its parameters gathered), idle_s the rest of its step
// (bubble, sends, waiting); peaks the largest over the stages, peak_breakdown that
// stage's (its chunks' categories, accumulated gradients under gradients, activations the
// rest: the microbatches in flight); fits against `memory_limit_bytes`.
PlanSummary pipeline_summary(const PipelineSimulation& sim, const std::string& plan_name,
                             std::int64_t memory_limit_bytes);

// The provenance fields that say how a search was invoked, not what it found: the same
// search with another --threads, another spelling of a path or its flags in another order
// writes the same schedule under the same hash.
inline constexpr const char* kScheduleHashOmits[] = {"command", "cost_source", "threads"};

// Stable hex digest of the canonical JSON less kScheduleHashOmits: ranks compare it before
// replaying, measured.json names it. FNV-1a 64, 16 lowercase hex digits.
std::string schedule_hash(const ScheduleFile& schedule);

// The digest of the schedule's whole canonical text, provenance included: what
// schedule_hash was until 2026-12-04, and what measured files written before name.
std::string schedule_text_hash(const ScheduleFile& schedule);

// Whether `hash` names this schedule: its schedule_hash or its schedule_text_hash.
bool schedule_has_hash(const ScheduleFile& schedule, const std::string& hash);

// FNV-1a 64-bit digest of `bytes` as 16 lowercase hex digits (also used for the
// provenance's cost_hash of a hardware spec or profile).
std::string fnv1a64_hex(std::string_view bytes);

// The provenance's job_hash: fnv1a64_hex(dump_json(job_to_json(job))).
std::string schedule_job_hash(const JobSpec& job);

// Throws Error(kBadInput) naming `source` when `schedule` was made for another model
// (any architecture field differs) or another job (mesh, batch, sequence, AC, dtypes):
// what `simulate --plan` and the executor check before using a schedule with flags.
void check_schedule_matches(const ScheduleFile& schedule, const ModelSpec& model,
                            const JobSpec& job, const std::string& source);

// Throws Error(kBadInput) naming `source` when `schedule` was made for other hardware than
// `hardware`: another id, or the same id with other figures (a built-in spec changed since
// the schedule was tuned), whose fields it names. Its Programs carry the costs it was
// tuned with, so a replay means something only on the same spec.
void check_schedule_hardware(const ScheduleFile& schedule, const HardwareSpec& hardware,
                             const std::string& source);

// The bucket plan in torchtitan's terms (docs/schedule-format.md, "torchtitan export"):
// groups of module names ("tok_embeddings", "layers.0", ..., "norm", "output") for
// SimpleFSDP's manual bucketing and FSDP2 fully_shard groups with their prefetch lists.
// Pure. REQUIRES: validate_plan(plan, workload.units.size(), ...) passed.
nlohmann::json torchtitan_plan_to_json(const Workload& workload, const Plan& plan);

// The per-stage plan of a pipelined job in torchtitan's terms (docs/schedule-format.md,
// "torchtitan export of a pipelined job"): the pipeline config (degree, schedule name,
// microbatches, split points: the first module of every stage after the first) and one
// entry per stage (chunk c, on rank c % pp) with its modules, whether its parameters stay
// gathered across microbatches, and its plan as torchtitan_plan_to_json writes it (module
// names of the whole model). Pure. REQUIRES: `pipeline` read or built for `workload`.
nlohmann::json torchtitan_pipeline_to_json(const Workload& workload,
                                           const SchedulePipeline& pipeline);

}  // namespace fsdptune
