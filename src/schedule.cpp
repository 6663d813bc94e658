// The schedule file (docs/schedule-format.md): JSON conversion, validation against the
// workload the schedule was made for, the stable hash, and the torchtitan export.
#include "fsdptune/schedule.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fsdptune/error.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/units.hpp"

namespace fsdptune {
namespace {

using nlohmann::json;

constexpr const char* kScheduleFormatName = "fsdptune-schedule";
constexpr const char* kTorchtitanFormatName = "fsdptune-torchtitan";

constexpr std::array<StreamRole, 4> kStreamRoles = {StreamRole::kCompute, StreamRole::kAllGather,
                                                    StreamRole::kReduceScatter,
                                                    StreamRole::kCommunication};
constexpr std::array<TaskKind, 9> kTaskKinds = {
    TaskKind::kForward,       TaskKind::kRecompute, TaskKind::kBackward,
    TaskKind::kCopyIn,        TaskKind::kAllGather, TaskKind::kCopyOut,
    TaskKind::kReduceScatter, TaskKind::kAllReduce, TaskKind::kOptimizer};
constexpr std::array<MemoryCategory, static_cast<int>(MemoryCategory::kCount)> kCategories = {
    MemoryCategory::kShardedState, MemoryCategory::kGatheredParams, MemoryCategory::kGradients,
    MemoryCategory::kActivations, MemoryCategory::kWorkspace};

// Bounds of a schedule's numbers, far beyond any real schedule (a 405B step: seconds per
// step, 1e11 bytes per GPU), under which the simulator's clock and memory sums, the
// executor's buffers and the reports' axes stay finite and within 64 bits
// (docs/schedule-format.md "Limits").
constexpr double kMaxSeconds = kMaxScheduleSeconds;               // any time
constexpr double kMaxRate = 1e18;                                 // tokens/s, MFU, fractions
constexpr std::int64_t kMaxBytes = kMaxScheduleBytes;             // any byte or element count
constexpr std::int64_t kMaxProgramBytes = std::int64_t{1} << 60;  // a Program's sum of them
constexpr std::size_t kMaxStreams = 64;

// The enum spellings are owned by their to_string; parsing inverts it so the two can
// never disagree.
template <typename Enum, std::size_t N>
Enum enum_from_string(const std::string& text, const std::array<Enum, N>& values,
                      const std::string& where) {
  std::string known;
  for (const Enum value : values) {
    if (to_string(value) == text) return value;
    known += (known.empty() ? "" : ", ") + to_string(value);
  }
  throw_bad_input(where, fmt::format("unknown value \"{}\" (expected one of: {})", text, known));
}

// Reads the fields of one JSON object, naming `source` and the dotted path of a field
// in every error ("schedule.json: program.tasks[3].deps"). It records the keys asked for
// (at, has) so that finish() can refuse the others: a misspelt field would otherwise be
// ignored, as the model, job, hardware, plan and profile readers refuse them.
class Fields {
 public:
  Fields(const json& object, std::string source, std::string path)
      : object_(object), source_(std::move(source)), path_(std::move(path)) {
    if (!object_.is_object()) throw_bad_input(where_self(), "expected a JSON object");
  }

  std::string where(const std::string& key) const {
    return fmt::format("{}: {}{}", source_, path_.empty() ? "" : path_ + ".", key);
  }
  std::string child(const std::string& key) const {
    return path_.empty() ? key : path_ + "." + key;
  }
  const std::string& source() const { return source_; }

  bool has(const std::string& key) const {
    asked_.push_back(key);
    return object_.contains(key);
  }
  const json& at(const std::string& key) const {
    asked_.push_back(key);
    const auto it = object_.find(key);
    if (it == object_.end()) throw_bad_input(where(key), "missing field");
    return *it;
  }
  std::int64_t integer(const std::string& key) const {
    const json& value = at(key);
    if (!value.is_number_integer()) throw_bad_input(where(key), "expected an integer");
    return json_int64(value, where(key));
  }
  std::int64_t non_negative(const std::string& key) const {
    const std::int64_t value = integer(key);
    if (value < 0) throw_bad_input(where(key), fmt::format("must be >= 0, got {}", value));
    return value;
  }
  // An integer in [low, high].
  std::int64_t integer_in(const std::string& key, std::int64_t low, std::int64_t high) const {
    const std::int64_t value = integer(key);
    if (value < low || value > high) {
      throw_bad_input(where(key), fmt::format("is {}, expected {} to {}", value, low, high));
    }
    return value;
  }
  // An index or id (-1 allowed where the field says "none").
  int index(const std::string& key) const {
    return static_cast<int>(integer_in(key, -1, std::numeric_limits<int>::max()));
  }
  // A count held in an int.
  int count(const std::string& key) const {
    return static_cast<int>(integer_in(key, 0, std::numeric_limits<int>::max()));
  }
  std::int64_t bytes(const std::string& key) const { return integer_in(key, 0, kMaxBytes); }
  // A number in [0, high].
  double number_in(const std::string& key, double high) const {
    const double value = number(key);
    if (!(value >= 0 && value <= high)) {
      throw_bad_input(where(key), fmt::format("is {}, expected 0 to {}", value, high));
    }
    return value;
  }
  double seconds(const std::string& key) const { return number_in(key, kMaxSeconds); }
  double rate(const std::string& key) const { return number_in(key, kMaxRate); }
  std::uint64_t unsigned_integer(const std::string& key) const {
    const json& value = at(key);
    if (!value.is_number_unsigned()) {
      throw_bad_input(where(key), "expected a non-negative integer");
    }
    return value.get<std::uint64_t>();
  }
  double number(const std::string& key) const {
    const json& value = at(key);
    if (!value.is_number()) throw_bad_input(where(key), "expected a number");
    return value.get<double>();
  }
  bool boolean(const std::string& key) const {
    const json& value = at(key);
    if (!value.is_boolean()) throw_bad_input(where(key), "expected true or false");
    return value.get<bool>();
  }
  std::string string(const std::string& key) const {
    const json& value = at(key);
    if (!value.is_string()) throw_bad_input(where(key), "expected a string");
    return value.get<std::string>();
  }
  const json& array(const std::string& key) const {
    const json& value = at(key);
    if (!value.is_array()) throw_bad_input(where(key), "expected an array");
    return value;
  }
  Fields object(const std::string& key) const { return Fields(at(key), source_, child(key)); }
  // A field the reader does not need but that belongs there.
  void allow(const std::string& key) const { asked_.push_back(key); }
  // Refuses a field that was not asked for.
  void finish() const {
    if (const auto key = unknown_field(object_, asked_)) {
      throw_bad_input(where(*key), "unknown field", "docs/schedule-format.md lists the fields");
    }
  }

