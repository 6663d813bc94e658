#include "fsdptune/job.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "fsdptune/error.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/units.hpp"

namespace fsdptune {
namespace {

std::string field_where(const std::string& source, const std::string& field) {
  return fmt::format("{}: field '{}'", source, field);
}

void require_positive(std::int64_t value, const std::string& flag) {
  if (value <= 0) throw_bad_input(flag, fmt::format("must be > 0, got {}", value));
}

void require_at_most(std::int64_t value, std::int64_t limit, const std::string& flag) {
  if (value > limit) {
    throw_bad_input(flag,
                    fmt::format("{} is more than fsdptune simulates (at most {})", value, limit));
  }
}

}  // namespace

int bytes_per_element(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
    case DType::kFP16:
      return 2;
    case DType::kFP32:
      return 4;
    case DType::kFP8:
      return 1;
  }
  return 2;
}

std::string to_string(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return "bf16";
    case DType::kFP16:
      return "fp16";
    case DType::kFP32:
      return "fp32";
    case DType::kFP8:
      return "fp8";
  }
  return "bf16";
}

DType dtype_from_string(const std::string& text, const std::string& where) {
  if (text == "bf16" || text == "bfloat16") return DType::kBF16;
  if (text == "fp16" || text == "float16") return DType::kFP16;
  if (text == "fp32" || text == "float32") return DType::kFP32;
  if (text == "fp8" || text == "float8") return DType::kFP8;
  throw_bad_input(where,
                  fmt::format("unknown dtype '{}' (expected bf16, fp16, fp32 or fp8)", text));
}

std::string to_string(ActivationCheckpointing ac) {
  switch (ac) {
    case ActivationCheckpointing::kNone:
      return "none";
    case ActivationCheckpointing::kSelective:
      return "selective";
    case ActivationCheckpointing::kFull:
      return "full";
  }
  return "none";
}

ActivationCheckpointing ac_from_string(const std::string& text, const std::string& where) {
  if (text == "none") return ActivationCheckpointing::kNone;
  if (text == "selective" || text == "op") return ActivationCheckpointing::kSelective;
  if (text == "full") return ActivationCheckpointing::kFull;
  throw_bad_input(where,
                  fmt::format("unknown activation checkpointing '{}' (expected none, selective "
                              "or full)",
                              text));
}

std::string to_string(Execution execution) {
  switch (execution) {
    case Execution::kCompiled:
      return "compiled";
    case Execution::kEager:
      return "eager";
    case Execution::kEagerUnfusedRmsnorm:
      return "eager-unfused-rmsnorm";
  }
  return "compiled";
}

Execution execution_from_string(const std::string& text, const std::string& where) {
  for (const Execution execution :
       {Execution::kCompiled, Execution::kEager, Execution::kEagerUnfusedRmsnorm}) {
    if (text == to_string(execution)) return execution;
  }
  throw_bad_input(where, fmt::format("unknown execution '{}' (expected compiled, eager or "
                                     "eager-unfused-rmsnorm)",
                                     text));
}

std::string execution_suffix(Execution execution) {
  return execution == Execution::kCompiled ? "" : ", " + to_string(execution);
}

std::string dtype_suffix(const JobSpec& job) {
  const JobSpec defaults;
  if (job.param_dtype == defaults.param_dtype && job.reduce_dtype == defaults.reduce_dtype) {
    return "";
  }
  return fmt::format(", params {}, reduce {}", to_string(job.param_dtype),
                     to_string(job.reduce_dtype));
}

std::string features_suffix(const JobSpec& job) {
  return std::string(job.float8 ? ", float8" : "") + (job.async_tp ? ", async TP" : "");
}

std::string to_string(PipelineSchedule schedule) {
  switch (schedule) {
    case PipelineSchedule::k1F1B:
      return "1f1b";
    case PipelineSchedule::kInterleaved1F1B:
      return "interleaved-1f1b";
    case PipelineSchedule::kGPipe:
      return "gpipe";
  }
  return "1f1b";
}

PipelineSchedule pipeline_schedule_from_string(const std::string& text, const std::string& where) {
  if (text == "1f1b") return PipelineSchedule::k1F1B;
  if (text == "interleaved-1f1b") return PipelineSchedule::kInterleaved1F1B;
  if (text == "gpipe") return PipelineSchedule::kGPipe;
  throw_bad_input(where,
                  fmt::format("unknown pipeline schedule '{}' (expected 1f1b, interleaved-1f1b "
                              "or gpipe)",
                              text));
}

