// The workload builder: model + job -> FSDP units with their ops, bytes and activations.
// The formulas (shapes, byte counts, saved activations per AC mode) are documented in
// docs/workload.md; each one is also stated next to the code that computes it.
#include "fsdptune/workload.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "fsdptune/error.hpp"
#include "fsdptune/hardware.hpp"
#include "fsdptune/io.hpp"

namespace fsdptune {
namespace {

// Everything the builder needs, in elements and bytes of one rank.
struct Dims {
  std::int64_t batch = 0;      // b: sequences per data-parallel rank
  std::int64_t seq = 0;        // s
  std::int64_t tokens = 0;     // T = b*s: tokens the TP group works on
  std::int64_t sp_tokens = 0;  // T/tp: tokens of the sequence-parallel regions (norms, adds)
  std::int64_t dim = 0;        // d
  std::int64_t heads = 0;      // query heads per TP rank
  std::int64_t kv_heads = 0;   // kv heads per TP rank
  std::int64_t head_dim = 0;
  std::int64_t ffn = 0;    // FFN hidden per TP rank
  std::int64_t vocab = 0;  // vocabulary rows per TP rank
  std::int64_t tp = 1;
  std::int64_t act_bytes = 2;  // activations are in the param (compute) dtype
  DType act_dtype = DType::kBF16;
  DType linear_dtype = DType::kBF16;  // block linears: fp8 with float8
  Execution execution = Execution::kCompiled;
  CommGroup tp_group;
  std::int64_t cp = 1;  // context parallel degree: tokens = batch * seq / cp
  CommGroup cp_group;
};

constexpr std::int64_t kFp32Bytes = 4;
constexpr std::int64_t kTokenIdBytes = 8;  // int64 token ids

Op gemm_op(std::string name, std::int64_t m, std::int64_t n, std::int64_t k, DType dtype,
           const Dims& dims, bool backward) {
  Op op;
  op.kind = OpKind::kGemm;
  op.name = std::move(name);
  op.dtype = dtype;
  op.backward = backward;
  op.gemm = {m, n, k};
  // 2*m*n*k: one multiply and one add per term.
  op.flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  // Read A[m,k] and B[k,n] in the GEMM dtype, write C[m,n] in the activation dtype
  // (float8 GEMMs output bf16).
  op.bytes = (m * k + k * n) * bytes_per_element(dtype) + m * n * dims.act_bytes;
  return op;
}

Op memory_op(std::string name, std::string kernel, std::int64_t bytes, const Dims& dims,
             bool backward) {
  Op op;
  op.kind = OpKind::kMemoryBound;
  op.name = std::move(name);
  op.memory_op = std::move(kernel);
  op.dtype = dims.act_dtype;
  op.backward = backward;
  op.bytes = bytes;
  // Model-FLOPs convention (torchtitan, PaLM appendix B): only matmuls count, so the
  // memory-bound ops carry no FLOPs; the cost model times them by `bytes`.
  op.flops = 0;
  return op;
}

Op attention_op(std::string name, const Dims& dims, bool backward) {
  Op op = attention_op_of(
      {dims.batch, dims.heads, dims.kv_heads, dims.seq, dims.head_dim, true, dims.cp},
      dims.act_dtype, backward);
  op.name = std::move(name);
  return op;
}

Op collective_op(std::string name, CollectiveKind kind, std::int64_t bytes, const Dims& dims,
                 bool backward, ParallelDim parallel_dim = ParallelDim::kTensor) {
  Op op;
  op.kind = OpKind::kCollective;
  op.name = std::move(name);
  op.dtype = dims.act_dtype;
  op.backward = backward;
  op.collective = kind;
  op.bytes = bytes;
  op.parallel_dim = parallel_dim;
  op.group = parallel_dim == ParallelDim::kContext ? dims.cp_group : dims.tp_group;
  return op;
}

// Context-parallel attention (PyTorch's context_parallel as torchtitan uses it: the
// all-gather rotate method, load-balanced causal mask; docs/parallelism.md "Context
// parallelism"). The forward all-gathers K and V (bf16, b*s x 2 kv heads x hd: the whole
// sequence's), runs one SDPA call per CP rank's chunk and merges the partial outputs in
// fp32 by their log-sum-exp (_SDPAMerger). Per later step and element of the rank's
// output it reads and writes, averaged over full steps and half (partial) ones: the
// upcast (2 + 4), out - block_out (12), its scaling (8) and the update (12), and for a
// half step the concatenation of the halves (8 over the whole output): 65/2 bytes; the
// first step's upcast and the result's downcast add 12. The backward gathers K and V
// again, accumulates dQ (fp32: 10 bytes per element per later step) and passes the fp32
// dK and dV chunks around the ring, accumulating each (10 per element) and flattening them
// for the send (8): the pass moves what a reduce-scatter of the fp32 gradients of the
// gathered K and V moves, which is how it is costed.
std::int64_t cp_kv_elements(const Dims& dims) {
  return dims.batch * dims.seq * dims.kv_heads * dims.head_dim;
}

void add_cp_gather(const std::string& name, const Dims& dims, bool backward, std::vector<Op>& out) {
  out.push_back(collective_op(name, CollectiveKind::kAllGather,
                              2 * cp_kv_elements(dims) * dims.act_bytes, dims, backward,
                              ParallelDim::kContext));
}

Op cp_merge_op(const std::string& name, const Dims& dims, bool backward) {
  const std::int64_t q_elements = dims.tokens * dims.heads * dims.head_dim;
  const std::int64_t kv_chunk_elements = dims.tokens * dims.kv_heads * dims.head_dim;
  const std::int64_t later_steps = dims.cp - 1;
  const std::int64_t bytes = backward ? later_steps * (10 * q_elements + 2 * 18 * kv_chunk_elements)
                                      : later_steps * q_elements * 65 / 2 + 12 * q_elements;
  return memory_op(name, backward ? "cp_merge_bwd" : "cp_merge_fwd", bytes, dims, backward);
}

CollectiveKind mirror(CollectiveKind kind) {
  // Sequence parallelism: the backward of an all-gather is a reduce-scatter and back.
  if (kind == CollectiveKind::kAllGather) return CollectiveKind::kReduceScatter;
  if (kind == CollectiveKind::kReduceScatter) return CollectiveKind::kAllGather;
  return kind;
}

// Tensorwise dynamic scaling of a tensor-parallel DTensor takes the amax over the whole
// tensor: one fp32 all-reduce (max) over the TP group before each cast.
Op float8_amax_op(const std::string& name, const Dims& dims, bool backward) {
  Op op = collective_op(name, CollectiveKind::kAllReduce, kFp32Bytes, dims, backward);
  op.dtype = DType::kFP32;
  return op;
}

// How a float8 linear's tensors arrive under TP (torchao's Float8ColwiseParallel,
// Float8RowwiseParallel and PrepareFloat8ModuleInput, as torchtitan applies them with
// float8 and TP): a column-parallel linear's input was cast to fp8 before the
// sequence-parallel all-gather; a row-parallel linear's output gradient was cast to fp8
// before the all-gather that is its reduce-scatter's backward.
struct Float8Arrival {
  bool input_fp8 = false;
  bool output_grad_fp8 = false;
};

// Eager PyTorch's upcast of an activation to fp32 (`x.float()`) or back (`type_as`): read
// a bytes and write 4 per element; no kernel when activations are fp32.
std::int64_t eager_cast_bytes(std::int64_t activation_bytes) {
  return activation_bytes == kFp32Bytes ? 0 : activation_bytes + kFp32Bytes;
}

// torchao's tensorwise dynamic float8 cast (torchtitan's float8), bytes per element of the
// activations. Compiled: one fused kernel, the amax pass and the scaled cast (a + a + 1).
// Eager (no torch.compile; found by QA: priced as compiled, and float8 ranked ahead of
// bf16 without compile, which torchtitan's float8 docs call required): its ATen ops, abs
// (a + a), max (a), the upcast to fp32 (a + 4; none from fp32), the multiply by the scale
// (4 + 4), the saturating clamp (4 + 4) and the cast to fp8 (4 + 1), 6 kernels (the scale's
// scalar ops not counted).
std::int64_t float8_cast_bytes(const Dims& dims) {
  const std::int64_t a = dims.act_bytes;
  if (dims.execution == Execution::kCompiled) return 2 * a + 1;
  return 3 * a + eager_cast_bytes(a) + 21;
}
// The backward's casts per element of dC [m, n] and of the input [m, k] (torchao's
// matmul_with_hp_or_float8_args, the tensorwise path: the forward saves the input in high
// precision). Compiled, AOT autograd's joint graph merges the duplicate work: dC cast once
// (a + a + 1) with its fp8 transposed copy for wgrad (1 + 1), the input re-cast transposed
// with the forward's scale (a + 1). Eager (found by review: modelled as compiled's path
// at first) each of its casts runs whole: dC cast for dgrad and again for wgrad, then made
// contiguous transposed for _scaled_mm (1 + 1); the input cast afresh (its amax again) and
// copied into _scaled_mm's layout (1 + 1). 20 kernels.
struct Float8BackwardBytes {
  std::int64_t per_output_grad = 0;  // per element of dC: its cast(s) and transposed copy
  std::int64_t per_input = 0;        // per element of the input: re-cast and laid out
};
Float8BackwardBytes float8_backward_bytes(const Dims& dims) {
  const std::int64_t cast = float8_cast_bytes(dims);
  if (dims.execution == Execution::kCompiled) return {cast + 2, dims.act_bytes + 1};
  return {2 * cast + 2, cast + 2};
}
std::string float8_cast_kernel(const Dims& dims, bool backward) {
  if (dims.execution == Execution::kCompiled) return "float8_cast";
  return backward ? "float8_cast_bwd_eager" : "float8_cast_eager";
}

// The backward of a GEMM C[m,n] = A[m,k] B[k,n]: dgrad dA = dC B^T (m, k, n) and
// wgrad dB = A^T dC (k, n, m). Returned in the order they run: dgrad, then wgrad.
void add_gemm_backward(const Op& forward, const Dims& dims, std::vector<Op>& out,
                       Float8Arrival arrival = {}) {
  const auto& g = forward.gemm;
  if (forward.dtype == DType::kFP8) {
    // torchao Float8Linear backward (tensorwise dynamic scaling, torchtitan's float8):
    // dC gets an amax pass and a scaled cast (a + a + 1 bytes per element; with TP an
    // amax all-reduce first) unless it arrived in fp8, and an fp8 transposed copy for
    // wgrad (1 + 1); the input is re-cast transposed for wgrad with the forward's scale
    // (a + 1), or only transposed when it was saved in fp8 (1 + 1).
    // Eager, each cast as its ATen ops, some twice (float8_backward_bytes); a dC that
    // arrived in fp8 is only copied transposed (1 + 1). With TP one amax all-reduce is
    // counted, as compiled (eager's second dC cast and the input's fresh amax would each
    // all-reduce theirs: not modelled, a few small collectives per linear).
    const Float8BackwardBytes bytes = float8_backward_bytes(dims);
    if (!arrival.output_grad_fp8 && dims.tp > 1) {
      out.push_back(float8_amax_op(forward.name + ".backward_float8_amax", dims, true));
    }
    out.push_back(memory_op(forward.name + ".backward_float8_cast", float8_cast_kernel(dims, true),
                            g.m * g.n * (arrival.output_grad_fp8 ? 2 : bytes.per_output_grad) +
                                g.m * g.k * (arrival.input_fp8 ? 2 : bytes.per_input),
                            dims, true));
  }
  out.push_back(gemm_op(forward.name + ".dgrad", g.m, g.k, g.n, forward.dtype, dims, true));
  out.push_back(gemm_op(forward.name + ".wgrad", g.k, g.n, g.m, forward.dtype, dims, true));
}

Param make_param(std::string name, std::vector<std::int64_t> shape, bool tp_sharded,
                 DType gather_dtype, const JobSpec& job) {
  Param param;
  param.name = std::move(name);
  param.shape = std::move(shape);
  param.tp_sharded = tp_sharded;
  param.gather_dtype = gather_dtype;
  param.reduce_dtype = job.reduce_dtype;
  std::int64_t row_numel = 1;
  for (std::size_t i = 1; i < param.shape.size(); ++i) row_numel *= param.shape[i];
  param.numel = param.shape[0] * row_numel;
  // FSDP2 Shard(0): each of the dp_shard ranks holds ceil(rows / dp_shard) rows, padded.
  const std::int64_t rows_per_shard = (param.shape[0] + job.dp_shard - 1) / job.dp_shard;
  param.shard_numel = rows_per_shard * row_numel;
  param.padded_numel = param.shard_numel * job.dp_shard;
  return param;
}

// An RMSNorm over `tokens` rows of d, fused or the unfused composite (rmsnorm_traffic).
Op rmsnorm_op(std::string name, std::int64_t tokens, const Dims& dims, bool backward) {
  const bool unfused = dims.execution == Execution::kEagerUnfusedRmsnorm;
  const RmsnormTraffic traffic = rmsnorm_traffic(dims.act_bytes, unfused, backward);
  std::string kernel = backward ? "rmsnorm_bwd" : "rmsnorm_fwd";
  if (unfused) kernel += "_unfused";
  return memory_op(std::move(name), std::move(kernel),
                   tokens * dims.dim * traffic.per_element + tokens * traffic.per_row +
                       dims.dim * traffic.per_weight_element,
                   dims, backward);
}
// The activations an RMSNorm saves for its backward beyond the fused kernel's input and
// fp32 rstd: the unfused composite keeps the fp32 upcast of x (pow's and the scaling's
// input) and the normed x (the weight's), the input itself not: 4 bytes per element more.
std::int64_t rmsnorm_extra_saved_bytes(std::int64_t tokens, const Dims& dims) {
  return dims.execution == Execution::kEagerUnfusedRmsnorm ? tokens * dims.dim * kFp32Bytes : 0;
}

// RoPE on q and k (`elements` = T * (h + kv) * hd). Compiled: one kernel reading and writing
// both. Eager (torchtitan's apply_rotary_emb): per tensor the upcast, a complex fp32 multiply
// by freqs_cis (4 + 4) and the downcast, three kernels; the backward the same three.
Op rope_op(std::string name, std::int64_t elements, const Dims& dims, bool backward) {
  const std::int64_t a = dims.act_bytes;
  if (dims.execution == Execution::kCompiled) {
    return memory_op(std::move(name), backward ? "rope_bwd" : "rope_fwd", 2 * elements * a, dims,
                     backward);
  }
  return memory_op(std::move(name), backward ? "rope_bwd_eager" : "rope_fwd_eager",
                   elements * (2 * eager_cast_bytes(dims.act_bytes) + 8), dims, backward);
}

// SwiGLU silu(w1 x) * w3 x over `elements` = T * ffn. Compiled: forward reads both inputs
// and writes the product; backward reads dY and both inputs, writes both gradients.
// Eager: forward silu (a + a) and the product (2a + a); backward the product's two
// gradients (2a + a each) and silu_backward (2a + a).
Op swiglu_op(std::string name, std::int64_t elements, const Dims& dims, bool backward) {
  const std::int64_t a = dims.act_bytes;
  const bool eager = dims.execution != Execution::kCompiled;
  std::string kernel = backward ? "swiglu_bwd" : "swiglu_fwd";
  if (eager) kernel += "_eager";
  const std::int64_t per_element = backward ? (eager ? 9 : 5) * a : (eager ? 5 : 3) * a;
  return memory_op(std::move(name), std::move(kernel), elements * per_element, dims, backward);
}
// Eager SwiGLU keeps silu's output for the product's backward beside silu's input and
// w3's output (which the compiled kernel keeps too).
std::int64_t swiglu_extra_saved_bytes(std::int64_t elements, const Dims& dims) {
  return dims.execution == Execution::kCompiled ? 0 : elements * dims.act_bytes;
}
// Residual add (or the gradient accumulation at a residual fork): read two, write one.
std::int64_t residual_bytes(const Dims& dims) {
  return 3 * dims.sp_tokens * dims.dim * dims.act_bytes;
}

Unit embedding_unit(const ModelSpec& model, const JobSpec& job, const Dims& dims) {
  Unit unit;
  unit.kind = UnitKind::kEmbedding;
  unit.name = "tok_embeddings";
  unit.modules = {"tok_embeddings"};
  // Vocab-parallel embedding under TP (torchtitan: RowwiseParallel, Shard(1) output).
  unit.params.push_back(make_param("tok_embeddings.weight", {dims.vocab, model.dim}, dims.tp > 1,
                                   job.param_dtype, job));
  const std::int64_t activation_bytes = dims.tokens * dims.dim * dims.act_bytes;
  // Gather: read the token ids, read T rows of d, write T x d.
  unit.forward_ops.push_back(memory_op("tok_embeddings", "embedding_fwd",
                                       dims.tokens * kTokenIdBytes + 2 * activation_bytes, dims,
                                       false));
  if (dims.tp > 1) {
    // Each TP rank holds a vocab slice: partial sums, reduce-scattered to sequence shards.
    unit.forward_ops.push_back(collective_op("tok_embeddings.sp_reduce_scatter",
                                             CollectiveKind::kReduceScatter, activation_bytes, dims,
                                             false));
    unit.backward_ops.push_back(collective_op("tok_embeddings.sp_reduce_scatter.backward",
                                              CollectiveKind::kAllGather, activation_bytes, dims,
                                              true));
  }
  // Scatter-add: zero the (vocab/tp x d) gradient, read ids and dY, read-modify-write rows.
  unit.backward_ops.push_back(memory_op(
      "tok_embeddings.backward", "embedding_bwd",
      dims.vocab * dims.dim * dims.act_bytes + dims.tokens * kTokenIdBytes + 3 * activation_bytes,
      dims, true));
  // The token ids, for the scatter-add. AC never applies to the embedding.
  unit.saved_activation_bytes = dims.tokens * kTokenIdBytes;
  return unit;
}

Unit block_unit(const ModelSpec& model, const JobSpec& job, const Dims& dims, int layer) {
  Unit unit;
  unit.kind = UnitKind::kBlock;
  const std::string p = fmt::format("layers.{}", layer);
  unit.name = p;
  unit.modules = {p};
  const DType linear_gather = job.float8 ? DType::kFP8 : job.param_dtype;
  const std::int64_t q_dim = dims.heads * dims.head_dim;  // per TP rank
  const std::int64_t kv_dim = dims.kv_heads * dims.head_dim;
  // torch Linear weights are [out, in]. Column-parallel (wq, wk, wv, w1, w3) shard `out`,
  // row-parallel (wo, w2) shard `in`; norms are replicated.
  const bool sharded = dims.tp > 1;
  unit.params = {
      make_param(p + ".attention.wq.weight", {q_dim, model.dim}, sharded, linear_gather, job),
      make_param(p + ".attention.wk.weight", {kv_dim, model.dim}, sharded, linear_gather, job),
      make_param(p + ".attention.wv.weight", {kv_dim, model.dim}, sharded, linear_gather, job),
      make_param(p + ".attention.wo.weight", {model.dim, q_dim}, sharded, linear_gather, job),
      make_param(p + ".feed_forward.w1.weight", {dims.ffn, model.dim}, sharded, linear_gather, job),
      make_param(p + ".feed_forward.w2.weight", {model.dim, dims.ffn}, sharded, linear_gather, job),
      make_param(p + ".feed_forward.w3.weight", {dims.ffn, model.dim}, sharded, linear_gather, job),
      make_param(p + ".attention_norm.weight", {model.dim}, false, job.param_dtype, job),
      make_param(p + ".ffn_norm.weight", {model.dim}, false, job.param_dtype, job),
  };

  const std::int64_t T = dims.tokens;
  const std::int64_t d = dims.dim;
  const std::int64_t a = dims.act_bytes;
  const std::int64_t full_activation_bytes = T * d * a;  // T tokens of activations
  const DType lin = dims.linear_dtype;
  // Float8 with TP (torchao's float8 tensor-parallel styles, torchtitan's choice for float8
  // with TP): each half's input is cast to fp8 once, on its sequence shard, and
  // all-gathered in fp8 for the column-parallel linears that share it.
  const bool float8_tp = lin == DType::kFP8 && sharded;
  const std::int64_t Ts = dims.sp_tokens;
  const std::int64_t gathered_input_bytes = T * d * (float8_tp ? 1 : a);
  auto& fwd = unit.forward_ops;
  // A float8 cast of `elements` (tensorwise dynamic scaling: an amax pass and a scaled
  // cast, a + a + 1 bytes per element compiled, float8_cast_bytes), after the amax
  // all-reduce of a TP-sharded tensor.
  auto float8_cast = [&](std::vector<Op>& ops, const std::string& name, std::int64_t elements,
                         bool backward) {
    const std::string suffix = backward ? ".backward_float8" : ".float8";
    if (sharded) ops.push_back(float8_amax_op(name + suffix + "_amax", dims, backward));
    // The forward's kernel kind for a cast in the backward too: one cast, not the backward's
    // three parts.
    ops.push_back(memory_op(name + suffix + "_cast", float8_cast_kernel(dims, false),
                            elements * float8_cast_bytes(dims), dims, backward));
  };
  // A block linear y[T,n] = x[T,k] W^T. Float8 (torchao Float8Linear with tensorwise
  // dynamic scaling, what torchtitan's float8 uses) casts each linear's input first unless
  // it arrives in fp8 (each module casts its own input, so without TP wq, wk, wv cast x
  // three times); the weights were cast before the float8 all-gather.
  auto linear = [&](const std::string& name, std::int64_t n, std::int64_t k, bool input_fp8) {
    if (lin == DType::kFP8 && !input_fp8) float8_cast(fwd, name, T * k, false);
    fwd.push_back(gemm_op(name, T, n, k, lin, dims, false));
  };
  // Under SP a half's norm runs on T/tp tokens, then the activations are all-gathered to
  // T tokens for the column-parallel GEMMs.
  auto sp_all_gather = [&](const std::string& name) {
    if (!sharded) return;
    if (float8_tp) float8_cast(fwd, name, Ts * d, false);
    Op gather = collective_op(name, CollectiveKind::kAllGather, gathered_input_bytes, dims, false);
    if (float8_tp) gather.dtype = DType::kFP8;
    fwd.push_back(std::move(gather));
  };

  // Attention half.
  fwd.push_back(rmsnorm_op(p + ".attention_norm", dims.sp_tokens, dims, false));
  sp_all_gather(p + ".attention.sp_all_gather");
  linear(p + ".attention.wq", q_dim, d, float8_tp);
  linear(p + ".attention.wk", kv_dim, d, float8_tp);
  linear(p + ".attention.wv", kv_dim, d, float8_tp);
  fwd.push_back(rope_op(p + ".attention.rope", T * (q_dim + kv_dim), dims, false));
  if (dims.cp > 1) add_cp_gather(p + ".attention.cp_all_gather", dims, false, fwd);
  fwd.push_back(attention_op(p + ".attention.sdpa", dims, false));
  if (dims.cp > 1) fwd.push_back(cp_merge_op(p + ".attention.cp_merge", dims, false));
  linear(p + ".attention.wo", d, q_dim, false);
  if (sharded) {
    fwd.push_back(collective_op(p + ".attention.sp_reduce_scatter", CollectiveKind::kReduceScatter,
                                full_activation_bytes, dims, false));
  }
  fwd.push_back(
      memory_op(p + ".attention_residual", "residual_add", residual_bytes(dims), dims, false));
  // FFN half: SwiGLU w2(silu(w1 x) * w3 x).
  fwd.push_back(rmsnorm_op(p + ".ffn_norm", dims.sp_tokens, dims, false));
  sp_all_gather(p + ".feed_forward.sp_all_gather");
  linear(p + ".feed_forward.w1", dims.ffn, d, float8_tp);
  linear(p + ".feed_forward.w3", dims.ffn, d, float8_tp);
  fwd.push_back(swiglu_op(p + ".feed_forward.swiglu", T * dims.ffn, dims, false));
  linear(p + ".feed_forward.w2", d, dims.ffn, false);
  if (sharded) {
    fwd.push_back(collective_op(p + ".feed_forward.sp_reduce_scatter",
                                CollectiveKind::kReduceScatter, full_activation_bytes, dims,
                                false));
  }
  fwd.push_back(memory_op(p + ".ffn_residual", "residual_add", residual_bytes(dims), dims, false));

  // Backward: the forward in reverse, each op replaced by its gradient computation.
  auto find = [&](const std::string& name) -> const Op& {
    for (const Op& op : fwd) {
      if (op.name == name) return op;
    }
    FSDPTUNE_CHECK(false, "no forward op " + name);
  };
  auto& bwd = unit.backward_ops;
  // The backward of an SP reduce-scatter gathers the output gradient; with float8 TP it is
  // cast to fp8 on its sequence shard first (the row-parallel style's output hook) and
  // gathered in fp8. The backward of an SP all-gather reduce-scatters the input gradient in
  // the activation dtype.
  auto mirrored = [&](const std::string& name) {
    const Op& op = find(name);
    const CollectiveKind kind = mirror(op.collective);
    const bool fp8_gather = float8_tp && kind == CollectiveKind::kAllGather;
    if (fp8_gather) float8_cast(bwd, name, Ts * d, true);
    Op collective = collective_op(name + ".backward", kind,
                                  fp8_gather ? T * d : full_activation_bytes, dims, true);
    if (fp8_gather) collective.dtype = DType::kFP8;
    bwd.push_back(std::move(collective));
  };
  // Column-parallel linears saved their fp8 input; row-parallel ones get their output
  // gradient in fp8.
  const Float8Arrival column{float8_tp, false};
  const Float8Arrival row{false, float8_tp};
  if (sharded) mirrored(p + ".feed_forward.sp_reduce_scatter");
  add_gemm_backward(find(p + ".feed_forward.w2"), dims, bwd, row);
  bwd.push_back(swiglu_op(p + ".feed_forward.swiglu.backward", T * dims.ffn, dims, true));
  add_gemm_backward(find(p + ".feed_forward.w3"), dims, bwd, column);
  add_gemm_backward(find(p + ".feed_forward.w1"), dims, bwd, column);
  if (sharded) mirrored(p + ".feed_forward.sp_all_gather");
  bwd.push_back(rmsnorm_op(p + ".ffn_norm.backward", dims.sp_tokens, dims, true));
  // The residual fork: the branch gradient is added to the skip gradient.
  bwd.push_back(
      memory_op(p + ".ffn_residual.backward", "residual_add", residual_bytes(dims), dims, true));
  if (sharded) mirrored(p + ".attention.sp_reduce_scatter");
  add_gemm_backward(find(p + ".attention.wo"), dims, bwd, row);
  if (dims.cp > 1) add_cp_gather(p + ".attention.cp_all_gather.backward", dims, true, bwd);
  bwd.push_back(attention_op(p + ".attention.sdpa.backward", dims, true));
  if (dims.cp > 1) {
    bwd.push_back(cp_merge_op(p + ".attention.cp_merge.backward", dims, true));
    Op kv_grad =
        collective_op(p + ".attention.cp_kv_grad_reduce_scatter", CollectiveKind::kReduceScatter,
                      2 * cp_kv_elements(dims) * kFp32Bytes, dims, true, ParallelDim::kContext);
    kv_grad.dtype = DType::kFP32;
    bwd.push_back(std::move(kv_grad));
  }
  bwd.push_back(rope_op(p + ".attention.rope.backward", T * (q_dim + kv_dim), dims, true));
  add_gemm_backward(find(p + ".attention.wv"), dims, bwd, column);
  add_gemm_backward(find(p + ".attention.wk"), dims, bwd, column);
  add_gemm_backward(find(p + ".attention.wq"), dims, bwd, column);
  if (sharded) mirrored(p + ".attention.sp_all_gather");
  bwd.push_back(rmsnorm_op(p + ".attention_norm.backward", dims.sp_tokens, dims, true));
  bwd.push_back(memory_op(p + ".attention_residual.backward", "residual_add", residual_bytes(dims),
                          dims, true));

  // Saved activations (Korthikanti et al. 2022, "Reducing Activation Recomputation in
  // Large Transformer Models", section 4, counted tensor by tensor for this block):
  const std::int64_t block_input = Ts * d * a;
  const std::int64_t lse = T * dims.heads * kFp32Bytes;
  // attention_norm input (T/tp x d) and its fp32 rstd (T/tp); the normed, gathered input of
  // wq/wk/wv (T x d, fp8 with float8 TP); q and k after RoPE and v (T x (h+2kv) hd); the attention
  // output O (T x h hd, also wo's input) and LSE (fp32, T x h); ffn_norm input and rstd; the
  // normed, gathered input of w1/w3 (T x d, fp8 with float8 TP); w1 and w3 outputs and the SwiGLU
  // output (w2's input), 3 x T x ffn. Eager adds what its unfused kernels keep
  // (rmsnorm_extra_saved_bytes, swiglu_extra_saved_bytes).
  const std::int64_t all_saved_bytes =
      2 * (Ts * d * a + Ts * kFp32Bytes) + 2 * gathered_input_bytes +
      T * (2 * q_dim + 2 * kv_dim) * a + lse + 3 * T * dims.ffn * a +
      2 * rmsnorm_extra_saved_bytes(Ts, dims) + swiglu_extra_saved_bytes(T * dims.ffn, dims);
  switch (job.ac) {
    case ActivationCheckpointing::kNone:
      unit.saved_activation_bytes = all_saved_bytes;
      break;
    case ActivationCheckpointing::kSelective:
      // torchtitan's op-level selective AC: keep the outputs of the 1st, 3rd, 5th and 7th
      // matmul of the block (wq, wv, w1, w2 in execution order), of the attention kernel
      // (O and LSE) and of the TP reduce-scatters, plus the block input that the
      // checkpoint holds; everything else is recomputed before the backward.
      unit.saved_activation_bytes = block_input + T * q_dim * a + T * kv_dim * a + T * q_dim * a +
                                    lse + T * dims.ffn * a + T * d * a +
                                    (sharded ? 2 * Ts * d * a : 0);
      for (const Op& op : fwd) {
        // A saved matmul's input cast (float8) and its amax are not replayed either.
        std::string name = op.name;
        for (const std::string_view suffix : {".float8_cast", ".float8_amax"}) {
          if (name.ends_with(suffix)) name.resize(name.size() - suffix.size());
        }
        // The CP all-gather and merge are part of the saved attention (they run inside
        // its SDPA dispatch).
        const bool saved =
            name == p + ".attention.wq" || name == p + ".attention.wv" ||
            name == p + ".feed_forward.w1" || name == p + ".feed_forward.w2" ||
            op.kind == OpKind::kAttention ||
            (op.kind == OpKind::kCollective && op.collective == CollectiveKind::kReduceScatter) ||
            (op.kind == OpKind::kCollective && op.parallel_dim == ParallelDim::kContext) ||
            op.memory_op == "cp_merge_fwd";
        if (saved) continue;
        Op replay = op;
        replay.name += ".recompute";
        unit.recompute_ops.push_back(std::move(replay));
      }
      break;
    case ActivationCheckpointing::kFull:
      // Only the block input survives; the whole forward, TP collectives included, is
      // replayed before the backward.
      unit.saved_activation_bytes = block_input;
      for (const Op& op : fwd) {
        Op replay = op;
        replay.name += ".recompute";
        unit.recompute_ops.push_back(std::move(replay));
      }
      break;
  }
  // The recompute regenerates what this mode did not keep, and the backward holds it until
  // the unit's gradients are done (the simulator frees it at the end of the backward).
  unit.recompute_activation_bytes =
      std::max<std::int64_t>(0, all_saved_bytes - unit.saved_activation_bytes);
  if (dims.cp > 1) {
    // CP attention's transients: the gathered K and V (bf16, the whole sequence), then the
    // larger of the forward's fp32 merge (the running output and a step's upcast output)
    // and the backward's fp32 dQ with the dK and dV of the rank's chunk and the pair in
    // flight around the ring.
    const std::int64_t q_elements = T * dims.heads * dims.head_dim;
    const std::int64_t kv_chunk_elements = T * dims.kv_heads * dims.head_dim;
    unit.workspace_bytes =
        2 * cp_kv_elements(dims) * a +
        std::max(2 * q_elements, q_elements + 4 * kv_chunk_elements) * kFp32Bytes;
  }
  return unit;
}

Unit output_unit(const ModelSpec& model, const JobSpec& job, const Dims& dims, int index) {
  Unit unit;
  unit.kind = UnitKind::kOutput;
  unit.index = index;
  unit.name = "norm+output";
  unit.modules = {"norm", "output"};
  unit.params.push_back(make_param("norm.weight", {model.dim}, false, job.param_dtype, job));
  if (model.tie_embeddings) {
    // The tied weight stays in the embedding unit (as torchtitan wraps it); the output
    // GEMM reads it there, so this unit needs unit 0 gathered too.
    unit.shared_param_units = {0};
  } else {
    // Vocab-parallel output under TP (ColwiseParallel); float8 leaves it in bf16.
    unit.params.push_back(
        make_param("output.weight", {dims.vocab, model.dim}, dims.tp > 1, job.param_dtype, job));
  }
  const std::int64_t T = dims.tokens;
  const std::int64_t d = dims.dim;
  const std::int64_t a = dims.act_bytes;
  const std::int64_t logits = T * dims.vocab;  // elements per TP rank
  const std::int64_t full_activation_bytes = T * d * a;
  auto& fwd = unit.forward_ops;
  fwd.push_back(rmsnorm_op("norm", dims.sp_tokens, dims, false));
  if (dims.tp > 1) {
    fwd.push_back(collective_op("output.sp_all_gather", CollectiveKind::kAllGather,
                                full_activation_bytes, dims, false));
  }
  const Op output_gemm = gemm_op("output", T, dims.vocab, d, dims.act_dtype, dims, false);
  fwd.push_back(output_gemm);
  if (dims.tp > 1) {
    // Loss parallel: the softmax over vocab shards all-reduces the per-token max, the
    // sum of exponentials and the target logit (3 fp32 per token), in fp32 (found by QA:
    // the op kept the activation dtype, and the replay all-reduced twice as many bf16).
    Op loss_reduce = collective_op("loss.parallel_all_reduce", CollectiveKind::kAllReduce,
                                   3 * T * kFp32Bytes, dims, false);
    loss_reduce.dtype = DType::kFP32;
    fwd.push_back(std::move(loss_reduce));
  }
  // torchtitan: cross_entropy(logits.float(), labels): the upcast reads the logits and
  // writes fp32 (a + 4), log_softmax reads and writes fp32 (4 + 4).
  fwd.push_back(memory_op("loss", "cross_entropy_fwd", logits * (a + 12), dims, false));

  auto& bwd = unit.backward_ops;
  // nll backward writes the fp32 gradient (4), log_softmax backward reads it and its saved
  // output and writes fp32 (4 + 4 + 4), the upcast's backward reads fp32, writes a (4 + a).
  bwd.push_back(memory_op("loss.backward", "cross_entropy_bwd", logits * (20 + a), dims, true));
  add_gemm_backward(output_gemm, dims, bwd);
  if (dims.tp > 1) {
    bwd.push_back(collective_op("output.sp_all_gather.backward", CollectiveKind::kReduceScatter,
                                full_activation_bytes, dims, true));
  }
  bwd.push_back(rmsnorm_op("norm.backward", dims.sp_tokens, dims, true));
  // Saved: the norm input and rstd (T/tp), the normed, gathered input of the output GEMM
  // (T x d). AC never applies to this unit (torchtitan checkpoints blocks only).
  unit.saved_activation_bytes = dims.sp_tokens * d * a + dims.sp_tokens * kFp32Bytes +
                                full_activation_bytes +
                                rmsnorm_extra_saved_bytes(dims.sp_tokens, dims);
  // The loss's transient peak, the larger of its forward's and its backward's (PyTorch's
  // kernels, checked in its source; docs/workload.md). torchtitan holds the logits (a bytes)
  // through cross_entropy(logits.float(), labels) and deletes them before the backward.
  // Without TP, ATen's fused log_softmax: forward the logits, their fp32 upcast and the
  // fp32 log-probabilities; backward the saved log-probabilities, the NLL's fp32 gradient
  // and log_softmax's (12). With TP, loss_parallel's DTensor handlers: forward the logits,
  // the upcast, x - max and its exp (then the result); backward the saved
  // log-probabilities, the zeros grad_input, exp(x), their sum and the product of it with
  // the output gradient, at most four fp32 tensors at once, the saved one included (16).
  const std::int64_t upcast = a == kFp32Bytes ? 0 : kFp32Bytes;
  const std::int64_t forward_peak = a + upcast + (dims.tp > 1 ? 2 : 1) * kFp32Bytes;
  const std::int64_t backward_peak = (dims.tp > 1 ? 4 : 3) * kFp32Bytes;
  unit.workspace_bytes = logits * std::max(forward_peak, backward_peak);
  return unit;
}

}  // namespace

std::string to_string(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllGather:
      return "all_gather";
    case CollectiveKind::kReduceScatter:
      return "reduce_scatter";
    case CollectiveKind::kAllReduce:
      return "all_reduce";
    case CollectiveKind::kSendRecv:
      return "send_recv";
  }
  return "all_gather";
}

