// Op kernels: run one Op of a Workload for real on a device, with the work its recorded
// shape implies, so its time can be measured. Used by the executor (compute tasks) and
// by the profiler (timing ops for a cost profile).
//
// What runs, per OpKind:
//   kGemm        C[m,n] = A[m,k] * B[k,n]. cpu: Eigen, fp32. cuda: cuBLAS, the op's dtype
//                (bf16/fp16 inputs, fp32 accumulate; fp32 as is).
//   kAttention   causal attention over [batch, heads, seq, head_dim] with GQA (kv_heads),
//                computed in query blocks so masked-out key blocks are skipped: the work is
//                the causal half plus one diagonal block per row of blocks. The backward
//                recomputes P and runs four more matrix products (dV, dP, dQ, dK): 2.5x
//                the forward's (DESIGN.md). cpu: Eigen; cuda: cuDNN's fused attention
//                (flash attention, fsdptune/cudnn_sdpa.hpp) where cuDNN 9 is there and has
//                a plan for the op, else strided-batched cuBLAS GEMMs and a softmax kernel
//                (KernelOptions::attention).
//   kMemoryBound reads op.bytes / 2 and writes op.bytes / 2 (out = a * in + b), in passes
//                over bounded buffers (cpu 256 MiB, cuda 1 GiB per operand). memory_op
//                "copy" (a bucket copy of a profile) copies op.bytes instead: cpu memcpy,
//                cuda a copy kernel.
//   kCollective  not a kernel: throws Error(kBadInput) (TP collectives need a communicator).
// Operands are filled once with deterministic small values; their contents carry no
// meaning beyond keeping the arithmetic finite.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fsdptune/workload.hpp"

namespace fsdptune {

// Which attention the cuda kernels run (--attention). kAuto: cuDNN's fused attention for
// the ops it has a plan for, the cuBLAS attention for the others; kCudnn: cuDNN's, and an
// error for an op it cannot run; kCublas: the cuBLAS attention. The cpu kernels have one
// attention (Eigen) and take kAuto only.
enum class AttentionKernel { kAuto, kCudnn, kCublas };
std::string to_string(AttentionKernel kernel);  // "auto", "cudnn", "cublas"
// The inverse; throws Error(kBadInput) naming `where` (the flag) for any other text.
AttentionKernel attention_kernel_from_string(const std::string& text, const std::string& where);

struct KernelOptions {
  int device = 0;          // cuda: device ordinal
  void* stream = nullptr;  // cuda: the cudaStream_t to enqueue on; nullptr = own stream
  AttentionKernel attention = AttentionKernel::kAuto;
};

class OpKernels {
 public:
  virtual ~OpKernels() = default;
  // "cpu" or "cuda:0 NVIDIA H200".
  virtual std::string device() const = 0;
  // Runs `op` once. cpu: synchronously on the calling thread. cuda: enqueued on the
  // stream (asynchronous). Throws Error(kBadInput) naming the op when it cannot run it.
  // Not thread-safe: one OpKernels per thread / stream.
  virtual void run(const Op& op) = 0;
  // Waits until everything run so far has finished.
  virtual void synchronize() = 0;
  // Runs `op` `warmup` times untimed, then `repetitions` times, each timed (cpu: steady
  // clock; cuda: CUDA events around the kernels). Seconds per run.
  virtual std::vector<double> time(const Op& op, int warmup, int repetitions) = 0;
  // Device memory held for operands and scratch: grown to the largest op run so far.
  virtual std::int64_t workspace_bytes() const = 0;
  // The attention implementations the attention ops run so far used, for the record
  // (measured.json and profile environments): e.g. "cuDNN 9.19.0 fused SDPA" or
  // "cuBLAS query blocks (cuDNN: <why not>)"; "" before the first attention op.
  virtual std::string attention() const = 0;
};

// Throws Error(kBadInput) naming --attention when options.attention is not kAuto.
std::unique_ptr<OpKernels> make_cpu_kernels(const KernelOptions& options = {});
// Throws Error(kRuntime) when built without CUDA or when `options.device` does not exist.
std::unique_ptr<OpKernels> make_cuda_kernels(const KernelOptions& options = {});
// CUDA devices visible to this process; 0 when built without CUDA or without a driver.
int cuda_device_count();

// The cuda kernels' attention on given inputs, so tests where a GPU is present can check
// its results: q and d_o [batch, heads, query_rows(), head_dim], k and v [batch, kv_heads,
// seq, head_dim], fp32, rounded to bf16 on the way in. Runs the forward op, then the
// backward op, with `attention`'s implementation (kAuto: the one run_attention picks);
// returns o, dq, dk, dv in fp32. Throws Error(kRuntime) without a GPU, Error(kBadInput)
// for sizes that do not match the shape.
struct AttentionOutputs {
  std::vector<float> o, dq, dk, dv;
};
AttentionOutputs run_cuda_attention(const AttentionShape& shape, AttentionKernel attention,
                                    const std::vector<float>& q, const std::vector<float>& k,
                                    const std::vector<float>& v, const std::vector<float>& d_o);

// The arithmetic the cpu kernels run, exposed so tests can check results on small
// shapes. Row-major fp32; no aliasing between inputs and outputs.
namespace cpu_math {

// c[m,n] = a[m,k] * b[k,n].
void gemm(const float* a, const float* b, float* c, std::int64_t m, std::int64_t n, std::int64_t k);

// Causal attention with GQA. q, o: [batch, heads, query_rows(), head_dim]; k, v: [batch,
// kv_heads, seq, head_dim]; query head h reads kv head h / (heads / kv_heads). Scale
// 1/sqrt(head_dim). Query row r sits at position query_position(r) of the sequence and
// attends to keys [0, position] (context parallelism: rank 0's two chunks). `block` is the
// query block size (> 0). REQUIRES: heads % kv_heads == 0, seq divisible by
// query_runs() x context_parallel.
void causal_attention_forward(const AttentionShape& shape, const float* q, const float* k,
                              const float* v, float* o, std::int64_t block);
// Gradients of sum(o * d_o) w.r.t. q, k, v (dq, dk, dv overwritten).
void causal_attention_backward(const AttentionShape& shape, const float* q, const float* k,
                               const float* v, const float* d_o, float* dq, float* dk, float* dv,
                               std::int64_t block);

// out[i] = 0.5 * in[i] + 1.0 for i < n: one read and one write per element.
void memory_bound(const float* in, float* out, std::int64_t n);

}  // namespace cpu_math

}  // namespace fsdptune
