// The cpu op kernels: Eigen GEMMs and attention in fp32, memory-bound loops.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include <Eigen/Dense>

#include "fsdptune/error.hpp"
#include "fsdptune/kernels.hpp"

namespace fsdptune {
namespace cpu_math {
namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMatrix>;
using Map = Eigen::Map<RowMatrix>;

// P = softmax(scale * Q K^T) over keys [0, keys) for query rows [row0, row0 + rows), with
// key j masked out of row i when j > i (causal).
RowMatrix causal_probabilities(const ConstMap& q_block, const ConstMap& k_prefix, std::int64_t row0,
                               float scale) {
  RowMatrix p = (q_block * k_prefix.transpose()) * scale;
  for (Eigen::Index r = 0; r < p.rows(); ++r) {
    const Eigen::Index last_key = row0 + r;  // inclusive
    float max_score = -std::numeric_limits<float>::infinity();
    for (Eigen::Index j = 0; j <= last_key; ++j) max_score = std::max(max_score, p(r, j));
    float sum = 0;
    for (Eigen::Index j = 0; j <= last_key; ++j) {
      p(r, j) = std::exp(p(r, j) - max_score);
      sum += p(r, j);
    }
    for (Eigen::Index j = 0; j <= last_key; ++j) p(r, j) /= sum;
    for (Eigen::Index j = last_key + 1; j < p.cols(); ++j) p(r, j) = 0;
  }
  return p;
}

struct HeadView {
  std::int64_t q_offset;   // elements, into q / o / dq / d_o
  std::int64_t kv_offset;  // elements, into k / v / dk / dv
};

HeadView head_view(const AttentionShape& shape, std::int64_t b, std::int64_t h) {
  const std::int64_t group = shape.heads / shape.kv_heads;
  const std::int64_t kv_head = h / group;
  return {((b * shape.heads + h) * shape.query_rows()) * shape.head_dim,
          ((b * shape.kv_heads + kv_head) * shape.seq) * shape.head_dim};
}

void check_shape(const AttentionShape& shape, std::int64_t block) {
  FSDPTUNE_CHECK(shape.batch > 0 && shape.heads > 0 && shape.kv_heads > 0 && shape.seq > 0 &&
                     shape.head_dim > 0 && shape.heads % shape.kv_heads == 0 && block > 0 &&
                     shape.context_parallel >= 1 &&
                     shape.seq % (shape.query_runs() * shape.context_parallel) == 0,
                 "invalid attention shape");
}

// Calls visit(local row, position, rows) for the query blocks of at most `block` rows,
// each inside one run of consecutive positions (AttentionShape::query_runs).
template <typename Visit>
void for_query_blocks(const AttentionShape& shape, std::int64_t block, Visit visit) {
  const std::int64_t run_rows = shape.query_rows() / shape.query_runs();
  for (std::int64_t run = 0; run < shape.query_runs(); ++run) {
    const std::int64_t first = run * run_rows;
    for (std::int64_t row0 = first; row0 < first + run_rows; row0 += block) {
      visit(row0, shape.query_position(row0), std::min(block, first + run_rows - row0));
    }
  }
}

}  // namespace

void gemm(const float* a, const float* b, float* c, std::int64_t m, std::int64_t n,
          std::int64_t k) {
  Map(c, m, n).noalias() = ConstMap(a, m, k) * ConstMap(b, k, n);
}

void causal_attention_forward(const AttentionShape& shape, const float* q, const float* k,
                              const float* v, float* o, std::int64_t block) {
  check_shape(shape, block);
  const std::int64_t d = shape.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  for (std::int64_t b = 0; b < shape.batch; ++b) {
    for (std::int64_t h = 0; h < shape.heads; ++h) {
      const HeadView view = head_view(shape, b, h);
      for_query_blocks(
          shape, block, [&](std::int64_t row0, std::int64_t position, std::int64_t rows) {
            const std::int64_t keys = position + rows;
            const ConstMap q_block(q + view.q_offset + row0 * d, rows, d);
            const ConstMap k_prefix(k + view.kv_offset, keys, d);
            const ConstMap v_prefix(v + view.kv_offset, keys, d);
            const RowMatrix p = causal_probabilities(q_block, k_prefix, position, scale);
            Map(o + view.q_offset + row0 * d, rows, d).noalias() = p * v_prefix;
          });
    }
  }
}

// Standard attention backward (as in FlashAttention-2, Dao 2023): with P recomputed,
// dV = P^T dO, dP = dO V^T, D = rowsum(P o dP), dS = P o (dP - D), dQ = scale dS K,
// dK = scale dS^T Q. Five matrix products against the forward's two.
void causal_attention_backward(const AttentionShape& shape, const float* q, const float* k,
                               const float* v, const float* d_o, float* dq, float* dk, float* dv,
                               std::int64_t block) {
  check_shape(shape, block);
  const std::int64_t d = shape.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const std::int64_t q_elements = shape.batch * shape.heads * shape.query_rows() * d;
  const std::int64_t kv_elements = shape.batch * shape.kv_heads * shape.seq * d;
  std::fill(dq, dq + q_elements, 0.0f);
  std::fill(dk, dk + kv_elements, 0.0f);
  std::fill(dv, dv + kv_elements, 0.0f);
  for (std::int64_t b = 0; b < shape.batch; ++b) {
    for (std::int64_t h = 0; h < shape.heads; ++h) {
      const HeadView view = head_view(shape, b, h);
      for_query_blocks(
          shape, block, [&](std::int64_t row0, std::int64_t position, std::int64_t rows) {
            const std::int64_t keys = position + rows;
            const ConstMap q_block(q + view.q_offset + row0 * d, rows, d);
            const ConstMap d_o_block(d_o + view.q_offset + row0 * d, rows, d);
            const ConstMap k_prefix(k + view.kv_offset, keys, d);
            const ConstMap v_prefix(v + view.kv_offset, keys, d);
            const RowMatrix p = causal_probabilities(q_block, k_prefix, position, scale);
            Map(dv + view.kv_offset, keys, d).noalias() += p.transpose() * d_o_block;
            const RowMatrix d_p = d_o_block * v_prefix.transpose();
            const Eigen::VectorXf row_dot = p.cwiseProduct(d_p).rowwise().sum();
            const RowMatrix d_s = p.cwiseProduct(d_p.colwise() - row_dot);
            Map(dq + view.q_offset + row0 * d, rows, d).noalias() = (d_s * k_prefix) * scale;
            Map(dk + view.kv_offset, keys, d).noalias() += (d_s.transpose() * q_block) * scale;
          });
    }
  }
}

void memory_bound(const float* in, float* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = 0.5f * in[i] + 1.0f;
}

}  // namespace cpu_math

