#include "fsdptune/compare.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "fsdptune/error.hpp"
#include "fsdptune/units.hpp"

namespace fsdptune {
namespace {

nlohmann::json value_json(const ComparedValue& value) {
  return {{"predicted", value.predicted},
          {"measured", value.measured},
          {"relative_error", value.relative_error}};
}

std::string percent(double relative_error) {
  return fmt::format("{:+.1f}%", 100.0 * relative_error);
}

}  // namespace

ComparedValue compare_values(double predicted, double measured) {
  ComparedValue value{predicted, measured, 0};
  if (measured != 0) {
    value.relative_error = (predicted - measured) / measured;
  } else if (predicted != 0) {
    value.relative_error = 1;
  }
  return value;
}

Comparison compare(const ScheduleFile& schedule, const MeasuredResult& measured,
                   const std::string& measured_source, int top_tasks) {
  const std::string hash = schedule_hash(schedule);
  if (measured.schedule_hash != hash) {
    throw_bad_input(
        measured_source + ": schedule_hash",
        fmt::format("measured schedule {} but this schedule is {}", measured.schedule_hash, hash),
        "compare a measurement with the schedule it replayed");
  }
  const std::vector<Task>& tasks = schedule.program.tasks;
  if (measured.timings.size() != tasks.size()) {
    throw_bad_input(measured_source + ": timings",
                    fmt::format("{} task timings for a program of {} tasks",
                                measured.timings.size(), tasks.size()));
  }
  const PlanSummary& predicted = schedule.predicted;
  Comparison comparison;
  comparison.schedule_hash = hash;
  comparison.backend = measured.backend;
  comparison.world_size = measured.world_size;
  comparison.data_checked = measured.data_checked;
  comparison.step_time_s = compare_values(predicted.step_time_s, measured.step_time_s);
  comparison.compute_s = compare_values(predicted.compute_s, measured.compute_s);
  comparison.exposed_comm_s = compare_values(predicted.exposed_comm_s, measured.exposed_comm_s);
  comparison.peak_allocated_bytes =
      compare_values(static_cast<double>(predicted.peak_allocated_bytes),
                     static_cast<double>(measured.peak_allocated_bytes));

  const bool have_timings = schedule.timings.size() == tasks.size();
  std::vector<TaskDifference> differences;
  for (std::size_t t = 0; t < tasks.size(); ++t) {
    const TaskTiming& got = measured.timings[t];
    const double predicted_start = have_timings ? schedule.timings[t].start_s : 0;
    const double predicted_duration = have_timings
                                          ? schedule.timings[t].end_s - schedule.timings[t].start_s
                                          : tasks[t].duration_s;
    differences.push_back({tasks[t].id, tasks[t].name, to_string(tasks[t].kind),
                           compare_values(predicted_duration, got.end_s - got.start_s),
                           compare_values(predicted_start, got.start_s)});
  }
  std::stable_sort(differences.begin(), differences.end(),
                   [](const TaskDifference& a, const TaskDifference& b) {
                     return std::abs(a.duration_s.measured - a.duration_s.predicted) >
                            std::abs(b.duration_s.measured - b.duration_s.predicted);
                   });
  differences.resize(
      std::min(differences.size(), static_cast<std::size_t>(std::max(top_tasks, 0))));
  comparison.tasks_differing_most = std::move(differences);
  return comparison;
}

nlohmann::json comparison_to_json(const Comparison& comparison) {
  nlohmann::json tasks = nlohmann::json::array();
  for (const TaskDifference& task : comparison.tasks_differing_most) {
    tasks.push_back({{"task", task.task},
                     {"name", task.name},
                     {"kind", task.kind},
                     {"duration_s", value_json(task.duration_s)},
                     {"start_s", value_json(task.start_s)}});
  }
  return {{"format", "fsdptune-comparison"},
          {"version", 1},
          {"schedule_hash", comparison.schedule_hash},
          {"backend", comparison.backend},
          {"world_size", comparison.world_size},
          {"data_checked", comparison.data_checked},
          {"step_time_s", value_json(comparison.step_time_s)},
          {"compute_s", value_json(comparison.compute_s)},
          {"exposed_comm_s", value_json(comparison.exposed_comm_s)},
          {"peak_allocated_bytes", value_json(comparison.peak_allocated_bytes)},
          {"tasks_differing_most", tasks}};
}

void print_comparison(std::ostream& out, const Comparison& c) {
  fmt::print(out, "schedule {}  backend {}  ranks {}  data {}\n", c.schedule_hash, c.backend,
             c.world_size, c.data_checked ? "checked" : "not checked");
  fmt::print(out, "{:<16} {:>12} {:>12} {:>9}\n", "", "predicted", "measured", "error");
  auto seconds_row = [&](const char* label, const ComparedValue& v) {
    fmt::print(out, "{:<16} {:>12} {:>12} {:>9}\n", label, format_seconds(v.predicted),
               format_seconds(v.measured), percent(v.relative_error));
  };
  seconds_row("step time", c.step_time_s);
  seconds_row("compute", c.compute_s);
  seconds_row("exposed comm", c.exposed_comm_s);
  fmt::print(out, "{:<16} {:>12} {:>12} {:>9}\n", "peak memory",
             format_bytes(static_cast<std::int64_t>(c.peak_allocated_bytes.predicted)),
             format_bytes(static_cast<std::int64_t>(c.peak_allocated_bytes.measured)),
             percent(c.peak_allocated_bytes.relative_error));
  if (c.tasks_differing_most.empty()) return;
  fmt::print(out, "\ntasks differing most (duration):\n");
  fmt::print(out, "{:>5} {:<40} {:>12} {:>12} {:>9}\n", "task", "name", "predicted", "measured",
             "error");
  for (const TaskDifference& task : c.tasks_differing_most) {
    fmt::print(out, "{:>5} {:<40} {:>12} {:>12} {:>9}\n", task.task, task.name,
               format_seconds(task.duration_s.predicted), format_seconds(task.duration_s.measured),
               percent(task.duration_s.relative_error));
  }
}

}  // namespace fsdptune
