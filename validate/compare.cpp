#include "fsdptune/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "fsdptune/error.hpp"
#include "fsdptune/job.hpp"
#include "fsdptune/memory_bound.hpp"
#include "fsdptune/report.hpp"
#include "fsdptune/units.hpp"

namespace fsdptune {
namespace {

nlohmann::json value_json(const ComparedValue& value) {
  return {{"predicted", value.predicted},
          {"measured", value.measured},
          {"relative_error", value.relative_error}};
}

// Byte counts as JSON integers (ComparedValue holds them as doubles, exactly: at most
// 2^50, schedule.cpp's bound), not 1000.0.
nlohmann::json bytes_json(const ComparedValue& value) {
  return {{"predicted", static_cast<std::int64_t>(value.predicted)},
          {"measured", static_cast<std::int64_t>(value.measured)},
          {"relative_error", value.relative_error}};
}

std::string percent(double relative_error) {
  return fmt::format("{:+.1f}%", 100.0 * relative_error);
}

// Largest |measured - predicted duration| first, the first of equals first.
template <typename Difference>
void keep_differing_most(std::vector<Difference>& differences, int top) {
  std::stable_sort(differences.begin(), differences.end(),
                   [](const Difference& a, const Difference& b) {
                     return std::abs(a.duration_s.measured - a.duration_s.predicted) >
                            std::abs(b.duration_s.measured - b.duration_s.predicted);
                   });
  differences.resize(std::min(differences.size(), static_cast<std::size_t>(std::max(top, 0))));
}

// A pipeline's actions and chunk tasks (measured.json version 5; nothing from an older
// one): every rank's checked against its stage's in the schedule, the first rank of each
// stage's compared with them.
void add_pipeline_differences(const ScheduleFile& schedule, const MeasuredResult& measured,
                              const std::string& source, bool communication_comparable,
                              std::vector<ActionDifference>& actions,
                              std::vector<TaskDifference>& tasks) {
  const SchedulePipeline& pipeline = *schedule.pipeline;
  if (static_cast<std::int64_t>(measured.ranks.size()) != measured.world_size) return;
  const std::int64_t stage_size = measured.world_size / measured.pp;
  for (std::size_t index = 0; index < measured.ranks.size(); ++index) {
    const std::size_t stage = index / static_cast<std::size_t>(stage_size);
    if (stage >= pipeline.stages.size()) break;
    const bool compared = index % static_cast<std::size_t>(stage_size) == 0;
    const RankMeasurement& view = measured.ranks[index];
    const std::vector<PipelineAction>& predicted = pipeline.stages[stage].actions;
    if (!predicted.empty() && !view.actions.empty()) {
      if (view.actions.size() != predicted.size()) {
        throw_bad_input(fmt::format("{}: ranks[{}].actions", source, index),
                        fmt::format("{} actions, the schedule's stage {} has {}",
                                    view.actions.size(), stage, predicted.size()));
      }
      for (std::size_t a = 0; a < predicted.size(); ++a) {
        const PipelineAction& want = predicted[a];
        const PipelineAction& got = view.actions[a];
        if (got.chunk != want.chunk || got.microbatch != want.microbatch ||
            got.backward != want.backward) {
          throw_bad_input(
              fmt::format("{}: ranks[{}].actions[{}]", source, index, a),
              fmt::format("{} of chunk {} microbatch {} where the schedule's stage "
                          "{} runs the {} of chunk {} microbatch {}",
                          got.backward ? "backward" : "forward", got.chunk, got.microbatch, stage,
                          want.backward ? "backward" : "forward", want.chunk, want.microbatch));
        }
        if (!compared) continue;
        actions.push_back({static_cast<int>(stage), want.chunk, want.microbatch, want.backward,
                           compare_values(want.end_s - want.start_s, got.end_s - got.start_s),
                           compare_values(want.start_s, got.start_s)});
      }
    }
    const auto stage_chunks =
        std::count_if(pipeline.chunks.begin(), pipeline.chunks.end(),
                      [&](const auto& chunk) { return chunk.rank == static_cast<int>(stage); });
    if (!view.chunks.empty() && static_cast<std::ptrdiff_t>(view.chunks.size()) != stage_chunks) {
      throw_bad_input(fmt::format("{}: ranks[{}].chunks", source, index),
                      fmt::format("{} chunks, the schedule's stage {} has {}", view.chunks.size(),
                                  stage, stage_chunks));
    }
    for (std::size_t k = 0; k < view.chunks.size(); ++k) {
      const MeasuredChunk& chunk = view.chunks[k];
      const std::string where = fmt::format("{}: ranks[{}].chunks[{}]", source, index, k);
      if (chunk.chunk >= static_cast<int>(pipeline.chunks.size()) ||
          pipeline.chunks[static_cast<std::size_t>(chunk.chunk)].rank != static_cast<int>(stage)) {
        throw_bad_input(where + ": chunk",
                        fmt::format("chunk {} is not one of stage {}'s", chunk.chunk, stage));
      }
      const Program& program = pipeline.chunks[static_cast<std::size_t>(chunk.chunk)].program;
      if (chunk.tasks.size() != program.tasks.size()) {
        throw_bad_input(where + ": tasks",
                        fmt::format("{} tasks for chunk {}'s program of {}", chunk.tasks.size(),
                                    chunk.chunk, program.tasks.size()));
      }
      if (!compared) continue;
      for (std::size_t t = 0; t < program.tasks.size(); ++t) {
        const Task& task = program.tasks[t];
        const MeasuredChunkTask& got = chunk.tasks[t];
        if (got.runs == 0 || (!communication_comparable && !on_compute_stream(program, task))) {
          continue;
        }
        tasks.push_back({task.id, task.name, to_string(task.kind),
                         compare_values(task.duration_s, got.duration_s), ComparedValue{},
                         chunk.chunk, got.runs});
      }
    }
  }
}

}  // namespace

ComparedValue compare_values(double predicted, double measured) {
  return {predicted, measured, prediction_error(predicted, measured)};
}

Comparison compare(const ScheduleFile& schedule, const MeasuredResult& measured,
                   const std::string& measured_source, int top_tasks) {
  const std::string hash = schedule_hash(schedule);
  if (!schedule_has_hash(schedule, measured.schedule_hash)) {
    throw_bad_input(
        measured_source + ": schedule_hash",
        fmt::format("measured schedule {} but this schedule is {}", measured.schedule_hash, hash),
        "compare a measurement with the schedule it replayed");
  }
  const std::vector<Task>& tasks = schedule.program.tasks;
  if (schedule.pipeline && !measured.pipeline) {
    throw_bad_input(measured_source + ": pipeline",
                    "the schedule is a pipeline (version 2) but the measurement has no "
                    "per-stage figures",
                    "measure it with this fsdptune's validate");
  }
  if (!schedule.pipeline && measured.pipeline) {
    throw_bad_input(measured_source + ": pipeline",
                    "a pipeline measurement of a schedule without a pipeline");
  }
  if (measured.pipeline) {
    // The pipeline the replay ran is the schedule's job's.
    const MeasuredPipeline& ran = *measured.pipeline;
    const JobSpec& job = schedule.job;
    const std::string schedule_name = to_string(job.pp_schedule);
    const std::vector<std::tuple<const char*, std::string, std::string>> fields = {
        {"microbatches", std::to_string(ran.microbatches), std::to_string(job.microbatches)},
        {"pipeline_steps", std::to_string(ran.pipeline_steps),
         std::to_string(std::max<std::int64_t>(1, job.pipeline_steps))},
        {"virtual_stages", std::to_string(ran.virtual_stages), std::to_string(job.virtual_stages)},
        {"schedule", ran.schedule, schedule_name}};
    for (const auto& [name, got, want] : fields) {
      if (got != want) {
        throw_bad_input(measured_source + ": pipeline." + name,
                        fmt::format("is {}, the schedule's job has {}", got, want));
      }
    }
  }
  if (measured.timings.size() != tasks.size()) {
    throw_bad_input(measured_source + ": timings",
                    fmt::format("{} task timings for a program of {} tasks",
                                measured.timings.size(), tasks.size()));
  }
  // The schedule's mesh (normalize_job's derivation of dp_shard, without the model checks).
  JobSpec job = schedule.job;
  if (job.dp_shard <= 0) {
    job.dp_shard = job.gpus / std::max<std::int64_t>(1, job.tp * job.pp * job.dp_replicate);
  }
  if (measured.pp != job.pp || measured.tp != job.tp || measured.dp_replicate != job.dp_replicate ||
      measured.shard_ranks() * measured.shards_per_rank != job.dp_shard || measured.cp != job.cp) {
    throw_bad_input(
        measured_source + ": mesh",
        fmt::format("measured on pp {} x dp_replicate {} x dp_shard {} (x {} shards per "
                    "rank, cp {}) x tp {}, which does not replay the schedule's "
                    "pp {} x dp_replicate {} x dp_shard {} (cp {}) x tp {}",
                    measured.pp, measured.dp_replicate, measured.shard_ranks(),
                    measured.shards_per_rank, measured.cp, measured.tp, job.pp, job.dp_replicate,
                    job.dp_shard, job.cp, job.tp));
  }
  const PlanSummary& predicted = schedule.predicted;
  Comparison comparison;
  comparison.schedule_hash = hash;
  comparison.backend = measured.backend;
  comparison.world_size = measured.world_size;
  comparison.pp = measured.pp;
  comparison.microbatches = std::max<std::int64_t>(1, schedule.job.microbatches);
  comparison.pipeline_steps = std::max<std::int64_t>(1, schedule.job.pipeline_steps);
  comparison.pp_schedule = to_string(schedule.job.pp_schedule);
  comparison.virtual_stages = std::max<std::int64_t>(1, schedule.job.virtual_stages);
  comparison.dp_replicate = measured.dp_replicate;
  comparison.dp_shard = measured.shard_ranks();
  comparison.tp = measured.tp;
  comparison.cp = measured.cp;
  if (const auto whole = measured.environment.find("overlaps_not_replayed");
      whole != measured.environment.end()) {
    comparison.overlaps_not_replayed = whole->second;
  }
  // Absent: a replay from before the key (2026-12-05), which ran them serially (QA: such a
  // file was compared as overlapped).
  const auto replay = measured.environment.find("compute_collectives");
  if (replay != measured.environment.end() && replay->second != "serial" &&
      replay->second != "overlapped") {
    throw_bad_input(measured_source + ": environment.compute_collectives",
                    fmt::format("is '{}', expected overlapped or serial", replay->second));
  }
  if (replay == measured.environment.end() || replay->second == "serial") {
    const bool async_tp = job.tp > 1 && job.async_tp;
    comparison.serial_collectives =
        job.cp > 1 ? (async_tp ? "CP and async TP" : "CP") : (async_tp ? "async TP" : "");
  }
  comparison.shards_per_rank = measured.shards_per_rank;
  comparison.schedule_dp_shard = job.dp_shard;
  comparison.communication_comparable = measured.shards_per_rank == 1;
  // Ranks laid out on nodes other than the job's: its collectives crossed other links (found
  // by QA: a schedule of 2 nodes x 2 GPUs replayed on one host compared as usual).
  comparison.node_layout = node_layout_difference(measured, job);
  if (!comparison.node_layout.empty()) comparison.communication_comparable = false;
  comparison.data_checked = measured.data_checked;
  comparison.step_time_s = compare_values(predicted.step_time_s, measured.step_time_s);
  comparison.compute_s = compare_values(predicted.compute_s, measured.compute_s);
  comparison.exposed_comm_s = compare_values(predicted.exposed_comm_s, measured.exposed_comm_s);
  comparison.peak_allocated_bytes =
      compare_values(static_cast<double>(predicted.peak_allocated_bytes),
                     static_cast<double>(measured.peak_allocated_bytes));
  if (!schedule.pipeline) {
    const std::int64_t bound = any_timing_peak(schedule.program).peak_allocated_bytes;
    if (bound > 0) comparison.any_timing_peak_allocated_bytes = bound;
  }

  if (schedule.pipeline) {
    const std::vector<ScheduleStage>& predicted_stages = schedule.pipeline->stages;
    const std::vector<MeasuredStage>& measured_stages = measured.pipeline->stages;
    if (predicted_stages.size() != measured_stages.size()) {
      throw_bad_input(measured_source + ": pipeline.stages",
                      fmt::format("{} stages measured, the schedule has {}", measured_stages.size(),
                                  predicted_stages.size()));
    }
    // A schedule file always has its chunks (the reader checks); without them, no bounds.
    const std::vector<StageAnyTiming> bounds =
        static_cast<std::int64_t>(schedule.pipeline->chunks.size()) ==
                schedule.job.pp * std::max<std::int64_t>(1, schedule.job.virtual_stages)
            ? pipeline_any_timing(schedule)
            : std::vector<StageAnyTiming>(predicted_stages.size());
    for (std::size_t r = 0; r < predicted_stages.size(); ++r) {
      const ScheduleStage& want = predicted_stages[r];
      const MeasuredStage& got = measured_stages[r];
      comparison.stages.push_back({want.rank, compare_values(want.busy_s, got.busy_s),
                                   compare_values(want.end_s, got.end_s),
                                   compare_values(static_cast<double>(want.peak_allocated_bytes),
                                                  static_cast<double>(got.peak_allocated_bytes)),
                                   bounds.at(r).peak_allocated_bytes});
    }
  }
  const bool have_timings = schedule.timings.size() == tasks.size();
  std::vector<TaskDifference> differences;
  if (schedule.pipeline) {
    add_pipeline_differences(schedule, measured, measured_source,
                             comparison.communication_comparable, comparison.actions_differing_most,
                             differences);
    keep_differing_most(comparison.actions_differing_most, top_tasks);
  }
  for (std::size_t t = 0; t < tasks.size(); ++t) {
    if (!comparison.communication_comparable && !on_compute_stream(schedule.program, tasks[t])) {
      continue;
    }
    const TaskTiming& got = measured.timings[t];
    const double predicted_start = have_timings ? schedule.timings[t].start_s : 0;
    const double predicted_duration = have_timings
                                          ? schedule.timings[t].end_s - schedule.timings[t].start_s
                                          : tasks[t].duration_s;
    differences.push_back({tasks[t].id, tasks[t].name, to_string(tasks[t].kind),
                           compare_values(predicted_duration, got.end_s - got.start_s),
                           compare_values(predicted_start, got.start_s)});
  }
  keep_differing_most(differences, top_tasks);
  comparison.tasks_differing_most = std::move(differences);
  comparison.rank_compute_s = rank_compute_s(schedule.program, measured);  // none for a pipeline
  return comparison;
}

nlohmann::json comparison_to_json(const Comparison& comparison) {
  nlohmann::json tasks = nlohmann::json::array();
  for (const TaskDifference& task : comparison.tasks_differing_most) {
    nlohmann::json entry = {{"task", task.task},
                            {"name", task.name},
                            {"kind", task.kind},
                            {"duration_s", value_json(task.duration_s)}};
    if (task.chunk >= 0) {
      entry["chunk"] = task.chunk;
      entry["runs"] = task.runs;
    } else {
      entry["start_s"] = value_json(task.start_s);
    }
    tasks.push_back(entry);
  }
  nlohmann::json actions = nlohmann::json::array();
  for (const ActionDifference& action : comparison.actions_differing_most) {
    actions.push_back({{"stage", action.stage},
                       {"chunk", action.chunk},
                       {"microbatch", action.microbatch},
                       {"backward", action.backward},
                       {"duration_s", value_json(action.duration_s)},
                       {"start_s", value_json(action.start_s)}});
  }
  nlohmann::json stages = nlohmann::json::array();
  for (const StageComparison& stage : comparison.stages) {
    nlohmann::json entry = {{"rank", stage.rank},
                            {"busy_s", value_json(stage.busy_s)},
                            {"end_s", value_json(stage.end_s)},
                            {"peak_allocated_bytes", bytes_json(stage.peak_allocated_bytes)}};
    if (stage.any_timing_peak_allocated_bytes > 0) {
      entry["any_timing_peak_allocated_bytes"] = stage.any_timing_peak_allocated_bytes;
    }
    stages.push_back(std::move(entry));
  }
  nlohmann::json json = {{"format", "fsdptune-comparison"},
                         {"version", 7},
                         {"schedule_hash", comparison.schedule_hash},
                         {"backend", comparison.backend},
                         {"world_size", comparison.world_size},
                         {"microbatches", comparison.microbatches},
                         {"mesh",
                          {{"pp", comparison.pp},
                           {"dp_replicate", comparison.dp_replicate},
                           {"dp_shard", comparison.dp_shard},
                           {"tp", comparison.tp},
                           {"shards_per_rank", comparison.shards_per_rank}}},
                         {"schedule_dp_shard", comparison.schedule_dp_shard},
                         {"communication_comparable", comparison.communication_comparable},
                         {"data_checked", comparison.data_checked},
                         {"step_time_s", value_json(comparison.step_time_s)},
                         {"compute_s", value_json(comparison.compute_s)},
                         {"exposed_comm_s", value_json(comparison.exposed_comm_s)},
                         {"peak_allocated_bytes", bytes_json(comparison.peak_allocated_bytes)},
                         {"tasks_differing_most", tasks},
                         {"stages", stages}};
  if (!comparison.stages.empty()) json["actions_differing_most"] = actions;
  if (!comparison.rank_compute_s.empty()) json["rank_compute_s"] = comparison.rank_compute_s;
  if (comparison.any_timing_peak_allocated_bytes) {
    json["any_timing_peak_allocated_bytes"] = *comparison.any_timing_peak_allocated_bytes;
  }
  // Only under context parallelism: comparisons without it keep their text.
  if (comparison.cp != 1) json["mesh"]["cp"] = comparison.cp;
  // Likewise only for a replay with --serial-collectives of a schedule that overlaps them.
  if (!comparison.serial_collectives.empty()) {
    json["serial_collectives"] = comparison.serial_collectives;
  }
  if (!comparison.overlaps_not_replayed.empty()) {
    json["overlaps_not_replayed"] = comparison.overlaps_not_replayed;
  }
  if (!comparison.node_layout.empty()) json["node_layout"] = comparison.node_layout;
  // Likewise only with several pipeline steps.
  if (comparison.pipeline_steps != 1) json["pipeline_steps"] = comparison.pipeline_steps;
  return json;
}

void print_comparison(std::ostream& out, const Comparison& c) {
  fmt::print(out, "schedule {}  backend {}  ranks {}  data {}\n", c.schedule_hash, c.backend,
             c.world_size, c.data_checked ? "checked" : "not checked");
  if (!c.node_layout.empty()) {
    fmt::print(out,
               "node layout: {} (--gpus-per-node); compute and peak memory compare, "
               "communication (*) crossed other links and does not\n",
               c.node_layout);
  } else if (!c.communication_comparable) {
    fmt::print(out,
               "scaled down: dp_shard {} of the schedule's {} ({} shards per rank); compute and "
               "peak memory compare, communication (*) ran over fewer ranks and does not\n",
               c.dp_shard, c.schedule_dp_shard, c.shards_per_rank);
  }
  if (!c.serial_collectives.empty()) {
    fmt::print(out,
               "replayed with --serial-collectives: the compute tasks' {} collectives ran in op "
               "order, the prediction overlaps them with the compute\n",
               c.serial_collectives);
  }
  if (!c.overlaps_not_replayed.empty()) {
    fmt::print(out,
               "overlaps not replayed ({}): they ran whole, their partner op not splitting "
               "into the group's parts; the prediction overlaps them\n",
               c.overlaps_not_replayed);
  }
  fmt::print(out, "{:<16} {:>12} {:>12} {:>9}\n", "", "predicted", "measured", "error");
  auto seconds_row = [&](const char* label, const ComparedValue& v) {
    fmt::print(out, "{:<16} {:>12} {:>12} {:>9}\n", label, format_seconds(v.predicted),
               format_seconds(v.measured), percent(v.relative_error));
  };
  const bool comm = c.communication_comparable;
  // Why not (review: a node layout's replay was said to run over fewer ranks).
  const char* comm_ran = c.node_layout.empty() ? "over fewer ranks" : "over other links";
  seconds_row(comm ? "step time" : "step time (*)", c.step_time_s);
  seconds_row("compute", c.compute_s);
  seconds_row(comm ? "exposed comm" : "exposed comm (*)", c.exposed_comm_s);
  fmt::print(out, "{:<16} {:>12} {:>12} {:>9}\n", "peak memory",
             format_bytes(static_cast<std::int64_t>(c.peak_allocated_bytes.predicted)),
             format_bytes(static_cast<std::int64_t>(c.peak_allocated_bytes.measured)),
             percent(c.peak_allocated_bytes.relative_error));
  if (c.any_timing_peak_allocated_bytes) {
    // The measured peak depends on the real order of starts and ends; under any order it
    // stays within the bound, unless the replay allocates what the Program does not.
    const std::int64_t bound = *c.any_timing_peak_allocated_bytes;
    const bool within = c.peak_allocated_bytes.measured <= static_cast<double>(bound);
    fmt::print(out, "{:<16} {:>12} {:>12} {:>9}\n", "  any timing", format_bytes(bound), "",
               within ? "within" : "ABOVE");
    if (!within) {
      fmt::print(out,
                 "the measured peak is above what the schedule's Program can allocate at any "
                 "timing: the replay allocated memory the Program does not (a bug)\n");
    }
  }
  if (c.rank_compute_s.size() > 1) {
    fmt::print(out, "{}\n", rank_compute_summary(c.rank_compute_s));
  }
  // What the figures are (measured-format.md): the sign, and whose compute.
  fmt::print(out,
             "error = predicted / measured - 1; compute = {} compute-stream busy time, median of "
             "the steps\n",
             c.stages.empty() ? "rank 0's" : "the last-ending rank's");
  if (!c.stages.empty()) {
    // One stage is gradient accumulation's (its microbatches without a pipeline).
    // Its schedule and virtual stages too (found by QA: an interleaved run read as 1F1B).
    const std::string schedule =
        c.pp == 1 ? ""
        : c.virtual_stages > 1
            ? fmt::format(" ({}, {} virtual stages)", c.pp_schedule, c.virtual_stages)
            : fmt::format(" ({})", c.pp_schedule);
    fmt::print(out, "\npipeline: {}{}, {}{}\n", counted(c.pp, "stage"), schedule,
               counted(c.microbatches, "microbatch", "microbatches"),
               c.pipeline_steps > 1 ? fmt::format(" x {} pipeline steps", c.pipeline_steps) : "");
    fmt::print(out, "{:>5} {:>12} {:>12} {:>9} {:>12} {:>12} {:>9} {:>12} {:>12} {:>9}\n", "stage",
               "busy pred", "measured", "error", "end pred", "measured", "error", "peak pred",
               "measured", "error");
    for (const StageComparison& stage : c.stages) {
      fmt::print(out, "{:>5} {:>12} {:>12} {:>9} {:>12} {:>12} {:>9} {:>12} {:>12} {:>9}\n",
                 stage.rank, format_seconds(stage.busy_s.predicted),
                 format_seconds(stage.busy_s.measured), percent(stage.busy_s.relative_error),
                 format_seconds(stage.end_s.predicted), format_seconds(stage.end_s.measured),
                 percent(stage.end_s.relative_error),
                 format_bytes(static_cast<std::int64_t>(stage.peak_allocated_bytes.predicted)),
                 format_bytes(static_cast<std::int64_t>(stage.peak_allocated_bytes.measured)),
                 percent(stage.peak_allocated_bytes.relative_error));
    }
    if (!comm) {
      // Found by QA: the step's rows were marked, the stages' not.
      fmt::print(out,
                 "the stages' busy and end times hold their communication too, which ran {} "
                 "(*)\n",
                 comm_ran);
    }
    // Each stage's measured peak against the most its actions can allocate at any timing.
    std::vector<std::string> bounds;
    bool all_within = true;
    for (const StageComparison& stage : c.stages) {
      if (stage.any_timing_peak_allocated_bytes <= 0) continue;
      const bool within = stage.peak_allocated_bytes.measured <=
                          static_cast<double>(stage.any_timing_peak_allocated_bytes);
      all_within = all_within && within;
      bounds.push_back(fmt::format("stage {} {} {}", stage.rank,
                                   format_bytes(stage.any_timing_peak_allocated_bytes),
                                   within ? "within" : "ABOVE"));
    }
    if (!bounds.empty()) fmt::print(out, "peak at any timing: {}\n", fmt::join(bounds, ", "));
    // The bound is today's composition of the stored Programs; a version 2 schedule of an
    // older fsdptune stores figures of its own, which can lie above it, as report says
    // (found by QA: compare showed +17.3% on such a file with no word).
    const auto stale = std::find_if(c.stages.begin(), c.stages.end(), [](const auto& stage) {
      return stage.any_timing_peak_allocated_bytes > 0 &&
             stage.peak_allocated_bytes.predicted >
                 static_cast<double>(stage.any_timing_peak_allocated_bytes);
    });
    if (stale != c.stages.end()) {
      fmt::print(out,
                 "stage {} stores a peak of {} allocated, above that bound: the schedule's "
                 "figures are an older fsdptune's composition; fsdptune simulate --plan gives "
                 "today's\n",
                 stale->rank,
                 format_bytes(static_cast<std::int64_t>(stale->peak_allocated_bytes.predicted)));
    }
    if (!all_within) {
      fmt::print(out,
                 "a measured stage peak is above what the stage's actions can allocate at any "
                 "timing: the replay allocated memory the schedule does not (a bug)\n");
    }
  }
  if (!c.actions_differing_most.empty()) {
    fmt::print(out, "\nactions differing most (duration, each stage's first rank):\n");
    fmt::print(out, "{:>5} {:>5} {:>10} {:<8} {:>12} {:>12} {:>9} {:>12} {:>12}\n", "stage",
               "chunk", "microbatch", "phase", "predicted", "measured", "error", "start pred",
               "measured");
    for (const ActionDifference& action : c.actions_differing_most) {
      fmt::print(out, "{:>5} {:>5} {:>10} {:<8} {:>12} {:>12} {:>9} {:>12} {:>12}\n", action.stage,
                 action.chunk, action.microbatch, action.backward ? "backward" : "forward",
                 format_seconds(action.duration_s.predicted),
                 format_seconds(action.duration_s.measured),
                 percent(action.duration_s.relative_error),
                 format_seconds(action.start_s.predicted), format_seconds(action.start_s.measured));
    }
    if (!comm) {
      // Found by QA: the stages' rows were marked, the actions' not, though a chunk's
      // gathers and reduce-scatters run inside its actions.
      fmt::print(out,
                 "the actions hold their chunk's communication too (a chunk kept gathered: its "
                 "all-gathers in microbatch 0's forward), which ran {} (*)\n",
                 comm_ran);
    }
  }
  if (c.tasks_differing_most.empty()) return;
  const bool chunks = !c.stages.empty();
  fmt::print(out, "\n{} differing most (duration{}):\n", comm ? "tasks" : "compute tasks",
             chunks ? ", median of each chunk task's runs on its stage's first rank" : "");
  // A pipeline's tasks lead with their chunk and end with their runs per step. The name
  // column as wide as the longest name (found by QA: tiny's copy-in tasks of 43 characters
  // pushed their figures right).
  std::size_t name_width = 40;
  for (const TaskDifference& task : c.tasks_differing_most) {
    name_width = std::max(name_width, task.name.size());
  }
  fmt::print(out, "{}{:>5} {:<{}} {:>12} {:>12} {:>9}{}\n", chunks ? "chunk " : "", "task", "name",
             name_width, "predicted", "measured", "error", chunks ? "  runs" : "");
  for (const TaskDifference& task : c.tasks_differing_most) {
    fmt::print(out, "{}{:>5} {:<{}} {:>12} {:>12} {:>9}{}\n",
               chunks ? fmt::format("{:>5} ", task.chunk) : "", task.task, task.name, name_width,
               format_seconds(task.duration_s.predicted), format_seconds(task.duration_s.measured),
               percent(task.duration_s.relative_error),
               chunks ? fmt::format(" {:>5}", task.runs) : "");
  }
}

}  // namespace fsdptune
