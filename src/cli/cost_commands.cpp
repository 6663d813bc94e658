// `fsdptune cost`: the cost of one collective, GEMM or attention kernel under the analytic
// model or a profile, with the achieved bus bandwidth or FLOP/s.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.hpp"
#include "cost_options.hpp"
#include "fsdptune/cost_model.hpp"
#include "fsdptune/error.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/job.hpp"
#include "fsdptune/model.hpp"
#include "fsdptune/profile.hpp"
#include "fsdptune/units.hpp"
#include "fsdptune/workload.hpp"

namespace fsdptune::cli {
namespace {

// `cost --json` (docs/hardware.md "cost --json"): the figures of one kernel or collective,
// with the format's name and version.
void print_cost_json(nlohmann::json json) {
  json["format"] = "fsdptune-cost";
  json["version"] = 1;
  fmt::print("{}", dump_json(json));
}

struct CostCommandOptions {
  CostOptions cost;
  std::string collective;          // --collective
  std::string bytes;               // --bytes (parse_size_bytes)
  std::int64_t gpus = 0;           // --gpus
  std::int64_t gpus_per_node = 0;  // --gpus-per-node; 0: the hardware's
  std::int64_t nodes = 0;          // --nodes; 0: as many as --gpus-per-node fill
  std::string gemm;                // --gemm M,N,K
  std::string attention;           // --attention B,H,S,D
  std::int64_t kv_heads = 0;       // --kv-heads; 0: as many as query heads
  bool noncausal = false;          // --noncausal
  bool backward = false;           // --backward
  std::string dtype = "bf16";      // --dtype
  bool json = false;               // --json
};

// `count` positive integers separated by commas, for `flag` (e.g. "--gemm"); `example` is
// the hint's well-formed value.
std::vector<std::int64_t> parse_dims(const std::string& text, const std::string& flag,
                                     std::size_t count, const std::string& names,
                                     const std::string& example) {
  const std::string hint = fmt::format("write it as {}, e.g. {} {}", names, flag, example);
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
      throw_bad_input(flag + " " + text, fmt::format("'{}' is not a positive integer", part), hint);
    }
    dims.push_back(value);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (dims.size() != count) {
    throw_bad_input(flag + " " + text,
                    fmt::format("expected {} dimensions, got {}", count, dims.size()), hint);
  }
  return dims;
}

GemmShape parse_gemm_shape(const std::string& text) {
  const std::vector<std::int64_t> dims = parse_dims(text, "--gemm", 3, "M,N,K", "8192,4096,4096");
  for (const std::int64_t dim : dims) {
    // A profile's limit on an op's shape (docs/profile-format.md), no smaller than a workload's.
    if (dim > kMaxJobMicrobatchTokens) {
      throw_bad_input("--gemm " + text,
                      fmt::format("larger than fsdptune models: M, N and K at most {}",
                                  kMaxJobMicrobatchTokens));
    }
  }
  return {dims[0], dims[1], dims[2]};
}

// Where a collective's time came from: the analytic model, or the profile's sweep of its
// kind over that group -- at a measured size, between two, or beyond its ends, which the
// sweep's fitted ends extrapolate (found by QA: 16 GiB from a sweep up to 2 GiB was
// labelled "measured").
std::string collective_source(const CostEstimate& estimate, const ResolvedCostModel& resolved,
                              CollectiveKind kind, std::int64_t bytes, const CommGroup& group) {
  if (!estimate.measured) {
    if (!resolved.profile) return "analytic model";
    // Why the profile did not answer (found by QA: "(analytic model)" alone beside a
    // profile measured over other rank counts).
    std::vector<std::string> groups;
    for (const CollectiveSweep& sweep : resolved.profile->collectives) {
      if (sweep.kind != kind) continue;
      // This very group: a sweep of one size answers that size alone (review).
      if (sweep.group.ranks == group.ranks &&
          sweep_ranks_per_node(sweep.group) == sweep_ranks_per_node(group) &&
          sweep.points.size() == 1) {
        return fmt::format(
            "analytic model: the profile measured {} over this group at {} alone, which "
            "answers that size only",
            to_string(kind), format_bytes(sweep.points.front().bytes));
      }
      groups.push_back(fmt::format("{} ({} per node)", counted(sweep.group.ranks, "rank"),
                                   sweep_ranks_per_node(sweep.group)));
    }
    if (groups.empty()) {
      return fmt::format("analytic model: the profile has no {} sweep", to_string(kind));
    }
    return fmt::format("analytic model: the profile measured {} over {} only", to_string(kind),
                       fmt::join(groups, ", "));
  }
  // One rank: nothing to measure but a reduce-scatter's copy, the profile's copy curve
  // (found in review: "measured" for the free all-gather too).
  if (group.ranks == 1) {
    return kind == CollectiveKind::kReduceScatter ? "the profile's copy" : "no time";
  }
  if (!resolved.profile) return "measured";
  std::optional<std::int64_t> smallest, largest;
  bool exact = false;
  for (const CollectiveSweep& sweep : resolved.profile->collectives) {
    if (sweep.kind != kind || sweep.group.ranks != group.ranks ||
        sweep_ranks_per_node(sweep.group) != sweep_ranks_per_node(group)) {
      continue;
    }
    for (const CollectivePoint& point : sweep.points) {
      smallest = std::min(smallest.value_or(point.bytes), point.bytes);
      largest = std::max(largest.value_or(point.bytes), point.bytes);
      exact = exact || point.bytes == bytes;
    }
  }
  if (!largest || exact) return "measured";
  if (bytes > *largest) {
    return fmt::format("extrapolated from the profile's sizes, up to {}", format_bytes(*largest));
  }
  if (bytes < *smallest) {
    return fmt::format("extrapolated from the profile's sizes, from {}", format_bytes(*smallest));
  }
  return "interpolated between the profile's sizes";
}

void run_collective(const CostCommandOptions& options, const ResolvedCostModel& resolved) {
  const CollectiveKind kind = collective_from_string(options.collective, "--collective");
  if (options.bytes.empty()) throw_bad_input("--bytes", "required with --collective");
  // Given, a value <= 0 is refused before (the command's callback).
  if (options.gpus <= 0) {
    throw_bad_input("--gpus", "required with --collective: a positive number of GPUs");
  }
  const std::int64_t bytes = parse_size_bytes(options.bytes, "--bytes");
  for (const auto& [flag, value] :
       {std::pair{"--gpus", options.gpus}, std::pair{"--gpus-per-node", options.gpus_per_node}}) {
    if (value > kMaxJobGpus) {
      throw_bad_input(
          flag, fmt::format("{} is more than fsdptune models (at most {})", value, kMaxJobGpus));
    }
  }
  const std::int64_t per_node =
      options.gpus_per_node > 0 ? options.gpus_per_node : resolved.hardware.gpus_per_node;
  // Before whole nodes, whose hint would offer counts it refuses (review).
  if (kind == CollectiveKind::kSendRecv && options.gpus != 2) {
    throw_bad_input("--gpus", "send_recv is between 2 GPUs");
  }
  // A group split unevenly over nodes (an HSDP replica group across pipeline stages of
  // part-nodes, as a schedule's `nodes` says): --gpus-per-node the fewest a node holds, over
  // --nodes (found by QA: such a schedule's all-reduce could not be priced here).
  const bool uneven = options.nodes > 0;
  if (uneven) {
    const std::int64_t fewest = std::min(per_node, options.gpus);
    if (kind == CollectiveKind::kSendRecv) {
      throw_bad_input("--nodes", "goes with a group's collective, not send_recv");
    }
    if (options.nodes * fewest > options.gpus) {
      throw_bad_input("--nodes",
                      fmt::format("{} nodes holding at least {} of the {} each (--gpus-per-node, "
                                  "with --nodes the fewest a node holds) are more than the GPUs",
                                  options.nodes, fewest, counted(options.gpus, "GPU")),
                      "at most " + counted(options.gpus / fewest, "node"));
    }
  }
  // Whole nodes, as a job's groups are (normalize_job): the model prices every node as
  // holding `per_node` ranks, so 9 GPUs in nodes of 8 were priced as two full nodes (338
  // GB/s where the lone ninth GPU's NIC carries the ring).
  if (!uneven && options.gpus > per_node && options.gpus % per_node != 0) {
    throw_bad_input("--gpus",
                    fmt::format("{} GPUs do not fill nodes of {} (--gpus-per-node{})", options.gpus,
                                per_node, options.gpus_per_node > 0 ? "" : ", the hardware's"),
                    fmt::format("give whole nodes: --gpus a multiple of --gpus-per-node ({})",
                                nearest_multiples(options.gpus, per_node)));
  }
  CommGroup group{options.gpus, std::min(per_node, options.gpus)};
  if (uneven && options.nodes != group.nodes()) group.spanned_nodes = options.nodes;
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
    print_cost_json(json);
    return;
  }
  fmt::print("{} of {} over {} ({}{} per node, {}) on {}: {}\n", to_string(kind),
             format_bytes(bytes), counted(group.ranks, "GPU"), uneven ? "at fewest " : "",
             group.ranks_per_node, counted(group.nodes(), "node"), resolved.hardware.id,
             format_seconds(estimate.seconds));
  const std::string source = collective_source(estimate, resolved, kind, bytes, group);
  if (group.ranks == 1) {
    // Nothing crosses a link: no bus bandwidth to speak of (it printed "busbw 0.0 MB/s").
    fmt::print(
        "  one GPU: nothing crosses a link ({}; {})\n",
        kind == CollectiveKind::kReduceScatter ? "the input is copied to the output" : "in place",
        source);
    return;
  }
  fmt::print("  busbw {}, algbw {} ({})\n", format_bytes_per_s(busbw), format_bytes_per_s(algbw),
             source);
}

