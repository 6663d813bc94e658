// The schedules that the measured-file fuzz target compares its inputs with: the tiny
// model on 2 GPUs (seq 128) with the fsdp2 plan, as a version 1 schedule, and the same
// with pp 2 and 2 microbatches (1F1B), as a version 2 one. Built in-process, the way
// `tune` builds its schedules (schedule_of_tuned_plan, pipeline_schedule), so that they
// follow the formats as they change; the measured corpus holds what `fsdptune validate
// --backend cpu` measured for them.
#pragma once

#include <vector>

#include "fsdptune/cost_model.hpp"
#include "fsdptune/hardware.hpp"
#include "fsdptune/pipeline.hpp"
#include "fsdptune/plans.hpp"
#include "fsdptune/program.hpp"
#include "fsdptune/schedule.hpp"
#include "fsdptune/simulator.hpp"
#include "fsdptune/tuner.hpp"

namespace fsdptune::fuzz {

inline ScheduleFile reference_schedule(std::int64_t pp) {
  const ModelSpec model = builtin_model("tiny");
  JobSpec job;
  job.gpus = 2;
  job.gpus_per_node = 2;
  job.seq_len = 128;
  job.pp = pp;
  job.microbatches = pp;
  job = normalize_job(model, job);
  const Workload workload = build_workload(model, job);
  const HardwareSpec hardware = builtin_hardware("h100-sxm");
  const auto costs = make_analytic_cost_model(hardware);
  const std::int64_t limit_bytes = default_memory_limit_bytes(hardware);
  ScheduleFile schedule;
  if (is_pipelined(job)) {
    std::vector<Plan> plans;
    for (const std::vector<int>& units : pipeline_chunks(workload)) {
      plans.push_back(fsdp2_plan(chunk_workload(workload, units)));
    }
    const PipelineSimulation sim = simulate_pipelined_plans(
        workload, *costs, plans, std::vector<bool>(plans.size(), default_keep_gathered(job)));
    schedule = pipeline_schedule(workload, sim, hardware, limit_bytes, "fsdp2");
  } else {
    schedule.hardware = hardware;
    schedule.memory_limit_bytes = limit_bytes;
    schedule.plan = fsdp2_plan(workload);
    schedule.program = lower(workload, schedule.plan, *costs);
    SimOptions options;
    options.record_timings = true;
    options.record_timeline = true;
    const SimResult result = simulate(schedule.program, options);
    schedule.predicted = simulated_summary(result, schedule.plan.name);
    schedule.predicted.fits = plan_fits(result, limit_bytes);
    schedule.timings = result.timings;
    schedule.memory_timeline = result.memory_timeline;
  }
  schedule.model = model;
  schedule.job = job;
  schedule.provenance.tool = "fsdptune fuzz";
  schedule.provenance.cost_source = hardware.id;
  return schedule;
}

inline const std::vector<ScheduleFile>& reference_schedules() {
  static const std::vector<ScheduleFile> schedules = {reference_schedule(1), reference_schedule(2)};
  return schedules;
}

}  // namespace fsdptune::fuzz
