// The discrete-event simulator: times a Program in virtual time with rates that change
// as the set of running tasks changes (overlap contention), and accounts memory at every
// event. Pure: no I/O.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "fsdptune/program.hpp"
#include "fsdptune/units.hpp"

namespace fsdptune {

struct TaskTiming {
  double start_s = 0;
  double end_s = 0;
  bool operator==(const TaskTiming&) const = default;
};

struct MemorySample {
  double time_s = 0;
  std::int64_t allocated_bytes = 0;
  bool operator==(const MemorySample&) const = default;
};

struct SimOptions {
  bool record_timings = true;   // per-task start/end
  bool record_timeline = true;  // memory over the step
  // Stop early (result.aborted) once the reserved-memory estimate (below) passes this;
  // 0 = never. Lets the tuner drop plans that cannot fit without simulating them to the
  // end (a plan fits when its reserved peak is within the limit: plan_fits).
  std::int64_t abort_above_bytes = 0;
  // Reserved-memory estimate of PyTorch's caching allocator: every allocation is rounded
  // up to `allocator_segment_bytes` (the allocator carves large blocks out of 2 MiB-
  // granular segments), and the transient part (everything but the sharded state, which
  // is allocated once and never freed) is inflated by `allocator_fragmentation` for the
  // cached blocks that the step's changing sizes cannot reuse. docs/plan-format.md.
  std::int64_t allocator_segment_bytes = 2 * kMiB;
  double allocator_fragmentation = 0.05;
};

struct SimResult {
  double step_time_s = 0;
  double compute_s = 0;  // time the compute stream was busy
  // Wall-clock time with at least one collective (all-gather, reduce-scatter, all-reduce)
  // in flight. step_time_s = compute_s + exposed_comm_s + idle_s.
  double comm_s = 0;
  double exposed_comm_s = 0;     // time a collective ran while the compute stream was idle
  double idle_s = 0;             // compute stream idle and no collective in flight
  double comm_standalone_s = 0;  // sum of the collectives' standalone durations
  std::int64_t peak_allocated_bytes = 0;
  std::int64_t peak_reserved_bytes = 0;  // caching-allocator estimate
  MemoryBreakdown peak_breakdown{};      // allocated, by category, at the peak
  std::vector<TaskTiming> timings;       // per task id, when recorded
  std::vector<MemorySample> memory_timeline;
  std::int64_t event_count = 0;  // task starts + task ends processed
  bool aborted = false;
  bool operator==(const SimResult&) const = default;
};

SimResult simulate(const Program& program, const SimOptions& options = {});

// A memory event's bytes as the reserved-memory estimate counts them: the magnitude
// rounded up to `segment_bytes` (SimOptions::allocator_segment_bytes), the sign kept;
// unchanged when segment_bytes <= 1.
std::int64_t round_to_segment(std::int64_t bytes, std::int64_t segment_bytes);

// The reserved-memory estimate of segment-rounded sharded-state bytes and segment-rounded
// other bytes: the first as they are, the others x (1 + SimOptions::
// allocator_fragmentation), truncated to whole bytes.
std::int64_t reserved_estimate_bytes(std::int64_t sharded_rounded, std::int64_t transient_rounded,
                                     const SimOptions& options);

// The scratch arrays of simulate(), kept between calls by a caller that simulates many
// programs on one thread (the tuner's workers) so that they are not reallocated per call.
// Not thread-safe: one per thread.
class SimWorkspace {
 public:
  SimWorkspace();
  ~SimWorkspace();
  SimWorkspace(SimWorkspace&&) noexcept;
  SimWorkspace& operator=(SimWorkspace&&) noexcept;

  struct Arrays;  // opaque: defined in simulator.cpp

 private:
  friend SimResult simulate(const Program&, const SimOptions&, SimWorkspace&);
  std::unique_ptr<Arrays> arrays_;
};
// The same result as simulate(program, options), reusing `workspace`'s storage.
SimResult simulate(const Program& program, const SimOptions& options, SimWorkspace& workspace);

// Throughput figures of a simulated step.
struct StepMetrics {
  double step_time_s = 0;
  double tokens_per_s_per_gpu = 0;
  double mfu = 0;  // model FLOPs (no recompute) / (step time * dense peak)
  bool operator==(const StepMetrics&) const = default;
};
StepMetrics step_metrics(const Workload& workload, const HardwareSpec& hardware,
                         const SimResult& result);

// Said under every predicted tokens/s/GPU and MFU, by the CLI and the reports (found by QA,
// a first-time user: read as what a run reaches). docs/calibration.md "Throughput":
// torchtitan's published runs reached 1/1.75 to 1/1.1 of what the analytic model predicted
// for them.
inline constexpr const char* kThroughputCaveat =
    "tokens/s/GPU and MFU are upper bounds: torchtitan's published runs reached 57-91% of "
    "what the analytic model predicted for them (docs/calibration.md)";
// Whether kThroughputCaveat applies to figures of a job of `pp` stages whose Programs
// looked up `cost_queries` costs, `cost_fallbacks` of them from the analytic model: some
// were, or none was counted, or the job is pipelined (its sends between stages are priced by
// the analytic model: a profile measures no send/recv; review). Not where a measured profile
// priced every cost (found by QA: said of a schedule tuned on a CPU profile, every cost
// looked up).
inline bool throughput_caveat_applies(std::int64_t cost_queries, std::int64_t cost_fallbacks,
                                      std::int64_t pp) {
  return cost_fallbacks > 0 || cost_queries == 0 || pp > 1;
}

}  // namespace fsdptune