 private:
  std::string where_self() const {
    return path_.empty() ? source_ : fmt::format("{}: {}", source_, path_);
  }
  const json& object_;
  std::string source_;
  std::string path_;
  mutable std::vector<std::string> asked_;
};

std::string indexed(const std::string& path, std::size_t index) {
  return fmt::format("{}[{}]", path, index);
}

// An element of an array of indices (unit or task ids): an integer that fits in an int.
int index_element(const json& value, const std::string& where, const char* what) {
  if (!value.is_number_integer() || value.get<std::int64_t>() < -1 ||
      value.get<std::int64_t>() > std::numeric_limits<int>::max()) {
    throw_bad_input(where, fmt::format("expected {}, got {}", what, value.dump()));
  }
  return value.get<int>();
}

// ---- to JSON ----

json breakdown_to_json(const MemoryBreakdown& breakdown) {
  json out = json::object();
  for (const MemoryCategory category : kCategories) {
    out[to_string(category)] = breakdown[static_cast<int>(category)];
  }
  return out;
}

json summary_to_json(const PlanSummary& summary) {
  return json{{"plan_name", summary.plan_name},
              {"step_time_s", summary.step_time_s},
              {"tokens_per_s_per_gpu", summary.tokens_per_s_per_gpu},
              {"mfu", summary.mfu},
              {"compute_s", summary.compute_s},
              {"comm_s", summary.comm_s},
              {"exposed_comm_s", summary.exposed_comm_s},
              {"idle_s", summary.idle_s},
              {"peak_allocated_bytes", summary.peak_allocated_bytes},
              {"peak_reserved_bytes", summary.peak_reserved_bytes},
              {"peak_breakdown", breakdown_to_json(summary.peak_breakdown)},
              {"fits", summary.fits}};
}

json group_to_json(const CommGroup& group) {
  json out{{"ranks", group.ranks}, {"ranks_per_node", group.ranks_per_node}};
  // Only where the ranks split unevenly over the nodes (files of other jobs unchanged).
  if (group.spanned_nodes > 0) out["nodes"] = group.spanned_nodes;
  return out;
}

json task_to_json(const Task& task) {
  json memory = json::array();
  for (const MemoryEvent& event : task.memory) {
    memory.push_back(json{
        {"category", to_string(event.category)}, {"bytes", event.bytes}, {"at_end", event.at_end}});
  }
  return json{{"id", task.id},
              {"stream", task.stream},
              {"kind", to_string(task.kind)},
              {"name", task.name},
              {"unit", task.unit},
              {"bucket", task.bucket},
              {"bytes", task.bytes},
              {"group", group_to_json(task.group)},
              {"duration_s", task.duration_s},
              {"deps", task.deps},
              {"memory", std::move(memory)}};
}

// `dp_shard` only feeds the derived padding figure written for readers.
json bucket_to_json(const BucketLayout& bucket, std::int64_t dp_shard) {
  json slots = json::array();
  for (const BufferSlot& slot : bucket.slots) {
    slots.push_back(json{{"param", slot.param},
                         {"unit", slot.unit},
                         {"offset", slot.offset},
                         {"shard_numel", slot.shard_numel},
                         {"numel", slot.numel},
                         // Derived, ignored on load: the zero elements that pad the
                         // parameter to a multiple of the shard count.
                         {"padding_elements", slot.shard_numel * dp_shard - slot.numel}});
  }
  return json{{"kind", to_string(bucket.kind)},
              {"units", json::array({bucket.units.first, bucket.units.last})},
              {"dtype", to_string(bucket.dtype)},
              {"shard_elements", bucket.shard_elements},
              {"slots", std::move(slots)}};
}

json program_to_json(const Program& program, std::int64_t dp_shard) {
  json streams = json::array();
  for (const Stream& stream : program.streams) {
    streams.push_back(json{{"name", stream.name}, {"role", to_string(stream.role)}});
  }
  json tasks = json::array();
  for (const Task& task : program.tasks) tasks.push_back(task_to_json(task));
  json buckets = json::array();
  for (const BucketLayout& bucket : program.buckets) {
    buckets.push_back(bucket_to_json(bucket, dp_shard));
  }
  json contention{{"compute_slowdown_with_comm", program.contention.compute_slowdown_with_comm},
                  {"comm_share_efficiency", program.contention.comm_share_efficiency}};
  // Only where a profile measured them: other schedules keep their text and hash.
  for (const MeasuredOnlyFactor& factor : kMeasuredOnlyFactors) {
    if (program.contention.*factor.member != 1) {
      contention[factor.name] = program.contention.*factor.member;
    }
  }
  return json{
      {"streams", std::move(streams)},           {"tasks", std::move(tasks)},
      {"buckets", std::move(buckets)},           {"persistent_bytes", program.persistent_bytes},
      {"contention", std::move(contention)},     {"cost_queries", program.cost_queries},
      {"cost_fallbacks", program.cost_fallbacks}};
}

// ---- from JSON ----

MemoryBreakdown breakdown_from_json(const Fields& fields) {
  MemoryBreakdown breakdown{};
  for (const MemoryCategory category : kCategories) {
    breakdown[static_cast<int>(category)] = fields.bytes(to_string(category));
  }
  fields.finish();
  return breakdown;
}

PlanSummary summary_from_json(const Fields& fields) {
  PlanSummary summary;
  summary.plan_name = fields.string("plan_name");
  summary.step_time_s = fields.seconds("step_time_s");
  summary.tokens_per_s_per_gpu = fields.rate("tokens_per_s_per_gpu");
  summary.mfu = fields.rate("mfu");
  summary.compute_s = fields.seconds("compute_s");
  summary.comm_s = fields.seconds("comm_s");
  summary.exposed_comm_s = fields.seconds("exposed_comm_s");
  summary.idle_s = fields.seconds("idle_s");
  summary.peak_allocated_bytes = fields.bytes("peak_allocated_bytes");
  summary.peak_reserved_bytes = fields.bytes("peak_reserved_bytes");
  summary.peak_breakdown = breakdown_from_json(fields.object("peak_breakdown"));
  summary.fits = fields.boolean("fits");
  fields.finish();
  return summary;
}

// A summary's `fits` is its reserved peak against the file's memory_limit_bytes, as every
// writer judges it (plan_fits, pipeline_summary): where they disagree the file was edited
// (with a limit of 0, report said "yes" for plans its Pareto table said "no" for).
void check_fits(const PlanSummary& summary, std::int64_t limit_bytes, const Fields& fields) {
  const bool fits = summary.peak_reserved_bytes <= limit_bytes;
  if (summary.fits != fits) {
    throw_bad_input(
        fields.where("fits"),
        fmt::format("is {}, but peak_reserved_bytes {} is {} memory_limit_bytes {}", summary.fits,
                    summary.peak_reserved_bytes, fits ? "within" : "over", limit_bytes));
  }
}

// The hint of a summary whose figures do not hold together (found by QA: a committed file
// written before these checks was refused without one).
constexpr const char* kFiguresHint =
    "was this schedule edited, or written by an fsdptune before 2026-12-04 (which did not "
    "hold its figures together)? Tune again";

// A summary's figures hold together as the simulation wrote them (a hand-edited file was
// reported as it read: a 1.0 s step at 500% MFU): tokens/s/GPU and MFU are what its step
// time makes of the job's tokens and model FLOPs (step_metrics, fill_pipeline_throughput),
// the step is its compute, exposed communication and idle time, and no more of the
// collectives is exposed than ran.
void check_summary_figures(const PlanSummary& summary, const Workload& workload,
                           const HardwareSpec& hardware, const Fields& fields) {
  const auto close = [](double a, double b) {
    return std::abs(a - b) <= 1e-9 * std::abs(b) + 1e-12;
  };
  const double step_s = summary.step_time_s;
  const double parts_s = summary.compute_s + summary.exposed_comm_s + summary.idle_s;
  if (std::abs(parts_s - step_s) > 1e-6 * step_s + 1e-12) {
    throw_bad_input(
        fields.where("step_time_s"),
        fmt::format("is {} s, but compute_s + exposed_comm_s + idle_s is {} s", step_s, parts_s),
        kFiguresHint);
  }
  if (summary.exposed_comm_s > summary.comm_s * (1 + 1e-9) + 1e-12) {
    throw_bad_input(
        fields.where("exposed_comm_s"),
        fmt::format("is {} s, more than comm_s {} s", summary.exposed_comm_s, summary.comm_s),
        kFiguresHint);
  }
  // A step of no time (found by QA: a baseline edited to 0 s, with its compute left at 5 s,
  // was read and reported as 0.0 us at 61.2% MFU) has no rates either.
  if (step_s <= 0) {
    for (const auto& [key, value] :
         {std::pair{"tokens_per_s_per_gpu", summary.tokens_per_s_per_gpu},
          std::pair{"mfu", summary.mfu}}) {
      if (value != 0) {
        throw_bad_input(fields.where(key), fmt::format("is {}, but step_time_s is 0 s", value),
                        kFiguresHint);
      }
    }
    return;
  }
  // A pipelined job's workload is the whole model: its stages split the FLOPs.
  const StepThroughput expected = step_throughput(
      workload.job, static_cast<double>(workload.tokens_per_step()),
      workload.model_flops_per_step() / static_cast<double>(workload.job.pp), hardware, step_s);
  if (!close(summary.tokens_per_s_per_gpu, expected.tokens_per_s_per_gpu)) {
    throw_bad_input(fields.where("tokens_per_s_per_gpu"),
                    fmt::format("is {}, but step_time_s {} s makes the job's {} tokens per step "
                                "{} per GPU per second",
                                summary.tokens_per_s_per_gpu, step_s, workload.tokens_per_step(),
                                expected.tokens_per_s_per_gpu),
                    kFiguresHint);
  }
  if (!close(summary.mfu, expected.mfu)) {
    throw_bad_input(fields.where("mfu"),
                    fmt::format("is {}, but step_time_s {} s makes the job's model FLOPs {} "
                                "of the hardware's peak",
                                summary.mfu, step_s, expected.mfu),
                    kFiguresHint);
  }
}

// A JSON array of arrays of two numbers: [[a, b], ...], each in [0, high].
std::vector<std::pair<double, double>> pairs_from_json(const Fields& fields, const std::string& key,
                                                       double high) {
  std::vector<std::pair<double, double>> pairs;
  const json& array = fields.array(key);
  pairs.reserve(array.size());
  for (std::size_t i = 0; i < array.size(); ++i) {
    const json& pair = array[i];
    if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number() || !pair[1].is_number()) {
      throw_bad_input(indexed(fields.where(key), i), "expected [number, number]");
    }
    for (const json& number : pair) {
      if (!(number.get<double>() >= 0 && number.get<double>() <= high)) {
        throw_bad_input(indexed(fields.where(key), i),
                        fmt::format("{} is not in 0 to {}", number.dump(), high));
      }
    }
    if (pair[1].get<double>() < pair[0].get<double>()) {
      // A task drawn from its start to an earlier end has no extent (report left it out).
      throw_bad_input(indexed(fields.where(key), i), "ends before it starts");
    }
    pairs.emplace_back(pair[0].get<double>(), pair[1].get<double>());
  }
  return pairs;
}

Task task_from_json(const Fields& fields) {
  Task task;
  task.id = fields.index("id");
  task.stream = fields.index("stream");
  task.kind = enum_from_string(fields.string("kind"), kTaskKinds, fields.where("kind"));
  task.name = fields.string("name");
  task.unit = fields.index("unit");
  task.bucket = fields.index("bucket");
  task.bytes = fields.bytes("bytes");
  const Fields group = fields.object("group");
  // As many ranks as a job may have GPUs (normalize_job).
  task.group.ranks = group.integer_in("ranks", 1, kMaxJobGpus);
  task.group.ranks_per_node = group.integer_in("ranks_per_node", 1, kMaxJobGpus);
  if (group.has("nodes")) {
    // Nodes each holding at least ranks_per_node of the ranks.
    const std::int64_t per_node = std::min(task.group.ranks_per_node, task.group.ranks);
    task.group.spanned_nodes = group.integer_in("nodes", 1, task.group.ranks / per_node);
  }
  group.finish();
  task.duration_s = fields.seconds("duration_s");
  const json& deps = fields.array("deps");
  for (std::size_t i = 0; i < deps.size(); ++i) {
    task.deps.push_back(index_element(deps[i], indexed(fields.where("deps"), i), "a task id"));
  }
  const json& memory = fields.array("memory");
  for (std::size_t i = 0; i < memory.size(); ++i) {
    const Fields event_fields(memory[i], fields.source(), indexed(fields.child("memory"), i));
    MemoryEvent event;
    event.category = enum_from_string(event_fields.string("category"), kCategories,
                                      event_fields.where("category"));
    event.bytes = event_fields.integer_in("bytes", -kMaxBytes, kMaxBytes);
    event.at_end = event_fields.boolean("at_end");
    event_fields.finish();
    task.memory.push_back(event);
  }
  fields.finish();
  return task;
}

BucketLayout bucket_from_json(const Fields& fields) {
  BucketLayout bucket;
  bucket.kind = collective_from_string(fields.string("kind"), fields.where("kind"));
  const json& units = fields.array("units");
  if (units.size() != 2) throw_bad_input(fields.where("units"), "expected [first_unit, last_unit]");
  bucket.units = UnitRange{index_element(units[0], fields.where("units"), "a unit index"),
                           index_element(units[1], fields.where("units"), "a unit index")};
  bucket.dtype = dtype_from_string(fields.string("dtype"), fields.where("dtype"));
  bucket.shard_elements = fields.bytes("shard_elements");
  const json& slots = fields.array("slots");
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const Fields slot_fields(slots[i], fields.source(), indexed(fields.child("slots"), i));
    BufferSlot slot;
    slot.param = slot_fields.string("param");
    slot.unit = slot_fields.index("unit");
    slot.offset = slot_fields.bytes("offset");
    slot.shard_numel = slot_fields.bytes("shard_numel");
    slot.numel = slot_fields.bytes("numel");
    slot_fields.allow("padding_elements");  // derived, written for readers of the file
    slot_fields.finish();
    bucket.slots.push_back(std::move(slot));
  }
  fields.finish();
  return bucket;
}

Program program_from_json(const Fields& fields) {
  Program program;
  const json& streams = fields.array("streams");
  if (streams.size() > kMaxStreams) {
    throw_bad_input(fields.where("streams"),
                    fmt::format("{} streams, expected at most {}", streams.size(), kMaxStreams));
  }
  for (std::size_t i = 0; i < streams.size(); ++i) {
    const Fields stream_fields(streams[i], fields.source(), indexed(fields.child("streams"), i));
    program.streams.push_back(Stream{
        stream_fields.string("name"),
        enum_from_string(stream_fields.string("role"), kStreamRoles, stream_fields.where("role"))});
    stream_fields.finish();
  }
  const json& tasks = fields.array("tasks");
  program.tasks.reserve(tasks.size());
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    program.tasks.push_back(
        task_from_json(Fields(tasks[i], fields.source(), indexed(fields.child("tasks"), i))));
  }
  const json& buckets = fields.array("buckets");
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    program.buckets.push_back(
        bucket_from_json(Fields(buckets[i], fields.source(), indexed(fields.child("buckets"), i))));
  }
  program.persistent_bytes = fields.bytes("persistent_bytes");
  const Fields contention = fields.object("contention");
  program.contention.compute_slowdown_with_comm = contention.number("compute_slowdown_with_comm");
  program.contention.comm_share_efficiency = contention.number("comm_share_efficiency");
  for (const MeasuredOnlyFactor& factor : kMeasuredOnlyFactors) {
    if (contention.has(factor.name)) {
      program.contention.*factor.member = contention.number(factor.name);
    }
  }
  contention.finish();
  validate_contention(program.contention,
                      fmt::format("{}: {}", fields.source(), fields.child("contention")));
  program.cost_queries = fields.count("cost_queries");
  program.cost_fallbacks = fields.count("cost_fallbacks");
  fields.finish();
  return program;
}

// Which tasks of a Program end before which start, in every order its tasks can run in:
// a task starts once its deps and its stream predecessor have ended (the simulator's and
// the executor's rule).
// REQUIRES: the task indices checked (streams, deps earlier).
class HappensBefore {
 public:
  explicit HappensBefore(const Program& program)
      : program_(program),
        streams_(program.streams.size()),
        before_(program.tasks.size() * program.streams.size(), -1) {
    std::vector<int> stream_last(streams_, -1);
    for (std::size_t t = 0; t < program.tasks.size(); ++t) {
      const Task& task = program.tasks[t];
      int* row = &before_[t * streams_];
      const auto inherit = [&](int a) {
        const int* other = &before_[static_cast<std::size_t>(a) * streams_];
        for (std::size_t s = 0; s < streams_; ++s) row[s] = std::max(row[s], other[s]);
        const auto s = static_cast<std::size_t>(program.tasks[a].stream);
        row[s] = std::max(row[s], a);
      };
      const auto stream = static_cast<std::size_t>(task.stream);
      if (stream_last[stream] >= 0) inherit(stream_last[stream]);
      for (const int dep : task.deps) inherit(dep);
      stream_last[stream] = static_cast<int>(t);
    }
  }

  // Does task a end before task t starts?
  bool operator()(int a, int t) const {
    const auto s = static_cast<std::size_t>(program_.tasks[a].stream);
    return a <= before_[static_cast<std::size_t>(t) * streams_ + s];
  }

 private:
  const Program& program_;
  std::size_t streams_;
  // before_[t * streams + s]: the last task of stream s that ends before task t starts (-1:
  // none). Stream order is id order, so task a of stream s happens before t iff a <= that.
  std::vector<int> before_;
};

// The hint of a Program or pipeline made for another job than the file's.
constexpr const char* kOtherJobHint = "was this schedule made for another job?";
// The hint of a Program inconsistent with how lower() makes every Program.
constexpr const char* kEditedHint =
    "was this schedule edited? Tune again to get a consistent Program";

