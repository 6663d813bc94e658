#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fsdptune/error.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/report.hpp"
#include "fsdptune/schedule.hpp"
#include "fsdptune/units.hpp"
#include "report_fixture.hpp"

using namespace fsdptune;
using namespace fsdptune::report_test;

namespace {

std::vector<ReportEntry> entries(bool with_measured) {
  ReportEntry entry;
  entry.source = "out/schedule.json";
  entry.schedule = make_schedule();
  if (with_measured) entry.measured = make_measured();
  return {entry};
}

// entries(with_measured) whose tuned plan can reach, at some timing, 900 MiB allocated
// and 1100 MiB reserved (the fixture's Program has no memory events: the figures are the
// caller's, as `fsdptune report` computes them with any_timing_peak).
std::vector<ReportEntry> entries_with_any_timing(bool with_measured) {
  auto input = entries(with_measured);
  ReportAnyTiming bound;
  bound.peak_allocated_bytes = 900 * kMiB;
  bound.peak_reserved_bytes = 1100 * kMiB;
  bound.peak_breakdown = {100 * kMiB, 500 * kMiB, 100 * kMiB, 200 * kMiB, 0};
  bound.state = "compute in \"bwd layers.0\", all_gather after \"AG b1 [layers.0]\"";
  input[0].any_timing = bound;
  return input;
}

// report_from_json refuses `json` (read from `source`) as bad input naming `where`.
void check_refused(const nlohmann::json& json, const std::string& source,
                   const std::string& where) {
  try {
    report_from_json(json, source);
    FAIL("accepted a report with a bad " << where);
  } catch (const Error& e) {
    CHECK(e.where() == where);
    CHECK(e.exit_code() == 2);
  }
}

std::size_t count(const std::string& haystack, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = haystack.find(needle); at != std::string::npos;
       at = haystack.find(needle, at + needle.size())) {
    ++n;
  }
  return n;
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The display format the tables use for the figure at `pointer` (by its key).
std::string expected_display(const std::string& pointer, const nlohmann::json& value) {
  const std::string key = pointer.substr(pointer.rfind('/') + 1);
  if (key == "mfu" || key == "tuned_efficiency") return format_percent(value.get<double>());
  if (ends_with(key, "relative_error")) return format_signed_percent(value.get<double>());
  if (key == "tokens_per_s_per_gpu") return format_rate(value.get<double>());
  if (ends_with(key, "_bytes") || pointer.find("/peak_breakdown/") != std::string::npos) {
    return format_bytes(value.get<std::int64_t>());
  }
  if (ends_with(key, "_s")) return format_seconds(value.get<double>());
  FAIL("no display format known for " << pointer);
  return "";
}

}  // namespace

TEST_CASE("summarize_report lists the baselines then the tuned plan", "[report]") {
  const Report report = summarize_report(entries(false));
  REQUIRE(report.schedules.size() == 1);
  const ScheduleReport& schedule = report.schedules[0];
  REQUIRE(schedule.plans.size() == 3);
  CHECK(schedule.plans[0].summary.plan_name == "fsdp2");
  CHECK(schedule.plans[1].summary.plan_name == "simplefsdp-block");
  CHECK(schedule.plans[2].summary.plan_name == "tuned");
  CHECK_FALSE(schedule.plans[0].tuned);
  CHECK(schedule.plans[2].tuned);
  // Allocator reserve = reserved - allocated = 700 - 600 MiB.
  CHECK(schedule.plans[2].allocator_reserve_bytes == 100 * kMiB);
  // Efficiency = lower bound / tuned step = 12.8 / 16 units.
  CHECK(schedule.tuned_efficiency == Approx(0.8));
  CHECK(schedule.task_count == 8);
  CHECK_FALSE(schedule.measured.has_value());
}

TEST_CASE("allocator reserve is never negative", "[report]") {
  auto input = entries(false);
  input[0].schedule.predicted.peak_reserved_bytes = 10;  // below allocated: a bad estimate
  CHECK(summarize_report(input).schedules[0].plans.back().allocator_reserve_bytes == 0);
}

TEST_CASE("predicted vs measured per stream and per task", "[report]") {
  ReportOptions options;
  options.largest_task_errors = 3;
  const Report report = summarize_report(entries(true), options);
  REQUIRE(report.schedules[0].measured.has_value());
  const MeasuredComparison& m = *report.schedules[0].measured;
  CHECK(m.predicted_step_time_s == 16 * kUnitS);
  CHECK(m.measured_step_time_s == 19 * kUnitS);
  CHECK(m.step_time_relative_error == Approx(16.0 / 19 - 1));
  // Exposed communication 3 units predicted, 4 measured; peak 600 MiB against 640 MiB.
  CHECK(m.exposed_comm_relative_error == Approx(3.0 / 4 - 1));
  CHECK(m.peak_relative_error == Approx(600.0 / 640 - 1));
  CHECK(m.data_checked);
  REQUIRE(m.streams.size() == 3);
  // compute: predicted 1+3+6+2 = 12, measured 1+3+7+2 = 13 units.
  CHECK(m.streams[0].stream == "compute");
  CHECK(m.streams[0].predicted_busy_s == 12 * kUnitS);
  CHECK(m.streams[0].measured_busy_s == 13 * kUnitS);
  CHECK(m.streams[0].relative_error == Approx(12.0 / 13 - 1));
  // all_gather: 1+2 = 3 vs 1.5+3 = 4.5; reduce_scatter: 3+1 = 4 vs 3+1.5 = 4.5.
  CHECK(m.streams[1].predicted_busy_s == 3 * kUnitS);
  CHECK(m.streams[1].measured_busy_s == 4.5 * kUnitS);
  CHECK(m.streams[1].relative_error == Approx(-1.0 / 3));
  CHECK(m.streams[2].predicted_busy_s == 4 * kUnitS);
  CHECK(m.streams[2].measured_busy_s == 4.5 * kUnitS);
  // Errors (predicted - measured): t0 -0.5, t2 -1, t4 -1, t7 -0.5, the rest 0. Largest
  // first, ties by id: t2, t4, then t0 (before t7).
  REQUIRE(m.largest_task_errors.size() == 3);
  CHECK(m.largest_task_errors[0].task == 2);
  CHECK(m.largest_task_errors[0].name == "AG b1 [layers.0]");
  CHECK(m.largest_task_errors[0].stream == "all_gather");
  CHECK(m.largest_task_errors[0].error_s == -1 * kUnitS);
  CHECK(m.largest_task_errors[0].relative_error == Approx(2.0 / 3 - 1));
  CHECK(m.largest_task_errors[1].task == 4);
  CHECK(m.largest_task_errors[1].relative_error == Approx(6.0 / 7 - 1));
  CHECK(m.largest_task_errors[2].task == 0);
  // A zero measurement of a nonzero prediction is +100%, as compare gives it (was +0.0%).
  auto unexposed = entries(true);
  unexposed[0].measured->exposed_comm_s = 0;
  const MeasuredComparison& zero = *summarize_report(unexposed).schedules[0].measured;
  CHECK(zero.exposed_comm_relative_error == 1);
}

TEST_CASE("the report names the slowest and the fastest rank's compute", "[report]") {
  auto input = entries(true);
  // 8 ranks as measured (compute 1 + 3 + 7 + 2 = 13 units each), but rank 5's backward of
  // layers.0 takes 9 units (compute 15) and rank 2's forward of layers.0 2 (compute 12).
  MeasuredResult& measured = *input[0].measured;
  measured.ranks.assign(8, RankMeasurement{});
  for (RankMeasurement& rank : measured.ranks) rank.timings = measured.timings;
  measured.ranks[5].timings[4].end_s = 16.5 * kUnitS;
  measured.ranks[2].timings[3].end_s = 6.5 * kUnitS;
  const Report report = summarize_report(input);
  const MeasuredComparison& m = *report.schedules[0].measured;
  REQUIRE(m.rank_compute_s.size() == 8);
  CHECK(m.rank_compute_s[0] == Approx(13 * kUnitS));
  CHECK(m.rank_compute_s[5] == Approx(15 * kUnitS));
  CHECK(m.rank_compute_s[2] == Approx(12 * kUnitS));
  const std::string line =
      "compute by rank (its compute tasks' medians summed): median 12.70 ms, slowest rank 5 14.65 "
      "ms (+15.4%), fastest rank 2 "
      "11.72 ms (-7.7%)";
  CHECK(rank_compute_summary(m.rank_compute_s) == line);
  CHECK(render_report_text(input).find("  " + line + "\n") != std::string::npos);
  CHECK(render_report_markdown(input).find("\n" + line + ".\n") != std::string::npos);
  CHECK(render_report_html(input).find("<p>" + escape_xml(line) + ".</p>") != std::string::npos);
  // What the table's figures are, in every rendering.
  const std::string legend =
      "error = predicted / measured - 1; busy = rank 0's task durations on the stream, each the "
      "median of the steps, summed";
  CHECK(render_report_text(input).find("  " + legend + "\n") != std::string::npos);
  CHECK(render_report_markdown(input).find("\n" + legend + ".\n") != std::string::npos);
  CHECK(render_report_html(input).find("<p>" + escape_xml(legend) + ".</p>") != std::string::npos);
  // JSON: written, read back; a bad entry is named. Without ranks' timings, none.
  const nlohmann::json json = report_to_json(report);
  CHECK(json["schedules"][0]["measured"]["rank_compute_s"].size() == 8);
  CHECK(report_from_json(json, "r.json") == report);
  // Named by its format (since 2026-12-05); a summary without one reads as before.
  CHECK(json["format"] == "fsdptune-report");
  nlohmann::json unnamed = json;
  unnamed.erase("format");
  CHECK(report_from_json(unnamed, "r.json") == report);
  nlohmann::json other = json;
  other["format"] = "fsdptune-schedule";
  check_refused(other, "r.json", "r.json/format");
  nlohmann::json bad = json;
  bad["schedules"][0]["measured"]["rank_compute_s"][3] = "slow";
  check_refused(bad, "r.json", "r.json/schedules/0/measured/rank_compute_s/3");
  CHECK_FALSE(report_to_json(summarize_report(entries(true)))["schedules"][0]["measured"].contains(
      "rank_compute_s"));
  measured.ranks[7].timings.pop_back();  // a rank without every task's timing
  CHECK(summarize_report(input).schedules[0].measured->rank_compute_s.empty());
}