namespace {

// The flags and the job_to_json fields they set.
constexpr std::pair<const char*, const char*> kFields[] = {
    {"--gpus", "gpus"},
    {"--gpus-per-node", "gpus_per_node"},
    {"--dp-shard", "dp_shard"},
    {"--dp-replicate", "dp_replicate"},
    {"--tp", "tp"},
    {"--cp", "cp"},
    {"--pp", "pp"},
    {"--microbatches", "microbatches"},
    {"--pipeline-steps", "pipeline_steps"},
    {"--virtual-stages", "virtual_stages"},
    {"--pp-first-stage-less-layers", "pp_first_stage_less_layers"},
    {"--pp-last-stage-less-layers", "pp_last_stage_less_layers"},
    {"--pp-chunk-blocks", "pp_chunk_blocks"},
    {"--pp-schedule", "pp_schedule"},
    {"--batch", "local_batch"},
    {"--seq", "seq_len"},
    {"--ac", "activation_checkpointing"},
    {"--param-dtype", "param_dtype"},
    {"--reduce-dtype", "reduce_dtype"},
    {"--execution", "execution"},
    {"--async-tp", "async_tp"},
    {"--float8", "float8"}};

}  // namespace

std::string job_where(const std::string& flag, const std::string& source) {
  if (source.empty()) return flag;
  for (const auto& [name, field] : kFields) {
    if (flag == name) return field_where(source, field);
  }
  return field_where(source, flag);
}

std::string job_flag_of_field(const std::string& field) {
  for (const auto& [name, of] : kFields) {
    if (field == of) return name;
  }
  return field;
}

namespace {

// Whether groups of `ranks` consecutive ranks lie within nodes of `gpus_per_node` or fill
// whole ones (none straddles a node boundary).
bool fills_nodes(std::int64_t ranks, std::int64_t gpus_per_node) {
  return ranks <= gpus_per_node ? gpus_per_node % ranks == 0 : ranks % gpus_per_node == 0;
}

// Blocks given chunk by chunk: one count per chunk, together the model's blocks, and every
// chunk but the first (the embedding's) and the last (norm+output's) holding one at least.
void check_chunk_blocks(const ModelSpec& model, const JobSpec& job, const std::string& source) {
  const std::string at = job_where("--pp-chunk-blocks", source);
  const std::vector<std::int64_t>& blocks = job.pp_chunk_blocks;
  const std::int64_t chunks = job.pp * job.virtual_stages;
  if (static_cast<std::int64_t>(blocks.size()) != chunks) {
    throw_bad_input(at, fmt::format("{} given, but pp {} x virtual_stages {} makes {}",
                                    counted(static_cast<std::int64_t>(blocks.size()), "chunk"),
                                    job.pp, job.virtual_stages, chunks));
  }
  std::int64_t total = 0;
  for (std::size_t c = 0; c < blocks.size(); ++c) {
    const bool end = c == 0 || c + 1 == blocks.size();
    if (blocks[c] < (end ? 0 : 1) || blocks[c] > kMaxModelLayers) {
      throw_bad_input(at, fmt::format("chunk {} holds {} blocks: {}", c, blocks[c],
                                      end ? "at least 0 (it holds the embedding or the output)"
                                          : "a chunk between the first and the last holds 1 "
                                            "at least"));
    }
    total += blocks[c];
  }
  if (total != model.n_layers) {
    throw_bad_input(
        at, fmt::format("{} blocks in all, but {} has {}", total, model.name, model.n_layers));
  }
}

// torchtitan's generate_llm_fqn_per_model_part's conditions on the split of the blocks
// into pp x virtual_stages chunks, the embedding counting as first and norm+output as
// last blocks (pipeline_chunk_blocks): every chunk gets at least one of the effective
// layers, and the first and last chunks at least their module's weight. A job of one
// chunk gets the default weights.
void check_pipeline_split(const ModelSpec& model, JobSpec& job, const std::string& source) {
  const auto at = [&](const char* flag) { return job_where(flag, source); };
  const std::int64_t first = job.pp_first_stage_less_layers;
  const std::int64_t last = job.pp_last_stage_less_layers;
  for (const auto& [flag, value] : {std::pair{"--pp-first-stage-less-layers", first},
                                    std::pair{"--pp-last-stage-less-layers", last}}) {
    if (value < 0) throw_bad_input(at(flag), fmt::format("must be >= 0, got {}", value));
    require_at_most(value, kMaxModelLayers, at(flag));
  }
  const std::int64_t chunks = job.pp * job.virtual_stages;
  if (!job.pp_chunk_blocks.empty()) {
    check_chunk_blocks(model, job, source);
    // The blocks given: the weights mean nothing; 0 and 0, so that equal jobs compare
    // equal (job_to_json leaves them out).
    job.pp_first_stage_less_layers = 0;
    job.pp_last_stage_less_layers = 0;
    if (chunks > 1) return;
    job.pp_chunk_blocks.clear();  // one chunk holds every block: the weights' split
  }
  if (chunks == 1) {
    // One chunk holds the whole model: the weights mean nothing; the defaults, so that
    // equal jobs compare equal (job_to_json leaves them out).
    job.pp_first_stage_less_layers = JobSpec{}.pp_first_stage_less_layers;
    job.pp_last_stage_less_layers = JobSpec{}.pp_last_stage_less_layers;
    return;
  }
  const std::int64_t effective = model.n_layers + first + last;
  if (effective < chunks) {
    throw_bad_input(
        at(job.pp > 1 ? "--pp" : "--virtual-stages"),
        fmt::format("{} layers (+{} for the embedding, +{} for the output) cannot fill {} "
                    "pipeline stages x {} virtual stages",
                    model.n_layers, first, last, job.pp, job.virtual_stages));
  }
  const std::int64_t per_chunk = effective / chunks;
  for (const auto& [flag, value, module] :
       {std::tuple{"--pp-first-stage-less-layers", first, "embedding"},
        std::tuple{"--pp-last-stage-less-layers", last, "output"}}) {
    if (value > per_chunk) {
      throw_bad_input(
          at(flag),
          fmt::format("the {} counts as {} layers, more than each of the {} chunks "
                      "gets: ({} layers + {} + {}) / {} = {}",
                      module, value, chunks, model.n_layers, first, last, chunks, per_chunk),
          "torchtitan refuses it too (generate_llm_fqn_per_model_part)");
    }
  }
}

}  // namespace

