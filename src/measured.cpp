// measured.json (docs/measured-format.md).
#include "fsdptune/measured.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <system_error>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "fsdptune/error.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/job.hpp"
#include "fsdptune/schedule.hpp"
#include "fsdptune/units.hpp"

namespace fsdptune {
namespace {

constexpr const char* kFormat = "fsdptune-measured";

const nlohmann::json& field(const nlohmann::json& json, const char* name,
                            const std::string& source) {
  if (!json.is_object() || !json.contains(name)) {
    throw_bad_input(source + ": " + name, "missing field");
  }
  return json.at(name);
}

// Measured times: 0, or from a picosecond to a schedule's bound (kMaxScheduleSeconds). A
// positive time below a picosecond measures nothing, and divided by (a relative error)
// it overflowed to +inf% (1e-320 s); above 1e9 s printed 300-digit figures (1e308 s).
constexpr double kMinMeasuredSeconds = 1e-12;
constexpr double kMaxMeasuredSeconds = kMaxScheduleSeconds;

// The largest peak_allocated_bytes of `items` (ranks or stages); 0 of none.
template <typename T>
std::int64_t largest_peak(const std::vector<T>& items) {
  std::int64_t largest = 0;
  for (const T& item : items) largest = std::max(largest, item.peak_allocated_bytes);
  return largest;
}

// `part` of a step no longer than `step` (medians of per-step figures that are each within
// their step keep that order; slack for the rounding of a mean of two middle values).
bool within_step(double part, double step) { return part <= step * (1 + 1e-9) + 1e-12; }

double seconds_value(const nlohmann::json& value, const std::string& where) {
  if (!value.is_number()) throw_bad_input(where, "expected a number");
  const double result = value.get<double>() + 0.0;  // -0.0 reads as 0
  if (!(result == 0 || (result >= kMinMeasuredSeconds && result <= kMaxMeasuredSeconds))) {
    throw_bad_input(where, fmt::format("is {}, expected 0 or {} to {} s", value.dump(),
                                       kMinMeasuredSeconds, kMaxMeasuredSeconds));
  }
  return result;
}

double number(const nlohmann::json& json, const char* name, const std::string& source) {
  return seconds_value(field(json, name, source), source + ": " + name);
}

std::int64_t integer(const nlohmann::json& json, const char* name, const std::string& source) {
  const auto& value = field(json, name, source);
  if (!value.is_number_integer()) throw_bad_input(source + ": " + name, "expected an integer");
  const std::int64_t result = json_int64(value, source + ": " + name);
  if (result < 0) throw_bad_input(source + ": " + name, "must not be negative");
  return result;
}

// A count or size of the run: an integer in [minimum, maximum].
std::int64_t integer_in(const nlohmann::json& json, const char* name, const std::string& source,
                        std::int64_t minimum, std::int64_t maximum) {
  const std::int64_t result = integer(json, name, source);
  if (result < minimum || result > maximum) {
    throw_bad_input(source + ": " + name,
                    fmt::format("is {}, expected {} to {}", result, minimum, maximum));
  }
  return result;
}

// Byte counts: at most 1 PiB (a GPU's memory is ~1e11 bytes), so that they stay exact as
// the doubles compare and the reports take them in.
constexpr std::int64_t kMaxMeasuredBytes = std::int64_t{1} << 50;

std::int64_t bytes(const nlohmann::json& json, const char* name, const std::string& source) {
  return integer_in(json, name, source, 0, kMaxMeasuredBytes);
}

// A misspelt or stray field would be ignored: refuse it, as the other readers do.
void reject_unknown(const nlohmann::json& object, const std::vector<std::string>& known,
                    const std::string& source) {
  if (!object.is_object()) throw_bad_input(source, "expected an object");
  if (const auto key = unknown_field(object, known)) {
    throw_bad_input(source + ": " + *key, "unknown field",
                    "docs/measured-format.md lists the fields");
  }
}

std::string text(const nlohmann::json& json, const char* name, const std::string& source) {
  const auto& value = field(json, name, source);
  if (!value.is_string()) throw_bad_input(source + ": " + name, "expected a string");
  return value.get<std::string>();
}

// The largest chunk, microbatch or per-step task run count a replayed pipeline has:
// check_replayable bounds 2 x chunks x microbatches of every pipeline step by 32767 (the
// executor's message tags).
constexpr std::int64_t kMaxReplayedIndex = 32767;

// A version 5 pipeline rank's `actions` and `chunks` (RankMeasurement).
void read_pipeline_view(const nlohmann::json& json, const std::string& source,
                        RankMeasurement& rank) {
  if (!json.contains("actions")) {
    throw_bad_input(source + ": actions",
                    "missing field: the file has a top-level `pipeline` object, so each rank "
                    "holds its stage's actions and chunks",
                    "a run without pipeline parallelism has no `pipeline` object");
  }
  const auto& actions = field(json, "actions", source);
  if (!actions.is_array()) throw_bad_input(source + ": actions", "expected an array");
  for (std::size_t i = 0; i < actions.size(); ++i) {
    const std::string where = fmt::format("{}: actions[{}]", source, i);
    reject_unknown(actions[i], {"chunk", "microbatch", "backward", "start_s", "end_s"}, where);
    PipelineAction action;
    action.chunk = static_cast<int>(integer_in(actions[i], "chunk", where, 0, kMaxReplayedIndex));
    action.microbatch =
        static_cast<int>(integer_in(actions[i], "microbatch", where, 0, kMaxReplayedIndex));
    const auto& backward = field(actions[i], "backward", where);
    if (!backward.is_boolean()) throw_bad_input(where + ": backward", "expected true or false");
    action.backward = backward.get<bool>();
    action.start_s = number(actions[i], "start_s", where);
    action.end_s = number(actions[i], "end_s", where);
    if (action.end_s < action.start_s) throw_bad_input(where, "ends before it starts");
    // Within the rank's step, as its tasks (medians of per-step figures keep the order).
    if (!within_step(action.end_s, rank.step_time_s)) {
      throw_bad_input(where + ": end_s", fmt::format("ends at {} s, after the rank's step_time_s "
                                                     "{} s",
                                                     action.end_s, rank.step_time_s));
    }
    rank.actions.push_back(action);
  }
  const auto& chunks = field(json, "chunks", source);
  if (!chunks.is_array()) throw_bad_input(source + ": chunks", "expected an array");
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    const std::string where = fmt::format("{}: chunks[{}]", source, c);
    reject_unknown(chunks[c], {"chunk", "tasks"}, where);
    MeasuredChunk chunk;
    chunk.chunk = static_cast<int>(integer_in(chunks[c], "chunk", where, 0, kMaxReplayedIndex));
    // The rank's chunks, ascending, each once (compare doubled a chunk given twice).
    if (!rank.chunks.empty() && chunk.chunk <= rank.chunks.back().chunk) {
      throw_bad_input(where + ": chunk",
                      fmt::format("{} after chunk {}: expected ascending, each once", chunk.chunk,
                                  rank.chunks.back().chunk));
    }
    const auto& tasks = field(chunks[c], "tasks", where);
    if (!tasks.is_array()) throw_bad_input(where + ": tasks", "expected an array");
    for (std::size_t t = 0; t < tasks.size(); ++t) {
      const std::string at = fmt::format("{}: tasks[{}]", where, t);
      reject_unknown(tasks[t], {"runs", "duration_s"}, at);
      chunk.tasks.push_back({integer_in(tasks[t], "runs", at, 0, kMaxReplayedIndex),
                             number(tasks[t], "duration_s", at)});
    }
    rank.chunks.push_back(std::move(chunk));
  }
}

}  // namespace

