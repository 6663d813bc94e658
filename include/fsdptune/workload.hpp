// The FSDP workload: a model + job turned into ordered FSDP units, each with its
// parameters, the ops of its forward and backward, its saved activations and its
// tensor-parallel collectives. Pure: build_workload does no I/O.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fsdptune/job.hpp"
#include "fsdptune/model.hpp"

namespace fsdptune {

enum class CollectiveKind { kAllGather, kReduceScatter, kAllReduce, kSendRecv };
std::string to_string(CollectiveKind kind);  // "all_gather", "reduce_scatter", ...
CollectiveKind collective_from_string(const std::string& text, const std::string& where);

// A group of ranks that a collective runs over.
struct CommGroup {
  std::int64_t ranks = 1;
  std::int64_t ranks_per_node = 1;  // how many of the ranks share a node (NVLink domain)
  // The nodes the group spans where its ranks split unevenly over them (ranks_per_node then
  // the fewest any node holds: HSDP replicas across stages of part-nodes, replicate_group);
  // 0: as many as ranks_per_node fill.
  std::int64_t spanned_nodes = 0;
  std::int64_t nodes() const {
    return spanned_nodes > 0 ? spanned_nodes : (ranks + ranks_per_node - 1) / ranks_per_node;
  }
  // The same ranks, per node and nodes (a count that spanned_nodes states or leaves to the
  // others is the same group).
  bool operator==(const CommGroup& other) const {
    return ranks == other.ranks && ranks_per_node == other.ranks_per_node &&
           nodes() == other.nodes();
  }
};

enum class OpKind {
  kGemm,         // C[m,n] = A[m,k] * B[k,n]
  kAttention,    // causal flash-style attention (forward or backward)
  kMemoryBound,  // norms, RoPE, SwiGLU, residual adds, embedding gather, loss, optimizer
  kCollective,   // a tensor-parallel collective on the compute critical path
};
std::string to_string(OpKind kind);

struct GemmShape {
  std::int64_t m = 0, n = 0, k = 0;
  bool operator==(const GemmShape&) const = default;
};

struct AttentionShape {
  std::int64_t batch = 0, heads = 0, kv_heads = 0, seq = 0, head_dim = 0;
  bool causal = true;
  // Context parallelism (JobSpec::cp): the op is one rank's share, its queries the
  // seq / context_parallel rows of two of the sequence's 2 x context_parallel chunks
  // (load-balanced: rank r holds chunks r and 2 cp - 1 - r; every rank the same work, the
  // kernels run rank 0's: chunks 0 and 2 cp - 1), attending to all seq keys (the gathered
  // K and V) under the causal mask at their positions in the sequence. 1: all seq rows.
  std::int64_t context_parallel = 1;
  std::int64_t query_rows() const { return seq / context_parallel; }
  // The position in the sequence of query row `row` (< query_rows()).
  std::int64_t query_position(std::int64_t row) const {
    const std::int64_t chunk = seq / (2 * context_parallel);
    return context_parallel == 1 || row < chunk ? row : seq - 2 * chunk + row;
  }
  // The query rows are query_runs() runs of query_rows() / query_runs() rows, each at
  // consecutive positions: 1 run, or 2 chunks under context parallelism.
  std::int64_t query_runs() const { return context_parallel == 1 ? 1 : 2; }
  bool operator==(const AttentionShape&) const = default;
};

// The mesh dimension a compute-path collective (OpKind::kCollective) runs over: the TP
// group (sequence-parallel all-gathers and reduce-scatters, the loss-parallel all-reduce)
// or the CP group (the K/V all-gather of context-parallel attention and the reduce-scatter
// of their gradients).
enum class ParallelDim { kTensor, kContext };
std::string to_string(ParallelDim dim);  // "tp", "cp"

struct Op {
  OpKind kind = OpKind::kGemm;
  std::string name;  // e.g. "layers.3.attention.wq", "layers.3.attention_norm"
  DType dtype = DType::kBF16;
  bool backward = false;     // attention: the backward kernel
  double flops = 0;          // floating-point operations (multiply-add = 2)
  std::int64_t bytes = 0;    // HBM bytes read + written; for kCollective the full buffer
  GemmShape gemm;            // kGemm
  AttentionShape attention;  // kAttention
  CollectiveKind collective = CollectiveKind::kAllGather;  // kCollective
  CommGroup group;                                         // kCollective
  ParallelDim parallel_dim = ParallelDim::kTensor;         // kCollective
  // kMemoryBound: what the kernel does, the cost-profile key together with `bytes`:
  // "rmsnorm_fwd", "rmsnorm_bwd", "rope_fwd", "rope_bwd", "swiglu_fwd", "swiglu_bwd",
  // "residual_add", "embedding_fwd", "embedding_bwd", "cross_entropy_fwd",
  // "cross_entropy_bwd", "adamw", "float8_cast" (docs/workload.md lists their byte counts);
  // under eager execution (JobSpec::execution) "rope_fwd_eager", "rope_bwd_eager",
  // "swiglu_fwd_eager", "swiglu_bwd_eager", "rmsnorm_fwd_unfused", "rmsnorm_bwd_unfused",
  // "float8_cast_eager", "float8_cast_bwd_eager", each several kernels (memory_op_kernels); under
  // context parallelism "cp_merge_fwd", "cp_merge_bwd" (the fp32 merge of the per-chunk attention
  // results). Profiles also hold "copy" entries, the bucket copies (CostModel::copy): there `bytes`
  // is the size copied, each byte read once and written once (twice `bytes` of traffic).
  std::string memory_op;

