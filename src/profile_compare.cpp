// A profile against a cost model, entry by entry (profile_compare.hpp).
#include "fsdptune/profile_compare.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "fsdptune/units.hpp"

namespace fsdptune {
namespace {

double relative_error(double model_s, double measured_s) {
  return (model_s - measured_s) / measured_s;
}

// The summary group of a compute op: GEMMs by dtype, attention by direction, memory-bound
// ops by kernel -- the analytic model has one efficiency per group, so that is where its
// error shows.
std::string group_of(const Op& op) {
  switch (op.kind) {
    case OpKind::kGemm:
      return "gemm " + to_string(op.dtype);
    case OpKind::kAttention:
      return op.backward ? "attention_bwd" : "attention_fwd";
    case OpKind::kMemoryBound:
      return "memory " + op.memory_op;
    case OpKind::kCollective:
      return "collective " + to_string(op.collective);
  }
  return "other";
}

double median_of(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t middle = values.size() / 2;
  return values.size() % 2 == 1 ? values[middle] : 0.5 * (values[middle - 1] + values[middle]);
}

std::string percent(double relative) { return fmt::format("{:+.1f}%", 100.0 * relative); }

}  // namespace

ProfileComparison compare_profile(const Profile& profile, const CostModel& model) {
  ProfileComparison comparison;
  comparison.profile_hardware = profile.hardware;
  comparison.model_hardware = model.hardware().id;
  struct Group {
    std::vector<double> abs_errors;
    double measured_s = 0;
    double model_s = 0;
  };
  std::map<std::string, Group> groups;
  auto add = [&](const std::string& name, double measured_s, double model_s) {
    Group& group = groups[name];
    group.abs_errors.push_back(std::abs(relative_error(model_s, measured_s)));
    group.measured_s += measured_s;
    group.model_s += model_s;
  };

  for (const ComputeEntry& entry : profile.compute) {
    OpComparison row;
    row.signature = entry.signature;
    row.op = entry.op;
    row.samples = static_cast<std::int64_t>(entry.samples_s.size());
    row.measured_s = median_seconds(entry.samples_s);
    // A "copy" entry is a bucket copy: the model prices it with copy(), as the simulator
    // does, not as a memory-bound kernel of `bytes` traffic.
    const bool copy = entry.op.kind == OpKind::kMemoryBound && entry.op.memory_op == "copy";
    row.model_s = copy ? model.copy(entry.op.bytes).seconds : model.compute(entry.op).seconds;
    row.relative_error = relative_error(row.model_s, row.measured_s);
    // Attention in the FLOPs its kernels execute (a causal mask's half, flash's backward
    // recompute), as `cost --attention` quotes it: its model FLOPs count the causal half
    // twice and read above the peak (found probing: 1221.7 TFLOP/s on an H100).
    // A copy's traffic is what it reads and writes, twice its bytes, as copy() prices it
    // (found by QA: its GB/s was half the HBM traffic the other memory-bound rows show).
    const double work = entry.op.kind == OpKind::kGemm        ? entry.op.flops
                        : entry.op.kind == OpKind::kAttention ? attention_executed_flops(entry.op)
                        : copy ? 2.0 * static_cast<double>(entry.op.bytes)
                               : static_cast<double>(entry.op.bytes);
    row.measured_rate = work / row.measured_s;
    add(group_of(entry.op), row.measured_s, row.model_s);
    comparison.ops.push_back(std::move(row));
  }
  for (const CollectiveSweep& sweep : profile.collectives) {
    for (const CollectivePoint& point : sweep.points) {
      CollectiveComparison row;
      row.kind = sweep.kind;
      row.group = sweep.group;
      row.bytes = point.bytes;
      row.measured_s = median_seconds(point.samples_s);
      row.model_s = model.collective(sweep.kind, point.bytes, sweep.group).seconds;
      row.relative_error = relative_error(row.model_s, row.measured_s);
      row.measured_busbw_bytes_per_s = static_cast<double>(point.bytes) / row.measured_s *
                                       busbw_factor(sweep.kind, sweep.group.ranks);
      add(fmt::format("{} x{} ({} per node)", to_string(sweep.kind), sweep.group.ranks,
                      sweep.group.ranks_per_node),
          row.measured_s, row.model_s);
      comparison.collectives.push_back(row);
    }
  }
  for (auto& [name, group] : groups) {
    comparison.summaries.push_back({name, static_cast<std::int64_t>(group.abs_errors.size()),
                                    median_of(group.abs_errors), group.measured_s, group.model_s});
  }
  return comparison;
}

nlohmann::json profile_comparison_to_json(const ProfileComparison& comparison) {
  nlohmann::json ops = nlohmann::json::array();
  for (const OpComparison& row : comparison.ops) {
    ops.push_back({{"signature", row.signature},
                   {"name", row.op.name},
                   {"samples", row.samples},
                   {"measured_s", row.measured_s},
                   {"model_s", row.model_s},
                   {"relative_error", row.relative_error},
                   {"measured_rate", row.measured_rate},
                   {"rate_unit", row.op.kind == OpKind::kMemoryBound ? "bytes/s" : "flops/s"}});
  }
  nlohmann::json collectives = nlohmann::json::array();
  for (const CollectiveComparison& row : comparison.collectives) {
    collectives.push_back({{"kind", to_string(row.kind)},
                           {"ranks", row.group.ranks},
                           {"ranks_per_node", row.group.ranks_per_node},
                           {"bytes", row.bytes},
                           {"measured_s", row.measured_s},
                           {"model_s", row.model_s},
                           {"relative_error", row.relative_error},
                           {"measured_busbw_bytes_per_s", row.measured_busbw_bytes_per_s}});
  }
  nlohmann::json summaries = nlohmann::json::array();
  for (const ComparisonSummary& row : comparison.summaries) {
    summaries.push_back({{"group", row.group},
                         {"rows", row.rows},
                         {"median_abs_error", row.median_abs_error},
                         {"measured_s", row.measured_s},
                         {"model_s", row.model_s}});
  }
  return {{"format", "fsdptune-profile-comparison"},
          {"version", 1},
          {"profile_hardware", comparison.profile_hardware},
          {"model_hardware", comparison.model_hardware},
          {"ops", ops},
          {"collectives", collectives},
          {"summaries", summaries}};
}

void print_profile_comparison(std::ostream& out, const ProfileComparison& comparison,
                              bool markdown) {
  // One row format for both: markdown adds the pipes and a header rule.
  auto row = [&](const std::vector<std::string>& cells) {
    if (markdown) {
      std::string line = "|";
      for (const auto& cell : cells) line += " " + cell + " |";
      fmt::print(out, "{}\n", line);
      return;
    }
    fmt::print(out, "{:<58} {:>8} {:>11} {:>11} {:>8} {:>16}\n", cells[0], cells[1], cells[2],
               cells[3], cells[4], cells[5]);
  };
  auto rule = [&] {
    if (markdown) fmt::print(out, "|---|---:|---:|---:|---:|---:|\n");
  };
  fmt::print(out, "profile measured on {} vs the model of {}\n\n", comparison.profile_hardware,
             comparison.model_hardware);
  if (!comparison.ops.empty()) {
    row({"compute op", "samples", "measured", "model", "error", "achieved"});
    rule();
    for (const OpComparison& op : comparison.ops) {
      const bool memory = op.op.kind == OpKind::kMemoryBound;
      row({op.signature, std::to_string(op.samples), format_seconds(op.measured_s),
           format_seconds(op.model_s), percent(op.relative_error),
           memory ? fmt::format("{:.0f} GB/s", op.measured_rate * 1e-9)
                  : format_flops_per_s(op.measured_rate)});
    }
    fmt::print(out, "\n");
  }
  if (!comparison.collectives.empty()) {
    row({"collective", "ranks", "measured", "model", "error", "busbw"});
    rule();
    for (const CollectiveComparison& c : comparison.collectives) {
      row({fmt::format("{} {}", to_string(c.kind), format_bytes(c.bytes)),
           fmt::format("{}/{}", c.group.ranks, c.group.ranks_per_node),
           format_seconds(c.measured_s), format_seconds(c.model_s), percent(c.relative_error),
           // In the unit its size reads in, as cost prints it (found by QA: 1 KiB's 28.9 MB/s
           // read 0.0 GB/s).
           format_bytes_per_s(c.measured_busbw_bytes_per_s)});
    }
    fmt::print(out, "\n");
  }
  row({"group", "rows", "measured", "model", "error", "median |error|"});
  rule();
  for (const ComparisonSummary& s : comparison.summaries) {
    row({s.group, std::to_string(s.rows), format_seconds(s.measured_s), format_seconds(s.model_s),
         percent(relative_error(s.model_s, s.measured_s)),
         fmt::format("{:.1f}%", 100.0 * s.median_abs_error)});
  }
}

}  // namespace fsdptune
