// The analytic cost model: costs from a HardwareSpec alone. Formulas and the sources of
// their constants are in docs/hardware.md; the calibration against the public 8xH100
// collective sweep is asserted in tests/core/test_analytic_cost.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "fsdptune/cost_model.hpp"
#include "fsdptune/error.hpp"
#include "fsdptune/units.hpp"

namespace fsdptune {
namespace {

// Output tiles a Hopper/Ampere cuBLAS kernel may pick, with the fraction of the large-tile
// throughput each reaches: smaller tiles reuse each loaded operand fewer times (a 128x256
// tile does 85 FLOPs per byte loaded, 128x128 64, 64x128 43), so they are further from peak.
struct GemmTile {
  std::int64_t rows;
  std::int64_t cols;
  double relative_efficiency;
};
constexpr GemmTile kGemmTiles[] = {
    {128, 256, 1.0}, {256, 128, 1.0}, {128, 128, 0.9}, {64, 128, 0.75}, {64, 64, 0.55},
};
// Pipeline fill and epilogue of one output tile cost about one extra 64-deep K block.
constexpr double kGemmKFill = 64;
// Split-K: when a GEMM has too few output tiles to fill the SMs (a narrow tensor-parallel
// weight gradient, 128x4096 over 8192 tokens, has 16 tiles of 128x256 for 132 SMs), cuBLAS
// splits the K loop over several CTAs per tile (split-K; stream-K on Hopper) and sums their
// fp32 partial tiles. Splits are powers of two up to this many.
constexpr std::int64_t kGemmMaxSplitK = 64;
// Each split writes an fp32 partial of the output and the reduction reads it back.
constexpr double kSplitKPartialBytesPerElement = 2 * 4;
// Flash attention processes queries in blocks of 128 rows per (batch, head).
constexpr std::int64_t kAttentionQueryBlock = 128;
// Attention backward does about 2.5x the matmul work of the forward (FlashAttention-2,
// Dao 2023, section 3.2: five matmuls against two, plus recomputing P).
constexpr double kAttentionBackwardWork = 2.5;

class AnalyticCostModel final : public CostModel {
 public:
  explicit AnalyticCostModel(const HardwareSpec& hardware) : hardware_(hardware) {}

  CostEstimate compute(const Op& op) const override {
    switch (op.kind) {
      case OpKind::kGemm:
        return {gemm_seconds(op), false};
      case OpKind::kAttention:
        return {attention_seconds(op), false};
      case OpKind::kMemoryBound:
        return {memory_bound_seconds(op), false};
      case OpKind::kCollective:
        return collective(op.collective, op.bytes, op.group);
    }
    FSDPTUNE_CHECK(false, "unknown OpKind");
  }