// A Program's memory events must never free more of a category than is allocated, in any
// order its tasks can run in (the simulator and the executor start a task once its deps
// and its stream predecessor have ended, then apply its start events and at its end its
// end events, each in list order; the simulator aborts on a negative category as a broken
// invariant): every free takes its bytes from live allocations of its category that happen
// before it -- the persistent bytes (sharded state), earlier events of its task, events of
// tasks that end before it starts -- the latest first, an exact size first. Also bounds
// the bytes allocated in all, so that the running sums stay within 64 bits.
// REQUIRES: the task indices checked (check_program).
void check_program_memory(const Program& program, const HappensBefore& happens_before,
                          const std::string& source) {
  const auto where = [&](const std::string& path) { return fmt::format("{}: {}", source, path); };
  const std::size_t task_count = program.tasks.size();
  struct Live {
    int task;  // -1: the persistent bytes
    std::size_t event;
    std::int64_t bytes;
  };
  std::array<std::vector<Live>, kCategories.size()> live;
  live[static_cast<int>(MemoryCategory::kShardedState)].push_back(
      {-1, 0, program.persistent_bytes});
  // The first free that took bytes of the persistent state (its path), if any.
  std::string took_persistent;
  std::int64_t allocated_in_all = program.persistent_bytes;
  for (std::size_t t = 0; t < task_count; ++t) {
    const Task& task = program.tasks[t];
    for (const bool at_end : {false, true}) {
      for (std::size_t e = 0; e < task.memory.size(); ++e) {
        const MemoryEvent& event = task.memory[e];
        if (event.at_end != at_end) continue;
        std::vector<Live>& category = live[static_cast<int>(event.category)];
        if (event.bytes >= 0) {
          allocated_in_all += event.bytes;
          if (allocated_in_all > kMaxProgramBytes) {
            throw_bad_input(where(indexed(indexed("program.tasks", t) + ".memory", e)),
                            fmt::format("allocates more than {} bytes in all", kMaxProgramBytes));
          }
          category.push_back({static_cast<int>(t), e, event.bytes});
          continue;
        }
        const auto usable = [&](const Live& block) {
          return block.task < 0 || block.task == static_cast<int>(t) ||
                 happens_before(block.task, static_cast<int>(t));
        };
        std::int64_t needed = -event.bytes;
        const auto exact = std::find_if(category.rbegin(), category.rend(), [&](const Live& b) {
          return b.bytes == needed && usable(b);
        });
        if (exact != category.rend()) {
          // Found by review: a free of exactly the persistent state was named by no path.
          if (exact->task < 0 && took_persistent.empty()) {
            took_persistent = indexed(indexed("program.tasks", t) + ".memory", e);
          }
          category.erase(std::next(exact).base());
          continue;
        }
        for (auto block = category.rbegin(); block != category.rend() && needed > 0; ++block) {
          if (!usable(*block)) continue;
          const std::int64_t taken = std::min(needed, block->bytes);
          if (block->task < 0 && taken > 0 && took_persistent.empty()) {
            took_persistent = indexed(indexed("program.tasks", t) + ".memory", e);
          }
          block->bytes -= taken;
          needed -= taken;
        }
        std::erase_if(category, [](const Live& block) { return block.bytes == 0; });
        if (needed > 0) {
          throw_bad_input(
              where(indexed(indexed("program.tasks", t) + ".memory", e)),
              fmt::format("frees {} bytes of {}, {} more than the tasks that end before it "
                          "allocate",
                          -event.bytes, to_string(event.category), needed),
              kEditedHint);
        }
      }
    }
  }
  // Every allocation is freed within the step (docs/plan-format.md): what is live at its
  // end is the persistent state, no more and no less.
  for (std::size_t k = 0; k < kCategories.size(); ++k) {
    std::int64_t left = 0;
    for (const Live& block : live[k]) left += block.bytes;
    if (kCategories[k] == MemoryCategory::kShardedState) left -= program.persistent_bytes;
    if (left == 0) continue;
    if (left < 0) {
      throw_bad_input(where(took_persistent),
                      fmt::format("frees {} bytes of the persistent sharded state "
                                  "(program.persistent_bytes) that no task allocates again",
                                  -left),
                      kEditedHint);
    }
    // The frees take the latest allocations first, so the block left is the latest one not
    // freed, not necessarily the edited one (found by review: the first block left was
    // named as allocating what "no task frees").
    const auto allocated = std::find_if(live[k].rbegin(), live[k].rend(), [](const Live& block) {
      return block.task >= 0 && block.bytes > 0;
    });
    FSDPTUNE_CHECK(allocated != live[k].rend(), "check_program_memory: bytes left by no task");
    throw_bad_input(
        where(
            indexed(indexed("program.tasks", static_cast<std::size_t>(allocated->task)) + ".memory",
                    allocated->event)),
        fmt::format(
            "allocates {} bytes of {}, the latest of the allocations left at the end of the step "
            "({} bytes of {} no task frees): memory must return to the persistent state",
            program.tasks[static_cast<std::size_t>(allocated->task)].memory[allocated->event].bytes,
            to_string(kCategories[k]), left, to_string(kCategories[k])),
        kEditedHint);
  }
}

// The Program's own consistency, as lower() makes every Program (a hand-edited one that
// breaks it was simulated, and replayed with "data checked", as something else): compute
// tasks on a compute stream, collectives off it and of their bucket's kind, every bucket's
// collective once (an all-reduce of every reduce-scatter bucket exactly when the job
// replicates, HSDP), copies around their collective in order, every unit's forward and
// backward once (a recompute at most once, between them), at most one optimizer, after
// every reduce-scatter.
// REQUIRES: the indices checked (check_program).
void check_program_flow(const Program& program, const Workload& workload,
                        const HappensBefore& happens_before, const std::string& source) {
  const auto where = [&](const std::string& path) { return fmt::format("{}: {}", source, path); };
  // "a forward", "an all_gather".
  const auto a = [](const std::string& word) {
    return (word.front() == 'a' || word.front() == 'o' ? "an " : "a ") + word;
  };
  const auto task_path = [](int t) { return indexed("program.tasks", t); };
  struct BucketTasks {
    int copy_in = -1, collective = -1, all_reduce = -1, copy_out = -1;
  };
  std::vector<BucketTasks> buckets(program.buckets.size());
  struct UnitTasks {
    int forward = -1, recompute = -1, backward = -1;
  };
  std::vector<UnitTasks> units(workload.units.size());
  int optimizer = -1;
  int off_group = -1;        // the first collective over another group than the job's
  CommGroup expected_group;  // the job's group for it
  const auto once = [&](int& slot, int t, const std::string& path, const std::string& what) {
    if (slot >= 0) {
      throw_bad_input(where(path), fmt::format("a second {} (the first: task {})", what, slot),
                      kEditedHint);
    }
    slot = t;
  };
  for (std::size_t i = 0; i < program.tasks.size(); ++i) {
    const Task& task = program.tasks[i];
    const int t = static_cast<int>(i);
    const std::string path = task_path(t);
    const Stream& stream = program.streams[static_cast<std::size_t>(task.stream)];
    const bool on_compute = stream.role == StreamRole::kCompute;
    const std::string kind = to_string(task.kind);
    switch (task.kind) {
      case TaskKind::kForward:
      case TaskKind::kRecompute:
      case TaskKind::kBackward:
      case TaskKind::kOptimizer: {
        if (!on_compute) {
          throw_bad_input(where(path + ".stream"),
                          fmt::format("{} task on stream {} (\"{}\", {}): compute runs on a "
                                      "compute stream",
                                      a(kind), task.stream, stream.name, to_string(stream.role)),
                          kEditedHint);
        }
        if (task.kind == TaskKind::kOptimizer) {
          once(optimizer, t, path, "optimizer");
          break;
        }
        if (task.unit < 0) {
          throw_bad_input(where(path + ".unit"), fmt::format("{} task of no unit", a(kind)),
                          kEditedHint);
        }
        UnitTasks& unit = units[static_cast<std::size_t>(task.unit)];
        const std::string what =
            fmt::format("{} of unit {} ({})", kind, task.unit,
                        workload.units[static_cast<std::size_t>(task.unit)].name);
        once(task.kind == TaskKind::kForward     ? unit.forward
             : task.kind == TaskKind::kRecompute ? unit.recompute
                                                 : unit.backward,
             t, path + ".unit", what);
        break;
      }
      case TaskKind::kAllGather:
      case TaskKind::kReduceScatter:
      case TaskKind::kAllReduce:
      case TaskKind::kCopyIn:
      case TaskKind::kCopyOut: {
        if (task.bucket < 0) {
          throw_bad_input(where(path + ".bucket"), fmt::format("{} task of no bucket", a(kind)),
                          kEditedHint);
        }
        const BucketLayout& layout = program.buckets[static_cast<std::size_t>(task.bucket)];
        BucketTasks& bucket = buckets[static_cast<std::size_t>(task.bucket)];
        const std::string what = fmt::format("{} of bucket {}", kind, task.bucket);
        if (task.kind == TaskKind::kCopyIn) {
          once(bucket.copy_in, t, path + ".bucket", what);
          break;
        }
        if (task.kind == TaskKind::kCopyOut) {
          once(bucket.copy_out, t, path + ".bucket", what);
          break;
        }
        if (on_compute) {
          throw_bad_input(where(path + ".stream"),
                          fmt::format("{} on compute stream {} (\"{}\"): collectives run on "
                                      "communication streams",
                                      a(kind), task.stream, stream.name),
                          kEditedHint);
        }
        const CollectiveKind expected = task.kind == TaskKind::kAllGather
                                            ? CollectiveKind::kAllGather
                                            : CollectiveKind::kReduceScatter;
        if (layout.kind != expected) {
          throw_bad_input(
              where(path + ".bucket"),
              fmt::format("{} of {} bucket {}{}", a(kind), to_string(layout.kind), task.bucket,
                          task.kind == TaskKind::kAllReduce
                              ? " (HSDP all-reduces a reduce-scatter's output)"
                              : ""),
              kEditedHint);
        }
        const CommGroup group = task.kind == TaskKind::kAllReduce ? replicate_group(workload.job)
                                                                  : shard_group(workload.job);
        if (off_group < 0 && task.group != group) {
          off_group = t;
          expected_group = group;
        }
        once(task.kind == TaskKind::kAllReduce ? bucket.all_reduce : bucket.collective, t,
             path + ".bucket", what);
        break;
      }
    }
  }
  // The tasks of `chain` (-1: absent) each end before the next starts; returns the last.
  const auto in_order = [&](std::initializer_list<int> chain, const std::string& of) {
    int previous = -1;
    for (const int next : chain) {
      if (next < 0) continue;
      if (previous >= 0 && !happens_before(previous, next)) {
        throw_bad_input(
            where(task_path(next) + ".deps"),
            fmt::format("the {} of {} may start before its {} (task {}) ends",
                        to_string(program.tasks[static_cast<std::size_t>(next)].kind), of,
                        to_string(program.tasks[static_cast<std::size_t>(previous)].kind),
                        previous),
            kEditedHint);
      }
      previous = next;
    }
    return previous;
  };
  const bool replicated = workload.job.dp_replicate > 1;
  std::vector<int> reduce_ends;
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    const BucketTasks& bucket = buckets[b];
    const BucketLayout& layout = program.buckets[b];
    const std::string path = indexed("program.buckets", b);
    const std::string kind = to_string(layout.kind);
    if (bucket.collective < 0) {
      throw_bad_input(where(path), fmt::format("no {} task of this {} bucket", kind, kind),
                      kEditedHint);
    }
    const bool reduce = layout.kind == CollectiveKind::kReduceScatter;
    if (reduce && replicated && bucket.all_reduce < 0) {
      throw_bad_input(where(path),
                      fmt::format("job.dp_replicate {} but no all_reduce of this reduce_scatter "
                                  "bucket (HSDP sums the replicas' gradient shards)",
                                  workload.job.dp_replicate),
                      kEditedHint);
    }
    if (!replicated && bucket.all_reduce >= 0) {
      throw_bad_input(where(task_path(bucket.all_reduce) + ".kind"),
                      "an all_reduce in a job of one replica (job.dp_replicate 1)", kEditedHint);
    }
    // Copy-in, collective, all-reduce, copy-out: each ends before the next starts.
    const int last =
        in_order({bucket.copy_in, bucket.collective, bucket.all_reduce, bucket.copy_out},
                 fmt::format("bucket {}", b));
    if (reduce) reduce_ends.push_back(last);
  }
  for (std::size_t u = 0; u < units.size(); ++u) {
    const UnitTasks& unit = units[u];
    const std::string name = fmt::format("unit {} ({})", u, workload.units[u].name);
    if (unit.forward < 0 || unit.backward < 0) {
      throw_bad_input(
          where("program.tasks"),
          fmt::format("no {} task of {}", unit.forward < 0 ? "forward" : "backward", name),
          kEditedHint);
    }
    in_order({unit.forward, unit.recompute, unit.backward}, name);
  }
  if (optimizer >= 0) {
    for (const int end : reduce_ends) {
      if (!happens_before(end, optimizer)) {
        throw_bad_input(
            where(task_path(optimizer) + ".deps"),
            fmt::format("the optimizer may start before task {} ({}, the last of "
                        "reduce_scatter bucket {}) ends",
                        end, to_string(program.tasks[static_cast<std::size_t>(end)].kind),
                        program.tasks[static_cast<std::size_t>(end)].bucket),
            kEditedHint);
      }
    }
  }
  // Over the job's group: the shard group, or the replicas for HSDP's all-reduce (a
  // tester's all-gather over 4 ranks of a dp_shard 2 job was simulated and replayed). Last,
  // after the checks that name what else an edited task broke.
  if (off_group >= 0) {
    const Task& task = program.tasks[static_cast<std::size_t>(off_group)];
    const bool replicas = task.kind == TaskKind::kAllReduce;
    const CommGroup& group = expected_group;
    // A replica group of the job's ranks placed otherwise: a file of an fsdptune before
    // 2026-12-07, which priced a group split unevenly over nodes at an even split's ranks
    // per node, or over as many nodes as those fill (found by review: said "edited", the
    // node counts unsaid).
    const bool placed_otherwise = replicas && task.group.ranks == group.ranks;
    // "3 ranks (1 per node)"; where the ranks split unevenly "3 ranks on 2 nodes (at fewest
    // 1 per node)", and the nodes of both where a replica group is placed otherwise.
    const auto described = [&](const CommGroup& g) {
      if (g.spanned_nodes > 0) {
        return fmt::format("{} on {} (at fewest {} per node)", counted(g.ranks, "rank"),
                           counted(g.nodes(), "node"), g.ranks_per_node);
      }
      if (placed_otherwise) {
        return fmt::format("{} on {} ({} per node)", counted(g.ranks, "rank"),
                           counted(g.nodes(), "node"), g.ranks_per_node);
      }
      return fmt::format("{} ({} per node)", counted(g.ranks, "rank"), g.ranks_per_node);
    };
    throw_bad_input(
        where(task_path(off_group) + ".group"),
        fmt::format("{} over {}, while the job's {} group is {}", a(to_string(task.kind)),
                    described(task.group), replicas ? "replica" : "shard", described(group)),
        placed_otherwise
            ? "was this schedule written by an fsdptune before 2026-12-07, which priced a "
              "replica group split unevenly over nodes as an even one? Tune again"
            : kEditedHint);
  }
}

