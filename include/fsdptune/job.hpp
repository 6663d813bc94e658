// The training job: mesh, cluster, batch, dtypes, activation checkpointing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fsdptune/hardware.hpp"
#include "fsdptune/model.hpp"

namespace fsdptune {

enum class DType { kBF16, kFP16, kFP32, kFP8 };
int bytes_per_element(DType dtype);
std::string to_string(DType dtype);
DType dtype_from_string(const std::string& text, const std::string& where);

enum class ActivationCheckpointing { kNone, kSelective, kFull };
std::string to_string(ActivationCheckpointing ac);
ActivationCheckpointing ac_from_string(const std::string& text, const std::string& where);

enum class PipelineSchedule { k1F1B, kInterleaved1F1B, kGPipe };
std::string to_string(PipelineSchedule schedule);
PipelineSchedule pipeline_schedule_from_string(const std::string& text, const std::string& where);

// How PyTorch runs the blocks' memory-bound ops (docs/workload.md "Eager"):
// - kCompiled: torch.compile (SimpleFSDP, torchtitan with the model compiled): the norms,
//   RoPE and SwiGLU each one fused kernel;
// - kEager: eager PyTorch 2.8 and later: RMSNorm one fused ATen kernel (_fused_rms_norm),
//   RoPE and SwiGLU their unfused ATen kernels, RoPE through fp32;
// - kEagerUnfusedRmsnorm: eager PyTorch before 2.8: RMSNorm too as its composite ATen ops,
//   through fp32 (about 9x the traffic of the fused kernel).
enum class Execution { kCompiled, kEager, kEagerUnfusedRmsnorm };
std::string to_string(Execution execution);  // "compiled", "eager", "eager-unfused-rmsnorm"
Execution execution_from_string(const std::string& text, const std::string& where);
// For a job's one-line description: "" when compiled, else ", eager" or
// ", eager-unfused-rmsnorm".
std::string execution_suffix(Execution execution);

struct JobSpec {
  std::int64_t gpus = 8;  // world size
  std::int64_t gpus_per_node = 8;
  // FSDP shard group size; 0 = derived by normalize_job. With context parallelism it
  // includes the cp ranks (torchtitan's dp_shard_cp mesh: FSDP shards over dp_shard x cp).
  std::int64_t dp_shard = 0;
  std::int64_t dp_replicate = 1;  // HSDP replicas
  std::int64_t tp = 1;            // tensor parallel degree
  // Context parallel degree (torchtitan's context_parallel_degree): the cp ranks of one
  // FSDP shard group (cp divides dp_shard) split each sequence, every rank holding 2 of its
  // 2 cp chunks (load-balanced causal), and all-gather K and V for attention
  // (docs/parallelism.md "Context parallelism"). Data-parallel degree: dp_replicate x
  // dp_shard / cp.
  std::int64_t cp = 1;
  std::int64_t pp = 1;            // pipeline stages
  std::int64_t microbatches = 1;  // pipeline microbatches per step
  // How many times the pipeline schedule runs per optimizer step (pp > 1 only): torchtitan's
  // gradient accumulation under PP, train_step calling the schedule's step() once per
  // local batch of M microbatches, each a whole pipeline (fill, drain, reduce-scatters), the
  // optimizer once after the last (docs/parallelism.md "Gradient accumulation over pipeline
  // steps"). Without PP, gradient accumulation is `microbatches`.
  std::int64_t pipeline_steps = 1;
  std::int64_t virtual_stages = 1;  // interleaved 1F1B chunks per rank
  // How many transformer blocks the embedding and norm+output count as when the blocks are
  // split into pp x virtual_stages chunks (torchtitan's
  // pipeline_parallel_first/last_stage_less_layers, default 1 each; 0 and 0 split the
  // blocks alone evenly, as Megatron does). pipeline_chunk_blocks in pipeline.hpp.
  std::int64_t pp_first_stage_less_layers = 1;
  std::int64_t pp_last_stage_less_layers = 1;
  // The blocks of each of the pp x virtual_stages chunks given one by one (torchtitan's
  // module_fqns_per_model_part); empty: the split of the two weights above, which are
  // then 0 and 0 (normalize_job).
  std::vector<std::int64_t> pp_chunk_blocks;
  PipelineSchedule pp_schedule = PipelineSchedule::k1F1B;
  std::int64_t local_batch = 1;  // sequences per data-parallel rank per step
  std::int64_t seq_len = 8192;
  ActivationCheckpointing ac = ActivationCheckpointing::kNone;
  DType param_dtype = DType::kBF16;   // dtype of gathered parameters and compute
  DType reduce_dtype = DType::kFP32;  // dtype of reduce-scattered gradients
  bool float8 = false;                // float8 linears and float8 all-gather
  bool async_tp = false;              // overlap TP collectives with the GEMMs
  Execution execution = Execution::kCompiled;

