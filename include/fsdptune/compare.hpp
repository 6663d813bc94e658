// Predicted vs measured: the schedule's prediction next to what the executor measured,
// step by step and task by task (`fsdptune compare`).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fsdptune/measured.hpp"
#include "fsdptune/schedule.hpp"

namespace fsdptune {

// A predicted and a measured value; relative_error = (predicted - measured) / measured
// (0 when both are 0; +-inf-free: a zero measurement with a nonzero prediction gives 1).
struct ComparedValue {
  double predicted = 0;
  double measured = 0;
  double relative_error = 0;
  bool operator==(const ComparedValue&) const = default;
};
ComparedValue compare_values(double predicted, double measured);

struct TaskDifference {
  int task = 0;
  std::string name;
  std::string kind;  // to_string(TaskKind)
  ComparedValue duration_s;
  ComparedValue start_s;  // relative to the step start
  bool operator==(const TaskDifference&) const = default;
};

struct Comparison {
  std::string schedule_hash;
  std::string backend;
  std::int64_t world_size = 0;
  bool data_checked = false;
  ComparedValue step_time_s;
  ComparedValue compute_s;
  ComparedValue exposed_comm_s;
  ComparedValue peak_allocated_bytes;
  // Tasks by |measured - predicted duration|, largest first (ties by task id).
  std::vector<TaskDifference> tasks_differing_most;
  bool operator==(const Comparison&) const = default;
};

// Throws Error(kBadInput) naming `measured_source` when the measurement is of another
// schedule (hash) or has a different number of tasks. Predicted task times are the
// schedule's simulated timings (the standalone task durations where it has none).
Comparison compare(const ScheduleFile& schedule, const MeasuredResult& measured,
                   const std::string& measured_source, int top_tasks = 10);

nlohmann::json comparison_to_json(const Comparison& comparison);
// A human-readable table.
void print_comparison(std::ostream& out, const Comparison& comparison);

}  // namespace fsdptune