CollectiveKind collective_from_string(const std::string& text, const std::string& where) {
  for (CollectiveKind kind : {CollectiveKind::kAllGather, CollectiveKind::kReduceScatter,
                              CollectiveKind::kAllReduce, CollectiveKind::kSendRecv}) {
    if (to_string(kind) == text) return kind;
  }
  throw_bad_input(where, fmt::format("unknown collective '{}' (expected all_gather, "
                                     "reduce_scatter, all_reduce or send_recv)",
                                     text));
}

std::string to_string(ParallelDim dim) { return dim == ParallelDim::kContext ? "cp" : "tp"; }

Op attention_op_of(const AttentionShape& shape, DType dtype, bool backward) {
  Op op;
  op.kind = OpKind::kAttention;
  op.name = backward ? "attention_bwd" : "attention_fwd";
  op.dtype = dtype;
  op.backward = backward;
  op.attention = shape;
  // Forward: QK^T and PV, each 2*T*s*h*hd for the rank's T = b*s/cp query tokens against
  // all s keys, no causal discount (torchtitan's convention). Backward: twice the forward
  // (dQ, dK, dV, dP); flash's extra recompute of QK^T is left to the cost model so that
  // the model-FLOPs total stays 12*L*h*hd*s per token.
  const std::int64_t tokens = shape.batch * shape.query_rows();
  const double forward_flops = 4.0 * static_cast<double>(tokens) * static_cast<double>(shape.seq) *
                               static_cast<double>(shape.heads) *
                               static_cast<double>(shape.head_dim);
  op.flops = backward ? 2.0 * forward_flops : forward_flops;
  const std::int64_t act_bytes = bytes_per_element(dtype);
  const std::int64_t q_elements = tokens * shape.heads * shape.head_dim;
  // The keys and values read: all b*s of them (gathered under CP).
  const std::int64_t kv_elements = shape.batch * shape.seq * shape.kv_heads * shape.head_dim;
  const std::int64_t lse_bytes = tokens * shape.heads * kFp32Bytes;
  if (!backward) {
    // Read Q, K, V; write O and the fp32 log-sum-exp.
    op.bytes = (2 * q_elements + 2 * kv_elements) * act_bytes + lse_bytes;
  } else {
    // Read Q, K, V, O, dO and LSE; write dQ, dK, dV.
    op.bytes = (4 * q_elements + 4 * kv_elements) * act_bytes + lse_bytes;
  }
  return op;
}

