// Report summary, its JSON form, and the terminal and Markdown renderers
// (docs/report.md). The HTML renderer is in report_html.cpp; both read the one summary
// computed here so that every renderer shows the same figures.
#include "fsdptune/report.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "fsdptune/error.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/pipeline.hpp"
#include "fsdptune/profile.hpp"
#include "fsdptune/units.hpp"
#include "report_internal.hpp"

namespace fsdptune {
namespace {

// A pipeline's stages at any timing, all given and each reserving within the limit.
bool stages_fit_at_any_timing(const std::vector<ReportStage>& stages, std::int64_t limit_bytes) {
  return !stages.empty() && std::all_of(stages.begin(), stages.end(), [&](const ReportStage& s) {
    return s.any_timing && s.any_timing->peak_reserved_bytes <= limit_bytes;
  });
}

ReportPlan make_plan(const PlanSummary& summary, bool tuned) {
  ReportPlan plan;
  plan.summary = summary;
  plan.tuned = tuned;
  plan.allocator_reserve_bytes =
      std::max<std::int64_t>(0, summary.peak_reserved_bytes - summary.peak_allocated_bytes);
  return plan;
}

MeasuredComparison compare_measured(const ScheduleFile& schedule, const MeasuredResult& measured,
                                    const ReportOptions& options) {
  MeasuredComparison comparison;
  comparison.backend = measured.backend;
  comparison.world_size = measured.world_size;
  comparison.iterations = measured.iterations;
  comparison.data_checked = measured.data_checked;
  comparison.predicted_step_time_s = schedule.predicted.step_time_s;
  comparison.measured_step_time_s = measured.step_time_s;
  comparison.step_time_relative_error =
      prediction_error(schedule.predicted.step_time_s, measured.step_time_s);
  comparison.predicted_exposed_comm_s = schedule.predicted.exposed_comm_s;
  comparison.measured_exposed_comm_s = measured.exposed_comm_s;
  comparison.predicted_peak_allocated_bytes = schedule.predicted.peak_allocated_bytes;
  comparison.measured_peak_allocated_bytes = measured.peak_allocated_bytes;
  comparison.shards_per_rank = measured.shards_per_rank;
  comparison.node_layout = node_layout_difference(measured, schedule.job);
  comparison.exposed_comm_relative_error =
      prediction_error(schedule.predicted.exposed_comm_s, measured.exposed_comm_s);
  comparison.peak_relative_error =
      prediction_error(static_cast<double>(schedule.predicted.peak_allocated_bytes),
                       static_cast<double>(measured.peak_allocated_bytes));

  const Program& program = schedule.program;
  const std::vector<double> predicted = report_detail::task_durations(program, schedule.timings);
  const bool have_measured = measured.timings.size() == program.tasks.size();
  std::vector<double> predicted_busy(program.streams.size(), 0.0);
  std::vector<double> measured_busy(program.streams.size(), 0.0);
  std::vector<TaskError> errors;
  for (const Task& task : program.tasks) {
    const auto stream = static_cast<std::size_t>(task.stream);
    if (stream >= program.streams.size()) continue;
    // A scaled-down replay's collectives run over fewer ranks with more bytes each, and a
    // replay on other nodes' over other links: only compute compares (as in compare).
    if (!comparison.communication_comparable() && !on_compute_stream(program, task)) continue;
    predicted_busy[stream] += predicted[static_cast<std::size_t>(task.id)];
    if (!have_measured) continue;
    const TaskTiming& timing = measured.timings[static_cast<std::size_t>(task.id)];
    const double measured_s = timing.end_s - timing.start_s;
    measured_busy[stream] += measured_s;
    TaskError error;
    error.task = task.id;
    error.name = task.name;
    error.stream = program.streams[stream].name;
    error.predicted_s = predicted[static_cast<std::size_t>(task.id)];
    error.measured_s = measured_s;
    error.error_s = error.predicted_s - measured_s;
    error.relative_error = prediction_error(error.predicted_s, measured_s);
    errors.push_back(std::move(error));
  }
  if (have_measured) {
    for (std::size_t s = 0; s < program.streams.size(); ++s) {
      if (!comparison.communication_comparable() &&
          program.streams[s].role != StreamRole::kCompute) {
        continue;
      }
      comparison.streams.push_back({program.streams[s].name, predicted_busy[s], measured_busy[s],
                                    prediction_error(predicted_busy[s], measured_busy[s])});
    }
  }
  std::stable_sort(errors.begin(), errors.end(), [](const TaskError& a, const TaskError& b) {
    const double abs_a = std::fabs(a.error_s);
    const double abs_b = std::fabs(b.error_s);
    if (abs_a != abs_b) return abs_a > abs_b;
    return a.task < b.task;
  });
  const auto keep = static_cast<std::size_t>(std::max(0, options.largest_task_errors));
  if (errors.size() > keep) errors.resize(keep);
  comparison.largest_task_errors = std::move(errors);
  comparison.rank_compute_s = rank_compute_s(program, measured);
  // measured.json holds one stage per pipeline rank (its reader checks), as many as the
  // schedule of the same hash.
  if (schedule.pipeline && measured.pipeline &&
      schedule.pipeline->stages.size() == measured.pipeline->stages.size()) {
    for (std::size_t r = 0; r < schedule.pipeline->stages.size(); ++r) {
      const ScheduleStage& want = schedule.pipeline->stages[r];
      const MeasuredStage& got = measured.pipeline->stages[r];
      StageMeasurement stage;
      stage.rank = want.rank;
      stage.predicted_busy_s = want.busy_s;
      stage.measured_busy_s = got.busy_s;
      stage.busy_relative_error = prediction_error(want.busy_s, got.busy_s);
      stage.predicted_end_s = want.end_s;
      stage.measured_end_s = got.end_s;
      stage.end_relative_error = prediction_error(want.end_s, got.end_s);
      stage.predicted_peak_allocated_bytes = want.peak_allocated_bytes;
      stage.measured_peak_allocated_bytes = got.peak_allocated_bytes;
      stage.peak_relative_error = prediction_error(static_cast<double>(want.peak_allocated_bytes),
                                                   static_cast<double>(got.peak_allocated_bytes));
      comparison.stages.push_back(stage);
    }
  }
  return comparison;
}

// --- JSON ------------------------------------------------------------------------------

nlohmann::json breakdown_to_json(const MemoryBreakdown& breakdown) {
  nlohmann::json json = nlohmann::json::object();
  for (int c = 0; c < static_cast<int>(MemoryCategory::kCount); ++c) {
    json[report_detail::category_key(static_cast<MemoryCategory>(c))] =
        breakdown[static_cast<std::size_t>(c)];
  }
  return json;
}

// Field access that names the JSON pointer of a missing or mistyped field.
template <typename T>
T field(const nlohmann::json& json, const char* key, const std::string& where) {
  if (!json.is_object() || !json.contains(key)) {
    throw_bad_input(where + "/" + key, "missing field");
  }
  try {
    return json.at(key).get<T>();
  } catch (const nlohmann::json::exception& e) {
    throw_bad_input(where + "/" + key, fmt::format("wrong type: {}", e.what()));
  }
}

const nlohmann::json& array_field(const nlohmann::json& json, const char* key,
                                  const std::string& where) {
  if (!json.is_object() || !json.contains(key) || !json.at(key).is_array()) {
    throw_bad_input(where + "/" + key, "missing array");
  }
  return json.at(key);
}

// The "peak_breakdown" object of `json` (where: the object holding it), every category.
MemoryBreakdown breakdown_from_json(const nlohmann::json& json, const std::string& where) {
  const std::string breakdown_where = where + "/peak_breakdown";
  if (!json.contains("peak_breakdown")) throw_bad_input(breakdown_where, "missing field");
  MemoryBreakdown breakdown{};
  for (int c = 0; c < static_cast<int>(MemoryCategory::kCount); ++c) {
    breakdown[static_cast<std::size_t>(c)] = field<std::int64_t>(
        json.at("peak_breakdown"),
        report_detail::category_key(static_cast<MemoryCategory>(c)).c_str(), breakdown_where);
  }
  return breakdown;
}

PlanSummary plan_summary_from_json(const nlohmann::json& json, const std::string& where) {
  PlanSummary summary;
  summary.plan_name = field<std::string>(json, "name", where);
  summary.step_time_s = field<double>(json, "step_time_s", where);
  summary.tokens_per_s_per_gpu = field<double>(json, "tokens_per_s_per_gpu", where);
  summary.mfu = field<double>(json, "mfu", where);
  summary.compute_s = field<double>(json, "compute_s", where);
  summary.comm_s = field<double>(json, "comm_s", where);
  summary.exposed_comm_s = field<double>(json, "exposed_comm_s", where);
  summary.idle_s = field<double>(json, "idle_s", where);
  summary.peak_allocated_bytes = field<std::int64_t>(json, "peak_allocated_bytes", where);
  summary.peak_reserved_bytes = field<std::int64_t>(json, "peak_reserved_bytes", where);
  summary.fits = field<bool>(json, "fits", where);
  summary.peak_breakdown = breakdown_from_json(json, where);
  return summary;
}

// --- Text ------------------------------------------------------------------------------

std::string schedule_heading(const ScheduleReport& schedule) {
  return fmt::format("{}: {} on {} x {} ({}), limit {}", schedule.source, schedule.model,
                     schedule.gpus, schedule.hardware, report_detail::job_text(schedule),
                     format_bytes(schedule.memory_limit_bytes));
}

// The pipeline of a version 2 schedule: its shape in a line, then a row per stage (its
// chunks' units, busy time, end, microbatches in flight, peaks, whether it fits).
std::string pipeline_line(const ScheduleFile& file) {
  const JobSpec& job = file.job;
  const SchedulePipeline& pipeline = *file.pipeline;
  return fmt::format("pipeline: pp {} x tp {} x dp_shard {} x dp_replicate {}, {}, {}{}", job.pp,
                     job.tp, dp_shard_text(job.dp_shard, job.cp), job.dp_replicate,
                     microbatches_text(job), report_detail::pipeline_shape_text(job),
                     // One stage sends nothing and idles nowhere.
                     job.pp > 1 ? fmt::format(": bubble {}, send {} per microbatch",
                                              format_percent(pipeline.bubble_fraction),
                                              format_seconds(pipeline.send_s))
                                : "");
}

// `report`: the summary's stages (their bounds at any timing, a column where given).
std::vector<std::vector<std::string>> stage_rows(const ScheduleFile& file,
                                                 const ScheduleReport& report) {
  // The chunks' unit names (a schedule read from a file has chunks, checked on load
  // against this workload).
  const Workload workload =
      file.pipeline->chunks.empty() ? Workload{} : build_workload(file.model, file.job);
  std::vector<std::vector<int>> chunks;
  for (const ScheduleChunk& chunk : file.pipeline->chunks) chunks.push_back(chunk.units);
  const bool bounded = !report.stages.empty() && report.stages.front().any_timing;
  std::vector<std::vector<std::string>> rows = {
      {"stage", "units", "busy", "end", "in flight", "peak allocated", "peak reserved", "fits"}};
  if (bounded) rows.front().insert(rows.front().end() - 1, "any timing");
  for (std::size_t r = 0; r < file.pipeline->stages.size(); ++r) {
    const ScheduleStage& stage = file.pipeline->stages[r];
    rows.push_back({std::to_string(stage.rank), rank_units(workload, chunks, stage.rank),
                    format_seconds(stage.busy_s), format_seconds(stage.end_s),
                    std::to_string(stage.max_in_flight), format_bytes(stage.peak_allocated_bytes),
                    format_bytes(stage.peak_reserved_bytes),
                    stage.peak_reserved_bytes <= file.memory_limit_bytes ? "yes" : "no"});
    if (bounded) {
      const std::optional<StageAnyTiming>& bound = report.stages.at(r).any_timing;
      rows.back().insert(rows.back().end() - 1,
                         bound ? format_bytes(bound->peak_reserved_bytes) : std::string("-"));
    }
  }
  return rows;
}

// A table as rows of cells; column 0 left-aligned, the rest right-aligned.
std::string text_table(const std::vector<std::vector<std::string>>& rows,
                       const std::string& indent) {
  std::vector<std::size_t> widths;
  for (const auto& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (std::size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line = indent;
    for (std::size_t c = 0; c < row.size(); ++c) {
      if (c > 0) line += "  ";
      line += c == 0 ? fmt::format("{:<{}}", row[c], widths[c])
                     : fmt::format("{:>{}}", row[c], widths[c]);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

std::string markdown_cell(const std::string& raw) {
  std::string out;
  for (char c : valid_utf8(raw)) {
    if (c == '|' || c == '\\' || c == '*' || c == '`' || c == '<' || c == '>') {
      // Markdown's own characters, backslash-escaped (a model named "<ny> *b*" lost its
      // "<ny>" and turned italic).
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

std::string markdown_table(const std::vector<std::vector<std::string>>& rows) {
  std::string out;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    out += "|";
    for (std::size_t c = 0; c < rows[r].size(); ++c) {
      out += ' ';
      out += markdown_cell(rows[r][c]);
      out += " |";
    }
    out += "\n";
    if (r == 0) {
      // Figures right-aligned, text (the first column, yes/no, labels) left (found by QA:
      // every column after the first was right-aligned, text too).
      const auto is_figure = [](const std::string& cell) {
        return cell.empty() || cell == "-" ||
               std::isdigit(static_cast<unsigned char>(cell[0])) != 0 ||
               ((cell[0] == '-' || cell[0] == '+') && cell.size() > 1 &&
                std::isdigit(static_cast<unsigned char>(cell[1])) != 0);
      };
      out += "|";
      for (std::size_t c = 0; c < rows[r].size(); ++c) {
        bool figures = c > 0;
        for (std::size_t body = 1; body < rows.size() && figures; ++body) {
          figures = c >= rows[body].size() || is_figure(rows[body][c]);
        }
        out += figures ? " ---: |" : " --- |";
      }
      out += "\n";
    }
  }
  return out;
}

}  // namespace

namespace report_detail {

// The JSON keys are the Program's own category names (program.hpp), so a report's JSON and
// a schedule's memory timeline use one vocabulary.
std::string category_key(MemoryCategory category) { return to_string(category); }

std::string mfu_basis_line(const ScheduleFile& file) {
  const HardwareSpec& hardware = file.hardware;
  if (!file.job.float8 || !(hardware.peak_fp8_flops_per_s > 0) ||
      !(hardware.peak_bf16_flops_per_s > 0)) {
    return "";
  }
  return fmt::format(
      "MFU is of the fp8 peak: the tuned plan's {} is {} of bf16's, as torchtitan logs it",
      format_percent(file.predicted.mfu),
      format_percent(file.predicted.mfu * hardware.peak_fp8_flops_per_s /
                     hardware.peak_bf16_flops_per_s));
}

std::string pipeline_shape_text(const JobSpec& job) {
  // A split given chunk by chunk (--pp-chunk-blocks) is the blocks of each (found by QA:
  // the line named the weights, 0 and 0, of another split).
  const std::string split =
      job.pp * job.virtual_stages == 1 ? ""
      : job.pp_chunk_blocks.empty()
          ? fmt::format(", stages split with the embedding and norm+output as {} and {} blocks",
                        job.pp_first_stage_less_layers, job.pp_last_stage_less_layers)
          : fmt::format(", stages split as given: {} blocks per chunk",
                        chunk_blocks_text(job.pp_chunk_blocks));
  return fmt::format(
      "{}{}{}", pipeline_schedule_text(job),
      job.virtual_stages > 1 ? fmt::format(" ({} virtual stages)", job.virtual_stages) : "", split);
}

std::string job_text(const ScheduleReport& schedule) {
  std::string text = "dp_shard " + dp_shard_text(schedule.dp_shard, schedule.cp);
  if (schedule.dp_replicate != 1) text += fmt::format(", dp_replicate {}", schedule.dp_replicate);
  if (schedule.tp != 1) text += fmt::format(", tp {}", schedule.tp);
  if (schedule.pp != 1) text += fmt::format(", pp {}", schedule.pp);
  text += fmt::format(", batch {} x {} tokens", schedule.local_batch, schedule.seq_len);
  if (schedule.microbatches != 1 || schedule.pipeline_steps != 1) {
    text += ", " + microbatches_text(schedule.microbatches, schedule.pipeline_steps);
  }
  text += fmt::format(", AC {}", to_string(schedule.ac));
  if (schedule.float8) text += ", float8";
  return text + execution_suffix(schedule.execution);
}

std::string category_title(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::kShardedState:
      return "sharded state";
    case MemoryCategory::kGatheredParams:
      return "gathered parameters";
    case MemoryCategory::kGradients:
      return "gradients and buffers";
    case MemoryCategory::kActivations:
      return "activations";
    case MemoryCategory::kWorkspace:
      return "workspace";
    case MemoryCategory::kCount:
      break;
  }
  return "unknown";
}

std::vector<double> task_durations(const Program& program, const std::vector<TaskTiming>& timings) {
  std::vector<double> durations(program.tasks.size(), 0.0);
  const bool timed = timings.size() == program.tasks.size();
  for (std::size_t t = 0; t < program.tasks.size(); ++t) {
    durations[t] = timed ? timings[t].end_s - timings[t].start_s : program.tasks[t].duration_s;
  }
  return durations;
}

std::vector<std::vector<std::string>> plan_table_rows(const ScheduleReport& schedule) {
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"plan", "step time", "tokens/s/GPU", "MFU", "exposed comm", "peak allocated",
                  "peak reserved", "fits"});
  for (const ReportPlan& plan : schedule.plans) {
    const PlanSummary& s = plan.summary;
    rows.push_back({(plan.tuned ? "* " : "  ") + s.plan_name, format_seconds(s.step_time_s),
                    format_rate(s.tokens_per_s_per_gpu), format_percent(s.mfu),
                    format_seconds(s.exposed_comm_s), format_bytes(s.peak_allocated_bytes),
                    format_bytes(s.peak_reserved_bytes), s.fits ? "yes" : "no"});
  }
  return rows;
}

namespace {

const ReportPlan* tuned_plan(const ScheduleReport& schedule) {
  const auto it = std::find_if(schedule.plans.begin(), schedule.plans.end(),
                               [](const ReportPlan& plan) { return plan.tuned; });
  return it == schedule.plans.end() ? nullptr : &*it;
}

// Tokens a step: tokens/s/GPU x GPUs x step time (0 without a tuned plan).
double tokens_per_step(const ScheduleReport& schedule) {
  const ReportPlan* plan = tuned_plan(schedule);
  return plan == nullptr ? 0
                         : plan->summary.tokens_per_s_per_gpu * static_cast<double>(schedule.gpus) *
                               plan->summary.step_time_s;
}

// Whether schedule `i` is the first given from its file.
bool first_of_source(const Report& report, std::size_t i) {
  for (std::size_t j = 0; j < i; ++j) {
    if (report.schedules[j].source == report.schedules[i].source) return false;
  }
  return true;
}

}  // namespace

std::vector<std::vector<std::string>> ranking_rows(const Report& report) {
  std::vector<std::vector<std::string>> rows;
  if (report.schedules.size() < 2) return rows;
  // A schedule given twice (one measured file each) is ranked once (review).
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < report.schedules.size(); ++i) {
    if (tuned_plan(report.schedules[i]) != nullptr && first_of_source(report, i)) {
      order.push_back(i);
    }
  }
  if (order.size() < 2) return rows;
  const auto summary = [&](std::size_t i) -> const PlanSummary& {
    return tuned_plan(report.schedules[i])->summary;
  };
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (summary(a).fits != summary(b).fits) return summary(a).fits;
    return summary(a).tokens_per_s_per_gpu > summary(b).tokens_per_s_per_gpu;
  });
  rows.push_back({"rank", "schedule", "tokens/s/GPU", "vs first", "step time", "MFU",
                  "peak reserved", "fits"});
  const double first = summary(order.front()).tokens_per_s_per_gpu;
  for (std::size_t r = 0; r < order.size(); ++r) {
    const ScheduleReport& schedule = report.schedules[order[r]];
    const PlanSummary& s = summary(order[r]);
    std::string fits = s.fits ? "yes" : "no";
    if (s.fits && schedule.any_timing && !schedule.fits_at_any_timing) {
      fits += " (not at any timing)";
    }
    rows.push_back(
        {std::to_string(r + 1), schedule.source, format_rate(s.tokens_per_s_per_gpu),
         r == 0 || first <= 0 ? "" : format_signed_percent(s.tokens_per_s_per_gpu / first - 1),
         format_seconds(s.step_time_s), format_percent(s.mfu), format_bytes(s.peak_reserved_bytes),
         fits});
  }
  return rows;
}

std::string ranking_caveat(const Report& report) {
  if (report.schedules.size() < 2) return "";
  std::vector<std::string> parts;
  // "512 in a.json, 256 in b.json and c.json": each value with the schedules of it.
  const auto differing = [&](const std::string& what, auto value_of) {
    std::vector<std::pair<std::string, std::vector<std::string>>> values;
    for (std::size_t i = 0; i < report.schedules.size(); ++i) {
      if (!first_of_source(report, i)) continue;
      const ScheduleReport& schedule = report.schedules[i];
      const std::string value = value_of(schedule);
      const auto it = std::find_if(values.begin(), values.end(),
                                   [&](const auto& entry) { return entry.first == value; });
      if (it == values.end()) {
        values.push_back({value, {schedule.source}});
      } else {
        it->second.push_back(schedule.source);
      }
    }
    if (values.size() < 2) return;
    std::vector<std::string> said;
    for (const auto& [value, sources] : values) {
      said.push_back(fmt::format("{} in {}", value, join_alternatives(sources, " and ")));
    }
    parts.push_back(fmt::format("{} differ: {}", what, fmt::join(said, ", ")));
  };
  differing("the models", [](const ScheduleReport& s) { return s.model; });
  differing("the hardware", [](const ScheduleReport& s) { return s.hardware; });
  differing("the sequence lengths",
            [](const ScheduleReport& s) { return std::to_string(s.seq_len); });
  differing("the tokens a step",
            [](const ScheduleReport& s) { return fmt::format("{:.0f}", tokens_per_step(s)); });
  if (parts.empty()) return "";
  return fmt::format("{}: tokens/s/GPU compares their throughput, not the same training",
                     fmt::join(parts, "; "));
}

std::string measured_heading(const MeasuredComparison& measured) {
  std::string heading = fmt::format(
      "{} backend, {}, {}{}", measured.backend, counted(measured.world_size, "rank"),
      counted(measured.iterations, "iteration"), measured.data_checked ? ", data checked" : "");
  if (!measured.node_layout.empty()) {
    heading += fmt::format(
        "; node layout: {}: step time and communication are not the prediction's, only "
        "compute tasks ranked",
        measured.node_layout);
  } else if (!measured.communication_comparable()) {
    heading += fmt::format(
        "; scaled down, {} shards per rank: step time and communication are not the "
        "prediction's, only compute tasks ranked",
        measured.shards_per_rank);
  }
  return heading;
}

std::string measured_legend(const MeasuredComparison& measured) {
  std::string legend = "error = predicted / measured - 1";
  if (!measured.streams.empty()) {
    legend +=
        "; busy = rank 0's task durations on the stream, each the median of the steps, summed";
  }
  // As compare marks them (found by QA: report's stage table of a scaled-down pipeline
  // said nothing of its stages' times).
  if (!measured.stages.empty() && !measured.communication_comparable()) {
    legend +=
        fmt::format("; the stages' busy and end times hold their communication too, which ran {}",
                    measured.node_layout.empty() ? "over fewer ranks" : "over other links");
  }
  return legend;
}

std::string pareto_legend(const ScheduleFile& schedule) {
  // Label kinds as the tuners write them (tuner.cpp, pipeline_tuner.cpp), in this order.
  struct Kind {
    std::string_view marker;  // how a label of the kind starts or ends
    bool suffix;
    std::string_view meaning;
  };
  static constexpr Kind kKinds[] = {
      {"candidate #", false, "candidate #k = the search's simulation k (from 0)"},
      {"dp seed ", false, "dp seed s = the bucket DP's seed s (docs/tuner.md)"},
      {" kept", true,
       "X, last K kept = plan X with its last K buckets kept gathered from forward to backward"},
      {"min-memory", false, "min-memory = one unit per bucket, prefetch 1, everything resharded"},
      {"start plan ", false, "start plan n = the n-th --start-plan"},
      {"composition #", false,
       "composition #k = the per-stage tuner's composition k of its chunks' plans (from 0)"},
  };
  std::string legend;
  for (const Kind& kind : kKinds) {
    const bool present =
        std::any_of(schedule.pareto.begin(), schedule.pareto.end(), [&](const ParetoPoint& p) {
          return kind.suffix ? std::string_view(p.label).ends_with(kind.marker)
                             : std::string_view(p.label).starts_with(kind.marker);
        });
    if (present) legend += (legend.empty() ? "" : "; ") + std::string(kind.meaning);
  }
  // The fit column is at the predicted timing; a plan tuned under --fit any-timing was
  // picked by its peak at any timing, which a faster point may pass the limit at (found by
  // QA: the demo's front listed a point 0.03% faster than the pick, "fits yes").
  if (!schedule.pareto.empty() &&
      schedule.provenance.command.find(" --fit any-timing") != std::string::npos) {
    legend += std::string(legend.empty() ? "" : "; ") +
              "fits = the reserved peak within the limit at the predicted timing; tuned under "
              "--fit any-timing, the pick was judged at any timing, which a faster point may "
              "not fit";
  }
  return legend;
}

std::string efficiency_line(const ScheduleReport& schedule) {
  if (schedule.lower_bound_s <= 0) return "tuned plan vs lower bound: no lower bound recorded";
  // A step of 0 (a hand-made schedule) has no efficiency: "tuned inf s" before.
  if (schedule.tuned_efficiency <= 0) return "tuned plan vs lower bound: no predicted step time";
  return fmt::format("tuned plan vs lower bound: {} (lower bound {}, tuned {})",
                     format_percent(schedule.tuned_efficiency),
                     format_seconds(schedule.lower_bound_s),
                     format_seconds(schedule.lower_bound_s / schedule.tuned_efficiency));
}

std::vector<std::string> any_timing_lines(const ScheduleReport& schedule) {
  // A pipeline: its largest stage's, when every stage has its bound.
  if (!schedule.any_timing && !schedule.stages.empty() &&
      std::all_of(schedule.stages.begin(), schedule.stages.end(),
                  [](const ReportStage& stage) { return stage.any_timing.has_value(); })) {
    std::vector<StageAnyTiming> bounds;
    for (const ReportStage& stage : schedule.stages) bounds.push_back(*stage.any_timing);
    const StageAnyTiming& largest = largest_reserved_stage(bounds);
    const std::string other = most_allocated_clause(bounds);
    // Gradient accumulation without a pipeline is one stage of microbatches, not a pipeline
    // (found by QA: "tuned pipeline" above "no pipeline (gradient accumulation)").
    const bool pipelined = schedule.pp > 1;
    std::vector<std::string> lines = {fmt::format(
        "tuned {} at any timing: {} allocated, {} reserved at most ({} in order, each at any "
        "timing of its tasks{}), {}",
        pipelined ? "pipeline" : "plan", format_bytes(largest.peak_allocated_bytes),
        format_bytes(largest.peak_reserved_bytes),
        pipelined ? fmt::format("stage {}, its actions", largest.rank)
                  : std::string("its microbatches' actions"),
        other,
        any_timing_verdict(largest.peak_allocated_bytes, largest.peak_reserved_bytes,
                           schedule.memory_limit_bytes))};
    // The bound walks today's composition of the stored Programs; a version 2 schedule of
    // an older fsdptune stores figures of its own composition, which can lie above it (QA,
    // 2026-12-05: 57.5 MiB stored, 47.5 MiB bound, not said).
    const auto above =
        std::find_if(schedule.stages.begin(), schedule.stages.end(), [](const ReportStage& stage) {
          return stage.peak_allocated_bytes > stage.any_timing->peak_allocated_bytes;
        });
    if (above != schedule.stages.end()) {
      lines.push_back(fmt::format(
          "stage {} stores a peak of {} allocated, above that bound: the schedule's figures "
          "are an older fsdptune's composition; fsdptune simulate --plan gives today's",
          above->rank, format_bytes(above->peak_allocated_bytes)));
    }
    return lines;
  }
  if (!schedule.any_timing) return {};
  const ReportAnyTiming& bound = *schedule.any_timing;
  std::vector<std::string> lines = {
      fmt::format("tuned plan at any timing: {} allocated, {} reserved at most, {}",
                  format_bytes(bound.peak_allocated_bytes), format_bytes(bound.peak_reserved_bytes),
                  any_timing_verdict(bound.peak_allocated_bytes, bound.peak_reserved_bytes,
                                     schedule.memory_limit_bytes))};
  std::string parts;
  for (int c = 0; c < static_cast<int>(MemoryCategory::kCount); ++c) {
    const std::int64_t bytes = bound.peak_breakdown[static_cast<std::size_t>(c)];
    if (bytes == 0) continue;
    parts += fmt::format("{}{} {}", parts.empty() ? "" : ", ",
                         category_title(static_cast<MemoryCategory>(c)), format_bytes(bytes));
  }
  lines.push_back("holding " + (parts.empty() ? std::string("nothing") : parts));
  lines.push_back("worst state: " + bound.state);
  return lines;
}

}  // namespace report_detail

const StageAnyTiming& largest_reserved_stage(const std::vector<StageAnyTiming>& stages) {
  FSDPTUNE_CHECK(!stages.empty(), "largest_reserved_stage: no stage");
  return *std::max_element(stages.begin(), stages.end(),
                           [](const StageAnyTiming& a, const StageAnyTiming& b) {
                             // Ties (reserved rounds to segments) by allocated.
                             return std::pair(a.peak_reserved_bytes, a.peak_allocated_bytes) <
                                    std::pair(b.peak_reserved_bytes, b.peak_allocated_bytes);
                           });
}

std::string most_allocated_clause(const std::vector<StageAnyTiming>& stages) {
  // Found by QA: the largest reserved stage's "46.0 MiB allocated ... at most" beside another
  // stage's predicted 48.5 MiB.
  const StageAnyTiming& largest = largest_reserved_stage(stages);
  const StageAnyTiming& most = *std::max_element(
      stages.begin(), stages.end(), [](const StageAnyTiming& a, const StageAnyTiming& b) {
        return a.peak_allocated_bytes < b.peak_allocated_bytes;
      });
  if (most.peak_allocated_bytes <= largest.peak_allocated_bytes) return "";
  return fmt::format("; stage {} allocates the most, {} at most", most.rank,
                     format_bytes(most.peak_allocated_bytes));
}

std::string any_timing_verdict(std::int64_t allocated_bytes, std::int64_t reserved_bytes,
                               std::int64_t limit_bytes, bool fits_as_predicted) {
  const std::string limit = format_bytes(limit_bytes);
  if (reserved_bytes <= limit_bytes) {
    return fmt::format("within the {} limit at every timing", limit);
  }
  // Found by a tester: a plan 95 GiB over at its predicted timing was told that durations
  // far from the prediction run it out of memory and that --fit any-timing would help.
  if (!fits_as_predicted)
    return fmt::format("above the {} limit, as the predicted peak already is", limit);
  const bool allocated_over = allocated_bytes > limit_bytes;
  return fmt::format(
      "{} the {} limit: with durations far enough from the prediction this plan {} out of "
      "memory (tune --fit any-timing picks one that stays under it)",
      allocated_over ? "above" : "reserved above", limit, allocated_over ? "runs" : "can run");
}

std::string escape_xml(const std::string& raw) {
  // Valid UTF-8 first: a file name in another encoding, or U+FFFE, made the page malformed.
  const std::string text = valid_utf8(raw);
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        // Control characters other than tab and newline are not allowed in XML 1.0.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n') {
          out += ' ';
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::string json_number_text(double value) { return nlohmann::json(value).dump(); }
std::string json_number_text(std::int64_t value) { return nlohmann::json(value).dump(); }

std::string format_percent(double fraction) { return fmt::format("{:.1f}%", fraction * 100); }

std::string format_signed_percent(double fraction) {
  return fmt::format("{:+.1f}%", fraction * 100);
}

// One decimal, as tune, sweep and pipeline print it (a 405B pipeline's 94.5 was "95" here).
std::string format_rate(double tokens_per_s) { return fmt::format("{:.1f}", tokens_per_s); }

std::string rank_compute_summary(const std::vector<double>& rank_compute_s) {
  FSDPTUNE_CHECK(!rank_compute_s.empty(), "no rank to summarize");
  const auto slowest = std::max_element(rank_compute_s.begin(), rank_compute_s.end());
  const auto fastest = std::min_element(rank_compute_s.begin(), rank_compute_s.end());
  const double median_s = median_seconds(rank_compute_s);
  const auto against_median = [&](double seconds) {
    return median_s > 0 ? format_signed_percent(seconds / median_s - 1) : std::string("-");
  };
  return fmt::format(
      "compute by rank (its compute tasks' medians summed): median {}, slowest rank {} {} ({}), "
      "fastest rank {} {} ({})",
      format_seconds(median_s), slowest - rank_compute_s.begin(), format_seconds(*slowest),
      against_median(*slowest), fastest - rank_compute_s.begin(), format_seconds(*fastest),
      against_median(*fastest));
}

Report summarize_report(const std::vector<ReportEntry>& entries, const ReportOptions& options) {
  Report report;
  for (const ReportEntry& entry : entries) {
    const ScheduleFile& file = entry.schedule;
    ScheduleReport schedule;
    schedule.source = entry.source;
    schedule.model = file.model.name;
    schedule.hardware = file.hardware.id;
    schedule.gpus = file.job.gpus;
    schedule.dp_shard = file.job.dp_shard;
    schedule.cp = file.job.cp;
    schedule.tp = file.job.tp;
    schedule.dp_replicate = file.job.dp_replicate;
    schedule.pp = file.job.pp;
    schedule.microbatches = file.job.microbatches;
    schedule.pipeline_steps = file.job.pipeline_steps;
    schedule.pp_schedule = file.job.pp_schedule;
    schedule.virtual_stages = file.job.virtual_stages;
    schedule.pp_first_stage_less_layers = file.job.pp_first_stage_less_layers;
    schedule.pp_last_stage_less_layers = file.job.pp_last_stage_less_layers;
    schedule.pp_chunk_blocks = file.job.pp_chunk_blocks;
    schedule.ac = file.job.ac;
    schedule.float8 = file.job.float8;
    schedule.local_batch = file.job.local_batch;
    schedule.seq_len = file.job.seq_len;
    schedule.execution = file.job.execution;
    schedule.memory_limit_bytes = file.memory_limit_bytes;
    schedule.task_count = static_cast<std::int64_t>(file.program.tasks.size());
    // A pipeline schedule: every chunk's one-microbatch Program.
    if (file.pipeline) {
      for (const ScheduleChunk& chunk : file.pipeline->chunks) {
        schedule.task_count += static_cast<std::int64_t>(chunk.program.tasks.size());
      }
    }
    schedule.lower_bound_s = file.lower_bound_s;
    if (file.lower_bound_s > 0 && file.predicted.step_time_s > 0) {
      schedule.tuned_efficiency = file.lower_bound_s / file.predicted.step_time_s;
    }
    for (const PlanSummary& baseline : file.baselines) {
      schedule.plans.push_back(make_plan(baseline, false));
    }
    schedule.plans.push_back(make_plan(file.predicted, true));
    if (file.pipeline) {
      schedule.bubble_fraction = file.pipeline->bubble_fraction;
      schedule.send_s = file.pipeline->send_s;
      const bool bounded = entry.stage_any_timing.size() == file.pipeline->stages.size();
      for (std::size_t r = 0; r < file.pipeline->stages.size(); ++r) {
        const ScheduleStage& stage = file.pipeline->stages[r];
        schedule.stages.push_back(
            {stage.rank, stage.busy_s, stage.end_s, stage.max_in_flight, stage.peak_allocated_bytes,
             stage.peak_reserved_bytes, stage.peak_reserved_bytes <= file.memory_limit_bytes,
             bounded ? std::optional<StageAnyTiming>(entry.stage_any_timing[r]) : std::nullopt});
      }
    }
    schedule.pareto = file.pareto;
    schedule.any_timing = entry.any_timing;
    schedule.fits_at_any_timing =
        file.pipeline
            ? stages_fit_at_any_timing(schedule.stages, file.memory_limit_bytes)
            : entry.any_timing && entry.any_timing->peak_reserved_bytes <= file.memory_limit_bytes;
    if (entry.measured) schedule.measured = compare_measured(file, *entry.measured, options);
    report.schedules.push_back(std::move(schedule));
  }
  return report;
}

nlohmann::json report_to_json(const Report& report) {
  nlohmann::json json;
  // Named as every other output is (since 2026-12-05; found by QA: a version alone).
  json["format"] = kReportFormatName;
  json["version"] = report.version;
  json["schedules"] = nlohmann::json::array();
  for (const ScheduleReport& schedule : report.schedules) {
    nlohmann::json s;
    s["source"] = schedule.source;
    s["model"] = schedule.model;
    s["hardware"] = schedule.hardware;
    s["gpus"] = schedule.gpus;
    s["dp_shard"] = schedule.dp_shard;
    if (schedule.cp != 1) s["cp"] = schedule.cp;  // reports without CP keep their text
    // Likewise (since 2026-12-03: tokens/s/GPU divides by tp, which the summary lacked).
    if (schedule.tp != 1) s["tp"] = schedule.tp;
    if (schedule.dp_replicate != 1) s["dp_replicate"] = schedule.dp_replicate;
    // Likewise (since 2026-12-05: tokens/s/GPU counts them, which the summary lacked).
    if (schedule.pp != 1) s["pp"] = schedule.pp;
    if (schedule.microbatches != 1) s["microbatches"] = schedule.microbatches;
    if (schedule.pipeline_steps != 1) s["pipeline_steps"] = schedule.pipeline_steps;
    s["activation_checkpointing"] = to_string(schedule.ac);
    if (schedule.float8) s["float8"] = true;
    s["local_batch"] = schedule.local_batch;
    s["seq_len"] = schedule.seq_len;
    s["execution"] = to_string(schedule.execution);
    s["memory_limit_bytes"] = schedule.memory_limit_bytes;
    s["task_count"] = schedule.task_count;
    s["lower_bound_s"] = schedule.lower_bound_s;
    s["tuned_efficiency"] = schedule.tuned_efficiency;
    s["plans"] = nlohmann::json::array();
    for (const ReportPlan& plan : schedule.plans) {
      const PlanSummary& p = plan.summary;
      nlohmann::json row;
      row["name"] = p.plan_name;
      row["tuned"] = plan.tuned;
      row["step_time_s"] = p.step_time_s;
      row["tokens_per_s_per_gpu"] = p.tokens_per_s_per_gpu;
      row["mfu"] = p.mfu;
      row["compute_s"] = p.compute_s;
      row["comm_s"] = p.comm_s;
      row["exposed_comm_s"] = p.exposed_comm_s;
      row["idle_s"] = p.idle_s;
      row["peak_allocated_bytes"] = p.peak_allocated_bytes;
      row["peak_reserved_bytes"] = p.peak_reserved_bytes;
      row["allocator_reserve_bytes"] = plan.allocator_reserve_bytes;
      row["peak_breakdown"] = breakdown_to_json(p.peak_breakdown);
      row["fits"] = p.fits;
      s["plans"].push_back(std::move(row));
    }
    // Only for a pipeline, and only where the tuner stored a front: other reports keep
    // their text.
    if (!schedule.stages.empty()) {
      nlohmann::json stages = nlohmann::json::array();
      for (const ReportStage& stage : schedule.stages) {
        nlohmann::json row = {{"rank", stage.rank},
                              {"busy_s", stage.busy_s},
                              {"end_s", stage.end_s},
                              {"max_in_flight", stage.max_in_flight},
                              {"peak_allocated_bytes", stage.peak_allocated_bytes},
                              {"peak_reserved_bytes", stage.peak_reserved_bytes},
                              {"fits", stage.fits}};
        // Where the caller computed them (since 2026-12-04): other reports keep their text.
        if (stage.any_timing) {
          row["any_timing_peak_allocated_bytes"] = stage.any_timing->peak_allocated_bytes;
          row["any_timing_peak_reserved_bytes"] = stage.any_timing->peak_reserved_bytes;
        }
        stages.push_back(std::move(row));
      }
      s["pipeline"] = {{"schedule", to_string(schedule.pp_schedule)},
                       {"virtual_stages", schedule.virtual_stages},
                       {"first_stage_less_layers", schedule.pp_first_stage_less_layers},
                       {"last_stage_less_layers", schedule.pp_last_stage_less_layers},
                       {"bubble_fraction", schedule.bubble_fraction},
                       {"send_s", schedule.send_s},
                       {"stages", std::move(stages)}};
      if (!schedule.pp_chunk_blocks.empty()) {
        s["pipeline"]["chunk_blocks"] = schedule.pp_chunk_blocks;
      }
    }
    if (!schedule.pareto.empty()) {
      nlohmann::json pareto = nlohmann::json::array();
      for (const ParetoPoint& point : schedule.pareto) {
        pareto.push_back({{"label", point.label},
                          {"step_time_s", point.step_time_s},
                          {"peak_allocated_bytes", point.peak_allocated_bytes},
                          {"peak_reserved_bytes", point.peak_reserved_bytes}});
      }
      s["pareto"] = std::move(pareto);
    }
    // Only where the caller computed it: other reports keep their text.
    if (schedule.any_timing) {
      const ReportAnyTiming& bound = *schedule.any_timing;
      s["any_timing"] = {
          {"peak_allocated_bytes", bound.peak_allocated_bytes},
          {"peak_reserved_bytes", bound.peak_reserved_bytes},
          {"allocator_reserve_bytes",
           std::max<std::int64_t>(0, bound.peak_reserved_bytes - bound.peak_allocated_bytes)},
          {"peak_breakdown", breakdown_to_json(bound.peak_breakdown)},
          {"state", bound.state},
          {"fits", schedule.fits_at_any_timing}};
    }
    if (schedule.measured) {
      const MeasuredComparison& m = *schedule.measured;
      nlohmann::json measured;
      measured["backend"] = m.backend;
      measured["world_size"] = m.world_size;
      measured["iterations"] = m.iterations;
      measured["data_checked"] = m.data_checked;
      measured["predicted_step_time_s"] = m.predicted_step_time_s;
      measured["measured_step_time_s"] = m.measured_step_time_s;
      measured["step_time_relative_error"] = m.step_time_relative_error;
      measured["predicted_exposed_comm_s"] = m.predicted_exposed_comm_s;
      measured["measured_exposed_comm_s"] = m.measured_exposed_comm_s;
      measured["predicted_peak_allocated_bytes"] = m.predicted_peak_allocated_bytes;
      measured["measured_peak_allocated_bytes"] = m.measured_peak_allocated_bytes;
      measured["exposed_comm_relative_error"] = m.exposed_comm_relative_error;
      measured["peak_relative_error"] = m.peak_relative_error;
      // Only for a scaled-down replay: other summaries keep their text.
      if (m.shards_per_rank != 1) measured["shards_per_rank"] = m.shards_per_rank;
      if (!m.node_layout.empty()) measured["node_layout"] = m.node_layout;  // likewise
      measured["streams"] = nlohmann::json::array();
      for (const StreamComparison& stream : m.streams) {
        measured["streams"].push_back({{"stream", stream.stream},
                                       {"predicted_busy_s", stream.predicted_busy_s},
                                       {"measured_busy_s", stream.measured_busy_s},
                                       {"relative_error", stream.relative_error}});
      }
      measured["largest_task_errors"] = nlohmann::json::array();
      for (const TaskError& error : m.largest_task_errors) {
        measured["largest_task_errors"].push_back({{"task", error.task},
                                                   {"name", error.name},
                                                   {"stream", error.stream},
                                                   {"predicted_s", error.predicted_s},
                                                   {"measured_s", error.measured_s},
                                                   {"error_s", error.error_s},
                                                   {"relative_error", error.relative_error}});
      }
      // Only where measured: reports of older measurements keep their text.
      if (!m.rank_compute_s.empty()) measured["rank_compute_s"] = m.rank_compute_s;
      // Only for a pipeline: other reports keep their text.
      if (!m.stages.empty()) {
        measured["stages"] = nlohmann::json::array();
        for (const StageMeasurement& stage : m.stages) {
          measured["stages"].push_back(
              {{"rank", stage.rank},
               {"predicted_busy_s", stage.predicted_busy_s},
               {"measured_busy_s", stage.measured_busy_s},
               {"busy_relative_error", stage.busy_relative_error},
               {"predicted_end_s", stage.predicted_end_s},
               {"measured_end_s", stage.measured_end_s},
               {"end_relative_error", stage.end_relative_error},
               {"predicted_peak_allocated_bytes", stage.predicted_peak_allocated_bytes},
               {"measured_peak_allocated_bytes", stage.measured_peak_allocated_bytes},
               {"peak_relative_error", stage.peak_relative_error}});
        }
      }
      s["measured"] = std::move(measured);
    } else {
      s["measured"] = nullptr;
    }
    json["schedules"].push_back(std::move(s));
  }
  return json;
}

Report report_from_json(const nlohmann::json& json, const std::string& source) {
  Report report;
  // Optional: summaries written before 2026-12-05 have none.
  check_format_field(json, kReportFormatName, source + "/format");
  report.version = field<int>(json, "version", source);
  if (report.version != kReportFormatVersion) {
    throw_bad_input(source + "/version",
                    fmt::format("report version {} is not supported (this build reads {})",
                                report.version, kReportFormatVersion));
  }
  const nlohmann::json& schedules = array_field(json, "schedules", source);
  for (std::size_t i = 0; i < schedules.size(); ++i) {
    const nlohmann::json& s = schedules[i];
    const std::string where = fmt::format("{}/schedules/{}", source, i);
    ScheduleReport schedule;
    schedule.source = field<std::string>(s, "source", where);
    schedule.model = field<std::string>(s, "model", where);
    schedule.hardware = field<std::string>(s, "hardware", where);
    schedule.gpus = field<std::int64_t>(s, "gpus", where);
    schedule.dp_shard = field<std::int64_t>(s, "dp_shard", where);
    if (s.contains("cp")) schedule.cp = field<std::int64_t>(s, "cp", where);
    if (s.contains("tp")) schedule.tp = field<std::int64_t>(s, "tp", where);
    if (s.contains("dp_replicate")) {
      schedule.dp_replicate = field<std::int64_t>(s, "dp_replicate", where);
    }
    // Absent without a pipeline, and in summaries written before 2026-12-05.
    if (s.contains("pp")) schedule.pp = field<std::int64_t>(s, "pp", where);
    if (s.contains("microbatches")) {
      schedule.microbatches = field<std::int64_t>(s, "microbatches", where);
    }
    if (s.contains("pipeline_steps")) {
      schedule.pipeline_steps = field<std::int64_t>(s, "pipeline_steps", where);
    }
    // Absent from reports written before it: none.
    if (s.contains("activation_checkpointing")) {
      schedule.ac = ac_from_string(field<std::string>(s, "activation_checkpointing", where),
                                   where + "/activation_checkpointing");
    }
    if (s.contains("float8")) schedule.float8 = field<bool>(s, "float8", where);
    schedule.local_batch = field<std::int64_t>(s, "local_batch", where);
    schedule.seq_len = field<std::int64_t>(s, "seq_len", where);
    // Absent from reports written before it: compiled, as their schedules were.
    if (s.contains("execution")) {
      schedule.execution =
          execution_from_string(field<std::string>(s, "execution", where), where + "/execution");
    }
    schedule.memory_limit_bytes = field<std::int64_t>(s, "memory_limit_bytes", where);
    schedule.task_count = field<std::int64_t>(s, "task_count", where);
    schedule.lower_bound_s = field<double>(s, "lower_bound_s", where);
    schedule.tuned_efficiency = field<double>(s, "tuned_efficiency", where);
    const nlohmann::json& plans = array_field(s, "plans", where);
    for (std::size_t p = 0; p < plans.size(); ++p) {
      const std::string plan_where = fmt::format("{}/plans/{}", where, p);
      ReportPlan plan;
      plan.summary = plan_summary_from_json(plans[p], plan_where);
      plan.tuned = field<bool>(plans[p], "tuned", plan_where);
      plan.allocator_reserve_bytes =
          field<std::int64_t>(plans[p], "allocator_reserve_bytes", plan_where);
      schedule.plans.push_back(std::move(plan));
    }
    // Absent from reports of schedules without a pipeline or a front, and written before.
    if (s.contains("pipeline")) {
      const std::string pipeline_where = where + "/pipeline";
      const nlohmann::json& pipeline = s.at("pipeline");
      schedule.bubble_fraction = field<double>(pipeline, "bubble_fraction", pipeline_where);
      schedule.send_s = field<double>(pipeline, "send_s", pipeline_where);
      // The shape: absent in summaries written before 2026-12-05.
      if (pipeline.contains("schedule")) {
        schedule.pp_schedule = pipeline_schedule_from_string(
            field<std::string>(pipeline, "schedule", pipeline_where), pipeline_where + "/schedule");
      }
      if (pipeline.contains("virtual_stages")) {
        schedule.virtual_stages = field<std::int64_t>(pipeline, "virtual_stages", pipeline_where);
      }
      if (pipeline.contains("first_stage_less_layers")) {
        schedule.pp_first_stage_less_layers =
            field<std::int64_t>(pipeline, "first_stage_less_layers", pipeline_where);
      }
      if (pipeline.contains("last_stage_less_layers")) {
        schedule.pp_last_stage_less_layers =
            field<std::int64_t>(pipeline, "last_stage_less_layers", pipeline_where);
      }
      if (pipeline.contains("chunk_blocks")) {
        schedule.pp_chunk_blocks =
            field<std::vector<std::int64_t>>(pipeline, "chunk_blocks", pipeline_where);
      }
      const nlohmann::json& stages = array_field(pipeline, "stages", pipeline_where);
      for (std::size_t r = 0; r < stages.size(); ++r) {
        const std::string at = fmt::format("{}/stages/{}", pipeline_where, r);
        ReportStage stage{field<int>(stages[r], "rank", at),
                          field<double>(stages[r], "busy_s", at),
                          field<double>(stages[r], "end_s", at),
                          field<std::int64_t>(stages[r], "max_in_flight", at),
                          field<std::int64_t>(stages[r], "peak_allocated_bytes", at),
                          field<std::int64_t>(stages[r], "peak_reserved_bytes", at),
                          field<bool>(stages[r], "fits", at),
                          std::nullopt};
        // Both or neither (one alone is refused, naming the other).
        if (stages[r].contains("any_timing_peak_reserved_bytes") ||
            stages[r].contains("any_timing_peak_allocated_bytes")) {
          stage.any_timing = StageAnyTiming{
              stage.rank, field<std::int64_t>(stages[r], "any_timing_peak_allocated_bytes", at),
              field<std::int64_t>(stages[r], "any_timing_peak_reserved_bytes", at)};
        }
        schedule.stages.push_back(std::move(stage));
      }
      schedule.fits_at_any_timing =
          stages_fit_at_any_timing(schedule.stages, schedule.memory_limit_bytes);
    }
    if (s.contains("pareto")) {
      const nlohmann::json& pareto = array_field(s, "pareto", where);
      for (std::size_t k = 0; k < pareto.size(); ++k) {
        const std::string at = fmt::format("{}/pareto/{}", where, k);
        ParetoPoint point;
        point.label = field<std::string>(pareto[k], "label", at);
        point.step_time_s = field<double>(pareto[k], "step_time_s", at);
        point.peak_allocated_bytes = field<std::int64_t>(pareto[k], "peak_allocated_bytes", at);
        point.peak_reserved_bytes = field<std::int64_t>(pareto[k], "peak_reserved_bytes", at);
        schedule.pareto.push_back(std::move(point));
      }
    }
    if (s.contains("any_timing")) {
      const nlohmann::json& bound_json = s.at("any_timing");
      const std::string at = where + "/any_timing";
      ReportAnyTiming bound;
      bound.peak_allocated_bytes = field<std::int64_t>(bound_json, "peak_allocated_bytes", at);
      bound.peak_reserved_bytes = field<std::int64_t>(bound_json, "peak_reserved_bytes", at);
      bound.peak_breakdown = breakdown_from_json(bound_json, at);
      bound.state = field<std::string>(bound_json, "state", at);
      // A verdict is its figures': one that says otherwise is refused.
      schedule.fits_at_any_timing = bound.peak_reserved_bytes <= schedule.memory_limit_bytes;
      if (field<bool>(bound_json, "fits", at) != schedule.fits_at_any_timing) {
        throw_bad_input(at + "/fits",
                        fmt::format("is {}, but peak_reserved_bytes {} against memory_limit_bytes "
                                    "{} says {}",
                                    !schedule.fits_at_any_timing, bound.peak_reserved_bytes,
                                    schedule.memory_limit_bytes, schedule.fits_at_any_timing));
      }
      schedule.any_timing = std::move(bound);
    }
    if (!s.contains("measured")) throw_bad_input(where + "/measured", "missing field");
    if (!s.at("measured").is_null()) {
      const nlohmann::json& m = s.at("measured");
      const std::string measured_where = where + "/measured";
      MeasuredComparison measured;
      measured.backend = field<std::string>(m, "backend", measured_where);
      measured.world_size = field<std::int64_t>(m, "world_size", measured_where);
      measured.iterations = field<std::int64_t>(m, "iterations", measured_where);
      measured.data_checked = field<bool>(m, "data_checked", measured_where);
      measured.predicted_step_time_s = field<double>(m, "predicted_step_time_s", measured_where);
      measured.measured_step_time_s = field<double>(m, "measured_step_time_s", measured_where);
      measured.step_time_relative_error =
          field<double>(m, "step_time_relative_error", measured_where);
      measured.predicted_exposed_comm_s =
          field<double>(m, "predicted_exposed_comm_s", measured_where);
      measured.measured_exposed_comm_s =
          field<double>(m, "measured_exposed_comm_s", measured_where);
      measured.predicted_peak_allocated_bytes =
          field<std::int64_t>(m, "predicted_peak_allocated_bytes", measured_where);
      measured.measured_peak_allocated_bytes =
          field<std::int64_t>(m, "measured_peak_allocated_bytes", measured_where);
      if (m.contains("shards_per_rank")) {
        measured.shards_per_rank = field<std::int64_t>(m, "shards_per_rank", measured_where);
        if (measured.shards_per_rank < 1) {
          throw_bad_input(measured_where + "/shards_per_rank", "must be >= 1");
        }
      }
      if (m.contains("node_layout")) {
        measured.node_layout = field<std::string>(m, "node_layout", measured_where);
      }
      // Since 2026-12-03; of an older summary, from its figures.
      measured.exposed_comm_relative_error =
          m.contains("exposed_comm_relative_error")
              ? field<double>(m, "exposed_comm_relative_error", measured_where)
              : prediction_error(measured.predicted_exposed_comm_s,
                                 measured.measured_exposed_comm_s);
      measured.peak_relative_error =
          m.contains("peak_relative_error")
              ? field<double>(m, "peak_relative_error", measured_where)
              : prediction_error(static_cast<double>(measured.predicted_peak_allocated_bytes),
                                 static_cast<double>(measured.measured_peak_allocated_bytes));
      const nlohmann::json& streams = array_field(m, "streams", measured_where);
      for (std::size_t k = 0; k < streams.size(); ++k) {
        const std::string stream_where = fmt::format("{}/streams/{}", measured_where, k);
        measured.streams.push_back({field<std::string>(streams[k], "stream", stream_where),
                                    field<double>(streams[k], "predicted_busy_s", stream_where),
                                    field<double>(streams[k], "measured_busy_s", stream_where),
                                    field<double>(streams[k], "relative_error", stream_where)});
      }
      const nlohmann::json& errors = array_field(m, "largest_task_errors", measured_where);
      for (std::size_t k = 0; k < errors.size(); ++k) {
        const std::string error_where = fmt::format("{}/largest_task_errors/{}", measured_where, k);
        measured.largest_task_errors.push_back(
            {field<int>(errors[k], "task", error_where),
             field<std::string>(errors[k], "name", error_where),
             field<std::string>(errors[k], "stream", error_where),
             field<double>(errors[k], "predicted_s", error_where),
             field<double>(errors[k], "measured_s", error_where),
             field<double>(errors[k], "error_s", error_where),
             field<double>(errors[k], "relative_error", error_where)});
      }
      if (m.contains("rank_compute_s")) {
        const nlohmann::json& ranks = array_field(m, "rank_compute_s", measured_where);
        for (std::size_t r = 0; r < ranks.size(); ++r) {
          if (!ranks[r].is_number()) {
            throw_bad_input(fmt::format("{}/rank_compute_s/{}", measured_where, r), "not a number");
          }
          measured.rank_compute_s.push_back(ranks[r].get<double>());
        }
      }
      if (m.contains("stages")) {
        const nlohmann::json& stages = array_field(m, "stages", measured_where);
        for (std::size_t r = 0; r < stages.size(); ++r) {
          const std::string stage_where = fmt::format("{}/stages/{}", measured_where, r);
          const nlohmann::json& j = stages[r];
          StageMeasurement stage;
          stage.rank = field<int>(j, "rank", stage_where);
          stage.predicted_busy_s = field<double>(j, "predicted_busy_s", stage_where);
          stage.measured_busy_s = field<double>(j, "measured_busy_s", stage_where);
          stage.busy_relative_error = field<double>(j, "busy_relative_error", stage_where);
          stage.predicted_end_s = field<double>(j, "predicted_end_s", stage_where);
          stage.measured_end_s = field<double>(j, "measured_end_s", stage_where);
          stage.end_relative_error = field<double>(j, "end_relative_error", stage_where);
          stage.predicted_peak_allocated_bytes =
              field<std::int64_t>(j, "predicted_peak_allocated_bytes", stage_where);
          stage.measured_peak_allocated_bytes =
              field<std::int64_t>(j, "measured_peak_allocated_bytes", stage_where);
          stage.peak_relative_error = field<double>(j, "peak_relative_error", stage_where);
          measured.stages.push_back(stage);
        }
      }
      schedule.measured = std::move(measured);
    }
    report.schedules.push_back(std::move(schedule));
  }
  return report;
}

namespace {

// Predicted against measured, one row per figure and per stream (text and Markdown tables).
std::vector<std::vector<std::string>> measured_rows(const MeasuredComparison& m) {
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"figure", "predicted", "measured", "error"});
  rows.push_back({"step time", format_seconds(m.predicted_step_time_s),
                  format_seconds(m.measured_step_time_s),
                  format_signed_percent(m.step_time_relative_error)});
  rows.push_back({"exposed comm", format_seconds(m.predicted_exposed_comm_s),
                  format_seconds(m.measured_exposed_comm_s),
                  format_signed_percent(m.exposed_comm_relative_error)});
  rows.push_back({"peak allocated", format_bytes(m.predicted_peak_allocated_bytes),
                  format_bytes(m.measured_peak_allocated_bytes),
                  format_signed_percent(m.peak_relative_error)});
  for (const StreamComparison& stream : m.streams) {
    rows.push_back({"busy " + stream.stream, format_seconds(stream.predicted_busy_s),
                    format_seconds(stream.measured_busy_s),
                    format_signed_percent(stream.relative_error)});
  }
  return rows;
}

// A replayed pipeline's stages: busy time, end and peak, predicted against measured.
std::vector<std::vector<std::string>> stage_measured_rows(const MeasuredComparison& m) {
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"stage", "busy pred", "measured", "error", "end pred", "measured", "error",
                  "peak pred", "measured", "error"});
  for (const StageMeasurement& stage : m.stages) {
    rows.push_back({std::to_string(stage.rank), format_seconds(stage.predicted_busy_s),
                    format_seconds(stage.measured_busy_s),
                    format_signed_percent(stage.busy_relative_error),
                    format_seconds(stage.predicted_end_s), format_seconds(stage.measured_end_s),
                    format_signed_percent(stage.end_relative_error),
                    format_bytes(stage.predicted_peak_allocated_bytes),
                    format_bytes(stage.measured_peak_allocated_bytes),
                    format_signed_percent(stage.peak_relative_error)});
  }
  return rows;
}

