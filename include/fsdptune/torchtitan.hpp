// torchtitan train configs (the TOML files of torchtitan/models/*/train_configs) as a job
// (docs/torchtitan-config.md): `--job-toml FILE` on the job-taking subcommands. The file's
// [model], [training], [parallelism], [activation_checkpoint] and float8 settings become
// fsdptune's model and JobSpec; what fsdptune does not model is an error naming the field,
// never a silent approximation. Keys that do not change a step's time or memory (optimizer,
// checkpointing, metrics, ...) are ignored, as torchtitan's defaults fill what is absent.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fsdptune/job.hpp"
#include "fsdptune/model.hpp"

namespace fsdptune {

// The settings of one config, as the file gives them or torchtitan's defaults
// (torchtitan/config/job_config.py) where it does not. Each value's `*_where` names its
// field ("llama3_8b.toml: [parallelism] tensor_parallel_degree") for errors.
struct TorchtitanConfig {
  std::string source;  // the file, as errors name it
  // Keys of the tables fsdptune reads that it does not read but that are within two edits
  // of one it does ("tensor_paralel_degree"), each {"[table] key", the key it resembles},
  // or that it reads from another table ({"[training] pipeline_parallel_degree",
  // "[parallelism] pipeline_parallel_degree"}), and top-level tables within two edits of
  // one it reads ({"[paralelism]", "[parallelism]"}): a typo torchtitan's newer config
  // refuses, which fsdptune would otherwise ignore.
  std::vector<std::pair<std::string, std::string>> near_miss_keys;

  // [model]
  std::string model_name = "llama3";
  std::string model_flavor = "debugmodel";
  std::string model_where;
  std::vector<std::string> converters;  // "float8", "quantize.linear.float8", "mx", ...
  std::string converters_where;

  // [training]
  std::int64_t local_batch_size = 8;  // or the older `batch_size`
  std::string local_batch_size_where;
  std::int64_t global_batch_size = -1;  // -1: local batch x data-parallel degree
  std::string global_batch_size_where;
  std::int64_t seq_len = 2048;
  std::string seq_len_where;
  std::string mixed_precision_param = "bfloat16";
  std::string mixed_precision_param_where;
  std::string mixed_precision_reduce = "float32";
  std::string mixed_precision_reduce_where;
  bool compile = false;  // [training] compile or [compile] enable
  std::string compile_where;
  std::string compile_backend = "inductor";  // [compile] backend
  std::string compile_backend_where;
  // [compile] components when compile is enabled but "model" is not among them (compile
  // is then off for the blocks); empty otherwise.
  std::string compile_without_model_where;
  bool cpu_offload = false;
  std::string cpu_offload_where;
  // dtype: "float32" (parameters in fp32, bf16 under mixed precision: what fsdptune models)
  // or "bfloat16" (everything in bf16, no fp32 copy: not modelled).
  std::string training_dtype = "float32";
  std::string training_dtype_where;
  // [parallelism] disable_loss_parallel: the logits replicated on every TP rank (not
  // modelled under TP).
  bool disable_loss_parallel = false;
  std::string disable_loss_parallel_where;
  // [optimizer] early_step_in_backward: each parameter's step in backward, its gradient
  // freed there (not modelled).
  bool early_step_in_backward = false;
  std::string early_step_in_backward_where;

  // [parallelism] (older configs: [training] and [experimental])
  std::int64_t dp_replicate = 1;
  std::string dp_replicate_where;
  std::int64_t dp_shard = -1;  // -1: what the other degrees leave of the world size
  std::string dp_shard_where;
  std::int64_t tp = 1;
  std::string tp_where;
  bool async_tp = false;
  std::string async_tp_where;
  std::int64_t pp = 1;
  std::string pp_where;
  std::string pp_schedule = "1F1B";
  std::string pp_schedule_where;
  std::string pp_schedule_csv;  // pipeline_parallel_schedule_csv: a schedule from a file
  std::string pp_schedule_csv_where;
  std::int64_t pp_microbatch_size = 1;
  std::string pp_microbatch_size_where;
  // Older torchtitan's pipeline_parallel_microbatches (a count; 0 when not given): read as
  // the size it implies when the job is pipelined, pp_microbatch_size_where naming it.
  std::int64_t pp_microbatches = 0;
  std::optional<std::int64_t> pp_layers_per_stage;
  std::string pp_layers_per_stage_where;
  std::int64_t pp_first_stage_less_layers = 1;
  std::string pp_first_stage_less_layers_where;
  std::int64_t pp_last_stage_less_layers = 1;
  std::string pp_last_stage_less_layers_where;
  // The stages' modules named by the config itself: module_fqns_per_model_part (a list per
  // stage), or older torchtitan's pipeline_parallel_split_points (the first module of each
  // stage after the first); where, empty when it names none.
  std::vector<std::vector<std::string>> pp_module_fqns;
  std::vector<std::string> pp_split_points;
  std::string pp_explicit_split_where;
  std::int64_t cp = 1;
  std::string cp_where;
  // context_parallel_rotate_method: "allgather" (torchtitan's default, what fsdptune
  // models) or "alltoall".
  std::string cp_rotate_method = "allgather";
  std::string cp_rotate_method_where;
  std::int64_t ep = 1;
  std::string ep_where;
  std::string reshard_after_forward = "default";  // fsdp_reshard_after_forward
  std::string reshard_after_forward_where;