void check_job_hardware(const JobSpec& job, const HardwareSpec& hardware,
                        const std::string& source) {
  if (job.float8 && !(hardware.peak_fp8_flops_per_s > 0)) {
    throw_bad_input(job_where("--float8", source),
                    fmt::format("{} has no fp8 tensor cores (peak_fp8_flops_per_s 0): torchao's "
                                "float8 training needs compute capability 8.9 or newer",
                                hardware.id),
                    "train in bf16 there (no --float8), or on an H100 or H200");
  }
}

JobSpec normalize_job(const ModelSpec& model, JobSpec job, const std::string& source) {
  const auto at = [&](const char* flag) { return job_where(flag, source); };
  require_positive(job.gpus, at("--gpus"));
  require_positive(job.gpus_per_node, at("--gpus-per-node"));
  require_positive(job.tp, at("--tp"));
  require_positive(job.cp, at("--cp"));
  require_positive(job.dp_replicate, at("--dp-replicate"));
  require_positive(job.pp, at("--pp"));
  require_positive(job.microbatches, at("--microbatches"));
  require_positive(job.pipeline_steps, at("--pipeline-steps"));
  require_positive(job.virtual_stages, at("--virtual-stages"));
  require_positive(job.local_batch, at("--batch"));
  require_positive(job.seq_len, at("--seq"));
  if (job.dp_shard < 0)
    throw_bad_input(at("--dp-shard"),
                    fmt::format("must be >= 0 (0 = derived), got {}", job.dp_shard));
  require_at_most(job.gpus, kMaxJobGpus, at("--gpus"));
  require_at_most(job.gpus_per_node, kMaxJobGpus, at("--gpus-per-node"));
  require_at_most(job.cp, kMaxJobGpus, at("--cp"));
  require_at_most(job.microbatches, kMaxJobMicrobatches, at("--microbatches"));
  require_at_most(job.pipeline_steps, kMaxJobMicrobatches, at("--pipeline-steps"));
  if (job.microbatches * job.pipeline_steps > kMaxJobMicrobatches) {
    throw_bad_input(at("--pipeline-steps"),
                    fmt::format("{} pipeline steps of {} microbatches are more than fsdptune "
                                "simulates (at most {} microbatches per optimizer step)",
                                job.pipeline_steps, job.microbatches, kMaxJobMicrobatches));
  }
  if (job.pipeline_steps > 1 && job.pp == 1) {
    throw_bad_input(
        at("--pipeline-steps"),
        fmt::format("{} pipeline steps without pipeline parallelism (pp 1)", job.pipeline_steps),
        "without PP, gradient accumulation is --microbatches (each microbatch a "
        "whole FSDP forward and backward)");
  }
  require_at_most(job.virtual_stages, kMaxModelLayers, at("--virtual-stages"));
  if (job.virtual_stages > 1 && job.pp == 1) {
    throw_bad_input(
        at("--virtual-stages"),
        fmt::format("{} virtual stages without pipeline parallelism (pp 1)", job.virtual_stages),
        "virtual stages are the chunks of each pipeline rank: give --pp too");
  }
  // Without PP, gradient accumulation runs each microbatch's forward and backward in turn
  // (torchtitan's train step); a pipeline schedule there held every microbatch's
  // activations at once (GPipe) in the simulation and was not what any run does.
  if (job.pp == 1 && job.pp_schedule != JobSpec{}.pp_schedule) {
    throw_bad_input(at("--pp-schedule"),
                    fmt::format("the {} pipeline schedule without pipeline parallelism (pp 1)",
                                to_string(job.pp_schedule)),
                    "without PP each microbatch runs its forward and backward in turn: give "
                    "--pp too, or leave --pp-schedule out");
  }
  // Under PP the embedding is on the first stage and the output on the last: a tied output
  // would need its own copy of the weight there and a gradient all-reduce between the two
  // stages (Megatron's embedding group), which torchtitan does not do and fsdptune does
  // not model.
  if (job.pp > 1 && model.tie_embeddings) {
    throw_bad_input(at("--pp"),
                    fmt::format("{} ties its output to the embedding weight (tie_embeddings): "
                                "pipeline parallelism (pp {}) puts them on different stages, "
                                "which torchtitan refuses (\"Weight tying is not supported with "
                                "Pipeline Parallel\") and fsdptune does not model",
                                model.name, job.pp),
                    "--pp 1, or a model with untied embeddings (llama3-8b)");
  }
  require_at_most(job.local_batch, kMaxJobMicrobatchTokens, at("--batch"));
  require_at_most(job.seq_len, kMaxJobMicrobatchTokens, at("--seq"));
  if (job.local_batch * job.seq_len > kMaxJobMicrobatchTokens) {
    throw_bad_input(at("--batch"),
                    fmt::format("{} sequences of {} tokens are more than fsdptune "
                                "simulates (at most {} tokens per microbatch)",
                                job.local_batch, job.seq_len, kMaxJobMicrobatchTokens));
  }
  // Within the limits above a step's activations could still pass 64 bits summed over the
  // blocks and microbatches (65536 blocks of 2^30 tokens). A generous upper bound of what
  // one rank holds -- 32 bytes per token for each unit of width of every block on it, in
  // every microbatch of the step, and per vocabulary entry for the logits -- stays below
  // 2^60 bytes (an exbibyte) for every job that could run.
  {
    const std::int64_t head_dim =
        model.head_dim > 0 ? model.head_dim : model.dim / std::max<std::int64_t>(model.n_heads, 1);
    const double width =
        static_cast<double>(model.dim) + static_cast<double>(model.ffn_dim) +
        static_cast<double>(model.n_heads + 2 * model.n_kv_heads) * static_cast<double>(head_dim);
    const double blocks =
        std::ceil(static_cast<double>(model.n_layers) / static_cast<double>(job.pp));
    const double tokens = static_cast<double>(job.local_batch) * static_cast<double>(job.seq_len) *
                          static_cast<double>(job.microbatches);
    const double bound = 32 * tokens * (blocks * width + static_cast<double>(model.vocab_size));
    if (bound > std::ldexp(1.0, 60)) {
      throw_bad_input(
          at("--seq"),
          fmt::format("{:.0f} tokens per step on a rank ({} of {} x {}) through {:.0f} blocks "
                      "of {} are more than fsdptune simulates: their activations would pass "
                      "2^60 bytes",
                      tokens, counted(job.local_batch, "sequence"), job.seq_len,
                      counted(job.microbatches, "microbatch", "microbatches"), blocks, model.name),
          "a shorter --seq, a smaller --batch or fewer --microbatches");
    }
  }

  // Tensor parallelism shards heads, kv heads, the FFN hidden size and the vocabulary
  // (Megatron column/row sharding), and sequence parallelism shards the sequence.
  if (model.n_heads % job.tp != 0) {
    throw_bad_input(at("--tp"), fmt::format("{} attention heads of {} are not divisible by tp {}",
                                            model.n_heads, model.name, job.tp));
  }
  if (model.n_kv_heads % job.tp != 0) {
    throw_bad_input(at("--tp"), fmt::format("{} kv heads of {} are not divisible by tp {}",
                                            model.n_kv_heads, model.name, job.tp));
  }
  if (model.ffn_dim % job.tp != 0) {
    throw_bad_input(at("--tp"), fmt::format("ffn_dim {} of {} is not divisible by tp {}",
                                            model.ffn_dim, model.name, job.tp));
  }
  if (model.vocab_size % job.tp != 0) {
    throw_bad_input(at("--tp"), fmt::format("vocab_size {} of {} is not divisible by tp {}",
                                            model.vocab_size, model.name, job.tp));
  }
  if (job.seq_len % job.tp != 0) {
    throw_bad_input(at("--seq"), fmt::format("sequence length {} is not divisible by tp {} "
                                             "(sequence parallelism shards it)",
                                             job.seq_len, job.tp));
  }
  // In floating point first: the degrees are not bounded yet, their product may not fit.
  const double model_parallel_degree = static_cast<double>(job.tp) * static_cast<double>(job.pp) *
                                       static_cast<double>(job.dp_replicate);
  const std::int64_t model_parallel = model_parallel_degree <= static_cast<double>(job.gpus)
                                          ? job.tp * job.pp * job.dp_replicate
                                          : 0;
  if (model_parallel == 0 || job.gpus % model_parallel != 0) {
    const std::string near = gpu_counts_near(job);
    throw_bad_input(
        at("--gpus"),
        fmt::format("{} {} not divisible by tp*pp*dp_replicate = {}*{}*{} = {}",
                    counted(job.gpus, "GPU"), job.gpus == 1 ? "is" : "are", job.tp, job.pp,
                    job.dp_replicate,
                    model_parallel == 0 ? fmt::format("{:.0f}", model_parallel_degree)
                                        : std::to_string(model_parallel)),
        // Found by QA: no value offered.
        near.empty() ? "give degrees whose product divides --gpus"
                     : fmt::format("give --gpus {} (a multiple of {:.0f}{}), or degrees whose "
                                   "product divides {}",
                                   near, model_parallel_degree,
                                   // Said where a count offered is above a node (review:
                                   // "24 or 48" on nodes of 6 did not say it).
                                   std::stoll(near.substr(near.rfind(' ') + 1)) > job.gpus_per_node
                                       ? ", in whole nodes above one"
                                       : "",
                                   job.gpus));
  }
  const std::int64_t dp_shard = job.gpus / model_parallel;
  if (job.dp_shard != 0 && job.dp_shard != dp_shard) {
    throw_bad_input(
        at("--dp-shard"),
        fmt::format("{} does not match gpus / (tp*pp*dp_replicate) = {}", job.dp_shard, dp_shard));
  }
  // Whole nodes, and TP groups that do not straddle them: the mesh layout
  // (docs/parallelism.md) places tp consecutive ranks in one node when tp fits, and gives
  // a shard group gpus_per_node / tp ranks per node (8 GPUs in nodes of 3 put a TP pair
  // across two nodes, costed as within one).
  if (job.gpus > job.gpus_per_node) {
    if (job.gpus % job.gpus_per_node != 0) {
      throw_bad_input(at("--gpus"),
                      fmt::format("{} GPUs do not fill nodes of {} (--gpus-per-node)", job.gpus,
                                  job.gpus_per_node),
                      gpu_counts_near(job).empty()
                          ? "give whole nodes: --gpus a multiple of --gpus-per-node"
                          : fmt::format("give whole nodes: --gpus {}", gpu_counts_near(job)));
    }
    if (!fills_nodes(job.tp, job.gpus_per_node)) {
      throw_bad_input(
          at("--tp"),
          fmt::format("TP groups of {} straddle nodes of {} GPUs", job.tp, job.gpus_per_node),
          "give a --tp that divides --gpus-per-node (or a multiple of it)");
    }
  }
  job.dp_shard = dp_shard;
  if (dp_shard % job.cp != 0) {
    throw_bad_input(at("--cp"),
                    fmt::format("context parallelism splits the FSDP shard group: cp {} does not "
                                "divide dp_shard {} (gpus / (tp*pp*dp_replicate))",
                                job.cp, dp_shard));
  }
  // Shard groups (dp_shard x tp consecutive ranks) and CP groups (cp x tp) do not straddle
  // nodes either: their collectives are costed with gpus_per_node / tp of their ranks in
  // every node (found by QA: 24 GPUs with --dp-replicate 8 put shard group {6, 7, 8} across
  // two nodes, its all-gathers priced at NVLink's bandwidth, 7x under one NIC's).
  if (job.gpus > job.gpus_per_node) {
    if (!fills_nodes(dp_shard * job.tp, job.gpus_per_node)) {
      throw_bad_input(
          at(job.dp_replicate > 1 ? "--dp-replicate" : "--pp"),
          fmt::format("FSDP shard groups of dp_shard {} x tp {} = {} ranks straddle nodes of {} "
                      "GPUs",
                      dp_shard, job.tp, dp_shard * job.tp, job.gpus_per_node),
          "give --dp-replicate and --pp that leave dp_shard x tp dividing --gpus-per-node (or "
          "a multiple of it)");
    }
    if (!fills_nodes(job.cp * job.tp, job.gpus_per_node)) {
      throw_bad_input(at("--cp"),
                      fmt::format("context-parallel groups of cp {} x tp {} = {} ranks straddle "
                                  "nodes of {} GPUs",
                                  job.cp, job.tp, job.cp * job.tp, job.gpus_per_node),
                      "give a --cp whose cp x tp divides --gpus-per-node (or is a multiple of it)");
    }
  }
  // Load-balanced causal CP cuts each sequence into 2 cp chunks, each rank taking two; the
  // rank's seq / cp tokens are then sharded over tp by sequence parallelism.
  if (job.cp > 1 && (job.seq_len % (2 * job.cp) != 0 || (job.seq_len / job.cp) % job.tp != 0)) {
    throw_bad_input(
        at("--seq"),
        fmt::format(
            "sequence length {} does not split into 2 x cp = {} chunks{}", job.seq_len, 2 * job.cp,
            job.tp > 1 ? fmt::format(" with seq / cp divisible by tp {}", job.tp) : std::string()),
        "PyTorch's context_parallel load-balances the causal mask over 2 x cp chunks");
  }
  check_pipeline_split(model, job, source);
  if (job.param_dtype == DType::kFP8) {
    throw_bad_input(at("--param-dtype"),
                    "fp8 is not a parameter dtype; use --float8 for float8 "
                    "linears and all-gathers");
  }
  if (job.reduce_dtype == DType::kFP8) {
    throw_bad_input(at("--reduce-dtype"), "gradients cannot be reduced in fp8");
  }
  if (job.async_tp && job.tp == 1) {
    // torchtitan ignores enable_async_tensor_parallel without TP (the TOML reader drops it);
    // a flag that changes nothing is refused like --virtual-stages with pp 1.
    throw_bad_input(at("--async-tp"), "async TP without tensor parallelism (tp 1)",
                    fmt::format("async TP overlaps the TP collectives: give {} > 1, or drop {}",
                                at("--tp"), at("--async-tp")));
  }
  if (job.execution != Execution::kCompiled && job.async_tp) {
    throw_bad_input(
        at("--execution"),
        fmt::format("async TP runs only compiled, not {} (torchtitan refuses it)",
                    to_string(job.execution)),
        fmt::format("give {} compiled, or drop {}", at("--execution"), at("--async-tp")));
  }
  {
    // Last, the rest of the job being valid (in doubles all the same).
    const double chunks = static_cast<double>(job.pp) * static_cast<double>(job.virtual_stages);
    const double actions = 2 * chunks * static_cast<double>(job.microbatches) *
                           static_cast<double>(job.pipeline_steps);
    if (actions > static_cast<double>(kMaxPipelineActions)) {
      throw_bad_input(
          at("--microbatches"),
          fmt::format("{:.0f} chunks ({} pipeline stages x {} virtual stages) x {} "
                      "microbatches{} make {:.0f} forward and backward actions, more than "
                      "fsdptune simulates (at most {})",
                      chunks, job.pp, job.virtual_stages, job.microbatches,
                      job.pipeline_steps > 1
                          ? fmt::format(" x {} pipeline steps", job.pipeline_steps)
                          : std::string(),
                      actions, kMaxPipelineActions),
          "fewer microbatches, pipeline stages or virtual stages");
    }
  }
  return job;
}

