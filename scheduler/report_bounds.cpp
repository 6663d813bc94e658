#include "fsdptune/report_bounds.hpp"

#include "fsdptune/memory_bound.hpp"

namespace fsdptune {

void set_report_any_timing(ReportEntry& entry) {
  const ScheduleFile& schedule = entry.schedule;
  entry.any_timing.reset();
  entry.stage_any_timing.clear();
  if (schedule.pipeline) {
    entry.stage_any_timing = pipeline_any_timing(schedule);
    return;
  }
  if (schedule.program.tasks.empty()) return;
  const AnyTimingPeak peak = any_timing_peak(schedule.program);
  ReportAnyTiming bound;
  bound.peak_allocated_bytes = peak.peak_allocated_bytes;
  bound.peak_reserved_bytes = any_timing_reserved_bytes(schedule.program);
  bound.peak_breakdown = peak.breakdown;
  bound.state = describe_any_timing_state(schedule.program, peak);
  entry.any_timing = std::move(bound);
}

}  // namespace fsdptune
