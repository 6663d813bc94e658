// The schedule file: round trip, hash, rejection of other versions, models and missing
// fields, and the torchtitan export.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fsdptune/cost_model.hpp"
#include "fsdptune/error.hpp"
#include "fsdptune/hardware.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/job.hpp"
#include "fsdptune/model.hpp"
#include "fsdptune/plan.hpp"
#include "fsdptune/program.hpp"
#include "fsdptune/schedule.hpp"
#include "fsdptune/workload.hpp"

using namespace fsdptune;
using nlohmann::json;

namespace {

JobSpec tiny_job() {
  JobSpec job;
  job.gpus = 8;
  job.gpus_per_node = 8;
  job.local_batch = 1;
  job.seq_len = 256;
  return job;
}

// tiny: 4 blocks -> 6 units (tok_embeddings, layers.0..3, norm+output).
Plan three_bucket_plan() {
  Plan plan;
  plan.name = "tuned";
  plan.forward_buckets = {{0, 0}, {1, 2}, {3, 5}};
  plan.backward_buckets = {{0, 1}, {2, 5}};
  plan.reduce_scatter_buckets = {{0, 0}, {1, 1}, {2, 3}, {4, 5}};
  plan.reshard_after_forward = {true, true, false};
  plan.forward_prefetch = 2;
  plan.backward_prefetch = 1;
  plan.stream_layout = StreamLayout::kShared;
  return plan;
}

// A summary whose figures hold together as the reader checks: tokens/s/GPU and MFU are
// its step's, and compute + exposed + idle is the step.
PlanSummary consistent_summary(const ScheduleFile& schedule, const std::string& name,
                               double step_s) {
  const Workload workload = build_workload(schedule.model, schedule.job);
  PlanSummary s;
  s.plan_name = name;
  s.step_time_s = step_s;
  const StepThroughput throughput =
      step_throughput(schedule.job, static_cast<double>(workload.tokens_per_step()),
                      workload.model_flops_per_step(), schedule.hardware, step_s);
  s.tokens_per_s_per_gpu = throughput.tokens_per_s_per_gpu;
  s.mfu = throughput.mfu;
  s.compute_s = step_s / 3;
  s.comm_s = step_s / 2;
  s.exposed_comm_s = step_s / 7;
  s.idle_s = step_s - s.compute_s - s.exposed_comm_s;
  s.peak_allocated_bytes = 123456789012;
  s.peak_reserved_bytes = 133456789012;
  s.peak_breakdown = {1, 2, 3, 4, 5};
  s.fits = true;
  return s;
}

// The prediction and baseline of the schedule's job, its step ending with the last timing.
void set_consistent_figures(ScheduleFile& schedule) {
  const double step_s = schedule.timings.back().end_s;
  schedule.predicted = consistent_summary(schedule, "tuned", step_s);
  schedule.baselines = {consistent_summary(schedule, "fsdp2", 1.25 * step_s)};
  schedule.pareto = {{1.25 * step_s, 100, "fsdp2", 106}, {step_s, 200, "tuned", 211}};
}

ScheduleFile make_schedule() {
  ScheduleFile schedule;
  schedule.model = builtin_model("tiny");
  schedule.job = normalize_job(schedule.model, tiny_job());
  schedule.hardware = builtin_hardware("h100-sxm");
  schedule.memory_limit_bytes = 140 * kGiB;  // over the reserved peak below: it fits
  schedule.plan = three_bucket_plan();
  const Workload workload = build_workload(schedule.model, schedule.job);
  const auto costs = make_analytic_cost_model(schedule.hardware);
  schedule.program = lower(workload, schedule.plan, *costs);
  // Timings and the timeline are the simulator's; any values round-trip. Fractions that
  // are not exact in binary check that doubles survive the text form bit for bit.
  for (std::size_t i = 0; i < schedule.program.tasks.size(); ++i) {
    schedule.timings.push_back(
        {0.1 * static_cast<double>(i), 0.1 * static_cast<double>(i) + 1.0 / 3});
  }
  schedule.memory_timeline = {{0.0, 1000}, {1.0 / 7, 123456789012}, {2.5, 1000}};
  set_consistent_figures(schedule);
  schedule.lower_bound_s = 0.1;
  schedule.cost_queries = schedule.program.cost_queries;
  schedule.cost_fallbacks = schedule.program.cost_fallbacks;
  schedule.provenance = {"fsdptune 0.1.0",
                         "h100-sxm",
                         "0123456789abcdef",
                         18446744073709551615ULL,
                         2,
                         "fsdptune tune --model tiny",
                         ""};
  return schedule;
}

// Loads `json` and returns the error it raised (fails the test when it loads).
Error load_error(const json& document) {
  try {
    schedule_from_json(document, "schedule.json");
  } catch (const Error& e) {
    return e;
  }
  FAIL("the schedule was accepted");
  return Error(ErrorKind::kRuntime, "", "");
}

}  // namespace

TEST_CASE("a schedule survives JSON text and back, byte for byte", "[schedule]") {
  const ScheduleFile schedule = make_schedule();
  REQUIRE_FALSE(schedule.program.tasks.empty());
  REQUIRE_FALSE(schedule.program.buckets.empty());
  const std::string text = dump_json(schedule_to_json(schedule));
  const ScheduleFile loaded = schedule_from_json(parse_json_text(text, "s.json"), "s.json");
  CHECK(loaded == schedule);
  CHECK(dump_json(schedule_to_json(loaded)) == text);
  CHECK(schedule_hash(loaded) == schedule_hash(schedule));
}

TEST_CASE("a schedule's comm_slowdown_with_compute: written where not 1, absent read as 1",
          "[schedule]") {
  ScheduleFile schedule = make_schedule();
  // 1 (every schedule not tuned on a profile that measured it): not written, so schedules
  // written before the factor keep their text and hash.
  const json plain = schedule_to_json(schedule);
  CHECK_FALSE(plain.at("program").at("contention").contains("comm_slowdown_with_compute"));
  CHECK(schedule_from_json(plain, "s.json").program.contention.comm_slowdown_with_compute == 1);
  schedule.program.contention.comm_slowdown_with_compute = 4.03;
  const std::string text = dump_json(schedule_to_json(schedule));
  const ScheduleFile loaded = schedule_from_json(parse_json_text(text, "s.json"), "s.json");
  CHECK(loaded == schedule);
  CHECK(dump_json(schedule_to_json(loaded)) == text);
}

TEST_CASE("a schedule's copy factors: written where not 1, absent read as 1", "[schedule]") {
  ScheduleFile schedule = make_schedule();
  const json plain = schedule_to_json(schedule);
  const json& contention = plain.at("program").at("contention");
  CHECK_FALSE(contention.contains("copy_slowdown_with_compute"));
  CHECK_FALSE(contention.contains("compute_slowdown_with_copy"));
  const ScheduleFile read_plain = schedule_from_json(plain, "s.json");
  CHECK(read_plain.program.contention.copy_slowdown_with_compute == 1);
  CHECK(read_plain.program.contention.compute_slowdown_with_copy == 1);
  const std::string plain_hash = schedule_hash(schedule);
  schedule.program.contention.copy_slowdown_with_compute = 2.7;
  schedule.program.contention.compute_slowdown_with_copy = 1.3;
  const std::string text = dump_json(schedule_to_json(schedule));
  const ScheduleFile loaded = schedule_from_json(parse_json_text(text, "s.json"), "s.json");
  CHECK(loaded == schedule);
  CHECK(dump_json(schedule_to_json(loaded)) == text);
  CHECK(schedule_hash(loaded) != plain_hash);  // the factors are part of what was tuned
}

