// Helpers shared by the report renderers (report.cpp, report_html.cpp). Not public.
#pragma once

#include <string>
#include <vector>

#include "fsdptune/program.hpp"
#include "fsdptune/report.hpp"
#include "fsdptune/simulator.hpp"

namespace fsdptune::report_detail {

// JSON key ("sharded_state") and display title ("sharded state") of a memory category.
std::string category_key(MemoryCategory category);
std::string category_title(MemoryCategory category);

// The schedule's job in a line: "dp_shard 2, dp_replicate 2, tp 2, batch 1 x 128 tokens,
// AC full, float8" (dp_replicate, tp, float8 and the execution only where they apply).
std::string job_text(const ScheduleReport& schedule);

// Duration of each task: end - start from `timings` when it has one entry per task, else
// the standalone cost recorded at lowering.
std::vector<double> task_durations(const Program& program, const std::vector<TaskTiming>& timings);

// The plan comparison table (header row first) as the text and Markdown renderers show it.
std::vector<std::vector<std::string>> plan_table_rows(const ScheduleReport& schedule);
// "tuned plan vs lower bound: 92.3% (lower bound 1.234 s, tuned 1.337 s)".
std::string efficiency_line(const ScheduleReport& schedule);
// The tuned plan at any timing, for a schedule that has the figures (else none):
// "tuned plan at any timing: 82.0 GiB allocated, 85.5 GiB reserved at most, above the
// 75.2 GiB limit: ...", then what that state holds and where each stream is.
std::vector<std::string> any_timing_lines(const ScheduleReport& schedule);
// "cpu backend, 2 ranks, 5 iterations, data checked" (and, for a scaled-down replay,
// that its step time and communication are not the prediction's).
std::string measured_heading(const MeasuredComparison& measured);
// "error = predicted / measured - 1; busy = rank 0's ...": what the predicted-vs-measured
// table's figures are.
std::string measured_legend(const MeasuredComparison& measured);
// What the Pareto front's labels of the kinds present mean ("candidate #k = the k-th plan
// the search simulated; ..."); empty when every label names itself (baselines, tuned).
std::string pareto_legend(const ScheduleFile& schedule);

}  // namespace fsdptune::report_detail