  CostEstimate collective(CollectiveKind kind, std::int64_t bytes, CommGroup group) const override {
    FSDPTUNE_CHECK(bytes >= 0, "negative collective size");
    FSDPTUNE_CHECK(group.ranks >= 1 && group.ranks_per_node >= 1, "empty communicator");
    const std::int64_t ranks = group.ranks;
    if (bytes == 0) return {0, false};
    // Nothing crosses a link: FSDP2 copies the reduce-scatter's input to its output (as
    // NCCL and MPI do over one rank); an all-gather runs in place, an all-reduce too.
    if (ranks == 1)
      return kind == CollectiveKind::kReduceScatter ? copy(bytes) : CostEstimate{0, false};
    const std::int64_t ranks_per_node = std::min(group.ranks_per_node, ranks);
    const std::int64_t nodes = group.nodes();
    const double size_bytes = static_cast<double>(bytes);

    if (kind == CollectiveKind::kSendRecv) {
      // One message between two ranks: one hop, the whole message in one step.
      const bool across_nodes = nodes > 1;
      const double hop_s =
          across_nodes ? hardware_.network_hop_latency_s : hardware_.nvlink_hop_latency_s;
      const double link_bytes_per_s =
          across_nodes ? hardware_.network_bytes_per_s : hardware_.nvlink_busbw_bytes_per_s;
      return {hardware_.collective_base_latency_s + hop_s +
                  size_bytes / (link_bytes_per_s * ramp(size_bytes)),
              false};
    }

    // Ring of `ranks` ranks: n-1 steps, each moving S/n bytes per rank. NCCL's tuning model
    // (src/graph/tuning.cc) charges a base latency per collective plus a per-step latency,
    // network steps (one per node boundary) at the network's.
    const std::int64_t steps = ranks - 1;
    const std::int64_t network_steps = nodes - 1;
    const double latency_s =
        hardware_.collective_base_latency_s +
        static_cast<double>(steps - network_steps) * hardware_.nvlink_hop_latency_s +
        static_cast<double>(network_steps) * hardware_.network_hop_latency_s;
    double busbw_bytes_per_s = hardware_.nvlink_busbw_bytes_per_s;
    if (kind == CollectiveKind::kAllReduce && hardware_.nvlink_allreduce_busbw_bytes_per_s > 0) {
      busbw_bytes_per_s = hardware_.nvlink_allreduce_busbw_bytes_per_s;
    }
    if (nodes > 1) {
      // Hierarchical: the ring's node-boundary links are the NICs, one per GPU of the node
      // in the group (one channel per rail), so once the group spans nodes its bandwidth is
      // the smaller of NVLink's and ranks_per_node NICs'.
      busbw_bytes_per_s = std::min(
          busbw_bytes_per_s, static_cast<double>(ranks_per_node) * hardware_.network_bytes_per_s);
      // At scale the fabric loses bandwidth (congestion across the spine, longer rings):
      // multi-node reduce-scatter busbw falls from ~360 GB/s at 4 nodes to ~260 GB/s at
      // 128 (reference notes), i.e. x(260/360)^(1/5) = x0.937 per doubling beyond 4 nodes.
      const double doublings = std::log2(static_cast<double>(nodes)) - 2.0;
      if (doublings > 0) {
        busbw_bytes_per_s *= std::pow(hardware_.network_efficiency_per_node_doubling, doublings);
      }
    }
    const double per_step_bytes = size_bytes / static_cast<double>(ranks);
    const double effective_bytes_per_s = busbw_bytes_per_s * ramp(per_step_bytes);
    const double ring_fraction = static_cast<double>(ranks - 1) / static_cast<double>(ranks);
    const double phase_s = latency_s + ring_fraction * size_bytes / effective_bytes_per_s;
    // All-reduce = reduce-scatter + all-gather of the same buffer.
    return {kind == CollectiveKind::kAllReduce ? 2 * phase_s : phase_s, false};
  }

  CostEstimate copy(std::int64_t bytes) const override {
    FSDPTUNE_CHECK(bytes >= 0, "negative copy size");
    if (bytes == 0) return {0, false};
    // A device-to-device copy reads and writes every byte.
    return {hardware_.kernel_launch_s + 2.0 * static_cast<double>(bytes) / memory_bytes_per_s(),
            false};
  }

  ContentionFactors contention() const override { return ContentionFactors{}; }
  const HardwareSpec& hardware() const override { return hardware_; }

 private:
  // Fraction of the asymptotic bus bandwidth reached when each ring step moves
  // `step_bytes`: 1 - exp(-(b/b0)^p), fitted to the 8xH100 sweep (docs/hardware.md).
  double ramp(double step_bytes) const {
    return -std::expm1(
        -std::pow(step_bytes / hardware_.busbw_ramp_step_bytes, hardware_.busbw_ramp_exponent));
  }

  double memory_bytes_per_s() const {
    return hardware_.hbm_bytes_per_s * hardware_.memory_bound_efficiency;
  }

  double peak_flops_per_s(DType dtype) const {
    switch (dtype) {
      case DType::kFP8:
        return hardware_.peak_fp8_flops_per_s > 0 ? hardware_.peak_fp8_flops_per_s
                                                  : hardware_.peak_bf16_flops_per_s;
      case DType::kFP32:
        return hardware_.peak_fp32_flops_per_s;
      case DType::kBF16:
      case DType::kFP16:
        return hardware_.peak_bf16_flops_per_s;
    }
    FSDPTUNE_CHECK(false, "unknown DType");
  }

