#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fsdptune/cudnn_sdpa.hpp"
#include "fsdptune/error.hpp"
#include "fsdptune/kernels.hpp"

using namespace fsdptune;

namespace {

// Reference attention: the full [seq, seq] score matrix with the causal mask, in double.
std::vector<double> naive_attention(const AttentionShape& s, const std::vector<float>& q,
                                    const std::vector<float>& k, const std::vector<float>& v) {
  const auto d = s.head_dim;
  std::vector<double> o(q.size(), 0.0);
  for (std::int64_t b = 0; b < s.batch; ++b) {
    for (std::int64_t h = 0; h < s.heads; ++h) {
      const std::int64_t kvh = h / (s.heads / s.kv_heads);
      const auto qo = ((b * s.heads + h) * s.seq) * d;
      const auto ko = ((b * s.kv_heads + kvh) * s.seq) * d;
      for (std::int64_t i = 0; i < s.seq; ++i) {
        std::vector<double> p(static_cast<std::size_t>(i + 1));
        double max_score = -1e300, sum = 0;
        for (std::int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (std::int64_t c = 0; c < d; ++c) dot += double(q[qo + i * d + c]) * k[ko + j * d + c];
          p[j] = dot / std::sqrt(double(d));
          max_score = std::max(max_score, p[j]);
        }
        for (auto& x : p) sum += (x = std::exp(x - max_score));
        for (std::int64_t c = 0; c < d; ++c) {
          double acc = 0;
          for (std::int64_t j = 0; j <= i; ++j) acc += p[j] / sum * v[ko + j * d + c];
          o[qo + i * d + c] = acc;
        }
      }
    }
  }
  return o;
}

std::vector<float> pattern(std::size_t n, int salt) {
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = std::sin(0.37f * float(i) + float(salt)) * 0.8f;
  return x;
}

// 2 sequences, 4 query heads sharing 2 kv heads, 7 positions, head_dim 3.
const AttentionShape kShape{2, 4, 2, 7, 3, true};

}  // namespace

TEST_CASE("cpu gemm multiplies row-major matrices", "[kernels]") {
  // [1 2 3; 4 5 6] * [1 0; 0 1; 1 1] = [1+3 2+3; 4+6 5+6] = [4 5; 10 11].
  const std::vector<float> a{1, 2, 3, 4, 5, 6};
  const std::vector<float> b{1, 0, 0, 1, 1, 1};
  std::vector<float> c(4, -1);
  cpu_math::gemm(a.data(), b.data(), c.data(), 2, 2, 3);
  CHECK(c == std::vector<float>{4, 5, 10, 11});
}

TEST_CASE("cpu causal attention matches the unblocked reference for any block", "[kernels]") {
  const auto q_n = static_cast<std::size_t>(kShape.batch * kShape.heads * kShape.seq * 3);
  const auto kv_n = static_cast<std::size_t>(kShape.batch * kShape.kv_heads * kShape.seq * 3);
  const auto q = pattern(q_n, 1), k = pattern(kv_n, 2), v = pattern(kv_n, 3);
  const auto expected = naive_attention(kShape, q, k, v);
  for (std::int64_t block : {1, 3, 7, 64}) {
    std::vector<float> o(q_n, 0.0f);
    cpu_math::causal_attention_forward(kShape, q.data(), k.data(), v.data(), o.data(), block);
    for (std::size_t i = 0; i < q_n; ++i) {
      INFO("block " << block << " element " << i);
      CHECK(o[i] == Approx(expected[i]).margin(1e-5));
    }
  }
  // Position 0 attends only to itself: its output is its own value row.
  std::vector<float> o(q_n);
  cpu_math::causal_attention_forward(kShape, q.data(), k.data(), v.data(), o.data(), 3);
  CHECK(o[0] == Approx(v[0]));
}