// Structural checks of a Program against the workload it claims to lower: indices in
// range, dependencies pointing backwards (the executor replays tasks in id order per
// stream), every bucket slot a real parameter of the bucket's units, packed in order and
// in the bucket's dtype, every collective and bucket copy of its bucket's bytes, and
// memory events that never free what is not allocated and free everything by the step's
// end (check_program_memory).
void check_program(const Program& program, const Workload& workload, const std::string& source) {
  const int unit_count = static_cast<int>(workload.units.size());
  const auto where = [&](const std::string& path) { return fmt::format("{}: {}", source, path); };
  if (program.streams.empty()) throw_bad_input(where("program.streams"), "no streams");
  // The sharded state: fp32 parameters, gradients and AdamW's two moments of every shard
  // element, 16 bytes each (found by QA: an edited value was simulated and compared).
  std::int64_t shard_elements = 0;
  for (const Unit& unit : workload.units) shard_elements += unit.shard_numel();
  if (program.persistent_bytes != 16 * shard_elements) {
    throw_bad_input(where("program.persistent_bytes"),
                    fmt::format("is {}, but the workload's {} shard elements hold {} bytes of "
                                "sharded state (16 per element)",
                                program.persistent_bytes, shard_elements, 16 * shard_elements),
                    kEditedHint);
  }
  std::vector<std::int64_t> bucket_wire_bytes;  // per bucket: one rank's shard, wire dtypes
  for (std::size_t i = 0; i < program.tasks.size(); ++i) {
    const Task& task = program.tasks[i];
    const std::string path = indexed("program.tasks", i);
    if (task.id != static_cast<int>(i)) {
      throw_bad_input(where(path + ".id"), fmt::format("is {}, expected its index {}", task.id, i));
    }
    if (task.stream < 0 || task.stream >= static_cast<int>(program.streams.size())) {
      throw_bad_input(
          where(path + ".stream"),
          fmt::format("{} is not a stream index (0..{})", task.stream, program.streams.size() - 1));
    }
    if (task.unit < -1 || task.unit >= unit_count) {
      throw_bad_input(where(path + ".unit"),
                      fmt::format("{} is not a unit of this model's workload (0..{}, or -1)",
                                  task.unit, unit_count - 1),
                      "was this schedule made for another model or job?");
    }
    if (task.bucket < -1 || task.bucket >= static_cast<int>(program.buckets.size())) {
      throw_bad_input(where(path + ".bucket"),
                      fmt::format("{} is not a bucket index (-1 or 0..{})", task.bucket,
                                  static_cast<int>(program.buckets.size()) - 1));
    }
    // Compute tasks name their unit, copies and collectives their bucket, the optimizer
    // neither, as lower() makes them (found by QA: a copy_in with a unit, or a forward
    // with a bucket, was accepted).
    const bool compute = task.kind == TaskKind::kForward || task.kind == TaskKind::kRecompute ||
                         task.kind == TaskKind::kBackward;
    const bool bucketed = task.kind == TaskKind::kCopyIn || task.kind == TaskKind::kCopyOut ||
                          is_collective(task.kind);
    if (!compute && task.unit != -1) {
      throw_bad_input(
          where(path + ".unit"),
          fmt::format("is {}, but a task of kind {} has no unit (-1): only compute tasks have one",
                      task.unit, to_string(task.kind)),
          kEditedHint);
    }
    if (!bucketed && task.bucket != -1) {
      throw_bad_input(
          where(path + ".bucket"),
          fmt::format("is {}, but a task of kind {} has no bucket (-1): only copies and "
                      "collectives have one",
                      task.bucket, to_string(task.kind)),
          kEditedHint);
    }
    for (std::size_t d = 0; d < task.deps.size(); ++d) {
      const int dep = task.deps[d];
      if (dep < 0 || dep >= task.id) {
        throw_bad_input(where(indexed(path + ".deps", d)),
                        // Task 0 has none (found by QA: "(0..-1)").
                        task.id == 0 ? fmt::format("{}: the first task can depend on none", dep)
                                     : fmt::format("{} must be the id of an earlier task (0..{})",
                                                   dep, task.id - 1));
      }
    }
  }
  for (std::size_t b = 0; b < program.buckets.size(); ++b) {
    const BucketLayout& bucket = program.buckets[b];
    const std::string path = indexed("program.buckets", b);
    if (bucket.units.first < 0 || bucket.units.last >= unit_count ||
        bucket.units.first > bucket.units.last) {
      throw_bad_input(where(path + ".units"),
                      fmt::format("[{}, {}] is not a unit range of this model's workload "
                                  "(0..{})",
                                  bucket.units.first, bucket.units.last, unit_count - 1),
                      "was this schedule made for another model or job?");
    }
    // The slots pack the bucket's flat shard in order and fill it, each parameter in its
    // wire dtype (the executor's layout; found by QA: a bucket without slots, or of another
    // dtype, was simulated and reported as if it were the lowering's).
    std::int64_t packed = 0;
    std::int64_t wire_bytes = 0;
    std::optional<DType> uniform_wire;
    bool mixed_wire = false;
    for (std::size_t s = 0; s < bucket.slots.size(); ++s) {
      const BufferSlot& slot = bucket.slots[s];
      const std::string slot_path = indexed(path + ".slots", s);
      if (!bucket.units.contains(slot.unit)) {
        throw_bad_input(where(slot_path + ".unit"),
                        fmt::format("unit {} is outside the bucket [{}, {}]", slot.unit,
                                    bucket.units.first, bucket.units.last));
      }
      const Unit& unit = workload.units[slot.unit];
      const auto param = std::find_if(unit.params.begin(), unit.params.end(),
                                      [&](const Param& p) { return p.name == slot.param; });
      if (param == unit.params.end()) {
        throw_bad_input(where(slot_path + ".param"),
                        fmt::format("\"{}\" is not a parameter of unit {} ({})", slot.param,
                                    slot.unit, unit.name),
                        "was this schedule made for another model or job?");
      }
      if (param->numel != slot.numel || param->shard_numel != slot.shard_numel) {
        throw_bad_input(
            where(slot_path),
            fmt::format("\"{}\" has numel {} and shard_numel {} here but {} and {} "
                        "in the workload of this model and job",
                        slot.param, slot.numel, slot.shard_numel, param->numel, param->shard_numel),
            "was this schedule made for another model or job?");
      }
      if (slot.offset + slot.shard_numel > bucket.shard_elements) {
        throw_bad_input(
            where(slot_path + ".offset"),
            fmt::format("slot [{}, {}) runs past the bucket's shard_elements {}", slot.offset,
                        slot.offset + slot.shard_numel, bucket.shard_elements));
      }
      if (slot.offset != packed) {
        throw_bad_input(where(slot_path + ".offset"),
                        fmt::format("is {}, but the slots are packed in order: expected {} (the "
                                    "shard elements of the slots before it)",
                                    slot.offset, packed));
      }
      packed += slot.shard_numel;
      const DType wire =
          bucket.kind == CollectiveKind::kAllGather ? param->gather_dtype : param->reduce_dtype;
      // Reductions sum in the bucket's dtype; an all-gather moves each parameter in its own.
      if (bucket.kind != CollectiveKind::kAllGather && wire != bucket.dtype) {
        throw_bad_input(
            where(path + ".dtype"),
            fmt::format("a {} bucket of {} holds {} gradients ({})", to_string(bucket.kind),
                        to_string(bucket.dtype), to_string(wire), slot.param),
            kOtherJobHint);
      }
      mixed_wire = mixed_wire || (uniform_wire && *uniform_wire != wire);
      uniform_wire = wire;
      wire_bytes += slot.shard_numel * bytes_per_element(wire);
    }
    if (packed != bucket.shard_elements) {
      throw_bad_input(where(path + ".shard_elements"),
                      fmt::format("is {}, but its slots hold {} elements per shard",
                                  bucket.shard_elements, packed));
    }
    // The lowering names the wire dtype of an all-gather whose parameters agree on one.
    if (bucket.kind == CollectiveKind::kAllGather && uniform_wire && !mixed_wire &&
        bucket.dtype != *uniform_wire) {
      throw_bad_input(where(path + ".dtype"),
                      fmt::format("is {}, but its parameters are gathered in {}",
                                  to_string(bucket.dtype), to_string(*uniform_wire)),
                      kOtherJobHint);
    }
    bucket_wire_bytes.push_back(wire_bytes);
  }
  const HappensBefore happens_before(program);
  check_program_flow(program, workload, happens_before, source);
  // Each collective and bucket copy moves its bucket's bytes: its shard on one rank, or
  // the flat buffer of the shard group (its dp_shard ranks), as the lowering sizes them
  // (an all-gather's copy-out, over a group of buckets, is left to its memory events).
  const std::int64_t shard_ranks = std::max<std::int64_t>(1, workload.job.dp_shard);
  for (std::size_t i = 0; i < program.tasks.size(); ++i) {
    const Task& task = program.tasks[i];
    if (task.bucket < 0) continue;
    const BucketLayout& bucket = program.buckets[static_cast<std::size_t>(task.bucket)];
    const std::int64_t shard = bucket_wire_bytes[static_cast<std::size_t>(task.bucket)];
    const bool gather = bucket.kind == CollectiveKind::kAllGather;
    std::int64_t expected = -1;
    switch (task.kind) {
      case TaskKind::kAllGather:
      case TaskKind::kReduceScatter:
        expected = shard * shard_ranks;
        break;
      case TaskKind::kAllReduce:
        expected = shard;
        break;
      case TaskKind::kCopyIn:
        expected = gather ? shard : shard * shard_ranks;
        break;
      case TaskKind::kCopyOut:
        if (!gather) expected = shard;
        break;
      default:
        break;
    }
    if (expected >= 0 && task.bytes != expected) {
      throw_bad_input(
          where(indexed("program.tasks", i) + ".bytes"),
          fmt::format("is {}, but its bucket {} makes {}", task.bytes, task.bucket, expected),
          kEditedHint);
    }
  }
  check_program_memory(program, happens_before, source);
}

// ---- pipeline schedules (version 2) ----

// The fields of ChunkTimes a schedule written before 2026-12-02 14:24 UTC holds and the
// model no longer has (ScheduleChunk::retired_times): byte counts and seconds.
constexpr std::array<const char*, 4> kRetiredTimesBytes = {
    "tail_peak_bytes", "persistent_bytes", "forward_after_backward_peak_allocated_bytes",
    "backward_after_backward_peak_allocated_bytes"};
constexpr std::array<const char*, 2> kRetiredTimesSeconds = {"forward_after_backward_delay_s",
                                                             "backward_after_backward_delay_s"};

json chunk_times_to_json(const ChunkTimes& times, const json& retired) {
  json out{{"first_forward_s", times.first_forward_s},
           {"forward_s", times.forward_s},
           {"backward_s", times.backward_s},
           {"last_backward_s", times.last_backward_s},
           {"tail_s", times.tail_s},
           {"activation_bytes", times.activation_bytes},
           {"base_peak_allocated_bytes", times.base_peak_allocated_bytes},
           {"base_peak_reserved_bytes", times.base_peak_reserved_bytes},
           {"accumulated_gradient_bytes", times.accumulated_gradient_bytes}};
  // Not 0 wherever the chunk has an optimizer; absent before 2026-12-02 but for several
  // pipeline steps (such a file writes back as it was).
  if (times.optimizer_s > 0) out["optimizer_s"] = times.optimizer_s;
  // Only where the chunk accumulates (since 2026-12-03; absent, 0: files of before).
  if (times.accumulate_s > 0) out["accumulate_s"] = times.accumulate_s;
  out.update(retired);
  return out;
}

// Without optimizer_s (a schedule written before 2026-12-02, of one pipeline step) the
// whole tail is waited for after a backward that reduce-scatters.
ChunkTimes chunk_times_from_json(const Fields& fields) {
  ChunkTimes times;
  times.first_forward_s = fields.seconds("first_forward_s");
  times.forward_s = fields.seconds("forward_s");
  times.backward_s = fields.seconds("backward_s");
  times.last_backward_s = fields.seconds("last_backward_s");
  times.tail_s = fields.seconds("tail_s");
  if (fields.has("optimizer_s")) times.optimizer_s = fields.seconds("optimizer_s");
  if (fields.has("accumulate_s")) times.accumulate_s = fields.seconds("accumulate_s");
  times.activation_bytes = fields.bytes("activation_bytes");
  times.base_peak_allocated_bytes = fields.bytes("base_peak_allocated_bytes");
  times.base_peak_reserved_bytes = fields.bytes("base_peak_reserved_bytes");
  times.accumulated_gradient_bytes = fields.bytes("accumulated_gradient_bytes");
  return times;
}