// --dtype, refused where the hardware has no tensor cores for it (fp8 on an A100: the
// analytic model would quote the bf16 rate, which simulate and tune refuse as --float8).
DType cost_dtype(const CostCommandOptions& options, const HardwareSpec& hardware) {
  const DType dtype = dtype_from_string(options.dtype, "--dtype");
  if (dtype == DType::kFP8 && !(hardware.peak_fp8_flops_per_s > 0)) {
    throw_bad_input("--dtype",
                    fmt::format("{} has no fp8 tensor cores (peak_fp8_flops_per_s 0)", hardware.id),
                    "price bf16 there, or fp8 on an H100 or H200");
  }
  return dtype;
}

void run_gemm(const CostCommandOptions& options, const ResolvedCostModel& resolved) {
  Op op;
  op.kind = OpKind::kGemm;
  op.name = "gemm";
  op.gemm = parse_gemm_shape(options.gemm);
  op.dtype = cost_dtype(options, resolved.hardware);
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
    print_cost_json(json);
    return;
  }
  fmt::print("gemm m={} n={} k={} {} on {}: {}\n", op.gemm.m, op.gemm.n, op.gemm.k,
             to_string(op.dtype), resolved.hardware.id, format_seconds(estimate.seconds));
  fmt::print("  {} ({})\n", format_flops_per_s(flops_per_s),
             estimate.measured ? "measured" : "analytic model");
}

