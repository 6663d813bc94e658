// The pipelined paths of `simulate` and `tune` (jobs with --pp > 1 or --microbatches > 1,
// docs/parallelism.md), and the schedule `sweep --out` writes. Each subcommand keeps its
// pp = 1 path in its own file and hands pipelined jobs to these.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cost_options.hpp"
#include "fsdptune/cost_model.hpp"
#include "fsdptune/model.hpp"
#include "fsdptune/pipeline.hpp"
#include "fsdptune/schedule.hpp"
#include "fsdptune/simulator.hpp"
#include "fsdptune/sweep.hpp"
#include "fsdptune/tuner.hpp"
#include "fsdptune/workload.hpp"
#include "job_options.hpp"

namespace fsdptune::cli {

// `simulate` of a pipelined job: --plan is a built-in plan (used for every chunk) or a
// pipeline schedule (version 2, its stored Programs replayed; judged against the schedule's
// memory limit unless --memory-limit is given). Prints the step and the
// stages (text or --json); throws kDoesNotFit with --require-fit when a stage's allocated
// peak exceeds the limit.
void run_simulate_pipelined(const ModelSpec& model, const JobSpec& job,
                            const ResolvedCostModel& costs, const CostOptions& cost_options,
                            const PlanOptions& plan_options, std::int64_t memory_limit_bytes,
                            bool json, bool require_fit, const std::string& trace_path);

// The tuned schedule of a job: version 2 through tune_pipelined_job when the job is
// pipelined, else version 1 through the Tuner (the same file `tune` writes). Baselines,
// predicted metrics and lower bound filled; provenance left to the caller. Throws
// kDoesNotFit (naming --memory-limit) when nothing fits.
struct TunedSchedule {
  ScheduleFile schedule;
  std::string derived_from;
  std::int64_t plans_evaluated = 0;
  bool budget_exhausted = false;         // the time budget cut a search short
  bool max_evaluations_reached = false;  // --max-evaluations stopped a search
};
// The job line `simulate` and `tune` head a single Program's figures with: model, GPUs,
// hardware, the mesh, batch, sequence, AC and what else the job turns on.
std::string single_program_job_line(const ModelSpec& model, const JobSpec& job,
                                    const std::string& hardware);

// What would lower the peak of a job no plan fits: only the changes still open to it (more
// stages under PP, more GPUs up to kMaxJobGpus, full AC unless it has it, a smaller batch
// or sequence).
// With `fit_at_any_timing` (--fit any-timing) also judging fit as predicted.
// With `sharding` (a single Program's smallest peak, or a stage's, its sharded state and the
// limit), more GPUs are offered only where they could fit it: the fewest that make a job
// normalize_job takes (whole nodes; found by QA: 6 GPUs were offered 12 on nodes of 8)
// whose sharded state, shrunk in proportion, brings the peak under the limit; without it,
// the fewest such from twice today's; none where the peak less the whole
// sharded state is over it (QA, 2026-12-05: 70B at 64 GPUs was told to double the GPUs at
// every size, activations alone over the limit) -- then, where the sharded state alone is
// over the limit, the fewest GPUs that bring it under come first, needed with the rest.
struct ShardingGain {
  std::int64_t peak_bytes = 0;
  std::int64_t sharded_state_bytes = 0;
  std::int64_t limit_bytes = 0;
  // Of the peak, the tensors padded to the shard group (gathered parameters, gradients and
  // reduce-scatter buffers: the peak breakdown's); -1 where not known.
  std::int64_t padded_peak_bytes = -1;
};
// `more`: the command's own ways out, listed last.
// `model`: the job's, to offer only a --tp it can take.
std::string does_not_fit_hint(const ModelSpec& model, const JobSpec& job,
                              bool fit_at_any_timing = false,
                              const std::optional<ShardingGain>& sharding = std::nullopt,
                              const std::vector<std::string>& more = {});

// The bytes of a peak `breakdown` padded to the shard group: its gathered parameters and
// gradients (ShardingGain::padded_peak_bytes).
std::int64_t padded_peak_bytes(const MemoryBreakdown& breakdown);

// The sharding gain of the stage of `sim` with the largest reserved peak (its chunks'
// sharded state), at `peak_bytes` (that stage's peak, or a bound of it).
ShardingGain largest_stage_gain(const PipelineSimulation& sim, std::int64_t peak_bytes,
                                std::int64_t limit_bytes);

// --require-fit of a pipelined step (`simulate --pp`, `pipeline`): Error(kDoesNotFit) on
// --memory-limit naming the stage whose reserved peak is furthest over `limit_bytes`, with
// does_not_fit_hint (that stage's sharding gain; --keep-gathered no where a chunk keeps its
// parameters gathered); nothing where every stage fits.
void require_pipeline_fit(const ModelSpec& model, const JobSpec& job, const PipelineSimulation& sim,
                          std::int64_t limit_bytes);

TunedSchedule tune_schedule(const Workload& workload, const HardwareSpec& hardware,
                            const CostModel& costs, const TunerOptions& options);
// The same from a search already run (tune_configuration: what the sweep keeps of its
// best configuration), without searching again.
TunedSchedule schedule_of_tuning(const Workload& workload, const HardwareSpec& hardware,
                                 const CostModel& costs, const ConfigurationTuning& tuning);

// The most pipeline actions a --trace draws (each with its chunk's tasks): a trace of more is
// refused before any work (found by QA: 8B, PP 8, V 4, 65536 microbatches grew past 17 GB
// building its trace; a tiny model's 262,144 actions wrote 485 MB).
inline constexpr std::int64_t kMaxTraceActions = 131072;
// And the most actions x units per chunk: a trace grows with the tasks each action draws,
// about 2.4 KB per unit (found by QA: 8B on PP 2 drew 39 KB per action, 405B 149 KB, so
// that 405B's 131,072 actions would have written about 19 GB): at most about 600 MB.
inline constexpr std::int64_t kMaxTraceUnitActions = 262144;
// Error(kBadInput) naming --trace when `job`'s step has more pipeline actions, or actions x
// units per chunk of `model`, than those.
void check_trace_size(const ModelSpec& model, const JobSpec& job, const std::string& trace_path);

// A trace's process name: "MODEL PLAN", one for every command that draws a plan (found by
// QA: simulate --plan of a schedule named it "... on N GPUs", tune not).
std::string trace_title(const std::string& model, const std::string& plan);

// The Chrome trace of a schedule's predicted step: chrome_trace of its Program and timings
// (version 1), pipeline_chrome_trace of its replayed chunks (version 2).
nlohmann::json schedule_trace(const ScheduleFile& schedule, const Workload& workload,
                              const CostModel& costs);

// What `tune` and `sweep` say on stderr (with the schedule or config they write) when some
// of a pipelined job's chunks (`keep_gathered`, one flag per chunk) do not run across
// microbatches as torchtitan runs them unchanged (default_keep_gathered): its config alone
// does not reproduce the schedule's figures. "" when they all do (or the job is not
// pipelined). Of a schedule: its chunks' flags ("" for a version 1 schedule).
std::string torchtitan_keep_gathered_note(const ScheduleFile& schedule);
std::string torchtitan_keep_gathered_note(const JobSpec& job,
                                          const std::vector<bool>& keep_gathered);

// Prints the pipelined part of `tune`: baseline vs tuned, the stages, what was written.
// `any_timing_reserved_bytes` (--fit any-timing): one per row, baselines then the tuned
// plan, each its largest stage's reserved peak at any timing, what `fits` says of it.
void print_pipeline_schedule(const ScheduleFile& schedule, const Workload& workload,
                             const std::vector<std::int64_t>& any_timing_reserved_bytes = {});

// The stages' table of `simulate --pp` and `pipeline`: units, busy, end, microbatches in
// flight, peaks, each stage's reserved peak at any timing (`any_timing`, by rank:
// pipeline_any_timing) and whether it fits.
void print_stage_table(const Workload& workload, const std::vector<std::vector<int>>& chunks,
                       const std::vector<StageResult>& stages,
                       const std::vector<StageAnyTiming>& any_timing, std::int64_t limit_bytes);

// The stages' peaks at any timing (pipeline_any_timing) as `simulate` and `tune` print
// them: the largest stage's in a line, then the verdict when it passes the limit.
std::string pipeline_any_timing_text(const std::vector<StageAnyTiming>& stages,
                                     std::int64_t limit_bytes, bool fits_as_predicted = true);
// The same for --json: the largest stage's reserved bound, and per stage (by rank) its
// bounds and whether the reserved one is within the limit.
void add_pipeline_any_timing_json(nlohmann::json& out, const std::vector<StageAnyTiming>& stages,
                                  std::int64_t limit_bytes);

}  // namespace fsdptune::cli
