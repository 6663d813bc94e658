// The HTML report of a real pipeline schedule (docs/report.md): the tiny model on 2
// stages, 4 microbatches, 1F1B and interleaved 1F1B, its actions drawn one bar each in
// its stage's row.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "../core/report_fixture.hpp"
#include "fsdptune/cost_model.hpp"
#include "fsdptune/hardware.hpp"
#include "fsdptune/pipeline.hpp"
#include "fsdptune/plans.hpp"
#include "fsdptune/report.hpp"
#include "fsdptune/schedule.hpp"
#include "pipeline_fixture.hpp"

using namespace fsdptune;
using fsdptune::report_test::chart_with_id;
using fsdptune::report_test::XmlElement;
using fsdptune::report_test::XmlParser;

namespace {

// gantt_svg's layout: rows of 34 px from y = 40, bars 5 px below a row's top.
int row_of_bar(const XmlElement& rect) {
  const double y = std::stod(rect.attribute("y"));
  return static_cast<int>((y - 40 - 5) / 34 + 0.5);
}

}  // namespace

TEST_CASE("the report draws each stored pipeline action in its stage's row",
          "[pipeline][report][html]") {
  const auto costs = make_analytic_cost_model(builtin_hardware("h100-sxm"));
  for (const auto& [kind, virtual_stages] :
       {std::pair{PipelineSchedule::k1F1B, std::int64_t{1}},
        std::pair{PipelineSchedule::kInterleaved1F1B, std::int64_t{2}}}) {
    INFO(to_string(kind));
    const Workload workload = fsdptune::testing::tiny_pipelined(2, 4, kind, virtual_stages);
    const PipelineSimulation sim = simulate_pipelined_job(
        workload, *costs, [](const Workload& chunk) { return fsdp2_plan(chunk); });
    ReportEntry entry;
    entry.source = "pp.json";
    entry.schedule = pipeline_schedule(workload, sim, costs->hardware(), 80LL << 30, "fsdp2");
    const std::string html = render_report_html({entry});
    const XmlElement root = XmlParser(html).parse();
    const XmlElement* chart = chart_with_id(root, "pipeline-1");
    REQUIRE(chart != nullptr);
    CHECK_FALSE(chart->attribute("aria-label").empty());

    // One bar per action: 2 directions x V chunks x 4 microbatches per stage, each in the
    // row of its stage, its tooltip naming it; forwards and backwards in their classes.
    std::vector<int> bars_per_row(2, 0);
    int forwards = 0;
    int backwards = 0;
    int tails = 0;
    int lighter = 0;
    for (const XmlElement* rect : chart->all("rect")) {
      const std::string css = rect->attribute("class");
      const auto titles = rect->all("title");
      if (titles.empty()) continue;  // the legend's keys have no tooltip
      if (css.rfind("pp-tail", 0) == 0) {
        ++tails;
        continue;
      }
      const bool forward = css.rfind("t-fwd", 0) == 0;
      const bool backward = css.rfind("t-bwd", 0) == 0;
      REQUIRE((forward || backward));
      const int row = row_of_bar(*rect);
      REQUIRE(row >= 0);
      REQUIRE(row < 2);
      ++bars_per_row[static_cast<std::size_t>(row)];
      CHECK(titles[0]->text.rfind("stage " + std::to_string(row) + " chunk ", 0) == 0);
      CHECK(titles[0]->text.find(forward ? " forward: " : " backward: ") != std::string::npos);
      (forward ? forwards : backwards) += 1;
      // Interleaved, chunks 2 and 3 (virtual stage 1) are a shade lighter.
      if (css.find(" alt") != std::string::npos) {
        ++lighter;
        CHECK(titles[0]->text.find(" chunk " + std::to_string(row + 2) + " ") != std::string::npos);
      }
    }
    const int per_stage = static_cast<int>(2 * virtual_stages * 4);
    CHECK(bars_per_row == std::vector<int>{per_stage, per_stage});
    CHECK(forwards == backwards);
    CHECK(lighter == (virtual_stages == 2 ? per_stage : 0));  // half of each of 2 stages
    // Every stage's chunks end with their reduce-scatters and optimizer: a tail each; and
    // interleaved, chunk 2 or 3's last backward (its reduce-scatters, waited for) is
    // followed by chunk 0 or 1's backwards: a tail after it too.
    int with_tail = 0;
    for (const StageResult& stage : sim.result.stages) {
      with_tail += stage.end_s > stage.pipeline_end_s ? 1 : 0;
    }
    CHECK(tails == with_tail + (virtual_stages == 2 ? 2 : 0));
    CHECK(html.find("step time " + format_seconds(sim.result.step_time_s)) != std::string::npos);

    // Deterministic, and the same from the schedule file read back.
    CHECK(render_report_html({entry}) == html);
    ReportEntry read_back = entry;
    read_back.schedule = schedule_from_json(schedule_to_json(entry.schedule), "pp.json");
    CHECK(render_report_html({read_back}) == html);

    // Without its actions (a file written before they were stored): a note, no chart.
    for (ScheduleStage& stage : read_back.schedule.pipeline->stages) stage.actions.clear();
    const std::string older = render_report_html({read_back});
    CHECK(chart_with_id(XmlParser(older).parse(), "pipeline-1") == nullptr);
    CHECK(older.find("stores no pipeline actions") != std::string::npos);
  }
}
