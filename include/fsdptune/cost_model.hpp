// Costs of compute ops and collectives. One interface, two implementations: the analytic
// model (from a HardwareSpec) and the profile-backed model (measured tables with the
// analytic model as fallback). Pure and thread-safe: every method is const and keeps no
// mutable state, so the tuner may share one CostModel across threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "fsdptune/hardware.hpp"
#include "fsdptune/workload.hpp"

namespace fsdptune {

struct Profile;  // profile.hpp

// A cost with where it came from; callers count fallbacks (measured == false where a
// profile was given) so results can say how much was measured.
struct CostEstimate {
  double seconds = 0;
  bool measured = false;
};

// How overlap slows things down (DESIGN.md "Overlap is not free"). The simulator turns
// these into rates: a compute task runs at 1/compute_slowdown_with_comm of its speed while
// any collective is in flight (1/compute_slowdown_with_copy while a bucket copy runs on
// another stream, the larger slowdown of the two when both do); k collectives that share
// the network each progress at comm_share_efficiency / k of their standalone rate
// (k >= 2), and at 1/comm_slowdown_with_compute of that while a task of the compute stream
// runs; a bucket copy off the compute stream runs at 1/copy_slowdown_with_compute of its
// speed while a task of the compute stream runs.
struct ContentionFactors {
  double compute_slowdown_with_comm = 1.08;
  double comm_share_efficiency = 0.95;
  // 1 (not modelled) unless a profile measured it: the cpu profiler does (a reduce-scatter
  // alone and beside the largest GEMM on another thread), the CUPTI collector (an
  // all-gather beside GEMMs); the built-in GPU models leave it at 1.
  double comm_slowdown_with_compute = 1;
  // Bucket copies (copy-in / copy-out) beside compute, both ways: 1 (not modelled) unless a
  // profile measured them -- both collectors time the largest bucket copy beside the
  // largest GEMM on another thread / stream and that GEMM beside a stream of those copies.
  double copy_slowdown_with_compute = 1;
  double compute_slowdown_with_copy = 1;
  bool operator==(const ContentionFactors&) const = default;
};

// The factors a profile or schedule file holds only where measured (not 1; absent: 1), so
// that files written before they existed keep their bytes and hashes.
struct MeasuredOnlyFactor {
  const char* name;
  double ContentionFactors::*member;
};
inline constexpr MeasuredOnlyFactor kMeasuredOnlyFactors[] = {
    {"comm_slowdown_with_compute", &ContentionFactors::comm_slowdown_with_compute},
    {"copy_slowdown_with_compute", &ContentionFactors::copy_slowdown_with_compute},
    {"compute_slowdown_with_copy", &ContentionFactors::compute_slowdown_with_copy},
};

// The factors a profile or schedule file may carry: what the collectors measure (overlap
// never speeds a kernel up: every slowdown >= 1, comm_share_efficiency <= 1), bounded away
// from 0 and infinity so that every simulated step takes a finite time.
inline constexpr double kMaxComputeSlowdownWithComm = 100;
inline constexpr double kMinCommShareEfficiency = 0.01;
inline constexpr double kMaxCommSlowdownWithCompute = 100;
inline constexpr double kMaxCopySlowdown = 100;  // either copy factor
// Throws Error(kBadInput) naming `where` + "." + the field when a factor is outside
// [1, kMaxComputeSlowdownWithComm], [kMinCommShareEfficiency, 1],
// [1, kMaxCommSlowdownWithCompute] or [1, kMaxCopySlowdown].
void validate_contention(const ContentionFactors& factors, const std::string& where);

class CostModel {
 public:
  virtual ~CostModel() = default;
  virtual CostEstimate compute(const Op& op) const = 0;
  // `bytes` is the full buffer: all-gather output, reduce-scatter input, all-reduce buffer.
  // Over one rank a reduce-scatter is a copy() of its buffer (FSDP2's foreach_reduce copies
  // the input to the output; NCCL and MPI copy too), an all-gather (in place, as FSDP2's)
  // or an all-reduce nothing.
  virtual CostEstimate collective(CollectiveKind kind, std::int64_t bytes,
                                  CommGroup group) const = 0;
  // Device-to-device copy of `bytes` (copy-in / copy-out of flat bucket buffers).
  virtual CostEstimate copy(std::int64_t bytes) const = 0;
  virtual ContentionFactors contention() const = 0;
  virtual const HardwareSpec& hardware() const = 0;
};

// nccl-tests' bus-bandwidth factor (busbw = algbw * factor, algbw = bytes / time):
// (n-1)/n for all-gather and reduce-scatter, 2(n-1)/n for all-reduce, 1 for send/recv.
double busbw_factor(CollectiveKind kind, std::int64_t ranks);

// The FLOPs a flash attention kernel executes for `op` (OpKind::kAttention), what attention
// benchmarks count: the forward's 4*b*h*rows*s*d, halved when causal, times 2.5 for the
// backward (FlashAttention-2's five matmuls against two). Op::flops is the model-FLOPs
// convention instead (no causal discount, backward 2x); a non-positive one is derived
// from the shape.
double attention_executed_flops(const Op& op);

// The analytic model (docs/hardware.md "Cost model"): GEMM roofline with tile and wave
// quantization, flash-style attention, memory-bound ops at a fraction of HBM bandwidth,
// ring collectives with a size-dependent bandwidth ramp. Every estimate has
// measured == false. Precondition: `hardware` came from hardware_from_json (validated).
std::unique_ptr<CostModel> make_analytic_cost_model(const HardwareSpec& hardware);
// Measured entries from `profile`, analytic model of `hardware` where unmeasured
// (docs/profile-format.md): compute ops by exact signature (memory-bound ops also by
// log-log interpolation between measured sizes of the same memory_op, and outside them
// anchored at the nearest one plus the analytic difference; memory_op "copy" serves
// copy()); collectives by (kind, ranks, ranks_per_node) sweep, log-log
// interpolation inside it, latency/bandwidth fits of its ends outside it. Estimates from
// the profile have measured == true, fallbacks false. The median of each entry's samples
// is used. Throws Error(kBadInput) when profile.hardware != hardware.id.
std::unique_ptr<CostModel> make_profile_cost_model(const Profile& profile,
                                                   const HardwareSpec& hardware);

}  // namespace fsdptune