TEST_CASE("a scaled-down replay compares compute only as compare does", "[report]") {
  // Found probing: report ranked a scaled-down run's collectives (over fewer ranks, more
  // bytes each) and gave its step time an error as if comparable.
  auto input = entries(true);
  input[0].measured->shards_per_rank = 2;
  ReportOptions options;
  options.largest_task_errors = 10;
  const Report report = summarize_report(input, options);
  const MeasuredComparison& m = *report.schedules[0].measured;
  CHECK_FALSE(m.communication_comparable());
  REQUIRE(m.streams.size() == 1);
  CHECK(m.streams[0].stream == "compute");
  REQUIRE_FALSE(m.largest_task_errors.empty());
  for (const TaskError& error : m.largest_task_errors) CHECK(error.stream == "compute");
  CHECK_THAT(render_report_text(input, options),
             Catch::Contains("scaled down, 2 shards per rank: step time and communication"));
  CHECK_THAT(render_report_html(input, options), Catch::Contains("scaled down, 2 shards"));
  const nlohmann::json json = report_to_json(report);
  CHECK(json["schedules"][0]["measured"]["shards_per_rank"] == 2);
  CHECK(report_from_json(json, "r.json") == report);
  // Not scaled down: nothing written, as before.
  CHECK_FALSE(report_to_json(summarize_report(entries(true)))["schedules"][0]["measured"].contains(
      "shards_per_rank"));
}

TEST_CASE("every report format says its throughput figures are upper bounds", "[report]") {
  // Found by QA (a first-time user) of the CLI's outputs; a report is what gets shared.
  const auto input = entries(false);
  CHECK_THAT(render_report_text(input), Catch::Contains(kThroughputCaveat));
  CHECK_THAT(render_report_markdown(input), Catch::Contains(kThroughputCaveat));
  CHECK_THAT(render_report_html(input), Catch::Contains("<p class=\"note\">tokens/s/GPU and MFU "
                                                        "are upper bounds: "));
  // ...unless a measured profile priced every cost (found by QA: said of a schedule tuned on
  // a CPU profile, every cost looked up).
  auto measured = input;
  measured[0].schedule.cost_queries = 12;
  measured[0].schedule.cost_fallbacks = 0;
  CHECK_THAT(render_report_text(measured), !Catch::Contains(kThroughputCaveat));
  CHECK_THAT(render_report_markdown(measured), !Catch::Contains(kThroughputCaveat));
  CHECK_THAT(render_report_html(measured), !Catch::Contains("are upper bounds"));
  measured[0].schedule.cost_fallbacks = 1;  // one analytic cost is enough
  CHECK_THAT(render_report_text(measured), Catch::Contains(kThroughputCaveat));
  // The rule: a pipeline's sends are the analytic model's (a profile measures no send/recv;
  // review), and a schedule that counted nothing is not known to be measured.
  CHECK_FALSE(throughput_caveat_applies(12, 0, 1));
  CHECK(throughput_caveat_applies(12, 0, 2));
  CHECK(throughput_caveat_applies(12, 3, 1));
  CHECK(throughput_caveat_applies(0, 0, 1));
}

TEST_CASE("a replay on another node layout compares compute only, and reads back", "[report]") {
  // Found by review: report compared such a replay's communication where compare did not.
  auto input = entries(true);
  input[0].measured->environment["ranks_per_node"] = "1000";
  const Report report = summarize_report(input);
  const MeasuredComparison& m = *report.schedules[0].measured;
  CHECK_FALSE(m.communication_comparable());
  CHECK_THAT(m.node_layout, Catch::StartsWith("1000 ranks per node, the schedule's job "));
  REQUIRE(m.streams.size() == 1);
  CHECK(m.streams[0].stream == "compute");
  CHECK_THAT(render_report_text(input), Catch::Contains("node layout: 1000 ranks per node"));
  // One rank per node (two hosts of one rank each) in English (QA: "1 ranks per node").
  input[0].measured->environment["ranks_per_node"] = "1";
  CHECK_THAT(summarize_report(input).schedules[0].measured->node_layout,
             Catch::StartsWith("1 rank per node, the schedule's job "));
  const nlohmann::json json = report_to_json(report);
  CHECK(json["schedules"][0]["measured"]["node_layout"] == m.node_layout);
  CHECK(report_from_json(json, "r.json") == report);
  // The job's own layout: comparable, nothing written.
  input[0].measured->environment["ranks_per_node"] =
      std::to_string(std::min(input[0].schedule.job.gpus, input[0].schedule.job.gpus_per_node));
  const Report same = summarize_report(input);
  CHECK(same.schedules[0].measured->communication_comparable());
  CHECK_FALSE(report_to_json(same)["schedules"][0]["measured"].contains("node_layout"));
}

TEST_CASE("a measured file without per-task timings still compares the step", "[report]") {
  auto input = entries(true);
  input[0].measured->timings.clear();
  const Report report = summarize_report(input);
  const MeasuredComparison& m = *report.schedules[0].measured;
  CHECK(m.measured_step_time_s == 19 * kUnitS);
  CHECK(m.streams.empty());
  CHECK(m.largest_task_errors.empty());
  const std::string html = render_report_html(input);
  CHECK_NOTHROW(XmlParser(html).parse());
  CHECK(html.find("The measured file has no per-task timings.") != std::string::npos);
}

TEST_CASE("the Gantt chart is headed with its plan's name, escaped", "[report][html]") {
  // Found by QA: a user comparing SimpleFSDP with FSDP2 looked for the baselines' overlap
  // in it; it is the schedule's own plan's.
  auto input = entries(false);
  const std::string html = render_report_html(input);
  CHECK_NOTHROW(XmlParser(html).parse());
  CHECK(html.find("One step of the " + input[0].schedule.plan.name + " plan, predicted (Gantt)") !=
        std::string::npos);
  CHECK(html.find("--plan fsdp2 --trace FILE") != std::string::npos);
  input[0].schedule.plan.name = "a<b&c";
  const std::string odd = render_report_html(input);
  CHECK_NOTHROW(XmlParser(odd).parse());
  CHECK(odd.find("One step of the a&lt;b&amp;c plan") != std::string::npos);
}

TEST_CASE("no task error rows asked for is not a file without per-task timings", "[report]") {
  // `report --top-errors 0`: the HTML said the file had no per-task timings above its
  // measured Gantt chart (found by QA); the text and Markdown leave the table out.
  ReportOptions options;
  options.largest_task_errors = 0;
  const auto input = entries(true);
  const MeasuredComparison m = *summarize_report(input, options).schedules[0].measured;
  CHECK(m.largest_task_errors.empty());
  CHECK(m.streams.size() == 3);
  const std::string html = render_report_html(input, options);
  CHECK_NOTHROW(XmlParser(html).parse());
  CHECK(html.find("per-task timings") == std::string::npos);
  CHECK(html.find("Largest per-task errors") == std::string::npos);
  CHECK(render_report_markdown(input, options).find("per-task errors") == std::string::npos);
  CHECK(render_report_text(input, options).find("per-task errors") == std::string::npos);
}

