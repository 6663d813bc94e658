// The configuration sweep (docs/parallelism.md "Sweep").
#include "fsdptune/sweep.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <mutex>
#include <thread>
#include <tuple>

#include <fmt/format.h>

#include "fsdptune/error.hpp"
#include "fsdptune/plans.hpp"
#include "fsdptune/program.hpp"
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
  const bool digits =
      !rest.empty() && rest.size() <= 15 &&
      std::all_of(rest.begin(), rest.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
  if (!digits) {
    throw_bad_input("--global-batch",
                    fmt::format("'{}' is not a count of sequences (e.g. 1024) or of tokens "
                                "(e.g. 8388608tok, 8Mtok)",
                                text));
  }
  const std::int64_t value = std::stoll(rest) * scale;
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
                                const SweepOptions& options, std::int64_t* skipped) {
  std::vector<JobSpec> jobs;
  std::int64_t skip = 0;
  std::vector<bool> float8_modes = {false};
  if (options.try_float8 && hardware.peak_fp8_flops_per_s > 0) float8_modes.push_back(true);
  std::vector<bool> async_modes = {false};
  if (options.try_async_tp) async_modes.push_back(true);
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
        if (options.global_batch_sequences % dp != 0) {
          ++skip;
          continue;
        }
        const std::int64_t per_rank = options.global_batch_sequences / dp;
        for (std::int64_t batch = 1; batch <= std::min(per_rank, options.max_local_batch);
             batch *= 2) {
          if (per_rank % batch != 0) continue;
          const std::int64_t microbatches = per_rank / batch;
          // Without PP a step is one batch (no gradient accumulation); with PP enough
          // microbatches to fill the pipeline.
          if (pp == 1 && microbatches != 1) continue;
          if (pp > 1 && microbatches < pp) continue;
          std::vector<std::pair<PipelineSchedule, std::int64_t>> schedules;
          if (pp == 1) {
            schedules.push_back({PipelineSchedule::k1F1B, 1});
          } else {
            schedules.push_back({PipelineSchedule::k1F1B, 1});
            if (microbatches % pp == 0 && model.n_layers >= 2 * pp) {
              schedules.push_back({PipelineSchedule::kInterleaved1F1B, 2});
            }
          }
          for (const auto& [schedule, virtual_stages] : schedules) {
            for (ActivationCheckpointing ac : options.ac_modes) {
              for (bool float8 : float8_modes) {
                for (bool async_tp : async_modes) {
                  if (async_tp && tp == 1) continue;
                  JobSpec job;
                  job.gpus = options.gpus;
                  job.gpus_per_node = options.gpus_per_node;
                  job.tp = tp;
                  job.pp = pp;
                  job.dp_replicate = replicate;
                  job.local_batch = batch;
                  job.microbatches = microbatches;
                  job.pp_schedule = schedule;
                  job.virtual_stages = virtual_stages;
                  job.seq_len = options.seq_len;
                  job.ac = ac;
                  job.param_dtype = options.param_dtype;
                  job.reduce_dtype = options.reduce_dtype;
                  job.float8 = float8;
                  job.async_tp = async_tp;
                  try {
                    job = normalize_job(model, job);
                    validate_pipeline(job);
                  } catch (const Error&) {
                    ++skip;  // e.g. tp does not divide the kv heads
                    continue;
                  }
                  jobs.push_back(job);
                }
              }
            }
          }
        }
      }
    }
  }
  if (skipped != nullptr) *skipped = skip;
  return jobs;
}

