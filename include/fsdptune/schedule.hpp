// The schedule file (docs/schedule-format.md): the Plan, the lowered Program the executor
// replays, the predicted metrics, the baselines and Pareto front the tuner found, and the
// provenance. Versioned JSON; `fsdptune simulate --plan schedule.json` re-simulates it.
// The executor rebuilds the Workload from `model` + `job` (build_workload is
// deterministic) to get the op shapes of each compute task.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fsdptune/hardware.hpp"
#include "fsdptune/job.hpp"
#include "fsdptune/model.hpp"
#include "fsdptune/plan.hpp"
#include "fsdptune/program.hpp"
#include "fsdptune/simulator.hpp"

namespace fsdptune {

inline constexpr int kScheduleFormatVersion = 1;

// What the simulator predicted for one plan.
struct PlanSummary {
  std::string plan_name;
  double step_time_s = 0;
  double tokens_per_s_per_gpu = 0;
  double mfu = 0;
  double compute_s = 0;
  double comm_s = 0;
  double exposed_comm_s = 0;
  double idle_s = 0;
  std::int64_t peak_allocated_bytes = 0;
  std::int64_t peak_reserved_bytes = 0;
  MemoryBreakdown peak_breakdown{};
  bool fits = false;
  bool operator==(const PlanSummary&) const = default;
};

struct ParetoPoint {
  double step_time_s = 0;
  std::int64_t peak_allocated_bytes = 0;
  std::string label;  // which plan (baseline name or "tuned #k")
  bool operator==(const ParetoPoint&) const = default;
};

struct ScheduleProvenance {
  std::string tool;          // "fsdptune 0.1.0"
  std::string cost_source;   // hardware id or profile path
  std::string cost_hash;     // hash of the hardware spec / profile content
  std::uint64_t seed = 0;
  std::int64_t threads = 1;
  std::string command;
  bool operator==(const ScheduleProvenance&) const = default;
};

struct ScheduleFile {
  int version = kScheduleFormatVersion;
  ModelSpec model;
  JobSpec job;
  HardwareSpec hardware;
  std::int64_t memory_limit_bytes = 0;
  Plan plan;
  Program program;
  PlanSummary predicted;                 // of `plan`
  std::vector<TaskTiming> timings;       // predicted per task of `program`
  std::vector<MemorySample> memory_timeline;
  std::int64_t cost_queries = 0;
  std::int64_t cost_fallbacks = 0;
  std::vector<PlanSummary> baselines;    // fsdp2, simplefsdp-* as evaluated by the tuner
  std::vector<ParetoPoint> pareto;       // peak memory vs step time explored by the tuner
  double lower_bound_s = 0;              // DESIGN.md "Searching"
  ScheduleProvenance provenance;
  bool operator==(const ScheduleFile&) const = default;
};

nlohmann::json schedule_to_json(const ScheduleFile& schedule);
// Throws Error(kBadInput) naming `source` and the field: wrong version, missing field,
// a plan or program inconsistent with the model and job.
ScheduleFile schedule_from_json(const nlohmann::json& json, const std::string& source);
// Stable hex digest of the canonical JSON: ranks compare it before replaying.
std::string schedule_hash(const ScheduleFile& schedule);

}  // namespace fsdptune