  static double element_bytes(DType dtype) {
    switch (dtype) {
      case DType::kFP8:
        return 1;
      case DType::kBF16:
      case DType::kFP16:
        return 2;
      case DType::kFP32:
        return 4;
    }
    FSDPTUNE_CHECK(false, "unknown DType");
  }

  // Roofline with tile and wave quantization: the kernel runs ceil(tiles * splits / SMs)
  // waves, each as long as one tile's share of the K loop at the SM's share of the calibrated
  // ceiling; split-K adds its partials' traffic and a reduction kernel's launch. The best
  // tile shape and split win (cuBLAS' heuristic picks among several). The memory side reads
  // A and B and writes C once.
  double gemm_seconds(const Op& op) const {
    const GemmShape& shape = op.gemm;
    const double peak = peak_flops_per_s(op.dtype) * hardware_.gemm_efficiency_ceiling;
    if (shape.m <= 0 || shape.n <= 0 || shape.k <= 0) {
      // No shape recorded: the ceiling is all we know.
      return hardware_.kernel_launch_s + std::max(op.flops, 0.0) / peak +
             static_cast<double>(std::max<std::int64_t>(op.bytes, 0)) / memory_bytes_per_s();
    }
    const double sm_peak = peak / static_cast<double>(hardware_.sm_count);
    double compute_s = 0;
    bool first = true;
    const double output_elements = static_cast<double>(shape.m) * static_cast<double>(shape.n);
    for (const GemmTile& tile : kGemmTiles) {
      const std::int64_t tiles = ceil_div(shape.m, tile.rows) * ceil_div(shape.n, tile.cols);
      for (std::int64_t splits = 1; splits <= kGemmMaxSplitK; splits *= 2) {
        const std::int64_t waves = ceil_div(tiles * splits, hardware_.sm_count);
        const double tile_flops = 2.0 * static_cast<double>(tile.rows * tile.cols) *
                                  (static_cast<double>(ceil_div(shape.k, splits)) + kGemmKFill);
        double seconds =
            static_cast<double>(waves) * tile_flops / (sm_peak * tile.relative_efficiency);
        if (splits > 1) {
          seconds += hardware_.kernel_launch_s + static_cast<double>(splits) * output_elements *
                                                     kSplitKPartialBytesPerElement /
                                                     memory_bytes_per_s();
        }
        if (first || seconds < compute_s) compute_s = seconds;
        first = false;
      }
    }
    // An op may stand for several GEMMs of the same shape (e.g. a backward's two): scale by
    // its recorded FLOPs over one GEMM's.
    const double one_gemm_flops = 2.0 * static_cast<double>(shape.m) *
                                  static_cast<double>(shape.n) * static_cast<double>(shape.k);
    const double multiplicity = op.flops > 0 ? op.flops / one_gemm_flops : 1.0;
    const double bytes =
        op.bytes > 0
            ? static_cast<double>(op.bytes)
            : multiplicity * element_bytes(op.dtype) *
                  static_cast<double>(shape.m * shape.k + shape.k * shape.n + shape.m * shape.n);
    const double memory_s = bytes / memory_bytes_per_s();
    return hardware_.kernel_launch_s + std::max(multiplicity * compute_s, memory_s);
  }