// The Pareto front the tuner explored (ScheduleFile::pareto, by increasing peak): the
// same points the HTML chart draws. Version 2 points are whole pipelines, their peak the
// largest stage's. A point fits when its reserved peak is within the schedule's limit;
// files written before points carried a reserved peak (0) say "-" for both.
std::vector<std::vector<std::string>> pareto_rows(const ScheduleFile& schedule) {
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"plan", "step time", "peak allocated", "peak reserved", "fits"});
  for (const ParetoPoint& point : schedule.pareto) {
    const bool known = point.peak_reserved_bytes > 0;
    rows.push_back(
        {point.label, format_seconds(point.step_time_s), format_bytes(point.peak_allocated_bytes),
         known ? format_bytes(point.peak_reserved_bytes) : "-",
         !known ? "-" : (point.peak_reserved_bytes <= schedule.memory_limit_bytes ? "yes" : "no")});
  }
  return rows;
}

// The tasks whose measured duration differs most from the prediction.
std::vector<std::vector<std::string>> task_error_rows(const MeasuredComparison& m) {
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"task", "stream", "predicted", "measured", "error"});
  for (const TaskError& error : m.largest_task_errors) {
    rows.push_back({fmt::format("#{} {}", error.task, error.name), error.stream,
                    format_seconds(error.predicted_s), format_seconds(error.measured_s),
                    format_signed_percent(error.relative_error)});
  }
  return rows;
}

}  // namespace

