// `fsdptune cost`: the cost of one collective or one GEMM under the analytic model or a
// profile, with the achieved bus bandwidth or FLOP/s.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "cost_options.hpp"
#include "fsdptune/error.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/job.hpp"
#include "fsdptune/units.hpp"
#include "fsdptune/workload.hpp"

namespace fsdptune::cli {
namespace {

struct CostCommandOptions {
  CostOptions cost;
  std::string collective;          // --collective
  std::string bytes;               // --bytes (parse_size_bytes)
  std::int64_t gpus = 0;           // --gpus
  std::int64_t gpus_per_node = 0;  // --gpus-per-node; 0: the hardware's
  std::string gemm;                // --gemm M,N,K
  std::string dtype = "bf16";      // --dtype
  bool json = false;               // --json
};

GemmShape parse_gemm_shape(const std::string& text) {
  std::vector<std::int64_t> dims;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    const std::string part =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    std::size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (part.empty() || used != part.size() || value <= 0) {
      throw_bad_input("--gemm " + text, fmt::format("'{}' is not a positive integer", part),
                      "write the shape as M,N,K, e.g. --gemm 8192,4096,4096");
    }
    dims.push_back(value);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (dims.size() != 3) {
    throw_bad_input("--gemm " + text, fmt::format("expected 3 dimensions, got {}", dims.size()),
                    "write the shape as M,N,K, e.g. --gemm 8192,4096,4096");
  }
  return {dims[0], dims[1], dims[2]};
}

void run_collective(const CostCommandOptions& options, const ResolvedCostModel& resolved) {
  const CollectiveKind kind = collective_from_string(options.collective, "--collective");
  if (options.bytes.empty()) throw_bad_input("--bytes", "required with --collective");
  if (options.gpus <= 0) {
    throw_bad_input("--gpus", "required with --collective: a positive number of GPUs");
  }
  const std::int64_t bytes = parse_size_bytes(options.bytes, "--bytes");
  if (options.gpus_per_node < 0) throw_bad_input("--gpus-per-node", "must be positive");
  const std::int64_t per_node =
      options.gpus_per_node > 0 ? options.gpus_per_node : resolved.hardware.gpus_per_node;
  const CommGroup group{options.gpus, std::min(per_node, options.gpus)};
  if (kind == CollectiveKind::kSendRecv && group.ranks != 2) {
    throw_bad_input("--gpus", "send_recv is between 2 GPUs");
  }
  const CostEstimate estimate = resolved.model->collective(kind, bytes, group);
  const double algbw = estimate.seconds > 0 ? static_cast<double>(bytes) / estimate.seconds : 0;
  const double busbw = algbw * busbw_factor(kind, group.ranks);
  if (options.json) {
    const nlohmann::json json = {
        {"collective", to_string(kind)}, {"bytes", bytes},
        {"gpus", group.ranks},           {"gpus_per_node", group.ranks_per_node},
        {"nodes", group.nodes()},        {"hardware", resolved.hardware.id},
        {"measured", estimate.measured}, {"time_s", estimate.seconds},
        {"algbw_bytes_per_s", algbw},    {"busbw_bytes_per_s", busbw}};
    fmt::print("{}", dump_json(json));
    return;
  }
  fmt::print("{} of {} over {} GPUs ({} per node, {} node{}) on {}: {}\n", to_string(kind),
             format_bytes(bytes), group.ranks, group.ranks_per_node, group.nodes(),
             group.nodes() == 1 ? "" : "s", resolved.hardware.id, format_seconds(estimate.seconds));
  fmt::print("  busbw {:.1f} GB/s, algbw {:.1f} GB/s ({})\n", busbw / 1e9, algbw / 1e9,
             estimate.measured ? "measured" : "analytic model");
}

void run_gemm(const CostCommandOptions& options, const ResolvedCostModel& resolved) {
  Op op;
  op.kind = OpKind::kGemm;
  op.name = "gemm";
  op.gemm = parse_gemm_shape(options.gemm);
  op.dtype = dtype_from_string(options.dtype, "--dtype");
  op.flops = 2.0 * static_cast<double>(op.gemm.m) * static_cast<double>(op.gemm.n) *
             static_cast<double>(op.gemm.k);
  op.bytes = static_cast<std::int64_t>(bytes_per_element(op.dtype)) *
             (op.gemm.m * op.gemm.k + op.gemm.k * op.gemm.n + op.gemm.m * op.gemm.n);
  const CostEstimate estimate = resolved.model->compute(op);
  const double flops_per_s = op.flops / estimate.seconds;
  if (options.json) {
    const nlohmann::json json = {{"gemm", {{"m", op.gemm.m}, {"n", op.gemm.n}, {"k", op.gemm.k}}},
                                 {"dtype", to_string(op.dtype)},
                                 {"flops", op.flops},
                                 {"hardware", resolved.hardware.id},
                                 {"measured", estimate.measured},
                                 {"time_s", estimate.seconds},
                                 {"flops_per_s", flops_per_s}};
    fmt::print("{}", dump_json(json));
    return;
  }
  fmt::print("gemm m={} n={} k={} {} on {}: {}\n", op.gemm.m, op.gemm.n, op.gemm.k,
             to_string(op.dtype), resolved.hardware.id, format_seconds(estimate.seconds));
  fmt::print("  {:.1f} TFLOP/s ({})\n", flops_per_s / 1e12,
             estimate.measured ? "measured" : "analytic model");
}

}  // namespace

void register_cost_commands(CLI::App& app) {
  auto options = std::make_shared<CostCommandOptions>();
  CLI::App* cost = app.add_subcommand(
      "cost", "Time of one collective or one GEMM, with its bus bandwidth or FLOP/s");
  add_cost_options(cost, options->cost);
  cost->add_option("--collective", options->collective,
                   "all_gather, reduce_scatter, all_reduce or send_recv");
  cost->add_option("--bytes", options->bytes,
                   "Full buffer size as nccl-tests counts it (all-gather output, reduce-scatter "
                   "input): 64MiB, 1GiB, 2e9");
  cost->add_option("--gpus", options->gpus, "GPUs in the collective");
  cost->add_option("--gpus-per-node", options->gpus_per_node,
                   "GPUs per node (default: the hardware's)");
  cost->add_option("--gemm", options->gemm, "GEMM shape M,N,K: C[M,N] = A[M,K] B[K,N]");
  cost->add_option("--dtype", options->dtype, "GEMM dtype: bf16 (default), fp16, fp32, fp8");
  cost->add_flag("--json", options->json, "Print one JSON object");
  cost->callback([options] {
    const bool collective = !options->collective.empty();
    const bool gemm = !options->gemm.empty();
    if (collective == gemm) {
      throw_bad_input("--collective/--gemm", "give exactly one of --collective and --gemm");
    }
    const ResolvedCostModel resolved = resolve_cost_model(options->cost);
    if (collective) {
      run_collective(*options, resolved);
    } else {
      run_gemm(*options, resolved);
    }
  });
}

}  // namespace fsdptune::cli