// ScheduleChunk::retired_times of `fields` (the chunk's times), each checked as it was.
json retired_times_from_json(const Fields& fields) {
  json retired = json::object();
  for (const char* key : kRetiredTimesBytes) {
    if (fields.has(key)) retired[key] = fields.bytes(key);
  }
  for (const char* key : kRetiredTimesSeconds) {
    if (fields.has(key)) retired[key] = fields.seconds(key);
  }
  return retired;
}

json pipeline_to_json(const SchedulePipeline& pipeline, std::int64_t dp_shard) {
  json chunks = json::array();
  for (const ScheduleChunk& chunk : pipeline.chunks) {
    chunks.push_back(json{{"rank", chunk.rank},
                          {"units", chunk.units},
                          {"keep_gathered", chunk.keep_gathered},
                          {"plan", plan_to_json(chunk.plan)},
                          {"program", program_to_json(chunk.program, dp_shard)},
                          {"predicted", summary_to_json(chunk.predicted)},
                          {"times", chunk_times_to_json(chunk.times, chunk.retired_times)}});
  }
  json stages = json::array();
  for (const ScheduleStage& stage : pipeline.stages) {
    json entry{{"rank", stage.rank},
               {"busy_s", stage.busy_s},
               {"end_s", stage.end_s},
               {"max_in_flight", stage.max_in_flight},
               {"peak_allocated_bytes", stage.peak_allocated_bytes},
               {"peak_reserved_bytes", stage.peak_reserved_bytes}};
    // Left out when there are none (a schedule read from a file written before
    // 2026-12-01), so that such a file keeps its canonical text and schedule_hash, which
    // the measured files made from it name.
    if (!stage.actions.empty()) {
      json actions = json::array();
      for (const PipelineAction& action : stage.actions) {
        actions.push_back(pipeline_action_to_json(action));
      }
      entry["actions"] = std::move(actions);
    }
    stages.push_back(std::move(entry));
  }
  return json{{"send_s", pipeline.send_s},
              {"bubble_fraction", pipeline.bubble_fraction},
              {"chunks", std::move(chunks)},
              {"stages", std::move(stages)}};
}

SchedulePipeline pipeline_from_json(const Fields& fields, const JobSpec& job) {
  SchedulePipeline pipeline;
  pipeline.send_s = fields.seconds("send_s");
  pipeline.bubble_fraction = fields.rate("bubble_fraction");
  const json& chunks = fields.array("chunks");
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    const Fields chunk_fields(chunks[c], fields.source(), indexed(fields.child("chunks"), c));
    ScheduleChunk chunk;
    chunk.rank = chunk_fields.count("rank");
    const json& units = chunk_fields.array("units");
    for (std::size_t u = 0; u < units.size(); ++u) {
      chunk.units.push_back(
          index_element(units[u], indexed(chunk_fields.where("units"), u), "a unit index"));
    }
    chunk.keep_gathered = chunk_fields.boolean("keep_gathered");
    chunk.plan = plan_from_json(chunk_fields.at("plan"), chunk_fields.where("plan"));
    chunk.program = program_from_json(chunk_fields.object("program"));
    chunk.predicted = summary_from_json(chunk_fields.object("predicted"));
    const Fields times_fields = chunk_fields.object("times");
    chunk.times = chunk_times_from_json(times_fields);
    chunk.times.accumulates = chunk_accumulates(job, chunk.keep_gathered);
    chunk.retired_times = retired_times_from_json(times_fields);
    times_fields.finish();
    chunk_fields.finish();
    pipeline.chunks.push_back(std::move(chunk));
  }
  const json& stages = fields.array("stages");
  for (std::size_t r = 0; r < stages.size(); ++r) {
    const Fields stage_fields(stages[r], fields.source(), indexed(fields.child("stages"), r));
    ScheduleStage stage;
    stage.rank = stage_fields.count("rank");
    stage.busy_s = stage_fields.seconds("busy_s");
    stage.end_s = stage_fields.seconds("end_s");
    stage.max_in_flight = stage_fields.count("max_in_flight");
    stage.peak_allocated_bytes = stage_fields.bytes("peak_allocated_bytes");
    stage.peak_reserved_bytes = stage_fields.bytes("peak_reserved_bytes");
    // Since 2026-12-01; absent, none (the report then draws no pipeline Gantt chart).
    if (stage_fields.has("actions")) {
      const json& actions = stage_fields.array("actions");
      for (std::size_t k = 0; k < actions.size(); ++k) {
        const Fields action_fields(actions[k], fields.source(),
                                   indexed(stage_fields.child("actions"), k));
        PipelineAction action;
        action.chunk = action_fields.count("chunk");
        action.microbatch = action_fields.count("microbatch");
        action.backward = action_fields.boolean("backward");
        action.start_s = action_fields.seconds("start_s");
        action.end_s = action_fields.seconds("end_s");
        action_fields.finish();
        stage.actions.push_back(action);
      }
    }
    stage_fields.finish();
    pipeline.stages.push_back(std::move(stage));
  }
  fields.finish();
  return pipeline;
}

// A stage's stored actions (when there are any) are the forward and the backward of
// every microbatch (of every pipeline step) of every chunk on its rank, once each, each
// ending after it starts: what the report draws. Their order is pipeline_order's (the scheduler's:
// not checked in the core).
void check_stage_actions(const ScheduleStage& stage, const JobSpec& job, const std::string& where) {
  if (stage.actions.empty()) return;
  const std::int64_t chunks = job.pp * job.virtual_stages;
  const std::int64_t microbatches = job.microbatches * job.pipeline_steps;  // of all steps
  const std::int64_t expected = 2 * job.virtual_stages * microbatches;
  if (static_cast<std::int64_t>(stage.actions.size()) != expected) {
    throw_bad_input(
        where,
        fmt::format(
            "{} actions, but 2 x virtual_stages {} x microbatches {}{} "
            "makes {}",
            stage.actions.size(), job.virtual_stages, job.microbatches,
            job.pipeline_steps > 1 ? fmt::format(" x pipeline_steps {}", job.pipeline_steps) : "",
            expected),
        kOtherJobHint);
  }
  // (chunk's place on its rank, microbatch, backward) already seen: one per action.
  std::vector<bool> seen(stage.actions.size(), false);
  for (std::size_t k = 0; k < stage.actions.size(); ++k) {
    const PipelineAction& action = stage.actions[k];
    const std::string at = indexed(where, k);
    if (action.chunk >= chunks || action.chunk % job.pp != stage.rank) {
      throw_bad_input(at + ".chunk",
                      fmt::format("chunk {} does not run on rank {}", action.chunk, stage.rank));
    }
    if (action.microbatch >= microbatches) {
      throw_bad_input(
          at + ".microbatch",
          fmt::format("is {}, but there {} {}", action.microbatch, microbatches == 1 ? "is" : "are",
                      counted(microbatches, "microbatch", "microbatches")));
    }
    if (!(action.start_s >= 0 && action.end_s >= action.start_s) || !std::isfinite(action.end_s)) {
      throw_bad_input(at, fmt::format("start_s {} and end_s {}: expected 0 <= start_s <= end_s",
                                      action.start_s, action.end_s));
    }
    const std::size_t slot = static_cast<std::size_t>(
        (action.chunk / job.pp * microbatches + action.microbatch) * 2 + (action.backward ? 1 : 0));
    if (seen[slot]) {
      throw_bad_input(at, fmt::format("the {} of chunk {} microbatch {} a second time",
                                      action.backward ? "backward" : "forward", action.chunk,
                                      action.microbatch));
    }
    seen[slot] = true;
    // A rank runs its actions one after another.
    if (k > 0 && action.start_s < stage.actions[k - 1].end_s) {
      throw_bad_input(at + ".start_s",
                      fmt::format("{} s is before the previous action's end_s {} s: a rank runs "
                                  "its actions one after another",
                                  action.start_s, stage.actions[k - 1].end_s));
    }
  }
}

// A pipeline schedule must describe the chunks of its own job: pipeline_chunks of the
// rebuilt workload, each chunk's plan and Program checked against its chunk workload.
void check_pipeline(const SchedulePipeline& pipeline, const Workload& workload,
                    const std::string& source) {
  const JobSpec& job = workload.job;
  const auto where = [&](const std::string& path) { return fmt::format("{}: {}", source, path); };
  const std::vector<std::vector<int>> chunks = pipeline_chunks(workload);
  if (pipeline.chunks.size() != chunks.size()) {
    throw_bad_input(where("pipeline.chunks"),
                    fmt::format("{}, but pp {} x virtual_stages {} makes {}",
                                counted(static_cast<std::int64_t>(pipeline.chunks.size()), "chunk"),
                                job.pp, job.virtual_stages, chunks.size()),
                    kOtherJobHint);
  }
  if (pipeline.stages.size() != static_cast<std::size_t>(job.pp)) {
    throw_bad_input(
        where("pipeline.stages"),
        fmt::format("{} for pp {}",
                    counted(static_cast<std::int64_t>(pipeline.stages.size()), "stage"), job.pp));
  }
  // Actions stored for every stage or none (schedules before 2026-12-01): one stage without
  // them beside another with them was replayed and compared as if it had none.
  const bool any_actions = std::any_of(pipeline.stages.begin(), pipeline.stages.end(),
                                       [](const ScheduleStage& s) { return !s.actions.empty(); });
  for (std::size_t r = 0; r < pipeline.stages.size(); ++r) {
    // Stages by rank: a stage's chunks are found by its rank (found by review: a rank out
    // of range loaded, and the report's bound at any timing then left its chunks out).
    if (pipeline.stages[r].rank != static_cast<int>(r)) {
      throw_bad_input(where(indexed("pipeline.stages", r) + ".rank"),
                      fmt::format("is {}, but stage {} is rank {} (stages by rank)",
                                  pipeline.stages[r].rank, r, r));
    }
    const std::string path = where(indexed("pipeline.stages", r) + ".actions");
    if (any_actions && pipeline.stages[r].actions.empty()) {
      throw_bad_input(path,
                      "none, while other stages have theirs: a schedule stores every "
                      "stage's actions or none");
    }
    check_stage_actions(pipeline.stages[r], job, path);
  }
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    const ScheduleChunk& chunk = pipeline.chunks[c];
    const std::string path = indexed("pipeline.chunks", c);
    if (chunk.rank != static_cast<int>(c % job.pp)) {
      throw_bad_input(where(path + ".rank"),
                      fmt::format("is {}, but chunk {} runs on rank {} (chunk % pp)", chunk.rank, c,
                                  c % job.pp));
    }
    if (chunk.units != chunks[c]) {
      throw_bad_input(where(path + ".units"),
                      fmt::format("are not the units of chunk {} of this model and job", c),
                      "was this schedule made for another model or job?");
    }
    const Workload chunk_work = chunk_workload(workload, chunk.units);
    validate_plan(chunk.plan, static_cast<int>(chunk_work.units.size()), where(path + ".plan"));
    check_program(chunk.program, chunk_work, fmt::format("{}: {}", source, path));
  }
}