  // Flash-style attention. Op::flops follows the model-FLOPs convention (no causal discount;
  // backward = 2x forward); the kernel executes half of the forward's FLOPs when causal and
  // its backward does 2.5x the forward's matmul work.
  double attention_seconds(const Op& op) const {
    const AttentionShape& shape = op.attention;
    const double executed_flops = attention_executed_flops(op);
    // Wave quantization over the query blocks (the rank's rows under context parallelism).
    double wave_efficiency = 1.0;
    const std::int64_t blocks =
        shape.batch * shape.heads *
        ceil_div(std::max<std::int64_t>(shape.query_rows(), 0), kAttentionQueryBlock);
    if (blocks > 0) {
      const std::int64_t waves = ceil_div(blocks, hardware_.sm_count);
      wave_efficiency =
          static_cast<double>(blocks) / static_cast<double>(waves * hardware_.sm_count);
    }
    const double efficiency = op.backward && hardware_.attention_backward_efficiency > 0
                                  ? hardware_.attention_backward_efficiency
                                  : hardware_.attention_efficiency;
    const double compute_s =
        executed_flops / (peak_flops_per_s(op.dtype) * efficiency * wave_efficiency);
    const double memory_s =
        static_cast<double>(std::max<std::int64_t>(op.bytes, 0)) / memory_bytes_per_s();
    // Context-parallel attention is one SDPA call per CP rank's chunk of keys.
    const double launches = static_cast<double>(std::max<std::int64_t>(shape.context_parallel, 1));
    return launches * hardware_.kernel_launch_s + std::max(compute_s, memory_s);
  }

  // Norms, RoPE, SwiGLU, residual adds, embedding gather, loss, optimizer: bound by HBM;
  // their few FLOPs run on the CUDA cores. An unfused eager op pays a launch per kernel.
  double memory_bound_seconds(const Op& op) const {
    const double memory_s =
        static_cast<double>(std::max<std::int64_t>(op.bytes, 0)) / memory_bytes_per_s();
    const double compute_s = std::max(op.flops, 0.0) / hardware_.peak_fp32_flops_per_s;
    return memory_op_kernels(op.memory_op) * hardware_.kernel_launch_s +
           std::max(memory_s, compute_s);
  }

  HardwareSpec hardware_;
};

}  // namespace

void validate_contention(const ContentionFactors& factors, const std::string& where) {
  const struct {
    const char* name;
    double value;
    double low;
    double high;
  } fields[] = {
      {"compute_slowdown_with_comm", factors.compute_slowdown_with_comm, 1,
       kMaxComputeSlowdownWithComm},
      {"comm_share_efficiency", factors.comm_share_efficiency, kMinCommShareEfficiency, 1},
      {"comm_slowdown_with_compute", factors.comm_slowdown_with_compute, 1,
       kMaxCommSlowdownWithCompute},
      {"copy_slowdown_with_compute", factors.copy_slowdown_with_compute, 1, kMaxCopySlowdown},
      {"compute_slowdown_with_copy", factors.compute_slowdown_with_copy, 1, kMaxCopySlowdown}};
  for (const auto& field : fields) {
    if (!(field.value >= field.low && field.value <= field.high)) {
      throw_bad_input(fmt::format("{}.{}", where, field.name),
                      fmt::format("is {}, expected {} to {}", field.value, field.low, field.high));
    }
  }
}

double busbw_factor(CollectiveKind kind, std::int64_t ranks) {
  FSDPTUNE_CHECK(ranks >= 1, "empty communicator");
  const double ring_fraction = static_cast<double>(ranks - 1) / static_cast<double>(ranks);
  switch (kind) {
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter:
      return ring_fraction;
    case CollectiveKind::kAllReduce:
      return 2 * ring_fraction;
    case CollectiveKind::kSendRecv:
      return 1;
  }
  FSDPTUNE_CHECK(false, "unknown CollectiveKind");
}

double attention_executed_flops(const Op& op) {
  const AttentionShape& shape = op.attention;
  double forward_model_flops = op.backward ? op.flops / 2 : op.flops;
  if (forward_model_flops <= 0) {
    // QK^T and PV: 2 matmuls of 2*r*s*d FLOPs per (batch, head) for r query rows.
    forward_model_flops = 4.0 * static_cast<double>(shape.batch * shape.heads) *
                          static_cast<double>(shape.query_rows()) * static_cast<double>(shape.seq) *
                          static_cast<double>(shape.head_dim);
  }
  const double forward_executed_flops = forward_model_flops * (shape.causal ? 0.5 : 1.0);
  return op.backward ? kAttentionBackwardWork * forward_executed_flops : forward_executed_flops;
}

std::unique_ptr<CostModel> make_analytic_cost_model(const HardwareSpec& hardware) {
  return std::make_unique<AnalyticCostModel>(hardware);
}

}  // namespace fsdptune