std::string gpu_counts_near(const JobSpec& job) {
  const std::int64_t per_node = job.gpus_per_node;
  const double degree = static_cast<double>(job.tp) * static_cast<double>(job.pp) *
                        static_cast<double>(job.dp_replicate);
  if (per_node < 1 || job.tp < 1 || job.pp < 1 || job.dp_replicate < 1 || job.cp < 1 ||
      degree > static_cast<double>(kMaxJobGpus)) {
    return "";
  }
  const std::int64_t model_parallel = job.tp * job.pp * job.dp_replicate;
  // The mesh's own rules (normalize_job's): whole nodes above one, and TP, shard and CP
  // groups that do not straddle them (found by review: 36 GPUs offered on nodes of 6 put
  // shard groups of 9 across them).
  const auto takes = [&](std::int64_t count) {
    const std::int64_t dp_shard = count / model_parallel;
    if (count % model_parallel != 0 || dp_shard % job.cp != 0) return false;
    return count <= per_node ||
           (count % per_node == 0 && fills_nodes(job.tp, per_node) &&
            fills_nodes(dp_shard * job.tp, per_node) && fills_nodes(job.cp * job.tp, per_node));
  };
  constexpr int kTries = 4096;
  std::int64_t below = 0;
  std::int64_t above = 0;
  int tries = 0;
  for (std::int64_t count = (job.gpus - 1) / model_parallel * model_parallel;
       count > 0 && ++tries < kTries; count -= model_parallel) {
    if (takes(count)) {
      below = count;
      break;
    }
  }
  tries = 0;
  for (std::int64_t count = (job.gpus / model_parallel + 1) * model_parallel;
       count <= kMaxJobGpus && ++tries < kTries; count += model_parallel) {
    if (takes(count)) {
      above = count;
      break;
    }
  }
  if (below > 0 && above > 0) return fmt::format("{} or {}", below, above);
  return below > 0 ? std::to_string(below) : above > 0 ? std::to_string(above) : "";
}