// Found probing the CLI: a schedule whose job was edited after tuning (a longer sequence)
// replayed its stored Program, the old job's times, under the new job's throughput.
TEST_CASE("a schedule's provenance.job_hash refuses a job edited after tuning", "[schedule]") {
  ScheduleFile schedule = make_schedule();
  schedule.provenance.job_hash = schedule_job_hash(schedule.job);
  json document = schedule_to_json(schedule);
  CHECK(document.at("provenance").at("job_hash") == schedule.provenance.job_hash);
  const std::string text = dump_json(document);
  const ScheduleFile loaded = schedule_from_json(parse_json_text(text, "s.json"), "s.json");
  CHECK(loaded == schedule);
  CHECK(dump_json(schedule_to_json(loaded)) == text);

  document["job"]["seq_len"] = document["job"]["seq_len"].get<std::int64_t>() * 2;
  const Error edited = load_error(document);
  CHECK(edited.kind() == ErrorKind::kBadInput);
  CHECK(edited.where() == "schedule.json: job");
  CHECK_THAT(edited.message(), Catch::Contains("differs from the job the schedule was tuned for"));
  // Found probing the CLI: a field out of range is named as such, not as a hash mismatch.
  json negative = document;
  negative["job"]["seq_len"] = -1;
  const Error range = load_error(negative);
  CHECK(range.where() == "schedule.json: job: field 'seq_len'");
  // Without the field (files written before it): read, written back without it.
  document["job"] = schedule_to_json(schedule).at("job");
  document["provenance"].erase("job_hash");
  const ScheduleFile old = schedule_from_json(document, "schedule.json");
  CHECK(old.provenance.job_hash.empty());
  CHECK_FALSE(schedule_to_json(old).at("provenance").contains("job_hash"));
  // Found by QA on such files: a job without dp_shard, or dp_shard 0 (the flag's "derived"),
  // stopped the workload builder at an internal check; one without gpus was read as 8 GPUs.
  for (const char* field : {"dp_shard", "gpus", "activation_checkpointing"}) {
    json missing = document;
    missing["job"].erase(field);
    const Error error = load_error(missing);
    CHECK(error.exit_code() == 2);
    CHECK(error.where() == fmt::format("schedule.json: job: field '{}'", field));
    CHECK(error.message() == "missing field (every job holds it)");
  }
  json derived = document;
  derived["job"]["dp_shard"] = 0;
  const Error unnormalized = load_error(derived);
  CHECK(unnormalized.exit_code() == 2);
  CHECK(unnormalized.where() == "schedule.json: job: field 'dp_shard'");
  CHECK(unnormalized.message() ==
        fmt::format("is 0, where the job normalized says {}", schedule.job.dp_shard));
}

// Found probing report: a task timing that ends before it starts was read, and the HTML
// Gantt chart then left the task out.
TEST_CASE("a schedule timing that ends before it starts is refused", "[schedule]") {
  json document = schedule_to_json(make_schedule());
  REQUIRE(document.at("timings").size() > 2);
  document["timings"][2] = json::array({0.5, 0.1});
  const Error error = load_error(document);
  CHECK(error.where() == "schedule.json: timings[2]");
  CHECK(error.message() == "ends before it starts");
}

// Found probing report: a hand-edited prediction was reported as it read (a 1.0 s step at
// 500% MFU); the reader holds a summary's figures to its step time and its timings.
TEST_CASE("a schedule's predicted figures must agree with its step time", "[schedule]") {
  const json document = schedule_to_json(make_schedule());
  const double step_s = document.at("predicted").at("step_time_s").get<double>();
  // step_throughput: 256 tokens per rank per step on one GPU per replica.
  CHECK(document.at("predicted").at("tokens_per_s_per_gpu").get<double>() == Approx(256 / step_s));
  struct Edit {
    std::string pointer;
    double value;
    std::string where;
    std::string says;
  };
  const std::vector<Edit> edits = {
      {"/predicted/mfu", 5.0, "schedule.json: predicted.mfu", "of the hardware's peak"},
      {"/predicted/tokens_per_s_per_gpu", 1.0, "schedule.json: predicted.tokens_per_s_per_gpu",
       "256 tokens per step"},
      {"/baselines/0/mfu", 0.0, "schedule.json: baselines[0].mfu", "of the hardware's peak"},
      {"/predicted/idle_s", 0.0, "schedule.json: predicted.step_time_s",
       "compute_s + exposed_comm_s + idle_s"},
      {"/predicted/comm_s", 0.0, "schedule.json: predicted.exposed_comm_s", "more than comm_s"},
      // A step of 0 s is held to its parts too (found by QA: a baseline's was not).
      {"/baselines/0/step_time_s", 0.0, "schedule.json: baselines[0].step_time_s",
       "compute_s + exposed_comm_s + idle_s"},
      {"/lower_bound_s", 2 * step_s, "schedule.json: lower_bound_s", "a lower bound"},
  };
  for (const Edit& edit : edits) {
    INFO(edit.pointer);
    json edited = document;
    edited[json::json_pointer(edit.pointer)] = edit.value;
    const Error error = load_error(edited);
    CHECK(error.where() == edit.where);
    CHECK_THAT(error.message(), Catch::Contains(edit.says));
  }
  // A step of 0 s with no parts has no rates either.
  json no_time = document;
  for (const char* key : {"step_time_s", "compute_s", "exposed_comm_s", "idle_s"}) {
    no_time["baselines"][0][key] = 0.0;
  }
  const Error rates = load_error(no_time);
  CHECK(rates.where() == "schedule.json: baselines[0].tokens_per_s_per_gpu");
  CHECK_THAT(rates.message(), Catch::Contains("but step_time_s is 0 s"));
  // The step is where the last timing ends.
  json late = document;
  late["timings"].back()[1] = 2 * step_s;
  const Error error = load_error(late);
  CHECK(error.where() == "schedule.json: predicted.step_time_s");
  CHECK_THAT(error.message(), Catch::Contains("the last of the timings ends at"));
  // And where every timing ends before it (found by mutation testing: one direction only).
  json early = document;
  for (json& timing : early["timings"]) {
    timing[0] = 0.5 * timing[0].get<double>();
    timing[1] = 0.5 * timing[1].get<double>();
  }
  const Error early_error = load_error(early);
  CHECK(early_error.where() == "schedule.json: predicted.step_time_s");
  CHECK_THAT(early_error.message(), Catch::Contains("the last of the timings ends at"));
}

TEST_CASE("a Pareto point without a reserved peak (written before it had one) reads as 0",
          "[schedule]") {
  json document = schedule_to_json(make_schedule());
  CHECK(document.at("pareto").at(1).at("peak_reserved_bytes") == 211);
  for (json& point : document["pareto"]) point.erase("peak_reserved_bytes");
  const ScheduleFile loaded = schedule_from_json(document, "old.json");
  REQUIRE(loaded.pareto.size() == 2);
  CHECK(loaded.pareto[0].peak_allocated_bytes == 100);
  CHECK(loaded.pareto[0].peak_reserved_bytes == 0);
  CHECK(loaded.pareto[1].peak_reserved_bytes == 0);
}

