// Importers of measurements made by other tools into cost profiles (docs/profile-format.md,
// "Importing nccl-tests logs"). Pure: they parse text the caller has already read, each
// named by its source (a file name) for error messages; the CLI does the file reading.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fsdptune/profile.hpp"
#include "fsdptune/workload.hpp"

namespace fsdptune {

// Text to import and where it came from.
struct TextSource {
  std::string name;  // file name, used in errors and to recognize the collective
  std::string text;
};

// One nccl-tests run (all_gather_perf, reduce_scatter_perf, all_reduce_perf).
struct NcclTestsLog {
  CollectiveKind kind = CollectiveKind::kAllGather;
  CommGroup group;                      // ranks from the "#  Rank" lines, nodes from their hosts
  std::string device;                   // rank 0's device name, "NVIDIA H100 80GB HBM3"
  std::vector<CollectivePoint> points;  // per size: {out-of-place, in-place} time
  bool operator==(const NcclTestsLog&) const = default;
};

// Parses the standard nccl-tests text output: the "# nThread ... nGpus ..." header, the
// "#  Rank  N Group  G Pid P on HOST device D [BUS] NAME" lines (their count is the rank
// count, their distinct hosts the node count), the column header, data rows
// "size count type redop root  time algbw busbw #wrong  time algbw busbw #wrong" (bytes as
// nccl-tests counts them: all-gather output, reduce-scatter input), and the
// "# Avg bus bandwidth" footer. The collective comes from a "# Collective test starting:"
// line, else from the source name ("all_gather_perf.log"), else from the columns (count x
// element size = size for all-reduce, = size / ranks for all-gather (redop "none") and
// reduce-scatter); when two of these disagree the log is rejected. Throws Error(kBadInput)
// naming the source (and line) for: no header, no rank lines, no footer (a truncated
// log), a malformed row, a time that is not a positive number, a nonzero #wrong, an
// unsupported collective (alltoall, broadcast, sendrecv, ...).
NcclTestsLog parse_nccl_tests_log(const TextSource& log);

struct NcclTestsImportOptions {
  // HardwareSpec id the logs were measured on; empty: from their device names
  // ("NVIDIA H100 80GB HBM3" -> "h100-sxm"). Throws when neither gives one.
  std::string hardware;
};

// Parses every log and merges them into one profile: one sweep per (kind, ranks,
// ranks_per_node), samples of the same size from several logs appended in log order,
// points sorted by bytes. provenance.method = "nccl-tests import", environment "gpu" =
// the device name; tool, date and command are left to the caller. Throws
// Error(kBadInput) when logs disagree on the device or name no hardware.
Profile import_nccl_tests(const std::vector<TextSource>& logs,
                          const NcclTestsImportOptions& options);

// --- PyTorch profiler (Kineto) traces (issue: profiler; docs/profiling.md) ---

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
  std::int64_t attention_calls = 0;  // attention op calls (forward or backward)
  std::int64_t memory_calls = 0;     // memory-bound op calls (norms, embedding, AdamW)
  std::int64_t nccl_kernels = 0;     // kernels taken as collective samples
  std::int64_t skipped_kernels = 0;  // other kernels, or kernels whose op/shape was not found
  std::vector<std::string> notes;    // why kernels were skipped, one line per reason
};

// Reads the "traceEvents" of a Chrome trace written by torch.profiler (or a bare event
// array). Compute ops: the kernels launched by an op fsdptune models, linked kernel ->
// cuda_runtime launch (args "correlation") -> innermost enclosing such cpu_op on the same
// thread (or by "External id"); one sample per op call, the union of its kernels' GPU
// intervals. The shape comes from the op's "Input Dims", the dtype from "Input type":
// - GEMMs: aten::mm / addmm / linear / matmul / _scaled_mm;
// - attention: SDPA (aten::scaled_dot_product_attention and its flash / cuDNN / efficient
//   kernels), aten::_flash_attention_*, flash_attn::_flash_attn_*, forward and backward,
//   is_causal from "Concrete Inputs" (absent: causal);
// - memory-bound: aten::rms_norm / _fused_rms_norm (rmsnorm_fwd), _fused_rms_norm_backward
//   (rmsnorm_bwd), embedding (embedding_fwd), embedding_dense_backward (embedding_bwd),
//   _fused_adamw_ (adamw), with the workload's byte counts (docs/workload.md).
// NCCL: kernels named ncclDevKernel_* / ncclKernel_*, the collective from the name, the
// bytes from the collective metadata ("In msg nelems", "Out msg nelems", "dtype",
// "Group size") on the kernel itself (Kineto >= PyTorch 2.3) or on the enclosing
// record_param_comms op. Throws Error(kBadInput) naming `source` and the event when the
// trace is malformed (no traceEvents, an event without ts/dur, ...).
KinetoImportResult import_kineto_trace(const nlohmann::json& trace,
                                       const KinetoImportOptions& options,
                                       const std::string& source);

// The HardwareSpec id for a CUDA device name ("NVIDIA H200" -> "h200", "NVIDIA H100 80GB
// HBM3" -> "h100-sxm", "NVIDIA A100-SXM4-80GB" -> "a100-80g"); empty if unknown.
std::string hardware_id_from_device_name(const std::string& device_name);

}  // namespace fsdptune
