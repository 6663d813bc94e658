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

// A pipelined job's schedule, virtual stages and split of the blocks: "interleaved-1f1b (2
// virtual stages), stages split as given: 7,8,8,9 blocks per chunk"; "no pipeline (gradient
// accumulation)" for one stage.
std::string pipeline_shape_text(const JobSpec& job);

// A float8 schedule's MFU basis: "MFU is of the fp8 peak: the tuned plan's 39.8% is 79.7%
// of bf16's, as torchtitan logs it"; empty for another schedule or hardware without both
// peaks (found by QA: float8's MFU read as half bf16's with no word).
std::string mfu_basis_line(const ScheduleFile& file);

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
// With two or more schedules, their tuned plans ranked (header row first): those that fit
// (predicted) first, then more tokens/s/GPU, ties in the order given, each against the
// first's; empty for one schedule (found by QA: a report of five schedules said none was
// best, and its HTML's step-time bars read the reverse of tokens/s/GPU for a pipeline).
std::vector<std::vector<std::string>> ranking_rows(const Report& report);
// What the ranked schedules do not share that tokens/s/GPU does not weigh ("the models
// differ: llama3-8b, tiny; ..."); empty where they share model, hardware, sequence and
// tokens a step.
std::string ranking_caveat(const Report& report);

// What the Pareto front's labels of the kinds present mean ("candidate #k = the k-th plan
// the search simulated; ..."); empty when every label names itself (baselines, tuned).
std::string pareto_legend(const ScheduleFile& schedule);

}  // namespace fsdptune::report_detail