TEST_CASE("cpu causal attention backward matches finite differences", "[kernels]") {
  const auto q_n = static_cast<std::size_t>(kShape.batch * kShape.heads * kShape.seq * 3);
  const auto kv_n = static_cast<std::size_t>(kShape.batch * kShape.kv_heads * kShape.seq * 3);
  auto q = pattern(q_n, 1), k = pattern(kv_n, 2), v = pattern(kv_n, 3);
  const auto d_o = pattern(q_n, 4);
  std::vector<float> dq(q_n), dk(kv_n), dv(kv_n);
  cpu_math::causal_attention_backward(kShape, q.data(), k.data(), v.data(), d_o.data(), dq.data(),
                                      dk.data(), dv.data(), 3);
  // loss = sum(o * d_o); central difference with step 1e-2 (fp32 forward).
  auto loss = [&] {
    const auto o = naive_attention(kShape, q, k, v);
    double total = 0;
    for (std::size_t i = 0; i < q_n; ++i) total += o[i] * d_o[i];
    return total;
  };
  auto numeric = [&](std::vector<float>& x, std::size_t i) {
    const float saved = x[i];
    x[i] = saved + 1e-2f;
    const double up = loss();
    x[i] = saved - 1e-2f;
    const double down = loss();
    x[i] = saved;
    return (up - down) / 2e-2;
  };
  for (std::size_t i : {0ul, 5ul, 40ul, q_n - 1})
    CHECK(dq[i] == Approx(numeric(q, i)).margin(1e-3));
  for (std::size_t i : {0ul, 7ul, 30ul, kv_n - 1}) {
    CHECK(dk[i] == Approx(numeric(k, i)).margin(1e-3));
    CHECK(dv[i] == Approx(numeric(v, i)).margin(1e-3));
  }
}

TEST_CASE("cpu context-parallel attention is the full attention's rows of rank 0's chunks",
          "[kernels]") {
  // seq 12, cp 2: 4 chunks of 3; rank 0 holds chunks 0 and 3 (positions 0-2 and 9-11)
  // against all 12 keys. Its forward rows and backward dq rows are the full causal
  // attention's at those positions, and its dk, dv the full backward's with the other
  // rows' output gradients zero.
  const AttentionShape full{2, 4, 2, 12, 3, true};
  AttentionShape cp = full;
  cp.context_parallel = 2;
  const std::vector<std::int64_t> positions{0, 1, 2, 9, 10, 11};
  for (std::size_t r = 0; r < positions.size(); ++r) {
    CHECK(cp.query_position(static_cast<std::int64_t>(r)) == positions[r]);
  }
  const std::int64_t d = full.head_dim;
  const auto q_n = static_cast<std::size_t>(full.batch * full.heads * full.seq * d);
  const auto kv_n = static_cast<std::size_t>(full.batch * full.kv_heads * full.seq * d);
  const auto cp_q_n = static_cast<std::size_t>(full.batch * full.heads * cp.query_rows() * d);
  const auto q = pattern(q_n, 1), k = pattern(kv_n, 2), v = pattern(kv_n, 3);
  auto d_o = pattern(q_n, 4);
  // Row r of the rank's [batch, heads, 6, d] tensors is row positions[r] of the full ones.
  const auto full_index = [&](std::size_t cp_index) {
    const auto row = static_cast<std::int64_t>(cp_index) / d % cp.query_rows();
    const auto head = static_cast<std::int64_t>(cp_index) / d / cp.query_rows();
    return static_cast<std::size_t>((head * full.seq + positions[static_cast<std::size_t>(row)]) *
                                        d +
                                    static_cast<std::int64_t>(cp_index) % d);
  };
  std::vector<float> cp_q(cp_q_n), cp_d_o(cp_q_n);
  for (std::size_t i = 0; i < cp_q_n; ++i) {
    cp_q[i] = q[full_index(i)];
    cp_d_o[i] = d_o[full_index(i)];
  }
  std::vector<bool> held(q_n, false);
  for (std::size_t i = 0; i < cp_q_n; ++i) held[full_index(i)] = true;
  for (std::size_t i = 0; i < q_n; ++i) {
    if (!held[i]) d_o[i] = 0;
  }
  std::vector<float> o(q_n), cp_o(cp_q_n);
  cpu_math::causal_attention_forward(full, q.data(), k.data(), v.data(), o.data(), 4);
  std::vector<float> dq(q_n), dk(kv_n), dv(kv_n), cp_dq(cp_q_n), cp_dk(kv_n), cp_dv(kv_n);
  cpu_math::causal_attention_backward(full, q.data(), k.data(), v.data(), d_o.data(), dq.data(),
                                      dk.data(), dv.data(), 4);
  for (std::int64_t block : {1, 2, 3, 64}) {
    INFO("block " << block);
    cpu_math::causal_attention_forward(cp, cp_q.data(), k.data(), v.data(), cp_o.data(), block);
    cpu_math::causal_attention_backward(cp, cp_q.data(), k.data(), v.data(), cp_d_o.data(),
                                        cp_dq.data(), cp_dk.data(), cp_dv.data(), block);
    for (std::size_t i = 0; i < cp_q_n; ++i) {
      INFO("element " << i);
      CHECK(cp_o[i] == Approx(o[full_index(i)]).margin(1e-5));
      CHECK(cp_dq[i] == Approx(dq[full_index(i)]).margin(1e-5));
    }
    for (std::size_t i = 0; i < kv_n; ++i) {
      INFO("kv element " << i);
      CHECK(cp_dk[i] == Approx(dk[i]).margin(1e-5));
      CHECK(cp_dv[i] == Approx(dv[i]).margin(1e-5));
    }
  }
  // The executor's kernel takes the op: it reads the rank's rows, not the sequence's.
  std::unique_ptr<OpKernels> kernels = make_cpu_kernels();
  Op op;
  op.kind = OpKind::kAttention;
  op.name = "sdpa";
  op.attention = cp;
  kernels->run(op);
  op.attention.context_parallel = 5;  // 12 does not split into 10 chunks
  CHECK_THROWS_AS(kernels->run(op), Error);
}