TEST_CASE("the report JSON round-trips and names a bad field", "[report]") {
  const Report report = summarize_report(entries(true));
  const nlohmann::json json = report_to_json(report);
  CHECK(json["version"] == kReportFormatVersion);
  CHECK(report_from_json(json, "report.json") == report);
  const Report without_measured = summarize_report(entries(false));
  CHECK(report_from_json(report_to_json(without_measured), "r.json") == without_measured);

  // The mesh beyond dp_shard, AC and float8 (found probing: the summary had no tp, by which
  // tokens/s/GPU divides): tp and dp_replicate where not 1, float8 where on, AC always;
  // absent, 1, 1, off and none.
  CHECK_FALSE(json["schedules"][0].contains("tp"));
  CHECK(json["schedules"][0]["activation_checkpointing"] == "none");
  Report meshed = report;
  meshed.schedules[0].tp = 2;
  meshed.schedules[0].dp_replicate = 4;
  meshed.schedules[0].ac = ActivationCheckpointing::kFull;
  meshed.schedules[0].float8 = true;
  const nlohmann::json meshed_json = report_to_json(meshed);
  CHECK(meshed_json["schedules"][0]["tp"] == 2);
  CHECK(meshed_json["schedules"][0]["dp_replicate"] == 4);
  CHECK(meshed_json["schedules"][0]["float8"] == true);
  CHECK(report_from_json(meshed_json, "report.json") == meshed);
  nlohmann::json before_mesh = json;
  before_mesh["schedules"][0].erase("activation_checkpointing");
  CHECK(report_from_json(before_mesh, "report.json") == report);
  // The job's execution: written always, read as compiled when absent (reports of before).
  CHECK(json["schedules"][0]["execution"] == "compiled");
  nlohmann::json old = json;
  old["schedules"][0].erase("execution");
  CHECK(report_from_json(old, "report.json") == report);
  // The exposed-comm and peak errors (since 2026-12-03): of an older summary, from its figures.
  CHECK(json["schedules"][0]["measured"]["exposed_comm_relative_error"] == Approx(-0.25));
  nlohmann::json before_errors = json;
  before_errors["schedules"][0]["measured"].erase("exposed_comm_relative_error");
  before_errors["schedules"][0]["measured"].erase("peak_relative_error");
  CHECK(report_from_json(before_errors, "report.json") == report);
  auto eager_entries = entries(false);
  eager_entries[0].schedule.job.execution = Execution::kEager;
  const Report eager = summarize_report(eager_entries);
  CHECK(report_to_json(eager)["schedules"][0]["execution"] == "eager");
  CHECK(report_from_json(report_to_json(eager), "r.json") == eager);
  CHECK(render_report_text(eager_entries).find("128 tokens, AC none, eager)") != std::string::npos);

  // A pipelined schedule's stages and a Pareto front round-trip; absent, nothing is written.
  CHECK_FALSE(json["schedules"][0].contains("pipeline"));
  Report pipelined = report;
  pipelined.schedules[0].bubble_fraction = 0.25;
  pipelined.schedules[0].send_s = 3e-4;
  pipelined.schedules[0].stages = {
      {0, 1.5, 2.0, 7, 1000, 1200, true, std::nullopt},
      {1, 1.25, 2.5, 3, 900, 5000, false, StageAnyTiming{1, 950, 5200}}};
  pipelined.schedules[0].pareto = {{2.5, 800, "min-memory", 950}, {2.0, 1000, "tuned", 1200}};
  const Report without_shape = pipelined;
  pipelined.schedules[0].pp = 2;
  pipelined.schedules[0].microbatches = 8;
  pipelined.schedules[0].pipeline_steps = 2;
  pipelined.schedules[0].pp_schedule = PipelineSchedule::kInterleaved1F1B;
  pipelined.schedules[0].virtual_stages = 2;
  pipelined.schedules[0].pp_first_stage_less_layers = 0;
  pipelined.schedules[0].pp_chunk_blocks = {1, 2, 2, 1};
  const nlohmann::json pipelined_json = report_to_json(pipelined);
  CHECK(pipelined_json["schedules"][0]["pp"] == 2);
  CHECK(pipelined_json["schedules"][0]["pipeline_steps"] == 2);
  CHECK(pipelined_json["schedules"][0]["pipeline"]["schedule"] == "interleaved-1f1b");
  CHECK(pipelined_json["schedules"][0]["pipeline"]["chunk_blocks"] ==
        nlohmann::json::array({1, 2, 2, 1}));
  // A summary of before the shape (2026-12-05) reads back as one of 1 stage and microbatch.
  nlohmann::json before_shape = pipelined_json;
  for (const char* key : {"pp", "microbatches", "pipeline_steps"}) {
    before_shape["schedules"][0].erase(key);
  }
  for (const char* key : {"schedule", "virtual_stages", "first_stage_less_layers",
                          "last_stage_less_layers", "chunk_blocks"}) {
    before_shape["schedules"][0]["pipeline"].erase(key);
  }
  CHECK(report_from_json(before_shape, "r.json") == without_shape);
  nlohmann::json bad_shape = pipelined_json;
  bad_shape["schedules"][0]["pipeline"]["schedule"] = "zigzag";
  check_refused(bad_shape, "r.json", "r.json/schedules/0/pipeline/schedule");
  CHECK(pipelined_json["schedules"][0]["pipeline"]["stages"][1]["fits"] == false);
  CHECK(pipelined_json["schedules"][0]["pareto"][0]["label"] == "min-memory");
  CHECK(report_from_json(pipelined_json, "r.json") == pipelined);
  nlohmann::json bad_stage = pipelined_json;
  bad_stage["schedules"][0]["pipeline"]["stages"][1].erase("end_s");
  check_refused(bad_stage, "r.json", "r.json/schedules/0/pipeline/stages/1/end_s");
  CHECK(pipelined_json["schedules"][0]["pipeline"]["stages"][1]["any_timing_peak_reserved_bytes"] ==
        5200);
  CHECK_FALSE(pipelined_json["schedules"][0]["pipeline"]["stages"][0].contains(
      "any_timing_peak_reserved_bytes"));
  bad_stage = pipelined_json;
  bad_stage["schedules"][0]["pipeline"]["stages"][1].erase("any_timing_peak_reserved_bytes");
  check_refused(bad_stage, "r.json",
                "r.json/schedules/0/pipeline/stages/1/any_timing_peak_reserved_bytes");

  nlohmann::json wrong_version = json;
  wrong_version["version"] = 99;
  check_refused(wrong_version, "report.json", "report.json/version");
  nlohmann::json missing = json;
  missing["schedules"][0]["plans"][1].erase("step_time_s");
  check_refused(missing, "report.json", "report.json/schedules/0/plans/1/step_time_s");
}

TEST_CASE("the tuned plan's peaks at any timing, in every format", "[report]") {
  const auto input = entries_with_any_timing(false);
  const Report report = summarize_report(input);
  const ScheduleReport& schedule = report.schedules[0];
  REQUIRE(schedule.any_timing.has_value());
  CHECK(schedule.any_timing == input[0].any_timing);
  CHECK_FALSE(schedule.fits_at_any_timing);  // 1100 MiB reserved against a 1 GiB limit

  const nlohmann::json json = report_to_json(report);
  const nlohmann::json& bound = json["schedules"][0]["any_timing"];
  CHECK(bound["peak_reserved_bytes"] == 1100 * kMiB);
  CHECK(bound["allocator_reserve_bytes"] == 200 * kMiB);
  CHECK(bound["peak_breakdown"]["gathered_params"] == 500 * kMiB);
  CHECK(bound["fits"] == false);
  CHECK(report_from_json(json, "r.json") == report);
  nlohmann::json bad = json;
  bad["schedules"][0]["any_timing"].erase("state");
  check_refused(bad, "r.json", "r.json/schedules/0/any_timing/state");
  // A verdict its figures contradict, and a stage bound given by halves, are refused.
  bad = json;
  bad["schedules"][0]["any_timing"]["fits"] = true;
  check_refused(bad, "r.json", "r.json/schedules/0/any_timing/fits");
  // Absent where the caller computed none (a pipeline schedule): reports keep their text.
  CHECK_FALSE(
      report_to_json(summarize_report(entries(false)))["schedules"][0].contains("any_timing"));

  // Only the reserved estimate passes the limit: "can run" out of memory.
  const std::string text = render_report_text(input);
  CHECK_THAT(text, Catch::Contains("  tuned plan at any timing: 900 MiB allocated, 1.07 GiB "
                                   "reserved at most, reserved above the 1.00 GiB limit: with "
                                   "durations far enough from the prediction this plan can run "
                                   "out of memory (tune --fit any-timing"));
  CHECK_THAT(text,
             Catch::Contains("\n    holding sharded state 100 MiB, gathered parameters "
                             "500 MiB, gradients and buffers 100 MiB, activations 200 MiB\n"));
  CHECK_THAT(text,
             Catch::Contains("\n    worst state: compute in \"bwd layers.0\", all_gather after"));
  const std::string markdown = render_report_markdown(input);
  CHECK_THAT(markdown, Catch::Contains("\ntuned plan at any timing: 900 MiB allocated"));
  CHECK_THAT(markdown, Catch::Contains("\n- holding sharded state 100 MiB"));
  const std::string html = render_report_html(input);
  CHECK_NOTHROW(XmlParser(html).parse());
  CHECK_THAT(html, Catch::Contains("<p class=\"warning\">tuned plan at any timing:"));
  CHECK_THAT(html, Catch::Contains("<tr class=\"any-timing\"><td>tuned, at any timing</td>"));

  // Allocated above the limit too: it "runs" out of memory at that timing.
  auto over = input;
  over[0].any_timing->peak_allocated_bytes = 1030 * kMiB;
  CHECK_THAT(render_report_text(over),
             Catch::Contains("reserved at most, above the 1.00 GiB limit: with durations far "
                             "enough from the prediction this plan runs out of memory"));
  // Within the limit: said so, no warning.
  auto within = input;
  within[0].any_timing->peak_reserved_bytes = kGiB;
  CHECK(summarize_report(within).schedules[0].fits_at_any_timing);
  CHECK_THAT(render_report_text(within),
             Catch::Contains("1.00 GiB reserved at most, within the 1.00 GiB limit at every "
                             "timing\n"));
  CHECK_THAT(render_report_html(within), !Catch::Contains("class=\"warning\""));
  CHECK(report_to_json(summarize_report(within))["schedules"][0]["any_timing"]["fits"] == true);
  // Without the figures nothing is said.
  CHECK_THAT(render_report_text(entries(false)), !Catch::Contains("any timing"));
}