std::vector<double> rank_compute_s(const Program& program, const MeasuredResult& measured) {
  const std::vector<Task>& tasks = program.tasks;
  const bool every_rank_timed =
      static_cast<std::int64_t>(measured.ranks.size()) == measured.world_size &&
      std::all_of(measured.ranks.begin(), measured.ranks.end(),
                  [&](const RankMeasurement& rank) { return rank.timings.size() == tasks.size(); });
  if (measured.pipeline || !every_rank_timed) return {};
  std::vector<double> compute_s;
  for (const RankMeasurement& rank : measured.ranks) {
    double seconds = 0;
    for (std::size_t t = 0; t < tasks.size(); ++t) {
      if (on_compute_stream(program, tasks[t])) {
        seconds += rank.timings[t].end_s - rank.timings[t].start_s;
      }
    }
    compute_s.push_back(seconds);
  }
  return compute_s;
}

nlohmann::json measured_to_json(const MeasuredResult& measured) {
  nlohmann::json timings = nlohmann::json::array();
  for (const TaskTiming& timing : measured.timings) {
    timings.push_back({{"start_s", timing.start_s}, {"end_s", timing.end_s}});
  }
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankMeasurement& rank : measured.ranks) {
    nlohmann::json rank_timings = nlohmann::json::array();
    for (const TaskTiming& timing : rank.timings) {
      rank_timings.push_back({{"start_s", timing.start_s}, {"end_s", timing.end_s}});
    }
    nlohmann::json view = {{"step_time_s", rank.step_time_s},
                           {"peak_allocated_bytes", rank.peak_allocated_bytes},
                           {"timings", rank_timings}};
    if (measured.pipeline) {
      nlohmann::json actions = nlohmann::json::array();
      for (const PipelineAction& action : rank.actions) {
        actions.push_back(pipeline_action_to_json(action));
      }
      nlohmann::json chunks = nlohmann::json::array();
      for (const MeasuredChunk& chunk : rank.chunks) {
        nlohmann::json tasks = nlohmann::json::array();
        for (const MeasuredChunkTask& task : chunk.tasks) {
          tasks.push_back({{"runs", task.runs}, {"duration_s", task.duration_s}});
        }
        chunks.push_back({{"chunk", chunk.chunk}, {"tasks", tasks}});
      }
      view["actions"] = actions;
      view["chunks"] = chunks;
    }
    ranks.push_back(view);
  }
  nlohmann::json environment = nlohmann::json::object();
  for (const auto& [key, value] : measured.environment) environment[key] = value;
  nlohmann::json json = {{"format", kFormat},
                         {"version", measured.version},
                         {"schedule_hash", measured.schedule_hash},
                         {"backend", measured.backend},
                         {"world_size", measured.world_size},
                         {"mesh",
                          {{"pp", measured.pp},
                           {"dp_replicate", measured.dp_replicate},
                           {"dp_shard", measured.shard_ranks()},
                           {"tp", measured.tp},
                           {"shards_per_rank", measured.shards_per_rank}}},
                         {"iterations", measured.iterations},
                         {"warmup", measured.warmup},
                         {"data_checked", measured.data_checked},
                         {"step_times_s", measured.step_times_s},
                         {"step_time_s", measured.step_time_s},
                         {"compute_s", measured.compute_s},
                         {"exposed_comm_s", measured.exposed_comm_s},
                         {"peak_allocated_bytes", measured.peak_allocated_bytes},
                         {"timings", timings},
                         {"ranks", ranks},
                         {"environment", environment}};
  // Only under context parallelism: files written before the field keep their text.
  if (measured.cp != 1) json["mesh"]["cp"] = measured.cp;
  if (measured.pipeline) {
    const MeasuredPipeline& pipeline = *measured.pipeline;
    nlohmann::json stages = nlohmann::json::array();
    for (const MeasuredStage& stage : pipeline.stages) {
      stages.push_back({{"rank", stage.rank},
                        {"busy_s", stage.busy_s},
                        {"pipeline_end_s", stage.pipeline_end_s},
                        {"end_s", stage.end_s},
                        {"peak_allocated_bytes", stage.peak_allocated_bytes}});
    }
    json["pipeline"] = {{"microbatches", pipeline.microbatches},
                        {"virtual_stages", pipeline.virtual_stages},
                        {"schedule", pipeline.schedule},
                        {"message_bytes", pipeline.message_bytes},
                        {"stages", stages}};
    // Only with several pipeline steps: files written before the field keep their text.
    if (pipeline.pipeline_steps != 1) json["pipeline"]["pipeline_steps"] = pipeline.pipeline_steps;
  }
  return json;
}

