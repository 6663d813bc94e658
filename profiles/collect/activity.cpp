#include "activity.hpp"

#include <algorithm>
#include <unordered_map>

#include <fmt/format.h>

#include "fsdptune/error.hpp"

namespace fsdptune::collect {

std::uint64_t encode_label(MeasurementLabel label) {
  return ((static_cast<std::uint64_t>(label.measurement) + 1) << 32) | label.rep;
}

std::optional<MeasurementLabel> decode_label(std::uint64_t external_id) {
  const std::uint64_t high = external_id >> 32;
  if (high == 0) return std::nullopt;
  return MeasurementLabel{static_cast<std::uint32_t>(high - 1),
                          static_cast<std::uint32_t>(external_id & 0xffffffffu)};
}

namespace {

// The window containing `time_ns`, if any. Windows of one collector never overlap (it
// issues one repetition at a time from one thread), so the first match is the match.
std::optional<MeasurementLabel> window_label(const std::vector<LaunchWindow>& windows,
                                             std::uint64_t time_ns) {
  for (const auto& window : windows) {
    if (window.begin_ns <= time_ns && time_ns < window.end_ns) return window.label;
  }
  return std::nullopt;
}

}  // namespace

CorrelatedKernels correlate_kernels(const std::vector<ActivityRecord>& records,
                                    const std::vector<LaunchWindow>& windows) {
  // Pass 1: what each correlation id is known to belong to. An external-correlation record
  // names the label directly; an API record gives the host time of the launch.
  std::unordered_map<std::uint32_t, std::uint64_t> external_by_correlation;
  std::unordered_map<std::uint32_t, std::uint64_t> api_start_by_correlation;
  for (const auto& record : records) {
    if (record.kind == ActivityKind::kExternalCorrelation) {
      external_by_correlation[record.correlation_id] = record.external_id;
    } else if (record.kind == ActivityKind::kRuntimeApi ||
               record.kind == ActivityKind::kDriverApi) {
      api_start_by_correlation.emplace(record.correlation_id, record.start_ns);
    }
  }
  // Pass 2: every kernel to its label.
  CorrelatedKernels result;
  for (const auto& record : records) {
    if (record.kind != ActivityKind::kKernel) continue;
    if ((record.start_ns == 0 && record.end_ns == 0) || record.end_ns < record.start_ns) {
      ++result.untimed_kernels;
      continue;
    }
    std::optional<MeasurementLabel> label;
    if (const auto external = external_by_correlation.find(record.correlation_id);
        external != external_by_correlation.end()) {
      label = decode_label(external->second);
    }
    if (!label) {
      if (const auto api = api_start_by_correlation.find(record.correlation_id);
          api != api_start_by_correlation.end()) {
        label = window_label(windows, api->second);
      }
    }
    if (!label) {
      ++result.unlabeled_kernels;
      continue;
    }
    result.by_label[*label].push_back(
        KernelSpan{record.name, record.start_ns, record.end_ns, record.stream_id});
  }
  for (auto& [label, kernels] : result.by_label) {
    std::sort(kernels.begin(), kernels.end(), [](const KernelSpan& a, const KernelSpan& b) {
      return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns < b.end_ns;
    });
  }
  return result;
}

KernelSpan envelope(const std::vector<KernelSpan>& kernels, const std::string& name) {
  FSDPTUNE_CHECK(!kernels.empty(), "envelope of no kernels");
  KernelSpan out{name, kernels.front().start_ns, kernels.front().end_ns, kernels.front().stream_id};
  for (const auto& kernel : kernels) {
    out.start_ns = std::min(out.start_ns, kernel.start_ns);
    out.end_ns = std::max(out.end_ns, kernel.end_ns);
  }
  return out;
}

double span_seconds(const std::vector<KernelSpan>& kernels) {
  const KernelSpan all = envelope(kernels, "");
  return static_cast<double>(all.end_ns - all.start_ns) * 1e-9;
}

namespace {

constexpr std::string_view kNcclKernelPrefixes[] = {"ncclDevKernel_", "ncclKernel_"};

// The part of the name after the NCCL kernel prefix, or nullopt when it is not one. The
// prefix may follow a return type in demangled names ("void ncclKernel_...").
std::optional<std::string_view> nccl_kernel_suffix(std::string_view name) {
  for (const std::string_view prefix : kNcclKernelPrefixes) {
    const auto at = name.find(prefix);
    if (at == std::string_view::npos) continue;
    if (at != 0 && name[at - 1] != ' ') continue;
    return name.substr(at + prefix.size());
  }
  return std::nullopt;
}

}  // namespace

bool is_nccl_kernel_name(std::string_view name) { return nccl_kernel_suffix(name).has_value(); }

std::optional<CollectiveKind> nccl_collective_from_kernel_name(std::string_view name) {
  const auto suffix = nccl_kernel_suffix(name);
  if (!suffix) return std::nullopt;
  // The collective is the first token: up to '_' or '(' ("AllGather_RING_LL(...)").
  const auto end = suffix->find_first_of("_(<");
  const std::string_view token = suffix->substr(0, end);
  if (token == "AllGather") return CollectiveKind::kAllGather;
  if (token == "ReduceScatter") return CollectiveKind::kReduceScatter;
  if (token == "AllReduce") return CollectiveKind::kAllReduce;
  if (token == "SendRecv" || token == "Send" || token == "Recv") return CollectiveKind::kSendRecv;
  return std::nullopt;  // Broadcast, Reduce, Generic (several collectives fused), ...
}

double overlap_fraction(const KernelSpan& inner, const KernelSpan& outer) {
  if (inner.end_ns <= inner.start_ns) return 0.0;
  const std::uint64_t begin_ns = std::max(inner.start_ns, outer.start_ns);
  const std::uint64_t end_ns = std::min(inner.end_ns, outer.end_ns);
  if (end_ns <= begin_ns) return 0.0;
  return static_cast<double>(end_ns - begin_ns) /
         static_cast<double>(inner.end_ns - inner.start_ns);
}

namespace {

// The kernels of repetition `rep` of `measurement` that `keep` accepts (all when empty).
std::vector<KernelSpan> kept_kernels(const CorrelatedKernels& kernels, std::uint32_t measurement,
                                     std::uint32_t rep,
                                     const std::function<bool(const KernelSpan&)>& keep) {
  std::vector<KernelSpan> kept;
  if (const auto found = kernels.by_label.find(MeasurementLabel{measurement, rep});
      found != kernels.by_label.end()) {
    for (const auto& kernel : found->second) {
      if (!keep || keep(kernel)) kept.push_back(kernel);
    }
  }
  return kept;
}

}  // namespace

std::vector<double> repetition_samples_s(const CorrelatedKernels& kernels,
                                         std::uint32_t measurement, std::uint32_t reps,
                                         const std::string& what,
                                         const std::function<bool(const KernelSpan&)>& keep) {
  std::vector<double> samples_s;
  samples_s.reserve(reps);
  for (std::uint32_t rep = 0; rep < reps; ++rep) {
    const std::vector<KernelSpan> kept = kept_kernels(kernels, measurement, rep, keep);
    if (kept.empty()) {
      throw_runtime(what,
                    fmt::format("no kernel activity record for repetition {} of {}", rep, reps),
                    "CUPTI dropped records (enlarge the activity buffers) or the launch failed");
    }
    samples_s.push_back(span_seconds(kept));
  }
  return samples_s;
}

std::vector<double> covered_samples_s(const CorrelatedKernels& kernels, std::uint32_t inner,
                                      std::uint32_t outer, std::uint32_t reps,
                                      const std::function<bool(const KernelSpan&)>& keep_inner,
                                      const std::function<bool(const KernelSpan&)>& keep_outer,
                                      double min_overlap) {
  std::vector<double> samples_s;
  for (std::uint32_t rep = 0; rep < reps; ++rep) {
    const std::vector<KernelSpan> inside = kept_kernels(kernels, inner, rep, keep_inner);
    const std::vector<KernelSpan> beside = kept_kernels(kernels, outer, rep, keep_outer);
    if (inside.empty() || beside.empty()) continue;
    if (overlap_fraction(envelope(inside, "inner"), envelope(beside, "outer")) >= min_overlap) {
      samples_s.push_back(span_seconds(inside));
    }
  }
  return samples_s;
}

}  // namespace fsdptune::collect