TEST_CASE("display formats", "[report]") {
  CHECK(format_percent(0.452) == "45.2%");
  CHECK(format_signed_percent(0.031) == "+3.1%");
  CHECK(format_signed_percent(-0.2) == "-20.0%");
  // One decimal, as tune and sweep print it (simulate and report rounded to an integer).
  CHECK(format_rate(8191.6) == "8191.6");
  CHECK(format_rate(94.54) == "94.5");
  CHECK(escape_xml("<a href=\"x\">Tom & 'Jerry'</a>") ==
        "&lt;a href=&quot;x&quot;&gt;Tom &amp; &#39;Jerry&#39;&lt;/a&gt;");
  CHECK(json_number_text(0.5) == "0.5");
  CHECK(json_number_text(std::int64_t{1} << 40) == "1099511627776");
  // Found probing: a file name in Latin-1 and a name holding U+FFFE made the page malformed
  // XML (and `report --json` throw nlohmann's type_error, exit 1).
  CHECK(escape_xml("a\xff\xfe"
                   "b.json") ==
        "a\xEF\xBF\xBD\xEF\xBF\xBD"
        "b.json");
  CHECK(escape_xml("x\xEF\xBF\xBEy") == "x\xEF\xBF\xBDy");
  CHECK(escape_xml("caf\xC3\xA9 \xE2\x80\x94") == "caf\xC3\xA9 \xE2\x80\x94");  // kept
  CHECK(dump_json(nlohmann::json("a\xff"
                                 "b")) ==
        "\"a\xEF\xBF\xBD"
        "b\"\n");
}

TEST_CASE("Markdown escapes its own characters in names", "[report]") {
  auto input = entries(false);
  input[0].source = "out/<ny> *b*|c.json";
  const std::string markdown = render_report_markdown(input);
  CHECK(markdown.find("out/\\<ny\\> \\*b\\*\\|c.json") != std::string::npos);
}

TEST_CASE("terminal table: plans, lower bound, measured", "[report]") {
  const std::string text = render_report_text(entries(true));
  // 16 units = 16/1024 s = 15.625 ms, formatted with two decimals.
  CHECK(text.find("out/schedule.json: tiny on 8 x h100-sxm (dp_shard ") != std::string::npos);
  CHECK(text.find(" tokens, AC none), limit ") != std::string::npos);
  CHECK(text.find("* tuned") != std::string::npos);
  CHECK(text.find("15.62 ms") != std::string::npos);
  // tokens/s/GPU of the tuned plan: 128 tokens / (16/1024 s) = 8192.
  CHECK(text.find("8192") != std::string::npos);
  CHECK(text.find("tuned plan vs lower bound: 80.0%") != std::string::npos);
  // A predicted step of 0 (a hand-made schedule) has no efficiency: was "tuned inf s".
  auto stepless = entries(false);
  stepless[0].schedule.predicted.step_time_s = 0;
  CHECK_THAT(render_report_text(stepless),
             Catch::Contains("tuned plan vs lower bound: no predicted step time") &&
                 !Catch::Contains("inf s"));
  // Step error: 16/19 - 1 = -15.8%.
  CHECK(text.find("-15.8%") != std::string::npos);
  // Exposed communication and peak have their errors too (the cells were empty).
  const std::size_t exposed_at = text.find("    exposed comm ");
  REQUIRE(exposed_at != std::string::npos);
  const std::string exposed_row = text.substr(exposed_at, text.find('\n', exposed_at) - exposed_at);
  CHECK_THAT(exposed_row, Catch::EndsWith("-25.0%"));
  CHECK(text.find("busy all_gather") != std::string::npos);
  CHECK(text.find("#2 AG b1 [layers.0]") != std::string::npos);
  // fsdp2 reserves 900 MiB of a 1 GiB limit: fits; none of the three plans fails. The
  // Pareto front's three points under the limit say yes too, its fourth no.
  CHECK(count(text, " yes\n") == 3 + 3);
  CHECK(count(text, " no\n") == 1);
}

TEST_CASE("text and Markdown list the Pareto front in the file's order", "[report]") {
  // The fixture's points, as stored (units of 1/1024 s):
  //   tuned #1: 16 -> 15.625 ms -> "15.62 ms", 600 MiB     tuned #2: 17 -> 16.6015625 ms
  //   -> "16.60 ms", 550 MiB     tuned #3: 19 -> 18.5546875 ms -> "18.55 ms", 650 MiB
  //   tuned #4: 15 -> 14.6484375 ms -> "14.65 ms", 1200 MiB = 1.171875 GiB -> "1.17 GiB".
  // Reserved 650 / 600 / 700 MiB and 1300 MiB = 1.26953125 GiB -> "1.27 GiB": only the
  // last is over the fixture's 1 GiB limit.
  const std::string text = render_report_text(entries(false));
  CHECK(text.find("  Pareto front explored by the tuner (peak allocated against step time):\n"
                  "    plan      step time  peak allocated  peak reserved  fits\n") !=
        std::string::npos);
  // Columns: label left in 8 (the longest label); the others right-aligned in the width of
  // their headers: 9 ("step time"), 14, 13 and 4 ("fits").
  CHECK(text.find("    tuned #1   15.62 ms         600 MiB        650 MiB   yes\n"
                  "    tuned #2   16.60 ms         550 MiB        600 MiB   yes\n"
                  "    tuned #3   18.55 ms         650 MiB        700 MiB   yes\n"
                  "    tuned #4   14.65 ms        1.17 GiB       1.27 GiB    no\n") !=
        std::string::npos);
  const std::string markdown = render_report_markdown(entries(false));
  CHECK(markdown.find("### Pareto front explored by the tuner\n\n"
                      "| plan | step time | peak allocated | peak reserved | fits |\n") !=
        std::string::npos);
  CHECK(markdown.find("| tuned #1 | 15.62 ms | 600 MiB | 650 MiB | yes |\n") != std::string::npos);
  CHECK(markdown.find("| tuned #4 | 14.65 ms | 1.17 GiB | 1.27 GiB | no |\n") != std::string::npos);
  // A file from before points carried a reserved peak: "-" for reserved and fits.
  auto old = entries(false);
  for (ParetoPoint& point : old[0].schedule.pareto) point.peak_reserved_bytes = 0;
  CHECK(render_report_markdown(old).find("| tuned #1 | 15.62 ms | 600 MiB | - | - |\n") !=
        std::string::npos);
  // "-" is no text: its figures' column stays right-aligned (found by mutation testing:
  // untested).
  CHECK(render_report_markdown(old).find(
            "| plan | step time | peak allocated | peak reserved | fits |\n"
            "| --- | ---: | ---: | ---: | ---: |\n") != std::string::npos);
  // Labels that do not name themselves are explained under the front, the kinds present
  // only (found by QA: "dp seed 0", "candidate #188", "fsdp2, last 17 kept" unexplained).
  CHECK(render_report_text(entries(false)).find("candidate #k =") == std::string::npos);
  auto labelled = entries(false);
  labelled[0].schedule.pareto[0].label = "candidate #188";
  labelled[0].schedule.pareto[1].label = "fsdp2, last 17 kept";
  const std::string legend =
      "candidate #k = the search's simulation k (from 0); X, last K kept = plan X with its last "
      "K buckets kept gathered from forward to backward";
  CHECK(render_report_text(labelled).find("    " + legend + "\n") != std::string::npos);
  CHECK(render_report_markdown(labelled).find("\n" + legend + ".\n") != std::string::npos);
  CHECK(render_report_html(labelled).find("<p>" + escape_xml(legend) + ".</p>") !=
        std::string::npos);
  // No front recorded: no section.
  auto without = entries(false);
  without[0].schedule.pareto.clear();
  CHECK(render_report_text(without).find("Pareto") == std::string::npos);
  CHECK(render_report_markdown(without).find("Pareto") == std::string::npos);
}