std::string to_string(OpKind kind) {
  switch (kind) {
    case OpKind::kGemm:
      return "gemm";
    case OpKind::kAttention:
      return "attention";
    case OpKind::kMemoryBound:
      return "memory";
    case OpKind::kCollective:
      return "collective";
  }
  return "gemm";
}

OpKind op_kind_from_string(const std::string& text, const std::string& where) {
  for (OpKind kind :
       {OpKind::kGemm, OpKind::kAttention, OpKind::kMemoryBound, OpKind::kCollective}) {
    if (to_string(kind) == text) return kind;
  }
  throw_bad_input(where, fmt::format("unknown op kind '{}' (expected gemm, attention, memory "
                                     "or collective)",
                                     text));
}

std::string to_string(UnitKind kind) {
  switch (kind) {
    case UnitKind::kEmbedding:
      return "embedding";
    case UnitKind::kBlock:
      return "block";
    case UnitKind::kOutput:
      return "output";
  }
  return "block";
}

UnitKind unit_kind_from_string(const std::string& text, const std::string& where) {
  for (UnitKind kind : {UnitKind::kEmbedding, UnitKind::kBlock, UnitKind::kOutput}) {
    if (to_string(kind) == text) return kind;
  }
  throw_bad_input(
      where, fmt::format("unknown unit kind '{}' (expected embedding, block or output)", text));
}