// The figures of a pipeline schedule's stages hold together as the simulation wrote them
// (hand-edited ones were reported as they were: a stage busy 123 s in a 9 ms step, a
// bubble of 500%): busy within the stage's end, its actions before that end, the end within
// the step, at most every chunk's microbatches in flight, and a kept-gathered chunk's plan
// resharding nothing.
void check_pipeline_figures(const SchedulePipeline& pipeline, const JobSpec& job,
                            const PlanSummary& predicted, const std::string& source) {
  const auto where = [&](const std::string& path) { return fmt::format("{}: {}", source, path); };
  const auto within = [](double part, double whole) { return part <= whole * (1 + 1e-9) + 1e-12; };
  if (pipeline.bubble_fraction > 1) {
    throw_bad_input(
        where("pipeline.bubble_fraction"),
        fmt::format("is {}, above 1: an idle share of the pipeline", pipeline.bubble_fraction));
  }
  std::int64_t most_allocated = 0, most_reserved = 0;
  for (std::size_t r = 0; r < pipeline.stages.size(); ++r) {
    const ScheduleStage& stage = pipeline.stages[r];
    const std::string path = indexed("pipeline.stages", r);
    if (!within(stage.busy_s, stage.end_s)) {
      throw_bad_input(where(path + ".busy_s"), fmt::format("{} s is after the stage's end_s {} s",
                                                           stage.busy_s, stage.end_s));
    }
    if (predicted.step_time_s > 0 && !within(stage.end_s, predicted.step_time_s)) {
      throw_bad_input(where(path + ".end_s"),
                      fmt::format("{} s is after predicted.step_time_s {} s", stage.end_s,
                                  predicted.step_time_s));
    }
    for (std::size_t k = 0; k < stage.actions.size(); ++k) {
      if (!within(stage.actions[k].end_s, stage.end_s)) {
        throw_bad_input(where(indexed(path + ".actions", k) + ".end_s"),
                        fmt::format("{} s is after the stage's end_s {} s", stage.actions[k].end_s,
                                    stage.end_s));
      }
    }
    // Its peaks hold at least its chunks' sharded state (a stage's walk starts there), and
    // the largest are predicted's (pipeline_summary). Found by QA: a stage edited to 1 B
    // allocated, or 0 B reserved, was reported as read.
    std::int64_t sharded = 0;
    for (const ScheduleChunk& chunk : pipeline.chunks) {
      if (chunk.rank == stage.rank) sharded += chunk.program.persistent_bytes;
    }
    for (const auto& [name, bytes] :
         {std::pair{"peak_allocated_bytes", stage.peak_allocated_bytes},
          std::pair{"peak_reserved_bytes", stage.peak_reserved_bytes}}) {
      if (bytes < sharded) {
        throw_bad_input(
            where(fmt::format("{}.{}", path, name)),
            fmt::format("is {}, below the {} of sharded state its chunks hold", bytes, sharded));
      }
    }
    most_allocated = std::max(most_allocated, stage.peak_allocated_bytes);
    most_reserved = std::max(most_reserved, stage.peak_reserved_bytes);
    const std::int64_t most = job.virtual_stages * job.microbatches;
    if (stage.max_in_flight > most) {
      throw_bad_input(where(path + ".max_in_flight"),
                      fmt::format("is {}, more than its {} x {}", stage.max_in_flight,
                                  counted(job.virtual_stages, "chunk"),
                                  counted(job.microbatches, "microbatch", "microbatches")));
    }
  }
  for (const auto& [name, predicted_bytes, most_bytes] :
       {std::tuple{"peak_allocated_bytes", predicted.peak_allocated_bytes, most_allocated},
        std::tuple{"peak_reserved_bytes", predicted.peak_reserved_bytes, most_reserved}}) {
    if (predicted_bytes != most_bytes) {
      throw_bad_input(where(fmt::format("predicted.{}", name)),
                      fmt::format("is {}, but the largest of pipeline.stages[].{} is {}",
                                  predicted_bytes, name, most_bytes));
    }
  }
  for (std::size_t c = 0; c < pipeline.chunks.size(); ++c) {
    const ScheduleChunk& chunk = pipeline.chunks[c];
    const std::vector<bool>& reshard = chunk.plan.reshard_after_forward;
    if (chunk.keep_gathered && std::find(reshard.begin(), reshard.end(), true) != reshard.end()) {
      throw_bad_input(where(indexed("pipeline.chunks", c) + ".plan.reshard_after_forward"),
                      "reshards a chunk that keeps its parameters gathered (keep_gathered)",
                      "all false when keep_gathered is true");
    }
  }
}

}  // namespace

json pipeline_action_to_json(const PipelineAction& action) {
  return json{{"chunk", action.chunk},
              {"microbatch", action.microbatch},
              {"backward", action.backward},
              {"start_s", action.start_s},
              {"end_s", action.end_s}};
}

json schedule_to_json(const ScheduleFile& schedule) {
  json timings = json::array();
  for (const TaskTiming& timing : schedule.timings) {
    timings.push_back(json::array({timing.start_s, timing.end_s}));
  }
  json timeline = json::array();
  for (const MemorySample& sample : schedule.memory_timeline) {
    timeline.push_back(json::array({sample.time_s, sample.allocated_bytes}));
  }
  json baselines = json::array();
  for (const PlanSummary& baseline : schedule.baselines) {
    baselines.push_back(summary_to_json(baseline));
  }
  json pareto = json::array();
  for (const ParetoPoint& point : schedule.pareto) {
    pareto.push_back(json{{"step_time_s", point.step_time_s},
                          {"peak_allocated_bytes", point.peak_allocated_bytes},
                          {"peak_reserved_bytes", point.peak_reserved_bytes},
                          {"label", point.label}});
  }
  // Derived, ignored on load: how close the plan is to the lower bound.
  const double efficiency = schedule.predicted.step_time_s > 0
                                ? schedule.lower_bound_s / schedule.predicted.step_time_s
                                : 0.0;
  const std::int64_t dp_shard = std::max<std::int64_t>(schedule.job.dp_shard, 1);
  json out{
      {"format", kScheduleFormatName},
      {"version", schedule.pipeline ? kPipelineScheduleFormatVersion : schedule.version},
      {"model", model_to_json(schedule.model)},
      {"job", job_to_json(schedule.job)},
      {"hardware", hardware_to_json(schedule.hardware)},
      {"memory_limit_bytes", schedule.memory_limit_bytes},
      {"plan", plan_to_json(schedule.plan)},
      {"program", program_to_json(schedule.program, dp_shard)},
      {"predicted", summary_to_json(schedule.predicted)},
      {"timings", std::move(timings)},
      {"memory_timeline", std::move(timeline)},
      {"cost_queries", schedule.cost_queries},
      {"cost_fallbacks", schedule.cost_fallbacks},
      {"baselines", std::move(baselines)},
      {"pareto", std::move(pareto)},
      {"lower_bound_s", schedule.lower_bound_s},
      {"efficiency", efficiency},
      {"provenance", json{{"tool", schedule.provenance.tool},
                          {"cost_source", schedule.provenance.cost_source},
                          {"cost_hash", schedule.provenance.cost_hash},
                          {"seed", schedule.provenance.seed},
                          {"threads", schedule.provenance.threads},
                          {"command", schedule.provenance.command}}},
  };
  if (!schedule.provenance.job_hash.empty()) {
    out["provenance"]["job_hash"] = schedule.provenance.job_hash;
  }
  if (schedule.pipeline) {
    // Version 2: the per-chunk Programs replace the whole-job one.
    for (const char* key : {"plan", "program", "timings", "memory_timeline"}) out.erase(key);
    out["pipeline"] = pipeline_to_json(*schedule.pipeline, dp_shard);
  }
  return out;
}

std::string schedule_file_text(const ScheduleFile& schedule, const std::string& path) {
  const json document = schedule_to_json(schedule);
  try {
    schedule_from_json(document, path);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kBadInput) throw;
    // Found by QA: a job of 2^30 tokens per sequence was tuned and written, with a step of
    // 4.3e9 s that every command then refused to read.
    throw_bad_input(e.where(), e.message() + " (in the schedule this run would write)",
                    "the job is beyond what a schedule file holds (docs/schedule-format.md, "
                    "\"Checks on load\"): a shorter --seq or a smaller --batch, or (found by "
                    "QA) a hardware spec or profile of rates that make sense for it");
  }
  return dump_json(document);
}

ScheduleFile schedule_from_json(const json& json_in, const std::string& source) {
  const Fields fields(json_in, source, "");
  refuse_other_format(json_in, source);
  // The version first: a file of another version may have any other shape.
  const json& version = fields.at("version");
  if (!version.is_number_integer()) throw_bad_input(fields.where("version"), "expected an integer");
  const std::int64_t version_number = version.get<std::int64_t>();
  if (version_number != kScheduleFormatVersion &&
      version_number != kPipelineScheduleFormatVersion) {
    throw_bad_input(
        fields.where("version"),
        fmt::format("schedule format version {} is not supported (this fsdptune "
                    "reads versions {} and {})",
                    version.dump(), kScheduleFormatVersion, kPipelineScheduleFormatVersion),
        "re-run `fsdptune tune` with this version of fsdptune");
  }
  if (fields.string("format") != kScheduleFormatName) {
    throw_bad_input(fields.where("format"), fmt::format("expected \"{}\"", kScheduleFormatName),
                    "is this a schedule file written by `fsdptune tune`?");
  }
  ScheduleFile schedule;
  schedule.version = static_cast<int>(version_number);
  const bool pipelined = version_number == kPipelineScheduleFormatVersion;
  schedule.model = model_from_json(fields.at("model"), fields.where("model"));
  schedule.job = job_from_json(fields.at("job"), fields.where("job"));
  schedule.hardware = hardware_from_json(fields.at("hardware"), fields.where("hardware"));
  schedule.memory_limit_bytes = fields.bytes("memory_limit_bytes");
  // A body of the other version (a pipelined schedule relabelled version 1 was refused as
  // "plan: missing field", found by QA) is named by its version.
  if (const char* other = pipelined ? "plan" : "pipeline";
      !fields.has(pipelined ? "pipeline" : "plan") && fields.has(other)) {
    throw_bad_input(fields.where("version"),
                    fmt::format("version {} holds {}, but the file has a '{}' (a version {} "
                                "schedule's)",
                                version_number,
                                pipelined ? "a pipelined job's 'pipeline'"
                                          : "one FSDP Program's 'plan' and 'program'",
                                other, pipelined ? 1 : 2));
  }
  if (pipelined) {
    schedule.pipeline = pipeline_from_json(fields.object("pipeline"), schedule.job);
  } else {
    schedule.plan = plan_from_json(fields.at("plan"), fields.where("plan"));
    schedule.program = program_from_json(fields.object("program"));
  }
  schedule.predicted = summary_from_json(fields.object("predicted"));
  check_fits(schedule.predicted, schedule.memory_limit_bytes, fields.object("predicted"));
  if (!pipelined) {
    for (const auto& [start_s, end_s] : pairs_from_json(fields, "timings", kMaxSeconds)) {
      schedule.timings.push_back(TaskTiming{start_s, end_s});
    }
    const json& timeline = fields.array("memory_timeline");
    for (std::size_t i = 0; i < timeline.size(); ++i) {
      const json& sample = timeline[i];
      const std::string at = indexed(fields.where("memory_timeline"), i);
      if (!sample.is_array() || sample.size() != 2 || !sample[0].is_number() ||
          !sample[1].is_number()) {
        throw_bad_input(at, "expected [number, number]");
      }
      const double time_s = sample[0].get<double>();
      if (!(time_s >= 0 && time_s <= kMaxSeconds)) {
        throw_bad_input(at + "[0]", fmt::format("{} is not in 0 to {}", time_s, kMaxSeconds));
      }
      if (!sample[1].is_number_integer()) {
        throw_bad_input(at + "[1]", "expected an integer number of bytes");
      }
      const std::int64_t bytes = sample[1].get<std::int64_t>();
      if (bytes < 0 || bytes > kMaxProgramBytes) {
        throw_bad_input(at + "[1]", fmt::format("{} is not in 0 to {}", bytes, kMaxProgramBytes));
      }
      schedule.memory_timeline.push_back(MemorySample{time_s, bytes});
    }
  }
  // Counts of an int, as the Program's (found by QA: 2^62 was read).
  schedule.cost_queries = fields.count("cost_queries");
  schedule.cost_fallbacks = fields.count("cost_fallbacks");
  const json& baselines = fields.array("baselines");
  for (std::size_t i = 0; i < baselines.size(); ++i) {
    const Fields baseline(baselines[i], source, indexed("baselines", i));
    schedule.baselines.push_back(summary_from_json(baseline));
    check_fits(schedule.baselines.back(), schedule.memory_limit_bytes, baseline);
  }
  const json& pareto = fields.array("pareto");
  for (std::size_t i = 0; i < pareto.size(); ++i) {
    const Fields point(pareto[i], source, indexed("pareto", i));
    // peak_reserved_bytes: absent from schedules written before 2026-11-30 (0 then).
    schedule.pareto.push_back(ParetoPoint{
        point.seconds("step_time_s"), point.bytes("peak_allocated_bytes"), point.string("label"),
        point.has("peak_reserved_bytes") ? point.bytes("peak_reserved_bytes") : 0});
    point.finish();
  }
  schedule.lower_bound_s = fields.seconds("lower_bound_s");
  const Fields provenance = fields.object("provenance");
  schedule.provenance.tool = provenance.string("tool");
  schedule.provenance.cost_source = provenance.string("cost_source");
  schedule.provenance.cost_hash = provenance.string("cost_hash");
  schedule.provenance.seed = provenance.unsigned_integer("seed");
  // Threads of a run: at least one, an int (found by QA: -1 and 2^62 were read).
  schedule.provenance.threads =
      provenance.integer_in("threads", 1, std::numeric_limits<int>::max());
  schedule.provenance.command = provenance.string("command");
  const bool has_job_hash = provenance.has("job_hash");
  if (has_job_hash) schedule.provenance.job_hash = provenance.string("job_hash");
  provenance.finish();
  // Derived (lower_bound_s over the step), written for readers of the file; recomputed.
  fields.allow("efficiency");
  fields.finish();

  // The schedule must describe the workload of its own model and job: the executor
  // rebuilds that workload to get op shapes and parameter sizes.
  const ModelSpec& model = schedule.model;
  validate_model(model, fields.where("model"));
  const JobSpec job = normalize_job(model, schedule.job, fields.where("job"));
  // A schedule holds its job normalized, as tune wrote it (found by QA: dp_shard 0, the
  // flag's "derived", passed here and stopped the workload builder at an internal check).
  if (job != schedule.job) {
    const json normalized = job_to_json(job);
    const json written = job_to_json(schedule.job);
    for (const auto& [key, value] : normalized.items()) {
      if (written.contains(key) && written.at(key) == value) continue;
      throw_bad_input(
          fmt::format("{}: field '{}'", fields.where("job"), key),
          fmt::format("is {}, where the job normalized says {}",
                      written.contains(key) ? written.at(key).dump() : "absent", value.dump()),
          kEditedHint);
    }
    throw_bad_input(fields.where("job"), "is not normalized", kEditedHint);
  }
  if (has_job_hash) {
    // The stored Programs' durations and memory are those of the job they were tuned for:
    // a `job` edited since (batch, sequence, AC, float8) would be replayed and reported
    // with the old job's times under the new job's throughput. (After normalize_job, so
    // that a field out of range is named as such.)
    const std::string written = fnv1a64_hex(dump_json(fields.at("job")));
    if (written != schedule.provenance.job_hash) {
      throw_bad_input(fields.where("job"),
                      fmt::format("differs from the job the schedule was tuned for (it hashes "
                                  "to {}, provenance.job_hash is {})",
                                  written, schedule.provenance.job_hash),
                      "tune the job as it now reads (its Programs are the old job's), or "
                      "restore the file's job");
    }
  }
  if (is_pipelined(job) != pipelined) {
    throw_bad_input(fields.where("version"),
                    pipelined ? "version 2 holds pipelined jobs (pp > 1 or microbatches > 1); "
                                "this job is neither"
                              : fmt::format("version 1 holds one FSDP Program; this job is "
                                            "pipelined (pp {}, microbatches {}): version 2",
                                            job.pp, job.microbatches));
  }
  const Workload workload = build_workload(model, job);
  // Last, once the structure is known to hold: the figures the file reports.
  const auto check_figures = [&] {
    check_summary_figures(schedule.predicted, workload, schedule.hardware,
                          fields.object("predicted"));
    for (std::size_t i = 0; i < schedule.baselines.size(); ++i) {
      check_summary_figures(schedule.baselines[i], workload, schedule.hardware,
                            Fields(fields.at("baselines")[i], source, indexed("baselines", i)));
    }
    if (schedule.lower_bound_s > schedule.predicted.step_time_s * (1 + 1e-9) + 1e-12) {
      throw_bad_input(fields.where("lower_bound_s"),
                      fmt::format("is {} s, above predicted.step_time_s {} s (a lower bound)",
                                  schedule.lower_bound_s, schedule.predicted.step_time_s));
    }
  };
  if (pipelined) {
    validate_pipeline(job, fields.where("job"));
    check_pipeline(*schedule.pipeline, workload, source);
    check_pipeline_figures(*schedule.pipeline, job, schedule.predicted, source);
    check_figures();
    return schedule;
  }
  validate_plan(schedule.plan, static_cast<int>(workload.units.size()), fields.where("plan"));
  check_program(schedule.program, workload, source);
  // One per task, none missing (found by QA: an emptied list was read, and the report drew
  // no Gantt chart without a word).
  if (schedule.timings.size() != schedule.program.tasks.size()) {
    throw_bad_input(
        fields.where("timings"),
        fmt::format("{} for {}",
                    counted(static_cast<std::int64_t>(schedule.timings.size()), "entry", "entries"),
                    counted(static_cast<std::int64_t>(schedule.program.tasks.size()), "task")));
  }
  if (!schedule.timings.empty()) {
    double last_end_s = 0;
    for (const TaskTiming& timing : schedule.timings)
      last_end_s = std::max(last_end_s, timing.end_s);
    const double step_s = schedule.predicted.step_time_s;
    if (std::abs(last_end_s - step_s) > 1e-9 * step_s + 1e-12) {
      throw_bad_input(
          fields.where("predicted.step_time_s"),
          fmt::format("is {} s, but the last of the timings ends at {} s", step_s, last_end_s));
    }
  }
  check_figures();
  return schedule;
}

