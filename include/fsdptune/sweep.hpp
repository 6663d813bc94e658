// The configuration sweep (docs/parallelism.md "Sweep"): every valid mesh
// (dp_shard x dp_replicate x tp x pp), microbatching, pipeline schedule, activation
// checkpointing mode and float8 on/off for a model on N GPUs at a global batch, each
// simulated with fsdp2 per chunk, then tuned (the per-stage tuner, or the Tuner when not
// pipelined) under a deterministic budget, and ranked by tokens/s/GPU among those that fit.
// Pure: no I/O, no clock; uses `threads` std::threads, the result does not depend on
// their number.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "fsdptune/cost_model.hpp"
#include "fsdptune/job.hpp"
#include "fsdptune/model.hpp"
#include "fsdptune/pipeline.hpp"
#include "fsdptune/pipeline_tuner.hpp"
#include "fsdptune/tuner.hpp"

namespace fsdptune {

struct SweepProgress {
  bool tuning = false;  // false: simulating with fsdp2; true: tuning
  std::int64_t done = 0;
  std::int64_t total = 0;
};

struct SweepOptions {
  std::int64_t gpus = 8;
  std::int64_t gpus_per_node = 8;
  std::int64_t global_batch_sequences = 8;  // sequences per optimizer step, all replicas
  std::int64_t seq_len = 8192;
  // Every configuration's dtypes, but for meshes of one shard rank with TP or PP, which
  // torchtitan trains without mixed precision (torchtitan_mixed_precision): fp32 both.
  DType param_dtype = DType::kBF16;
  DType reduce_dtype = DType::kFP32;
  // Compared with each stage's reserved-peak estimate; 0 = default_memory_limit_bytes.
  std::int64_t memory_limit_bytes = 0;
  std::vector<ActivationCheckpointing> ac_modes = {ActivationCheckpointing::kNone,
                                                   ActivationCheckpointing::kSelective,
                                                   ActivationCheckpointing::kFull};
  bool try_float8 = true;     // also float8 (only where the hardware has an fp8 rate)
  bool try_async_tp = false;  // async TP only compiled
  Execution execution = Execution::kCompiled;  // every configuration's (JobSpec::execution)
  std::int64_t max_pp = 16;
  // Context-parallel degrees tried, each where it divides the configuration's shard group
  // (and the sequence, normalize_job): {1} = no CP.
  std::vector<std::int64_t> cp_degrees = {1};
  // The split of the blocks into the pipeline chunks (JobSpec's fields of these names).
  std::int64_t pp_first_stage_less_layers = JobSpec{}.pp_first_stage_less_layers;
  std::int64_t pp_last_stage_less_layers = JobSpec{}.pp_last_stage_less_layers;
  // N >= 0: also every pair of those weights in 0..N that splits a pipelined job's blocks
  // into other chunks (pipeline_split_jobs); -1: only the pair above. At most
  // kMaxTriedSplitWeight.
  std::int64_t try_pp_less_layers = -1;
  std::int64_t max_local_batch = 8;  // sequences per microbatch per DP rank
  // Which configurations are tuned: -1 = every one that fits with fsdp2 and every one
  // over the limit with fsdp2 whose least-memory plans fit (tuning may bring it under);
  // K >= 0 = only the K best that fit with fsdp2 (0: none, fsdp2 figures only).
  std::int64_t tune_top = -1;
  // Plans simulated per chunk (per configuration when not pipelined): the deterministic
  // budget of each search (TunerOptions::max_evaluations; no time budget).
  std::int64_t tune_evaluations = 100;
  // Each search's TunerOptions::step_time_tolerance.
  double step_time_tolerance = TunerOptions{}.step_time_tolerance;
  // Each pipelined configuration's TunerOptions::keep_gathered, and the fsdp2 and
  // least-memory simulations' choice under it (baseline_keep_gathered,
  // allowed_keep_gathered): kTorchtitan ranks what torchtitan runs unchanged.
  KeepGatheredChoice keep_gathered = KeepGatheredChoice::kAny;
  // `sweep --fit any-timing`: a configuration fits when every stage's reserved peak at any
  // timing of its chunks' Programs (pipeline_any_timing) is within the limit, fsdp2's as
  // its tuned plans' (TunerOptions::fit_at_any_timing), not only at the predicted timing.
  bool fit_at_any_timing = false;
  // Each search's TunerOptions::fsdp2_exact / simplefsdp_exact (`sweep --fsdp2-exact`,
  // `--simplefsdp-exact`): tuned rows of plans torchtitan's FSDP2 (SimpleFSDP) runs as
  // simulated. Eager sweeps are FSDP2-exact without the flag.
  bool fsdp2_exact = false;
  bool simplefsdp_exact = false;
  int threads = 1;  // configurations evaluated / tuned at once, one per thread
  // Called from worker threads (serialized) after each configuration of each phase.
  std::function<void(const SweepProgress&)> progress;
};

// Why a configuration was not ranked (SweepCandidate::rejection).
enum class SweepRejection {
  kNone,          // it fits
  kShardedState,  // its sharded state alone is over the limit (not simulated)
  kPeak,          // its (tuned, where tuned) reserved peak is over the limit
  // --fit any-timing: fsdp2's plans fit as predicted but not at some timing, or the
  // configuration was tuned and its search found no plan within the limit at every timing.
  kPeakAtAnyTiming,
  // --simplefsdp-exact: not tuned (--tune-top K), or its search found no plan SimpleFSDP
  // runs within the limit: its figures would be fsdp2's, which SimpleFSDP does not run.
  kNotSimpleFsdp,
};

struct SweepCandidate {
  JobSpec job;  // normalized
  bool fits = false;
  std::string rejected;                              // why it was not ranked ("" when it fits)
  SweepRejection rejection = SweepRejection::kNone;  // the same, for counting
  double step_time_s = 0;
  double tokens_per_s_per_gpu = 0;
  double mfu = 0;
  double bubble_fraction = 0;
  std::int64_t peak_reserved_bytes = 0;   // the largest over the stages
  std::int64_t peak_allocated_bytes = 0;  // the largest over the stages
  // The figures above are of tuned plans (else of fsdp2 per chunk).
  bool tuned = false;
  std::string derived_from;      // where the tuned search started ("" when not tuned)
  double fsdp2_step_time_s = 0;  // fsdp2 per chunk (0 when the state alone was too large)
  // With SweepOptions::fit_at_any_timing: the largest stage's reserved peak at any timing
  // of the plans above, what `fits` was judged by; 0 otherwise (and when not simulated).
  std::int64_t any_timing_reserved_bytes = 0;
  bool operator==(const SweepCandidate&) const = default;
};

// The search result of one configuration: the single-job Tuner's when the job is not
// pipelined, else the per-stage tuner's (exactly one is set).
struct ConfigurationTuning {
  std::optional<TunerResult> single;
  std::optional<PipelineTuning> pipeline;
  bool operator==(const ConfigurationTuning&) const = default;
};

// The search of one configuration's plans (is_pipelined: tune_pipelined_job, else
// Tuner::tune) with `options` as given.
ConfigurationTuning tune_configuration(const Workload& workload, const CostModel& costs,
                                       const TunerOptions& options);

struct SweepResult {
  std::vector<SweepCandidate> ranked;    // fits, best tokens/s/GPU first (ties: enumeration order)
  std::vector<SweepCandidate> rejected;  // in enumeration order
  std::int64_t memory_limit_bytes = 0;
  std::int64_t tuned = 0;            // configurations searched
  std::int64_t plans_evaluated = 0;  // by all their searches
  // The search of ranked.front() when its figures are tuned: what `sweep --out` writes.
  std::optional<ConfigurationTuning> best_tuning;
  bool operator==(const SweepResult&) const = default;
};

// What sweep_jobs left out, by reason: the flag at fault (what normalize_job's error
// names: "--seq", "--tp", ...; "--global-batch" for a mesh the batch does not divide,
// "--float8" for float8 over the context-parallel ranks alone), its count and the first
// such error's message.
struct SweepSkips {
  struct Reason {
    std::string flag;
    std::int64_t count = 0;
    std::string message;  // the first configuration's
    bool operator==(const Reason&) const = default;
  };
  std::int64_t count = 0;
  std::vector<Reason> reasons;  // by first occurrence
  // Of the meshes the global batch did not divide over, the nearest global batches below
  // and above it one of them would take (0: none).
  std::int64_t batch_below = 0;
  std::int64_t batch_above = 0;
  void add(const std::string& flag, const std::string& message);
  // The most frequent reason (the first of equals); REQUIRES: count > 0.
  const Reason& main_reason() const;
  // "18 --virtual-stages, 4 --global-batch" (most frequent first).
  std::string summary() const;
  bool operator==(const SweepSkips&) const = default;
};

// The jobs the sweep tries, in a fixed order; configurations normalize_job refuses and
// meshes whose batch does not divide are left out (in `skipped`, may be null). With
// try_pp_less_layers, each pipelined job with the given weights is followed by the same job
// with each further distinct split, in (first, last) order; a pair torchtitan refuses for
// it is left out, uncounted.
std::vector<JobSpec> sweep_jobs(const ModelSpec& model, const HardwareSpec& hardware,
                                const SweepOptions& options, SweepSkips* skipped = nullptr);

// Simulates one job (per-chunk fsdp2 plans, kept gathered as baseline_keep_gathered says
// under `keep_gathered`) into a candidate, fits or not (at any timing with
// `fit_at_any_timing`, SweepOptions').
SweepCandidate evaluate_job(const ModelSpec& model, const JobSpec& job, const CostModel& costs,
                            std::int64_t memory_limit_bytes,
                            KeepGatheredChoice keep_gathered = KeepGatheredChoice::kAny,
                            bool fit_at_any_timing = false);

SweepResult sweep(const ModelSpec& model, const CostModel& costs, const SweepOptions& options);

// The options of a configuration's search in sweep(): no time budget, `tune_evaluations`
// plans, the sweep's tolerance, keep-gathered choice, fit and exactness, under
// `memory_limit_bytes` on `threads` threads (the sweep's own searches: one each).
TunerOptions sweep_tuner_options(const SweepOptions& options, std::int64_t memory_limit_bytes,
                                 int threads);

// Parses --global-batch: a plain count is sequences ("1024"); a count with the suffix
// "tok" is tokens ("8388608tok", "8Mtok" with k/M/G = 2^10/2^20/2^30), converted at
// `seq_len` (must divide). Throws Error(kBadInput) naming --global-batch.
std::int64_t parse_global_batch_sequences(const std::string& text, std::int64_t seq_len);

}  // namespace fsdptune