std::string Op::signature() const {
  switch (kind) {
    case OpKind::kGemm:
      return fmt::format("gemm {} m={} n={} k={}", to_string(dtype), gemm.m, gemm.n, gemm.k);
    case OpKind::kAttention:
      return fmt::format("attention_{} {} b={} h={} kv={} s={} d={}{}{}", backward ? "bwd" : "fwd",
                         to_string(dtype), attention.batch, attention.heads, attention.kv_heads,
                         attention.seq, attention.head_dim, attention.causal ? "" : " noncausal",
                         attention.context_parallel == 1
                             ? std::string()
                             : fmt::format(" cp={}", attention.context_parallel));
    case OpKind::kMemoryBound:
      return fmt::format("memory {} bytes={}", memory_op, bytes);
    case OpKind::kCollective:
      return fmt::format("collective {} bytes={} ranks={} per_node={}", to_string(collective),
                         bytes, group.ranks, group.ranks_per_node);
  }
  return name;
}

std::int64_t Param::unsharded_bytes() const { return numel * bytes_per_element(gather_dtype); }
std::int64_t Param::sharded_bytes() const { return shard_numel * bytes_per_element(gather_dtype); }

std::int64_t Unit::numel() const {
  std::int64_t total = 0;
  for (const Param& p : params) total += p.numel;
  return total;
}
std::int64_t Unit::padded_numel() const {
  std::int64_t total = 0;
  for (const Param& p : params) total += p.padded_numel;
  return total;
}
std::int64_t Unit::shard_numel() const {
  std::int64_t total = 0;
  for (const Param& p : params) total += p.shard_numel;
  return total;
}
std::int64_t Unit::gathered_bytes() const {
  std::int64_t total = 0;
  for (const Param& p : params) total += p.padded_numel * bytes_per_element(p.gather_dtype);
  return total;
}
std::int64_t Unit::sharded_bytes() const {
  std::int64_t total = 0;
  for (const Param& p : params) total += p.sharded_bytes();
  return total;
}
std::int64_t Unit::gradient_bytes() const {
  std::int64_t total = 0;
  for (const Param& p : params) total += p.padded_numel * bytes_per_element(p.reduce_dtype);
  return total;
}

