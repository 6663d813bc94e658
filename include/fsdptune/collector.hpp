// Measuring a cost profile on the machine at hand (docs/profiling.md).
//
// A Collector enumerates the distinct compute ops of a workload (by Op::signature), runs
// each with the kernels the executor uses -- `warmup` untimed repetitions, then `reps`
// timed ones, one sample each --, sweeps the collectives over a range of sizes across all
// ranks of the job, measures the overlap (contention) factors, and returns a Profile
// (profile.hpp) with its provenance. Two implementations behind one interface (STYLE.md
// rule 2): "cuda" (CUPTI activity records for kernel times, NCCL, CUDA events) and "cpu"
// (the cpu executor's Eigen kernels, MPI, a steady clock). Without the CUDA toolkit the
// "cuda" collector is a stub whose collect() throws Error(kRuntime) "built without CUDA".
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fsdptune/cost_model.hpp"
#include "fsdptune/hardware.hpp"
#include "fsdptune/kernels.hpp"
#include "fsdptune/profile.hpp"
#include "fsdptune/workload.hpp"

namespace fsdptune {

struct CollectorOptions {
  std::int64_t warmup = 3;  // untimed repetitions before each measurement (>= 0)
  std::int64_t reps = 10;   // timed repetitions, one sample each (>= 1)
  std::vector<CollectiveKind> collective_kinds = {
      CollectiveKind::kAllGather, CollectiveKind::kReduceScatter, CollectiveKind::kAllReduce};
  // Full-buffer sizes of the sweep (nccl-tests convention); empty: the backend's default
  // (default_collective_sizes). Sizes are rounded up to a multiple of 4 * ranks bytes so
  // every rank holds a whole fp32 shard.
  std::vector<std::int64_t> collective_sizes_bytes;
  bool measure_contention = true;   // GEMM alone vs alongside a collective; two collectives
  std::int64_t ranks_per_node = 0;  // recorded in the sweeps' CommGroup; 0: the job's
                                    // gpus_per_node capped at the world size
  // cuda: the attention the compute ops run (KernelOptions::attention); cpu: kAuto only.
  AttentionKernel attention = AttentionKernel::kAuto;
  // Seconds a rank may wait for the others (a collective, a barrier) before every rank is
  // aborted with a message: a rank that stops responding left the others waiting forever
  // (found by QA). >= 0.1.
  double timeout_s = 300;
  // Test hook: this rank stops responding (sleeps) before its first measurement; -1: none.
  int stall_rank = -1;
  std::string hardware;  // Profile::hardware: the HardwareSpec id measured on
  std::string command;   // Provenance::command
  std::string tool;      // Provenance::tool ("fsdptune 0.1.0")
  std::string date;      // Provenance::date, ISO 8601 (the caller reads the clock)
};

// Throws Error(kBadInput) naming the flag (--reps, --warmup, --sizes) when out of range.
void validate_collector_options(const CollectorOptions& options);

class Collector {
 public:
  virtual ~Collector() = default;
  virtual std::string backend() const = 0;  // "cpu" or "cuda"
  // This process's rank in the job and the job's size (MPI_COMM_WORLD). Every rank runs
  // collect(); only rank 0 should write the result.
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Collective over all ranks. Compute ops are timed on every rank: the cpu collector
  // keeps every rank's samples (ranks share the host's cores and wait for each other only
  // at collectives, so an op's cost is its time on one rank), the cuda collector one
  // sample per repetition, the maximum over ranks (each rank has its own GPU); collectives
  // are timed around each call, one sample per repetition, the slowest rank's. Throws
  // Error(kRuntime) on a device, MPI or NCCL failure.
  virtual Profile collect(const Workload& workload, const CollectorOptions& options) = 0;
};

// The cpu collector. Initialises MPI (MPI_THREAD_MULTIPLE, for the overlap measurement)
// unless it already is, and finalises it on destruction if it initialised it. Works as a
// single process (world size 1: no collective sweep, contention left at its defaults).
std::unique_ptr<Collector> make_cpu_collector();
// The CUDA collector (one GPU per rank, rank r uses device r % device count). In a build
// without CUDA this throws Error(kRuntime) "built without CUDA".
std::unique_ptr<Collector> make_cuda_collector();

// --- Pure helpers shared by the collectors (tested without hardware) ---

// The compute ops to measure: each distinct Op::signature of the workload once, in order of
// first appearance (units in order: forward, recompute, backward; then the optimizer).
// Tensor-parallel collectives (OpKind::kCollective) are left to the collective sweep.
std::vector<Op> distinct_compute_ops(const Workload& workload);

// The bucket copies to measure beside the compute ops: Ops of kind kMemoryBound with
// memory_op "copy" (docs/profile-format.md: a copy of `bytes`, each byte read and written),
// which the profile cost model serves CostModel::copy from (the copy-in / copy-out tasks of
// every bucket). Sizes: powers of two from the smallest unit's sharded parameters in bf16
// (the smallest all-gather copy-in of one unit; at least 1 KiB) up to the whole model's
// unsharded fp32 gradients (the largest reduce-scatter copy-in, every unit in one bucket),
// capped at max_bytes (a power of two: the cpu collector 256 MiB, the cuda one 4 GiB).
// Copy sizes in between are interpolated, sizes outside fall back to the analytic model.
std::vector<Op> bucket_copy_ops(const Workload& workload, std::int64_t max_bytes);
// distinct_compute_ops followed by bucket_copy_ops: what a collector times, in that order.
std::vector<Op> ops_to_measure(const Workload& workload, std::int64_t max_copy_bytes);

// Powers of two from min_bytes to max_bytes inclusive (both powers of two, min <= max).
std::vector<std::int64_t> power_of_two_sizes(std::int64_t min_bytes, std::int64_t max_bytes);
// The default sweep: "cuda" 1 KiB .. 4 GiB, "cpu" 1 KiB .. 64 MiB.
std::vector<std::int64_t> default_collective_sizes(const std::string& backend);
// `bytes` rounded up so each of `ranks` ranks holds a whole number of fp32 elements.
std::int64_t collective_buffer_bytes(std::int64_t bytes, std::int64_t ranks);
// The buffer sizes a sweep over `ranks` measures: options.collective_sizes_bytes (or the
// backend's default_collective_sizes) through collective_buffer_bytes, ascending, each once
// (1KiB given twice, or 3 and 5 bytes that both round to 8, would make points of one size,
// which a profile may not hold).
std::vector<std::int64_t> collective_sweep_bytes(const CollectorOptions& options,
                                                 const std::string& backend, std::int64_t ranks);

// The contention factors of cost_model.hpp from measurements (medians -- median_seconds
// of profile.hpp -- in seconds):
// compute_slowdown_with_comm = gemm_with_comm / gemm_alone, at least 1 (a kernel does not
// get faster because NCCL runs beside it; a ratio below 1 is noise);
// comm_share_efficiency: two collectives of one size issued together take `pair` where one
// alone takes `single`; each ran at rate S/pair = efficiency/2 * S/single, so
// efficiency = 2 * single / pair, capped at 1 (two latency-bound collectives can overlap
// better than the bandwidth model allows; the model is for bandwidth-bound ones).
// REQUIRES: all times > 0.
ContentionFactors contention_from_measurements(double gemm_alone_s, double gemm_with_comm_s,
                                               double single_collective_s,
                                               double collective_pair_s);

// The largest GEMM of `compute` by FLOPs (the first of equals), nullptr if there is none:
// the GEMM the contention measurements run beside a collective or a copy.
const ComputeEntry* largest_gemm(const std::vector<ComputeEntry>& compute);
// The largest bucket copy (memory_op "copy", bucket_copy_ops) of `compute`, nullptr if
// there is none: the copy the copy factors time beside compute and run beside a GEMM.
const ComputeEntry* largest_bucket_copy(const std::vector<ComputeEntry>& compute);
// A slowdown from medians of one kernel alone and beside another: beside / alone within
// [1, max_slowdown] (a kernel does not get faster because another runs beside it; a ratio
// below 1 is noise). REQUIRES: both times > 0.
double slowdown_from_measurements(double alone_s, double beside_s, double max_slowdown);
// A measured ratio beside / alone as the notes print it, with the factor it gives where
// the clamp above changes it: "1.31x", "0.74x, taken as 1" (found by QA: "copy slowdown
// 1.000" beside "(0.74x)" read as a contradiction).
std::string slowdown_ratio_text(double ratio, double max_slowdown);

// What the cpu collector knows of its host besides the profile.
struct HostFacts {
  std::string id;                   // HardwareSpec id (the profile's `hardware`)
  std::string name;                 // e.g. "AMD EPYC 7B13, 2 ranks"
  std::int64_t memory_bytes = 0;    // physical memory of the host
  std::int64_t ranks_per_node = 1;  // ranks sharing it
};

// A HardwareSpec of the host a cpu profile was measured on, so that what the profile lacks
// (bucket copies, collective sizes outside the sweep, shapes it did not measure) falls back
// to rates measured on the same host rather than to a GPU's. From the profile:
//   peak_{bf16,fp32}_flops_per_s = the best GEMM rate, flops / median (the cpu kernels run
//     every dtype in fp32), gemm_efficiency_ceiling = 1 (the peak is an achieved rate),
//     sm_count = 1 (no wave quantization on a CPU core);
//   hbm_bytes_per_s = the rate (bytes / median) of the memory-bound op moving the most
//     bytes, a kernel op before a bucket copy (what the caches help least), efficiency 1;
//   collective_base_latency_s and nvlink/network busbw = a latency + bytes / bandwidth fit
//     (fit_latency_bandwidth) of the all-gather sweep, busbw = algbw * busbw_factor; the
//     all-reduce sweep likewise for nvlink_allreduce_busbw_bytes_per_s (nvlink_bytes_per_s
//     is the larger of the two busbw, as the format requires); no hop latency and
//     a ramp that is flat from a few bytes on (the fit has the latency already).
//   Without a sweep (one rank) the collectives are assumed to move data at half the memory
//     rate (a copy through shared memory reads and writes each byte) after 10 us.
//   hbm_bytes = memory_bytes / ranks_per_node, no reserve; kernel_launch_s = 0.
// Throws Error(kRuntime) when the profile has no GEMM or no memory-bound entry.
HardwareSpec cpu_hardware_spec(const Profile& profile, const HostFacts& host);

}  // namespace fsdptune
