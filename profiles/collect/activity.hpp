// GPU activity records as the profiler uses them, independent of CUPTI's structs, and
// the pure steps that turn them into measurements: which kernels a measured repetition
// launched (correlation), how long that repetition took on the GPU, which kernels are
// NCCL collectives. cupti_activity.hpp decodes CUPTI's records into these; everything
// here is plain values so it is unit-tested without a GPU or the CUDA toolkit.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fsdptune/workload.hpp"

namespace fsdptune::collect {

enum class ActivityKind {
  kKernel,               // a kernel executed on the GPU (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
  kRuntimeApi,           // a CUDA runtime API call on the host (CUPTI_ACTIVITY_KIND_RUNTIME)
  kDriverApi,            // a CUDA driver API call on the host (CUPTI_ACTIVITY_KIND_DRIVER)
  kExternalCorrelation,  // correlation id -> the external id pushed around the launch
};

// One activity record. Timestamps are CUPTI's: nanoseconds on one clock shared by the
// host API records and the GPU kernel records (cuptiGetTimestamp).
struct ActivityRecord {
  ActivityKind kind = ActivityKind::kKernel;
  std::uint64_t start_ns = 0;
  std::uint64_t end_ns = 0;
  // Links a kernel to the API call that launched it and to the external id that was on
  // top of the external-correlation stack during that call.
  std::uint32_t correlation_id = 0;
  std::uint64_t external_id = 0;  // kExternalCorrelation only
  std::string name;               // kernel name (kKernel)
  std::uint32_t device_id = 0;    // kKernel
  std::uint32_t stream_id = 0;    // kKernel
  std::uint32_t thread_id = 0;    // kRuntimeApi / kDriverApi
  bool operator==(const ActivityRecord&) const = default;
};

// What a label stands for: repetition `rep` of measurement `measurement` (an index into
// the collector's list of things it times: ops, sweep points, overlap runs). Labels travel
// as CUPTI external ids; 0 is never a valid label, so a zero external id means "none".
struct MeasurementLabel {
  std::uint32_t measurement = 0;
  std::uint32_t rep = 0;
  bool operator==(const MeasurementLabel&) const = default;
  auto operator<=>(const MeasurementLabel&) const = default;
};
// (measurement + 1) << 32 | rep: never 0, and decode(encode(x)) == x.
std::uint64_t encode_label(MeasurementLabel label);
// Returns nullopt for 0 (no label).
std::optional<MeasurementLabel> decode_label(std::uint64_t external_id);

// The host-side window in which the collector issued one labeled repetition, on the
// CUPTI clock. Used when no external-correlation record names a kernel's launch: the
// kernel belongs to the window that contains the start of the runtime/driver API call
// with the same correlation id.
struct LaunchWindow {
  MeasurementLabel label;
  std::uint64_t begin_ns = 0;
  std::uint64_t end_ns = 0;
  bool operator==(const LaunchWindow&) const = default;
};

struct KernelSpan {
  std::string name;
  std::uint64_t start_ns = 0;
  std::uint64_t end_ns = 0;
  std::uint32_t stream_id = 0;
  bool operator==(const KernelSpan&) const = default;
};

struct CorrelatedKernels {
  // Kernels of each labeled repetition, sorted by start time.
  std::map<MeasurementLabel, std::vector<KernelSpan>> by_label;
  // Kernels no label could be found for (launched outside every measurement, e.g. the
  // warm-up or a buffer initialisation). Counted, not an error.
  std::int64_t unlabeled_kernels = 0;
  // Kernels without timestamps: CUPTI writes start = end = 0 when it "could not collect"
  // them (CUpti_ActivityKernel10), and a record forced out before its kernel finished may
  // end before it starts. Left out of every repetition (a 0 start would stretch its span
  // back to the clock's origin) and counted.
  std::int64_t untimed_kernels = 0;
  bool operator==(const CorrelatedKernels&) const = default;
};

// Assigns every kernel record to the repetition that launched it: first through an
// external-correlation record with its correlation id, else through the launch window
// that contains its API call. Records may arrive in any order (CUPTI delivers buffers
// per stream and per thread). Kernels without timestamps (untimed_kernels) are left out.
CorrelatedKernels correlate_kernels(const std::vector<ActivityRecord>& records,
                                    const std::vector<LaunchWindow>& windows = {});

// The interval from the first kernel's start to the last kernel's end, named `name`.
// REQUIRES: !kernels.empty().
KernelSpan envelope(const std::vector<KernelSpan>& kernels, const std::string& name);

// GPU time of one repetition: from the first kernel's start to the last kernel's end, in
// seconds. A repetition that launches several kernels (cuBLAS split-K, a norm and its
// reduction) is timed as the executor would see it, gaps between its kernels included.
// REQUIRES: !kernels.empty().
double span_seconds(const std::vector<KernelSpan>& kernels);

// The collective an NCCL kernel performs, recognised by its name: NCCL 2.19+ names kernels
// "ncclDevKernel_AllGather_RING_LL(...)", "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL",
// older releases "ncclKernel_AllReduce_RING_LL_Sum_float". Nullopt for anything else,
// including NCCL kernels of other collectives (Broadcast, Reduce).
std::optional<CollectiveKind> nccl_collective_from_kernel_name(std::string_view name);
bool is_nccl_kernel_name(std::string_view name);

// Fraction of `inner`'s duration during which `outer` was running too, in [0, 1]; 0 for a
// zero-length `inner`.
double overlap_fraction(const KernelSpan& inner, const KernelSpan& outer);

// Samples of `measurement`, one per repetition 0..reps-1, each the span of the kernels of
// that repetition that `keep` accepts. Throws Error(kRuntime) naming `what` when a
// repetition has no such kernel (records were dropped or the launch failed).
// An empty `keep` accepts every kernel.
std::vector<double> repetition_samples_s(const CorrelatedKernels& kernels,
                                         std::uint32_t measurement, std::uint32_t reps,
                                         const std::string& what,
                                         const std::function<bool(const KernelSpan&)>& keep = {});

// Samples of repetitions of `inner` that ran beside those of `outer` (a GEMM beside a
// collective, a collective beside GEMMs): for each repetition, the span of its `inner`
// kernels that `keep_inner` accepts, when the envelope of the same repetition's `outer`
// kernels that `keep_outer` accepts ran during at least `min_overlap` of that span.
// Repetitions without such kernels, or not so covered, are left out. An empty `keep`
// accepts every kernel.
std::vector<double> covered_samples_s(const CorrelatedKernels& kernels, std::uint32_t inner,
                                      std::uint32_t outer, std::uint32_t reps,
                                      const std::function<bool(const KernelSpan&)>& keep_inner,
                                      const std::function<bool(const KernelSpan&)>& keep_outer,
                                      double min_overlap = 0.99);

}  // namespace fsdptune::collect