Op gradient_accumulation_op(const Unit& unit, const JobSpec& job) {
  std::int64_t bytes = 0;
  for (const Param& p : unit.params) {
    bytes += p.padded_numel *
             (bytes_per_element(job.param_dtype) + 2 * bytes_per_element(p.reduce_dtype));
  }
  Op op;
  op.kind = OpKind::kMemoryBound;
  op.name = unit.name + ".grad_accumulate";
  op.memory_op = "grad_accumulate";
  op.dtype = job.reduce_dtype;
  op.backward = true;
  op.bytes = bytes;
  return op;
}

std::int64_t Workload::persistent_state_bytes() const {
  // fp32 master parameter, fp32 gradient, AdamW exp_avg and exp_avg_sq: 4 x 4 bytes.
  std::int64_t shard_elements = 0;
  for (const Unit& unit : units) shard_elements += unit.shard_numel();
  return 16 * shard_elements;
}

double Workload::model_flops_per_step() const {
  double total = 0;
  for (const Unit& unit : units) {
    for (const Op& op : unit.forward_ops) total += op.flops;
    for (const Op& op : unit.backward_ops) total += op.flops;
  }
  return total * static_cast<double>(job.microbatches * job.pipeline_steps);
}

StepThroughput step_throughput(const JobSpec& job, double tokens_per_step,
                               double model_flops_per_gpu, const HardwareSpec& hardware,
                               double step_time_s) {
  StepThroughput throughput;
  if (!(step_time_s > 0)) return throughput;
  throughput.tokens_per_s_per_gpu =
      tokens_per_step / static_cast<double>(job.tp * job.pp) / step_time_s;
  const double peak = job.float8 && hardware.peak_fp8_flops_per_s > 0
                          ? hardware.peak_fp8_flops_per_s
                          : hardware.peak_bf16_flops_per_s;
  if (peak > 0) throughput.mfu = model_flops_per_gpu / (step_time_s * peak);
  return throughput;
}

