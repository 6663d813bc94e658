// The discrete-event simulator: times a Program in virtual time with rates that change
// as the set of running tasks changes (overlap contention), and accounts memory at every
// event. Pure: no I/O.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "fsdptune/program.hpp"

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
  // Stop early (result.aborted) once allocated memory passes this; 0 = never. Lets the
  // tuner drop plans that cannot fit without simulating them to the end.
  std::int64_t abort_above_bytes = 0;
};

struct SimResult {
  double step_time_s = 0;
  double compute_s = 0;        // time the compute stream was busy
  double comm_s = 0;           // sum of standalone communication task durations
  double exposed_comm_s = 0;   // time communication ran while compute was idle
  double idle_s = 0;           // time nothing ran on the compute stream nor exposed comm
  std::int64_t peak_allocated_bytes = 0;
  std::int64_t peak_reserved_bytes = 0;  // caching-allocator estimate
  MemoryBreakdown peak_breakdown{};      // allocated, by category, at the peak
  std::vector<TaskTiming> timings;       // per task id, when recorded
  std::vector<MemorySample> memory_timeline;
  std::int64_t event_count = 0;
  bool aborted = false;
  bool operator==(const SimResult&) const = default;
};

SimResult simulate(const Program& program, const SimOptions& options = {});

// Throughput figures of a simulated step.
struct StepMetrics {
  double step_time_s = 0;
  double tokens_per_s_per_gpu = 0;
  double mfu = 0;  // model FLOPs (no recompute) / (step time * dense peak)
  bool operator==(const StepMetrics&) const = default;
};
StepMetrics step_metrics(const Workload& workload, const HardwareSpec& hardware,
                         const SimResult& result);

}  // namespace fsdptune
