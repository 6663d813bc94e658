// Reports (docs/report.md): what the tuner predicted for each plan, and how the
// prediction held up against a measured replay, as a terminal table, Markdown, one
// self-contained HTML page (inline SVG and CSS, no script, no network) and a JSON summary.
//
// Pure: the renderers take values and return strings. Reading the schedule and measured
// files, matching them and writing the outputs is the CLI's job (`fsdptune report`).
// Every renderer is deterministic: the same inputs give the same bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fsdptune/measured.hpp"
#include "fsdptune/schedule.hpp"

namespace fsdptune {

inline constexpr int kReportFormatVersion = 1;
inline constexpr const char* kReportFormatName = "fsdptune-report";

// The most memory the schedule's Program can hold under any task durations
// (any_timing_peak and any_timing_reserved_bytes, scheduler/memory_bound.hpp; the report
// itself is pure, so the caller computes it): what the tuned plan risks when the real
// durations interleave its streams otherwise than predicted.
struct ReportAnyTiming {
  std::int64_t peak_allocated_bytes = 0;
  std::int64_t peak_reserved_bytes = 0;  // the simulator's reserved estimate at that state
  MemoryBreakdown peak_breakdown{};      // what that state holds, by category
  std::string state;                     // where each stream is (describe_any_timing_state)
  bool operator==(const ReportAnyTiming&) const = default;
};

// One schedule file and, when the schedule was replayed, its measured result.
// REQUIRES: schedule.timings is empty or has one entry per program task; the same for
// measured->timings.
struct ReportEntry {
  std::string source;  // the file the schedule came from; labels the schedule in reports
  ScheduleFile schedule;
  std::optional<MeasuredResult> measured;
  // The tuned plan's peaks at any timing; none for a pipelined schedule or when the caller
  // did not compute them.
  std::optional<ReportAnyTiming> any_timing;
  // A pipelined schedule's stages at any timing (pipeline_any_timing), one per stage by
  // rank; empty when the caller did not compute them.
  std::vector<StageAnyTiming> stage_any_timing;
  bool operator==(const ReportEntry&) const = default;
};

struct ReportOptions {
  int largest_task_errors = 10;  // rows of the per-task error table
  bool operator==(const ReportOptions&) const = default;
};

// --- The summary: every figure that the renderers show, computed once. ----------------

// One plan as the comparison table shows it: the schedule's tuned plan or a baseline.
struct ReportPlan {
  PlanSummary summary;
  bool tuned = false;  // the schedule's own plan (ScheduleFile::predicted)
  // peak_reserved_bytes - peak_allocated_bytes (never negative): what the caching
  // allocator holds on top of live tensors at the peak.
  std::int64_t allocator_reserve_bytes = 0;
  bool operator==(const ReportPlan&) const = default;
};

// Busy time of one stream: the sum of its tasks' durations (end - start).
struct StreamComparison {
  std::string stream;
  double predicted_busy_s = 0;
  double measured_busy_s = 0;
  double relative_error = 0;  // predicted / measured - 1; 0 when measured is 0
  bool operator==(const StreamComparison&) const = default;
};

struct TaskError {
  int task = 0;
  std::string name;
  std::string stream;
  double predicted_s = 0;     // duration in the prediction
  double measured_s = 0;      // median duration measured
  double error_s = 0;         // predicted - measured
  double relative_error = 0;  // predicted / measured - 1; 0 when measured is 0
  bool operator==(const TaskError&) const = default;
};

// One stage of a replayed pipeline (a version 2 schedule): the schedule's
// pipeline.stages[] next to the measured pipeline.stages[] (measured.json). Errors are
// predicted / measured - 1; 0 when measured is 0.
struct StageMeasurement {
  int rank = 0;
  double predicted_busy_s = 0;  // the time its actions ran
  double measured_busy_s = 0;
  double busy_relative_error = 0;
  double predicted_end_s = 0;  // when its step ends
  double measured_end_s = 0;
  double end_relative_error = 0;
  std::int64_t predicted_peak_allocated_bytes = 0;  // its ranks' largest
  std::int64_t measured_peak_allocated_bytes = 0;
  double peak_relative_error = 0;
  bool operator==(const StageMeasurement&) const = default;
};

struct MeasuredComparison {
  std::string backend;
  std::int64_t world_size = 0;
  std::int64_t iterations = 0;
  bool data_checked = false;
  double predicted_step_time_s = 0;
  double measured_step_time_s = 0;
  // Errors are prediction_error (measured.hpp): (predicted - measured) / measured.
  double step_time_relative_error = 0;
  double predicted_exposed_comm_s = 0;
  double measured_exposed_comm_s = 0;
  double exposed_comm_relative_error = 0;
  std::int64_t predicted_peak_allocated_bytes = 0;
  std::int64_t measured_peak_allocated_bytes = 0;
  double peak_relative_error = 0;
  // The replay's shards per rank (MeasuredResult::shards_per_rank): above 1 a scaled-down
  // replay, whose collectives are not the prediction's (docs/validation.md "Scaled-down
  // replay"): streams and largest_task_errors then hold the compute streams' only.
  std::int64_t shards_per_rank = 1;
  // node_layout_difference (measured.hpp): a replay on other nodes than the job's, whose
  // collectives are not the prediction's either; "" otherwise.
  std::string node_layout;
  bool communication_comparable() const { return shards_per_rank == 1 && node_layout.empty(); }
  std::vector<StreamComparison> streams;  // in Program::streams order
  // Largest |error_s| first; ties by task id. At most ReportOptions::largest_task_errors.
  std::vector<TaskError> largest_task_errors;
  // A schedule without a pipeline replayed with every rank's timings: each rank's compute
  // (rank_compute_s in measured.hpp); empty otherwise.
  std::vector<double> rank_compute_s;
  // A pipeline schedule, by stage; empty otherwise (`fsdptune compare` lists a
  // pipeline's actions and chunk tasks that differ most).
  std::vector<StageMeasurement> stages;
  bool operator==(const MeasuredComparison&) const = default;
};

// A pipelined schedule's stage (ScheduleFile::pipeline->stages) as the stages table shows it.
struct ReportStage {
  int rank = 0;
  double busy_s = 0;  // the time its actions ran
  double end_s = 0;   // when its step ends
  std::int64_t max_in_flight = 0;
  std::int64_t peak_allocated_bytes = 0;
  std::int64_t peak_reserved_bytes = 0;
  bool fits = false;  // peak_reserved_bytes <= the schedule's memory_limit_bytes
  std::optional<StageAnyTiming> any_timing;  // ReportEntry::stage_any_timing's, if given
  bool operator==(const ReportStage&) const = default;
};

struct ScheduleReport {
  std::string source;
  std::string model;     // ModelSpec::name
  std::string hardware;  // HardwareSpec::id
  std::int64_t gpus = 0;
  std::int64_t dp_shard = 0;
  std::int64_t cp = 1;  // JobSpec::cp
  std::int64_t tp = 1;  // JobSpec::tp
  std::int64_t dp_replicate = 1;
  // The pipeline's shape (JobSpec's; without a pipeline 1 stage, 1 microbatch, 1 step).
  std::int64_t pp = 1;
  std::int64_t microbatches = 1;
  std::int64_t pipeline_steps = 1;
  PipelineSchedule pp_schedule = PipelineSchedule::k1F1B;
  std::int64_t virtual_stages = 1;
  std::int64_t pp_first_stage_less_layers = 1;
  std::int64_t pp_last_stage_less_layers = 1;
  std::vector<std::int64_t> pp_chunk_blocks;  // empty: the split by the two above
  ActivationCheckpointing ac = ActivationCheckpointing::kNone;
  bool float8 = false;
  std::int64_t local_batch = 0;
  std::int64_t seq_len = 0;
  Execution execution = Execution::kCompiled;  // JobSpec::execution
  std::int64_t memory_limit_bytes = 0;
  std::int64_t task_count = 0;  // tasks of the Program (a pipeline schedule: of every chunk's)
  double lower_bound_s = 0;
  // lower_bound_s / tuned step time, in (0, 1]; 0 when there is no lower bound.
  double tuned_efficiency = 0;
  std::vector<ReportPlan> plans;  // baselines in the file's order, then the tuned plan
  // A pipelined (version 2) schedule: its bubble fraction, send time per microbatch and
  // stages; empty otherwise.
  double bubble_fraction = 0;
  double send_s = 0;
  std::vector<ReportStage> stages;
  // The Pareto front the tuner explored (ScheduleFile::pareto); empty when none was stored.
  std::vector<ParetoPoint> pareto;
  // ReportEntry::any_timing, and whether its reserved estimate (a pipeline: every stage's
  // at any timing) is within memory_limit_bytes (what `tune --fit any-timing` asks).
  std::optional<ReportAnyTiming> any_timing;
  bool fits_at_any_timing = false;
  std::optional<MeasuredComparison> measured;
  bool operator==(const ScheduleReport&) const = default;
};

struct Report {
  int version = kReportFormatVersion;
  std::vector<ScheduleReport> schedules;
  bool operator==(const Report&) const = default;
};

Report summarize_report(const std::vector<ReportEntry>& entries, const ReportOptions& options = {});

// The `--json` summary (docs/report.md), and back (round-trip; errors name `source`).
nlohmann::json report_to_json(const Report& report);
Report report_from_json(const nlohmann::json& json, const std::string& source);

// --- Renderers. -------------------------------------------------------------------------

// The terminal table: plans side by side, the tuned plan against the lower bound, and
// predicted vs measured where measured results are given.
std::string render_report_text(const std::vector<ReportEntry>& entries,
                               const ReportOptions& options = {});
// The same tables and key figures as GitHub-flavoured Markdown.
std::string render_report_markdown(const std::vector<ReportEntry>& entries,
                                   const ReportOptions& options = {});
// One self-contained XHTML-compatible page: step-time and peak-memory breakdowns per plan,
// and per schedule a Gantt chart of one step, memory over the step, the Pareto front, and
// predicted vs measured. Every figure in its tables carries
// `data-json="<JSON pointer into report_to_json>"` and `data-value="<the JSON number>"`.
std::string render_report_html(const std::vector<ReportEntry>& entries,
                               const ReportOptions& options = {});

// What peaks at any timing mean against the limit, as every output words it: "within the
// 75.2 GiB limit at every timing" (reserved within it); "above the 75.2 GiB limit: with
// durations far enough from the prediction this plan runs out of memory (tune --fit
// any-timing picks one that stays under it)" (allocated above it: certain at that timing);
// "reserved above ... can run out of memory" (only the reserved estimate above it: likely);
// "above the 75.2 GiB limit, as the predicted peak already is" when the plan does not fit
// at its predicted timing either (`fits_as_predicted` false: no timing and no --fit helps).
std::string any_timing_verdict(std::int64_t allocated_bytes, std::int64_t reserved_bytes,
                               std::int64_t limit_bytes, bool fits_as_predicted = true);

// Of a pipeline's stages at any timing: the one of the largest reserved bound (ties by
// allocated), which the any-timing lines of tune, simulate and report name; and "; stage r
// allocates the most, X at most" where another stage allocates more ("" otherwise).
// REQUIRES: stages non-empty.
const StageAnyTiming& largest_reserved_stage(const std::vector<StageAnyTiming>& stages);
std::string most_allocated_clause(const std::vector<StageAnyTiming>& stages);

// Shared by the renderers (exposed for tests).
// Escapes & < > " ' for XML text and attribute values.
std::string escape_xml(const std::string& text);
// The text of a number exactly as report_to_json dumps it.
std::string json_number_text(double value);
std::string json_number_text(std::int64_t value);
// Display formats of the tables: "12.3 ms", "1.50 GiB", "45.2%", "+3.1%", "1234".
std::string format_percent(double fraction);  // 0.452 -> "45.2%"
// "compute by rank: median M, slowest rank r S (+x%), fastest rank q F (-y%)" (the first
// of equals). REQUIRES: rank_compute_s has at least one entry.
std::string rank_compute_summary(const std::vector<double>& rank_compute_s);
std::string format_signed_percent(double fraction);  // 0.031 -> "+3.1%", -0.2 -> "-20.0%"
std::string format_rate(double tokens_per_s);        // tokens/s/GPU, to one decimal
// The label of a Gantt bar `width_px` wide for the task `name`: the longest of the full
// name, the name up to its bucket ("AG fwd b3"), the bucket ("b3") -- or for compute
// tasks the unit ("layers.3") and its number ("3"), for a pipeline action ("chunk 2 F3")
// its last word ("F3") and microbatch ("3") -- that fits at 6.6 px per character; ""
// when none fits.
std::string gantt_label(const std::string& name, double width_px);

}  // namespace fsdptune