  // [activation_checkpoint]
  std::string ac_mode = "selective";
  std::string ac_mode_where;
  std::string selective_ac_option = "2";
  std::string selective_ac_option_where;

  // [float8] (or [quantize.linear.float8])
  bool float8_all_gather = false;  // enable_fsdp_float8_all_gather
  std::string float8_all_gather_where;
  bool float8_emulate = false;  // emulate: float8 matmuls emulated (torchtitan's test mode)
  std::string float8_emulate_where;
  // recipe_name ("rowwise", "rowwise_with_gw_hp", ...; absent: tensorwise scaling, what
  // --float8 models).
  std::optional<std::string> float8_recipe;
  std::string float8_recipe_where;
  // torchtitan of 2024's [float8] scaling_type_input, scaling_type_weight and
  // scaling_type_grad_output: the first that is not "dynamic" ("delayed": amax history
  // scaling), with where it is; empty: all dynamic (tensorwise scaling, what --float8
  // models).
  std::string float8_scaling;
  std::string float8_scaling_where;
  // Float8 switched on in [training], as mid-2024 torchtitan read it (enable_float8_linear,
  // or fp8_linear before that): the hints name that layout's keys.
  bool float8_in_training = false;
  // filter_fqns: the linears left in bf16 are those whose name holds one of these; absent
  // (nullopt), the output projection alone (older torchtitan's fixed filter, fsdptune's
  // model).
  std::optional<std::vector<std::string>> float8_filter_fqns;
  std::string float8_filter_fqns_where;