std::string schedule_job_hash(const JobSpec& job) {
  return fnv1a64_hex(dump_json(job_to_json(job)));
}

std::string fnv1a64_hex(std::string_view bytes) {
  // FNV-1a, 64-bit: offset basis 14695981039346656037, prime 1099511628211
  // (Fowler, Noll, Vo; http://www.isthe.com/chongo/tech/comp/fnv/).
  std::uint64_t hash = 14695981039346656037ULL;
  for (const char c : bytes) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ULL;
  }
  return fmt::format("{:016x}", hash);
}

void refuse_other_format(const json& json_in, const std::string& source) {
  // A file of another format (a measured.json, a profile) is named as such before its
  // version is judged (its own version numbers mean nothing here).
  if (!json_in.is_object()) {
    throw_bad_input(source, fmt::format("a JSON {}, not an object: not a schedule or plan file",
                                        json_in.type_name()));
  }
  if (const auto format = json_in.find("format");
      format != json_in.end() && format->is_string() && *format != kScheduleFormatName) {
    // A measured file where the schedule goes (found by QA: `report s.json m.json`, and
    // `compare` with its two files swapped, were asked whether it was a schedule).
    const bool measured = *format == "fsdptune-measured";
    throw_bad_input(
        source + ": format",
        fmt::format("\"{}\", expected \"{}\"", format->get<std::string>(), kScheduleFormatName),
        measured ? "this is a measured file (validate --out), not a schedule: compare and "
                   "report take it after the schedule (`fsdptune compare SCHEDULE MEASURED`, "
                   "`fsdptune report SCHEDULE --measured MEASURED`)"
                 : "is this a schedule file written by `fsdptune tune`?");
  }
  // A plan file has neither field: an object with them and no format is a schedule file
  // whose format was lost, which is not read as a plan either.
  if (!json_in.contains("format") && (json_in.contains("plan") || json_in.contains("program"))) {
    throw_bad_input(source + ": format",
                    fmt::format("missing field: a schedule file (it has \"{}\") says \"format\": "
                                "\"{}\"",
                                json_in.contains("plan") ? "plan" : "program", kScheduleFormatName),
                    "is this a schedule file written by `fsdptune tune`?");
  }
}

bool is_schedule_json(const json& json_in) {
  return json_in.is_object() && json_in.contains("format") && json_in["format"].is_string() &&
         json_in["format"].get<std::string>() == kScheduleFormatName;
}

std::string schedule_hash(const ScheduleFile& schedule) {
  json canonical = schedule_to_json(schedule);
  json& provenance = canonical["provenance"];
  for (const char* invocation : kScheduleHashOmits) provenance.erase(invocation);
  return fnv1a64_hex(dump_json(canonical));
}

std::string schedule_text_hash(const ScheduleFile& schedule) {
  return fnv1a64_hex(dump_json(schedule_to_json(schedule)));
}

bool schedule_has_hash(const ScheduleFile& schedule, const std::string& hash) {
  return hash == schedule_hash(schedule) || hash == schedule_text_hash(schedule);
}

void check_schedule_hardware(const ScheduleFile& schedule, const HardwareSpec& hardware,
                             const std::string& source) {
  if (same_figures(schedule.hardware, hardware)) return;
  const std::string& id = schedule.hardware.id;
  if (id != hardware.id) {
    throw_bad_input(
        fmt::format("{}: hardware", source),
        fmt::format("the schedule was made for hardware \"{}\", not \"{}\"", id, hardware.id),
        fmt::format("pass --hardware {} (its costs are frozen in the schedule's "
                    "program), or tune again for {}",
                    id, hardware.id));
  }
  throw_bad_input(
      fmt::format("{}: hardware", source),
      fmt::format("the schedule was made for hardware \"{}\" with other figures than this "
                  "\"{}\": {}",
                  id, hardware.id, figure_differences(schedule.hardware, hardware)),
      "its costs are frozen in the schedule's program: replay it on its own hardware "
      "(simulate --plan FILE without job flags, or --hardware with a spec file of the "
      "schedule's \"hardware\" object), or tune again");
}

namespace {

// `job` with its stages' blocks listed (pp_chunk_blocks), however it gives them: a
// torchtitan config that names its stages module by module reads back as the list, where
// the schedule tuned for it kept the first and last stages' weights. Unchanged when the
// list does not fit the chunks (the difference is then reported as it is).
JobSpec with_listed_split(JobSpec job, std::int64_t layers) {
  const std::int64_t chunks = job.pp * job.virtual_stages;
  if (job.pp <= 1 || (!job.pp_chunk_blocks.empty() &&
                      static_cast<std::int64_t>(job.pp_chunk_blocks.size()) != chunks)) {
    return job;
  }
  const std::int64_t effective =
      layers + job.pp_first_stage_less_layers + job.pp_last_stage_less_layers;
  if (job.pp_chunk_blocks.empty() &&
      (chunks < 1 || effective < chunks || job.pp_first_stage_less_layers > effective / chunks ||
       job.pp_last_stage_less_layers > effective / chunks)) {
    return job;  // a split normalize_job refuses
  }
  job.pp_chunk_blocks = pipeline_chunk_blocks(job, layers);
  job.pp_first_stage_less_layers = 0;
  job.pp_last_stage_less_layers = 0;
  return job;
}

}  // namespace

void check_schedule_matches(const ScheduleFile& schedule, const ModelSpec& model,
                            const JobSpec& job, const std::string& source) {
  // Names may differ (a built-in vs a copy of its file); the architecture may not.
  ModelSpec theirs = schedule.model;
  ModelSpec ours = model;
  theirs.name.clear();
  ours.name.clear();
  if (theirs != ours) {
    throw_bad_input(fmt::format("{}: model", source),
                    fmt::format("the schedule was made for model \"{}\" (dim {}, {} layers), "
                                "not \"{}\" (dim {}, {} layers)",
                                schedule.model.name, schedule.model.dim, schedule.model.n_layers,
                                model.name, model.dim, model.n_layers),
                    fmt::format("pass --model {} (the schedule's), or tune again for this model",
                                schedule.model.name));
  }
  if (schedule.job != job &&
      with_listed_split(schedule.job, model.n_layers) != with_listed_split(job, model.n_layers)) {
    // The fields that differ, the split of the stages and the execution included where
    // job_to_json leaves them out (one chunk, or 0 and 0; compiled).
    const auto all_fields = [](const JobSpec& of) {
      json fields = job_to_json(of);
      fields["execution"] = to_string(of.execution);
      fields["pp_first_stage_less_layers"] = of.pp_first_stage_less_layers;
      fields["pp_last_stage_less_layers"] = of.pp_last_stage_less_layers;
      fields["pp_chunk_blocks"] = of.pp_chunk_blocks;
      fields["cp"] = of.cp;
      fields["pipeline_steps"] = of.pipeline_steps;
      return fields;
    };
    const json theirs_job = all_fields(schedule.job);
    const json ours_job = all_fields(job);
    // Every field of either job: a field that job_to_json writes for one job only (and
    // all_fields does not add) shows as null on the other side.
    json keys = theirs_job;
    keys.update(ours_job);
    const auto value_of = [](const json& fields, const std::string& key) {
      return fields.contains(key) ? fields.at(key) : json();
    };
    std::string differences;
    std::string others;  // the differing fields that are not the split of the stages
    bool split = false;
    for (const auto& [key, unused] : keys.items()) {
      const json their_value = value_of(theirs_job, key);
      const json our_value = value_of(ours_job, key);
      if (their_value == our_value) continue;
      differences += fmt::format("{}{} {} (the flags: {})", differences.empty() ? "" : ", ", key,
                                 their_value.dump(), our_value.dump());
      if (key == "pp_first_stage_less_layers" || key == "pp_last_stage_less_layers" ||
          key == "pp_chunk_blocks") {
        split = true;
      } else {
        // As flags (found by review: the JSON fields were named, "local_batch 2").
        const std::string flag = job_flag_of_field(key);
        const std::string given =
            their_value.is_boolean() ? (their_value.get<bool>() ? flag : "without " + flag)
                                     : flag + " " +
                                           (their_value.is_string() ? their_value.get<std::string>()
                                                                    : their_value.dump());
        others += fmt::format("{}{}", others.empty() ? "" : ", ", given);
      }
    }
    const std::string split_flags =
        pp_split_flags(schedule.job) +
        (schedule.job.pp_chunk_blocks.empty()
             ? " (schedules written before 2026-12-02 split the blocks evenly: 0 and 0)"
             : "");
    throw_bad_input(
        fmt::format("{}: job", source),
        fmt::format("the schedule was made for another job than the flags describe: {}",
                    differences),
        split ? fmt::format("pass {} for the schedule's split of the stages{}, or leave out "
                            "--model and the job flags: the schedule's job is then taken",
                            split_flags,
                            others.empty() ? std::string() : fmt::format(" (and {})", others))
              : "pass the job flags that describe the schedule's job (`fsdptune report` "
                "prints it), or tune again for this job");
  }
}

PlanSummary simulated_summary(const SimResult& result, const std::string& plan_name) {
  PlanSummary summary;
  summary.plan_name = plan_name;
  summary.step_time_s = result.step_time_s;
  summary.compute_s = result.compute_s;
  summary.comm_s = result.comm_s;
  summary.exposed_comm_s = result.exposed_comm_s;
  summary.idle_s = result.idle_s;
  summary.peak_allocated_bytes = result.peak_allocated_bytes;
  summary.peak_reserved_bytes = result.peak_reserved_bytes;
  summary.peak_breakdown = result.peak_breakdown;
  return summary;
}