std::string render_report_text(const std::vector<ReportEntry>& entries,
                               const ReportOptions& options) {
  const Report report = summarize_report(entries, options);
  std::string out;
  for (std::size_t i = 0; i < report.schedules.size(); ++i) {
    const ScheduleReport& schedule = report.schedules[i];
    if (i > 0) out += "\n";
    out += schedule_heading(schedule) + "\n";
    out += text_table(report_detail::plan_table_rows(schedule), "  ");
    out += "  (* = the schedule's tuned plan)\n";
    const ScheduleFile& file = entries[i].schedule;
    if (throughput_caveat_applies(file.cost_queries, file.cost_fallbacks, file.job.pp)) {
      out += std::string("  ") + kThroughputCaveat + "\n";
    }
    if (const std::string basis = report_detail::mfu_basis_line(file); !basis.empty()) {
      out += "  " + basis + "\n";
    }
    out += "  " + report_detail::efficiency_line(schedule) + "\n";
    const std::vector<std::string> any_timing = report_detail::any_timing_lines(schedule);
    for (std::size_t l = 0; l < any_timing.size(); ++l) {
      out += (l == 0 ? "  " : "    ") + any_timing[l] + "\n";
    }
    if (entries[i].schedule.pipeline) {
      out += "  " + pipeline_line(entries[i].schedule) + "\n";
      out += text_table(stage_rows(entries[i].schedule, schedule), "    ");
    }
    if (!entries[i].schedule.pareto.empty()) {
      out += "  Pareto front explored by the tuner (peak allocated against step time):\n";
      out += text_table(pareto_rows(entries[i].schedule), "    ");
      const std::string legend = report_detail::pareto_legend(entries[i].schedule);
      if (!legend.empty()) out += "    " + legend + "\n";
    }
    if (!schedule.measured) continue;
    const MeasuredComparison& m = *schedule.measured;
    out += fmt::format("  predicted vs measured ({}):\n", report_detail::measured_heading(m));
    const auto rows = measured_rows(m);
    out += text_table(rows, "    ");
    out += "  " + report_detail::measured_legend(m) + "\n";
    if (m.rank_compute_s.size() > 1) {
      out += "  ";
      out += rank_compute_summary(m.rank_compute_s);
      out += "\n";
    }
    if (!m.stages.empty()) {
      out += "  pipeline stages, predicted vs measured:\n";
      out += text_table(stage_measured_rows(m), "    ");
    }
    if (!m.largest_task_errors.empty()) {
      out += "  largest per-task errors:\n";
      const auto task_rows = task_error_rows(m);
      out += text_table(task_rows, "    ");
    }
  }
  // Several schedules: which is best, last (what a terminal shows).
  if (const auto ranking = report_detail::ranking_rows(report); !ranking.empty()) {
    out += "\nranking of the tuned plans (those that fit first, then by tokens/s/GPU):\n";
    out += text_table(ranking, "  ");
    if (const std::string caveat = report_detail::ranking_caveat(report); !caveat.empty()) {
      out += "  note: " + caveat + "\n";
    }
  }
  return out;
}