TEST_CASE("the schedule file carries the buffer layout with padding", "[schedule]") {
  const ScheduleFile schedule = make_schedule();
  const json document = schedule_to_json(schedule);
  CHECK(document.at("format") == "fsdptune-schedule");
  CHECK(document.at("version") == 1);
  const json& slot = document.at("program").at("buckets").at(0).at("slots").at(0);
  // padding = shard_numel * dp_shard - numel, with dp_shard = 8 on 8 GPUs.
  CHECK(slot.at("padding_elements").get<std::int64_t>() ==
        slot.at("shard_numel").get<std::int64_t>() * 8 - slot.at("numel").get<std::int64_t>());
  CHECK(slot.at("padding_elements").get<std::int64_t>() >= 0);
  CHECK(slot.at("padding_elements").get<std::int64_t>() < 8);
  // efficiency = lower bound / step time.
  CHECK(document.at("efficiency").get<double>() == Approx(0.1 / schedule.predicted.step_time_s));
}

TEST_CASE("schedule_hash is FNV-1a 64 of the canonical text less how tune was invoked",
          "[schedule]") {
  // Published FNV-1a 64 test vectors.
  CHECK(fnv1a64_hex("") == "cbf29ce484222325");
  CHECK(fnv1a64_hex("a") == "af63dc4c8601ec8c");
  CHECK(fnv1a64_hex("foobar") == "85944171f73967e8");
  const ScheduleFile schedule = make_schedule();
  nlohmann::json canonical = schedule_to_json(schedule);
  const std::string whole_text_hash = fnv1a64_hex(dump_json(canonical));
  canonical["provenance"].erase("command");
  canonical["provenance"].erase("cost_source");
  canonical["provenance"].erase("threads");
  CHECK(schedule_hash(schedule) == fnv1a64_hex(dump_json(canonical)));
  CHECK(schedule_hash(schedule) != whole_text_hash);
  CHECK(schedule_text_hash(schedule) == whole_text_hash);
  // What was found changes it; how the search was run (threads, a path's spelling, the
  // flags' order) does not.
  ScheduleFile other = schedule;
  other.plan.forward_prefetch = 1;
  CHECK(schedule_hash(other) != schedule_hash(schedule));
  other = schedule;
  other.provenance.seed += 1;
  CHECK(schedule_hash(other) != schedule_hash(schedule));
  other = schedule;
  other.provenance.cost_hash = "0000000000000000";
  CHECK(schedule_hash(other) != schedule_hash(schedule));
  other = schedule;
  other.provenance.threads += 3;
  other.provenance.command += " --threads 4";
  other.provenance.cost_source = "./" + other.provenance.cost_source;
  CHECK(schedule_hash(other) == schedule_hash(schedule));
  // A measured file names the schedule by its hash, or (written before 2026-12-04) by the
  // whole text's.
  CHECK(schedule_has_hash(schedule, schedule_hash(schedule)));
  CHECK(schedule_has_hash(schedule, whole_text_hash));
  CHECK_FALSE(schedule_has_hash(other, whole_text_hash));
  CHECK_FALSE(schedule_has_hash(schedule, "cbf29ce484222325"));
}

TEST_CASE("a schedule of another version is rejected naming the field", "[schedule]") {
  json document = schedule_to_json(make_schedule());
  document["version"] = 3;  // 1 and 2 (pipeline schedules) are read
  const Error e = load_error(document);
  CHECK(e.kind() == ErrorKind::kBadInput);
  CHECK(e.where() == "schedule.json: version");
  CHECK(std::string(e.what()).find("version 3") != std::string::npos);
  // A version 1 document relabelled 2 is named by its version (it was named by the
  // pipeline it lacks).
  document["version"] = 2;
  const Error relabelled = load_error(document);
  CHECK(relabelled.where() == "schedule.json: version");
  CHECK(relabelled.message() ==
        "version 2 holds a pipelined job's 'pipeline', but the file has a 'plan' (a version 1 "
        "schedule's)");
  // Without either body, the one its version needs is named.
  document.erase("plan");
  CHECK(load_error(document).where() == "schedule.json: pipeline");
  document = schedule_to_json(make_schedule());
  // A file of another format is named by it, whatever its version (found probing:
  // `compare m.json s.json` said "schedule format version 5 is not supported").
  document["format"] = "fsdptune-measured";
  document["version"] = 5;
  const Error other = load_error(document);
  CHECK(other.where() == "schedule.json: format");
  CHECK(other.message() == "\"fsdptune-measured\", expected \"fsdptune-schedule\"");
}

TEST_CASE("a schedule with a missing field is rejected naming it", "[schedule]") {
  const json document = schedule_to_json(make_schedule());
  SECTION("top level") {
    json broken = document;
    broken.erase("program");
    CHECK(load_error(broken).where() == "schedule.json: program");
  }
  SECTION("inside a task") {
    json broken = document;
    broken["program"]["tasks"][3].erase("kind");
    CHECK(load_error(broken).where() == "schedule.json: program.tasks[3].kind");
  }
  SECTION("inside a bucket slot") {
    json broken = document;
    broken["program"]["buckets"][1]["slots"][0].erase("offset");
    CHECK(load_error(broken).where() == "schedule.json: program.buckets[1].slots[0].offset");
  }
  SECTION("provenance") {
    json broken = document;
    broken["provenance"].erase("seed");
    CHECK(load_error(broken).where() == "schedule.json: provenance.seed");
  }
}

TEST_CASE("a schedule with an unknown field is rejected naming it", "[schedule]") {
  // Found probing: a misspelt field was ignored where every other reader refuses it.
  const json document = schedule_to_json(make_schedule());
  CHECK_NOTHROW(schedule_from_json(document, "schedule.json"));
  const struct {
    json::json_pointer object;
    const char* key;
    const char* where;
  } cases[] = {
      {json::json_pointer(""), "lower_bound", "schedule.json: lower_bound"},
      {json::json_pointer("/provenance"), "seeds", "schedule.json: provenance.seeds"},
      {json::json_pointer("/predicted"), "step_s", "schedule.json: predicted.step_s"},
      {json::json_pointer("/predicted/peak_breakdown"), "other",
       "schedule.json: predicted.peak_breakdown.other"},
      {json::json_pointer("/program"), "stream", "schedule.json: program.stream"},
      {json::json_pointer("/program/contention"), "compute_slowdown",
       "schedule.json: program.contention.compute_slowdown"},
      {json::json_pointer("/program/tasks/3"), "duration",
       "schedule.json: program.tasks[3].duration"},
      {json::json_pointer("/program/tasks/3/group"), "nics",
       "schedule.json: program.tasks[3].group.nics"},
      {json::json_pointer("/program/buckets/1/slots/0"), "size",
       "schedule.json: program.buckets[1].slots[0].size"},
      {json::json_pointer("/baselines/0"), "name", "schedule.json: baselines[0].name"},
  };
  for (const auto& item : cases) {
    INFO(item.where);
    json broken = document;
    REQUIRE(broken.at(item.object).is_object());
    broken.at(item.object)[item.key] = 1;
    CHECK(load_error(broken).where() == item.where);
    CHECK(load_error(broken).message() == "unknown field");
  }
  // A group's nodes (written where its ranks split unevenly over them) are 1 to its ranks
  // over its ranks per node, and those of the job's group.
  json spanning = document;
  REQUIRE(spanning["program"]["tasks"][3]["group"]["ranks"] == 8);
  spanning["program"]["tasks"][3]["group"]["nodes"] = 9;
  CHECK(load_error(spanning).where() == "schedule.json: program.tasks[3].group.nodes");
  CHECK(load_error(spanning).message() == "is 9, expected 1 to 1");
  spanning["program"]["tasks"][3]["group"]["ranks_per_node"] = 2;
  spanning["program"]["tasks"][3]["group"]["nodes"] = 3;
  CHECK(load_error(spanning).where() == "schedule.json: program.tasks[3].group");
  CHECK_THAT(load_error(spanning).message(),
             Catch::Contains("over 8 ranks on 3 nodes (at fewest 2 per node), while the job's "
                             "shard group is 8 ranks (8 per node)"));
  spanning["program"]["tasks"][3]["group"]["ranks_per_node"] = 8;
  spanning["program"]["tasks"][3]["group"]["nodes"] = 1;  // as 8 per node says: the same
  CHECK_NOTHROW(schedule_from_json(spanning, "schedule.json"));
  // A version 1 file does not carry a pipeline.
  json broken = document;
  broken["pipeline"] = json::object();
  CHECK(load_error(broken).where() == "schedule.json: pipeline");
  // The derived figures written for readers are not unknown.
  REQUIRE(document.contains("efficiency"));
  REQUIRE(document["program"]["buckets"][1]["slots"][0].contains("padding_elements"));
}