TEST_CASE("markdown: tables with a separator row, pipes escaped", "[report]") {
  auto input = entries(true);
  input[0].schedule.baselines[0].plan_name = "a|b";
  const std::string markdown = render_report_markdown(input);
  CHECK(markdown.rfind("# fsdptune report\n", 0) == 0);
  CHECK(markdown.find("| plan | step time | tokens/s/GPU |") != std::string::npos);
  CHECK(markdown.find("| --- | ---: |") != std::string::npos);
  // Text columns left-aligned, figures right (found by QA: "yes" right-aligned): the plans
  // table ends with the reserved peak, then fits.
  CHECK(markdown.find("| peak reserved | fits |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: "
                      "| --- |\n") != std::string::npos);
  CHECK(markdown.find("a\\|b") != std::string::npos);
  CHECK(markdown.find("### Predicted vs measured") != std::string::npos);
  CHECK(markdown.find("#### Largest per-task errors") != std::string::npos);
}

// Found by QA (2026-12-07): a report of five schedules said none was best, and its HTML's
// step-time bars read the reverse of tokens/s/GPU for a pipeline of several microbatches.
TEST_CASE("several schedules are ranked: those that fit first, then by tokens/s/GPU", "[report]") {
  auto input = entries(false);
  CHECK(render_report_text(input).find("ranking") == std::string::npos);  // one schedule
  ReportEntry fastest = input[0];  // 12 units, but 2 GiB reserved: does not fit
  fastest.source = "out/fast.json";
  fastest.schedule.predicted = make_summary("tuned", 12, 1800, 2048);
  ReportEntry slower = input[0];  // 20 units: fits, 20% fewer tokens/s/GPU than 16 units
  slower.source = "out/slow.json";
  slower.schedule.predicted = make_summary("tuned", 20, 500, 600);
  input.push_back(fastest);
  input.push_back(slower);
  const std::string text = render_report_text(input);
  const std::size_t at = text.find(
      "ranking of the tuned plans (those that fit first, then by "
      "tokens/s/GPU):");
  REQUIRE(at != std::string::npos);
  const std::string ranking = text.substr(at);
  const std::size_t first = ranking.find("1     out/schedule.json");
  const std::size_t second = ranking.find("2         out/slow.json");
  const std::size_t third = ranking.find("3         out/fast.json");
  CHECK(first != std::string::npos);
  CHECK(second > first);
  CHECK(third > second);
  CHECK(third != std::string::npos);
  CHECK_THAT(ranking, Catch::Contains("-20.0%") && Catch::Contains("+33.3%"));
  CHECK(ranking.find("note:") == std::string::npos);  // one model, hardware and batch
  const std::string markdown = render_report_markdown(input);
  CHECK(markdown.find("## Ranking of the tuned plans") < markdown.find("## out/schedule.json"));
  CHECK_THAT(markdown, Catch::Contains("| 3 | out/fast.json"));
  const std::string html = render_report_html(input);
  XmlElement root;
  REQUIRE_NOTHROW(root = XmlParser(html).parse());
  CHECK_THAT(html, Catch::Contains("<table class=\"ranking\">") &&
                       Catch::Contains("<h3>Ranking of the tuned plans</h3>"));
  // What tokens/s/GPU does not weigh is said: another model, other tokens a step.
  input[2].schedule.model.name = "llama3-8b";
  input[2].schedule.job.gpus = 16;  // 128 x 16 tokens a step
  const std::string mixed = render_report_text(input);
  CHECK_THAT(mixed, Catch::Contains("note: the models differ: tiny in out/schedule.json and "
                                    "out/fast.json, llama3-8b in out/slow.json; the tokens a step "
                                    "differ: 1024 in out/schedule.json and out/fast.json, 2048 in "
                                    "out/slow.json: tokens/s/GPU compares their throughput, not "
                                    "the same training"));
  CHECK_THAT(render_report_markdown(input), Catch::Contains("Note: the models differ"));
  CHECK_THAT(render_report_html(input), Catch::Contains("Note: the models differ"));
  // A schedule given twice (a measured file each) is ranked and named once (review).
  input.push_back(input[0]);
  const std::string copied = render_report_text(input);
  const std::string copied_ranking = copied.substr(copied.find("ranking of the tuned plans"));
  CHECK(count(copied_ranking, "out/schedule.json") == 3);  // its row, and twice in the note
  CHECK(copied_ranking.find("\n  4 ") == std::string::npos);
  CHECK_THAT(copied_ranking, Catch::Contains("tiny in out/schedule.json and out/fast.json,"));
  // Two copies of one schedule: nothing to rank.
  const std::vector<ReportEntry> twice = {input[0], input[0]};
  CHECK(render_report_text(twice).find("ranking") == std::string::npos);
}

// The whole sentence, both figures (found by mutation testing, 2026-12-07: the bf16 figure
// as the fp8 one, "14.6% is 14.6% of bf16's", passed the prefix the tests checked).
TEST_CASE("a float8 schedule's MFU is said of the fp8 peak, with bf16's figure", "[report]") {
  auto input = entries(false);
  ScheduleFile& file = input[0].schedule;
  file.job.float8 = true;
  file.hardware.peak_bf16_flops_per_s = 989e12;
  file.hardware.peak_fp8_flops_per_s = 1979e12;  // the fixture's MFU 45.0% is 90.0% of bf16's
  const std::string line =
      "MFU is of the fp8 peak: the tuned plan's 45.0% is 90.0% of bf16's, as torchtitan logs it";
  CHECK_THAT(render_report_text(input), Catch::Contains("  " + line + "\n"));
  CHECK_THAT(render_report_markdown(input), Catch::Contains(line));
  file.job.float8 = false;
  CHECK(render_report_text(input).find("fp8 peak") == std::string::npos);
}

TEST_CASE("the HTML is well-formed and self-contained", "[report][html]") {
  const std::string html = render_report_html(entries(true));
  XmlElement root;
  REQUIRE_NOTHROW(root = XmlParser(html).parse());
  CHECK(root.name == "html");
  // No script, no external resources.
  CHECK(root.all("script").empty());
  CHECK(root.all("link").empty());
  CHECK(root.all("img").empty());
  for (std::size_t at = html.find("http"); at != std::string::npos;
       at = html.find("http", at + 1)) {
    const std::string url = html.substr(at, 26);
    CHECK((url.rfind("http://www.w3.org/1999/xht", 0) == 0 ||
           url.rfind("http://www.w3.org/2000/svg", 0) == 0));
  }
  CHECK(html.find(" src=") == std::string::npos);
  CHECK(html.find("url(") == std::string::npos);
}

TEST_CASE("the strict parser rejects malformed markup", "[report][html]") {
  CHECK_THROWS(XmlParser("<a><b></a></b>").parse());
  CHECK_THROWS(XmlParser("<a x=1></a>").parse());
  CHECK_THROWS(XmlParser("<a>1 < 2</a>").parse());
  CHECK_THROWS(XmlParser("<a>&nbsp;</a>").parse());
  CHECK_THROWS(XmlParser("<a x=\"1\" x=\"2\"></a>").parse());
  CHECK_THROWS(XmlParser("<a></a><b></b>").parse());
  CHECK_THROWS(XmlParser("<a><br></a>").parse());
  CHECK_NOTHROW(XmlParser("<!DOCTYPE html>\n<a x=\"&amp;\"><br/>t &lt; u</a>\n").parse());
}

