// Fuzz target: a schedule file, version 1 or 2 (docs/schedule-format.md), as `simulate
// --plan`, `report`, `compare` and `validate` read it (schedule_from_json, which checks it
// against the workload rebuilt from its model and job, pipeline chunks included), then
// what they do with it: the stored Program simulated (version 1) or the stored chunk
// Programs composed into the pipeline step (version 2), as `simulate --plan FILE` replays
// them; the reports of `fsdptune report` (text, Markdown, HTML, JSON); the executor's
// replayability and --check-data checks on the job's world size, as `validate` runs them
// before replaying.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "fsdptune/cost_model.hpp"
#include "fsdptune/executor.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/pipeline.hpp"
#include "fsdptune/pipeline_tuner.hpp"
#include "fsdptune/report_bounds.hpp"
#include "fsdptune/schedule.hpp"
#include "fsdptune/simulator.hpp"
#include "fsdptune/trace.hpp"
#include "fuzz_support.hpp"

namespace {

using namespace fsdptune;

// `simulate --plan FILE` without --model: the stored Programs with the schedule's own
// hardware (costs of what a pipeline replay recomputes: the sends).
void simulate_as_stored(const ScheduleFile& schedule) {
  const Workload workload =
      build_workload(schedule.model, normalize_job(schedule.model, schedule.job));
  const auto costs = make_analytic_cost_model(schedule.hardware);
  SimOptions options;
  options.record_timings = true;
  if (!schedule.pipeline) {
    options.record_timeline = true;
    const SimResult result = simulate(schedule.program, options);
    fuzz::require(std::isfinite(result.step_time_s), "an accepted Program takes a finite step");
    (void)step_metrics(workload, schedule.hardware, result);
    (void)chrome_trace(schedule.program, result, "schedule");
    return;
  }
  options.record_timeline = false;
  const PipelineSimulation sim = replay_pipeline_schedule(schedule, workload, *costs, options);
  fuzz::require(std::isfinite(sim.result.step_time_s), "an accepted pipeline takes a finite step");
  (void)pipeline_summary(sim, schedule.predicted.plan_name, schedule.memory_limit_bytes);
  (void)pipeline_chrome_trace(sim, "schedule");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return fuzz::expect_errors([&] {
    const std::string source = "schedule.json";
    const ScheduleFile schedule =
        schedule_from_json(parse_json_text(fuzz::text_of(data, size), source), source);
    fuzz::require_no_error("a schedule reads back as written", [&] {
      fuzz::require(schedule_from_json(schedule_to_json(schedule), source) == schedule,
                    "a schedule reads back as written");
    });
    simulate_as_stored(schedule);

    ReportEntry entry{source, schedule, std::nullopt, std::nullopt, {}};
    set_report_any_timing(entry);
    fuzz::render_reports({entry});

    // `validate` on as many ranks as the job has GPUs (capped: the executor is an MPI job).
    const int world_size = static_cast<int>(std::min<std::int64_t>(schedule.job.gpus, 4096));
    check_replayable(schedule, world_size, source);
    check_data_exact(schedule, world_size, source);
  });
}