TEST_CASE("a schedule whose program does not match its model is rejected", "[schedule]") {
  json document = schedule_to_json(make_schedule());
  SECTION("the model swapped for one with other dims") {
    // llama3.2-1b has 16 blocks: the plan's buckets no longer partition its 18 units.
    document["model"] = model_to_json(builtin_model("llama3.2-1b"));
    const Error e = load_error(document);
    CHECK(e.kind() == ErrorKind::kBadInput);
    CHECK(e.where().find("schedule.json: plan") == 0);
  }
  SECTION("a parameter of another size in a bucket") {
    document["program"]["buckets"][0]["slots"][0]["numel"] = 12345;
    const Error e = load_error(document);
    CHECK(e.where() == "schedule.json: program.buckets[0].slots[0]");
    CHECK(e.hint().find("another model") != std::string::npos);
  }
  SECTION("a dependency that points forward") {
    document["program"]["tasks"][0]["deps"] = json::array({1});
    CHECK(load_error(document).where() == "schedule.json: program.tasks[0].deps[0]");
  }
  // Seen fuzzing schedules: the job's errors named the command line's flags ("--tp: ..."),
  // not the file and its field, though no flag was given.
  SECTION("a job the model cannot run") {
    document["job"]["tp"] = 3;  // tiny has 8 heads
    CHECK(load_error(document).where() == "schedule.json: job: field 'tp'");
    document["job"]["tp"] = 1;
    document["job"]["local_batch"] = std::int64_t{1} << 40;
    CHECK(load_error(document).where() == "schedule.json: job: field 'local_batch'");
  }
}

// Fuzzing found: a Program whose memory events free more than is allocated passed the
// loader, and `simulate --plan` then aborted (FSDPTUNE_CHECK "memory of a category went
// negative"). The loader now takes every free from allocations that happen before it.
TEST_CASE("a Program that frees memory it did not allocate is rejected", "[schedule]") {
  json document = schedule_to_json(make_schedule());
  json& tasks = document["program"]["tasks"];
  // The first free of the program and where it is.
  std::size_t task = 0;
  std::size_t event = 0;
  bool found = false;
  for (task = 0; task < tasks.size() && !found; ++task) {
    for (event = 0; event < tasks[task]["memory"].size(); ++event) {
      if (tasks[task]["memory"][event]["bytes"].get<std::int64_t>() < 0) {
        found = true;
        break;
      }
    }
  }
  REQUIRE(found);
  --task;
  const std::string where = "schedule.json: program.tasks[" + std::to_string(task) + "].memory[" +
                            std::to_string(event) + "]";
  SECTION("a free larger than what was allocated") {
    json& bytes = tasks[task]["memory"][event]["bytes"];
    bytes = bytes.get<std::int64_t>() * 1000;
    const Error e = load_error(document);
    CHECK(e.where() == where);
    CHECK_THAT(e.message(), Catch::Contains("frees"));
  }
  SECTION("a free before any task allocated") {
    tasks[0]["memory"].push_back(
        json{{"category", "activations"}, {"bytes", -1}, {"at_end", false}});
    const Error e = load_error(document);
    CHECK(e.where() == "schedule.json: program.tasks[0].memory[" +
                           std::to_string(tasks[0]["memory"].size() - 1) + "]");
  }
  SECTION("a free of what a later task allocates") {
    // Task 0 frees what the last task allocates: no order runs the allocation first.
    tasks[0]["memory"].push_back(
        json{{"category", "workspace"}, {"bytes", -4096}, {"at_end", true}});
    tasks.back()["memory"].push_back(
        json{{"category", "workspace"}, {"bytes", 4096}, {"at_end", false}});
    CHECK_THAT(load_error(document).where(), Catch::StartsWith("schedule.json: program.tasks[0]"));
  }
}

// Fuzzing found: numbers far out of range passed the loader, then overflowed int64 in the
// simulator (events of 2^63 bytes), in the slot check (offset + shard_numel), in the
// reports (times of 1e308 made an axis of infinite ticks; peaks of 2^63 cast from double),
// wrapped when read into an int (a task id of 2^32 read as 0, cost_queries of 2^31 written
// back as -2^31, unreadable), or made the simulated step infinite (a contention factor of
// 1e-300).
TEST_CASE("a schedule's numbers beyond its limits are rejected naming the field", "[schedule]") {
  json document = schedule_to_json(make_schedule());
  std::string field;
  SECTION("a task id that does not fit in an int") {
    document["program"]["tasks"][1]["id"] = std::int64_t{1} << 32 | 1;
    field = "program.tasks[1].id";
  }
  SECTION("a task duration of 1e300 s") {
    document["program"]["tasks"][0]["duration_s"] = 1e300;
    field = "program.tasks[0].duration_s";
  }
  SECTION("a memory event of 2^62 bytes") {
    document["program"]["tasks"][0]["memory"][0]["bytes"] = std::int64_t{1} << 62;
    field = "program.tasks[0].memory[0].bytes";
  }
  SECTION("a slot offset of 2^63 - 1") {
    document["program"]["buckets"][0]["slots"][0]["offset"] =
        std::numeric_limits<std::int64_t>::max();
    field = "program.buckets[0].slots[0].offset";
  }
  SECTION("a peak of 2^62 bytes") {
    document["predicted"]["peak_allocated_bytes"] = std::int64_t{1} << 62;
    field = "predicted.peak_allocated_bytes";
  }
  SECTION("a step time of 1e308 s") {
    document["pareto"][0]["step_time_s"] = 1e308;
    field = "pareto[0].step_time_s";
  }
  SECTION("a negative time") {
    document["timings"][2][0] = -1.0;
    field = "timings[2]";
  }
  SECTION("a contention factor of 1e-300") {
    document["program"]["contention"]["comm_share_efficiency"] = 1e-300;
    field = "program.contention.comm_share_efficiency";
  }
  SECTION("a copy slowdown beside compute below 1") {
    document["program"]["contention"]["copy_slowdown_with_compute"] = 0.5;
    field = "program.contention.copy_slowdown_with_compute";
  }
  SECTION("a compute slowdown beside copies above 100") {
    document["program"]["contention"]["compute_slowdown_with_copy"] = 1e300;
    field = "program.contention.compute_slowdown_with_copy";
  }
  SECTION("a communication slowdown beside compute above 100") {
    document["program"]["contention"]["comm_slowdown_with_compute"] = 1e300;
    field = "program.contention.comm_slowdown_with_compute";
  }
  SECTION("a count that does not fit in an int") {
    document["program"]["cost_queries"] = std::int64_t{1} << 31;
    field = "program.cost_queries";
  }
  SECTION("a negative memory sample") {
    document["memory_timeline"][0][1] = -5;
    field = "memory_timeline[0][1]";
  }
  // Found probing: with a limit of 0 report said "yes" for plans its Pareto table said "no"
  // for. A summary's fits is its reserved peak against the limit.
  SECTION("a memory limit the predicted plan does not fit") {
    document["memory_limit_bytes"] = 0;
    field = "predicted.fits";
  }
  SECTION("a baseline that says it does not fit under a limit it fits") {
    document["baselines"][0]["fits"] = false;
    field = "baselines[0].fits";
  }
  SECTION("more streams than a Program has") {
    for (int i = 0; i < 64; ++i) {
      document["program"]["streams"].push_back(json{{"name", "extra"}, {"role", "compute"}});
    }
    field = "program.streams";
  }
  // Found by QA: these three were read.
  SECTION("cost queries beyond an int") {
    document["cost_queries"] = std::int64_t{1} << 62;
    field = "cost_queries";
  }
  SECTION("no threads") {
    document["provenance"]["threads"] = -1;
    field = "provenance.threads";
  }
  SECTION("an integer of 2^63, which an int64 wraps to negative") {
    document["memory_limit_bytes"] = std::uint64_t{1} << 63;
    field = "memory_limit_bytes";
  }
  const Error e = load_error(document);
  CHECK(e.kind() == ErrorKind::kBadInput);
  CHECK(e.where() == "schedule.json: " + field);
  if (field == "memory_limit_bytes") {
    CHECK(e.message() == "is 9223372036854775808, more than 2^63 - 1");
  }
}