namespace {

// Query block of the cpu attention: small enough that the skipped masked blocks make the
// work close to the causal half (waste = block / (2 seq) of the full square).
constexpr std::int64_t kCpuAttentionBlock = 64;
// Largest operand of a memory-bound op (elements): bigger ops take several passes, so an
// optimizer step over billions of parameters moves its bytes without holding them.
constexpr std::int64_t kMemoryBoundChunk = std::int64_t{1} << 26;

class CpuKernels final : public OpKernels {
 public:
  std::string device() const override { return "cpu"; }

  void run(const Op& op) override {
    switch (op.kind) {
      case OpKind::kGemm: {
        const GemmShape& s = op.gemm;
        if (s.m <= 0 || s.n <= 0 || s.k <= 0) throw_bad_input(op.name, "GEMM with an empty shape");
        float* a = operand(0, s.m * s.k);
        float* b = operand(1, s.k * s.n);
        float* c = operand(2, s.m * s.n);
        cpu_math::gemm(a, b, c, s.m, s.n, s.k);
        return;
      }
      case OpKind::kAttention: {
        const AttentionShape& s = op.attention;
        if (s.batch <= 0 || s.heads <= 0 || s.kv_heads <= 0 || s.seq <= 0 || s.head_dim <= 0 ||
            s.heads % s.kv_heads != 0 || s.context_parallel < 1 ||
            s.seq % (s.query_runs() * s.context_parallel) != 0) {
          throw_bad_input(op.name, "attention with an invalid shape");
        }
        const std::int64_t q_elements = s.batch * s.heads * s.query_rows() * s.head_dim;
        const std::int64_t kv_elements = s.batch * s.kv_heads * s.seq * s.head_dim;
        const std::int64_t block = std::min(kCpuAttentionBlock, s.seq);
        const float* q = operand(0, q_elements);
        const float* k = operand(1, kv_elements);
        const float* v = operand(2, kv_elements);
        ran_attention_ = true;
        if (!op.backward) {
          cpu_math::causal_attention_forward(s, q, k, v, operand(3, q_elements), block);
        } else {
          cpu_math::causal_attention_backward(s, q, k, v, operand(3, q_elements),
                                              operand(4, q_elements), operand(5, kv_elements),
                                              operand(6, kv_elements), block);
        }
        return;
      }
      case OpKind::kMemoryBound: {
        if (op.memory_op == "copy") {
          // A bucket copy of op.bytes: the executor's copy-in / copy-out are memcpy.
          const std::int64_t n = std::max<std::int64_t>(1, op.bytes / sizeof(float));
          const std::int64_t chunk = std::min(n, kMemoryBoundChunk);
          const float* in = operand(0, chunk);
          float* out = operand(1, chunk);
          for (std::int64_t done = 0; done < n; done += chunk) {
            std::memcpy(out, in,
                        sizeof(float) * static_cast<std::size_t>(std::min(chunk, n - done)));
          }
          return;
        }
        // One fp32 read and one fp32 write per element, op.bytes in all, in passes over
        // buffers of at most kMemoryBoundChunk elements, one pass per kernel of the op (an
        // unfused eager op has several, memory_op_kernels).
        const std::int64_t kernels = memory_op_kernels(op.memory_op);
        const std::int64_t n = std::max<std::int64_t>(1, op.bytes / (2 * sizeof(float)) / kernels);
        const std::int64_t chunk = std::min(n, kMemoryBoundChunk);
        const float* in = operand(0, chunk);
        float* out = operand(1, chunk);
        for (std::int64_t kernel = 0; kernel < kernels; ++kernel) {
          for (std::int64_t done = 0; done < n; done += chunk) {
            cpu_math::memory_bound(in, out, std::min(chunk, n - done));
          }
        }
        return;
      }
      case OpKind::kCollective:
        throw_bad_input(op.name, "a tensor-parallel collective is not a kernel",
                        "the executor replays jobs with tp = 1 only");
    }
  }

