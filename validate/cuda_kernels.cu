// The cuda op kernels: cuBLAS GEMMs in the op's dtype (fp32 accumulate), causal attention
// with cuDNN's fused attention (fsdptune/cudnn_sdpa.hpp) or as query-blocked
// strided-batched cuBLAS GEMMs with a softmax kernel, and a grid-stride memory-bound
// kernel. See kernels.hpp for what each op kind runs.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "cuda_check.hpp"
#include "fsdptune/cudnn_sdpa.hpp"
#include "fsdptune/error.hpp"
#include "fsdptune/kernels.hpp"

namespace fsdptune {
namespace {

// Query block of the attention: 512 rows keep each GEMM large enough for the tensor
// cores while the skipped masked blocks leave the work within block / (2 seq) of the
// causal half.
constexpr std::int64_t kAttentionBlock = 512;
constexpr int kThreads = 256;
// Largest operand of a memory-bound op (elements, 1 GiB of fp32): bigger ops take several
// passes, so an optimizer step over billions of parameters moves its bytes without
// holding them twice.
constexpr std::int64_t kMemoryBoundChunk = std::int64_t{1} << 28;

__global__ void fill_kernel(__nv_bfloat16* data, std::int64_t n, int salt) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    data[i] =
        __float2bfloat16(static_cast<float>(static_cast<int>((i * 7 + salt * 3) % 13) - 6) * 0.01f);
  }
}

__global__ void memory_bound_kernel(const float* in, float* out, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    out[i] = 0.5f * in[i] + 1.0f;
  }
}

__global__ void copy_kernel(const float* in, float* out, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    out[i] = in[i];
  }
}

// into[i * into_stride + j] += from[i * from_stride + j] for i < batches, j < elements, in
// fp32, rounded once to bf16: a context-parallel op's first-chunk key gradients added
// into the op's (cudnn_sdpa.hpp SdpaAccumulate).
__global__ void accumulate_kernel(__nv_bfloat16* into, const __nv_bfloat16* from,
                                  std::int64_t batches, std::int64_t elements,
                                  std::int64_t into_stride, std::int64_t from_stride) {
  const std::int64_t n = batches * elements;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t batch = i / elements;
    const std::int64_t j = i % elements;
    __nv_bfloat16& target = into[batch * into_stride + j];
    target = __float2bfloat16(__bfloat162float(target) +
                              __bfloat162float(from[batch * from_stride + j]));
  }
}

__device__ float block_reduce(float value, bool take_max) {
  __shared__ float shared[kThreads];
  shared[threadIdx.x] = value;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      const float other = shared[threadIdx.x + stride];
      shared[threadIdx.x] =
          take_max ? fmaxf(shared[threadIdx.x], other) : shared[threadIdx.x] + other;
    }
    __syncthreads();
  }
  const float result = shared[0];
  __syncthreads();
  return result;
}

// One CUDA block per score row: row r of query block starting at row0 attends keys
// [0, row0 + r]; the rest of the row is zeroed. Scores are bf16, per batch item a
// [rows, keys] matrix at item * item_stride.
__global__ void causal_softmax_kernel(__nv_bfloat16* scores, std::int64_t rows, std::int64_t keys,
                                      std::int64_t item_stride, std::int64_t row0, float scale) {
  const std::int64_t row = blockIdx.x;
  __nv_bfloat16* s = scores + (row / rows) * item_stride + (row % rows) * keys;
  const std::int64_t last = row0 + row % rows;
  float local_max = -INFINITY;
  for (std::int64_t j = threadIdx.x; j <= last; j += blockDim.x) {
    local_max = fmaxf(local_max, __bfloat162float(s[j]) * scale);
  }
  const float row_max = block_reduce(local_max, true);
  float local_sum = 0;
  for (std::int64_t j = threadIdx.x; j <= last; j += blockDim.x) {
    local_sum += __expf(__bfloat162float(s[j]) * scale - row_max);
  }
  const float row_sum = block_reduce(local_sum, false);
  for (std::int64_t j = threadIdx.x; j < keys; j += blockDim.x) {
    const float p = j <= last ? __expf(__bfloat162float(s[j]) * scale - row_max) / row_sum : 0.f;
    s[j] = __float2bfloat16(p);
  }
}