// The memory check must accept what the lowering writes, whatever the plan's shape.
TEST_CASE("the Programs of every kind of plan pass the loader's checks", "[schedule]") {
  ScheduleFile schedule = make_schedule();
  const auto costs = make_analytic_cost_model(schedule.hardware);
  std::vector<Plan> plans;
  Plan plan = three_bucket_plan();
  plans.push_back(plan);
  plan.stream_layout = StreamLayout::kSeparate;
  plan.copy_in_out = false;
  plans.push_back(plan);
  plan = three_bucket_plan();
  plan.reorder = false;
  plan.forward_prefetch = 0;
  plan.backward_prefetch = 0;
  plan.reshard_after_forward = {false, false, false};
  plans.push_back(plan);
  plan = three_bucket_plan();
  plan.one_collective_per_parameter = true;
  plan.forward_prefetch = 3;
  plans.push_back(plan);
  for (const ActivationCheckpointing ac :
       {ActivationCheckpointing::kNone, ActivationCheckpointing::kFull}) {
    for (const auto& [tp, replicate] :
         {std::pair<std::int64_t, std::int64_t>{1, 1}, {1, 2}, {2, 2}}) {
      JobSpec job = tiny_job();
      job.ac = ac;
      job.tp = tp;
      job.dp_replicate = replicate;
      schedule.job = normalize_job(schedule.model, job);
      const Workload workload = build_workload(schedule.model, schedule.job);
      for (const Plan& each : plans) {
        schedule.plan = each;
        schedule.program = lower(workload, each, *costs);
        schedule.timings.assign(schedule.program.tasks.size(), TaskTiming{0, 1});
        set_consistent_figures(schedule);
        INFO("plan " << plan_to_json(each).dump() << ", tp " << tp << ", replicas " << replicate
                     << ", AC " << to_string(ac));
        CHECK(schedule_from_json(schedule_to_json(schedule), "s.json") == schedule);
      }
    }
  }
}

// Found probing validate: an HSDP schedule with its all-reduces deleted, a collective of
// another kind than its bucket, stream roles swapped, a unit's forward run twice, the
// optimizer's deps dropped: all simulated, and replayed "data checked" (the checker took
// what to expect from the edited Program itself).
TEST_CASE("a Program inconsistent in itself is rejected naming the task or bucket", "[schedule]") {
  ScheduleFile schedule = make_schedule();
  JobSpec job = tiny_job();
  job.dp_replicate = 2;
  schedule.job = normalize_job(schedule.model, job);
  const Workload workload = build_workload(schedule.model, schedule.job);
  schedule.program = lower(workload, schedule.plan, *make_analytic_cost_model(schedule.hardware));
  schedule.timings.assign(schedule.program.tasks.size(), TaskTiming{0, 1});
  set_consistent_figures(schedule);
  REQUIRE(schedule_from_json(schedule_to_json(schedule), "s.json") == schedule);
  Program& program = schedule.program;
  const auto first = [&](TaskKind kind) {
    const auto at = std::find_if(program.tasks.begin(), program.tasks.end(),
                                 [&](const Task& task) { return task.kind == kind; });
    REQUIRE(at != program.tasks.end());
    return static_cast<int>(at - program.tasks.begin());
  };
  const auto task = [](int t) { return "s.json: program.tasks[" + std::to_string(t) + "]"; };
  const auto refused = [&](const std::string& where, const std::string& message) {
    try {
      schedule_from_json(schedule_to_json(schedule), "s.json");
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(e.exit_code() == 2);
      CHECK(e.where() == where);
      CHECK_THAT(e.message(), Catch::Contains(message));
    }
  };
  SECTION("a collective of another kind than its bucket") {
    const int t = first(TaskKind::kAllGather);
    program.tasks[t].kind = TaskKind::kReduceScatter;
    refused(task(t) + ".bucket", "a reduce_scatter of all_gather bucket");
  }
  SECTION("an all-reduce made a reduce-scatter: its bucket's second") {
    const int t = first(TaskKind::kAllReduce);
    program.tasks[t].kind = TaskKind::kReduceScatter;
    refused(task(t) + ".bucket", "a second reduce_scatter of bucket");
  }
  // A tester's all-gather over 4 ranks of a shard group of 2 was simulated and replayed.
  SECTION("a collective over another group than the job's") {
    const int t = first(TaskKind::kAllGather);
    program.tasks[t].group.ranks *= 2;
    refused(task(t) + ".group", "an all_gather over ");
    program.tasks[t].group = program.tasks[first(TaskKind::kReduceScatter)].group;
    const int r = first(TaskKind::kAllReduce);
    program.tasks[r].group = program.tasks[t].group;
    refused(task(r) + ".group", "while the job's replica group is");
  }
  SECTION("an all-reduce of an all-gather bucket") {
    const int t = first(TaskKind::kAllReduce);
    program.tasks[t].bucket = program.tasks[first(TaskKind::kAllGather)].bucket;
    refused(task(t) + ".bucket", "an all_reduce of all_gather bucket");
  }
  SECTION("HSDP without the all-reduce of a reduce-scatter bucket") {
    // The all-reduce deleted, the later tasks renumbered (it has no memory events).
    const int t = first(TaskKind::kAllReduce);
    const int bucket = program.tasks[t].bucket;
    REQUIRE(program.tasks[t].memory.empty());
    program.tasks.erase(program.tasks.begin() + t);
    schedule.timings.pop_back();
    for (Task& later : program.tasks) {
      if (later.id > t) --later.id;
      std::erase(later.deps, t);
      for (int& dep : later.deps) dep -= dep > t ? 1 : 0;
    }
    refused("s.json: program.buckets[" + std::to_string(bucket) + "]",
            "job.dp_replicate 2 but no all_reduce of this reduce_scatter bucket");
  }
  SECTION("an all-reduce in a job of one replica") {
    job.dp_replicate = 1;
    job.gpus = 4;  // the same 4 shard ranks
    job.gpus_per_node = 4;
    schedule.job = normalize_job(schedule.model, job);
    refused(task(first(TaskKind::kAllReduce)) + ".kind", "an all_reduce in a job of one replica");
  }
  SECTION("a collective on the compute stream, compute off it") {
    const int t = first(TaskKind::kReduceScatter);
    program.tasks[t].stream = 0;
    refused(task(t) + ".stream", "a reduce_scatter on compute stream 0");
    program.tasks[t].stream = 1;
    const int f = first(TaskKind::kForward);
    program.tasks[f].stream = 1;
    refused(task(f) + ".stream", "a forward task on stream 1");
  }
  SECTION("a unit's forward twice, another's never") {
    const int t = first(TaskKind::kForward);
    const auto unit1 = std::find_if(program.tasks.begin(), program.tasks.end(), [](const Task& x) {
      return x.kind == TaskKind::kForward && x.unit == 1;
    });
    REQUIRE(unit1 != program.tasks.end());
    program.tasks[t].unit = 1;
    // Named at the later of the two.
    refused(task(std::max(t, unit1->id)) + ".unit", "a second forward of unit 1");
  }
  SECTION("the optimizer before the reduce-scatters end") {
    program.tasks[first(TaskKind::kOptimizer)].deps.clear();
    refused(task(first(TaskKind::kOptimizer)) + ".deps", "the optimizer may start before task");
  }
  SECTION("a copy-out of an all-gather that may run before it") {
    const int t = first(TaskKind::kCopyOut);
    REQUIRE(program.buckets[program.tasks[t].bucket].kind == CollectiveKind::kAllGather);
    program.tasks[t].deps.clear();
    refused(task(t) + ".deps", "the copy_out of bucket");
  }
}

