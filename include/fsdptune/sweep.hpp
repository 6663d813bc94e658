// The configuration sweep (docs/parallelism.md "Sweep"): every valid mesh
// (dp_shard x dp_replicate x tp x pp), microbatching, pipeline schedule, activation
// checkpointing mode and float8 on/off for a model on N GPUs at a global batch, each
// simulated with a per-chunk FSDP plan, ranked by tokens/s/GPU among those that fit.
// Pure: no I/O; uses `threads` std::threads, the result does not depend on their number.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "fsdptune/cost_model.hpp"
#include "fsdptune/job.hpp"
#include "fsdptune/model.hpp"
#include "fsdptune/pipeline.hpp"

namespace fsdptune {

struct SweepOptions {
  std::int64_t gpus = 8;
  std::int64_t gpus_per_node = 8;
  std::int64_t global_batch_sequences = 8;  // sequences per optimizer step, all replicas
  std::int64_t seq_len = 8192;
  DType param_dtype = DType::kBF16;
  DType reduce_dtype = DType::kFP32;
  // Compared with each stage's reserved-peak estimate; 0 = default_memory_limit_bytes.
  std::int64_t memory_limit_bytes = 0;
  std::vector<ActivationCheckpointing> ac_modes = {ActivationCheckpointing::kNone,
                                                   ActivationCheckpointing::kSelective,
                                                   ActivationCheckpointing::kFull};
  bool try_float8 = true;  // also float8 (only where the hardware has an fp8 rate)
  bool try_async_tp = false;
  std::int64_t max_pp = 16;
  std::int64_t max_local_batch = 8;  // sequences per microbatch per DP rank
  int threads = 1;
  // Called from worker threads (serialized) after each configuration: done, total.
  std::function<void(std::int64_t, std::int64_t)> progress;
};

struct SweepCandidate {
  JobSpec job;  // normalized
  bool fits = false;
  std::string rejected;  // why it was not ranked ("" when it fits)
  double step_time_s = 0;
  double tokens_per_s_per_gpu = 0;
  double mfu = 0;
  double bubble_fraction = 0;
  std::int64_t peak_reserved_bytes = 0;  // the largest over the stages
  bool operator==(const SweepCandidate&) const = default;
};

struct SweepResult {
  std::vector<SweepCandidate> ranked;    // fits, best tokens/s/GPU first (ties: enumeration order)
  std::vector<SweepCandidate> rejected;  // in enumeration order
  std::int64_t memory_limit_bytes = 0;
  bool operator==(const SweepResult&) const = default;
};

// The jobs the sweep tries, in a fixed order; meshes whose batch does not divide are
// left out (counted in `skipped`, may be null).
std::vector<JobSpec> sweep_jobs(const ModelSpec& model, const HardwareSpec& hardware,
                                const SweepOptions& options, std::int64_t* skipped = nullptr);

// Simulates one job (per-chunk fsdp2 plans) into a candidate, fits or not.
SweepCandidate evaluate_job(const ModelSpec& model, const JobSpec& job, const CostModel& costs,
                            std::int64_t memory_limit_bytes);

SweepResult sweep(const ModelSpec& model, const CostModel& costs, const SweepOptions& options);

// Parses --global-batch: a plain count is sequences ("1024"); a count with the suffix
// "tok" is tokens ("8388608tok", "8Mtok" with k/M/G = 2^10/2^20/2^30), converted at
// `seq_len` (must divide). Throws Error(kBadInput) naming --global-batch.
std::int64_t parse_global_batch_sequences(const std::string& text, std::int64_t seq_len);

}  // namespace fsdptune