std::string dp_shard_text(std::int64_t dp_shard, std::int64_t cp) {
  return cp == 1 ? std::to_string(dp_shard) : fmt::format("{} (cp {})", dp_shard, cp);
}

std::string microbatches_text(const JobSpec& job) {
  return microbatches_text(job.microbatches, job.pipeline_steps);
}

std::string microbatches_text(std::int64_t microbatches, std::int64_t pipeline_steps) {
  std::string text = counted(microbatches, "microbatch", "microbatches");
  if (pipeline_steps > 1) text += fmt::format(" x {} pipeline steps", pipeline_steps);
  return text;
}

std::string pipeline_schedule_text(const JobSpec& job) {
  if (job.pp > 1) return to_string(job.pp_schedule);
  return job.microbatches * job.pipeline_steps > 1 ? "no pipeline (gradient accumulation)"
                                                   : "no pipeline";
}

std::int64_t data_parallel_degree(const JobSpec& job) {
  return job.dp_replicate * job.dp_shard / job.cp;
}

std::string chunk_blocks_text(const std::vector<std::int64_t>& blocks) {
  std::string text;
  for (const std::int64_t count : blocks) {
    if (!text.empty()) text += ',';
    text += std::to_string(count);
  }
  return text;
}

std::string pp_split_flags(const JobSpec& job) {
  if (!job.pp_chunk_blocks.empty()) {
    return "--pp-chunk-blocks " + chunk_blocks_text(job.pp_chunk_blocks);
  }
  return fmt::format("--pp-first-stage-less-layers {} --pp-last-stage-less-layers {}",
                     job.pp_first_stage_less_layers, job.pp_last_stage_less_layers);
}