SweepCandidate evaluate_job(const ModelSpec& model, const JobSpec& job, const CostModel& costs,
                            std::int64_t memory_limit_bytes) {
  SweepCandidate candidate;
  candidate.job = job;
  // What simulate_pipelined_job does with fsdp2 per chunk, without building the whole
  // model (the sweep's hot spot was allocating the Ops of 126 blocks per configuration):
  // every transformer block of a model is the same unit (same parameters, ops and
  // activations; only names differ), so a chunk is fixed by whether it holds the
  // embedding, how many blocks, and whether it holds the output. The units are taken
  // from the workload of a model with as many layers as the largest chunk, each distinct
  // chunk lowered and simulated once (tested against simulate_pipelined_job).
  const std::int64_t chunk_count = job.pp * job.virtual_stages;
  const std::int64_t layers = model.n_layers;
  const std::int64_t largest = layers / chunk_count + (layers % chunk_count != 0 ? 1 : 0);
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
    candidate.rejected = fmt::format("sharded state {} > limit {}", format_bytes(state_bytes),
                                     format_bytes(memory_limit_bytes));
    return candidate;
  }
  PipelineSimulation sim;
  sim.spec.stages = static_cast<int>(job.pp);
  sim.spec.virtual_stages = static_cast<int>(job.virtual_stages);
  sim.spec.microbatches = static_cast<int>(job.microbatches);
  sim.spec.schedule = job.pp_schedule;
  const bool keep_gathered = default_keep_gathered(job);
  SimOptions options;
  options.record_timeline = false;
  // (holds the embedding, blocks, holds the output) -> its times.
  std::vector<std::pair<std::tuple<bool, std::int64_t, bool>, ChunkTimes>> distinct;
  for (std::int64_t c = 0; c < chunk_count; ++c) {
    // pipeline_chunks' split: blocks as even as possible, earlier chunks the remainder.
    const std::int64_t blocks = layers / chunk_count + (c < layers % chunk_count ? 1 : 0);
    const auto key = std::make_tuple(c == 0, blocks, c == chunk_count - 1);
    const auto seen = std::find_if(distinct.begin(), distinct.end(),
                                   [&](const auto& entry) { return entry.first == key; });
    if (seen != distinct.end()) {
      sim.spec.chunks.push_back(seen->second);
      continue;
    }
    std::vector<int> units;
    if (c == 0) units.push_back(0);
    for (std::int64_t b = 1; b <= blocks; ++b) units.push_back(static_cast<int>(b));
    if (c == chunk_count - 1) units.push_back(static_cast<int>(mini.units.size()) - 1);
    const Workload chunk = chunk_workload(mini, units);
    Plan plan = fsdp2_plan(chunk);
    if (keep_gathered) {
      std::fill(plan.reshard_after_forward.begin(), plan.reshard_after_forward.end(), false);
    }
    const Program program = lower(chunk, plan, costs);
    const SimResult result = simulate(program, options);
    sim.spec.chunks.push_back(chunk_times(chunk, program, result, keep_gathered, costs));
    distinct.emplace_back(key, sim.spec.chunks.back());
  }
  sim.spec.send_s = pipeline_send_seconds(mini, costs);
  sim.result = simulate_pipeline(sim.spec);
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
      static_cast<double>(job.microbatches);
  fill_pipeline_throughput(job, static_cast<double>(mini.tokens_per_step()), model_flops,
                           costs.hardware(), sim);
  candidate.step_time_s = sim.result.step_time_s;
  candidate.tokens_per_s_per_gpu = sim.tokens_per_s_per_gpu;
  candidate.mfu = sim.mfu;
  candidate.bubble_fraction = sim.result.bubble_fraction;
  for (const StageResult& stage : sim.result.stages) {
    candidate.peak_reserved_bytes =
        std::max(candidate.peak_reserved_bytes, stage.peak_reserved_bytes);
  }
  candidate.fits = candidate.peak_reserved_bytes <= memory_limit_bytes;
  if (!candidate.fits) {
    candidate.rejected =
        fmt::format("peak reserved {} > limit {}", format_bytes(candidate.peak_reserved_bytes),
                    format_bytes(memory_limit_bytes));
  }
  return candidate;
}

SweepResult sweep(const ModelSpec& model, const CostModel& costs, const SweepOptions& options) {
  SweepResult result;
  result.memory_limit_bytes = options.memory_limit_bytes > 0
                                  ? options.memory_limit_bytes
                                  : default_memory_limit_bytes(costs.hardware());
  const std::vector<JobSpec> jobs = sweep_jobs(model, costs.hardware(), options);
  std::vector<SweepCandidate> candidates(jobs.size());
  std::atomic<std::size_t> next{0};
  std::mutex progress_mutex;
  std::int64_t done = 0;
  auto worker = [&] {
    for (std::size_t i = next++; i < jobs.size(); i = next++) {
      candidates[i] = evaluate_job(model, jobs[i], costs, result.memory_limit_bytes);
      if (options.progress) {
        std::lock_guard<std::mutex> lock(progress_mutex);
        options.progress(++done, static_cast<std::int64_t>(jobs.size()));
      }
    }
  };
  const int threads = std::max(1, options.threads);
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& thread : pool) thread.join();

  for (SweepCandidate& candidate : candidates) {
    (candidate.fits ? result.ranked : result.rejected).push_back(std::move(candidate));
  }
  std::stable_sort(result.ranked.begin(), result.ranked.end(),
                   [](const SweepCandidate& a, const SweepCandidate& b) {
                     return a.tokens_per_s_per_gpu > b.tokens_per_s_per_gpu;
                   });
  return result;
}

}  // namespace fsdptune