// Found by QA: a bucket without slots or of another dtype, a collective's bytes edited,
// an allocation never freed: all simulated and reported; the last two also replayed "data
// checked" and within the bound at any timing.
TEST_CASE("a Program whose buckets or memory disagree with the lowering is rejected",
          "[schedule]") {
  ScheduleFile schedule = make_schedule();
  Program& program = schedule.program;
  REQUIRE(schedule_from_json(schedule_to_json(schedule), "s.json") == schedule);
  const auto bucket_of = [&](CollectiveKind kind, std::size_t min_slots) {
    const auto at = std::find_if(
        program.buckets.begin(), program.buckets.end(),
        [&](const BucketLayout& b) { return b.kind == kind && b.slots.size() >= min_slots; });
    REQUIRE(at != program.buckets.end());
    return static_cast<int>(at - program.buckets.begin());
  };
  const auto task_of = [&](TaskKind kind, int bucket) {
    const auto at = std::find_if(program.tasks.begin(), program.tasks.end(), [&](const Task& t) {
      return t.kind == kind && t.bucket == bucket;
    });
    REQUIRE(at != program.tasks.end());
    return static_cast<int>(at - program.tasks.begin());
  };
  const auto path = [](const std::string& list, int index, const std::string& field) {
    return "schedule.json: program." + list + "[" + std::to_string(index) + "]" + field;
  };
  const int gather = bucket_of(CollectiveKind::kAllGather, 3);
  const int reduce = bucket_of(CollectiveKind::kReduceScatter, 1);
  std::string where;
  std::string message;
  SECTION("a bucket without its slots") {
    program.buckets[gather].slots.clear();
    where = path("buckets", gather, ".shard_elements");
    message = "but its slots hold 0 elements per shard";
  }
  SECTION("two slots out of order") {
    std::swap(program.buckets[gather].slots[1], program.buckets[gather].slots[2]);
    where = path("buckets", gather, ".slots[1].offset");
    message = "the slots are packed in order";
  }
  SECTION("an all-gather bucket of another dtype than its parameters") {
    program.buckets[gather].dtype = DType::kFP32;
    where = path("buckets", gather, ".dtype");
    message = "is fp32, but its parameters are gathered in bf16";
  }
  SECTION("a reduce-scatter bucket of another dtype than its gradients") {
    program.buckets[reduce].dtype = DType::kBF16;
    where = path("buckets", reduce, ".dtype");
    message = "a reduce_scatter bucket of bf16 holds fp32 gradients";
  }
  SECTION("an all-gather's bytes") {
    const int t = task_of(TaskKind::kAllGather, gather);
    program.tasks[t].bytes = 12345;
    where = path("tasks", t, ".bytes");
    message = "is 12345, but its bucket " + std::to_string(gather) + " makes ";
  }
  SECTION("a reduce-scatter copy-in's bytes") {
    const int t = task_of(TaskKind::kCopyIn, reduce);
    program.tasks[t].bytes /= 2;
    where = path("tasks", t, ".bytes");
    message = "but its bucket " + std::to_string(reduce) + " makes ";
  }
  SECTION("an allocation no task frees") {
    const int t = task_of(TaskKind::kAllGather, gather);
    program.tasks[t].memory.push_back({MemoryCategory::kWorkspace, 4096, false});
    where = path("tasks", t, ".memory[" + std::to_string(program.tasks[t].memory.size() - 1) + "]");
    message =
        "allocates 4096 bytes of workspace, the latest of the allocations left at the end "
        "of the step (4096 bytes of workspace no task frees)";
  }
  SECTION("a free made smaller") {
    const int t = task_of(TaskKind::kCopyOut, reduce);
    MemoryEvent& free = program.tasks[t].memory.back();
    REQUIRE(free.bytes < -1000);
    free.bytes += 1000;
    message = "(1000 bytes of gradients no task frees)";
  }
  SECTION("the persistent state of another size") {
    program.persistent_bytes = 10;
    where = "schedule.json: program.persistent_bytes";
    message = "is 10, but the workload's ";
  }
  SECTION("a copy with a unit") {
    const int t = task_of(TaskKind::kCopyIn, gather);
    program.tasks[t].unit = 1;
    where = path("tasks", t, ".unit");
    message = "is 1, but a task of kind copy_in has no unit (-1)";
  }
  SECTION("a forward with a bucket") {
    const auto forward = std::find_if(program.tasks.begin(), program.tasks.end(),
                                      [](const Task& t) { return t.kind == TaskKind::kForward; });
    REQUIRE(forward != program.tasks.end());
    const int t = static_cast<int>(forward - program.tasks.begin());
    forward->bucket = 0;
    where = path("tasks", t, ".bucket");
    message = "is 0, but a task of kind forward has no bucket (-1)";
  }
  SECTION("the optimizer with a unit") {
    REQUIRE(program.tasks.back().kind == TaskKind::kOptimizer);
    program.tasks.back().unit = 0;
    where = path("tasks", static_cast<int>(program.tasks.size()) - 1, ".unit");
    message = "a task of kind optimizer has no unit";
  }
  SECTION("the whole persistent state freed") {
    // Found by review: an exact match of the persistent block was named by no path.
    program.tasks.back().memory.push_back(
        {MemoryCategory::kShardedState, -program.persistent_bytes, true});
    where = path("tasks", static_cast<int>(program.tasks.size()) - 1,
                 ".memory[" + std::to_string(program.tasks.back().memory.size() - 1) + "]");
    message = "frees " + std::to_string(program.persistent_bytes) +
              " bytes of the persistent sharded state";
  }
  SECTION("the persistent state freed") {
    program.tasks.back().memory.push_back({MemoryCategory::kShardedState, -4096, true});
    where = path("tasks", static_cast<int>(program.tasks.size()) - 1,
                 ".memory[" + std::to_string(program.tasks.back().memory.size() - 1) + "]");
    message = "frees 4096 bytes of the persistent sharded state";
  }
  const Error e = load_error(schedule_to_json(schedule));
  CHECK(e.exit_code() == 2);
  if (!where.empty()) CHECK(e.where() == where);
  CHECK_THAT(e.message(), Catch::Contains(message));
}

