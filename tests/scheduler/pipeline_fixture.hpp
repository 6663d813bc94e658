// Pipelined jobs shared by the pipeline tests: the tiny model cut into stages and a tuner
// budget that does not depend on the clock.
#pragma once

#include <cstdint>

#include "fsdptune/job.hpp"
#include "fsdptune/model.hpp"
#include "fsdptune/pipeline.hpp"
#include "fsdptune/tuner.hpp"
#include "fsdptune/workload.hpp"

namespace fsdptune::testing {

// `model` on `gpus` GPUs as `pp` stages x gpus/pp-way FSDP.
inline Workload pipelined_workload(const ModelSpec& model, std::int64_t gpus, std::int64_t pp,
                                   std::int64_t microbatches, PipelineSchedule schedule,
                                   std::int64_t virtual_stages, std::int64_t seq_len) {
  JobSpec job;
  job.gpus = gpus;
  job.pp = pp;
  job.microbatches = microbatches;
  job.pp_schedule = schedule;
  job.virtual_stages = virtual_stages;
  job.seq_len = seq_len;
  job = normalize_job(model, job);
  validate_pipeline(job);
  return build_workload(model, job);
}

// The tiny model (4 layers) on 8 GPUs as `pp` stages x 8/pp-way FSDP, short sequences.
inline Workload tiny_pipelined(std::int64_t pp, std::int64_t microbatches,
                               PipelineSchedule schedule, std::int64_t virtual_stages) {
  return pipelined_workload(builtin_model("tiny"), 8, pp, microbatches, schedule, virtual_stages,
                            256);
}

// 60 simulations per chunk, no time budget: the same result on any machine.
inline TunerOptions deterministic_tuner(std::int64_t memory_limit_bytes) {
  TunerOptions options;
  options.time_budget_s = 0;
  options.max_evaluations = 60;
  options.memory_limit_bytes = memory_limit_bytes;
  return options;
}

}  // namespace fsdptune::testing