TEST_CASE("every chart has axis labels with units", "[report][html]") {
  const XmlElement root = XmlParser(render_report_html(entries(true))).parse();
  const auto charts = root.all("svg");
  // Step time, peak memory, Gantt, memory over step, Pareto, measured, measured Gantt.
  CHECK(charts.size() == 7);
  const std::set<std::string> units = {"s", "ms", "us", "GiB", "MiB", "KiB", "B"};
  for (const XmlElement* chart : charts) {
    INFO("chart " << chart->attribute("id"));
    CHECK(chart->attribute("class") == "chart");
    CHECK_FALSE(chart->attribute("aria-label").empty());
    bool x_label = false;
    bool y_label = false;
    int with_unit = 0;
    for (const XmlElement* label : chart->all("text")) {
      if (label->attribute("class") != "axis-label") continue;
      CHECK_FALSE(label->text.empty());
      if (label->attribute("data-axis") == "x") x_label = true;
      if (label->attribute("data-axis") == "y") y_label = true;
      const std::string unit = label->attribute("data-unit");
      if (unit.empty()) continue;
      ++with_unit;
      CHECK(units.count(unit) == 1);
      CHECK(ends_with(label->text, "(" + unit + ")"));
    }
    CHECK(x_label);
    CHECK(y_label);
    CHECK(with_unit >= 1);
  }
}

TEST_CASE("every number in the HTML equals the one in the JSON summary", "[report][html]") {
  const auto input = entries_with_any_timing(true);
  const nlohmann::json json = report_to_json(summarize_report(input));
  const XmlElement root = XmlParser(render_report_html(input)).parse();
  std::vector<const XmlElement*> figures;
  root.find_with("data-json", figures);
  REQUIRE(figures.size() > 50);
  std::set<std::string> pointers;
  for (const XmlElement* figure : figures) {
    const std::string pointer = figure->attribute("data-json");
    INFO(pointer);
    pointers.insert(pointer);
    const nlohmann::json::json_pointer path(pointer);
    REQUIRE(json.contains(path));
    CHECK(json.at(path).dump() == figure->attribute("data-value"));
    // Cells and key figures show the number in the tables' format; chart marks carry it.
    if (figure->name == "td" || figure->name == "div") {
      CHECK(figure->text == expected_display(pointer, json.at(path)));
    }
  }
  // Every figure of every plan is in the HTML.
  for (std::size_t p = 0; p < json["schedules"][0]["plans"].size(); ++p) {
    for (const auto& [key, value] : json["schedules"][0]["plans"][p].items()) {
      if (!value.is_number()) continue;
      INFO(key);
      CHECK(pointers.count("/schedules/0/plans/" + std::to_string(p) + "/" + key) == 1);
    }
  }
  CHECK(pointers.count("/schedules/0/tuned_efficiency") == 1);
  // Every figure of the tuned plan at any timing too.
  for (const auto& [key, value] : json["schedules"][0]["any_timing"].items()) {
    if (!value.is_number()) continue;
    INFO(key);
    CHECK(pointers.count("/schedules/0/any_timing/" + key) == 1);
  }
  CHECK(pointers.count("/schedules/0/any_timing/peak_breakdown/gathered_params") == 1);
  CHECK(pointers.count("/schedules/0/measured/step_time_relative_error") == 1);
  CHECK(pointers.count("/schedules/0/measured/exposed_comm_relative_error") == 1);
  CHECK(pointers.count("/schedules/0/measured/peak_relative_error") == 1);
  CHECK(pointers.count("/schedules/0/measured/largest_task_errors/0/error_s") == 1);
}

TEST_CASE("reports of the same inputs are byte-identical", "[report]") {
  const auto first = entries(true);
  const auto second = entries(true);  // built anew
  CHECK(render_report_html(first) == render_report_html(second));
  CHECK(render_report_markdown(first) == render_report_markdown(second));
  CHECK(render_report_text(first) == render_report_text(second));
  CHECK(report_to_json(summarize_report(first)).dump() ==
        report_to_json(summarize_report(second)).dump());
}

TEST_CASE("all text in the HTML is escaped", "[report][html]") {
  auto input = entries(true);
  input[0].source = "a<b>&\"c\".json";
  input[0].schedule.baselines[0].plan_name = "<script>alert('x')</script>";
  input[0].schedule.program.tasks[3].name = "fwd <layers.0> & \"more\"";
  input[0].schedule.program.streams[2].name = "rs<2>";
  const std::string html = render_report_html(input);
  CHECK(html.find("<script") == std::string::npos);
  CHECK(html.find("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;") != std::string::npos);
  XmlElement root;
  REQUIRE_NOTHROW(root = XmlParser(html).parse());
  CHECK(root.all("script").empty());
}

TEST_CASE("the Gantt chart draws every task and labels only those wide enough", "[report][html]") {
  const XmlElement root = XmlParser(render_report_html(entries(false))).parse();
  const XmlElement* gantt = nullptr;
  for (const XmlElement* chart : root.all("svg")) {
    if (chart->attribute("id") == "gantt-1") gantt = chart;
  }
  REQUIRE(gantt != nullptr);
  int task_bars = 0;
  for (const XmlElement* rect : gantt->all("rect")) {
    const auto titles = rect->all("title");
    if (!titles.empty() && titles[0]->text.rfind("#", 0) == 0) ++task_bars;
  }
  CHECK(task_bars == 8);
  // The chart is 1320 px wide for 16 units: "bwd layers.0" (6 units, ~400 px) is labelled
  // in full; "AG b0 [tok_embeddings]" (1 unit, ~70 px; 22 characters need ~150 px) is
  // labelled "AG b0".
  std::set<std::string> labels;
  for (const XmlElement* label : gantt->all("text")) {
    if (label->attribute("class") == "task-label") labels.insert(label->text);
  }
  CHECK(labels.count("bwd layers.0") == 1);
  CHECK(labels.count("AG b0") == 1);
  CHECK(labels.count("AG b0 [tok_embeddings]") == 0);
}

TEST_CASE("Gantt labels shrink to the bucket or the unit number", "[report][html]") {
  // A label of n characters needs 6.6 n + 4 px.
  const std::string gather = "AG fwd b12 layers.0..layers.4";  // 29 characters: 195.4 px
  CHECK(gantt_label(gather, 196) == gather);
  CHECK(gantt_label(gather, 195) == "AG fwd b12");  // 10 characters: 70 px
  CHECK(gantt_label(gather, 69) == "b12");          // 3 characters: 23.8 px
  CHECK(gantt_label(gather, 23) == "");
  CHECK(gantt_label("copy-in AG bwd b3 layers.1", 117) == "copy-in AG bwd b3");  // 116.2 px
  const std::string compute = "bwd layers.17";  // 13 characters: 89.8 px
  CHECK(gantt_label(compute, 90) == compute);
  CHECK(gantt_label(compute, 89) == "layers.17");  // 9 characters: 63.4 px
  CHECK(gantt_label(compute, 63) == "17");         // 2 characters: 17.2 px
  CHECK(gantt_label(compute, 17) == "");
  CHECK(gantt_label("optimizer", 30) == "");
}

TEST_CASE("a 405B-sized step stays a reasonable file", "[report][html]") {
  // 128 units: forward, backward, an all-gather each way and a reduce-scatter per unit,
  // with copy-in/out around each collective: 128 * 11 = 1408 tasks, 10 us to 40 ms each.
  ScheduleFile schedule = make_schedule();
  Program& program = schedule.program;
  program.tasks.clear();
  schedule.timings.clear();
  double compute_s = 0;
  double comm_s = 0;
  for (int unit = 0; unit < 128; ++unit) {
    const std::string name = "layers." + std::to_string(unit);
    auto add = [&](int stream, TaskKind kind, const std::string& task_name, double seconds) {
      double& clock = stream == 0 ? compute_s : comm_s;
      Task task = make_task(static_cast<int>(program.tasks.size()), stream, kind, task_name, 0);
      task.duration_s = seconds;
      schedule.timings.push_back({clock, clock + seconds});
      clock += seconds;
      program.tasks.push_back(task);
    };
    for (int copy = 0; copy < 2; ++copy) add(1, TaskKind::kCopyIn, "copy-in " + name, 1e-5);
    add(1, TaskKind::kAllGather, "AG b" + std::to_string(unit) + " [" + name + "]", 0.02);
    add(1, TaskKind::kCopyOut, "copy-out " + name, 1e-5);
    add(0, TaskKind::kForward, "fwd " + name, 0.03);
    add(0, TaskKind::kRecompute, "recompute " + name, 0.03);
    add(0, TaskKind::kBackward, "bwd " + name, 0.04);
    add(1, TaskKind::kAllGather, "AG bwd b" + std::to_string(unit) + " [" + name + "]", 0.02);
    add(2, TaskKind::kCopyIn, "copy-in grad " + name, 1e-5);
    add(2, TaskKind::kReduceScatter, "RS b" + std::to_string(unit) + " [" + name + "]", 0.03);
    add(2, TaskKind::kCopyOut, "copy-out grad " + name, 1e-5);
  }
  schedule.predicted.step_time_s = std::max(compute_s, comm_s);
  schedule.memory_timeline.clear();
  for (int s = 0; s < 20000; ++s) {
    schedule.memory_timeline.push_back(
        {schedule.predicted.step_time_s * s / 20000, (100 + (s * 7919) % 500) * kMiB});
  }
  ReportEntry entry;
  entry.source = "405b.json";
  entry.schedule = schedule;
  const std::string html = render_report_html({entry});
  CHECK_NOTHROW(XmlParser(html).parse());
  // Every task is drawn (full step plus the enlarged first tenth), the file stays small.
  CHECK(count(html, "<title>#") >= 1408);
  CHECK(html.size() < 2 * kMiB);
  // The memory line keeps its peak (599 MiB) although it is binned to half pixels.
  CHECK(html.find("peak 599 MiB") != std::string::npos);
}