double measured_median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

double prediction_error(double predicted, double measured) {
  if (measured != 0) return (predicted - measured) / measured;
  return predicted != 0 ? 1 : 0;
}

std::string node_layout_difference(const MeasuredResult& measured, const JobSpec& job) {
  const auto node = measured.environment.find("ranks_per_node");
  if (node == measured.environment.end() || measured.shards_per_rank != 1) return "";
  const std::int64_t expected = std::min(job.gpus, job.gpus_per_node);
  if (node->second == std::to_string(expected)) return "";
  // (QA: one rank per node, two hosts of one rank each, read "1 ranks per node")
  return fmt::format("{} {} per node, the schedule's job {}", node->second,
                     node->second == "1" ? "rank" : "ranks", expected);
}

std::string host_oversubscription(const MeasuredResult& measured) {
  const auto node = measured.environment.find("ranks_per_node");
  const auto threads = measured.environment.find("hardware_threads");
  if (measured.backend != "cpu" || node == measured.environment.end() ||
      threads == measured.environment.end()) {
    return "";
  }
  // "4", or "3 to 8": the most ranks on a host.
  const std::string& ranks_text = node->second;
  const std::size_t to = ranks_text.rfind(' ');
  const std::string most = to == std::string::npos ? ranks_text : ranks_text.substr(to + 1);
  std::int64_t ranks = 0;
  std::int64_t cores = 0;
  const auto whole = [](const std::string& digits, std::int64_t& value) {
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    return error == std::errc() && end == digits.data() + digits.size() && value > 0;
  };
  // (hardware_concurrency may say 0, not known: no note.)
  if (!whole(most, ranks) || !whole(threads->second, cores) || ranks <= cores) return "";
  const std::string thread_count = counted(cores, "hardware thread");
  // Hosts of different counts: the busiest's, against rank 0's threads (review: said as one
  // host's).
  if (to != std::string::npos) {
    return fmt::format("up to {} ranks a host, rank 0's host of {}", ranks, thread_count);
  }
  return fmt::format("{} ranks on a host of {}", ranks, thread_count);
}