// Attention as flash kernels run it: in executed FLOPs (attention_executed_flops, the figure
// attention benchmarks report) and in the op's model FLOPs.
void run_attention(const CostCommandOptions& options, const ResolvedCostModel& resolved) {
  const std::vector<std::int64_t> dims =
      parse_dims(options.attention, "--attention", 4, "B,H,S,D (batch, heads, sequence, head dim)",
                 "2,32,8192,128");
  if (options.kv_heads > 0 && dims[1] % options.kv_heads != 0) {
    throw_bad_input("--kv-heads", fmt::format("{} does not divide the {} query heads",
                                              options.kv_heads, dims[1]));
  }
  if (dims[0] > kMaxJobMicrobatchTokens || dims[2] > kMaxJobMicrobatchTokens ||
      dims[0] * dims[2] > kMaxJobMicrobatchTokens || dims[1] > kMaxModelWidth ||
      dims[3] > kMaxModelWidth) {
    throw_bad_input("--attention " + options.attention,
                    fmt::format("larger than fsdptune models: batch x sequence at most {}, "
                                "heads and head dim at most {}",
                                kMaxJobMicrobatchTokens, kMaxModelWidth));
  }
  AttentionShape shape;
  shape.batch = dims[0];
  shape.heads = dims[1];
  shape.kv_heads = options.kv_heads > 0 ? options.kv_heads : dims[1];
  shape.seq = dims[2];
  shape.head_dim = dims[3];
  shape.causal = !options.noncausal;
  const Op op = attention_op_of(shape, cost_dtype(options, resolved.hardware), options.backward);
  const CostEstimate estimate = resolved.model->compute(op);
  const double executed_flops = attention_executed_flops(op);
  const double executed_per_s = executed_flops / estimate.seconds;
  if (options.json) {
    const nlohmann::json json = {{"attention",
                                  {{"batch", shape.batch},
                                   {"heads", shape.heads},
                                   {"kv_heads", shape.kv_heads},
                                   {"seq", shape.seq},
                                   {"head_dim", shape.head_dim},
                                   {"causal", shape.causal},
                                   {"backward", options.backward}}},
                                 {"dtype", to_string(op.dtype)},
                                 {"model_flops", op.flops},
                                 {"executed_flops", executed_flops},
                                 {"hardware", resolved.hardware.id},
                                 {"measured", estimate.measured},
                                 {"time_s", estimate.seconds},
                                 {"executed_flops_per_s", executed_per_s}};
    print_cost_json(json);
    return;
  }
  fmt::print("attention {} b={} h={} kv={} s={} d={} {}{} on {}: {}\n",
             options.backward ? "backward" : "forward", shape.batch, shape.heads, shape.kv_heads,
             shape.seq, shape.head_dim, to_string(op.dtype), shape.causal ? " causal" : "",
             resolved.hardware.id, format_seconds(estimate.seconds));
  fmt::print("  {} executed, {} in model FLOPs ({})\n", format_flops_per_s(executed_per_s),
             format_flops_per_s(op.flops / estimate.seconds),
             estimate.measured ? "measured" : "analytic model");
}

}  // namespace