namespace {

// A version 2 schedule of 2 stages x 2 microbatches, 1F1B, forwards of 1 unit, backwards
// of 2, free sends (units of 1/1024 s):
//   stage 0: F0 [0,1] F1 [1,2]             B0 [4,6]    B1 [7,9]  tail to 10
//   stage 1:        F0 [1,2] B0 [2,4] F1 [4,5] B1 [5,7]          tail to 7.5
// Stage 0 waits [2,4] and [6,7] for stage 1's backwards: the bubble.
ScheduleFile make_pipeline_schedule() {
  ScheduleFile schedule = make_schedule();
  schedule.version = kPipelineScheduleFormatVersion;
  schedule.job.pp = 2;
  schedule.job.microbatches = 2;
  schedule.job.pp_schedule = PipelineSchedule::k1F1B;
  schedule.program = {};
  schedule.timings.clear();
  schedule.memory_timeline.clear();
  schedule.predicted.step_time_s = 10 * kUnitS;
  SchedulePipeline pipeline;
  pipeline.bubble_fraction = 1.0 / 3;  // 1 - (6 + 6) / (2 x 9)
  const auto action = [](int chunk, int microbatch, bool backward, double start, double end) {
    return PipelineAction{chunk, microbatch, backward, start * kUnitS, end * kUnitS};
  };
  ScheduleStage first{0, 6 * kUnitS, 10 * kUnitS, 2, 400 * kMiB, 450 * kMiB, {}};
  first.actions = {action(0, 0, false, 0, 1), action(0, 1, false, 1, 2), action(0, 0, true, 4, 6),
                   action(0, 1, true, 7, 9)};
  ScheduleStage second{1, 6 * kUnitS, 7.5 * kUnitS, 1, 300 * kMiB, 350 * kMiB, {}};
  second.actions = {action(1, 0, false, 1, 2), action(1, 0, true, 2, 4), action(1, 1, false, 4, 5),
                    action(1, 1, true, 5, 7)};
  pipeline.stages = {first, second};
  schedule.pipeline = pipeline;
  return schedule;
}

// The bars of a Gantt chart: its rectangles with a tooltip (the legend's keys have none).
std::vector<const XmlElement*> gantt_bars(const XmlElement& chart) {
  std::vector<const XmlElement*> bars;
  for (const XmlElement* rect : chart.all("rect")) {
    if (!rect->all("title").empty()) bars.push_back(rect);
  }
  return bars;
}

}  // namespace

TEST_CASE("the pipeline Gantt chart: a row per stage, a bar per action, tails, step time",
          "[report][html][pipeline]") {
  ReportEntry entry;
  entry.source = "pp.json";
  entry.schedule = make_pipeline_schedule();
  const std::string html = render_report_html({entry});
  const XmlElement root = XmlParser(html).parse();
  const XmlElement* chart = chart_with_id(root, "pipeline-1");
  REQUIRE(chart != nullptr);
  CHECK(chart->attribute("role") == "img");
  CHECK(chart->attribute("aria-label").find("Pipeline schedule") != std::string::npos);
  std::set<std::string> axis_labels;
  for (const XmlElement* label : chart->all("text")) {
    if (label->attribute("class") == "axis-label") axis_labels.insert(label->text);
  }
  CHECK(axis_labels == std::set<std::string>{"time since step start (ms)", "pipeline stage"});

  // Rows of 34 px from y = 40 (bars 5 px below a row's top: y 45.0 and 79.0); the axis runs
  // to 10 ms over 1320 - 116.2 - 20 = 1183.8 px from x = 116.2 (70 px + "stage 0" at
  // 6.6 px a character), so a unit (0.9765625 ms) is 115.60546875 px: stage 0's B0
  // starts at 116.2 + 4 x 115.605 = 578.6 and is 231.2 wide.
  std::map<std::string, std::vector<std::string>> by_row;  // y -> titles
  std::map<std::string, int> by_class;
  const XmlElement* b0 = nullptr;
  for (const XmlElement* bar : gantt_bars(*chart)) {
    by_row[bar->attribute("y")].push_back(bar->all("title")[0]->text);
    ++by_class[bar->attribute("class")];
    if (bar->all("title")[0]->text.rfind("stage 0 chunk 0 microbatch 0 backward", 0) == 0) b0 = bar;
  }
  REQUIRE(by_row.size() == 2);
  CHECK(by_row["45.0"].size() == 5);  // 4 actions and the tail
  CHECK(by_row["79.0"].size() == 5);
  for (const std::string& title : by_row["45.0"]) CHECK(title.rfind("stage 0 ", 0) == 0);
  for (const std::string& title : by_row["79.0"]) CHECK(title.rfind("stage 1 ", 0) == 0);
  // Forwards and backwards in two colours, each bar outlined (no virtual stages: none
  // lighter).
  CHECK(by_class == std::map<std::string, int>{
                        {"t-fwd pp-bar", 4}, {"t-bwd pp-bar", 4}, {"pp-tail pp-bar", 2}});
  REQUIRE(b0 != nullptr);
  CHECK(b0->attribute("x") == "578.6");
  CHECK(b0->attribute("width") == "231.2");
  CHECK(b0->all("title")[0]->text ==
        "stage 0 chunk 0 microbatch 0 backward: " + format_seconds(2 * kUnitS) + " at " +
            format_seconds(4 * kUnitS));
  // The bubble: nothing on stage 0 between its F1 (ends at 2 units: x 347.4) and its B0.
  for (const XmlElement* bar : gantt_bars(*chart)) {
    if (bar->attribute("y") != "45.0") continue;
    const double x = std::stod(bar->attribute("x"));
    CHECK((x + std::stod(bar->attribute("width")) <= 347.5 || x >= 578.6));
  }
  // Labels: microbatch and direction, each once per stage.
  std::map<std::string, int> labels;
  for (const XmlElement* label : chart->all("text")) {
    if (label->attribute("class") == "task-label") ++labels[label->text];
  }
  CHECK(labels ==
        std::map<std::string, int>{{"F0", 2}, {"F1", 2}, {"B0", 2}, {"B1", 2}, {"tail", 2}});
  // The step time as a line across the rows (10 units: x 116.2 + 1156.05 = 1272.3).
  bool marker = false;
  for (const XmlElement* line : chart->all("line")) {
    if (line->attribute("class") != "marker") continue;
    marker = true;
    CHECK(line->attribute("x1") == "1272.3");
    CHECK(line->attribute("x2") == "1272.3");
  }
  CHECK(marker);
  CHECK(html.find("step time " + format_seconds(10 * kUnitS)) != std::string::npos);
  CHECK(render_report_html({entry}) == html);
}

TEST_CASE("the text and Markdown reports of a pipeline schedule list its stages",
          "[report][pipeline]") {
  ReportEntry entry;
  entry.source = "pp.json";
  entry.schedule = make_pipeline_schedule();
  // Tiny's 4 blocks on 2 stages: torchtitan's split, 2 blocks each.
  entry.schedule.model = builtin_model("tiny");
  entry.schedule.job.dp_shard = 0;  // derived: 8 GPUs over 2 stages
  entry.schedule.job = normalize_job(entry.schedule.model, entry.schedule.job);
  ScheduleChunk first, second;
  first.units = {0, 1, 2};
  second.rank = 1;
  second.units = {3, 4, 5};
  entry.schedule.pipeline->chunks = {first, second};
  const std::string text = render_report_text({entry});
  INFO(text);
  CHECK(text.find("pipeline: pp 2 x tp 1 x dp_shard 4 x dp_replicate 1, 2 microbatches, 1f1b, "
                  "stages split with the embedding and norm+output as 1 and 1 blocks: bubble "
                  "33.3%") != std::string::npos);
  CHECK(text.find("tok_embeddings..layers.1  5.86 ms  9.77 ms") != std::string::npos);
  CHECK(text.find("layers.2..norm+output  5.86 ms  7.32 ms") != std::string::npos);
  const std::string markdown = render_report_markdown({entry});
  CHECK(markdown.find("### Pipeline stages") != std::string::npos);
  CHECK(markdown.find("| 1 | layers.2..norm+output | 5.86 ms | 7.32 ms | 1 |") !=
        std::string::npos);
  // The stages fit the 1 GiB limit: 450 and 350 MiB reserved.
  CHECK(markdown.find("| 300 MiB | 350 MiB | yes |") != std::string::npos);
  // The HTML page's stage table names the chunks' units too.
  CHECK(render_report_html({entry}).find("layers.2..norm+output: 3 units") != std::string::npos);
  CHECK(text.find("send ") != std::string::npos);
  // One stage of gradient accumulation: no schedule, and neither bubble nor sends.
  entry.schedule.job.pp = 1;
  const std::string accumulation = render_report_text({entry});
  CHECK(accumulation.find("2 microbatches, no pipeline (gradient accumulation)\n") !=
        std::string::npos);
  CHECK(accumulation.find("send ") == std::string::npos);
  CHECK(render_report_html({entry}).find("2 microbatches, no pipeline (gradient accumulation). "
                                         "The trace") != std::string::npos);
}