MeasuredResult measured_from_json(const nlohmann::json& json, const std::string& source) {
  if (!json.is_object()) throw_bad_input(source, "expected a JSON object");
  if (const std::string format = text(json, "format", source); format != kFormat) {
    // The value found too (found by QA: "expected" alone).
    throw_bad_input(source + ": format",
                    fmt::format("expected \"{}\", got {}", kFormat, nlohmann::json(format).dump()),
                    "is this a measured.json written by fsdptune validate?");
  }
  MeasuredResult measured;
  if (const auto at = json.find("version");
      at != json.end() && json_integer_outside(*at, 1, kMeasuredFormatVersion)) {
    throw_bad_input(source + ": version",
                    fmt::format("unsupported version {} (this fsdptune reads versions 1 to {})",
                                at->dump(), kMeasuredFormatVersion));
  }
  const std::int64_t version = integer(json, "version", source);
  measured.version = static_cast<int>(version);
  const int read_version = measured.version;
  // The fields of the file's version (mesh since 2, ranks since 3, pipeline since 4).
  std::vector<std::string> known = {
      "format",     "version",        "schedule_hash",        "backend",      "world_size",
      "iterations", "warmup",         "data_checked",         "step_times_s", "step_time_s",
      "compute_s",  "exposed_comm_s", "peak_allocated_bytes", "timings",      "environment"};
  if (read_version >= 2) known.push_back("mesh");
  if (read_version >= 3) known.push_back("ranks");
  if (read_version >= 4) known.push_back("pipeline");
  reject_unknown(json, known, source);
  measured.schedule_hash = text(json, "schedule_hash", source);
  measured.backend = text(json, "backend", source);
  if (measured.backend != "cpu" && measured.backend != "cuda") {
    throw_bad_input(
        source + ": backend",
        fmt::format("'{}' is not a backend validate runs (cpu or cuda)", measured.backend));
  }
  // As many ranks as a job may have GPUs (normalize_job).
  measured.world_size = integer_in(json, "world_size", source, 1, kMaxJobGpus);
  if (measured.version == 1) {
    // Version 1 replayed pure FSDP with one shard per rank.
    measured.dp_shard = measured.world_size;
  } else {
    const std::string where = source + ": mesh";
    const auto& mesh = field(json, "mesh", source);
    if (!mesh.is_object()) throw_bad_input(where, "expected an object");
    // mesh.pp since version 4 (version 3 read pp 1).
    std::vector<std::string> mesh_fields = {"dp_replicate", "dp_shard", "tp", "shards_per_rank",
                                            "cp"};
    if (read_version >= 4) mesh_fields.push_back("pp");
    reject_unknown(mesh, mesh_fields, where);
    measured.dp_replicate = integer(mesh, "dp_replicate", where);
    measured.dp_shard = integer(mesh, "dp_shard", where);
    measured.tp = integer(mesh, "tp", where);
    measured.shards_per_rank = integer(mesh, "shards_per_rank", where);
    if (mesh.contains("cp")) measured.cp = integer(mesh, "cp", where);
    if (read_version >= 4) measured.pp = integer(mesh, "pp", where);
    if (measured.pp < 1 || measured.dp_replicate < 1 || measured.dp_shard < 1 || measured.tp < 1 ||
        measured.shards_per_rank < 1 || measured.cp < 1) {
      throw_bad_input(where, "sizes must be at least 1");
    }
    if (measured.dp_shard % measured.cp != 0) {
      throw_bad_input(where + ": cp", fmt::format("cp {} does not divide dp_shard {}", measured.cp,
                                                  measured.dp_shard));
    }
    if (measured.shards_per_rank > kMaxJobGpus) {
      throw_bad_input(
          where + ": shards_per_rank",
          fmt::format("is {}, expected at most {}", measured.shards_per_rank, kMaxJobGpus));
    }
    // In floating point: exact whenever the product can be world_size (< 2^53), and the
    // sizes are not bounded yet, so their integer product may not fit.
    if (static_cast<double>(measured.pp) * static_cast<double>(measured.dp_replicate) *
            static_cast<double>(measured.dp_shard) * static_cast<double>(measured.tp) !=
        static_cast<double>(measured.world_size)) {
      throw_bad_input(where, fmt::format("pp x dp_replicate x dp_shard x tp = {} x {} x {} x {} "
                                         "is not world_size {}",
                                         measured.pp, measured.dp_replicate, measured.dp_shard,
                                         measured.tp, measured.world_size));
    }
  }
  measured.iterations = integer_in(json, "iterations", source, 1, kMaxMeasuredIterations);
  measured.warmup = integer(json, "warmup", source);
  const auto& checked = field(json, "data_checked", source);
  if (!checked.is_boolean()) throw_bad_input(source + ": data_checked", "expected true or false");
  measured.data_checked = checked.get<bool>();
  const auto& steps = field(json, "step_times_s", source);
  if (!steps.is_array()) throw_bad_input(source + ": step_times_s", "expected an array");
  for (std::size_t i = 0; i < steps.size(); ++i) {
    measured.step_times_s.push_back(
        seconds_value(steps[i], fmt::format("{}: step_times_s[{}]", source, i)));
  }
  if (static_cast<std::int64_t>(measured.step_times_s.size()) != measured.iterations) {
    throw_bad_input(source + ": step_times_s",
                    fmt::format("{} for {}",
                                counted(static_cast<std::int64_t>(measured.step_times_s.size()),
                                        "entry", "entries"),
                                counted(measured.iterations, "iteration")));
  }
  measured.step_time_s = number(json, "step_time_s", source);
  // validate writes the median of the steps (executor.cpp): a step time that is not is
  // another run's, or edited.
  const double median = measured_median(measured.step_times_s);
  if (!(measured.step_time_s > 0)) {
    throw_bad_input(source + ": step_time_s", "is 0 s: a measured step takes time");
  }
  if (std::abs(measured.step_time_s - median) > 1e-9 * std::max(median, 1e-12)) {
    throw_bad_input(source + ": step_time_s",
                    fmt::format("is {} s, but the median of step_times_s is {} s",
                                measured.step_time_s, median));
  }
  measured.compute_s = number(json, "compute_s", source);
  // Every replay computes (QA, 2026-12-05: 0 was compared at +100%).
  if (!(measured.compute_s > 0)) {
    throw_bad_input(source + ": compute_s", "is 0 s: every replay runs compute tasks");
  }
  measured.exposed_comm_s = number(json, "exposed_comm_s", source);
  // In every step rank 0's compute and exposed communication lie within its own step, and
  // that within the run's (the slowest rank's); medians keep the order.
  for (const auto& [name, value] : {std::pair{"compute_s", measured.compute_s},
                                    std::pair{"exposed_comm_s", measured.exposed_comm_s}}) {
    if (!within_step(value, measured.step_time_s)) {
      throw_bad_input(
          fmt::format("{}: {}", source, name),
          fmt::format("{} s is longer than step_time_s {} s", value, measured.step_time_s));
    }
  }
  measured.peak_allocated_bytes = bytes(json, "peak_allocated_bytes", source);
  // Every replay allocates its parameter shards and buffers (compare printed +100% against
  // a hand-edited 0).
  if (measured.peak_allocated_bytes == 0) {
    throw_bad_input(source + ": peak_allocated_bytes", "is 0: every replay allocates memory");
  }
  const auto& timings = field(json, "timings", source);
  if (!timings.is_array()) throw_bad_input(source + ": timings", "expected an array");
  for (std::size_t i = 0; i < timings.size(); ++i) {
    const std::string where = fmt::format("{}: timings[{}]", source, i);
    reject_unknown(timings[i], {"start_s", "end_s"}, where);
    TaskTiming timing{number(timings[i], "start_s", where), number(timings[i], "end_s", where)};
    if (timing.end_s < timing.start_s) throw_bad_input(where, "ends before it starts");
    measured.timings.push_back(timing);
  }
  if (read_version >= 3) {
    const auto& ranks = field(json, "ranks", source);
    if (!ranks.is_array()) throw_bad_input(source + ": ranks", "expected an array");
    // Empty in a file re-written from version 1 or 2 (no per-rank views were measured).
    if (!ranks.empty() && static_cast<std::int64_t>(ranks.size()) != measured.world_size) {
      throw_bad_input(
          source + ": ranks",
          fmt::format("{}, expected one per rank of world_size {} (or none)",
                      counted(static_cast<std::int64_t>(ranks.size()), "entry", "entries"),
                      measured.world_size));
    }
    // Every rank's timings one length, another than the top-level's: the top-level's is
    // the one cut short or edited.
    const auto timings_size = [](const nlohmann::json& rank) -> std::optional<std::size_t> {
      if (!rank.is_object() || !rank.contains("timings") || !rank.at("timings").is_array()) {
        return std::nullopt;
      }
      return rank.at("timings").size();
    };
    if (!ranks.empty()) {
      const std::optional<std::size_t> first = timings_size(ranks.front());
      if (first && *first != measured.timings.size() &&
          std::all_of(ranks.begin(), ranks.end(),
                      [&](const nlohmann::json& rank) { return timings_size(rank) == first; })) {
        throw_bad_input(source + ": timings",
                        fmt::format("{}, while every rank's timings have {}",
                                    counted(static_cast<std::int64_t>(measured.timings.size()),
                                            "entry", "entries"),
                                    *first));
      }
    }
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      const std::string where = fmt::format("{}: ranks[{}]", source, r);
      // A rank's peak since version 4, its actions and chunks since 5 in a pipeline run.
      const bool pipeline_view = read_version >= 5 && json.contains("pipeline");
      std::vector<std::string> rank_fields = {"step_time_s", "timings"};
      if (read_version >= 4) rank_fields.push_back("peak_allocated_bytes");
      if (pipeline_view) rank_fields.insert(rank_fields.end(), {"actions", "chunks"});
      reject_unknown(ranks[r], rank_fields, where);
      RankMeasurement rank;
      rank.step_time_s = number(ranks[r], "step_time_s", where);
      if (read_version >= 4) {
        rank.peak_allocated_bytes = bytes(ranks[r], "peak_allocated_bytes", where);
      }
      if (!within_step(rank.step_time_s, measured.step_time_s)) {
        throw_bad_input(where + ": step_time_s",
                        fmt::format("{} s is longer than the run's step_time_s {} s (the "
                                    "slowest rank's)",
                                    rank.step_time_s, measured.step_time_s));
      }
      const auto& rank_timings = field(ranks[r], "timings", where);
      if (!rank_timings.is_array() || rank_timings.size() != measured.timings.size()) {
        throw_bad_input(where + ": timings", "expected one entry per task, like timings");
      }
      for (std::size_t i = 0; i < rank_timings.size(); ++i) {
        const std::string at = fmt::format("{}: timings[{}]", where, i);
        reject_unknown(rank_timings[i], {"start_s", "end_s"}, at);
        TaskTiming timing{number(rank_timings[i], "start_s", at),
                          number(rank_timings[i], "end_s", at)};
        if (timing.end_s < timing.start_s) throw_bad_input(at, "ends before it starts");
        if (!within_step(timing.end_s, rank.step_time_s)) {
          throw_bad_input(at, fmt::format("ends at {} s, after the rank's step_time_s {} s",
                                          timing.end_s, rank.step_time_s));
        }
        rank.timings.push_back(timing);
      }
      if (pipeline_view) read_pipeline_view(ranks[r], where, rank);
      measured.ranks.push_back(std::move(rank));
    }
    // The top-level timings are rank 0's (validate gathers them from it): a difference is
    // an edit (report read the one, compare's rank figures the other).
    if (!measured.ranks.empty()) {
      const std::vector<TaskTiming>& first = measured.ranks.front().timings;
      for (std::size_t t = 0; t < measured.timings.size() && t < first.size(); ++t) {
        if (measured.timings[t].start_s != first[t].start_s ||
            measured.timings[t].end_s != first[t].end_s) {
          throw_bad_input(fmt::format("{}: timings[{}]", source, t),
                          "differs from ranks[0].timings: the top-level timings are rank 0's");
        }
      }
    }
    // Every rank of a pipeline run replays its stage's chunks and actions: none on one rank
    // beside another's is a file cut short or edited (compare read only each stage's first
    // rank; found probing: every rank's actions emptied, their chunks kept, was accepted).
    // A file re-written from version 4, which recorded neither, has none on every rank.
    const auto recorded = [](const RankMeasurement& rank) {
      return !rank.actions.empty() || !rank.chunks.empty();
    };
    const auto pipelined = std::find_if(measured.ranks.begin(), measured.ranks.end(), recorded);
    for (std::size_t r = 0; r < measured.ranks.size() && pipelined != measured.ranks.end(); ++r) {
      const RankMeasurement& rank = measured.ranks[r];
      const auto by = pipelined - measured.ranks.begin();
      if (rank.chunks.empty()) {
        throw_bad_input(fmt::format("{}: ranks[{}]: chunks", source, r),
                        fmt::format("empty, while ranks[{}] has {} chunks and {} actions: every "
                                    "rank of a pipeline run replays its stage's chunks",
                                    by, pipelined->chunks.size(), pipelined->actions.size()));
      }
      if (rank.actions.empty()) {
        throw_bad_input(fmt::format("{}: ranks[{}]: actions", source, r),
                        fmt::format("empty, while ranks[{}] has {} chunks and {} actions: every "
                                    "rank of a pipeline run replays its stage's actions",
                                    by, pipelined->chunks.size(), pipelined->actions.size()));
      }
    }
    // validate writes the largest rank's peak (version 4 on, where ranks have peaks; a file
    // re-written from version 3 has ranks of peak 0, not measured).
    if (read_version >= 4 && !measured.ranks.empty()) {
      const std::int64_t largest = largest_peak(measured.ranks);
      if (largest > 0 && largest != measured.peak_allocated_bytes) {
        throw_bad_input(source + ": peak_allocated_bytes",
                        fmt::format("is {}, but the largest rank's peak is {}",
                                    measured.peak_allocated_bytes, largest));
      }
    }
  }
  if (read_version >= 4 && json.contains("pipeline")) {
    const std::string where = source + ": pipeline";
    const auto& pipeline_json = json.at("pipeline");
    if (!pipeline_json.is_object()) throw_bad_input(where, "expected an object");
    reject_unknown(
        pipeline_json,
        {"microbatches", "pipeline_steps", "virtual_stages", "schedule", "message_bytes", "stages"},
        where);
    MeasuredPipeline pipeline;
    pipeline.microbatches = integer(pipeline_json, "microbatches", where);
    if (pipeline_json.contains("pipeline_steps")) {
      pipeline.pipeline_steps = integer(pipeline_json, "pipeline_steps", where);
    }
    pipeline.virtual_stages = integer(pipeline_json, "virtual_stages", where);
    pipeline.schedule = text(pipeline_json, "schedule", where);
    (void)pipeline_schedule_from_string(pipeline.schedule, where + ": schedule");
    pipeline.message_bytes = bytes(pipeline_json, "message_bytes", where);
    if (pipeline.microbatches < 1 || pipeline.virtual_stages < 1 || pipeline.pipeline_steps < 1) {
      throw_bad_input(where, "microbatches, pipeline_steps and virtual_stages must be at least 1");
    }
    const auto& stages = field(pipeline_json, "stages", where);
    if (!stages.is_array() || static_cast<std::int64_t>(stages.size()) != measured.pp) {
      throw_bad_input(where + ": stages", "expected one entry per pipeline stage (mesh.pp)");
    }
    for (std::size_t r = 0; r < stages.size(); ++r) {
      const std::string at = fmt::format("{}: stages[{}]", where, r);
      reject_unknown(stages[r],
                     {"rank", "busy_s", "pipeline_end_s", "end_s", "peak_allocated_bytes"}, at);
      MeasuredStage stage;
      if (integer(stages[r], "rank", at) != static_cast<std::int64_t>(r)) {
        throw_bad_input(at + ": rank", "expected " + std::to_string(r));
      }
      stage.rank = static_cast<int>(r);
      stage.busy_s = number(stages[r], "busy_s", at);
      stage.pipeline_end_s = number(stages[r], "pipeline_end_s", at);
      stage.end_s = number(stages[r], "end_s", at);
      stage.peak_allocated_bytes = bytes(stages[r], "peak_allocated_bytes", at);
      // Per rank and step, the actions' busy time lies within the last action's end, and
      // that within the last task's; medians and the largest over ranks keep the order
      // (a rounding's worth of slack for the sum of durations).
      if (stage.busy_s > stage.pipeline_end_s * (1 + 1e-9) + 1e-12) {
        throw_bad_input(at + ": busy_s", fmt::format("{} is above pipeline_end_s {}", stage.busy_s,
                                                     stage.pipeline_end_s));
      }
      if (stage.pipeline_end_s > stage.end_s) {
        throw_bad_input(at + ": pipeline_end_s",
                        fmt::format("{} is after end_s {}", stage.pipeline_end_s, stage.end_s));
      }
      // A stage ends with its slowest rank, within the step (QA, 2026-12-05: an end_s of
      // four steps was compared).
      if (!within_step(stage.end_s, measured.step_time_s)) {
        throw_bad_input(at + ": end_s", fmt::format("{} s is after the run's step_time_s {} s",
                                                    stage.end_s, measured.step_time_s));
      }
      if (stage.peak_allocated_bytes > measured.peak_allocated_bytes) {
        throw_bad_input(at + ": peak_allocated_bytes",
                        fmt::format("{} is above the run's peak_allocated_bytes {}",
                                    stage.peak_allocated_bytes, measured.peak_allocated_bytes));
      }
      pipeline.stages.push_back(stage);
    }
    // A stage's peak and end are the largest of its ranks' (validate: ranks r * world / pp
    // on, a stage each); a tester's stage peak of 1 B beside its rank's 48 MiB was compared
    // at +5.6e9 %. Ranks of peak 0 (a file re-written from version 3) measured none.
    const std::int64_t stage_size = measured.world_size / std::max<std::int64_t>(measured.pp, 1);
    if (stage_size > 0 &&
        static_cast<std::int64_t>(measured.ranks.size()) == stage_size * measured.pp &&
        largest_peak(measured.ranks) > 0) {
      for (std::size_t s = 0; s < pipeline.stages.size(); ++s) {
        const std::int64_t first = static_cast<std::int64_t>(s) * stage_size;
        const std::string ranks =
            fmt::format("its ranks ({} to {})", first, first + stage_size - 1);
        std::int64_t ranks_peak = 0;
        double ranks_end_s = 0;
        for (std::int64_t r = first; r < first + stage_size; ++r) {
          const RankMeasurement& rank = measured.ranks[static_cast<std::size_t>(r)];
          ranks_peak = std::max(ranks_peak, rank.peak_allocated_bytes);
          ranks_end_s = std::max(ranks_end_s, rank.step_time_s);
        }
        if (pipeline.stages[s].end_s != ranks_end_s) {
          throw_bad_input(fmt::format("{}: stages[{}]: end_s", where, s),
                          fmt::format("is {} s, but the latest step_time_s of {} is {} s",
                                      pipeline.stages[s].end_s, ranks, ranks_end_s));
        }
        if (pipeline.stages[s].peak_allocated_bytes != ranks_peak) {
          throw_bad_input(fmt::format("{}: stages[{}]: peak_allocated_bytes", where, s),
                          fmt::format("is {}, but the largest peak of {} is {}",
                                      pipeline.stages[s].peak_allocated_bytes, ranks, ranks_peak));
        }
      }
    }
    // The run's peak is the largest rank's, so the largest stage's.
    const std::int64_t largest = largest_peak(pipeline.stages);
    if (largest > 0 && largest != measured.peak_allocated_bytes) {
      throw_bad_input(where + ": stages",
                      fmt::format("the largest stage peak_allocated_bytes is {}, the run's {}",
                                  largest, measured.peak_allocated_bytes));
    }
    measured.pipeline = std::move(pipeline);
  }
  measured.version = kMeasuredFormatVersion;
  const auto& environment = field(json, "environment", source);
  if (!environment.is_object()) throw_bad_input(source + ": environment", "expected an object");
  for (const auto& [key, value] : environment.items()) {
    if (!value.is_string()) {
      throw_bad_input(source + ": environment." + key, "expected a string");
    }
    measured.environment[key] = value.get<std::string>();
  }
  return measured;
}

}  // namespace fsdptune