TEST_CASE("cpu memory-bound loop writes a * in + b", "[kernels]") {
  const std::vector<float> in{0, 2, -4};
  std::vector<float> out(3);
  cpu_math::memory_bound(in.data(), out.data(), 3);
  CHECK(out == std::vector<float>{1, 2, -1});
}

TEST_CASE("cpu kernels run a bucket copy of op.bytes", "[kernels]") {
  // memory_op "copy" copies op.bytes (1 MiB: two 1 MiB operands), where any other
  // memory-bound op moves op.bytes in all (half read, half written: two 512 KiB operands).
  auto kernels = make_cpu_kernels();
  Op copy;
  copy.kind = OpKind::kMemoryBound;
  copy.memory_op = "copy";
  copy.bytes = 1 << 20;
  kernels->run(copy);
  CHECK(kernels->workspace_bytes() == 2 * (1 << 20));
  auto other = make_cpu_kernels();
  Op norm = copy;
  norm.memory_op = "rmsnorm_fwd";
  other->run(norm);
  CHECK(other->workspace_bytes() == 1 << 20);
}

namespace {

// Running `op` is refused as bad input naming the op; `ran` is the failure if it runs.
void check_refused(OpKernels& kernels, const Op& op, const std::string& ran) {
  try {
    kernels.run(op);
    FAIL(ran);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kBadInput);
    CHECK(e.where() == op.name);
  }
}

}  // namespace

TEST_CASE("cpu kernels run every op kind and grow their workspace", "[kernels]") {
  auto kernels = make_cpu_kernels();
  CHECK(kernels->device() == "cpu");
  Op gemm;
  gemm.kind = OpKind::kGemm;
  gemm.gemm = {8, 16, 4};
  kernels->run(gemm);
  // A 8x4 + B 4x16 + C 8x16 floats = (32 + 64 + 128) * 4 bytes.
  CHECK(kernels->workspace_bytes() == (32 + 64 + 128) * 4);
  Op attention;
  attention.kind = OpKind::kAttention;
  attention.attention = kShape;
  attention.backward = true;
  kernels->run(attention);
  Op memory;
  memory.kind = OpKind::kMemoryBound;
  memory.bytes = 8000;  // 1000 floats read, 1000 written
  const auto samples = kernels->time(memory, 1, 3);
  CHECK(samples.size() == 3);
  for (double s : samples) CHECK(s >= 0);
  Op collective;
  collective.kind = OpKind::kCollective;
  collective.name = "layers.0.tp_all_reduce";
  check_refused(*kernels, collective, "ran a collective as a kernel");
}