TEST_CASE("check_schedule_matches rejects another model or job", "[schedule]") {
  const ScheduleFile schedule = make_schedule();
  CHECK_NOTHROW(check_schedule_matches(schedule, schedule.model, schedule.job, "s.json"));
  ModelSpec renamed = schedule.model;
  renamed.name = "my-tiny";  // the same architecture under another name is fine
  CHECK_NOTHROW(check_schedule_matches(schedule, renamed, schedule.job, "s.json"));
  CHECK_THROWS_AS(
      check_schedule_matches(schedule, builtin_model("llama3-8b"), schedule.job, "s.json"), Error);
  JobSpec bigger = schedule.job;
  bigger.local_batch = 2;
  CHECK_THROWS_AS(check_schedule_matches(schedule, schedule.model, bigger, "s.json"), Error);
  // Another execution, in either direction (a compiled job writes no execution field): the
  // error names it with both values.
  JobSpec eager = schedule.job;
  eager.execution = Execution::kEager;
  for (const auto& [theirs, ours, text] :
       {std::tuple{schedule.job, eager, "execution \"compiled\" (the flags: \"eager\")"},
        std::tuple{eager, schedule.job, "execution \"eager\" (the flags: \"compiled\")"}}) {
    ScheduleFile file = schedule;
    file.job = theirs;
    try {
      check_schedule_matches(file, file.model, ours, "s.json");
      FAIL("accepted another execution");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kBadInput);
      CHECK_THAT(e.message(), Catch::Contains(text));
    }
  }
  // A field job_to_json leaves out at its default shows its value, not null, and the hint
  // for another split of the stages names the other fields that differ too (found by QA:
  // "pipeline_steps null (the flags: 2)", and a hint naming --pp-chunk-blocks only).
  JobSpec piped = schedule.job;
  piped.gpus = 4;
  piped.dp_shard = 2;
  piped.pp = 2;
  piped.microbatches = 2;
  JobSpec accumulating = piped;
  accumulating.pipeline_steps = 2;
  accumulating.pp_chunk_blocks = {1, 3};
  for (const auto& [theirs, ours, text, hint] :
       {std::tuple{piped, accumulating, "pipeline_steps 1 (the flags: 2)",
                   "for the schedule's split of the stages (and --pipeline-steps 1), or"},
        std::tuple{accumulating, piped, "pipeline_steps 2 (the flags: 1)",
                   "for the schedule's split of the stages (and --pipeline-steps 2), or"}}) {
    ScheduleFile file = schedule;
    file.job = theirs;
    try {
      check_schedule_matches(file, file.model, ours, "s.json");
      FAIL("accepted another job");
    } catch (const Error& e) {
      CHECK_THAT(e.message(), Catch::Contains(text) && !Catch::Contains("null"));
      CHECK_THAT(e.hint(), Catch::Contains(hint));
    }
  }
}

TEST_CASE("check_schedule_hardware names another spec or the figures that differ", "[schedule]") {
  const ScheduleFile schedule = make_schedule();
  CHECK_NOTHROW(check_schedule_hardware(schedule, schedule.hardware, "s.json"));
  const auto message = [&](const HardwareSpec& hardware) {
    try {
      check_schedule_hardware(schedule, hardware, "s.json");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kBadInput);
      return e.message();
    }
    return std::string("accepted");
  };
  HardwareSpec other = builtin_hardware("a100-80g");
  if (other.id == schedule.hardware.id) other = builtin_hardware("h200");
  CHECK_THAT(message(other), Catch::Contains("the schedule was made for hardware \"" +
                                             schedule.hardware.id + "\", not \"" + other.id));
  // The same id with other figures (a built-in spec that changed since the schedule was
  // tuned): each differing field with both values.
  HardwareSpec changed = schedule.hardware;
  changed.attention_efficiency = schedule.hardware.attention_efficiency / 2;
  changed.kernel_launch_s = schedule.hardware.kernel_launch_s + 1e-6;
  const std::string text = message(changed);
  CHECK_THAT(text, Catch::Contains("with other figures than this \"" + schedule.hardware.id));
  CHECK_THAT(text, Catch::Contains(
                       fmt::format("attention_efficiency {} (here: {})",
                                   nlohmann::json(schedule.hardware.attention_efficiency).dump(),
                                   nlohmann::json(changed.attention_efficiency).dump())));
  CHECK_THAT(text, Catch::Contains("kernel_launch_s"));
  CHECK_THAT(text, !Catch::Contains("peak_bf16_flops_per_s"));
  // The name is no figure: a renamed copy prices alike and is taken (found by QA), and is
  // not listed beside a figure that differs.
  HardwareSpec renamed = schedule.hardware;
  renamed.name = "renamed";
  CHECK(message(renamed) == "accepted");
  changed.name = "renamed";
  CHECK_THAT(message(changed), !Catch::Contains("name"));
  // A field written by one side only (attention_backward_efficiency is left out at 0).
  HardwareSpec without = schedule.hardware;
  without.attention_backward_efficiency = 0;
  HardwareSpec with = schedule.hardware;
  with.attention_backward_efficiency = 0.25;
  ScheduleFile old = schedule;
  old.hardware = without;
  try {
    check_schedule_hardware(old, with, "old.json");
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK_THAT(e.message(), Catch::Contains("\": attention_backward_efficiency 0 (here: 0.25)"));
    CHECK_THAT(e.message(), !Catch::Contains("attention_efficiency"));
  }
}