PlanSummary pipeline_summary(const PipelineSimulation& sim, const std::string& plan_name,
                             std::int64_t memory_limit_bytes) {
  PlanSummary summary;
  summary.plan_name = plan_name;
  summary.step_time_s = sim.result.step_time_s;
  summary.tokens_per_s_per_gpu = sim.tokens_per_s_per_gpu;
  summary.mfu = sim.mfu;
  const StageResult* slowest = nullptr;
  for (const StageResult& stage : sim.result.stages) {
    if (slowest == nullptr || stage.end_s > slowest->end_s) slowest = &stage;
    summary.peak_allocated_bytes =
        std::max(summary.peak_allocated_bytes, stage.peak_allocated_bytes);
    summary.peak_reserved_bytes = std::max(summary.peak_reserved_bytes, stage.peak_reserved_bytes);
  }
  const int stages = std::max(1, sim.spec.stages);
  const auto steps = static_cast<double>(std::max(1, sim.spec.steps));
  // Of every pipeline step.
  const double microbatches = static_cast<double>(std::max(1, sim.spec.microbatches)) * steps;
  const std::size_t chunks = sim.chunk_results.size();
  FSDPTUNE_CHECK(sim.chunk_programs.size() == chunks && sim.chunk_keep_gathered.size() == chunks &&
                     sim.spec.chunks.size() == chunks,
                 "pipeline_summary: one program, keep choice and ChunkTimes per chunk");
  if (slowest != nullptr) {
    // The slowest rank, from its chunks' single-microbatch simulations, as
    // simulate_pipeline composes them (ChunkTimes): a chunk that re-gathers per microbatch
    // runs its whole Program every microbatch; one that keeps its parameters gathered runs
    // it once per pipeline step (the gathers before its microbatch 0, the reduce-scatters
    // after its last) and every other forward and backward at their standalone compute
    // (forward_s, backward_s: no copy-outs, no contention). So the Program's compute and
    // exposed collectives count `runs` times, the other microbatches' compute beside them,
    // the optimizer once. The rest of the step is idle: the bubble, the sends, waiting.
    for (std::size_t c = 0; c < chunks; ++c) {
      if (static_cast<int>(c) % stages != slowest->rank) continue;
      const SimResult& chunk = sim.chunk_results[c];
      const ChunkTimes& times = sim.spec.chunks[c];
      double optimizer_s = 0;
      for (const Task& task : sim.chunk_programs[c].tasks) {
        if (task.kind == TaskKind::kOptimizer) optimizer_s += task.duration_s;
      }
      const double runs = sim.chunk_keep_gathered[c] ? steps : microbatches;
      // The Program's runs add the accumulation of their backward (the last microbatch's,
      // before its reduce-scatters; the others' is in backward_s).
      summary.compute_s += (chunk.compute_s - optimizer_s + times.accumulate_s) * runs +
                           optimizer_s +
                           (microbatches - runs) * (times.forward_s + times.backward_s);
      summary.comm_s += chunk.comm_s * runs;
      summary.exposed_comm_s += chunk.exposed_comm_s * runs;
    }
    summary.idle_s =
        std::max(0.0, sim.result.step_time_s - summary.compute_s - summary.exposed_comm_s);
  }
  // The peak stage's memory by category where its allocated peak is (stage_memory).
  const StageResult* largest = nullptr;
  for (const StageResult& stage : sim.result.stages) {
    if (largest == nullptr || stage.peak_allocated_bytes > largest->peak_allocated_bytes) {
      largest = &stage;
    }
  }
  if (largest != nullptr) {
    summary.peak_breakdown = stage_memory(sim.spec, largest->rank, largest->actions).peak_breakdown;
  }
  // As pipeline_fits (scheduler/): the largest stage reserved peak against the limit.
  summary.fits = summary.peak_reserved_bytes <= memory_limit_bytes;
  return summary;
}

ScheduleFile pipeline_schedule(const Workload& workload, const PipelineSimulation& sim,
                               const HardwareSpec& hardware, std::int64_t memory_limit_bytes,
                               const std::string& plan_name) {
  ScheduleFile schedule;
  schedule.version = kPipelineScheduleFormatVersion;
  schedule.model = workload.model;
  schedule.job = workload.job;
  schedule.hardware = hardware;
  schedule.memory_limit_bytes = memory_limit_bytes;
  schedule.predicted = pipeline_summary(sim, plan_name, memory_limit_bytes);
  SchedulePipeline pipeline;
  pipeline.send_s = sim.spec.send_s;
  pipeline.bubble_fraction = sim.result.bubble_fraction;
  const std::int64_t pp = std::max<std::int64_t>(workload.job.pp, 1);
  for (std::size_t c = 0; c < sim.chunk_plans.size(); ++c) {
    ScheduleChunk chunk;
    chunk.rank = static_cast<int>(static_cast<std::int64_t>(c) % pp);
    chunk.units = sim.chunk_units[c];
    chunk.keep_gathered = sim.chunk_keep_gathered[c];
    chunk.plan = sim.chunk_plans[c];
    chunk.program = sim.chunk_programs[c];
    const SimResult& result = sim.chunk_results[c];
    // The one-microbatch Program alone: its times and peaks (a chunk is not a whole
    // step, so its throughput fields stay 0).
    PlanSummary& summary = chunk.predicted;
    summary = simulated_summary(result, chunk.plan.name);
    summary.fits = sim.result.stages.at(static_cast<std::size_t>(chunk.rank)).peak_reserved_bytes <=
                   memory_limit_bytes;
    chunk.times = sim.spec.chunks[c];
    chunk.times.memory = {};  // not stored: the chunk's Program gives it (ChunkTimes::memory)
    pipeline.chunks.push_back(std::move(chunk));
  }
  for (const StageResult& stage : sim.result.stages) {
    pipeline.stages.push_back(ScheduleStage{stage.rank, stage.busy_s, stage.end_s,
                                            stage.max_in_flight, stage.peak_allocated_bytes,
                                            stage.peak_reserved_bytes, stage.actions});
  }
  schedule.pipeline = std::move(pipeline);
  return schedule;
}

json torchtitan_plan_to_json(const Workload& workload, const Plan& plan) {
  const auto modules_of = [&](const UnitRange& range) {
    json modules = json::array();
    for (int u = range.first; u <= range.last; ++u) {
      for (const std::string& module : workload.units[u].modules) modules.push_back(module);
    }
    return modules;
  };
  const auto groups_of = [&](const std::vector<UnitRange>& buckets) {
    json groups = json::array();
    for (const UnitRange& range : buckets) groups.push_back(modules_of(range));
    return groups;
  };

  json simplefsdp{
      {"forward_all_gather_buckets", groups_of(plan.forward_buckets)},
      {"backward_all_gather_buckets", groups_of(plan.backward_buckets)},
      {"reduce_scatter_buckets", groups_of(plan.reduce_scatter_buckets)},
      {"reshard_after_forward", plan.reshard_after_forward},
      {"forward_prefetch", plan.forward_prefetch},
      {"backward_prefetch", plan.backward_prefetch},
      // The rest of the plan (since 2026-12-06; found by QA: a plan on one shared stream,
      // or without copies, was written as if it were its buckets alone).
      {"one_collective_per_parameter", plan.one_collective_per_parameter},
      {"copy_in_out", plan.copy_in_out},
      {"stream_layout", to_string(plan.stream_layout)},
      {"reorder", plan.reorder},
  };
  // Whether SimpleFSDP runs it as simulated (since 2026-12-06): the plan's knobs, and the
  // job (found by review: SimpleFSDP runs compiled only).
  std::vector<std::string> simplefsdp_gaps = simplefsdp_differences(plan);
  if (workload.job.execution != Execution::kCompiled) {
    simplefsdp_gaps.insert(simplefsdp_gaps.begin(),
                           "the job runs without torch.compile, SimpleFSDP compiled only");
  }
  simplefsdp["exact"] = simplefsdp_gaps.empty();
  if (!simplefsdp_gaps.empty()) {
    simplefsdp["note"] = fmt::format(
        "SimpleFSDP does not reproduce the plan: {}; its forward buckets are the list to use "
        "in place of get_transformer_block_buckets' (--compile.graph_passes "
        "transformer_block_bucketing)",
        fmt::join(simplefsdp_gaps, "; "));
  } else if (plan.one_collective_per_parameter) {
    simplefsdp["note"] =
        "SimpleFSDP without a bucketing pass reproduces the plan (a collective per parameter; "
        "its prefetch of one is the model's assumption)";
  } else {
    simplefsdp["note"] =
        "SimpleFSDP's manual bucketing (--compile.graph_passes transformer_block_bucketing, "
        "with these buckets in place of get_transformer_block_buckets') reproduces the plan: "
        "one list of buckets, one reshard setting, one stream, one bucket ahead";
  }

  // FSDP2 has one grouping for both directions and both collectives: the forward
  // buckets become the fully_shard groups. Explicit prefetch lists follow the plan's
  // depths: group i prefetches the next `forward_prefetch` groups in forward and the
  // previous `backward_prefetch` groups in backward (set_modules_to_*_prefetch).
  const int group_count = static_cast<int>(plan.forward_buckets.size());
  json groups = json::array();
  for (int g = 0; g < group_count; ++g) {
    json forward_prefetch = json::array();
    for (int next = g + 1; next <= std::min(group_count - 1, g + plan.forward_prefetch); ++next) {
      forward_prefetch.push_back(modules_of(plan.forward_buckets[next]));
    }
    json backward_prefetch = json::array();
    for (int previous = g - 1; previous >= std::max(0, g - plan.backward_prefetch); --previous) {
      backward_prefetch.push_back(modules_of(plan.forward_buckets[previous]));
    }
    groups.push_back(
        json{{"modules", modules_of(plan.forward_buckets[g])},
             {"reshard_after_forward", static_cast<bool>(plan.reshard_after_forward[g])},
             {"forward_prefetch", std::move(forward_prefetch)},
             {"backward_prefetch", std::move(backward_prefetch)}});
  }
  const std::vector<std::string> differences = fsdp2_differences(plan);
  const bool exact = differences.empty();
  json fsdp2{{"fully_shard_groups", std::move(groups)},
             {"exact", exact},
             {"note", exact ? std::string("FSDP2 groups reproduce the plan (one grouping for "
                                          "forward, backward and reduce-scatter, two streams, "
                                          "flat-buffer copies)")
                            : fmt::format("FSDP2 groups do not reproduce the plan: {}; the "
                                          "forward buckets are its groups",
                                          fmt::join(differences, "; "))}};

  return json{{"format", kTorchtitanFormatName},     {"version", kTorchtitanPlanFormatVersion},
              {"model", workload.model.name},        {"plan", plan.name},
              {"simplefsdp", std::move(simplefsdp)}, {"fsdp2", std::move(fsdp2)}};
}

json torchtitan_pipeline_to_json(const Workload& workload, const SchedulePipeline& pipeline) {
  const JobSpec& job = workload.job;
  // torchtitan's names for the schedules (torch.distributed.pipelining's classes). With
  // pp = 1 there is no pipeline (the microbatches are gradient accumulation on every rank):
  // null, whatever --pp-schedule said.
  const json schedule_name = job.pp == 1 ? json(nullptr)
                             : job.pp_schedule == PipelineSchedule::kInterleaved1F1B
                                 ? json("Interleaved1F1B")
                             : job.pp_schedule == PipelineSchedule::kGPipe ? json("GPipe")
                                                                           : json("1F1B");
  json split_points = json::array();
  json stages = json::array();
  for (std::size_t c = 0; c < pipeline.chunks.size(); ++c) {
    const ScheduleChunk& chunk = pipeline.chunks[c];
    const Workload chunk_units = chunk_workload(workload, chunk.units);
    json modules = json::array();
    for (const Unit& unit : chunk_units.units) {
      for (const std::string& module : unit.modules) modules.push_back(module);
    }
    // A stage starts at its first module (torchtitan splits before the named module).
    if (c > 0) split_points.push_back(modules.front());
    json plan = torchtitan_plan_to_json(chunk_units, chunk.plan);
    stages.push_back(json{{"stage", static_cast<std::int64_t>(c)},
                          {"rank", chunk.rank},
                          {"modules", std::move(modules)},
                          {"keep_gathered", chunk.keep_gathered},
                          {"simplefsdp", std::move(plan.at("simplefsdp"))},
                          {"fsdp2", std::move(plan.at("fsdp2"))}});
  }
  json config{{"pipeline_parallel_degree", job.pp},
              {"pipeline_parallel_schedule", schedule_name},
              {"pipeline_parallel_microbatches", job.microbatches},
              {"pipeline_parallel_microbatch_size", job.local_batch},
              {"pipeline_parallel_split_points", std::move(split_points)},
              {"stages_per_rank", job.virtual_stages}};
  // The split torchtitan is to make of the blocks: only where there are stages to split,
  // and by the weights only where the job splits by them (else the stages' modules are
  // the split: module_fqns_per_model_part).
  // Only with gradient accumulation over pipeline steps: other exports keep their text.
  if (job.pipeline_steps > 1) config["pipeline_steps"] = job.pipeline_steps;
  if (job.pp > 1 && job.pp_chunk_blocks.empty()) {
    config["pipeline_parallel_first_stage_less_layers"] = job.pp_first_stage_less_layers;
    config["pipeline_parallel_last_stage_less_layers"] = job.pp_last_stage_less_layers;
  }
  return json{{"format", kTorchtitanFormatName}, {"version", kTorchtitanPipelineFormatVersion},
              {"model", workload.model.name},    {"plan", "tuned"},
              {"pipeline", std::move(config)},   {"stages", std::move(stages)}};
}

}  // namespace fsdptune