namespace {

// The cuda kernels on device 0, or nullptr with the printed warning `skipped: no GPU`.
std::unique_ptr<OpKernels> cuda_kernels_or_skip(const KernelOptions& options = {}) {
  if (cuda_device_count() == 0) {
    WARN("skipped: no GPU (cuda_device_count() == 0)");
    SUCCEED("skipped: no GPU");
    return nullptr;
  }
  return make_cuda_kernels(options);
}

// Runs the attention of `shape` forward, then backward; returns the backward op.
Op run_attention_forward_and_backward(OpKernels& kernels, const AttentionShape& shape) {
  Op attention;
  attention.kind = OpKind::kAttention;
  attention.attention = shape;
  kernels.run(attention);
  attention.backward = true;
  kernels.run(attention);
  return attention;
}

}  // namespace

TEST_CASE("cuda kernels run a GEMM where a GPU is present", "[kernels][cuda]") {
  auto kernels = cuda_kernels_or_skip();
  if (kernels == nullptr) return;
  Op gemm;
  gemm.kind = OpKind::kGemm;
  gemm.gemm = {256, 256, 256};
  const auto samples = kernels->time(gemm, 2, 3);
  CHECK(samples.size() == 3);
  CHECK(kernels->workspace_bytes() == 3 * 256 * 256 * 2);
  run_attention_forward_and_backward(*kernels, {1, 8, 2, 1024, 64, true});
  kernels->synchronize();
}

// Every path of the cuda kernels once, on shapes that catch a swapped leading dimension or
// an operand sized in the wrong dtype (cuBLAS refuses, or a kernel faults, and the check
// macros throw naming the call): m, n, k all different and not multiples of 8, fp32 and
// bf16, attention over a ragged last query block (1000 = 512 + 488 rows) with GQA and 2
// batch items, a memory-bound op and a bucket copy. Only runs where a GPU is present.
TEST_CASE("cuda kernels run every op kind on ragged shapes where a GPU is present",
          "[kernels][cuda]") {
  auto kernels = cuda_kernels_or_skip({0, nullptr, AttentionKernel::kCublas});
  if (kernels == nullptr) return;
  Op gemm;
  gemm.kind = OpKind::kGemm;
  gemm.gemm = {300, 200, 100};
  kernels->run(gemm);
  gemm.dtype = DType::kFP32;
  kernels->run(gemm);
  gemm.dtype = DType::kFP8;  // runs as bf16 (kernels.hpp)
  gemm.gemm = {77, 129, 4095};
  kernels->run(gemm);
  const Op attention = run_attention_forward_and_backward(*kernels, {2, 8, 2, 1000, 128, true});
  // Context parallelism: 1200 query rows in 2 runs of 600 at positions 0-599 and
  // 1800-2399, each run a block of 512 and one of 88 (a block never crosses a run).
  run_attention_forward_and_backward(*kernels, {2, 8, 2, 2400, 128, true, 2});
  Op memory;
  memory.kind = OpKind::kMemoryBound;
  memory.bytes = 3 * 1000 * 1000 + 4;  // 375000 floats read and written
  kernels->run(memory);
  memory.memory_op = "copy";
  kernels->run(memory);
  kernels->synchronize();
  const auto samples = kernels->time(attention, 1, 2);
  REQUIRE(samples.size() == 2);
  for (const double s : samples) CHECK(s > 0);
  // Attention operands (bf16): q and o 2 x 8 x 1000 x 128 x 2 bytes = 4096000 each, k, v,
  // dk, dv 2 x 2 x 1000 x 128 x 2 = 1024000 each, dq as q, p and dP 4 items x 512 x 1000 x 2
  // = 4096000 each: at least their sum.
  CHECK(kernels->workspace_bytes() >= 3 * 4096000 + 4 * 1024000 + 2 * 4096000);
  CHECK(kernels->attention() == "cuBLAS query blocks (--attention cublas)");
}

