// The hardware-free parts of the collectors: what to measure and how to reduce samples.
#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "fsdptune/collector.hpp"
#include "fsdptune/error.hpp"
#include "fsdptune/units.hpp"

namespace fsdptune {

void validate_collector_options(const CollectorOptions& options) {
  // At most 100,000 of each per op and size: far beyond any useful median, and a run that
  // ends (found by QA: --reps 99999999999 was taken and ran without output until killed).
  constexpr std::int64_t kMaxRepetitions = 100000;
  if (options.reps < 1 || options.reps > kMaxRepetitions) {
    throw_bad_input("--reps",
                    fmt::format("must be 1 to {}, got {}", kMaxRepetitions, options.reps));
  }
  if (options.warmup < 0 || options.warmup > kMaxRepetitions) {
    throw_bad_input("--warmup",
                    fmt::format("must be 0 to {}, got {}", kMaxRepetitions, options.warmup));
  }
  for (const std::int64_t bytes : options.collective_sizes_bytes) {
    if (bytes <= 0) throw_bad_input("--sizes", fmt::format("size {} is not positive", bytes));
  }
  if (options.ranks_per_node < 0) throw_bad_input("--ranks-per-node", "must not be negative");
  // Waits are polled at up to 1 ms: a tenth of a second is the least worth asking for.
  if (!(options.timeout_s >= 0.1) || !std::isfinite(options.timeout_s)) {
    throw_bad_input("--timeout", fmt::format("must be a finite number of seconds >= 0.1, got {}",
                                             options.timeout_s));
  }
  for (std::size_t i = 0; i < options.collective_kinds.size(); ++i) {
    const CollectiveKind kind = options.collective_kinds[i];
    if (kind == CollectiveKind::kSendRecv) {
      throw_bad_input("--collectives", "send_recv is not swept",
                      "use all_gather, reduce_scatter, all_reduce");
    }
    // A profile holds one sweep per kind and group.
    if (std::find(options.collective_kinds.begin(), options.collective_kinds.begin() + i, kind) !=
        options.collective_kinds.begin() + i) {
      throw_bad_input("--collectives", fmt::format("{} given twice", to_string(kind)));
    }
  }
}

std::vector<Op> distinct_compute_ops(const Workload& workload) {
  std::vector<Op> ops;
  std::set<std::string> seen;
  auto visit = [&](const std::vector<Op>& list) {
    for (const auto& op : list) {
      if (op.kind == OpKind::kCollective) continue;
      if (seen.insert(op.signature()).second) ops.push_back(op);
    }
  };
  for (const auto& unit : workload.units) {
    visit(unit.forward_ops);
    visit(unit.recompute_ops);
    visit(unit.backward_ops);
  }
  visit(workload.optimizer_ops);
  return ops;
}

std::vector<Op> bucket_copy_ops(const Workload& workload, std::int64_t max_bytes) {
  auto is_power_of_two = [](std::int64_t v) { return v > 0 && (v & (v - 1)) == 0; };
  FSDPTUNE_CHECK(is_power_of_two(max_bytes), fmt::format("bucket_copy_ops max {}", max_bytes));
  std::int64_t smallest_bytes = 0;
  std::int64_t all_gradient_bytes = 0;
  for (const Unit& unit : workload.units) {
    const std::int64_t sharded = unit.sharded_bytes();
    if (sharded > 0 && (smallest_bytes == 0 || sharded < smallest_bytes)) smallest_bytes = sharded;
    all_gradient_bytes += unit.gradient_bytes();
  }
  std::int64_t low = kKiB;  // below 1 KiB a copy is its launch / call overhead
  while (low * 2 <= smallest_bytes && low < max_bytes) low *= 2;
  std::int64_t high = low;
  while (high < all_gradient_bytes && high < max_bytes) high *= 2;
  std::vector<Op> ops;
  for (const std::int64_t bytes : power_of_two_sizes(low, high)) {
    Op op;
    op.kind = OpKind::kMemoryBound;
    op.name = "bucket_copy";
    op.memory_op = "copy";
    op.bytes = bytes;
    ops.push_back(std::move(op));
  }
  return ops;
}

std::vector<Op> ops_to_measure(const Workload& workload, std::int64_t max_copy_bytes) {
  std::vector<Op> ops = distinct_compute_ops(workload);
  for (Op& op : bucket_copy_ops(workload, max_copy_bytes)) ops.push_back(std::move(op));
  return ops;
}

std::vector<std::int64_t> power_of_two_sizes(std::int64_t min_bytes, std::int64_t max_bytes) {
  auto is_power_of_two = [](std::int64_t v) { return v > 0 && (v & (v - 1)) == 0; };
  FSDPTUNE_CHECK(is_power_of_two(min_bytes) && is_power_of_two(max_bytes) && min_bytes <= max_bytes,
                 fmt::format("power_of_two_sizes({}, {})", min_bytes, max_bytes));
  std::vector<std::int64_t> sizes;
  for (std::int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) sizes.push_back(bytes);
  return sizes;
}

std::vector<std::int64_t> default_collective_sizes(const std::string& backend) {
  // GPUs: nccl-tests' usual 1 KiB .. 4 GiB covers latency-bound through bandwidth-bound
  // (an 8B bucket all-gather is ~1-3 GiB). CPUs: the tiny models' buckets are well below
  // 64 MiB, and larger sizes would dominate a 2-core machine's run time.
  if (backend == "cuda") return power_of_two_sizes(kKiB, 4 * kGiB);
  return power_of_two_sizes(kKiB, 64 * kMiB);
}

std::int64_t collective_buffer_bytes(std::int64_t bytes, std::int64_t ranks) {
  FSDPTUNE_CHECK(bytes > 0 && ranks > 0, "collective_buffer_bytes of a non-positive size");
  return round_up(bytes, 4 * ranks);
}

std::vector<std::int64_t> collective_sweep_bytes(const CollectorOptions& options,
                                                 const std::string& backend, std::int64_t ranks) {
  std::vector<std::int64_t> sizes = options.collective_sizes_bytes.empty()
                                        ? default_collective_sizes(backend)
                                        : options.collective_sizes_bytes;
  for (std::int64_t& bytes : sizes) bytes = collective_buffer_bytes(bytes, ranks);
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  return sizes;
}

ContentionFactors contention_from_measurements(double gemm_alone_s, double gemm_with_comm_s,
                                               double single_collective_s,
                                               double collective_pair_s) {
  FSDPTUNE_CHECK(
      gemm_alone_s > 0 && gemm_with_comm_s > 0 && single_collective_s > 0 && collective_pair_s > 0,
      "contention measurements must be positive");
  ContentionFactors factors;
  factors.compute_slowdown_with_comm = std::max(1.0, gemm_with_comm_s / gemm_alone_s);
  factors.comm_share_efficiency = std::min(1.0, 2.0 * single_collective_s / collective_pair_s);
  return factors;
}

const ComputeEntry* largest_gemm(const std::vector<ComputeEntry>& compute) {
  const ComputeEntry* gemm = nullptr;
  for (const auto& entry : compute) {
    if (entry.op.kind == OpKind::kGemm && (gemm == nullptr || entry.op.flops > gemm->op.flops)) {
      gemm = &entry;
    }
  }
  return gemm;
}

const ComputeEntry* largest_bucket_copy(const std::vector<ComputeEntry>& compute) {
  const ComputeEntry* copy = nullptr;
  for (const auto& entry : compute) {
    if (entry.op.kind == OpKind::kMemoryBound && entry.op.memory_op == "copy" &&
        (copy == nullptr || entry.op.bytes > copy->op.bytes)) {
      copy = &entry;
    }
  }
  return copy;
}

double slowdown_from_measurements(double alone_s, double beside_s, double max_slowdown) {
  FSDPTUNE_CHECK(alone_s > 0 && beside_s > 0, "slowdown measurements must be positive");
  return std::clamp(beside_s / alone_s, 1.0, max_slowdown);
}

std::string slowdown_ratio_text(double ratio, double max_slowdown) {
  const double factor = std::clamp(ratio, 1.0, max_slowdown);
  if (factor == ratio) return fmt::format("{:.2f}x", ratio);
  return fmt::format("{:.2f}x, taken as {:g}", ratio, factor);
}

namespace {

struct SweepFit {
  double latency_s = 0;
  double busbw_bytes_per_s = 0;
};

// Latency and bus bandwidth of a sweep from the medians of its points.
std::optional<SweepFit> fit_sweep(const Profile& profile, CollectiveKind kind) {
  for (const auto& sweep : profile.collectives) {
    if (sweep.kind != kind || sweep.points.size() < 2) continue;
    std::vector<std::int64_t> bytes;
    std::vector<double> seconds;
    for (const auto& point : sweep.points) {
      bytes.push_back(point.bytes);
      seconds.push_back(median_seconds(point.samples_s));
    }
    const LatencyBandwidthFit fit = fit_latency_bandwidth(bytes, seconds);
    // Times that do not grow with size (bandwidth +inf): the largest point's algbw.
    const double algbw_bytes_per_s = std::isfinite(fit.bytes_per_s)
                                         ? fit.bytes_per_s
                                         : static_cast<double>(bytes.back()) / seconds.back();
    return SweepFit{std::max(0.0, fit.latency_s),
                    algbw_bytes_per_s * busbw_factor(kind, sweep.group.ranks)};
  }
  return std::nullopt;
}

}  // namespace

HardwareSpec cpu_hardware_spec(const Profile& profile, const HostFacts& host) {
  double gemm_flops_per_s = 0;
  double memory_bytes_per_s = 0;
  // The memory rate is that of the largest memory-bound op, a kernel op before a bucket
  // copy (memcpy's streaming stores skip the read a loop's stores make): what falls back
  // to this rate is an op of a size the profile lacks, mostly a larger one (an optimizer
  // step over another split of the model), which the caches help no more than the
  // largest measured. The fastest op (a small one, in cache) priced such a step twice as
  // fast as it runs (docs/profiling.md "The CPU profile").
  std::pair<bool, double> largest_memory{false, 0};  // (a kernel op, traffic bytes)
  for (const auto& entry : profile.compute) {
    const double seconds = median_seconds(entry.samples_s);
    if (entry.op.kind == OpKind::kGemm && entry.op.flops > 0) {
      gemm_flops_per_s = std::max(gemm_flops_per_s, entry.op.flops / seconds);
    } else if (entry.op.kind == OpKind::kMemoryBound && entry.op.bytes > 0) {
      // A copy's `bytes` is the size copied: it reads and writes each byte.
      const bool copy = entry.op.memory_op == "copy";
      const double traffic_bytes = static_cast<double>(entry.op.bytes) * (copy ? 2 : 1);
      const std::pair<bool, double> rank{!copy, traffic_bytes};
      if (rank > largest_memory) {
        largest_memory = rank;
        memory_bytes_per_s = traffic_bytes / seconds;
      }
    }
  }
  if (gemm_flops_per_s <= 0 || memory_bytes_per_s <= 0) {
    throw_runtime("--hardware-out",
                  "the profile has no GEMM or no memory-bound op to derive the host's rates from");
  }
  HardwareSpec spec;
  spec.id = host.id;
  spec.name = host.name;
  spec.peak_bf16_flops_per_s = gemm_flops_per_s;
  spec.peak_fp32_flops_per_s = gemm_flops_per_s;
  spec.peak_fp8_flops_per_s = 0;
  spec.gemm_efficiency_ceiling = 1.0;
  spec.attention_efficiency = 1.0;
  spec.sm_count = 1;
  spec.hbm_bytes_per_s = memory_bytes_per_s;
  spec.memory_bound_efficiency = 1.0;
  spec.hbm_bytes = host.memory_bytes / std::max<std::int64_t>(1, host.ranks_per_node);
  spec.memory_reserve_bytes = 0;
  spec.gpus_per_node = std::max<std::int64_t>(1, host.ranks_per_node);
  spec.kernel_launch_s = 0;
  const auto all_gather = fit_sweep(profile, CollectiveKind::kAllGather);
  const SweepFit gather = all_gather ? *all_gather : SweepFit{10e-6, memory_bytes_per_s / 2};
  spec.collective_base_latency_s = gather.latency_s;
  spec.nvlink_busbw_bytes_per_s = gather.busbw_bytes_per_s;
  spec.nvlink_bytes_per_s = gather.busbw_bytes_per_s;
  spec.network_bytes_per_s = gather.busbw_bytes_per_s;
  if (const auto all_reduce = fit_sweep(profile, CollectiveKind::kAllReduce)) {
    spec.nvlink_allreduce_busbw_bytes_per_s = all_reduce->busbw_bytes_per_s;
    // The hardware format bounds every bus bandwidth by the link's.
    spec.nvlink_bytes_per_s = std::max(spec.nvlink_bytes_per_s, all_reduce->busbw_bytes_per_s);
  }
  spec.nvlink_hop_latency_s = 0;
  spec.network_hop_latency_s = 0;
  spec.busbw_ramp_step_bytes = 1;
  spec.busbw_ramp_exponent = 1;
  return spec;
}

}  // namespace fsdptune
