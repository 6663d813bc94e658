// The job flags every job-taking subcommand shares (model, workload, simulate, tune, ...).
// Register them with add_job_options, then turn the parsed values into a validated model
// and JobSpec with resolve_job_options.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "fsdptune/cost_model.hpp"
#include "fsdptune/hardware.hpp"
#include "fsdptune/job.hpp"
#include "fsdptune/model.hpp"
#include "fsdptune/pipeline.hpp"
#include "fsdptune/plan.hpp"
#include "fsdptune/torchtitan.hpp"
#include "fsdptune/workload.hpp"

namespace fsdptune::cli {

// The raw flag values. Defaults match torchtitan's: one 8-GPU node, FSDP over all of it,
// bf16 params, fp32 gradient reduction, no AC. Later areas add their own flags (hardware,
// profile, plan, memory limit) to their own option structs next to this one.
struct JobOptions {
  std::string model;  // --model (required unless --job-toml names it; simulate: or a schedule)
  // --job-toml: a torchtitan train config (docs/torchtitan-config.md); the job flags given
  // replace its fields.
  std::string job_toml;
  std::int64_t gpus = 8;              // --gpus
  std::int64_t gpus_per_node = 8;     // --gpus-per-node
  std::int64_t tp = 1;                // --tp
  std::int64_t dp_replicate = 1;      // --dp-replicate
  std::int64_t cp = 1;                // --cp
  std::int64_t batch = 1;             // --batch: local batch (sequences per DP rank)
  std::int64_t seq = 8192;            // --seq
  std::string ac = "none";            // --ac none|selective|full
  std::string param_dtype = "bf16";   // --param-dtype
  std::string reduce_dtype = "fp32";  // --reduce-dtype
  bool float8 = false;                // --float8
  // Parallelism beyond FSDP (docs/parallelism.md).
  bool async_tp = false;               // --async-tp
  std::string execution = "compiled";  // --execution compiled|eager|eager-unfused-rmsnorm
  std::int64_t pp = 1;                 // --pp
  std::int64_t microbatches = 1;       // --microbatches
  std::int64_t pipeline_steps = 1;     // --pipeline-steps
  std::string pp_schedule = "1f1b";    // --pp-schedule 1f1b|interleaved-1f1b|gpipe
  std::int64_t virtual_stages = 1;     // --virtual-stages
  std::int64_t pp_first_less =
      JobSpec{}.pp_first_stage_less_layers;                         // --pp-first-stage-less-layers
  std::int64_t pp_last_less = JobSpec{}.pp_last_stage_less_layers;  // --pp-last-stage-less-layers
  // --pp-chunk-blocks 15,16,16,15: the blocks of each chunk; empty: the weights' split.
  std::string pp_chunk_blocks;
  // The subcommand the flags are registered on (add_job_options): which flags were given.
  const CLI::App* command = nullptr;
  // --job-toml as read, once (job_toml_config).
  mutable std::optional<TorchtitanConfig> job_toml_read;
};

// Whether `flag` (a job flag) was given on the command line of `options`' subcommand.
bool job_flag_given(const JobOptions& options, const char* flag);

// Which flags a subcommand takes: `model` needs only --model.
enum class JobFlags { kModelOnly, kFull };

void add_job_options(CLI::App* command, JobOptions& options, JobFlags flags = JobFlags::kFull);
// --pp, --microbatches, --pipeline-steps, --pp-schedule, --virtual-stages,
// --pp-first/last-stage-less-layers, --pp-chunk-blocks: only for the subcommands that
// simulate pipelines (docs/parallelism.md); elsewhere they keep their defaults (no PP).
void add_pipeline_options(CLI::App* command, JobOptions& options);

// The model `model` names (a --model value), read as resolve_model reads it, after a
// "note:" line on stderr for each of a config.json's hf_config_notes.
ModelSpec resolve_model_noted(const std::string& model);

// The model named by --model (built-in, model file or HF config.json), else by the
// --job-toml config's [model] name and flavor; Error(kBadInput) when neither names one.
ModelSpec resolve_model_option(const JobOptions& options);

// What --model names, as given, or the built-in model the --job-toml config names.
std::string model_argument(const JobOptions& options);

// `value` when it names an existing regular file, else empty: a flag that takes a built-in
// name or a file (--model, --hardware, --plan) is an input an output must not overwrite
// only when it is a file (require_distinct_files skips empty names).
std::string input_file(const std::string& value);

// `--model MODEL` and the job flags that give `job` (normalized), in a fixed order: the
// pipeline flags only with PP or microbatches (--pipeline-steps only above 1), --cp when
// not 1, --float8 and --async-tp when on, --execution when not compiled.
std::string job_flags_of(const std::string& model, const JobSpec& job);

// Comma-separated non-negative integers (at most 9 digits each, at most `max_count` of
// them); Error(kBadInput) naming `flag` ("'TEXT' is not a comma-separated list of WHAT").
std::vector<std::int64_t> parse_count_list(const std::string& text, const std::string& flag,
                                           const std::string& what, std::size_t max_count);

// --pp-chunk-blocks "7,8,8,7": the block counts, Error(kBadInput) naming the flag unless
// comma-separated integers.
// The other way: chunk_blocks_text (job.hpp).
std::vector<std::int64_t> parse_chunk_blocks(const std::string& text);

// --try-pp-splits N of sweep and tune: not given or 0..kMaxTriedSplitWeight, else
// Error(kBadInput) naming the flag.
void check_try_pp_splits(const std::optional<std::int64_t>& value);

// The JobSpec of the flags, normalized against `model` (normalize_job): throws
// Error(kBadInput) naming the flag at fault. With --job-toml, the config's job
// (torchtitan_job) with the flags given replacing its fields, errors naming the config's
// field; what the config sets that is no job field is printed as notes on stderr.
// `hardware`, where the command has one: its gpus_per_node is the default of
// --gpus-per-node (as `cost` takes it; a spec of 4 per node was simulated at 8), and a
// --gpus-per-node above it is noted (one NVLink domain larger than the spec's node).
JobSpec to_job_spec(const JobOptions& options, const ModelSpec& model,
                    const HardwareSpec* hardware = nullptr);
// The note on stderr when a given --gpus-per-node is more than `hardware`'s node.
void note_gpus_per_node(std::int64_t gpus_per_node, const HardwareSpec& hardware);

// After an MFU figure: a float8 job's is of the fp8 peak (docs/report.md), said so with
// the figure against bf16's that torchtitan logs (" of the fp8 peak (78.9% of bf16's, as
// torchtitan logs it)"); empty otherwise (found by QA: float8 read 39.4% against 61.2%).
std::string mfu_basis_note(double mfu, const JobSpec& job, const HardwareSpec& hardware);

// The plan and memory-limit flags of simulate and tune (issue: simulator). The cost flags
// (--hardware, --profile) are in cost_options.hpp.
struct PlanOptions {
  std::string plan = "fsdp2";  // --plan: built-in name, plan JSON file or schedule file
  std::string memory_limit;    // --memory-limit, e.g. "80GiB"; empty: the hardware's default
  // --keep-gathered yes|no|torchtitan: a built-in plan on a pipelined job keeps its
  // parameters gathered across microbatches or re-gathers them in each; empty or
  // torchtitan: default_keep_gathered.
  std::string keep_gathered;
};

// `with_plan` false registers only --memory-limit (tune searches plans itself).
void add_plan_options(CLI::App* command, PlanOptions& options, bool with_plan = true);

// --keep-gathered's value (any, yes, no, torchtitan) named by `flag` on error (exit 2),
// whose message lists 'any' where `tuner` (a command that runs one plan refuses it).
KeepGatheredChoice parse_keep_gathered(const std::string& text, const std::string& flag,
                                       bool tuner = true);

// --fit's value: false for predicted, true for any-timing (TunerOptions::
// fit_at_any_timing); anything else is Error(kBadInput) naming --fit.
bool parse_fit_at_any_timing(const std::string& text);
// --fit's help text (tune and sweep).
inline constexpr const char* kFitHelp =
    "How a plan (every stage of a pipeline; every configuration's plans in a sweep) must fit "
    "under the memory limit: predicted (its reserved peak at the predicted timing; default) "
    "or any-timing (at the worst order of starts and ends under any durations)";

// --memory-limit's help text (every command that takes it; found by QA: the texts differed,
// and none said a number without a unit is bytes).
inline constexpr const char* kMemoryLimitHelp =
    "Memory a step may reserve per GPU: bytes, or with a unit (70GiB; 75GB is 75e9 bytes); "
    "default: the GPU's HBM less the hardware's reserve";

// Error(kBadInput) naming --keep-gathered, given for a `job` that is not pipelined.
void require_pipelined_for_keep_gathered(const JobSpec& job);

// Whether a built-in plan on the pipelined `job` keeps its chunks' parameters gathered
// across microbatches: --keep-gathered yes, no or torchtitan (default_keep_gathered(job),
// also when not given). Error(kBadInput) naming the flag for another value ("any": simulate
// runs one plan), or given for a job that is not pipelined (one microbatch on one stage
// has nothing to keep).
bool resolve_keep_gathered(const PlanOptions& options, const JobSpec& job);

// --memory-limit parsed (Error naming the flag), or default_memory_limit_bytes(hardware):
// HBM less the hardware's reserve.
std::int64_t resolve_memory_limit(const PlanOptions& options, const HardwareSpec& hardware);

// Runs `run`; a does-not-fit error that names --memory-limit when `given` is empty says
// the flag was not given (the limit was the hardware's default, or a schedule's own): it
// named a flag the user never gave (found by QA).
void run_naming_memory_limit(const std::string& given, const std::function<void()>& run);
// --memory-limit as given (parse_size_bytes), with a note on stderr when it is above the
// GPU's memory (a limit no plan can use; accepted, to explore what a larger part would fit).
std::int64_t given_memory_limit(const std::string& text, const HardwareSpec& hardware);

// The Plan of --plan: a built-in name (plans.hpp), else a file holding a plan
// (docs/plan-format.md) or a schedule file (its "plan" object). Validated against
// `workload`: Error(kBadInput) naming the file and field.
Plan resolve_plan_option(const PlanOptions& options, const Workload& workload,
                         const CostModel& costs, std::int64_t memory_limit_bytes);

// The Plan of a file given to `flag`: a plan file (docs/plan-format.md) or a version 1
// schedule file (its "plan" object; the file read as schedule_from_json reads it), validated
// against the units of `workload`: Error(kBadInput) naming the file and field, or the flag
// when it is no file or a pipeline schedule (whose chunks have a plan each). A note on
// stderr when a schedule's model is not the workload's.
Plan plan_of_file(const std::string& path, const std::string& flag, const Workload& workload);

// The JSON of a file given to `flag` (--plan, --start-plan), read once however often a
// command asks (a pipe, `--plan <(...)`, has its text once; simulate asks for the schedule's
// costs, its job and its Program); an error about the file as a whole names the flag
// (read_flag_file).
const nlohmann::json& read_plan_json(const std::string& flag, const std::string& path);

// Whether `path` names something a plan file could be read from: not a built-in plan's
// name nor a missing path (a file, a pipe; a folder is named when read).
bool names_plan_input(const std::string& path);

}  // namespace fsdptune::cli