// What cuDNN checks before it needs a GPU, on this machine where its library loads: every
// tensor and operation descriptor of the attention graphs finalizes (an operation checks
// its tensors against each other: a matmul refuses A [.., m, k] x B [.., k', n] with k !=
// k', a reduction an output that is not a reduced input, ...). The counts are the graphs
// (fsdptune/cudnn_sdpa.hpp): forward 2 matmuls, scale, 4 mask ops, the softmax's 7;
// backward 24 under GQA (dK and dV summed over each group), 22 without; a context-parallel
// op two graphs, the second's mask 2 operations longer (its rows moved to the bottom right).
TEST_CASE("cuDNN attention graphs finalize every operation without a GPU", "[kernels][cudnn]") {
  if (const std::string why = cudnn_unavailable(); !why.empty()) {
    WARN("skipped: " << why);
    SUCCEED("skipped: no cuDNN");
    return;
  }
  const AttentionShape llama8b{1, 32, 8, 8192, 128};
  CHECK(finalize_sdpa_operations(llama8b, false) == 14);
  CHECK(finalize_sdpa_operations(llama8b, true) == 24);
  const AttentionShape llama70b{1, 64, 8, 8192, 128};
  CHECK(finalize_sdpa_operations(llama70b, true) == 24);
  const AttentionShape heads{2, 8, 8, 1000, 64};
  CHECK(finalize_sdpa_operations(heads, false) == 14);
  CHECK(finalize_sdpa_operations(heads, true) == 22);
  // Context parallelism: chunks 0 and 3 of 4 (2048 rows each), 8B's heads and 70B's.
  const AttentionShape context_parallel{1, 32, 8, 8192, 128, true, 2};
  CHECK(sdpa_shape_unsupported(context_parallel).empty());
  CHECK(finalize_sdpa_operations(context_parallel, false) == 14 + 16);
  CHECK(finalize_sdpa_operations(context_parallel, true) == 24 + 26);
  CHECK(finalize_sdpa_operations({1, 64, 8, 131072, 128, true, 8}, true) == 24 + 26);
  CHECK(finalize_sdpa_operations({2, 8, 8, 1024, 64, true, 4}, false) == 14 + 16);
  // Not expressed: chunks that do not split the sequence, odd head sizes.
  const AttentionShape ragged_chunks{1, 32, 8, 8192, 128, true, 5};
  CHECK_THAT(sdpa_shape_unsupported(ragged_chunks),
             Catch::Contains("context parallelism 5 over 8192 positions"));
  CHECK_THROWS_AS(finalize_sdpa_operations(ragged_chunks, false), Error);
  CHECK_THAT(sdpa_shape_unsupported({1, 4, 4, 64, 100}), Catch::Contains("head_dim 100"));
  CHECK_THAT(sdpa_shape_unsupported({1, 4, 4, 64, 64, false}), Catch::Contains("non-causal"));
  CHECK(sdpa_shape_unsupported(llama8b).empty());
  // Without a GPU there is no handle, and the kernels are told why (auto: cuBLAS then).
  if (cuda_device_count() == 0) {
    std::string why;
    CHECK(make_cudnn_sdpa(nullptr, &why) == nullptr);
    CHECK_THAT(why, Catch::StartsWith("cudnnCreate failed: "));
  }
}