// dS = scale P o (dP - rowsum(P o dP)), written over dP: the gradient of the scaled
// scores' softmax, with the score scale of Q K^T folded in for dQ and dK. One CUDA block
// per row.
__global__ void softmax_backward_kernel(const __nv_bfloat16* p, __nv_bfloat16* d_p,
                                        std::int64_t rows, std::int64_t keys,
                                        std::int64_t item_stride, float scale) {
  const std::int64_t row = blockIdx.x;
  const std::int64_t offset = (row / rows) * item_stride + (row % rows) * keys;
  const __nv_bfloat16* p_row = p + offset;
  __nv_bfloat16* d_row = d_p + offset;
  float local = 0;
  for (std::int64_t j = threadIdx.x; j < keys; j += blockDim.x) {
    local += __bfloat162float(p_row[j]) * __bfloat162float(d_row[j]);
  }
  const float dot = block_reduce(local, false);
  for (std::int64_t j = threadIdx.x; j < keys; j += blockDim.x) {
    d_row[j] =
        __float2bfloat16(scale * __bfloat162float(p_row[j]) * (__bfloat162float(d_row[j]) - dot));
  }
}

int grid_for(std::int64_t n) {
  return static_cast<int>(std::clamp<std::int64_t>((n + kThreads - 1) / kThreads, 1, 65535));
}

// SdpaAccumulate (cudnn_sdpa.hpp) on the kernel above.
void accumulate_bf16(void* stream, void* into, const void* from, std::int64_t batches,
                     std::int64_t elements, std::int64_t into_stride, std::int64_t from_stride) {
  accumulate_kernel<<<grid_for(batches * elements), kThreads, 0,
                      static_cast<cudaStream_t>(stream)>>>(
      static_cast<__nv_bfloat16*>(into), static_cast<const __nv_bfloat16*>(from), batches, elements,
      into_stride, from_stride);
  FSDPTUNE_CUDA_CHECK(cudaGetLastError());
}

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::kFP32:
      return CUDA_R_32F;
    case DType::kFP16:
      return CUDA_R_16F;
    case DType::kBF16:
    case DType::kFP8:  // float8 GEMMs run as bf16: the closest cuBLAS path without scales
      return CUDA_R_16BF;
  }
  return CUDA_R_16BF;
}

std::int64_t element_bytes(cudaDataType_t type) { return type == CUDA_R_32F ? 4 : 2; }