  // The cost-profile key: same signature, same cost. E.g. "gemm bf16 m=8192 n=4096 k=4096",
  // "attention_fwd bf16 b=1 h=32 kv=8 s=8192 d=128", "memory rmsnorm_fwd bytes=33554432",
  // "collective all_gather bytes=67108864 ranks=8 per_node=8".
  std::string signature() const;
  bool operator==(const Op&) const = default;
};

// How many kernels PyTorch launches for a memory-bound op of this kind: 1, or for the
// unfused eager ops their ATen kernels (rope_*_eager 6: upcast, complex multiply, downcast
// of q and of k; swiglu_fwd_eager 2; swiglu_bwd_eager 3; rmsnorm_fwd_unfused 8;
// rmsnorm_bwd_unfused 15; float8_cast_eager 6; float8_cast_bwd_eager 20; docs/workload.md
// "Eager"). The cost model charges a launch each,
// the executors launch as many.
int memory_op_kernels(const std::string& memory_op);

// The HBM traffic of an RMSNorm over rows x d as the workload counts it (docs/workload.md):
// bytes per element of x, per row (fp32 statistics) and per element of the weight, for
// activations of `activation_bytes` each; fused (compiled, or eager PyTorch's
// _fused_rms_norm) or the unfused composite of eager PyTorch before 2.8.
struct RmsnormTraffic {
  std::int64_t per_element = 0;
  std::int64_t per_row = 0;
  std::int64_t per_weight_element = 0;
};
RmsnormTraffic rmsnorm_traffic(std::int64_t activation_bytes, bool unfused, bool backward);

enum class UnitKind { kEmbedding, kBlock, kOutput };
std::string to_string(UnitKind kind);

// One parameter as FSDP2 holds it. FSDP2 shards dim 0 of the (TP-local) tensor over the
// dp_shard ranks, padding dim 0 up to a multiple of dp_shard: every rank holds
// ceil(shape[0] / dp_shard) rows, so the padding is less than dp_shard rows.
struct Param {
  std::string name;                 // torchtitan name, e.g. "layers.3.attention.wq.weight"
  std::vector<std::int64_t> shape;  // local shape (after TP sharding), torch [out, in]
  std::int64_t numel = 0;           // elements of the local (TP-sharded) tensor
  std::int64_t padded_numel = 0;    // numel with dim 0 rounded up to a multiple of dp_shard
  std::int64_t shard_numel = 0;     // padded_numel / dp_shard
  bool tp_sharded = false;
  DType gather_dtype = DType::kBF16;  // on the all-gather wire: param dtype, fp8 for float8
                                      // linears with float8 all-gather
  DType reduce_dtype = DType::kFP32;  // on the reduce-scatter wire

  // Gathered (unpadded) bytes of the TP-local tensor in gather_dtype.
  std::int64_t unsharded_bytes() const;
  // One rank's shard in gather_dtype: sharded_bytes() * dp_shard >= unsharded_bytes().
  std::int64_t sharded_bytes() const;
  bool operator==(const Param&) const = default;
};

struct Unit {
  int index = 0;
  std::string name;                  // "tok_embeddings", "layers.0", ..., "norm+output"
  std::vector<std::string> modules;  // torchtitan module names: {"norm", "output"}
  UnitKind kind = UnitKind::kBlock;
  std::vector<Param> params;
  std::vector<Op> forward_ops;              // in execution order, TP collectives included
  std::vector<Op> backward_ops;             // gradient computation only (no recompute)
  std::vector<Op> recompute_ops;            // re-run before backward_ops under the job's AC mode
  std::int64_t saved_activation_bytes = 0;  // kept from forward to backward, job's AC mode
  std::int64_t workspace_bytes = 0;         // transient peak inside the unit (logits + loss)
  // Other units whose gathered parameters this unit's compute also reads. Tied embeddings
  // (llama3.2-1b/3b): tok_embeddings.weight lives in unit 0 (as in torchtitan) and the
  // output GEMM of "norm+output" reads it, so that unit lists {0}. Empty otherwise.
  std::vector<int> shared_param_units;
  // Activations the recompute_ops regenerate and hold through the unit's backward (0 when
  // the AC mode recomputes nothing). The simulator allocates them at the recompute's start
  // and frees them at the end of the unit's backward.
  std::int64_t recompute_activation_bytes = 0;