namespace {

// x rounded to bf16 (round to nearest even): what the cuda kernels compute from.
float to_bf16(float x) {
  std::uint32_t bits = 0;
  std::memcpy(&bits, &x, sizeof bits);
  bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000u;
  float rounded = 0;
  std::memcpy(&rounded, &bits, sizeof rounded);
  return rounded;
}

// n values in [-1, 1), deterministic, already bf16.
std::vector<float> bf16_values(std::size_t n, std::uint32_t seed) {
  std::vector<float> values(n);
  std::uint32_t state = seed * 2654435761u + 1;
  for (auto& value : values) {
    state = state * 1664525u + 1013904223u;
    value = to_bf16(static_cast<float>(state >> 8) / static_cast<float>(1 << 23) - 1.0f);
  }
  return values;
}

// Why `got` is not `want` up to bf16 rounding, empty when it is. Every value finite (a
// NaN compares false, so a max over errors alone passes it; a fully masked row is NaN under
// cuDNN's -inf mask), and each row of `row` values (a head's head_dim) within 2 % of its
// own largest |want|, or of 2 % of the tensor's where the row is smaller than that (dQ's
// first row is 0): a tolerance against the tensor's largest value alone is blind to the
// late rows, whose outputs average hundreds of values (|O| ~ 0.1 against ~1 in row 0) --
// a mask one key off there moves them by less than 1 % of the largest.
std::string attention_mismatch(const std::vector<float>& got, const std::vector<float>& want,
                               std::size_t row) {
  if (got.size() != want.size() || row == 0 || want.size() % row != 0) return "sizes differ";
  double largest = 0;
  for (const float value : want) largest = std::max(largest, std::abs(double(value)));
  if (!(largest > 0)) return "the reference is all zero";
  for (std::size_t begin = 0; begin < want.size(); begin += row) {
    double row_largest = 0, worst = 0;
    for (std::size_t i = begin; i < begin + row; ++i) {
      if (!std::isfinite(got[i])) return "value " + std::to_string(i) + " is not finite";
      row_largest = std::max(row_largest, std::abs(double(want[i])));
      worst = std::max(worst, std::abs(double(got[i]) - want[i]));
    }
    const double allowed = 0.02 * std::max(row_largest, 0.02 * largest);
    if (worst > allowed) {
      return "row " + std::to_string(begin / row) + ": max error " + std::to_string(worst) +
             " over " + std::to_string(allowed) + " (row max " + std::to_string(row_largest) +
             ", tensor max " + std::to_string(largest) + ")";
    }
  }
  return "";
}

// The forward as the fused kernels compute it (bf16 probabilities into P V, a bf16
// output), each query row attending `extra_keys` keys past its causal limit: the error a
// mask off by that many keys makes.
std::vector<float> bf16_attention_forward(const AttentionShape& s, const std::vector<float>& q,
                                          const std::vector<float>& k, const std::vector<float>& v,
                                          std::int64_t extra_keys) {
  const auto d = s.head_dim, rows = s.query_rows();
  std::vector<float> o(q.size());
  for (std::int64_t b = 0; b < s.batch; ++b) {
    for (std::int64_t h = 0; h < s.heads; ++h) {
      const std::int64_t kvh = h / (s.heads / s.kv_heads);
      const auto qo = ((b * s.heads + h) * rows) * d;
      const auto ko = ((b * s.kv_heads + kvh) * s.seq) * d;
      for (std::int64_t i = 0; i < rows; ++i) {
        const std::int64_t last = std::min(s.query_position(i) + extra_keys, s.seq - 1);
        std::vector<float> p(static_cast<std::size_t>(last + 1));
        float max_score = -1e30f, sum = 0;
        for (std::int64_t j = 0; j <= last; ++j) {
          float dot = 0;
          for (std::int64_t c = 0; c < d; ++c) dot += q[qo + i * d + c] * k[ko + j * d + c];
          p[j] = dot / std::sqrt(float(d));
          max_score = std::max(max_score, p[j]);
        }
        for (auto& x : p) {
          x = std::exp(x - max_score);
          sum += x;
          x = to_bf16(x);
        }
        for (std::int64_t c = 0; c < d; ++c) {
          float acc = 0;
          for (std::int64_t j = 0; j <= last; ++j) acc += p[j] * v[ko + j * d + c];
          o[qo + i * d + c] = to_bf16(acc / sum);
        }
      }
    }
  }
  return o;
}

}  // namespace

