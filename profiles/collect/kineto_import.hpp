// Import of PyTorch profiler (Kineto) Chrome traces into a cost profile
// (docs/profiling.md, "Importing a PyTorch profiler trace"). Pure: takes the parsed JSON.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fsdptune/profile.hpp"

namespace fsdptune {

struct KinetoImportOptions {
  // HardwareSpec id the trace was recorded on; empty: derived from the trace's
  // deviceProperties name ("NVIDIA H100 80GB HBM3" -> "h100-sxm").
  std::string hardware;
  // GPUs per node of the job that was traced: a collective over `Group size` ranks spans
  // ceil(group / ranks_per_node) nodes. Chrome traces do not record the topology.
  std::int64_t ranks_per_node = 8;
};

struct KinetoImportResult {
  Profile profile;  // provenance.method "kineto import"; tool/date/command left to the caller
  std::int64_t gemm_calls = 0;       // GEMM op calls taken as samples (one or more kernels)
  std::int64_t nccl_kernels = 0;     // kernels taken as collective samples
  std::int64_t skipped_kernels = 0;  // other kernels, or kernels whose op/shape was not found
  std::vector<std::string> notes;    // why kernels were skipped, one line per reason
};

// Reads the "traceEvents" of a Chrome trace written by torch.profiler (or a bare event
// array). GEMMs: the kernels launched by aten::mm / addmm / linear / matmul / _scaled_mm,
// linked kernel -> cuda_runtime launch (args "correlation") -> enclosing cpu_op on the
// same thread (or by "External id"); the shape comes from the op's "Input Dims", the dtype
// from "Input type"; one sample per op call (first kernel start to last kernel end).
// NCCL: kernels named ncclDevKernel_* / ncclKernel_*, the collective from the name, the
// bytes from the collective metadata ("In msg nelems", "Out msg nelems", "dtype",
// "Group size") on the kernel itself (Kineto >= PyTorch 2.3) or on the enclosing
// record_param_comms op. Throws Error(kBadInput) naming `source` and the event when the
// trace is malformed (no traceEvents, an event without ts/dur, ...).
KinetoImportResult import_kineto_trace(const nlohmann::json& trace,
                                       const KinetoImportOptions& options,
                                       const std::string& source);

// The HardwareSpec id for a CUDA device name ("NVIDIA H200" -> "h200"); empty if unknown.
std::string hardware_id_from_device_name(const std::string& device_name);

}  // namespace fsdptune