class CudaKernels final : public OpKernels {
 public:
  explicit CudaKernels(const KernelOptions& options)
      : device_(options.device), attention_kernel_(options.attention) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      throw_runtime("cuda", "no CUDA device is visible to this process");
    }
    if (device_ < 0 || device_ >= count) {
      throw_bad_input("--device", "CUDA device " + std::to_string(device_) + " does not exist (" +
                                      std::to_string(count) + " visible)");
    }
    FSDPTUNE_CUDA_CHECK(cudaSetDevice(device_));
    if (options.stream != nullptr) {
      stream_ = static_cast<cudaStream_t>(options.stream);
    } else {
      FSDPTUNE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
      owns_stream_ = true;
    }
    FSDPTUNE_CUBLAS_CHECK(cublasCreate(&blas_));
    FSDPTUNE_CUBLAS_CHECK(cublasSetStream(blas_, stream_));
    cudaDeviceProp properties{};
    FSDPTUNE_CUDA_CHECK(cudaGetDeviceProperties(&properties, device_));
    name_ = "cuda:" + std::to_string(device_) + " " + properties.name;
    if (attention_kernel_ != AttentionKernel::kCublas) {
      sdpa_ = make_cudnn_sdpa(stream_, &cudnn_absent_, accumulate_bf16);
      if (sdpa_ == nullptr && attention_kernel_ == AttentionKernel::kCudnn) {
        cublasDestroy(blas_);  // no destructor runs for a constructor that throws
        if (owns_stream_) cudaStreamDestroy(stream_);
        throw_runtime("--attention cudnn",
                      "cuDNN's fused attention is not available: " + cudnn_absent_,
                      "--attention auto runs the cuBLAS attention where cuDNN is absent");
      }
    }
    // Last: nothing after it throws (no destructor runs for a constructor that throws).
    // The default release threshold (0) returns an operand's memory to the device at the
    // next synchronization once it is freed.
    cudaMemPoolProps pool{};
    pool.allocType = cudaMemAllocationTypePinned;
    pool.location.type = cudaMemLocationTypeDevice;
    pool.location.id = device_;
    int pools = 0;
    cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device_);
    const cudaError_t created =
        pools != 0 ? cudaMemPoolCreate(&operand_pool_, &pool) : cudaErrorNotSupported;
    if (created != cudaSuccess) {
      sdpa_.reset();
      cublasDestroy(blas_);
      if (owns_stream_) cudaStreamDestroy(stream_);
      throw_runtime("cuda",
                    name_ + ": could not create a memory pool for the kernels' operands (" +
                        cudaGetErrorString(created) + ")",
                    "the kernels need stream-ordered memory pools (CUDA 11.2 or later, a "
                    "driver and device that support them: cudaDevAttrMemoryPoolsSupported)");
    }
  }

  ~CudaKernels() override {
    cudaStreamSynchronize(stream_);
    sdpa_.reset();  // its handle is bound to the stream
    for (auto& operand : operands_) {
      if (operand.data != nullptr) cudaFreeAsync(operand.data, stream_);
    }
    cudaStreamSynchronize(stream_);
    cudaMemPoolDestroy(operand_pool_);
    cublasDestroy(blas_);
    if (owns_stream_) cudaStreamDestroy(stream_);
  }

  CudaKernels(const CudaKernels&) = delete;
  CudaKernels& operator=(const CudaKernels&) = delete;

  std::string device() const override { return name_; }

  void run(const Op& op) override {
    FSDPTUNE_CUDA_CHECK(cudaSetDevice(device_));
    switch (op.kind) {
      case OpKind::kGemm:
        run_gemm(op);
        return;
      case OpKind::kAttention:
        run_attention(op);
        return;
      case OpKind::kMemoryBound: {
        if (op.memory_op == "copy") {
          // A bucket copy of op.bytes, as a kernel (CUPTI times kernels): a device-to-device
          // copy's bandwidth.
          const std::int64_t n = std::max<std::int64_t>(1, op.bytes / sizeof(float));
          const std::int64_t chunk = std::min(n, kMemoryBoundChunk);
          auto* in = static_cast<const float*>(operand(0, chunk * 4));
          auto* out = static_cast<float*>(operand(1, chunk * 4));
          for (std::int64_t done = 0; done < n; done += chunk) {
            const std::int64_t count = std::min(chunk, n - done);
            copy_kernel<<<grid_for(count), kThreads, 0, stream_>>>(in, out, count);
          }
          FSDPTUNE_CUDA_CHECK(cudaGetLastError());
          return;
        }
        // op.bytes read + written in passes over buffers of at most kMemoryBoundChunk, split
        // over the op's kernels (an unfused eager op launches several, memory_op_kernels).
        const std::int64_t kernels = memory_op_kernels(op.memory_op);
        const std::int64_t n = std::max<std::int64_t>(1, op.bytes / (2 * sizeof(float)) / kernels);
        const std::int64_t chunk = std::min(n, kMemoryBoundChunk);
        auto* in = static_cast<const float*>(operand(0, chunk * 4));
        auto* out = static_cast<float*>(operand(1, chunk * 4));
        for (std::int64_t kernel = 0; kernel < kernels; ++kernel) {
          for (std::int64_t done = 0; done < n; done += chunk) {
            const std::int64_t count = std::min(chunk, n - done);
            memory_bound_kernel<<<grid_for(count), kThreads, 0, stream_>>>(in, out, count);
          }
        }
        FSDPTUNE_CUDA_CHECK(cudaGetLastError());
        return;
      }
      case OpKind::kCollective:
        throw_bad_input(op.name, "a tensor-parallel collective is not a kernel",
                        "the executor replays jobs with tp = 1 only");
    }
  }

  void synchronize() override { FSDPTUNE_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  std::vector<double> time(const Op& op, int warmup, int repetitions) override {
    for (int i = 0; i < warmup; ++i) run(op);
    std::vector<cudaEvent_t> events(static_cast<std::size_t>(std::max(repetitions, 0)) + 1);
    for (auto& event : events) FSDPTUNE_CUDA_CHECK(cudaEventCreate(&event));
    FSDPTUNE_CUDA_CHECK(cudaEventRecord(events[0], stream_));
    for (int i = 0; i < repetitions; ++i) {
      run(op);
      FSDPTUNE_CUDA_CHECK(cudaEventRecord(events[static_cast<std::size_t>(i) + 1], stream_));
    }
    synchronize();
    std::vector<double> samples_s;
    for (int i = 0; i < repetitions; ++i) {
      float ms = 0;
      FSDPTUNE_CUDA_CHECK(cudaEventElapsedTime(&ms, events[static_cast<std::size_t>(i)],
                                               events[static_cast<std::size_t>(i) + 1]));
      samples_s.push_back(static_cast<double>(ms) * 1e-3);
    }
    for (auto& event : events) cudaEventDestroy(event);
    return samples_s;
  }

  std::int64_t workspace_bytes() const override {
    std::int64_t bytes = 0;
    for (const auto& operand : operands_) bytes += operand.bytes;
    return bytes;
  }

  // run_cuda_attention (kernels.hpp): the inputs into the operands the chosen attention
  // reads, forward, then backward, the outputs read back.
  AttentionOutputs check_attention(const AttentionShape& s, const std::vector<float>& q,
                                   const std::vector<float>& k, const std::vector<float>& v,
                                   const std::vector<float>& d_o) {
    const auto q_count = static_cast<std::size_t>(s.batch * s.heads * s.query_rows() * s.head_dim);
    const auto kv_count = static_cast<std::size_t>(s.batch * s.kv_heads * s.seq * s.head_dim);
    if (q.size() != q_count || d_o.size() != q_count || k.size() != kv_count ||
        v.size() != kv_count) {
      throw_bad_input("attention inputs", "sizes do not match the shape");
    }
    Op op;
    op.kind = OpKind::kAttention;
    op.name = "attention check";
    op.attention = s;
    // Both directions on one implementation: the cuDNN backward reads dO from its own slot
    // and the statistics only its forward writes.
    const bool cudnn = sdpa_ != nullptr && sdpa_->prepare(s, false).empty();
    const bool cudnn_backward = sdpa_ != nullptr && sdpa_->prepare(s, true).empty();
    if (cudnn != cudnn_backward) {
      throw_runtime("attention check", std::string("cuDNN has a plan for the ") +
                                           (cudnn ? "forward" : "backward") +
                                           " only: " + sdpa_->prepare(s, cudnn));
    }
    const auto put = [&](std::size_t slot, const std::vector<float>& values) {
      std::vector<__nv_bfloat16> converted(values.size());
      for (std::size_t i = 0; i < values.size(); ++i) converted[i] = __float2bfloat16(values[i]);
      void* device = operand(slot, static_cast<std::int64_t>(values.size() * 2));
      FSDPTUNE_CUDA_CHECK(cudaMemcpyAsync(device, converted.data(), converted.size() * 2,
                                          cudaMemcpyHostToDevice, stream_));
      synchronize();  // `converted` goes out of scope
    };
    const auto get = [&](std::size_t slot, std::size_t count) {
      std::vector<__nv_bfloat16> raw(count);
      synchronize();
      FSDPTUNE_CUDA_CHECK(
          cudaMemcpy(raw.data(), operands_[slot].data, count * 2, cudaMemcpyDeviceToHost));
      std::vector<float> values(count);
      for (std::size_t i = 0; i < count; ++i) values[i] = __bfloat162float(raw[i]);
      return values;
    };
    put(0, q);
    put(1, k);
    put(2, v);
    run(op);
    AttentionOutputs outputs;
    outputs.o = get(3, q_count);
    put(cudnn ? 11 : 3, d_o);  // the cuBLAS attention reads dO where it wrote O
    op.backward = true;
    run(op);
    outputs.dq = get(6, q_count);
    outputs.dk = get(7, kv_count);
    outputs.dv = get(8, kv_count);
    return outputs;
  }

  std::string attention() const override {
    std::string used;
    if (ran_cudnn_) used = sdpa_->description();
    if (ran_cublas_) {
      std::string why;
      if (attention_kernel_ == AttentionKernel::kCublas) why = "--attention cublas";
      if (sdpa_ == nullptr && why.empty()) why = "cuDNN: " + cudnn_absent_;
      for (const auto& declined : cudnn_declined_) {
        why += (why.empty() ? "cuDNN: " : "; ") + declined;
      }
      used += (used.empty() ? "" : "; ") + std::string("cuBLAS query blocks") +
              (why.empty() ? "" : " (" + why + ")");
    }
    return used;
  }

 private:
  struct Operand {
    void* data = nullptr;
    std::int64_t bytes = 0;
  };

  // Operand `slot` of at least `bytes`, filled with small deterministic values when grown.
  // From the kernels' own pool (operand_pool_), not the device's default one: the
  // executor's peak memory is that pool's high-water mark of the schedule's own buffers, and
  // operands are reported apart. Freed and allocated in the stream's order: a cudaFree waits
  // for the whole device, NCCL kernels of other streams too, which can wait for a peer rank
  // blocked the same way (a pipeline's receive posted early; found by review).
  void* operand(std::size_t slot, std::int64_t bytes) {
    if (operands_.size() <= slot) operands_.resize(slot + 1);
    Operand& operand = operands_[slot];
    if (operand.bytes < bytes) {
      if (operand.data != nullptr) FSDPTUNE_CUDA_CHECK(cudaFreeAsync(operand.data, stream_));
      operand.data = nullptr;
      FSDPTUNE_CUDA_CHECK(cudaMallocFromPoolAsync(&operand.data, static_cast<std::size_t>(bytes),
                                                  operand_pool_, stream_));
      operand.bytes = bytes;
      const std::int64_t halves = bytes / 2;
      fill_kernel<<<grid_for(halves), kThreads, 0, stream_>>>(
          static_cast<__nv_bfloat16*>(operand.data), halves, static_cast<int>(slot));
      FSDPTUNE_CUDA_CHECK(cudaGetLastError());
    }
    return operand.data;
  }

  // Row-major C[m,n] = A[m,k] B[k,n] is column-major C^T = B^T A^T.
  void run_gemm(const Op& op) {
    const GemmShape& s = op.gemm;
    if (s.m <= 0 || s.n <= 0 || s.k <= 0) throw_bad_input(op.name, "GEMM with an empty shape");
    const cudaDataType_t type = cuda_type(op.dtype);
    const std::int64_t size = element_bytes(type);
    const void* a = operand(0, s.m * s.k * size);
    const void* b = operand(1, s.k * s.n * size);
    void* c = operand(2, s.m * s.n * size);
    const float alpha = 1.0f;
    const float beta = 0.0f;
    FSDPTUNE_CUBLAS_CHECK(cublasGemmEx(blas_, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(s.n),
                                       static_cast<int>(s.m), static_cast<int>(s.k), &alpha, b,
                                       type, static_cast<int>(s.n), a, type, static_cast<int>(s.k),
                                       &beta, c, type, static_cast<int>(s.n), CUBLAS_COMPUTE_32F,
                                       CUBLAS_GEMM_DEFAULT));
  }

  // One strided-batched bf16 GEMM in column-major terms (see run_attention for the
  // row-major meaning of each call).
  void batched(cublasOperation_t trans_a, cublasOperation_t trans_b, std::int64_t m, std::int64_t n,
               std::int64_t k, const void* a, std::int64_t lda, std::int64_t stride_a,
               const void* b, std::int64_t ldb, std::int64_t stride_b, float beta, void* c,
               std::int64_t ldc, std::int64_t stride_c, std::int64_t count) {
    const float alpha = 1.0f;
    FSDPTUNE_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        blas_, trans_a, trans_b, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
        &alpha, a, CUDA_R_16BF, static_cast<int>(lda), stride_a, b, CUDA_R_16BF,
        static_cast<int>(ldb), stride_b, &beta, c, CUDA_R_16BF, static_cast<int>(ldc), stride_c,
        static_cast<int>(count), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }

  // cuDNN's fused attention where it has a plan for the op (and --attention is not
  // cublas), the cuBLAS attention otherwise.
  void run_attention(const Op& op) {
    const AttentionShape& s = op.attention;
    if (s.batch <= 0 || s.heads <= 0 || s.kv_heads <= 0 || s.seq <= 0 || s.head_dim <= 0 ||
        s.heads % s.kv_heads != 0 || s.context_parallel < 1 ||
        s.seq % (s.query_runs() * s.context_parallel) != 0) {
      throw_bad_input(op.name, "attention with an invalid shape");
    }
    if (sdpa_ != nullptr) {
      const std::string why = sdpa_->prepare(s, op.backward);
      if (why.empty()) {
        run_cudnn_attention(op);
        ran_cudnn_ = true;
        return;
      }
      if (attention_kernel_ == AttentionKernel::kCudnn) {
        throw_bad_input(op.name, "cuDNN's fused attention cannot run this op: " + why,
                        "--attention auto runs the cuBLAS attention for it");
      }
      cudnn_declined_.insert(why);
    }
    run_cublas_attention(op);
    ran_cublas_ = true;
  }

  // Operands in cudnn_sdpa.hpp's layouts: q 0, k 1, v 2, o 3, dQ 6, dK 7, dV 8 as the cuBLAS
  // attention's (which reads dO from 3 and keeps its scores in 4 and 5), softmax
  // statistics 9, cuDNN's workspace 10, dO 11. The backward reads o and the statistics as
  // the last forward left them (or as filled): finite either way, which is all the timing
  // needs (kernels.hpp).
  void run_cudnn_attention(const Op& op) {
    const AttentionShape& s = op.attention;
    const std::int64_t q_bytes = s.batch * s.heads * s.query_rows() * s.head_dim * 2;
    const std::int64_t kv_bytes = s.batch * s.kv_heads * s.seq * s.head_dim * 2;
    SdpaTensors tensors;
    tensors.q = operand(0, q_bytes);
    tensors.k = operand(1, kv_bytes);
    tensors.v = operand(2, kv_bytes);
    tensors.o = operand(3, q_bytes);
    tensors.stats = operand(9, sdpa_->stats_bytes(s));
    if (op.backward) {
      tensors.d_o = operand(11, q_bytes);
      tensors.d_q = operand(6, q_bytes);
      tensors.d_k = operand(7, kv_bytes);
      tensors.d_v = operand(8, kv_bytes);
    }
    const std::int64_t scratch = sdpa_->workspace_bytes(s, op.backward);
    sdpa_->run(s, op.backward, tensors, scratch > 0 ? operand(10, scratch) : nullptr);
  }

  // Causal attention in query blocks of kAttentionBlock rows: block i attends keys
  // [0, end of block i). GQA: query head (item * group + g) of batch item
  // item = b * kv_heads + kv_head reads kv head `item`, so for each g one strided batch
  // covers all items (q stride group * seq * d, kv stride seq * d).
  // Row-major products as column-major cuBLAS calls:
  //   S[r,L]  = Q K^T   -> (T, N, m=L, n=r, k=d, A=K, B=Q)
  //   O[r,d]  = P V     -> (N, N, m=d, n=r, k=L, A=V, B=P)
  //   dV[L,d] += P^T dO -> (N, T, m=d, n=L, k=r, A=dO, B=P)
  //   dP[r,L] = dO V^T  -> (T, N, m=L, n=r, k=d, A=V, B=dO)
  //   dQ[r,d] = dS K    -> (N, N, m=d, n=r, k=L, A=K, B=dS)
  //   dK[L,d] += dS^T Q -> (N, T, m=d, n=L, k=r, A=Q, B=dS)
  void run_cublas_attention(const Op& op) {
    const AttentionShape& s = op.attention;
    const std::int64_t d = s.head_dim;
    const std::int64_t group = s.heads / s.kv_heads;
    const std::int64_t items = s.batch * s.kv_heads;
    const std::int64_t block = std::min(kAttentionBlock, s.seq);
    // The rank's query rows (context parallelism: query_runs() runs of consecutive
    // positions, AttentionShape::query_position).
    const std::int64_t query_rows = s.query_rows();
    const std::int64_t run_rows = query_rows / s.query_runs();
    const std::int64_t q_bytes = s.batch * s.heads * query_rows * d * 2;
    const std::int64_t kv_bytes = items * s.seq * d * 2;
    const std::int64_t score_stride = block * s.seq;
    const std::int64_t score_bytes = items * score_stride * 2;
    auto* q = static_cast<__nv_bfloat16*>(operand(0, q_bytes));
    auto* k = static_cast<__nv_bfloat16*>(operand(1, kv_bytes));
    auto* v = static_cast<__nv_bfloat16*>(operand(2, kv_bytes));
    auto* o = static_cast<__nv_bfloat16*>(operand(3, q_bytes));  // O forward, dO backward
    auto* p = static_cast<__nv_bfloat16*>(operand(4, score_bytes));
    __nv_bfloat16* d_p = nullptr;
    __nv_bfloat16 *dq = nullptr, *dk = nullptr, *dv = nullptr;
    if (op.backward) {
      d_p = static_cast<__nv_bfloat16*>(operand(5, score_bytes));
      dq = static_cast<__nv_bfloat16*>(operand(6, q_bytes));
      dk = static_cast<__nv_bfloat16*>(operand(7, kv_bytes));
      dv = static_cast<__nv_bfloat16*>(operand(8, kv_bytes));
      FSDPTUNE_CUDA_CHECK(cudaMemsetAsync(dk, 0, static_cast<std::size_t>(kv_bytes), stream_));
      FSDPTUNE_CUDA_CHECK(cudaMemsetAsync(dv, 0, static_cast<std::size_t>(kv_bytes), stream_));
    }
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    const std::int64_t q_stride = group * query_rows * d;
    const std::int64_t kv_stride = s.seq * d;
    for (std::int64_t g = 0; g < group; ++g) {
      // Blocks of at most `block` rows, none crossing from one run into the next.
      std::int64_t rows = 0;
      for (std::int64_t row0 = 0; row0 < query_rows; row0 += rows) {
        const std::int64_t run_end = (row0 / run_rows + 1) * run_rows;
        rows = std::min(block, run_end - row0);
        const std::int64_t position = s.query_position(row0);
        const std::int64_t keys = position + rows;
        const std::int64_t q_offset = (g * query_rows + row0) * d;
        // Scores of this block: items x [rows, keys], row stride `keys`.
        batched(CUBLAS_OP_T, CUBLAS_OP_N, keys, rows, d, k, d, kv_stride, q + q_offset, d, q_stride,
                0.0f, p, keys, score_stride, items);
        causal_softmax_kernel<<<static_cast<unsigned>(items * rows), kThreads, 0, stream_>>>(
            p, rows, keys, score_stride, position, scale);
        FSDPTUNE_CUDA_CHECK(cudaGetLastError());
        if (!op.backward) {
          batched(CUBLAS_OP_N, CUBLAS_OP_N, d, rows, keys, v, d, kv_stride, p, keys, score_stride,
                  0.0f, o + q_offset, d, q_stride, items);
          continue;
        }
        const __nv_bfloat16* d_o = o + q_offset;
        batched(CUBLAS_OP_N, CUBLAS_OP_T, d, keys, rows, d_o, d, q_stride, p, keys, score_stride,
                1.0f, dv, d, kv_stride, items);
        batched(CUBLAS_OP_T, CUBLAS_OP_N, keys, rows, d, v, d, kv_stride, d_o, d, q_stride, 0.0f,
                d_p, keys, score_stride, items);
        softmax_backward_kernel<<<static_cast<unsigned>(items * rows), kThreads, 0, stream_>>>(
            p, d_p, rows, keys, score_stride, scale);
        FSDPTUNE_CUDA_CHECK(cudaGetLastError());
        batched(CUBLAS_OP_N, CUBLAS_OP_N, d, rows, keys, k, d, kv_stride, d_p, keys, score_stride,
                0.0f, dq + q_offset, d, q_stride, items);
        batched(CUBLAS_OP_N, CUBLAS_OP_T, d, keys, rows, q + q_offset, d, q_stride, d_p, keys,
                score_stride, 1.0f, dk, d, kv_stride, items);
      }
    }
  }

  int device_ = 0;
  AttentionKernel attention_kernel_ = AttentionKernel::kAuto;
  cudaStream_t stream_ = nullptr;
  bool owns_stream_ = false;
  cublasHandle_t blas_ = nullptr;
  std::string name_;
  std::vector<Operand> operands_;
  cudaMemPool_t operand_pool_ = nullptr;
  // cuDNN's fused attention; nullptr with the reason in cudnn_absent_ (or --attention
  // cublas). What ran, for attention(): cuDNN, cuBLAS, and why cuDNN declined ops.
  std::unique_ptr<CudnnSdpa> sdpa_;
  std::string cudnn_absent_;
  std::set<std::string> cudnn_declined_;
  bool ran_cudnn_ = false;
  bool ran_cublas_ = false;
};

}  // namespace

std::unique_ptr<OpKernels> make_cuda_kernels(const KernelOptions& options) {
  return std::make_unique<CudaKernels>(options);
}

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  return count;
}

AttentionOutputs run_cuda_attention(const AttentionShape& shape, AttentionKernel attention,
                                    const std::vector<float>& q, const std::vector<float>& k,
                                    const std::vector<float>& v, const std::vector<float>& d_o) {
  KernelOptions options;
  options.attention = attention;
  CudaKernels kernels(options);
  return kernels.check_attention(shape, q, k, v, d_o);
}

}  // namespace fsdptune