// The criterion the GPU test below holds cuDNN and cuBLAS to, on the cpu: bf16 rounding
// of P and O passes it; a mask one key off, a NaN, a zeroed chunk do not (the tolerance
// against the tensor's largest value let a mask 8 keys off pass on the context-parallel
// shape).
TEST_CASE("the attention check passes bf16 rounding and catches a mask one key off", "[kernels]") {
  for (const AttentionShape& shape :
       {AttentionShape{1, 4, 2, 512, 64, true, 2}, AttentionShape{1, 4, 2, 600, 64}}) {
    INFO("seq " << shape.seq << ", cp " << shape.context_parallel);
    const auto q_n = static_cast<std::size_t>(shape.heads * shape.query_rows() * shape.head_dim);
    const auto kv_n = static_cast<std::size_t>(shape.kv_heads * shape.seq * shape.head_dim);
    const auto q = bf16_values(q_n, 1), k = bf16_values(kv_n, 2), v = bf16_values(kv_n, 3);
    std::vector<float> want(q_n);
    cpu_math::causal_attention_forward(shape, q.data(), k.data(), v.data(), want.data(), 64);
    const auto row = static_cast<std::size_t>(shape.head_dim);
    CHECK(attention_mismatch(bf16_attention_forward(shape, q, k, v, 0), want, row) == "");
    CHECK_THAT(attention_mismatch(bf16_attention_forward(shape, q, k, v, 1), want, row),
               Catch::StartsWith("row "));
    auto broken = want;
    broken[q_n / 2] = std::nanf("");
    CHECK_THAT(attention_mismatch(broken, want, row), Catch::Contains("not finite"));
    std::fill(broken.begin() + static_cast<std::ptrdiff_t>(q_n / 2), broken.end(), 0.0f);
    CHECK_THAT(attention_mismatch(broken, want, row), Catch::StartsWith("row "));
  }
}

// The cuda attention's numbers against the cpu attention (fp32 from the same bf16 inputs):
// the cuBLAS attention over a ragged last query block (600 = 512 + 88 rows), cuDNN's fused
// attention where cuDNN loads, both with GQA and without, and a context-parallel op (rank
// 0's chunks 0 and 3 of 4: 256 query rows at positions 0-127 and 384-511; cuDNN runs two
// graphs and sums their dK, dV). Only runs where a GPU is present.
TEST_CASE("cuda attention matches the cpu attention where a GPU is present", "[kernels][cuda]") {
  if (cuda_kernels_or_skip() == nullptr) return;
  for (const AttentionShape& shape :
       {AttentionShape{1, 4, 2, 600, 64}, AttentionShape{2, 2, 2, 256, 128},
        AttentionShape{1, 4, 2, 512, 64, true, 2}}) {
    const auto q_n =
        static_cast<std::size_t>(shape.batch * shape.heads * shape.query_rows() * shape.head_dim);
    const auto kv_n =
        static_cast<std::size_t>(shape.batch * shape.kv_heads * shape.seq * shape.head_dim);
    const auto q = bf16_values(q_n, 1), k = bf16_values(kv_n, 2), v = bf16_values(kv_n, 3),
               d_o = bf16_values(q_n, 4);
    AttentionOutputs want{std::vector<float>(q_n), std::vector<float>(q_n),
                          std::vector<float>(kv_n), std::vector<float>(kv_n)};
    cpu_math::causal_attention_forward(shape, q.data(), k.data(), v.data(), want.o.data(), 64);
    cpu_math::causal_attention_backward(shape, q.data(), k.data(), v.data(), d_o.data(),
                                        want.dq.data(), want.dk.data(), want.dv.data(), 64);
    std::vector<AttentionKernel> kernels = {AttentionKernel::kCublas};
    if (cudnn_unavailable().empty()) {
      kernels.push_back(AttentionKernel::kCudnn);
    } else {
      WARN("cuDNN's attention not checked: " << cudnn_unavailable());
    }
    if (kernels.size() == 2) {
      // A shape this cuDNN release refuses (its known bugs): checked on cuBLAS alone. The
      // probe has no kernel to sum a context-parallel backward's chunks, which the cuda
      // kernels have: that refusal is not this one.
      std::string why;
      auto sdpa = make_cudnn_sdpa(nullptr, &why);
      REQUIRE(sdpa != nullptr);
      why = sdpa->prepare(shape, false);
      if (const std::string backward = sdpa->prepare(shape, true);
          backward.find("without a kernel to sum") == std::string::npos) {
        why += backward;
      }
      if (!why.empty()) {
        WARN("cuDNN's attention not checked at seq " << shape.seq << ": " << why);
        kernels.pop_back();
      }
    }
    for (const AttentionKernel kernel : kernels) {
      INFO(to_string(kernel) << " attention, heads " << shape.heads << "/" << shape.kv_heads
                             << ", seq " << shape.seq << ", head_dim " << shape.head_dim << ", cp "
                             << shape.context_parallel);
      const AttentionOutputs got = run_cuda_attention(shape, kernel, q, k, v, d_o);
      const auto row = static_cast<std::size_t>(shape.head_dim);
      CHECK(attention_mismatch(got.o, want.o, row) == "");
      CHECK(attention_mismatch(got.dq, want.dq, row) == "");
      CHECK(attention_mismatch(got.dk, want.dk, row) == "");
      CHECK(attention_mismatch(got.dv, want.dv, row) == "");
    }
  }
}