std::string render_report_markdown(const std::vector<ReportEntry>& entries,
                                   const ReportOptions& options) {
  const Report report = summarize_report(entries, options);
  std::string out = "# fsdptune report\n";
  // Several schedules: which is best, first.
  if (const auto ranking = report_detail::ranking_rows(report); !ranking.empty()) {
    out += "\n## Ranking of the tuned plans\n\nThose that fit first, then by tokens/s/GPU.\n\n";
    out += markdown_table(ranking);
    if (const std::string caveat = report_detail::ranking_caveat(report); !caveat.empty()) {
      out += "\nNote: " + markdown_cell(caveat) + ".\n";
    }
  }
  for (std::size_t i = 0; i < report.schedules.size(); ++i) {
    const ScheduleReport& schedule = report.schedules[i];
    out += "\n## " + markdown_cell(schedule_heading(schedule)) + "\n\n";
    out += markdown_table(report_detail::plan_table_rows(schedule));
    out += "\n`*` marks the schedule's tuned plan. " +
           markdown_cell(report_detail::efficiency_line(schedule)) + ".";
    const ScheduleFile& file = entries[i].schedule;
    if (throughput_caveat_applies(file.cost_queries, file.cost_fallbacks, file.job.pp)) {
      out += fmt::format(" {}.", markdown_cell(kThroughputCaveat));
    }
    if (const std::string basis = report_detail::mfu_basis_line(file); !basis.empty()) {
      out += fmt::format(" {}.", markdown_cell(basis));
    }
    out += "\n";
    const std::vector<std::string> any_timing = report_detail::any_timing_lines(schedule);
    for (std::size_t l = 0; l < any_timing.size(); ++l) {
      // The first line is a paragraph, the rest a list after it; one blank line before
      // what follows (a pipeline's one line had two, found by QA).
      if (l == 0) {
        out += "\n";
        out += markdown_cell(any_timing[l]);
        out += ".\n";
      } else {
        out += l == 1 ? "\n- " : "- ";
        out += markdown_cell(any_timing[l]);
        out += "\n";
      }
    }
    if (entries[i].schedule.pipeline) {
      out +=
          "\n### Pipeline stages\n\n" + markdown_cell(pipeline_line(entries[i].schedule)) + ".\n\n";
      out += markdown_table(stage_rows(entries[i].schedule, schedule));
    }
    if (!entries[i].schedule.pareto.empty()) {
      out += "\n### Pareto front explored by the tuner\n\n";
      out += markdown_table(pareto_rows(entries[i].schedule));
      const std::string legend = report_detail::pareto_legend(entries[i].schedule);
      if (!legend.empty()) {
        out += "\n";
        out += markdown_cell(legend);
        out += ".\n";
      }
    }
    if (!schedule.measured) continue;
    const MeasuredComparison& m = *schedule.measured;
    out += "\n### Predicted vs measured (" + markdown_cell(report_detail::measured_heading(m)) +
           ")\n\n";
    const auto rows = measured_rows(m);
    out += markdown_table(rows);
    out += "\n";
    out += markdown_cell(report_detail::measured_legend(m));
    out += ".\n";
    if (m.rank_compute_s.size() > 1) {
      out += "\n";
      out += markdown_cell(rank_compute_summary(m.rank_compute_s));
      out += ".\n";
    }
    if (!m.stages.empty()) {
      out += "\n#### Pipeline stages, predicted vs measured\n\n";
      out += markdown_table(stage_measured_rows(m));
    }
    if (!m.largest_task_errors.empty()) {
      out += "\n#### Largest per-task errors\n\n";
      const auto task_rows = task_error_rows(m);
      out += markdown_table(task_rows);
    }
  }
  return out;
}

}  // namespace fsdptune