TEST_CASE("torchtitan export names the modules of each bucket", "[schedule]") {
  const ModelSpec model = builtin_model("tiny");
  const Workload workload = build_workload(model, normalize_job(model, tiny_job()));
  const json out = torchtitan_plan_to_json(workload, three_bucket_plan());
  CHECK(out.at("format") == "fsdptune-torchtitan");
  CHECK(out.at("version") == 1);
  const json& simple = out.at("simplefsdp");
  CHECK(simple.at("forward_all_gather_buckets") ==
        json::parse(R"([["tok_embeddings"], ["layers.0", "layers.1"],
                        ["layers.2", "layers.3", "norm", "output"]])"));
  CHECK(simple.at("backward_all_gather_buckets") == json::parse(R"([["tok_embeddings", "layers.0"],
                        ["layers.1", "layers.2", "layers.3", "norm", "output"]])"));
  CHECK(simple.at("reduce_scatter_buckets").size() == 4);
  const json& groups = out.at("fsdp2").at("fully_shard_groups");
  REQUIRE(groups.size() == 3);
  // forward_prefetch 2: group 0 prefetches groups 1 and 2; the last group nothing.
  CHECK(groups[0].at("forward_prefetch").size() == 2);
  CHECK(groups[2].at("forward_prefetch").empty());
  // backward_prefetch 1: group 2 prefetches group 1; group 0 nothing.
  CHECK(groups[2].at("backward_prefetch") == json::parse(R"([["layers.0", "layers.1"]])"));
  CHECK(groups[0].at("backward_prefetch").empty());
  CHECK(groups[2].at("reshard_after_forward") == false);
  CHECK(out.at("fsdp2").at("exact") == false);
  // The plan's other knobs, and every reason FSDP2 does not reproduce it (found by QA: the
  // buckets alone were compared, and a shared stream or no copies went unsaid).
  CHECK(simple.at("stream_layout") == "shared");
  CHECK(simple.at("copy_in_out") == true);
  CHECK(simple.at("one_collective_per_parameter") == false);
  CHECK(simple.at("reorder") == true);
  CHECK_THAT(out.at("fsdp2").at("note").get<std::string>(),
             Catch::StartsWith("FSDP2 groups do not reproduce the plan: its backward all-gather "
                               "buckets are not its forward ones; its reduce-scatter buckets "
                               "are not its forward ones; it runs all-gathers and "
                               "reduce-scatters on one stream"));

  Plan same = three_bucket_plan();
  same.backward_buckets = same.forward_buckets;
  same.reduce_scatter_buckets = same.forward_buckets;
  same.stream_layout = StreamLayout::kSeparate;
  CHECK(torchtitan_plan_to_json(workload, same).at("fsdp2").at("exact") == true);
  // Nothing resharded: the backward gathers nothing, its buckets do not matter.
  Plan kept = same;
  kept.reshard_after_forward = {false, false, false};
  kept.backward_buckets = {{0, 1}, {2, 5}};
  CHECK(torchtitan_plan_to_json(workload, kept).at("fsdp2").at("exact") == true);
  same.reshard_after_forward = {false, true, false};
  same.backward_buckets = kept.backward_buckets;
  CHECK(torchtitan_plan_to_json(workload, same).at("fsdp2").at("exact") == false);
  Plan per_parameter = kept;
  per_parameter.one_collective_per_parameter = true;
  per_parameter.copy_in_out = false;
  const json note = torchtitan_plan_to_json(workload, per_parameter).at("fsdp2").at("note");
  CHECK_THAT(note.get<std::string>(),
             Catch::Contains("one collective per parameter, FSDP2 one per group") &&
                 Catch::Contains("without flat-buffer copies"));
}

TEST_CASE("torchtitan export: whether SimpleFSDP's manual bucketing runs the plan", "[schedule]") {
  // Found by QA: the SimpleFSDP section of a tuned plan looked ready to use; the one list
  // SimpleFSDP takes did not fit where the plan did.
  const ModelSpec model = builtin_model("tiny");
  const Workload workload = build_workload(model, normalize_job(model, tiny_job()));
  // SimpleFSDP's own: one list, every bucket resharded, one stream, one bucket ahead.
  Plan simple = three_bucket_plan();
  simple.backward_buckets = simple.forward_buckets;
  simple.reduce_scatter_buckets = simple.forward_buckets;
  simple.reshard_after_forward.assign(simple.forward_buckets.size(), true);
  simple.stream_layout = StreamLayout::kShared;
  simple.forward_prefetch = 1;
  simple.backward_prefetch = 1;
  CHECK(torchtitan_plan_to_json(workload, simple).at("simplefsdp").at("exact") == true);
  Plan unbucketed = simple;  // SimpleFSDP without bucketing
  unbucketed.one_collective_per_parameter = true;
  unbucketed.copy_in_out = false;
  CHECK(torchtitan_plan_to_json(workload, unbucketed).at("simplefsdp").at("exact") == true);
  Plan plan = simple;
  plan.stream_layout = StreamLayout::kSeparate;
  plan.forward_prefetch = 2;
  plan.reshard_after_forward.back() = false;
  const json section = torchtitan_plan_to_json(workload, plan).at("simplefsdp");
  CHECK(section.at("exact") == false);
  CHECK_THAT(section.at("note").get<std::string>(),
             Catch::Contains("reshards some buckets after forward and keeps others") &&
                 Catch::Contains("on two streams") && Catch::Contains("prefetches 2 / 1") &&
                 !Catch::Contains("not its forward ones"));
  // Without torch.compile, SimpleFSDP does not run at all.
  JobSpec eager_job = normalize_job(model, tiny_job());
  eager_job.execution = Execution::kEager;
  const Workload eager = build_workload(model, eager_job);
  const json eager_section = torchtitan_plan_to_json(eager, simple).at("simplefsdp");
  CHECK(eager_section.at("exact") == false);
  CHECK_THAT(eager_section.at("note").get<std::string>(),
             Catch::Contains("without torch.compile, SimpleFSDP compiled only"));
  // One collective per parameter: SimpleFSDP without a bucketing pass.
  CHECK_THAT(
      torchtitan_plan_to_json(workload, unbucketed).at("simplefsdp").at("note").get<std::string>(),
      Catch::Contains("without a bucketing pass"));
  // Nothing resharded: one setting (never), exact as to resharding.
  plan = simple;
  plan.reshard_after_forward.assign(plan.reshard_after_forward.size(), false);
  CHECK(torchtitan_plan_to_json(workload, plan).at("simplefsdp").at("exact") == true);
}

TEST_CASE("a version 2 schedule written before the split fields reads with its even split",
          "[schedule][pipeline]") {
  // Tuned 2026-12-01 (tiny, pp 2, interleaved 1F1B, V 2): its job has no
  // pp_first/last_stage_less_layers and its chunks split the 4 blocks alone, 1 each.
  const std::string path =
      std::string(FSDPTUNE_TEST_DATA) + "/schedules/tiny-interleaved-v2-even-split.json";
  const ScheduleFile schedule = schedule_from_json(read_json_file(path), path);
  CHECK(schedule.job.pp_first_stage_less_layers == 0);
  CHECK(schedule.job.pp_last_stage_less_layers == 0);
  REQUIRE(schedule.pipeline.has_value());
  std::vector<std::vector<int>> units;
  for (const ScheduleChunk& chunk : schedule.pipeline->chunks) units.push_back(chunk.units);
  CHECK(units == std::vector<std::vector<int>>{{0, 1}, {2}, {3}, {4, 5}});
  // Written again, it keeps its text (and so its schedule_hash, which measured files of
  // it record): the even split is written as no fields.
  const nlohmann::json again = schedule_to_json(schedule);
  CHECK_FALSE(again.at("job").contains("pp_first_stage_less_layers"));
  CHECK(dump_json(again) == dump_json(read_json_file(path)));
  // The same job with torchtitan's default split is another job: its chunks differ.
  nlohmann::json other = again;
  other["job"]["pp_first_stage_less_layers"] = 1;
  other["job"]["pp_last_stage_less_layers"] = 1;
  try {
    schedule_from_json(other, "other.json");
    FAIL("read chunks of another split");
  } catch (const Error& e) {
    CHECK(e.where() == "other.json: pipeline.chunks[1].units");
  }
  // Counts in English (QA: "1 chunks", "1 stages").
  nlohmann::json one_chunk = again;
  one_chunk["pipeline"]["chunks"] = nlohmann::json::array({again["pipeline"]["chunks"][0]});
  CHECK_THROWS_WITH(schedule_from_json(one_chunk, "one.json"),
                    Catch::Contains("1 chunk, but pp 2 x virtual_stages 2 makes 4"));
  nlohmann::json one_stage = again;
  one_stage["pipeline"]["stages"] = nlohmann::json::array({again["pipeline"]["stages"][0]});
  CHECK_THROWS_WITH(schedule_from_json(one_stage, "one.json"), Catch::Contains("1 stage for pp 2"));
}
