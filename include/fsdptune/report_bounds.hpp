// What `fsdptune report` shows at any timing of a schedule (docs/report.md "The tuned plan
// at any timing"). The report is pure core code; the bounds are the scheduler's
// (memory_bound.hpp), so its callers (the CLI, the fuzz replay) set them with this.
#pragma once

#include "fsdptune/report.hpp"

namespace fsdptune {

// Sets, from entry.schedule, entry.any_timing (a schedule without a pipeline: its Program's
// peaks at any timing with the simulator's default allocator options, as `simulate --plan`
// prints them; none for a Program without tasks) and entry.stage_any_timing (a pipeline:
// pipeline_any_timing of its stored chunks and stages). REQUIRES: a schedule
// schedule_from_json accepted.
void set_report_any_timing(ReportEntry& entry);

}  // namespace fsdptune