TEST_CASE("a pipeline schedule without stored actions says it has no Gantt chart",
          "[report][html][pipeline]") {
  ReportEntry entry;
  entry.source = "old.json";
  entry.schedule = make_pipeline_schedule();
  for (ScheduleStage& stage : entry.schedule.pipeline->stages) stage.actions.clear();
  const std::string html = render_report_html({entry});
  const XmlElement root = XmlParser(html).parse();
  CHECK(chart_with_id(root, "pipeline-1") == nullptr);
  CHECK(html.find("<h3>Pipeline stages</h3>") != std::string::npos);
  CHECK(html.find("This schedule stores no pipeline actions (written before 2026-12-01): no "
                  "Gantt chart.") != std::string::npos);
}

TEST_CASE("a replayed pipeline's stages, predicted against measured, in every format",
          "[report][pipeline]") {
  ReportEntry entry;
  entry.source = "pp.json";
  entry.schedule = make_pipeline_schedule();
  MeasuredResult measured = make_measured();
  measured.timings.clear();  // a pipeline's replay times its actions, not the Program
  measured.pp = 2;
  MeasuredPipeline pipeline;
  pipeline.microbatches = 2;
  // Stage 0: busy 7 units (predicted 6), ends at 12 (10), peak 420 MiB (400); stage 1 as
  // predicted.
  pipeline.stages = {{0, 7 * kUnitS, 10 * kUnitS, 12 * kUnitS, 420 * kMiB},
                     {1, 6 * kUnitS, 7 * kUnitS, 7.5 * kUnitS, 300 * kMiB}};
  measured.pipeline = pipeline;
  entry.measured = measured;

  const Report report = summarize_report({entry});
  REQUIRE(report.schedules[0].measured);
  const MeasuredComparison& m = *report.schedules[0].measured;
  REQUIRE(m.stages.size() == 2);
  CHECK(m.stages[0].rank == 0);
  CHECK(m.stages[0].predicted_busy_s == 6 * kUnitS);
  CHECK(m.stages[0].measured_busy_s == 7 * kUnitS);
  CHECK(m.stages[0].busy_relative_error == Approx(6.0 / 7 - 1));
  CHECK(m.stages[0].end_relative_error == Approx(10.0 / 12 - 1));
  CHECK(m.stages[0].predicted_peak_allocated_bytes == 400 * kMiB);
  CHECK(m.stages[0].measured_peak_allocated_bytes == 420 * kMiB);
  CHECK(m.stages[0].peak_relative_error == Approx(400.0 / 420 - 1));
  CHECK(m.stages[1].rank == 1);
  CHECK(m.stages[1].busy_relative_error == 0);
  CHECK(m.stages[1].end_relative_error == 0);
  CHECK(m.stages[1].peak_relative_error == 0);

  // JSON: the stages round-trip; a missing figure is named; reports of other schedules
  // have no "stages" (their text is unchanged).
  const nlohmann::json json = report_to_json(report);
  CHECK(json["schedules"][0]["measured"]["stages"][0]["measured_end_s"] == 12 * kUnitS);
  CHECK(report_from_json(json, "r.json") == report);
  nlohmann::json missing = json;
  missing["schedules"][0]["measured"]["stages"][1].erase("measured_end_s");
  check_refused(missing, "r.json", "r.json/schedules/0/measured/stages/1/measured_end_s");
  CHECK_FALSE(report_to_json(summarize_report(entries(true)))["schedules"][0]["measured"].contains(
      "stages"));

  // Text and Markdown: a row per stage.
  const std::string text = render_report_text({entry});
  INFO(text);
  CHECK(text.find("  pipeline stages, predicted vs measured:\n    stage  busy pred  measured   "
                  "error") != std::string::npos);
  CHECK(text.find("    0        5.86 ms   6.84 ms  -14.3%   9.77 ms  11.72 ms  -16.7%    400 MiB"
                  "   420 MiB  -4.8%\n") != std::string::npos);
  const std::string markdown = render_report_markdown({entry});
  CHECK(markdown.find("#### Pipeline stages, predicted vs measured\n\n| stage | busy pred |") !=
        std::string::npos);
  CHECK(markdown.find("| 1 | 5.86 ms | 5.86 ms | +0.0% | 7.32 ms | 7.32 ms | +0.0% | 300 MiB | "
                      "300 MiB | +0.0% |") != std::string::npos);

  // HTML: each stage's figures in the chart and the table, equal to the JSON's.
  const std::string html = render_report_html({entry});
  const XmlElement root = XmlParser(html).parse();
  std::vector<const XmlElement*> figures;
  root.find_with("data-json", figures);
  std::set<std::string> pointers;
  for (const XmlElement* figure : figures) {
    const std::string pointer = figure->attribute("data-json");
    if (pointer.find("/measured/stages/") == std::string::npos) continue;
    INFO(pointer);
    pointers.insert(pointer);
    const nlohmann::json::json_pointer path(pointer);
    REQUIRE(json.contains(path));
    CHECK(json.at(path).dump() == figure->attribute("data-value"));
    if (figure->name == "td") CHECK(figure->text == expected_display(pointer, json.at(path)));
  }
  for (const char* key :
       {"predicted_busy_s", "measured_busy_s", "busy_relative_error", "predicted_end_s",
        "measured_end_s", "end_relative_error", "predicted_peak_allocated_bytes",
        "measured_peak_allocated_bytes", "peak_relative_error"}) {
    CHECK(pointers.count(std::string("/schedules/0/measured/stages/1/") + key) == 1);
  }
  const XmlElement* chart = chart_with_id(root, "measured-1");
  REQUIRE(chart != nullptr);
  CHECK(chart->attribute("aria-label") == "Predicted against measured time per stage");
  CHECK(html.find("<code>fsdptune compare</code>") != std::string::npos);

  // A measurement of another stage count (not one of this schedule) compares no stages.
  entry.measured->pipeline->stages.pop_back();
  CHECK(summarize_report({entry}).schedules[0].measured->stages.empty());
}

TEST_CASE("a 405B-sized pipeline stays a reasonable file", "[report][html][pipeline]") {
  // 16 stages x 2 virtual stages x 128 microbatches: 512 actions per stage, 8192 in all,
  // laid out back to back (the chart does not check the schedule, it draws it).
  ScheduleFile schedule = make_pipeline_schedule();
  schedule.job.pp = 16;
  schedule.job.virtual_stages = 2;
  schedule.job.microbatches = 128;
  schedule.job.pp_schedule = PipelineSchedule::kInterleaved1F1B;
  schedule.pipeline->stages.clear();
  double step_s = 0;
  for (int rank = 0; rank < 16; ++rank) {
    ScheduleStage stage;
    stage.rank = rank;
    double at_s = rank * 0.01;
    for (const bool backward : {false, true}) {
      for (int m = 0; m < 128; ++m) {
        for (int v = 0; v < 2; ++v) {
          const double seconds = backward ? 0.02 : 0.01;
          stage.actions.push_back({v * 16 + rank, m, backward, at_s, at_s + seconds});
          at_s += seconds;
        }
      }
    }
    stage.end_s = at_s + 0.05;
    step_s = std::max(step_s, stage.end_s);
    schedule.pipeline->stages.push_back(stage);
  }
  schedule.predicted.step_time_s = step_s;
  ReportEntry entry;
  entry.source = "405b-pp.json";
  entry.schedule = schedule;
  const std::string html = render_report_html({entry});
  const XmlElement root = XmlParser(html).parse();
  const XmlElement* chart = chart_with_id(root, "pipeline-1");
  REQUIRE(chart != nullptr);
  CHECK(gantt_bars(*chart).size() == 8192 + 16);  // the actions and a tail per stage
  CHECK(html.size() < 2 * kMiB);
}