  // Sums over params (elements).
  std::int64_t numel() const;
  std::int64_t padded_numel() const;
  std::int64_t shard_numel() const;
  // The unit's all-gather output (padded, gather dtypes) and one rank's input to it.
  std::int64_t gathered_bytes() const;
  std::int64_t sharded_bytes() const;
  // The unit's reduce-scatter input (padded, reduce dtype).
  std::int64_t gradient_bytes() const;
  bool operator==(const Unit&) const = default;
};

struct Workload {
  ModelSpec model;
  JobSpec job;  // normalized
  std::vector<Unit> units;
  std::vector<Op> optimizer_ops;  // AdamW step on this rank's shards

  // Bytes of one rank's persistent state: fp32 master params, grads, AdamW m and v
  // (16 bytes per shard element).
  std::int64_t persistent_state_bytes() const;
  // Forward+backward FLOPs of one step on this rank, no recompute.
  double model_flops_per_step() const;
  // Tokens this rank processes per step (local_batch * seq_len / cp * microbatches *
  // pipeline_steps). With
  // tp > 1 the ranks of one TP group process the same tokens.
  std::int64_t tokens_per_step() const;
  bool operator==(const Workload&) const = default;
};

struct HardwareSpec;

// The throughput of a step of `step_time_s` (0s when it is not positive), as torchtitan
// accounts it: `tokens_per_step` are one data-parallel rank's, shared by the tp * pp GPUs
// of its model-parallel group; MFU is a GPU's model FLOPs (no recompute) over what the
// dense peak of the compute dtype (fp8 under float8 where the hardware has one) would do.
struct StepThroughput {
  double tokens_per_s_per_gpu = 0;
  double mfu = 0;
};
StepThroughput step_throughput(const JobSpec& job, double tokens_per_step,
                               double model_flops_per_gpu, const HardwareSpec& hardware,
                               double step_time_s);

// The group of a job's TP collectives (tp ranks, adjacent: tp is the innermost mesh
// dimension) and of its CP collectives (cp ranks tp apart: torchtitan's mesh is
// [pp, dp_replicate, dp_shard, cp, tp]). REQUIRES: job normalized.
CommGroup tensor_parallel_group(const JobSpec& job);
CommGroup context_parallel_group(const JobSpec& job);

// REQUIRES: job normalized against model (normalize_job).
Workload build_workload(const ModelSpec& model, const JobSpec& job);

// The attention op of `shape` in `dtype` (the activation dtype), as build_workload makes
// it: model FLOPs 4 * (b * query_rows) * s * h * d forward (no causal discount), twice that
// backward; the bytes of Q, K, V, O (and dO, dQ, dK, dV backward) and the fp32 log-sum-exp.
// `name` is "attention_fwd" or "attention_bwd". What `fsdptune cost --attention` prices.
Op attention_op_of(const AttentionShape& shape, DType dtype, bool backward);

// One microbatch's gradient of `unit` added into the unsharded gradients accumulated over
// microbatches (FSDP2 with gradient sync off: FSDPParam.accumulate_unsharded_grad_if_needed
// adds the param-dtype gradient into one in the reduce dtype; autograd's own += when the
// two are equal): memory-bound, `grad_accumulate`, reading the new gradient (param dtype)
// and reading and writing the accumulated one (reduce dtype), per padded element.
Op gradient_accumulation_op(const Unit& unit, const JobSpec& job);

nlohmann::json workload_to_json(const Workload& workload);  // for `fsdptune workload --json`
// Reads workload_to_json's output back (derived totals are ignored). Throws
// Error(kBadInput) naming `source` and the field.
Workload workload_from_json(const nlohmann::json& json, const std::string& source);
nlohmann::json op_to_json(const Op& op);
// The largest op op_from_json reads, far above any real one and no larger than a workload
// within the model and job limits makes (so that the analytic model's tile and wave counts
// fit in 64 bits): bytes at most kMaxOpCount, FLOPs at most kMaxOpFlops, GEMM dims and
// attention batch x seq at most kMaxJobMicrobatchTokens, attention heads, kv heads and
// head_dim at most kMaxModelWidth, collective groups of at most kMaxJobGpus.
inline constexpr std::int64_t kMaxOpCount = std::int64_t{1} << 50;
inline constexpr double kMaxOpFlops = 1e30;
// Throws Error(kBadInput) naming `where` and the field (missing, wrong type, out of range).
Op op_from_json(const nlohmann::json& json, const std::string& where);

// String forms used in JSON: "gemm", "attention", "memory", "collective"; "embedding",
// "block", "output".
OpKind op_kind_from_string(const std::string& text, const std::string& where);
UnitKind unit_kind_from_string(const std::string& text, const std::string& where);

}  // namespace fsdptune