std::int64_t Workload::tokens_per_step() const {
  return job.local_batch * job.seq_len / job.cp * job.microbatches * job.pipeline_steps;
}

RmsnormTraffic rmsnorm_traffic(std::int64_t activation_bytes, bool unfused, bool backward) {
  const std::int64_t a = activation_bytes;
  if (!unfused) {
    // Forward reads x and the weight, writes y; backward reads x, dy and the weight, writes
    // dx and the weight gradient.
    return backward ? RmsnormTraffic{3 * a, 0, 2 * a} : RmsnormTraffic{2 * a, 0, a};
  }
  // The composite `x * rsqrt(x.float().pow(2).mean(-1) + eps)` then `.type_as(x) * w`, and
  // its autograd, per element of x: forward the upcast c, pow (4 + 4), mean (4), the rsqrt
  // scaling (4 + 4), the downcast c and the weight (a + a); backward the weight's two
  // products and its row sum (a + a, 2a + a, a), the downcast's and upcast's backward (c
  // each), the scaling's two products (8, 8 + 4) and row sum (4), mean's expansion (4),
  // pow's (4 + 4, 8 + 4) and the sum of x's two gradients (8 + 4); per row (fp32) 24 bytes
  // forward, 36 backward. docs/workload.md "Eager" lists them kernel by kernel.
  const std::int64_t c = eager_cast_bytes(a);
  return backward ? RmsnormTraffic{6 * a + 2 * c + 60, 36, 2 * a}
                  : RmsnormTraffic{2 * c + 20 + 2 * a, 24, a};
}

int memory_op_kernels(const std::string& memory_op) {
  static const std::pair<const char*, int> kKernels[] = {
      {"rope_fwd_eager", 6},    {"rope_bwd_eager", 6},        {"swiglu_fwd_eager", 2},
      {"swiglu_bwd_eager", 3},  {"rmsnorm_fwd_unfused", 8},   {"rmsnorm_bwd_unfused", 15},
      {"float8_cast_eager", 6}, {"float8_cast_bwd_eager", 20}};
  for (const auto& [name, kernels] : kKernels) {
    if (memory_op == name) return kernels;
  }
  return 1;
}

CommGroup tensor_parallel_group(const JobSpec& job) {
  return CommGroup{job.tp, std::min(job.tp, job.gpus_per_node)};
}

CommGroup context_parallel_group(const JobSpec& job) {
  // The cp ranks are tp apart: gpus_per_node / tp of them share a node.
  return CommGroup{job.cp, std::clamp<std::int64_t>(job.gpus_per_node / job.tp, 1, job.cp)};
}

Workload build_workload(const ModelSpec& model, const JobSpec& job) {
  FSDPTUNE_CHECK(job.dp_shard > 0, "build_workload needs a normalized job (normalize_job)");
  FSDPTUNE_CHECK(model.n_heads % job.tp == 0 && model.n_kv_heads % job.tp == 0 &&
                     model.ffn_dim % job.tp == 0 && model.vocab_size % job.tp == 0 &&
                     job.seq_len % job.tp == 0 && job.cp >= 1 && job.seq_len % job.cp == 0,
                 "build_workload needs a job normalized against this model");
  Dims dims;
  dims.batch = job.local_batch;
  dims.seq = job.seq_len;
  dims.cp = job.cp;
  dims.tokens = job.local_batch * job.seq_len / job.cp;
  dims.tp = job.tp;
  dims.sp_tokens = dims.tokens / job.tp;
  dims.dim = model.dim;
  dims.heads = model.n_heads / job.tp;
  dims.kv_heads = model.n_kv_heads / job.tp;
  dims.head_dim = model.head_dim;
  dims.ffn = model.ffn_dim / job.tp;
  dims.vocab = model.vocab_size / job.tp;
  dims.act_dtype = job.param_dtype;
  dims.act_bytes = bytes_per_element(job.param_dtype);
  dims.linear_dtype = job.float8 ? DType::kFP8 : job.param_dtype;
  dims.execution = job.execution;
  dims.tp_group = tensor_parallel_group(job);
  dims.cp_group = context_parallel_group(job);

  Workload workload;
  workload.model = model;
  workload.job = job;
  workload.units.push_back(embedding_unit(model, job, dims));
  for (int layer = 0; layer < model.n_layers; ++layer) {
    workload.units.push_back(block_unit(model, job, dims, layer));
  }
  workload.units.push_back(output_unit(model, job, dims, static_cast<int>(model.n_layers) + 1));
  for (std::size_t i = 0; i < workload.units.size(); ++i) {
    workload.units[i].index = static_cast<int>(i);
  }

  // AdamW on this rank's shards (fp32): read param, grad, exp_avg, exp_avg_sq; write param,
  // exp_avg, exp_avg_sq: 7 x 4 bytes per element.
  std::int64_t shard_elements = 0;
  for (const Unit& unit : workload.units) shard_elements += unit.shard_numel();
  Op adamw = memory_op("optimizer.adamw", "adamw", 28 * shard_elements, dims, false);
  adamw.dtype = DType::kFP32;
  workload.optimizer_ops.push_back(std::move(adamw));
  return workload;
}