void register_cost_commands(CLI::App& app) {
  auto options = std::make_shared<CostCommandOptions>();
  CLI::App* cost = app.add_subcommand(
      "cost", "Time of one collective, GEMM or attention kernel, with its bus bandwidth or FLOP/s");
  add_cost_options(cost, options->cost);
  cost->add_option("--collective", options->collective,
                   "all_gather, reduce_scatter, all_reduce or send_recv");
  cost->add_option("--bytes", options->bytes,
                   "Full buffer size as nccl-tests counts it (all-gather output, reduce-scatter "
                   "input): 64MiB, 1GiB, 2e9");
  cost->add_option("--gpus", options->gpus, "GPUs in the collective");
  cost->add_option("--gpus-per-node", options->gpus_per_node,
                   "GPUs per node (default: the hardware's); with --nodes the fewest a node holds");
  cost->add_option("--nodes", options->nodes,
                   "With --collective: the nodes a group split unevenly over them spans (a "
                   "schedule's group `nodes`, an HSDP replica group across pipeline stages of "
                   "part-nodes); default: as many as --gpus-per-node fill");
  cost->add_option("--gemm", options->gemm, "GEMM shape M,N,K: C[M,N] = A[M,K] B[K,N]");
  cost->add_option("--attention", options->attention,
                   "Attention shape B,H,S,D (batch, query heads, sequence, head dim): a flash "
                   "attention kernel, causal unless --noncausal");
  cost->add_option("--kv-heads", options->kv_heads,
                   "With --attention: key/value heads (default: as many as query heads)");
  cost->add_flag("--noncausal", options->noncausal, "With --attention: no causal mask");
  cost->add_flag("--backward", options->backward, "With --attention: the backward kernel");
  cost->add_option("--dtype", options->dtype,
                   "GEMM or attention dtype: bf16 (default), fp16, fp32, fp8");
  cost->add_flag("--json", options->json, "Print one JSON object");
  cost->callback([options, cost] {
    const int given = static_cast<int>(!options->collective.empty()) +
                      static_cast<int>(!options->gemm.empty()) +
                      static_cast<int>(!options->attention.empty());
    if (given != 1) {
      throw_bad_input("--collective/--gemm/--attention",
                      "give exactly one of --collective, --gemm and --attention");
    }
    // A flag of another kind of cost is refused, not ignored.
    const auto refuse_unless = [cost](bool applies, const char* flag, const char* kind) {
      if (!applies && cost->count(flag) > 0) throw_bad_input(flag, kind);
    };
    const bool collective = !options->collective.empty();
    for (const char* flag : {"--bytes", "--gpus", "--gpus-per-node", "--nodes"}) {
      refuse_unless(collective, flag, "only with --collective");
    }
    refuse_unless(!collective, "--dtype", "only with --gemm or --attention");
    for (const char* flag : {"--kv-heads", "--noncausal", "--backward"}) {
      refuse_unless(!options->attention.empty(), flag, "only with --attention");
    }
    // Given, 0 is not "the default".
    if (cost->count("--gpus-per-node") > 0 && options->gpus_per_node <= 0) {
      throw_bad_input("--gpus-per-node", "must be positive");
    }
    if (cost->count("--nodes") > 0 && options->nodes <= 0) {
      throw_bad_input("--nodes", fmt::format("must be > 0, got {}", options->nodes));
    }
    if (cost->count("--gpus") > 0 && options->gpus <= 0) {
      throw_bad_input("--gpus", fmt::format("must be > 0, got {}", options->gpus));
    }
    if (cost->count("--kv-heads") > 0 && options->kv_heads <= 0) {
      throw_bad_input("--kv-heads", "must be positive");
    }
    const ResolvedCostModel resolved = resolve_cost_model(options->cost);
    if (!options->collective.empty()) {
      run_collective(*options, resolved);
    } else if (!options->gemm.empty()) {
      run_gemm(*options, resolved);
    } else {
      run_attention(*options, resolved);
    }
  });
}

}  // namespace fsdptune::cli