nlohmann::json job_to_json(const JobSpec& job) {
  nlohmann::json json{{"gpus", job.gpus},
                      {"gpus_per_node", job.gpus_per_node},
                      {"dp_shard", job.dp_shard},
                      {"dp_replicate", job.dp_replicate},
                      {"tp", job.tp},
                      {"pp", job.pp},
                      {"microbatches", job.microbatches},
                      {"virtual_stages", job.virtual_stages},
                      {"pp_schedule", to_string(job.pp_schedule)},
                      {"local_batch", job.local_batch},
                      {"seq_len", job.seq_len},
                      {"activation_checkpointing", to_string(job.ac)},
                      {"param_dtype", to_string(job.param_dtype)},
                      {"reduce_dtype", to_string(job.reduce_dtype)},
                      {"float8", job.float8},
                      {"async_tp", job.async_tp}};
  // The split of the blocks into chunks, only where there is more than one chunk (files of
  // other jobs keep their text) and it is not 0 and 0, which a file without the fields means
  // (files written before them keep their text and schedule_hash).
  if ((job.pp > 1 || job.virtual_stages > 1) &&
      (job.pp_first_stage_less_layers != 0 || job.pp_last_stage_less_layers != 0)) {
    json["pp_first_stage_less_layers"] = job.pp_first_stage_less_layers;
    json["pp_last_stage_less_layers"] = job.pp_last_stage_less_layers;
  }
  if (!job.pp_chunk_blocks.empty()) json["pp_chunk_blocks"] = job.pp_chunk_blocks;
  // Only with context parallelism: files without it keep their text and schedule_hash.
  if (job.cp != 1) json["cp"] = job.cp;
  // Only with gradient accumulation over pipeline steps, likewise.
  if (job.pipeline_steps != 1) json["pipeline_steps"] = job.pipeline_steps;
  // Only an eager job: a file without the field (every file written before it) is the
  // compiled job it meant, and keeps its text and schedule_hash.
  if (job.execution != Execution::kCompiled) json["execution"] = to_string(job.execution);
  return json;
}