  bool operator==(const JobSpec&) const = default;
};

// For a job's one-line description: "" with the default dtypes (bf16 parameters, fp32
// reduce), else ", params P, reduce R".
std::string dtype_suffix(const JobSpec& job);
// The same for float8 and async TP: "", ", float8", ", async TP" or both (async TP was
// in no text header: 70B at tp 8 read the same with and without it, 14.2 s against 12.0 s).
std::string features_suffix(const JobSpec& job);

// The largest job fsdptune takes, far above any real one, so that (with the model limits
// of model.hpp) every byte count of its workload fits in 64 bits and its pipeline schedule
// has a bounded number of actions: at most kMaxJobGpus GPUs (and per node), microbatches
// (and microbatches x pipeline_steps), local_batch x seq_len tokens per microbatch; virtual
// stages at most kMaxModelLayers.
inline constexpr std::int64_t kMaxJobGpus = std::int64_t{1} << 24;              // 16777216
inline constexpr std::int64_t kMaxJobMicrobatches = std::int64_t{1} << 16;      // 65536
inline constexpr std::int64_t kMaxJobMicrobatchTokens = std::int64_t{1} << 30;  // 1073741824
// A pipeline's actions (a forward and a backward per chunk and microbatch of every pipeline
// step: 2 x pp x virtual_stages x microbatches x pipeline_steps), which its simulation holds
// at about 60 bytes each: at most 2^25, about 2 GB, 16.5 million more than 405B's largest
// (126 chunks of one block x 65536 microbatches) needs (found by QA: a 65536-layer model on
// pp 8192 x 65536 microbatches was killed for memory after a minute).
inline constexpr std::int64_t kMaxPipelineActions = std::int64_t{1} << 25;  // 33554432

// Whether `hardware` can run `job`: float8 needs fp8 tensor cores (peak_fp8_flops_per_s >
// 0; torchao's float8 training needs SM 8.9 or newer, an A100 has none). Throws
// kBadInput naming --float8 (or its field in `source`).
void check_job_hardware(const JobSpec& job, const HardwareSpec& hardware,
                        const std::string& source = "");

// Fills derived fields (dp_shard = gpus / (tp * pp * dp_replicate)) and validates the job
// against the model: positive sizes at most the limits above, heads and kv heads divisible
// by tp, gpus divisible by tp*pp*dp_replicate, pp x virtual_stages chunks that the
// blocks fill as torchtitan's split requires (pipeline_chunk_blocks), ... Throws Error(kBadInput)
// naming the flag (e.g. "--tp"), or, for a job read from a file (`source` not empty), that file's
// field
// ("schedule.json: job: field 'tp'").
JobSpec normalize_job(const ModelSpec& model, JobSpec job, const std::string& source = "");

// Where an error about the job setting of `flag` points: the flag itself, or with `source`
// the field of a file's job that sets it ("--batch" -> "SOURCE: field 'local_batch'").
std::string job_where(const std::string& flag, const std::string& source);

// The flag that sets a job_to_json field ("local_batch" -> "--batch"); the field itself
// where none does.
std::string job_flag_of_field(const std::string& field);

// The shard group for a job's one-line description: "8", or "8 (cp 2)" with context
// parallelism.
std::string dp_shard_text(std::int64_t dp_shard, std::int64_t cp);

// The world sizes nearest job.gpus that its mesh (tp, pp, dp_replicate, cp on nodes of
// gpus_per_node) takes as normalize_job does: multiples of tp*pp*dp_replicate, in whole
// nodes above one with no group across them; "6 or 24" (12 GPUs, 3 replicas, nodes of 8),
// "8" where none is below, at most kMaxJobGpus; empty where none is found (found by QA and
// review: hints offered 12 GPUs on nodes of 8, and 36 on nodes of 6 with 4 replicas).
std::string gpu_counts_near(const JobSpec& job);

// The microbatches of a job's step for its one-line description: "4 microbatches", or
// "4 microbatches x 2 pipeline steps" (JobSpec::pipeline_steps).
std::string microbatches_text(const JobSpec& job);
std::string microbatches_text(std::int64_t microbatches, std::int64_t pipeline_steps);

// The pipeline schedule of a job's one-line description: its name ("1f1b"), or at pp 1
// "no pipeline (gradient accumulation)", "no pipeline" where one microbatch is the step.
std::string pipeline_schedule_text(const JobSpec& job);

// The ranks that take distinct batches: dp_replicate x dp_shard / cp.
// REQUIRES: job normalized.
std::int64_t data_parallel_degree(const JobSpec& job);

// The blocks of each chunk as --pp-chunk-blocks spells them, "15,16,16,15" ("" for none).
std::string chunk_blocks_text(const std::vector<std::int64_t>& blocks);

// The flags that give `job`'s split of the blocks into its chunks: "--pp-chunk-blocks
// 15,16,16,15" when given block by block, else "--pp-first-stage-less-layers F
// --pp-last-stage-less-layers L".
std::string pp_split_flags(const JobSpec& job);

nlohmann::json job_to_json(const JobSpec& job);
JobSpec job_from_json(const nlohmann::json& json, const std::string& source);

}  // namespace fsdptune
