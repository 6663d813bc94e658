// The chunks of a pipelined job (docs/parallelism.md "Pipeline parallelism"): which units
// each chunk owns and each chunk as a workload of its own. Pure workload functions, in the
// core so that the schedule reader can check the per-chunk Programs of a pipeline schedule
// (and validate_pipeline, the flags' check; last_forward_task, which splits a chunk's
// Program into its pipeline phases).
#include <algorithm>

#include <fmt/format.h>

#include "fsdptune/error.hpp"
#include "fsdptune/pipeline.hpp"

namespace fsdptune {

void validate_pipeline(const JobSpec& job, const std::string& source) {
  const auto at = [&](const char* flag) { return job_where(flag, source); };
  if (job.microbatches < 1) throw_bad_input(at("--microbatches"), "must be >= 1");
  if (job.virtual_stages < 1) throw_bad_input(at("--virtual-stages"), "must be >= 1");
  if (job.pp_schedule == PipelineSchedule::kInterleaved1F1B) {
    if (job.virtual_stages < 2) {
      throw_bad_input(at("--virtual-stages"),
                      "interleaved-1f1b needs at least 2 virtual stages per rank");
    }
    // Found by QA: a torchtitan config of 3 microbatches on pp 2, which PyTorch runs, was
    // refused when M had to be a multiple of pp.
    if (!interleaved_rounds_fill(job.pp, job.microbatches)) {
      const std::int64_t rounds = std::max<std::int64_t>(1, job.microbatches / job.pp);
      throw_bad_input(at("--microbatches"),
                      fmt::format("interleaved-1f1b runs max(1, microbatches / pp) = {} rounds "
                                  "of equal size, which {} microbatches do not fill, as "
                                  "PyTorch's ScheduleInterleaved1F1B refuses them",
                                  rounds, job.microbatches),
                      // Not "a multiple of the rounds": they change with the count (review:
                      // 10 on pp 3 makes 3 rounds).
                      // Fewer than 2 pp is one round (found by QA: the hint left out 3 on
                      // pp 2, which runs).
                      fmt::format("a multiple of pp ({}), or fewer than 2 x pp ({}: one round)",
                                  job.pp, 2 * job.pp));
    }
  } else if (job.virtual_stages != 1) {
    throw_bad_input(at("--virtual-stages"),
                    fmt::format("{} takes one stage per rank; use --pp-schedule "
                                "interleaved-1f1b for virtual stages",
                                to_string(job.pp_schedule)));
  }
}

bool interleaved_rounds_fill(std::int64_t pp, std::int64_t microbatches) {
  // M a multiple of the rounds: M < pp, or M % pp == 0, or e.g. 3 on pp 2.
  return microbatches % std::max<std::int64_t>(1, microbatches / pp) == 0;
}

bool is_pipelined(const JobSpec& job) { return job.pp > 1 || job.microbatches > 1; }

std::int64_t pipeline_send_bytes(const Workload& workload) {
  const JobSpec& job = workload.job;
  // One microbatch's activation between stages: with sequence parallelism each TP rank
  // holds and sends its b*s/(cp*tp) tokens of d in the activation dtype.
  return job.local_batch * job.seq_len / job.cp / job.tp * workload.model.dim *
         bytes_per_element(job.param_dtype);
}

bool default_keep_gathered(const JobSpec& job) { return job.pp > 1; }

void set_keep_gathered(Plan& plan, const JobSpec& job, bool keep_gathered) {
  if (keep_gathered) {
    std::fill(plan.reshard_after_forward.begin(), plan.reshard_after_forward.end(), false);
  }
  plan.reduce_after_backward = keep_gathered && job.pp > 1;
}

bool chunk_accumulates(const JobSpec& job, bool keep_gathered) {
  return keep_gathered && (job.microbatches > 1 || job.pp > 1);
}

std::string to_string(KeepGatheredChoice choice) {
  switch (choice) {
    case KeepGatheredChoice::kAny:
      return "any";
    case KeepGatheredChoice::kKept:
      return "yes";
    case KeepGatheredChoice::kRegathered:
      return "no";
    case KeepGatheredChoice::kTorchtitan:
      return "torchtitan";
  }
  return "any";
}

std::vector<bool> allowed_keep_gathered(KeepGatheredChoice choice, const JobSpec& job) {
  // One microbatch on one stage: nothing to keep across, the plain FSDP step.
  if (!is_pipelined(job)) return {default_keep_gathered(job)};
  switch (choice) {
    case KeepGatheredChoice::kKept:
      return {true};
    case KeepGatheredChoice::kRegathered:
      return {false};
    case KeepGatheredChoice::kTorchtitan:
      return {default_keep_gathered(job)};
    case KeepGatheredChoice::kAny:
      break;
  }
  return {false, true};
}

bool baseline_keep_gathered(KeepGatheredChoice choice, const JobSpec& job) {
  const std::vector<bool> allowed = allowed_keep_gathered(choice, job);
  const bool preferred = default_keep_gathered(job);
  return std::find(allowed.begin(), allowed.end(), preferred) != allowed.end() ? preferred
                                                                               : allowed.front();
}

int last_forward_task(const Program& program) {
  int last_forward = -1;
  for (const Task& task : program.tasks) {
    if (task.kind == TaskKind::kForward) last_forward = task.id;
  }
  return last_forward;
}

std::vector<std::int64_t> pipeline_chunk_blocks(const JobSpec& job, std::int64_t layers) {
  const std::int64_t chunks = job.pp * job.virtual_stages;
  if (!job.pp_chunk_blocks.empty()) {
    FSDPTUNE_CHECK(static_cast<std::int64_t>(job.pp_chunk_blocks.size()) == chunks,
                   "pipeline_chunk_blocks: a block count per chunk");
    return job.pp_chunk_blocks;
  }
  if (chunks == 1) return {layers};
  // torchtitan's generate_llm_fqn_per_model_part: the embedding counts as `first` layers
  // and norm+output as `last`; the effective layers split evenly, the first chunks one
  // more each for the remainder; the first and last chunks give up their module's share.
  const std::int64_t first = job.pp_first_stage_less_layers;
  const std::int64_t last = job.pp_last_stage_less_layers;
  const std::int64_t effective = layers + first + last;
  FSDPTUNE_CHECK(effective >= chunks && first <= effective / chunks && last <= effective / chunks,
                 "pipeline_chunk_blocks: a split normalize_job refuses");
  std::vector<std::int64_t> blocks(static_cast<std::size_t>(chunks));
  for (std::int64_t c = 0; c < chunks; ++c) {
    std::int64_t count = effective / chunks + (c < effective % chunks ? 1 : 0);
    if (c == 0) count -= first;
    if (c == chunks - 1) count -= last;
    blocks[static_cast<std::size_t>(c)] = count;
  }
  return blocks;
}

std::vector<JobSpec> pipeline_split_jobs(const ModelSpec& model, const JobSpec& job,
                                         std::int64_t max_weight) {
  FSDPTUNE_CHECK(max_weight >= 0 && max_weight <= kMaxTriedSplitWeight,
                 "pipeline_split_jobs: weights 0..kMaxTriedSplitWeight");
  std::vector<JobSpec> jobs = {job};
  std::vector<std::vector<std::int64_t>> seen = {pipeline_chunk_blocks(job, model.n_layers)};
  for (std::int64_t first = 0; first <= max_weight; ++first) {
    for (std::int64_t last = 0; last <= max_weight; ++last) {
      JobSpec other = job;
      other.pp_chunk_blocks.clear();
      other.pp_first_stage_less_layers = first;
      other.pp_last_stage_less_layers = last;
      try {
        other = normalize_job(model, other);
      } catch (const Error&) {
        continue;  // a chunk without an effective layer, or a weight above its share
      }
      std::vector<std::int64_t> blocks = pipeline_chunk_blocks(other, model.n_layers);
      if (std::find(seen.begin(), seen.end(), blocks) != seen.end()) continue;
      seen.push_back(std::move(blocks));
      jobs.push_back(other);
    }
  }
  return jobs;
}

std::vector<std::vector<int>> pipeline_chunks(const Workload& workload) {
  std::vector<int> blocks;
  int embedding = -1, output = -1;
  for (const Unit& unit : workload.units) {
    if (unit.kind == UnitKind::kBlock) blocks.push_back(unit.index);
    if (unit.kind == UnitKind::kEmbedding) embedding = unit.index;
    if (unit.kind == UnitKind::kOutput) output = unit.index;
  }
  const std::vector<std::int64_t> counts =
      pipeline_chunk_blocks(workload.job, static_cast<std::int64_t>(blocks.size()));
  const std::size_t C = counts.size();
  std::vector<std::vector<int>> chunks(C);
  std::size_t next = 0;
  for (std::size_t c = 0; c < C; ++c) {
    if (c == 0 && embedding >= 0) chunks[c].push_back(embedding);
    for (std::int64_t i = 0; i < counts[c]; ++i) chunks[c].push_back(blocks[next++]);
    if (c == C - 1 && output >= 0) chunks[c].push_back(output);
  }
  FSDPTUNE_CHECK(next == blocks.size(), "pipeline_chunks: every block in one chunk");
  return chunks;
}

std::string unit_range(const Workload& workload, const std::vector<int>& units) {
  const std::string& first = workload.units[static_cast<std::size_t>(units.front())].name;
  if (units.size() == 1) return first;
  return first + ".." + workload.units[static_cast<std::size_t>(units.back())].name;
}

std::string rank_units(const Workload& workload, const std::vector<std::vector<int>>& chunks,
                       int rank) {
  const auto pp = static_cast<std::size_t>(workload.job.pp);
  std::string text;
  for (auto c = static_cast<std::size_t>(rank); c < chunks.size(); c += pp) {
    if (!text.empty()) text += ", ";
    text += unit_range(workload, chunks[c]);
  }
  return text;
}

Workload chunk_workload(const Workload& workload, const std::vector<int>& units) {
  Workload chunk;
  chunk.model = workload.model;
  chunk.job = workload.job;
  std::int64_t shard_elements = 0;
  for (int u : units) {
    Unit unit = workload.units[u];
    // Shared units (a tied output's embedding) are in the same chunk: normalize_job
    // refuses tied embeddings under PP.
    for (int& s : unit.shared_param_units) {
      const auto it = std::find(units.begin(), units.end(), s);
      FSDPTUNE_CHECK(it != units.end(), "a unit's shared parameters are in another chunk");
      s = static_cast<int>(it - units.begin());
    }
    unit.index = static_cast<int>(chunk.units.size());
    shard_elements += unit.shard_numel();
    chunk.units.push_back(std::move(unit));
  }
  // The AdamW step over this chunk's shards: 28 bytes per element (workload.cpp).
  for (Op op : workload.optimizer_ops) {
    if (op.memory_op == "adamw") op.bytes = 28 * shard_elements;
    chunk.optimizer_ops.push_back(std::move(op));
  }
  return chunk;
}

}  // namespace fsdptune