// --attention auto: cuDNN for the ops it has a plan for, cuBLAS for the rest, and the
// record says which ran and why. Only runs where a GPU (and cuDNN) is present.
TEST_CASE("cuda kernels pick cuDNN's attention where it runs the op", "[kernels][cuda]") {
  auto kernels = cuda_kernels_or_skip();
  if (kernels == nullptr) return;
  if (const std::string why = cudnn_unavailable(); !why.empty()) {
    WARN("skipped: " << why);
    return;
  }
  CHECK(kernels->attention().empty());
  run_attention_forward_and_backward(*kernels, {1, 32, 8, 4096, 128, true});
  kernels->synchronize();
  CHECK_THAT(kernels->attention(), Catch::StartsWith("cuDNN 9.") && Catch::Contains("fused SDPA") &&
                                       !Catch::Contains("cuBLAS"));
  // Context parallelism: cuDNN too (two graphs).
  run_attention_forward_and_backward(*kernels, {1, 32, 8, 4096, 128, true, 2});
  kernels->synchronize();
  CHECK_THAT(kernels->attention(), Catch::Contains("fused SDPA") && !Catch::Contains("cuBLAS"));
  // Without a kernel to sum the chunks' key gradients, its backward is refused.
  {
    std::string why;
    auto bare = make_cudnn_sdpa(nullptr, &why);
    REQUIRE(bare != nullptr);
    const AttentionShape context_parallel{1, 32, 8, 4096, 128, true, 2};
    CHECK(bare->prepare(context_parallel, false).empty());
    CHECK_THAT(bare->prepare(context_parallel, true), Catch::Contains("without a kernel to sum"));
    // Each chunk's statistics packed and aligned: 2 x 32 heads x 1024 rows of fp32.
    CHECK(bare->stats_bytes(context_parallel) == 2 * 32 * 1024 * 4);
  }
  // A head size cuDNN does not take: the cuBLAS attention, and the record says why.
  run_attention_forward_and_backward(*kernels, {1, 4, 4, 512, 100, true});
  kernels->synchronize();
  CHECK_THAT(kernels->attention(),
             Catch::Contains("fused SDPA") &&
                 Catch::Contains("; cuBLAS query blocks (cuDNN: head_dim 100"));
  auto strict = make_cuda_kernels({0, nullptr, AttentionKernel::kCudnn});
  Op attention;
  attention.kind = OpKind::kAttention;
  attention.name = "layers.0.attention.sdpa";
  attention.attention = {1, 4, 4, 512, 100, true};
  check_refused(*strict, attention, "--attention cudnn ran an op cuDNN's graph does not express");
}