JobSpec job_from_json(const nlohmann::json& json, const std::string& source) {
  if (!json.is_object()) {
    throw_bad_input(source, fmt::format("expected a JSON object, got {}", json.type_name()));
  }
  static const std::set<std::string> known = {"gpus",
                                              "gpus_per_node",
                                              "dp_shard",
                                              "dp_replicate",
                                              "tp",
                                              "cp",
                                              "pp",
                                              "microbatches",
                                              "pipeline_steps",
                                              "virtual_stages",
                                              "pp_schedule",
                                              "local_batch",
                                              "seq_len",
                                              "activation_checkpointing",
                                              "param_dtype",
                                              "reduce_dtype",
                                              "float8",
                                              "async_tp",
                                              "execution",
                                              "pp_first_stage_less_layers",
                                              "pp_last_stage_less_layers",
                                              "pp_chunk_blocks"};
  for (const auto& [key, value] : json.items()) {
    if (known.count(key) == 0) throw_bad_input(field_where(source, key), "unknown field");
  }
  JobSpec job;
  auto integer = [&](const char* field, std::int64_t& out) {
    const auto it = json.find(field);
    if (it == json.end()) return;
    if (!it->is_number_integer()) {
      throw_bad_input(field_where(source, field),
                      fmt::format("expected an integer, got {}", it->dump()));
    }
    // Above INT64_MAX get<int64_t> wraps (review: 2^64 - 1 was said as "got -1").
    out = json_int64(*it, field_where(source, field));
  };
  auto text = [&](const char* field) -> std::optional<std::string> {
    const auto it = json.find(field);
    if (it == json.end()) return std::nullopt;
    if (!it->is_string()) {
      throw_bad_input(field_where(source, field),
                      fmt::format("expected a string, got {}", it->dump()));
    }
    return it->get<std::string>();
  };
  auto flag = [&](const char* field, bool& out) {
    const auto it = json.find(field);
    if (it == json.end()) return;
    if (!it->is_boolean()) {
      throw_bad_input(field_where(source, field),
                      fmt::format("expected true or false, got {}", it->dump()));
    }
    out = it->get<bool>();
  };
  integer("gpus", job.gpus);
  integer("gpus_per_node", job.gpus_per_node);
  integer("dp_shard", job.dp_shard);
  integer("dp_replicate", job.dp_replicate);
  integer("tp", job.tp);
  integer("cp", job.cp);
  integer("pp", job.pp);
  integer("microbatches", job.microbatches);
  integer("pipeline_steps", job.pipeline_steps);
  integer("virtual_stages", job.virtual_stages);
  // Absent from a job of more than one chunk: the even split of the blocks alone, which
  // files written before these fields (2026-12-02) meant.
  if (job.pp > 1 || job.virtual_stages > 1) {
    job.pp_first_stage_less_layers = 0;
    job.pp_last_stage_less_layers = 0;
  }
  integer("pp_first_stage_less_layers", job.pp_first_stage_less_layers);
  integer("pp_last_stage_less_layers", job.pp_last_stage_less_layers);
  if (const auto it = json.find("pp_chunk_blocks"); it != json.end()) {
    const std::string at = field_where(source, "pp_chunk_blocks");
    if (!it->is_array() || it->empty() || static_cast<std::int64_t>(it->size()) > kMaxModelLayers) {
      throw_bad_input(at, fmt::format("expected an array of at most {} block counts, got {}",
                                      kMaxModelLayers, it->dump()));
    }
    for (const nlohmann::json& count : *it) {
      if (!count.is_number_integer()) {
        throw_bad_input(at, fmt::format("expected integers, got {}", count.dump()));
      }
      job.pp_chunk_blocks.push_back(count.get<std::int64_t>());
    }
  }
  integer("local_batch", job.local_batch);
  integer("seq_len", job.seq_len);
  if (auto value = text("pp_schedule")) {
    job.pp_schedule = pipeline_schedule_from_string(*value, field_where(source, "pp_schedule"));
  }
  if (auto value = text("activation_checkpointing")) {
    job.ac = ac_from_string(*value, field_where(source, "activation_checkpointing"));
  }
  if (auto value = text("param_dtype")) {
    job.param_dtype = dtype_from_string(*value, field_where(source, "param_dtype"));
  }
  if (auto value = text("reduce_dtype")) {
    job.reduce_dtype = dtype_from_string(*value, field_where(source, "reduce_dtype"));
  }
  flag("float8", job.float8);
  flag("async_tp", job.async_tp);
  if (auto value = text("execution")) {
    job.execution = execution_from_string(*value, field_where(source, "execution"));
  }
  // The fields job_to_json writes in every job (every file since the first has them): one
  // missing was taken as its flag's default (found by QA: a schedule without dp_shard
  // stopped at an internal check, one without gpus was read as 8 GPUs and blamed dp_shard).
  for (const char* field :
       {"gpus", "gpus_per_node", "dp_shard", "dp_replicate", "tp", "pp", "microbatches",
        "virtual_stages", "pp_schedule", "local_batch", "seq_len", "activation_checkpointing",
        "param_dtype", "reduce_dtype", "float8", "async_tp"}) {
    if (!json.contains(field)) {
      throw_bad_input(field_where(source, field), "missing field (every job holds it)");
    }
  }
  return job;
}

}  // namespace fsdptune