  void synchronize() override {}

  std::vector<double> time(const Op& op, int warmup, int repetitions) override {
    for (int i = 0; i < warmup; ++i) run(op);
    std::vector<double> samples_s;
    samples_s.reserve(static_cast<std::size_t>(std::max(repetitions, 0)));
    for (int i = 0; i < repetitions; ++i) {
      const auto start = std::chrono::steady_clock::now();
      run(op);
      const auto end = std::chrono::steady_clock::now();
      samples_s.push_back(std::chrono::duration<double>(end - start).count());
    }
    return samples_s;
  }

  std::int64_t workspace_bytes() const override {
    std::int64_t bytes = 0;
    for (const auto& buffer : operands_) {
      bytes += static_cast<std::int64_t>(buffer.size() * sizeof(float));
    }
    return bytes;
  }

  std::string attention() const override { return ran_attention_ ? "Eigen query blocks" : ""; }

 private:
  // Operand `slot`, at least `elements` long; new elements get small deterministic values
  // in [-0.06, 0.06] so products and softmax stay finite.
  float* operand(std::size_t slot, std::int64_t elements) {
    if (operands_.size() <= slot) operands_.resize(slot + 1);
    std::vector<float>& buffer = operands_[slot];
    const auto wanted = static_cast<std::size_t>(elements);
    if (buffer.size() < wanted) {
      const std::size_t old_size = buffer.size();
      buffer.resize(wanted);
      for (std::size_t i = old_size; i < wanted; ++i) {
        buffer[i] = static_cast<float>(static_cast<int>((i * 7 + slot * 3) % 13) - 6) * 0.01f;
      }
    }
    return buffer.data();
  }

  std::vector<std::vector<float>> operands_;
  bool ran_attention_ = false;
};

}  // namespace

std::string to_string(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::kAuto:
      return "auto";
    case AttentionKernel::kCudnn:
      return "cudnn";
    case AttentionKernel::kCublas:
      return "cublas";
  }
  return "auto";
}

AttentionKernel attention_kernel_from_string(const std::string& text, const std::string& where) {
  for (const AttentionKernel kernel :
       {AttentionKernel::kAuto, AttentionKernel::kCudnn, AttentionKernel::kCublas}) {
    if (text == to_string(kernel)) return kernel;
  }
  throw_bad_input(where, "unknown attention '" + text + "'", "auto, cudnn or cublas");
}

std::unique_ptr<OpKernels> make_cpu_kernels(const KernelOptions& options) {
  if (options.attention != AttentionKernel::kAuto) {
    throw_bad_input(
        "--attention",
        "the cpu kernels have one attention (Eigen), not " + to_string(options.attention),
        "--attention cudnn or cublas needs --backend cuda");
  }
  return std::make_unique<CpuKernels>();
}

}  // namespace fsdptune