nlohmann::json op_to_json(const Op& op) {
  nlohmann::json json{
      {"kind", to_string(op.kind)}, {"name", op.name},   {"dtype", to_string(op.dtype)},
      {"backward", op.backward},    {"flops", op.flops}, {"bytes", op.bytes},
      {"signature", op.signature()}};
  switch (op.kind) {
    case OpKind::kGemm:
      json["gemm"] = {{"m", op.gemm.m}, {"n", op.gemm.n}, {"k", op.gemm.k}};
      break;
    case OpKind::kAttention:
      json["attention"] = {{"batch", op.attention.batch},       {"heads", op.attention.heads},
                           {"kv_heads", op.attention.kv_heads}, {"seq", op.attention.seq},
                           {"head_dim", op.attention.head_dim}, {"causal", op.attention.causal}};
      // Only under CP: ops written before the field keep their text.
      if (op.attention.context_parallel != 1) {
        json["attention"]["context_parallel"] = op.attention.context_parallel;
      }
      break;
    case OpKind::kMemoryBound:
      json["memory_op"] = op.memory_op;
      break;
    case OpKind::kCollective:
      json["collective"] = to_string(op.collective);
      json["group"] = {{"ranks", op.group.ranks}, {"ranks_per_node", op.group.ranks_per_node}};
      if (op.parallel_dim != ParallelDim::kTensor)
        json["parallel_dim"] = to_string(op.parallel_dim);
      break;
  }
  return json;
}

Op op_from_json(const nlohmann::json& json, const std::string& where) {
  if (!json.is_object()) throw_bad_input(where, "expected an op object");
  auto field = [&](const char* name) -> const nlohmann::json& {
    const auto it = json.find(name);
    if (it == json.end()) throw_bad_input(fmt::format("{}: field '{}'", where, name), "missing");
    return *it;
  };
  // Sizes are bounded as the workload's are (workload.hpp), far above any real op, so that
  // the costs computed from them stay finite and their products within 64 bits.
  auto get_int = [&](const nlohmann::json& object, const char* name, const std::string& context,
                     std::int64_t low = 0, std::int64_t high = kMaxOpCount) -> std::int64_t {
    const auto it = object.find(name);
    if (it == object.end() || !it->is_number_integer()) {
      throw_bad_input(fmt::format("{}: field '{}.{}'", where, context, name),
                      "missing or not an integer");
    }
    const std::int64_t value =
        json_int64(*it, fmt::format("{}: field '{}.{}'", where, context, name));
    if (value < low || value > high) {
      throw_bad_input(fmt::format("{}: field '{}.{}'", where, context, name),
                      fmt::format("is {}, expected {} to {}", value, low, high));
    }
    return value;
  };
  auto in_range = [&](const char* name, double value, double high) {
    if (!(value >= 0 && value <= high)) {
      throw_bad_input(fmt::format("{}: field '{}'", where, name),
                      fmt::format("is {}, expected 0 to {}", value, high));
    }
  };
  // A misspelt or foreign field would be dropped on writing (found by QA: a profile's op
  // with "zz_unknown" read and merged without it); `signature` is derived and ignored.
  const auto refuse_unknown = [&](const nlohmann::json& object, const std::string& context,
                                  const std::vector<std::string>& known) {
    if (!object.is_object()) {
      throw_bad_input(fmt::format("{}: field '{}'", where, context), "expected an object");
    }
    if (const auto key = unknown_field(object, known)) {
      throw_bad_input(
          fmt::format("{}: field '{}{}'", where, context.empty() ? "" : context + ".", *key),
          "unknown field", "docs/workload.md lists an op's fields");
    }
  };
  try {
    Op op;
    op.kind = op_kind_from_string(field("kind").get<std::string>(), where + ": field 'kind'");
    std::vector<std::string> known = {"kind",  "name",  "dtype",    "backward",
                                      "flops", "bytes", "signature"};
    switch (op.kind) {
      case OpKind::kGemm:
        known.push_back("gemm");
        refuse_unknown(field("gemm"), "gemm", {"m", "n", "k"});
        break;
      case OpKind::kAttention:
        known.push_back("attention");
        refuse_unknown(
            field("attention"), "attention",
            {"batch", "heads", "kv_heads", "seq", "head_dim", "causal", "context_parallel"});
        break;
      case OpKind::kMemoryBound:
        known.push_back("memory_op");
        break;
      case OpKind::kCollective:
        known.insert(known.end(), {"collective", "group", "parallel_dim"});
        refuse_unknown(field("group"), "group", {"ranks", "ranks_per_node"});
        break;
    }
    refuse_unknown(json, "", known);
    op.name = field("name").get<std::string>();
    op.dtype = dtype_from_string(field("dtype").get<std::string>(), where + ": field 'dtype'");
    op.backward = field("backward").get<bool>();
    op.flops = field("flops").get<double>();
    in_range("flops", op.flops, kMaxOpFlops);
    // An integer: nlohmann would cast a float such as 1.8e28 to int64 (undefined behaviour).
    if (!field("bytes").is_number_integer()) {
      throw_bad_input(fmt::format("{}: field 'bytes'", where), "expected an integer");
    }
    op.bytes = json_int64(field("bytes"), fmt::format("{}: field 'bytes'", where));
    in_range("bytes", static_cast<double>(op.bytes), static_cast<double>(kMaxOpCount));
    switch (op.kind) {
      case OpKind::kGemm: {
        const auto& g = field("gemm");
        op.gemm = {get_int(g, "m", "gemm", 1, kMaxJobMicrobatchTokens),
                   get_int(g, "n", "gemm", 1, kMaxJobMicrobatchTokens),
                   get_int(g, "k", "gemm", 1, kMaxJobMicrobatchTokens)};
        break;
      }
      case OpKind::kAttention: {
        const auto& s = field("attention");
        op.attention.batch = get_int(s, "batch", "attention", 1, kMaxJobMicrobatchTokens);
        op.attention.heads = get_int(s, "heads", "attention", 1, kMaxModelWidth);
        op.attention.kv_heads = get_int(s, "kv_heads", "attention", 1, kMaxModelWidth);
        op.attention.seq = get_int(s, "seq", "attention", 1, kMaxJobMicrobatchTokens);
        op.attention.head_dim = get_int(s, "head_dim", "attention", 1, kMaxModelWidth);
        if (op.attention.batch * op.attention.seq > kMaxJobMicrobatchTokens) {
          throw_bad_input(
              fmt::format("{}: field 'attention'", where),
              fmt::format("batch {} x seq {} is more than a microbatch's {} tokens",
                          op.attention.batch, op.attention.seq, kMaxJobMicrobatchTokens));
        }
        op.attention.causal = s.value("causal", true);
        if (s.contains("context_parallel")) {
          op.attention.context_parallel =
              get_int(s, "context_parallel", "attention", 1, kMaxJobGpus);
          // The kernels split the queries into 2 x context_parallel chunks, load-balancing
          // a causal mask.
          const std::string at = fmt::format("{}: field 'attention.context_parallel'", where);
          if (op.attention.seq % (2 * op.attention.context_parallel) != 0) {
            throw_bad_input(at, fmt::format("seq {} does not split into 2 x {} chunks",
                                            op.attention.seq, op.attention.context_parallel));
          }
          if (!op.attention.causal && op.attention.context_parallel != 1) {
            throw_bad_input(at, "context parallelism load-balances a causal attention only");
          }
        }
        break;
      }
      case OpKind::kMemoryBound:
        op.memory_op = field("memory_op").get<std::string>();
        break;
      case OpKind::kCollective: {
        op.collective = collective_from_string(field("collective").get<std::string>(),
                                               where + ": field 'collective'");
        const auto& g = field("group");
        op.group = {get_int(g, "ranks", "group", 1, kMaxJobGpus),
                    get_int(g, "ranks_per_node", "group", 1, kMaxJobGpus)};
        if (const auto dim = json.find("parallel_dim"); dim != json.end()) {
          const std::string text = dim->is_string() ? dim->get<std::string>() : dim->dump();
          if (text == "cp") {
            op.parallel_dim = ParallelDim::kContext;
          } else if (text != "tp") {
            throw_bad_input(
                fmt::format("{}: field 'parallel_dim'", where),
                fmt::format("unknown mesh dimension {} (expected tp or cp)", dim->dump()));
          }
        }
        break;
      }
    }
    // The FLOPs follow from the shape (model-FLOPs convention: matmuls only); a file whose
    // `flops` says otherwise was edited or is not fsdptune's (found probing: a GEMM of
    // 8192 x 14336 x 4096 with "flops": 1 read back, and `profile compare` printed its
    // measured rate as 0.0 TFLOP/s).
    double expected_flops = 0;
    if (op.kind == OpKind::kGemm) {
      expected_flops = 2.0 * static_cast<double>(op.gemm.m) * static_cast<double>(op.gemm.n) *
                       static_cast<double>(op.gemm.k);
    } else if (op.kind == OpKind::kAttention) {
      expected_flops = attention_op_of(op.attention, op.dtype, op.backward).flops;
    }
    if (std::abs(op.flops - expected_flops) > 1e-9 * expected_flops) {
      throw_bad_input(fmt::format("{}: field 'flops'", where),
                      fmt::format("is {}, but its {} makes {}", op.flops,
                                  op.kind == OpKind::kGemm        ? "GEMM shape"
                                  : op.kind == OpKind::kAttention ? "attention shape"
                                                                  : "kind (no matmul)",
                                  expected_flops));
    }
    return op;
  } catch (const nlohmann::json::type_error& e) {
    throw_bad_input(where, fmt::format("wrong field type ({})", e.what()));
  }
}

