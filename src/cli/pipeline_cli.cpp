#include "pipeline_cli.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <numeric>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "fsdptune/error.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/memory_bound.hpp"
#include "fsdptune/pipeline.hpp"
#include "fsdptune/pipeline_tuner.hpp"
#include "fsdptune/plans.hpp"
#include "fsdptune/program.hpp"
#include "fsdptune/report.hpp"
#include "fsdptune/schedule.hpp"
#include "fsdptune/simulator.hpp"
#include "fsdptune/torchtitan.hpp"
#include "fsdptune/trace.hpp"
#include "fsdptune/units.hpp"

namespace fsdptune::cli {
namespace {

// Version of the `simulate --json` object of a pipelined job (docs/parallelism.md).
constexpr int kSimulatePipelineJsonVersion = 1;

}  // namespace

void print_stage_table(const Workload& workload, const std::vector<std::vector<int>>& chunks,
                       const std::vector<StageResult>& stages,
                       const std::vector<StageAnyTiming>& any_timing, std::int64_t limit_bytes) {
  // Interleaved ranks list two ranges: "layers.8..layers.15, layers.72..layers.79".
  const int width = workload.job.virtual_stages > 1 ? 50 : 34;
  fmt::print("{:>5} {:<{}} {:>11} {:>11} {:>9} {:>12} {:>12} {:>12}  {}\n", "stage", "units", width,
             "busy", "end", "in flight", "peak alloc", "peak reserv", "any timing", "fits");
  for (const StageResult& stage : stages) {
    fmt::print(
        "{:>5} {:<{}} {:>11} {:>11} {:>9} {:>12} {:>12} {:>12}  {}\n", stage.rank,
        rank_units(workload, chunks, stage.rank), width, format_seconds(stage.busy_s),
        format_seconds(stage.end_s), stage.max_in_flight, format_bytes(stage.peak_allocated_bytes),
        format_bytes(stage.peak_reserved_bytes),
        format_bytes(any_timing.at(static_cast<std::size_t>(stage.rank)).peak_reserved_bytes),
        stage_fits(stage, limit_bytes) ? "yes"
                                       : fmt::format("no (limit {})", format_bytes(limit_bytes)));
  }
}

namespace {

std::string job_line(const ModelSpec& model, const JobSpec& job, const std::string& hardware) {
  return fmt::format(
      "{} on {} x {}: dp_shard {} x dp_replicate {} x tp {} x pp {}, {} of {} x {} tokens, {}{}, "
      "AC {}{}{}{}",
      model.name, job.gpus, hardware, dp_shard_text(job.dp_shard, job.cp), job.dp_replicate, job.tp,
      job.pp, microbatches_text(job), job.local_batch, job.seq_len, pipeline_schedule_text(job),
      job.virtual_stages > 1 ? fmt::format(" ({} virtual stages)", job.virtual_stages) : "",
      to_string(job.ac), dtype_suffix(job), features_suffix(job), execution_suffix(job.execution));
}

// The cost lookups of a pipeline's chunk Programs: how many, and how many of them the
// analytic model priced (Program::cost_queries, cost_fallbacks), summed.
std::pair<std::int64_t, std::int64_t> chunk_cost_counts(const std::vector<Program>& programs) {
  std::pair<std::int64_t, std::int64_t> counts{0, 0};
  for (const Program& program : programs) {
    counts.first += program.cost_queries;
    counts.second += program.cost_fallbacks;
  }
  return counts;
}

}  // namespace

std::string single_program_job_line(const ModelSpec& model, const JobSpec& job,
                                    const std::string& hardware) {
  return fmt::format(
      "{} on {} x {} (dp_shard {}, dp_replicate {}, tp {}), batch {} x seq {}, AC {}{}{}{}",
      model.name, job.gpus, hardware, dp_shard_text(job.dp_shard, job.cp), job.dp_replicate, job.tp,
      job.local_batch, job.seq_len, to_string(job.ac), dtype_suffix(job), features_suffix(job),
      execution_suffix(job.execution));
}

void check_trace_size(const ModelSpec& model, const JobSpec& job, const std::string& trace_path) {
  if (trace_path.empty() || (job.pp == 1 && job.microbatches == 1)) return;
  // In double: the product of the job's limits passes 2^63.
  const double actions =
      2.0 * static_cast<double>(job.pp) * static_cast<double>(job.virtual_stages) *
      static_cast<double>(job.microbatches) * static_cast<double>(job.pipeline_steps);
  const std::string counts =
      fmt::format("{:.0f} pipeline actions (2 x {} chunks x {} microbatches x {} pipeline steps)",
                  actions, job.pp * job.virtual_stages, job.microbatches, job.pipeline_steps);
  const char* hint =
      "trace the job with fewer microbatches or pipeline steps (its figures per microbatch "
      "are the same), or leave out --trace";
  if (actions > static_cast<double>(kMaxTraceActions)) {
    throw_bad_input("--trace " + trace_path,
                    fmt::format("the step runs {}, more than a trace draws (at most {})", counts,
                                kMaxTraceActions),
                    hint);
  }
  // Units of the largest chunk: its blocks as the job splits them, the embedding with the
  // first chunk and the norm + output with the last.
  const std::vector<std::int64_t> blocks = pipeline_chunk_blocks(job, model.n_layers);
  double units = 0;
  for (std::size_t c = 0; c < blocks.size(); ++c) {
    units = std::max(units, static_cast<double>(blocks[c] + (c == 0 ? 1 : 0) +
                                                (c + 1 == blocks.size() ? 1 : 0)));
  }
  if (actions * units > static_cast<double>(kMaxTraceUnitActions)) {
    throw_bad_input(
        "--trace " + trace_path,
        fmt::format("the step runs {} of about {:.0f} units each, {:.0f} actions x units, more "
                    "than a trace draws (at most {}: about 600 MB of trace)",
                    counts, units, actions * units, kMaxTraceUnitActions),
        hint);
  }
}

std::string trace_title(const std::string& model, const std::string& plan) {
  return fmt::format("{} {}", model, plan);
}

nlohmann::json schedule_trace(const ScheduleFile& schedule, const Workload& workload,
                              const CostModel& costs) {
  const std::string title = trace_title(schedule.model.name, schedule.predicted.plan_name);
  if (schedule.pipeline) {
    SimOptions options;
    options.record_timeline = false;
    return pipeline_chrome_trace(replay_pipeline_schedule(schedule, workload, costs, options),
                                 title);
  }
  SimResult result;
  result.timings = schedule.timings;
  result.memory_timeline = schedule.memory_timeline;
  result.step_time_s = schedule.predicted.step_time_s;
  result.peak_allocated_bytes = schedule.predicted.peak_allocated_bytes;
  result.peak_reserved_bytes = schedule.predicted.peak_reserved_bytes;
  return chrome_trace(schedule.program, result, title);
}

void run_simulate_pipelined(const ModelSpec& model, const JobSpec& job,
                            const ResolvedCostModel& costs, const CostOptions& cost_options,
                            const PlanOptions& plan_options, std::int64_t limit_bytes, bool json,
                            bool require_fit, const std::string& trace_path) {
  validate_pipeline(job);
  check_trace_size(model, job, trace_path);
  const Workload workload = build_workload(model, job);
  const std::vector<std::vector<int>> chunks = pipeline_chunks(workload);
  SimOptions sim_options;
  sim_options.record_timeline = false;
  // The trace places every chunk's tasks at their simulated times.
  sim_options.record_timings = !trace_path.empty();
  PipelineSimulation sim;
  std::string plan_name = plan_options.plan;
  const std::vector<std::string> names = builtin_plan_names();
  if (std::find(names.begin(), names.end(), plan_options.plan) != names.end()) {
    std::vector<Plan> plans;
    for (const std::vector<int>& units : chunks) {
      const Workload chunk = chunk_workload(workload, units);
      Plan plan = builtin_plan(plan_options.plan, chunk, *costs.model, limit_bytes, "--plan");
      validate_plan(plan, static_cast<int>(chunk.units.size()), "--plan " + plan_options.plan);
      plans.push_back(std::move(plan));
    }
    sim = simulate_pipelined_plans(
        workload, *costs.model, plans,
        std::vector<bool>(plans.size(), resolve_keep_gathered(plan_options, job)), sim_options);
  } else {
    if (!std::filesystem::exists(plan_options.plan)) {
      builtin_plan(plan_options.plan, workload, *costs.model, limit_bytes, "--plan");
    }
    if (!plan_options.keep_gathered.empty()) {
      throw_bad_input("--keep-gathered",
                      fmt::format("goes with a built-in plan, not the file {} (a pipeline "
                                  "schedule stores each chunk's choice)",
                                  plan_options.plan));
    }
    const nlohmann::json& file = read_plan_json("--plan", plan_options.plan);
    refuse_other_format(file, plan_options.plan);
    if (!file.contains("pipeline")) {
      throw_bad_input("--plan " + plan_options.plan,
                      "a pipelined job takes a built-in plan (used for every chunk) or a "
                      "pipeline schedule (schedule format version 2), not a single plan",
                      "fsdptune tune --pp ... --out schedule.json writes one");
    }
    const ScheduleFile schedule = checked_schedule_from_json(file, plan_options.plan);
    check_schedule_matches(schedule, model, job, plan_options.plan);
    // The stored Programs carry the costs they were tuned with: replayed as they are, they
    // only mean something on the same hardware.
    check_schedule_hardware(schedule, costs.hardware, plan_options.plan);
    sim = replay_pipeline_schedule(schedule, workload, *costs.model, sim_options);
    plan_name = schedule.predicted.plan_name;
    // As for a version 1 schedule: judged against the limit it was tuned for unless
    // --memory-limit is given.
    if (plan_options.memory_limit.empty()) limit_bytes = schedule.memory_limit_bytes;
  }
  const PlanSummary summary = pipeline_summary(sim, plan_name, limit_bytes);
  const std::vector<StageAnyTiming> any_timing = pipeline_any_timing(sim);
  // Under --require-fit a step that does not fit exits 3 writing nothing, as tune does.
  const bool write_trace = !trace_path.empty() && (summary.fits || !require_fit);
  if (write_trace) {
    write_file_atomically(trace_path,
                          dump_json(pipeline_chrome_trace(sim, trace_title(model.name, plan_name))),
                          "--trace");
  }

  if (json) {
    nlohmann::json stages = nlohmann::json::array();
    for (const StageResult& stage : sim.result.stages) {
      stages.push_back({{"rank", stage.rank},
                        {"units", rank_units(workload, chunks, stage.rank)},
                        {"busy_s", stage.busy_s},
                        {"held_s", stage.held_s},
                        {"pipeline_end_s", stage.pipeline_end_s},
                        {"end_s", stage.end_s},
                        {"max_in_flight", stage.max_in_flight},
                        {"peak_allocated_bytes", stage.peak_allocated_bytes},
                        {"peak_reserved_bytes", stage.peak_reserved_bytes},
                        {"fits", stage_fits(stage, limit_bytes)}});
    }
    nlohmann::json chunk_json = nlohmann::json::array();
    for (std::size_t c = 0; c < chunks.size(); ++c) {
      chunk_json.push_back({{"rank", static_cast<std::int64_t>(c) % job.pp},
                            {"units", unit_range(workload, chunks[c])},
                            {"keep_gathered", static_cast<bool>(sim.chunk_keep_gathered[c])},
                            {"plan", plan_to_json(sim.chunk_plans[c])},
                            {"task_count", sim.chunk_programs[c].tasks.size()}});
    }
    nlohmann::json out = {
        {"format", "fsdptune-simulation"},
        {"version", kSimulatePipelineJsonVersion},
        {"pipelined", true},
        {"model", model.name},
        {"job", job_to_json(job)},
        {"hardware", costs.hardware.id},
        {"cost_source", cost_options.profile.empty() ? "analytic" : cost_options.profile},
        {"plan", plan_name},
        {"step_time_s", summary.step_time_s},
        {"tokens_per_s_per_gpu", summary.tokens_per_s_per_gpu},
        {"mfu", summary.mfu},
        // The split pipeline_summary makes (as a version 2 schedule's `predicted`).
        {"compute_s", summary.compute_s},
        {"comm_s", summary.comm_s},
        {"exposed_comm_s", summary.exposed_comm_s},
        {"idle_s", summary.idle_s},
        {"bubble_fraction", sim.result.bubble_fraction},
        {"send_s", sim.spec.send_s},
        {"peak_allocated_bytes", summary.peak_allocated_bytes},
        {"peak_reserved_bytes", summary.peak_reserved_bytes},
        {"memory_limit_bytes", limit_bytes},
        {"fits", summary.fits},
        {"stages", stages},
        {"chunks", chunk_json}};
    add_pipeline_any_timing_json(out, any_timing, limit_bytes);
    std::fputs(dump_json(out).c_str(), stdout);
  } else {
    fmt::print("{}\n", job_line(model, job, costs.hardware.id));
    const auto kept =
        std::count(sim.chunk_keep_gathered.begin(), sim.chunk_keep_gathered.end(), true);
    fmt::print("plan {} per chunk ({}, parameters {})\n", plan_name,
               counted(static_cast<std::int64_t>(chunks.size()), "chunk"),
               kept == static_cast<std::ptrdiff_t>(chunks.size())
                   ? "kept gathered across microbatches"
               : kept == 0 ? "re-gathered every microbatch"
                           : "re-gathered every microbatch by some chunks");
    fmt::print("step time          {}\n", format_seconds(summary.step_time_s));
    fmt::print("tokens/s/GPU       {}\n", format_rate(summary.tokens_per_s_per_gpu));
    fmt::print("MFU                {:.1f}%{}\n", 100.0 * summary.mfu,
               mfu_basis_note(summary.mfu, job, costs.hardware));
    fmt::print("bubble             {:.1f}%\n", 100.0 * sim.result.bubble_fraction);
    if (job.pp > 1) {
      fmt::print("send               {} per microbatch between stages\n",
                 format_seconds(sim.spec.send_s));
    }
    fmt::print("peak memory        {} allocated, {} reserved (est.), limit {} (largest stage)\n\n",
               format_bytes(summary.peak_allocated_bytes),
               format_bytes(summary.peak_reserved_bytes), format_bytes(limit_bytes));
    print_stage_table(workload, chunks, sim.result.stages, any_timing, limit_bytes);
    fmt::print("{}\n", summary.fits ? "fits" : "does not fit: a stage's peak exceeds the limit");
    fmt::print("{}", pipeline_any_timing_text(any_timing, limit_bytes, summary.fits));
    const auto [queries, fallbacks] = chunk_cost_counts(sim.chunk_programs);
    if (throughput_caveat_applies(queries, fallbacks, job.pp)) {
      fmt::print("{}\n", kThroughputCaveat);
    }
    if (write_trace) fmt::print("wrote {}\n", trace_path);
  }
  flush_stdout_before_error();
  if (require_fit) require_pipeline_fit(workload.model, job, sim, limit_bytes);
}

std::int64_t padded_peak_bytes(const MemoryBreakdown& breakdown) {
  return breakdown[static_cast<std::size_t>(MemoryCategory::kGatheredParams)] +
         breakdown[static_cast<std::size_t>(MemoryCategory::kGradients)];
}

ShardingGain largest_stage_gain(const PipelineSimulation& sim, std::int64_t peak_bytes,
                                std::int64_t limit_bytes) {
  const StageResult* largest = nullptr;
  for (const StageResult& stage : sim.result.stages) {
    if (largest == nullptr || stage.peak_reserved_bytes > largest->peak_reserved_bytes) {
      largest = &stage;
    }
  }
  std::int64_t sharded = 0;
  const auto stages = static_cast<std::size_t>(std::max(1, sim.spec.stages));
  for (std::size_t c = 0; largest != nullptr && c < sim.chunk_workloads.size(); ++c) {
    if (c % stages == static_cast<std::size_t>(largest->rank)) {
      sharded += sim.chunk_workloads[c].persistent_state_bytes();
    }
  }
  return ShardingGain{peak_bytes, sharded, limit_bytes};
}

void require_pipeline_fit(const ModelSpec& model, const JobSpec& job, const PipelineSimulation& sim,
                          std::int64_t limit_bytes) {
  // The stage furthest over, the one to fix (found by QA: the first over was named, 55.8
  // MiB, beside a stage of 57.9 MiB).
  const StageResult* worst = nullptr;
  for (const StageResult& stage : sim.result.stages) {
    if (stage_fits(stage, limit_bytes)) continue;
    if (worst == nullptr || stage.peak_reserved_bytes > worst->peak_reserved_bytes) worst = &stage;
  }
  if (worst == nullptr) return;
  const StageResult& stage = *worst;
  // Parameters kept gathered across microbatches do not shrink with more GPUs; re-gathered
  // they are freed after each use (found by QA: 405B on PP 4 was offered 512 GPUs, still
  // 646 GiB over, never --keep-gathered no, 112 GiB).
  std::vector<std::string> more;
  if (std::find(sim.chunk_keep_gathered.begin(), sim.chunk_keep_gathered.end(), true) !=
      sim.chunk_keep_gathered.end()) {
    more.emplace_back("re-gather the parameters every microbatch (--keep-gathered no)");
  }
  const std::string hint = does_not_fit_hint(
      model, job, false, largest_stage_gain(sim, stage.peak_reserved_bytes, limit_bytes), more);
  throw Error(ErrorKind::kDoesNotFit, "--memory-limit",
              // By how much, as a single Program's error says (found by QA: "reserves 12.6 GiB,
              // over the 12.6 GiB limit" for 1 B).
              fmt::format("stage {} reserves {}, over the {} limit by {}", stage.rank,
                          format_bytes(stage.peak_reserved_bytes), format_bytes(limit_bytes),
                          format_bytes(stage.peak_reserved_bytes - limit_bytes)),
              job.pp_schedule == PipelineSchedule::k1F1B
                  ? hint
                  : hint + " (or fewer microbatches in flight: --pp-schedule 1f1b)");
}

namespace {

// The fewest GPUs, more than the job's and at least `at_least`, of a job normalize_job takes
// with the job's other degrees (whole nodes above one, groups within them) and whose
// workload `fits`; 0 where there is none up to kMaxJobGpus (64 jobs normalize_job takes are
// tried, of at most 1,024 counts: found by review, half the counts of nodes of 4 with 2
// replicas straddle nodes, and the window ended short of the count that fits).
std::int64_t fewest_valid_gpus(const ModelSpec& model, const JobSpec& job, double at_least,
                               const std::function<bool(const Workload&)>& fits) {
  if (!(at_least < static_cast<double>(kMaxJobGpus))) return 0;
  const std::int64_t per_node = std::max<std::int64_t>(1, job.gpus_per_node);
  const std::int64_t model_parallel = std::max<std::int64_t>(1, job.tp * job.pp * job.dp_replicate);
  const std::int64_t across_nodes = std::lcm(per_node, model_parallel);
  const auto round_up = [](std::int64_t value, std::int64_t step) {
    return (value + step - 1) / step * step;
  };
  std::int64_t from =
      std::max<std::int64_t>(job.gpus + 1, static_cast<std::int64_t>(std::ceil(at_least)));
  int jobs = 0;
  for (int counts = 0; counts < 1024 && jobs < 64; ++counts) {
    std::int64_t count = round_up(from, model_parallel);
    if (count > per_node) count = round_up(from, across_nodes);
    if (count > kMaxJobGpus) return 0;
    JobSpec more = job;
    more.gpus = count;
    more.dp_shard = 0;
    from = count + 1;
    std::optional<JobSpec> taken;
    try {
      taken = normalize_job(model, more);
    } catch (const Error&) {
      continue;  // e.g. a CP or shard group across nodes
    }
    ++jobs;
    if (fits(build_workload(model, *taken))) return count;
  }
  return 0;
}

// What the units' parameters and gradients take unsharded (gather and reduce dtypes):
// `padded` to the shard group, what grows with the padding as the group does; else at a
// shard group that divides every dim 0.
double unsharded_bytes(const Workload& workload, bool padded) {
  double bytes = 0;
  for (const Unit& unit : workload.units) {
    for (const Param& param : unit.params) {
      bytes += static_cast<double>(padded ? param.padded_numel : param.numel) *
               static_cast<double>(bytes_per_element(param.gather_dtype) +
                                   bytes_per_element(param.reduce_dtype));
    }
  }
  return bytes;
}

}  // namespace

std::string does_not_fit_hint(const ModelSpec& model, const JobSpec& job, bool fit_at_any_timing,
                              const std::optional<ShardingGain>& sharding,
                              const std::vector<std::string>& more) {
  std::vector<std::string> changes;
  // The next degree of these GPUs that is a job fsdptune takes (found by QA: offered where
  // none is, 24 GPUs at pp 4 with 6 replicas; the split given chunk by chunk left out).
  if (job.pp > 1) {
    for (std::int64_t more_pp = job.pp + 1; more_pp <= job.gpus; ++more_pp) {
      if (job.gpus % (more_pp * job.tp * job.dp_replicate) != 0) continue;
      JobSpec deeper = job;
      deeper.pp = more_pp;
      deeper.dp_shard = 0;
      deeper.pp_chunk_blocks.clear();
      try {
        normalize_job(model, deeper);
        changes.push_back(fmt::format("more pipeline stages (--pp {})", more_pp));
        break;
      } catch (const Error&) {
        // Not a job this model or mesh can run: the next.
      }
    }
  }
  std::int64_t gpus = 0;
  // At c GPUs the sharded state is what the workload at c holds, in proportion (about
  // job.gpus / c of today's), and the rest of the peak grows at most as the parameters and
  // gradients padded to the shard group do (found by review: 405B on 16 GPUs offered 1,224,
  // where 0.5 GiB more of gathered parameters left it 1.2 GiB over).
  const Workload today = sharding ? build_workload(model, job) : Workload{};
  const double today_state = static_cast<double>(today.persistent_state_bytes());
  const double today_padded = unsharded_bytes(today, true);
  const auto sharded_at = [&](const Workload& at) {
    return static_cast<double>(sharding->sharded_state_bytes) *
           static_cast<double>(at.persistent_state_bytes()) / today_state;
  };
  // The rest of the peak at `at`: where the peak's padded tensors are known (gathered
  // parameters, gradients), they alone grow or shrink with the padding; else the whole rest
  // grows as they do and never shrinks (an estimate that offers no count it cannot fit:
  // found by QA, shrinking it all offered 405B on 1,200 GPUs 1,272, 1.6 GiB over).
  const double rest =
      sharding ? static_cast<double>(sharding->peak_bytes - sharding->sharded_state_bytes) : 0;
  const bool padded_known = sharding && sharding->padded_peak_bytes >= 0;
  const auto rest_at = [&](const Workload& at) {
    const double ratio = unsharded_bytes(at, true) / today_padded;
    return padded_known ? rest + static_cast<double>(sharding->padded_peak_bytes) * (ratio - 1)
                        : rest * std::max(ratio, 1.0);
  };
  if (sharding && today_state > 0 && today_padded > 0) {
    // The fewest GPUs the proportional estimate allows first: peak - sharded * (1 - g / c)
    // under the limit, never where the rest is over it -- the rest and the state as they
    // would be without today's padding, the least they can be at any count (found by QA:
    // 405B on 1,360 GPUs, 1.6 GiB over with rows padded by 8% to the shard group, was
    // offered 2,064 where 1,368, padded by 0.2%, fits).
    const double unpadded = unsharded_bytes(today, false) / today_padded;
    const double least_rest =
        padded_known ? rest - static_cast<double>(sharding->padded_peak_bytes) * (1 - unpadded)
                     : rest;
    const double room = static_cast<double>(sharding->limit_bytes) - least_rest;
    if (room > 0) {
      gpus = fewest_valid_gpus(model, job,
                               static_cast<double>(sharding->sharded_state_bytes) * unpadded *
                                   static_cast<double>(job.gpus) / room,
                               [&](const Workload& at) {
                                 return sharded_at(at) + rest_at(at) <=
                                        static_cast<double>(sharding->limit_bytes);
                               });
    }
  } else if (!sharding) {
    gpus = fewest_valid_gpus(model, job, 2.0 * static_cast<double>(job.gpus),
                             [](const Workload&) { return true; });
  }
  // HSDP: fewer replicas shard the state over more of the same GPUs (found by QA: 8B on 8
  // GPUs with 8 replicas was offered 16 GPUs, where one replica reserves 32 GiB). The most
  // replicas whose workload fits as the GPUs above are judged, offered first.
  std::string replicas;
  if (sharding && job.dp_replicate > 1 && today_state > 0 && today_padded > 0) {
    for (std::int64_t fewer = job.dp_replicate - 1; fewer >= 1 && replicas.empty(); --fewer) {
      JobSpec other = job;
      other.dp_replicate = fewer;
      other.dp_shard = 0;
      try {
        const Workload at = build_workload(model, normalize_job(model, other));
        if (sharded_at(at) + rest_at(at) <= static_cast<double>(sharding->limit_bytes)) {
          replicas = fmt::format(
              "keep the {} with fewer replicas (--dp-replicate {}: each shards "
              "the state over {} GPUs), or ",
              counted(job.gpus, "GPU"), fewer, at.job.dp_shard * at.job.tp);
        }
      } catch (const Error&) {
        // Not a mesh of these GPUs: not offered.
      }
    }
  }
  // Where the sharded state alone is over the limit, nothing else fits it without more
  // GPUs: the fewest that bring it under come first, needed beside the rest (found by QA,
  // 2026-12-06: 70B on 8 GPUs was offered --ac full, which left 131 GiB of sharded state
  // over 75.2 GiB; and in review, with full AC, --cp 2 or a shorter --seq beside --gpus 32).
  // Where those GPUs fit the whole peak too, they are the only change offered.
  // Judged at any timing, the peak the estimate starts from is the predicted one where that
  // does not fit (TunerResult::smallest_peak_bytes' mixed measures): said (found by review:
  // 405B on 16 GPUs under --fit any-timing was offered 568, 3.6 GiB over at any timing).
  const std::string judged = fit_at_any_timing ? ", judged at the predicted timing" : "";
  std::string needed;
  if (sharding && sharding->sharded_state_bytes > sharding->limit_bytes &&
      sharding->limit_bytes > 0 && today_state > 0) {
    const std::int64_t at = fewest_valid_gpus(
        model, job,
        static_cast<double>(sharding->sharded_state_bytes) * static_cast<double>(job.gpus) /
            static_cast<double>(sharding->limit_bytes),
        [&](const Workload& workload) {
          return sharded_at(workload) <= static_cast<double>(sharding->limit_bytes);
        });
    if (at > 0 && gpus == at) {
      return replicas + fmt::format("shard over more GPUs (--gpus {}{})", gpus, judged);
    }
    if (at > 0) {
      needed = fmt::format(
          "shard over at least {} GPUs (--gpus {}: the sharded state alone, {}, is over the "
          "limit); with that, ",
          at, at, format_bytes(sharding->sharded_state_bytes));
    }
  }
  if (gpus > 0) {
    changes.push_back(fmt::format("shard over more GPUs (--gpus {}{})", gpus, judged));
  }
  if (job.ac != ActivationCheckpointing::kFull)
    changes.push_back("checkpoint activations (--ac full)");
  // Context parallelism splits each sequence over more of the shard group's ranks: its
  // activations and attention workspace shrink with it (found by QA, an old note: the hint
  // offered a shorter --seq and never --cp). Offered where the next degree is a valid job
  // (normalize_job's rules), but for a float8 job that would shard over its CP ranks alone,
  // which torchtitan all-gathers in bf16 (docs/torchtitan-config.md).
  const std::int64_t more_cp = job.cp * 2;
  if (job.dp_shard % more_cp == 0 && job.seq_len % (2 * more_cp) == 0 &&
      (job.seq_len / more_cp) % job.tp == 0 && !(job.float8 && job.dp_shard == more_cp)) {
    changes.push_back(fmt::format("split each sequence over more ranks (--cp {})", more_cp));
  }
  // Tensor parallelism splits each layer's weights and, with sequence parallelism, its
  // activations over more ranks (noticed in several notes: never offered). Offered where
  // the doubled degree stays within a node, as torchtitan runs TP, and is a job
  // normalize_job takes (heads, kv heads, ffn, vocabulary and sequence divisible by it),
  // but for a float8 job that would then shard over its CP ranks alone, as for --cp
  // (review: offered, and refused as not modelled).
  if (const std::int64_t more_tp = job.tp * 2; more_tp <= job.gpus_per_node) {
    JobSpec wider = job;
    wider.tp = more_tp;
    wider.dp_shard = 0;
    try {
      wider = normalize_job(model, wider);
      if (!torchtitan_float8_gathers_bf16(wider)) {
        changes.push_back(fmt::format("split each layer over more GPUs (--tp {})", more_tp));
      }
    } catch (const Error&) {
      // Not a job this model or mesh can run: not offered.
    }
  }
  if (job.local_batch > 1)
    changes.push_back(fmt::format("use a smaller --batch (now {})", job.local_batch));
  if (job.seq_len > 1) changes.push_back(fmt::format("use a shorter --seq (now {})", job.seq_len));
  if (fit_at_any_timing) changes.push_back("judge fit at the predicted timing (--fit predicted)");
  changes.insert(changes.end(), more.begin(), more.end());
  return replicas + needed + join_alternatives(changes, ", or ");
}

TunedSchedule tune_schedule(const Workload& workload, const HardwareSpec& hardware,
                            const CostModel& costs, const TunerOptions& options) {
  return schedule_of_tuning(workload, hardware, costs,
                            tune_configuration(workload, costs, options));
}

TunedSchedule schedule_of_tuning(const Workload& workload, const HardwareSpec& hardware,
                                 const CostModel& costs, const ConfigurationTuning& searched) {
  const JobSpec& job = workload.job;
  TunedSchedule tuned;
  if (searched.pipeline) {
    const PipelineTuning& tuning = *searched.pipeline;
    if (!tuning.fits) {
      // Under --fit any-timing (best_any_timing filled) what the fit was judged by.
      const bool any_timing = !tuning.best_any_timing.empty();
      const std::int64_t peak = any_timing
                                    ? largest_any_timing_reserved_bytes(tuning.best_any_timing)
                                    : largest_stage_reserved_bytes(tuning.best.result);
      throw Error(
          ErrorKind::kDoesNotFit, "--memory-limit",
          // The figure is the bound at any timing under --fit any-timing, said so
          // (QA: read as the predicted peak).
          fmt::format("no per-stage plan fits in {} per GPU{}: the smallest largest-stage "
                      "reserved peak {}found is {}, {} over",
                      format_bytes(tuning.memory_limit_bytes),
                      any_timing ? " at any timing (--fit any-timing)" : "",
                      any_timing ? "at any timing " : "", format_bytes(peak),
                      format_bytes(peak - tuning.memory_limit_bytes)),
          does_not_fit_hint(workload.model, job, any_timing,
                            largest_stage_gain(tuning.best, peak, tuning.memory_limit_bytes)));
    }
    tuned.schedule =
        pipeline_schedule(workload, tuning.best, hardware, tuning.memory_limit_bytes, "tuned");
    tuned.schedule.baselines.push_back(
        pipeline_summary(tuning.fsdp2, "fsdp2", tuning.memory_limit_bytes));
    tuned.schedule.pareto = tuning.pareto;
    tuned.schedule.lower_bound_s = tuning.lower_bound_s;
    std::tie(tuned.schedule.cost_queries, tuned.schedule.cost_fallbacks) =
        chunk_cost_counts(tuning.best.chunk_programs);
    tuned.derived_from = tuning.derived_from;
    tuned.plans_evaluated = tuning.plans_evaluated;
    tuned.budget_exhausted = tuning.budget_exhausted;
    tuned.max_evaluations_reached = tuning.max_evaluations_reached;
    return tuned;
  }
  const TunerResult& result = *searched.single;
  if (!result.fits) {
    throw Error(
        ErrorKind::kDoesNotFit, "--memory-limit",
        fmt::format("no plan fits in {} per GPU: the smallest reserved peak found is {} ({}), "
                    "{} over",
                    format_bytes(result.memory_limit_bytes),
                    format_bytes(result.smallest_peak_bytes), result.smallest_peak_plan,
                    format_bytes(result.smallest_peak_bytes - result.memory_limit_bytes)),
        does_not_fit_hint(workload.model, job, false,
                          ShardingGain{result.smallest_peak_bytes,
                                       workload.persistent_state_bytes(), result.memory_limit_bytes,
                                       padded_peak_bytes(result.smallest_peak_breakdown)}));
  }
  ScheduleFile& schedule = tuned.schedule;
  schedule = schedule_of_tuned_plan(workload, hardware, result, costs);
  schedule.model = workload.model;
  schedule.job = job;
  tuned.derived_from = result.derived_from;
  tuned.plans_evaluated = result.plans_evaluated;
  tuned.budget_exhausted = result.budget_exhausted;
  tuned.max_evaluations_reached = result.max_evaluations_reached;
  return tuned;
}

std::string torchtitan_keep_gathered_note(const JobSpec& job,
                                          const std::vector<bool>& keep_gathered) {
  const bool torchtitan = default_keep_gathered(job);
  const auto differ = std::count(keep_gathered.begin(), keep_gathered.end(), !torchtitan);
  if (!is_pipelined(job) || differ == 0) return "";
  return fmt::format(
      "{} of {} chunks {} across microbatches, where torchtitan {} as it is: its config "
      "alone does not reproduce the schedule's figures ({}); --keep-gathered torchtitan "
      "tunes for what it runs unchanged",
      differ, keep_gathered.size(), torchtitan ? "re-gather" : "keep their parameters gathered",
      torchtitan ? "keeps them gathered under PP" : "re-gathers in its accumulation loop",
      torchtitan ? "reshard_after_forward and the pipeline schedule's gradient sync per "
                   "microbatch need changing"
                 : "set_requires_gradient_sync(False) and set_reshard_after_backward(False) "
                   "before all but the last microbatch");
}

std::string torchtitan_keep_gathered_note(const ScheduleFile& schedule) {
  if (!schedule.pipeline) return "";
  std::vector<bool> keep;
  for (const ScheduleChunk& chunk : schedule.pipeline->chunks) keep.push_back(chunk.keep_gathered);
  return torchtitan_keep_gathered_note(schedule.job, keep);
}

std::string pipeline_any_timing_text(const std::vector<StageAnyTiming>& stages,
                                     std::int64_t limit_bytes, bool fits_as_predicted) {
  FSDPTUNE_CHECK(!stages.empty(), "pipeline_any_timing_text: no stage");
  const StageAnyTiming& largest = largest_reserved_stage(stages);
  const std::string other = most_allocated_clause(stages);
  std::string text = fmt::format(
      "any timing         {} allocated, {} reserved at most (stage {}: its actions in order, each "
      "at any timing of its tasks{})\n",
      format_bytes(largest.peak_allocated_bytes), format_bytes(largest.peak_reserved_bytes),
      largest.rank, other);
  if (largest.peak_reserved_bytes > limit_bytes) {
    text += "  " +
            any_timing_verdict(largest.peak_allocated_bytes, largest.peak_reserved_bytes,
                               limit_bytes, fits_as_predicted) +
            "\n";
  }
  return text;
}

void add_pipeline_any_timing_json(nlohmann::json& out, const std::vector<StageAnyTiming>& stages,
                                  std::int64_t limit_bytes) {
  nlohmann::json by_stage = nlohmann::json::array();
  for (const StageAnyTiming& stage : stages) {
    by_stage.push_back({{"rank", stage.rank},
                        {"peak_allocated_bytes", stage.peak_allocated_bytes},
                        {"peak_reserved_bytes", stage.peak_reserved_bytes},
                        {"fits", stage.peak_reserved_bytes <= limit_bytes}});
  }
  out["any_timing_reserved_bytes"] = largest_any_timing_reserved_bytes(stages);
  out["any_timing_stages"] = std::move(by_stage);
}

void print_pipeline_schedule(const ScheduleFile& schedule, const Workload& workload,
                             const std::vector<std::int64_t>& any_timing_reserved_bytes) {
  const SchedulePipeline& pipeline = *schedule.pipeline;
  const bool any_timing = !any_timing_reserved_bytes.empty();
  fmt::print("{}; memory limit {}{}\n\n",
             job_line(schedule.model, schedule.job, schedule.hardware.id),
             format_bytes(schedule.memory_limit_bytes),
             any_timing ? " at any timing (--fit any-timing)" : "");
  fmt::print("{:<10} {:>11} {:>13} {:>7} {:>12} {:>12}{}  {}\n", "plan", "step time",
             "tokens/s/GPU", "MFU", "peak alloc", "peak reserv",
             any_timing ? fmt::format(" {:>12}", "any timing") : "", "fits");
  std::vector<PlanSummary> rows = schedule.baselines;
  rows.push_back(schedule.predicted);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const PlanSummary& row = rows[i];
    // Under --fit any-timing judged by the largest stage's bound, as the tuner judged it.
    const bool fits =
        any_timing ? any_timing_reserved_bytes.at(i) <= schedule.memory_limit_bytes : row.fits;
    fmt::print(
        "{:<10} {:>11} {:>13.1f} {:>6.1f}% {:>12} {:>12}{}  {}\n", row.plan_name,
        format_seconds(row.step_time_s), row.tokens_per_s_per_gpu, 100.0 * row.mfu,
        format_bytes(row.peak_allocated_bytes), format_bytes(row.peak_reserved_bytes),
        any_timing ? fmt::format(" {:>12}", format_bytes(any_timing_reserved_bytes.at(i))) : "",
        fits ? "yes" : "no");
  }
  if (throughput_caveat_applies(schedule.cost_queries, schedule.cost_fallbacks, schedule.job.pp)) {
    fmt::print("{}\n", kThroughputCaveat);
  }
  if (schedule.job.pp > 1) {
    fmt::print("\nbubble {:.1f}%, send {} per microbatch\n", 100.0 * pipeline.bubble_fraction,
               format_seconds(pipeline.send_s));
  } else {
    fmt::print("\n{} microbatches of gradient accumulation on one stage\n",
               schedule.job.microbatches);
  }
  fmt::print("{:>5} {:>5} {:<34} {:>8} {:>8} {:>9} {:>12}\n", "chunk", "rank", "units", "buckets",
             "prefetch", "gathered", "peak alone");
  for (std::size_t c = 0; c < pipeline.chunks.size(); ++c) {
    const ScheduleChunk& chunk = pipeline.chunks[c];
    fmt::print("{:>5} {:>5} {:<34} {:>8} {:>8} {:>9} {:>12}\n", c, chunk.rank,
               unit_range(workload, chunk.units),
               fmt::format("{}/{}/{}", chunk.plan.forward_buckets.size(),
                           gathering_backward_buckets(chunk.plan),
                           chunk.plan.reduce_scatter_buckets.size()),
               fmt::format("{}/{}", chunk.plan.forward_prefetch, chunk.plan.backward_prefetch),
               chunk.keep_gathered ? "kept" : "per mb",
               format_bytes(chunk.predicted.peak_allocated_bytes));
  }
  // Not a stage's peak, which holds its microbatches in flight too (found by QA: the column
  // was "peak alloc", 43.0 MiB beside a stage peak of 45.0 MiB).
  // The backward buckets that gather anything, as the plan lines of simulate and tune count
  // them (found by QA: buckets of units kept gathered after forward were counted).
  fmt::print(
      "buckets = forward all-gather / backward all-gather (those that gather) / "
      "reduce-scatter; peak alone = the chunk's one-microbatch Program simulated alone, "
      "allocated (a stage's peak: simulate --plan FILE)\n");
}

}  // namespace fsdptune::cli
