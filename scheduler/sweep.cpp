// The configuration sweep (docs/parallelism.md "Sweep").
#include "fsdptune/sweep.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>
#include <tuple>

#include <fmt/format.h>

#include "fsdptune/error.hpp"
#include "fsdptune/memory_bound.hpp"
#include "fsdptune/plans.hpp"
#include "fsdptune/program.hpp"
#include "fsdptune/simulator.hpp"
#include "fsdptune/torchtitan.hpp"
#include "fsdptune/units.hpp"

namespace fsdptune {

std::int64_t parse_global_batch_sequences(const std::string& text, std::int64_t seq_len) {
  std::string rest = text;
  bool tokens = false;
  if (rest.size() > 3 && rest.compare(rest.size() - 3, 3, "tok") == 0) {
    tokens = true;
    rest.resize(rest.size() - 3);
  }
  std::int64_t scale = 1;
  if (tokens && !rest.empty()) {
    const char suffix = rest.back();
    if (suffix == 'k' || suffix == 'K') scale = 1LL << 10;
    if (suffix == 'M') scale = 1LL << 20;
    if (suffix == 'G') scale = 1LL << 30;
    if (scale != 1) rest.pop_back();
  }
  const bool digits = !rest.empty() && std::all_of(rest.begin(), rest.end(), [](unsigned char c) {
    return std::isdigit(c) != 0;
  });
  if (!digits) {
    throw_bad_input("--global-batch",
                    fmt::format("'{}' is not a count of sequences (e.g. 1024) or of tokens "
                                "(e.g. 8388608tok, 8Mtok)",
                                text));
  }
  // The count times its suffix's scale within 64 bits (found probing: 9999999999999Gtok
  // wrapped around to a positive count of the wrong size).
  std::int64_t count = 0;
  const auto [end, error] = std::from_chars(rest.data(), rest.data() + rest.size(), count);
  if (error != std::errc() || end != rest.data() + rest.size() ||
      count > std::numeric_limits<std::int64_t>::max() / scale) {
    throw_bad_input("--global-batch", fmt::format("'{}' is out of range (a 64-bit integer{})", text,
                                                  tokens ? " of tokens" : ""));
  }
  const std::int64_t value = count * scale;
  if (value <= 0) throw_bad_input("--global-batch", "must be positive");
  if (!tokens) return value;
  if (value % seq_len != 0) {
    throw_bad_input("--global-batch", fmt::format("{} tokens are not a whole number of {}-token "
                                                  "sequences",
                                                  value, seq_len));
  }
  return value / seq_len;
}

std::vector<JobSpec> sweep_jobs(const ModelSpec& model, const HardwareSpec& hardware,
                                const SweepOptions& options, SweepSkips* skipped) {
  std::vector<JobSpec> jobs;
  SweepSkips skip;
  std::vector<bool> float8_modes = {false};
  if (options.try_float8 && hardware.peak_fp8_flops_per_s > 0) float8_modes.push_back(true);
  std::vector<bool> async_modes = {false};
  if (options.try_async_tp && options.execution == Execution::kCompiled) {
    async_modes.push_back(true);
  }
  // A configuration of the mesh, one sequence a rank, one microbatch, AC as first asked.
  const auto mesh_job = [&](std::int64_t tp, std::int64_t cp, std::int64_t pp,
                            std::int64_t replicate) {
    JobSpec job;
    job.gpus = options.gpus;
    job.gpus_per_node = options.gpus_per_node;
    job.tp = tp;
    job.cp = cp;
    job.pp = pp;
    job.dp_replicate = replicate;
    job.pp_first_stage_less_layers = options.pp_first_stage_less_layers;
    job.pp_last_stage_less_layers = options.pp_last_stage_less_layers;
    job.seq_len = options.seq_len;
    if (!options.ac_modes.empty()) job.ac = options.ac_modes.front();
    job.param_dtype = options.param_dtype;
    job.reduce_dtype = options.reduce_dtype;
    job.execution = options.execution;
    return job;
  };
  for (std::int64_t tp = 1; tp <= options.gpus_per_node; tp *= 2) {
    if (options.gpus_per_node % tp != 0 || options.gpus % tp != 0) continue;
    for (std::int64_t pp = 1; pp <= options.max_pp && pp <= model.n_layers; pp *= 2) {
      if (options.gpus % (tp * pp) != 0) continue;
      const std::int64_t dp = options.gpus / (tp * pp);
      // Replicas: powers of two, each shard group at least one node wide with its TP
      // ranks (smaller shard groups only add inter-node all-reduce traffic).
      for (std::int64_t replicate = 1; replicate <= dp; replicate *= 2) {
        if (dp % replicate != 0) continue;
        const std::int64_t shard = dp / replicate;
        if (replicate > 1 && shard * tp < std::min(options.gpus_per_node, options.gpus / pp)) {
          continue;
        }
        for (const std::int64_t cp : options.cp_degrees) {
          // The CP ranks split the shard group and share their batch.
          if (shard % cp != 0) continue;
          const std::int64_t data_parallel = dp / cp;
          if (options.global_batch_sequences % data_parallel != 0) {
            skip.add(
                "--global-batch",
                fmt::format("{} {} not divide over {} data-parallel ranks",
                            counted(options.global_batch_sequences, "sequence"),
                            options.global_batch_sequences == 1 ? "does" : "do", data_parallel));
            // The global batches nearest it that this mesh would take, where the mesh is one
            // the model takes (found by review: tp 8 on a model of 4 kv heads offered its
            // batch): a multiple of its data-parallel ranks, enough for a pipeline's
            // microbatches.
            JobSpec probe = mesh_job(tp, cp, pp, replicate);
            probe.microbatches = pp;
            try {
              validate_pipeline(normalize_job(model, probe));
              const std::int64_t least = data_parallel * pp;
              const std::int64_t under =
                  options.global_batch_sequences / data_parallel * data_parallel;
              const std::int64_t over = std::max(least, under + data_parallel);
              if (under >= least && under > skip.batch_below) skip.batch_below = under;
              if (skip.batch_above == 0 || over < skip.batch_above) skip.batch_above = over;
            } catch (const Error&) {
              // A mesh refused for itself: no batch makes it run.
            }
            continue;
          }
          const std::int64_t per_rank = options.global_batch_sequences / data_parallel;
          for (std::int64_t batch = 1; batch <= std::min(per_rank, options.max_local_batch);
               batch *= 2) {
            if (per_rank % batch != 0) continue;
            const std::int64_t microbatches = per_rank / batch;
            // Without PP more than one microbatch is gradient accumulation (torchtitan's
            // loop); with PP enough microbatches to fill the pipeline.
            if (pp > 1 && microbatches < pp) continue;
            std::vector<std::pair<PipelineSchedule, std::int64_t>> schedules;
            if (pp == 1) {
              schedules.push_back({PipelineSchedule::k1F1B, 1});
            } else {
              schedules.push_back({PipelineSchedule::k1F1B, 1});
              // Interleaving wherever PyTorch's rounds take the microbatches (6 on pp 4:
              // one round of 6; not 9 on pp 4: docs/parallelism.md "Schedules"); too few
              // blocks for 2 x pp: normalize_job skips it.
              if (interleaved_rounds_fill(pp, microbatches)) {
                schedules.push_back({PipelineSchedule::kInterleaved1F1B, 2});
              }
            }
            for (const auto& [schedule, virtual_stages] : schedules) {
              for (ActivationCheckpointing ac : options.ac_modes) {
                for (bool float8 : float8_modes) {
                  for (bool async_tp : async_modes) {
                    if (async_tp && tp == 1) continue;
                    JobSpec job = mesh_job(tp, cp, pp, replicate);
                    job.local_batch = batch;
                    job.microbatches = microbatches;
                    job.pp_schedule = schedule;
                    job.virtual_stages = virtual_stages;
                    job.ac = ac;
                    job.float8 = float8;
                    job.async_tp = async_tp;
                    try {
                      job = normalize_job(model, job);
                      validate_pipeline(job);
                    } catch (const Error& e) {
                      skip.add(e.where(), e.message());  // e.g. tp does not divide the kv heads
                      continue;
                    }
                    // float8 over a shard group of the context-parallel ranks alone:
                    // torchtitan all-gathers those in bf16, which is not modelled.
                    if (torchtitan_float8_gathers_bf16(job)) {
                      skip.add("--float8",
                               "float8 over a shard group of the context-parallel ranks alone "
                               "(torchtitan gathers it in bf16, not modelled)");
                      continue;
                    }
                    // One shard rank with TP or PP: torchtitan applies no fully_shard and
                    // no mixed precision there; ranked as it trains it, in fp32.
                    if (!torchtitan_mixed_precision(job)) {
                      job.param_dtype = DType::kFP32;
                      job.reduce_dtype = DType::kFP32;
                    }
                    if (job.pp * job.virtual_stages > 1 && options.try_pp_less_layers >= 0) {
                      for (const JobSpec& split :
                           pipeline_split_jobs(model, job, options.try_pp_less_layers)) {
                        jobs.push_back(split);
                      }
                    } else {
                      jobs.push_back(job);
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  if (skipped != nullptr) *skipped = std::move(skip);
  return jobs;
}

void SweepSkips::add(const std::string& flag, const std::string& message) {
  ++count;
  for (Reason& reason : reasons) {
    if (reason.flag == flag) {
      ++reason.count;
      return;
    }
  }
  reasons.push_back({flag, 1, message});
}

const SweepSkips::Reason& SweepSkips::main_reason() const {
  FSDPTUNE_CHECK(!reasons.empty(), "SweepSkips::main_reason: nothing skipped");
  return *std::max_element(reasons.begin(), reasons.end(),
                           [](const Reason& a, const Reason& b) { return a.count < b.count; });
}

std::string SweepSkips::summary() const {
  std::vector<Reason> sorted = reasons;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const Reason& a, const Reason& b) { return a.count > b.count; });
  std::string text;
  for (const Reason& reason : sorted) {
    if (!text.empty()) text += ", ";
    text += fmt::format("{} {}", reason.count, reason.flag);
  }
  return text;
}

namespace {

// One way to plan every chunk of a job: the plan of each chunk and whether parameters
// stay gathered across microbatches.
struct ChunkPlanning {
  ChunkPlanner planner;
  bool keep_gathered = false;
};

ChunkPlanning fsdp2_planning(const JobSpec& job, KeepGatheredChoice choice) {
  return {[](const Workload& chunk) { return fsdp2_plan(chunk); },
          baseline_keep_gathered(choice, job)};
}

// Re-gathering every microbatch holds no unsharded parameters or gradients across
// microbatches: the per-stage tuner's least-memory choice for every chunk, where `choice`
// allows it (re-gathering comes first in allowed_keep_gathered).
ChunkPlanning least_memory_planning(const JobSpec& job, KeepGatheredChoice choice) {
  return {
      [](const Workload& chunk) { return min_memory_plan(static_cast<int>(chunk.units.size())); },
      allowed_keep_gathered(choice, job).front()};
}

// What simulate_pipelined_plans does with each planning (the first always; the second only
// when `second_if_over` and the first is simulated over the limit), without building
// the whole model (the sweep's hot spot was allocating the Ops of 126 blocks per
// configuration): every transformer block of a model is the same unit (same parameters,
// ops and activations; only names differ), so a chunk is fixed by whether it holds the
// embedding, how many blocks, and whether it holds the output. The units are taken from
// the workload of a model with as many layers as the largest chunk, each distinct chunk
// lowered (Lowerer: compute costs once for both plannings, no task names) and simulated
// once per planning (tested against simulate_pipelined_job).
// With `first_at_any_timing` the first planning fits when its stages do at any timing
// (pipeline_any_timing); the second, a test of whether any plan could fit, is judged at
// the predicted timing (a lower bound of its bound).
std::vector<SweepCandidate> evaluate_plannings(const ModelSpec& model, const JobSpec& job,
                                               const CostModel& costs,
                                               std::int64_t memory_limit_bytes,
                                               const ChunkPlanning& first,
                                               const ChunkPlanning* second_if_over,
                                               bool first_at_any_timing = false) {
  std::vector<SweepCandidate> out(1);
  out.front().job = job;
  const std::int64_t chunk_count = job.pp * job.virtual_stages;
  const std::int64_t layers = model.n_layers;
  const std::vector<std::int64_t> chunk_blocks = pipeline_chunk_blocks(job, layers);
  const std::int64_t largest = *std::max_element(chunk_blocks.begin(), chunk_blocks.end());
  ModelSpec mini_model = model;
  mini_model.n_layers = largest;
  const Workload mini = build_workload(mini_model, job);
  const Unit& embedding = mini.units.front();
  const Unit& block = mini.units[1];
  const Unit& output = mini.units.back();
  FSDPTUNE_CHECK(embedding.kind == UnitKind::kEmbedding && block.kind == UnitKind::kBlock &&
                     output.kind == UnitKind::kOutput,
                 "evaluate_job: embedding, blocks, output");
  // The sharded state alone (16 bytes per shard element, split over the stages) already
  // decides some meshes without simulating them.
  const std::int64_t shard_elements =
      embedding.shard_numel() + layers * block.shard_numel() + output.shard_numel();
  const std::int64_t state_bytes = 16 * shard_elements / job.pp;
  if (state_bytes > memory_limit_bytes) {
    out.front().rejected = fmt::format("sharded state {} > limit {}", format_bytes(state_bytes),
                                       format_bytes(memory_limit_bytes));
    out.front().rejection = SweepRejection::kShardedState;
    return out;
  }
  // The distinct chunks: (holds the embedding, blocks, holds the output), each with its
  // workload and lowerer; chunk c of the job is distinct chunk chunk_kind[c].
  struct Distinct {
    std::tuple<bool, std::int64_t, bool> key;
    Workload workload;
    std::unique_ptr<Lowerer> lowerer;
  };
  std::vector<Distinct> distinct;
  distinct.reserve(static_cast<std::size_t>(chunk_count));  // lowerers refer to the workloads
  std::vector<std::size_t> chunk_kind;
  for (std::int64_t c = 0; c < chunk_count; ++c) {
    const std::int64_t blocks = chunk_blocks[static_cast<std::size_t>(c)];  // pipeline_chunks'
    const auto key = std::make_tuple(c == 0, blocks, c == chunk_count - 1);
    const auto seen = std::find_if(distinct.begin(), distinct.end(),
                                   [&](const Distinct& entry) { return entry.key == key; });
    if (seen != distinct.end()) {
      chunk_kind.push_back(static_cast<std::size_t>(seen - distinct.begin()));
      continue;
    }
    std::vector<int> units;
    if (c == 0) units.push_back(0);
    for (std::int64_t b = 1; b <= blocks; ++b) units.push_back(static_cast<int>(b));
    if (c == chunk_count - 1) units.push_back(static_cast<int>(mini.units.size()) - 1);
    chunk_kind.push_back(distinct.size());
    distinct.push_back({key, chunk_workload(mini, units), nullptr});
    distinct.back().lowerer = std::make_unique<Lowerer>(distinct.back().workload, costs);
  }
  // The whole model's FLOPs: the embedding, `layers` blocks and the output.
  const auto unit_flops = [](const Unit& unit) {
    double flops = 0;
    for (const Op& op : unit.forward_ops) flops += op.flops;
    for (const Op& op : unit.backward_ops) flops += op.flops;
    return flops;
  };
  const double model_flops =
      (unit_flops(embedding) + static_cast<double>(layers) * unit_flops(block) +
       unit_flops(output)) *
      static_cast<double>(job.microbatches * job.pipeline_steps);
  PipelineSpec sends;
  set_pipeline_sends(mini, costs, sends);
  SimOptions options;
  options.record_timeline = false;
  Program program;
  SimWorkspace workspace;
  const auto evaluate = [&](const ChunkPlanning& planning, SweepCandidate& candidate,
                            bool at_any_timing) {
    PipelineSimulation sim;
    sim.spec = pipeline_spec_of(job);
    std::vector<ChunkTimes> times;
    std::vector<ChunkMemory> any_timing;
    for (Distinct& chunk : distinct) {
      Plan plan = planning.planner(chunk.workload);
      set_keep_gathered(plan, job, planning.keep_gathered);
      chunk.lowerer->lower_for_simulation(plan, program);
      const SimResult result = simulate(program, options, workspace);
      times.push_back(chunk_times(chunk.workload, program, result, planning.keep_gathered,
                                  chunk.lowerer->compute()));
      if (at_any_timing) {
        any_timing.push_back(
            chunk_any_timing_memory(chunk.workload.job, program, times.back().accumulates));
      }
    }
    for (const std::size_t kind : chunk_kind) sim.spec.chunks.push_back(times[kind]);
    sim.spec.send_s = sends.send_s;
    sim.spec.link_send_s = sends.link_send_s;
    sim.result = simulate_pipeline(sim.spec);
    fill_pipeline_throughput(job, static_cast<double>(mini.tokens_per_step()), model_flops,
                             costs.hardware(), sim);
    candidate.step_time_s = sim.result.step_time_s;
    candidate.tokens_per_s_per_gpu = sim.tokens_per_s_per_gpu;
    candidate.mfu = sim.mfu;
    candidate.bubble_fraction = sim.result.bubble_fraction;
    for (const StageResult& stage : sim.result.stages) {
      candidate.peak_reserved_bytes =
          std::max(candidate.peak_reserved_bytes, stage.peak_reserved_bytes);
      candidate.peak_allocated_bytes =
          std::max(candidate.peak_allocated_bytes, stage.peak_allocated_bytes);
    }
    candidate.fits = candidate.peak_reserved_bytes <= memory_limit_bytes;
    if (!candidate.fits) {
      candidate.rejected =
          fmt::format("peak reserved {} > limit {} by {}",
                      format_bytes(candidate.peak_reserved_bytes), format_bytes(memory_limit_bytes),
                      format_bytes(candidate.peak_reserved_bytes - memory_limit_bytes));
      candidate.rejection = SweepRejection::kPeak;
    }
    if (at_any_timing) {
      std::vector<ChunkMemory> by_chunk;
      for (const std::size_t kind : chunk_kind) by_chunk.push_back(any_timing[kind]);
      candidate.any_timing_reserved_bytes = largest_any_timing_reserved_bytes(
          pipeline_any_timing(sim.spec, sim.result.stages, by_chunk));
      if (candidate.fits && candidate.any_timing_reserved_bytes > memory_limit_bytes) {
        candidate.fits = false;
        candidate.rejected = fmt::format(
            "peak reserved at any timing {} > limit {} by {}",
            format_bytes(candidate.any_timing_reserved_bytes), format_bytes(memory_limit_bytes),
            format_bytes(candidate.any_timing_reserved_bytes - memory_limit_bytes));
        candidate.rejection = SweepRejection::kPeakAtAnyTiming;
      }
    }
  };
  evaluate(first, out.front(), first_at_any_timing);
  if (second_if_over != nullptr && !out.front().fits) {
    out.emplace_back();
    out.back().job = job;
    evaluate(*second_if_over, out.back(), false);
  }
  return out;
}

}  // namespace

SweepCandidate evaluate_job(const ModelSpec& model, const JobSpec& job, const CostModel& costs,
                            std::int64_t memory_limit_bytes, KeepGatheredChoice keep_gathered,
                            bool fit_at_any_timing) {
  SweepCandidate candidate =
      evaluate_plannings(model, job, costs, memory_limit_bytes, fsdp2_planning(job, keep_gathered),
                         nullptr, fit_at_any_timing)
          .front();
  candidate.fsdp2_step_time_s = candidate.step_time_s;
  return candidate;
}

ConfigurationTuning tune_configuration(const Workload& workload, const CostModel& costs,
                                       const TunerOptions& options) {
  ConfigurationTuning tuning;
  if (is_pipelined(workload.job)) {
    tuning.pipeline = tune_pipelined_job(workload, costs, options);
  } else {
    tuning.single = Tuner(options).tune(workload, costs);
  }
  return tuning;
}

namespace {

// Runs body(i) for i in [0, count) on `threads` threads (the calling one included), each
// taking the next index: results go to slot i, so they do not depend on the thread count.
template <typename Body>
void for_each_index(std::size_t count, int threads, const Body& body) {
  std::atomic<std::size_t> next{0};
  const auto worker = [&](int) {
    for (std::size_t i = next++; i < count; i = next++) body(i);
  };
  // No more threads than configurations.
  run_workers(static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(std::max(threads, 1)),
                                                     std::max<std::size_t>(count, 1))),
              worker);
}

// Ranking order: more tokens/s/GPU first, ties in enumeration order.
bool ranks_before(double tokens_a, std::size_t index_a, double tokens_b, std::size_t index_b) {
  if (tokens_a != tokens_b) return tokens_a > tokens_b;
  return index_a < index_b;
}

}  // namespace

TunerOptions sweep_tuner_options(const SweepOptions& options, std::int64_t memory_limit_bytes,
                                 int threads) {
  TunerOptions tuner_options;
  tuner_options.memory_limit_bytes = memory_limit_bytes;
  tuner_options.time_budget_s = 0;
  tuner_options.max_evaluations = options.tune_evaluations;
  tuner_options.step_time_tolerance = options.step_time_tolerance;
  tuner_options.keep_gathered = options.keep_gathered;
  tuner_options.fit_at_any_timing = options.fit_at_any_timing;
  tuner_options.fsdp2_exact = options.fsdp2_exact;
  tuner_options.simplefsdp_exact = options.simplefsdp_exact;
  tuner_options.threads = threads;
  return tuner_options;
}

SweepResult sweep(const ModelSpec& model, const CostModel& costs, const SweepOptions& options) {
  // Before anything runs: each search would refuse it, from a worker thread (found by
  // review: a library caller's eager sweep under simplefsdp_exact).
  TunerOptions exactness;
  exactness.fsdp2_exact = options.fsdp2_exact;
  exactness.simplefsdp_exact = options.simplefsdp_exact;
  check_exactness(exactness, options.execution, "sweep");
  SweepResult result;
  result.memory_limit_bytes = options.memory_limit_bytes > 0
                                  ? options.memory_limit_bytes
                                  : default_memory_limit_bytes(costs.hardware());
  const std::vector<JobSpec> jobs = sweep_jobs(model, costs.hardware(), options);
  const std::int64_t job_count = static_cast<std::int64_t>(jobs.size());
  std::mutex progress_mutex;
  std::int64_t done = 0;
  const auto report = [&](bool tuning, std::int64_t total) {
    if (!options.progress) return;
    std::lock_guard<std::mutex> lock(progress_mutex);
    options.progress(SweepProgress{tuning, ++done, total});
  };

  // 1. Every configuration with fsdp2 per chunk. Without tune_top, those simulated over
  //    the limit are simulated again with the least-memory plans of the tuners' space
  //    (min_memory_plan per chunk, parameters re-gathered every microbatch): the tuned
  //    plans can be smaller than fsdp2's (one stream for all collectives, the last block
  //    resharded, no gradients held across microbatches), so such a configuration is
  //    tuned when those fit the tuners' limit. Where even they do not, no plan of the
  //    tuners' space does (min_memory_plan is its least-memory plan): tuning cannot help.
  //    The sharded state alone does not depend on the plan.
  std::vector<SweepCandidate> candidates(jobs.size());
  std::vector<char> could_fit(jobs.size(), 0);
  for_each_index(jobs.size(), options.threads, [&](std::size_t i) {
    const ChunkPlanning least_memory = least_memory_planning(jobs[i], options.keep_gathered);
    std::vector<SweepCandidate> evaluated = evaluate_plannings(
        model, jobs[i], costs, result.memory_limit_bytes,
        fsdp2_planning(jobs[i], options.keep_gathered),
        options.tune_top < 0 ? &least_memory : nullptr, options.fit_at_any_timing);
    candidates[i] = std::move(evaluated.front());
    candidates[i].fsdp2_step_time_s = candidates[i].step_time_s;
    if (evaluated.size() > 1) {
      could_fit[i] = evaluated[1].fits;
      if (!could_fit[i]) {
        candidates[i].rejected += fmt::format("; least-memory plans: peak reserved {} > {}",
                                              format_bytes(evaluated[1].peak_reserved_bytes),
                                              format_bytes(result.memory_limit_bytes));
      }
    }
    report(false, job_count);
  });

  // 2. Which to tune: with tune_top K, the K best that fit; otherwise every one that fits
  //    and every one over the limit whose least-memory plans could fit.
  std::vector<std::size_t> to_tune;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    if (candidates[i].fits || could_fit[i]) to_tune.push_back(i);
  }
  if (options.tune_top >= 0) {
    std::stable_sort(to_tune.begin(), to_tune.end(), [&](std::size_t a, std::size_t b) {
      return ranks_before(candidates[a].tokens_per_s_per_gpu, a, candidates[b].tokens_per_s_per_gpu,
                          b);
    });
    to_tune.resize(
        std::min<std::size_t>(to_tune.size(), static_cast<std::size_t>(options.tune_top)));
  }

  // 3. Tune them, one configuration per thread (each search single-threaded, with a
  //    budget of evaluations and no clock: the same result whatever the thread count).
  const TunerOptions tuner_options =
      sweep_tuner_options(options, result.memory_limit_bytes, /*threads=*/1);
  std::vector<std::int64_t> plans_evaluated(to_tune.size(), 0);
  // The best tuned configuration so far (ranking order) and its search: kept for one
  // configuration only (a pipelined search holds every chunk's Programs).
  std::mutex best_mutex;
  std::optional<std::size_t> best_index;
  done = 0;
  for_each_index(to_tune.size(), options.threads, [&](std::size_t k) {
    const std::size_t i = to_tune[k];
    SweepCandidate& candidate = candidates[i];
    const Workload workload = build_workload(model, jobs[i]);
    ConfigurationTuning tuning = tune_configuration(workload, costs, tuner_options);
    SweepCandidate tuned = candidate;
    bool tuner_fits = false;
    if (tuning.pipeline) {
      const PipelineTuning& pipeline = *tuning.pipeline;
      plans_evaluated[k] = pipeline.plans_evaluated;
      tuner_fits = pipeline.fits;
      tuned.step_time_s = pipeline.best.result.step_time_s;
      tuned.tokens_per_s_per_gpu = pipeline.best.tokens_per_s_per_gpu;
      tuned.mfu = pipeline.best.mfu;
      tuned.bubble_fraction = pipeline.best.result.bubble_fraction;
      tuned.peak_reserved_bytes = 0;
      tuned.peak_allocated_bytes = 0;
      for (const StageResult& stage : pipeline.best.result.stages) {
        tuned.peak_reserved_bytes = std::max(tuned.peak_reserved_bytes, stage.peak_reserved_bytes);
        tuned.peak_allocated_bytes =
            std::max(tuned.peak_allocated_bytes, stage.peak_allocated_bytes);
      }
      tuned.derived_from = pipeline.derived_from;
      if (options.fit_at_any_timing) {
        tuned.any_timing_reserved_bytes =
            largest_any_timing_reserved_bytes(pipeline.best_any_timing);
      }
    } else {
      const TunerResult& single = *tuning.single;
      plans_evaluated[k] = single.plans_evaluated;
      tuner_fits = single.fits;
      tuned.step_time_s = single.best.step_time_s;
      tuned.tokens_per_s_per_gpu = single.best.tokens_per_s_per_gpu;
      tuned.mfu = single.best.mfu;
      tuned.bubble_fraction = 0;
      tuned.peak_reserved_bytes = single.best.peak_reserved_bytes;
      tuned.peak_allocated_bytes = single.best.peak_allocated_bytes;
      tuned.derived_from = single.derived_from;
      tuned.any_timing_reserved_bytes = single.best_any_timing_reserved_bytes;
    }
    // The tuned figures replace fsdp2's when they fit and are not slower (the tuners keep
    // fsdp2 among their candidates and judge fit as the sweep does, so a slower tuned
    // plan would be a bug of theirs; the row then keeps its fsdp2 figures). Under
    // simplefsdp_exact fsdp2 is no candidate: a slower SimpleFSDP plan replaces it (found by
    // review: the row showed fsdp2's figures).
    const bool fits = tuner_fits && (options.fit_at_any_timing
                                         ? tuned.any_timing_reserved_bytes
                                         : tuned.peak_reserved_bytes) <= result.memory_limit_bytes;
    if (!fits || (candidate.fits && tuned.step_time_s > candidate.step_time_s &&
                  !options.simplefsdp_exact)) {
      if (!candidate.fits) {
        // Under --fit any-timing the tuned plan's bound where it has one (0: not computed,
        // its predicted peak being over already), and the row counted as one whose search
        // found no plan within the limit at every timing (the search ranks plans over the
        // limit by mixed measures: its pick may be over as predicted where another plan
        // is not).
        const bool bounded = options.fit_at_any_timing && tuned.any_timing_reserved_bytes > 0;
        candidate.rejected += fmt::format(
            "; tuned: peak reserved {}, allocated {}{}", format_bytes(tuned.peak_reserved_bytes),
            format_bytes(tuned.peak_allocated_bytes),
            bounded ? fmt::format(", reserved at any timing {}",
                                  format_bytes(tuned.any_timing_reserved_bytes))
                    : "");
        if (options.fit_at_any_timing) candidate.rejection = SweepRejection::kPeakAtAnyTiming;
      }
      report(true, static_cast<std::int64_t>(to_tune.size()));
      return;
    }
    tuned.fits = true;
    tuned.rejected.clear();
    tuned.rejection = SweepRejection::kNone;
    tuned.tuned = true;
    candidate = std::move(tuned);
    {
      std::lock_guard<std::mutex> lock(best_mutex);
      if (!best_index || ranks_before(candidate.tokens_per_s_per_gpu, i,
                                      candidates[*best_index].tokens_per_s_per_gpu, *best_index)) {
        best_index = i;
        result.best_tuning = std::move(tuning);
      }
    }
    report(true, static_cast<std::int64_t>(to_tune.size()));
  });
  result.tuned = static_cast<std::int64_t>(to_tune.size());
  for (const std::int64_t count : plans_evaluated) result.plans_evaluated += count;

  // 4. Rank by the figures, tuned where tuned. Under simplefsdp_exact only tuned rows: the
  //    others' figures are fsdp2's (found by review: with --tune-top K an untuned row ranked
  //    above tuned ones, and could win).
  if (options.simplefsdp_exact) {
    for (SweepCandidate& candidate : candidates) {
      if (!candidate.fits || candidate.tuned) continue;
      candidate.fits = false;
      candidate.rejection = SweepRejection::kNotSimpleFsdp;
      candidate.rejected =
          "no plan SimpleFSDP runs within the limit: not tuned (--tune-top), or its search "
          "found none (its figures, fsdp2's, are no SimpleFSDP plan's)";
    }
  }
  std::vector<std::size_t> order(candidates.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return ranks_before(candidates[a].tokens_per_s_per_gpu, a, candidates[b].tokens_per_s_per_gpu,
                        b);
  });
  for (const std::size_t i : order) {
    if (candidates[i].fits) result.ranked.push_back(std::move(candidates[i]));
  }
  for (SweepCandidate& candidate : candidates) {
    if (!candidate.fits) result.rejected.push_back(std::move(candidate));  // enumeration order
  }
  if (!result.ranked.empty() && best_index && !result.ranked.front().tuned) {
    result.best_tuning.reset();  // the winner kept fsdp2 figures
  }
  return result;
}

}  // namespace fsdptune