  bool operator==(const TorchtitanConfig&) const = default;
};

// The largest config read (torchtitan's own are a few KiB).
constexpr std::int64_t kMaxTorchtitanConfigBytes = std::int64_t{256} << 10;
// Parses a config. Throws Error(kBadInput) naming `source` (and the line, for TOML syntax)
// or the field (wrong type, value torchtitan does not take).
TorchtitanConfig torchtitan_config_from_toml(const std::string& text, const std::string& source);
TorchtitanConfig read_torchtitan_config(const std::string& path);

// fsdptune's built-in model of the config's [model] name and flavor ("llama3" "8B" ->
// "llama3-8b"; flavors that differ only in the attention kernel, "8B_flex", map to their
// shapes). Throws Error(kBadInput) naming the [model] field when there is none.
std::string torchtitan_builtin_model(const TorchtitanConfig& config);

// The job fields set on the command line: each replaces what the config says of that
// field (the rest follow the config; e.g. with --pp given, the config's local batch is
// split into microbatches as torchtitan would split it for that degree).
struct JobOverrides {
  std::optional<std::int64_t> gpus, gpus_per_node, tp, cp, dp_replicate, local_batch, seq_len, pp,
      microbatches, pipeline_steps, virtual_stages, pp_first_stage_less_layers,
      pp_last_stage_less_layers;
  std::optional<std::vector<std::int64_t>> pp_chunk_blocks;
  std::optional<ActivationCheckpointing> ac;
  std::optional<DType> param_dtype, reduce_dtype;
  std::optional<bool> float8, async_tp;
  std::optional<Execution> execution;
  std::optional<PipelineSchedule> pp_schedule;
};

// The JobSpec the config describes for `model` under `overrides`, normalized
// (normalize_job, errors naming the config's file). The world size is the product of the
// degrees when data_parallel_shard_degree is set (it must then agree with an overriding
// gpus), else overrides.gpus or torchtitan's 8. Under PP the local batch is split into
// microbatches of pipeline_parallel_microbatch_size sequences (JobSpec::local_batch is one
// microbatch); interleaved schedules run pipeline_parallel_layers_per_stage's stages per
// rank, or torchtitan's 2. Without PP a global_batch_size of G x (local x DP) is
// torchtitan's gradient accumulation: G microbatches of the local batch (JobSpec::
// microbatches; the fsdp2 plan re-gathers and reduce-scatters in each, as FSDP2 under
// torchtitan's train_step does, default_keep_gathered); under PP a global batch of G
// pipeline steps runs the schedule G times per optimizer step (JobSpec::pipeline_steps).
// A job torchtitan trains without mixed precision (torchtitan_mixed_precision) is fp32,
// whatever mixed_precision_* say, unless the overrides give dtypes.
// Throws Error(kBadInput) naming the field of what fsdptune does not model: context
// parallelism's alltoall rotate method, expert parallelism, CPU offload, layer-level
// selective AC (every Nth
// layer), float8 linears without float8 all-gather, other converters, pipeline schedules beyond
// 1F1B, Interleaved1F1B and GPipe; and of what torchtitan itself rejects (async TP without compile,
// a local batch not divisible by the microbatch size, ...).
JobSpec torchtitan_job(const TorchtitanConfig& config, const ModelSpec& model,
                       const JobOverrides& overrides = {});

// The sequences per step the config trains on `gpus` GPUs (what `sweep --job-toml` ranks
// meshes at): global_batch_size when set, else the local batch x the data-parallel degree
// (data_parallel_replicate_degree x data_parallel_shard_degree, the latter what tp, pp
// and cp leave of `gpus` when -1). Throws Error(kBadInput) naming the field when the
// degrees do not divide `gpus` or fix another world size.
std::int64_t torchtitan_global_batch(const TorchtitanConfig& config, std::int64_t gpus);

// What the config sets that is a plan's choice rather than the job's, or read and not
// modelled: one line each, for the CLI to print as notes (empty when none).
std::vector<std::string> torchtitan_notes(const TorchtitanConfig& config);
// Of those, the ones about its keys (near misses of keys it reads, ignored): what a command
// that takes only some settings of the config (sweep) says.
std::vector<std::string> torchtitan_key_notes(const TorchtitanConfig& config);

// How the config runs the blocks: compiled when it compiles the model, else eager as PyTorch
// runs it today (RMSNorm fused; docs/workload.md "Eager and compiled execution"). A compile
// backend other than inductor is refused (Error naming [compile] backend): ask only where
// no --execution replaces it.
Execution torchtitan_execution(const TorchtitanConfig& config);

// The other way: `job` of `model` (named `model_name`: --model's argument) as a torchtitan
// train config's text, the tables and keys torchtitan_job reads (docs/torchtitan-config.md,
// "Writing a config"): every degree fixed (the world size is the job's), the local batch
// and microbatch size, the schedule and, where torchtitan's default is not the job's,
// pipeline_parallel_layers_per_stage giving its stages per rank (a comment says so when
// no value does), AC, dtypes, float8, async TP with [compile]. [model] name and flavor
// for the llama3 models fsdptune has built in. Deterministic; read back by
// torchtitan_job (with gpus_per_node, which torchtitan leaves to the launcher), it gives
// `job` again, unless torchtitan trains it without mixed precision and the job is not in
// fp32 (it reads back in fp32). REQUIRES: job normalized for model.
std::string torchtitan_config_toml(const std::string& model_name, const ModelSpec& model,
                                   const JobSpec& job);

// Whether torchtitan trains `job` in mixed precision: false where it shards over no rank
// (dp_shard 1, derived from gpus when 0, so no cp either) with TP or PP: ParallelDims.
// fsdp_enabled is false, and maybe_enable_amp then turns mixed precision off (fp32
// parameters, activations and matmuls). torchtitan_job reads such a config in fp32, and
// the sweep ranks such meshes in fp32.
bool torchtitan_mixed_precision(const JobSpec& job);

// What torchtitan runs where `job` shards over no rank (dp_shard 1, so no context
// parallelism either; 0 derives it from gpus): ParallelDims.fsdp_enabled is false, so it
// applies no fully_shard -- DDP over dp_replicate replicas where there are several -- and,
// with TP or PP, maybe_enable_amp turns mixed precision off: fp32 parameters, activations
// and matmuls. fsdptune models FSDP2 over one-rank shard groups in the job's param dtype
// (what fully_shard on a one-rank mesh runs), which is not that: in bf16 far from it, in
// fp32 (as torchtitan_job reads such a config) but for the copies of its one-rank
// all-gathers and reduce-scatters. The note for the CLI to print; "" when the job
// shards (dp_shard > 1).
std::string torchtitan_without_fsdp_note(const JobSpec& job);

// torchtitan's JobConfig declares mixed_precision_param "bfloat16" or "float32" and
// mixed_precision_reduce "float32" (some versions "bfloat16" too): for a job of other
// dtypes, which a written config says all the same, the note for the CLI to print (and
// the config's comment); "" otherwise (found by QA: fp16 and a bf16 reduction were
// written without a word).
std::string torchtitan_dtype_note(const JobSpec& job);

// Whether torchtitan would run `job`'s float8 linears with bf16 all-gathers: its float8
// converter enables float8 all-gathers only where data_parallel_shard_degree > 1
// (ParallelDims.dp_shard_enabled), and a mesh sharding over its context-parallel ranks
// alone (dp_shard == cp > 1) has degree 1. fsdptune's float8 all-gathers in float8, so
// such a config is not modelled (torchtitan_job refuses it, the sweep skips the mesh);
// the note for an emitted config says so. REQUIRES: job normalized.
bool torchtitan_float8_gathers_bf16(const JobSpec& job);

}  // namespace fsdptune