nlohmann::json workload_to_json(const Workload& workload) {
  nlohmann::json units = nlohmann::json::array();
  for (const Unit& unit : workload.units) {
    nlohmann::json params = nlohmann::json::array();
    for (const Param& p : unit.params) {
      params.push_back({{"name", p.name},
                        {"shape", p.shape},
                        {"numel", p.numel},
                        {"padded_numel", p.padded_numel},
                        {"shard_numel", p.shard_numel},
                        {"tp_sharded", p.tp_sharded},
                        {"gather_dtype", to_string(p.gather_dtype)},
                        {"reduce_dtype", to_string(p.reduce_dtype)},
                        {"unsharded_bytes", p.unsharded_bytes()},
                        {"sharded_bytes", p.sharded_bytes()}});
    }
    auto ops = [](const std::vector<Op>& list) {
      nlohmann::json out = nlohmann::json::array();
      for (const Op& op : list) out.push_back(op_to_json(op));
      return out;
    };
    double forward_flops = 0;
    double backward_flops = 0;
    for (const Op& op : unit.forward_ops) forward_flops += op.flops;
    for (const Op& op : unit.backward_ops) backward_flops += op.flops;
    units.push_back({{"index", unit.index},
                     {"name", unit.name},
                     {"kind", to_string(unit.kind)},
                     {"modules", unit.modules},
                     {"params", std::move(params)},
                     {"numel", unit.numel()},
                     {"gathered_bytes", unit.gathered_bytes()},
                     {"sharded_bytes", unit.sharded_bytes()},
                     {"gradient_bytes", unit.gradient_bytes()},
                     {"forward_flops", forward_flops},
                     {"backward_flops", backward_flops},
                     {"saved_activation_bytes", unit.saved_activation_bytes},
                     {"workspace_bytes", unit.workspace_bytes},
                     {"recompute_activation_bytes", unit.recompute_activation_bytes},
                     {"shared_param_units", unit.shared_param_units},
                     {"forward_ops", ops(unit.forward_ops)},
                     {"backward_ops", ops(unit.backward_ops)},
                     {"recompute_ops", ops(unit.recompute_ops)}});
  }
  nlohmann::json optimizer = nlohmann::json::array();
  for (const Op& op : workload.optimizer_ops) optimizer.push_back(op_to_json(op));
  return nlohmann::json{{"format", "fsdptune-workload"},
                        {"version", 1},
                        {"model", model_to_json(workload.model)},
                        {"job", job_to_json(workload.job)},
                        {"units", std::move(units)},
                        {"optimizer_ops", std::move(optimizer)},
                        {"persistent_state_bytes", workload.persistent_state_bytes()},
                        {"model_flops_per_step", workload.model_flops_per_step()},
                        {"tokens_per_step", workload.tokens_per_step()}};
}

Workload workload_from_json(const nlohmann::json& json, const std::string& source) {
  auto field = [&](const nlohmann::json& object, const char* name,
                   const std::string& where) -> const nlohmann::json& {
    const auto it = object.find(name);
    if (it == object.end()) throw_bad_input(fmt::format("{}: field '{}'", where, name), "missing");
    return *it;
  };
  if (!json.is_object()) throw_bad_input(source, "expected a JSON object");
  if (json.value("format", "") != "fsdptune-workload") {
    throw_bad_input(source + ": field 'format'", "expected \"fsdptune-workload\"");
  }
  if (json.value("version", 0) != 1) {
    throw_bad_input(source + ": field 'version'", "unsupported version (this fsdptune reads 1)");
  }
  try {
    Workload workload;
    workload.model = model_from_json(field(json, "model", source), source + ": model");
    workload.job = job_from_json(field(json, "job", source), source + ": job");
    auto ops = [&](const nlohmann::json& list, const std::string& where) {
      std::vector<Op> out;
      for (std::size_t i = 0; i < list.size(); ++i) {
        out.push_back(op_from_json(list.at(i), fmt::format("{}[{}]", where, i)));
      }
      return out;
    };
    const auto& units = field(json, "units", source);
    for (std::size_t u = 0; u < units.size(); ++u) {
      const auto& j = units.at(u);
      const std::string where = fmt::format("{}: units[{}]", source, u);
      Unit unit;
      unit.index = field(j, "index", where).get<int>();
      unit.name = field(j, "name", where).get<std::string>();
      unit.kind = unit_kind_from_string(field(j, "kind", where).get<std::string>(), where);
      unit.modules = field(j, "modules", where).get<std::vector<std::string>>();
      for (const auto& p : field(j, "params", where)) {
        Param param;
        param.name = field(p, "name", where).get<std::string>();
        param.shape = field(p, "shape", where).get<std::vector<std::int64_t>>();
        param.numel = field(p, "numel", where).get<std::int64_t>();
        param.padded_numel = field(p, "padded_numel", where).get<std::int64_t>();
        param.shard_numel = field(p, "shard_numel", where).get<std::int64_t>();
        param.tp_sharded = field(p, "tp_sharded", where).get<bool>();
        param.gather_dtype =
            dtype_from_string(field(p, "gather_dtype", where).get<std::string>(), where);
        param.reduce_dtype =
            dtype_from_string(field(p, "reduce_dtype", where).get<std::string>(), where);
        unit.params.push_back(std::move(param));
      }
      unit.forward_ops = ops(field(j, "forward_ops", where), where + ".forward_ops");
      unit.backward_ops = ops(field(j, "backward_ops", where), where + ".backward_ops");
      unit.recompute_ops = ops(field(j, "recompute_ops", where), where + ".recompute_ops");
      unit.saved_activation_bytes = field(j, "saved_activation_bytes", where).get<std::int64_t>();
      unit.workspace_bytes = field(j, "workspace_bytes", where).get<std::int64_t>();
      unit.recompute_activation_bytes =
          field(j, "recompute_activation_bytes", where).get<std::int64_t>();
      unit.shared_param_units = field(j, "shared_param_units", where).get<std::vector<int>>();
      workload.units.push_back(std::move(unit));
    }
    workload.optimizer_ops = ops(field(json, "optimizer_ops", source), source + ": optimizer_ops");
    return workload;
  } catch (const nlohmann::json::exception& e) {
    throw_bad_input(source, fmt::format("wrong field type ({})", e.what()));
  }
}

}  // namespace fsdptune
