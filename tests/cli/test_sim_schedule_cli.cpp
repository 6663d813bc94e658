// `fsdptune simulate --plan schedule.json` without --model: the model, job and hardware
// come from the schedule (docs/schedule-format.md), explicit job flags must agree with it,
// and the costs it still needs come from --profile, the recorded profile, or the analytic
// model of the schedule's hardware.
#include <sys/stat.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_support.hpp"
#include "fsdptune/hardware.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/profile.hpp"

using fsdptune::testing::CommandResult;
using fsdptune::testing::make_temp_dir;
using fsdptune::testing::run_fsdptune;

namespace {

// tiny (6 units) on 8 GPUs, a search bounded by evaluations: deterministic and fast.
const std::string kTinyTune =
    "tune --model tiny --gpus 8 --batch 2 --seq 1024 --max-evaluations 60 --time-budget 60";
// The same model on 2 stages x 4-way FSDP, 4 microbatches (a version 2 schedule).
const std::string kTinyPipelineTune =
    "tune --model tiny --gpus 8 --pp 2 --microbatches 4 --seq 256 --time-budget 0 "
    "--max-evaluations 40";

nlohmann::json run_json(const std::string& arguments) {
  const CommandResult result = run_fsdptune(arguments);
  INFO(arguments << "\nstderr: " << result.err);
  REQUIRE(result.exit_code == 0);
  return nlohmann::json::parse(result.out);
}

std::string tuned(const std::string& tune, const std::string& out) {
  const CommandResult result = run_fsdptune(tune + " --out " + out);
  INFO(tune << "\nstderr: " << result.err);
  REQUIRE(result.exit_code == 0);
  return out;
}

// Runs `arguments`, which must fail with exit 2 and an error containing every one of
// `names`.
void check_rejected(const std::string& arguments, const std::vector<std::string>& names) {
  const CommandResult result = run_fsdptune(arguments);
  INFO(arguments << "\nstderr: " << result.err);
  CHECK(result.exit_code == 2);
  for (const std::string& name : names) CHECK_THAT(result.err, Catch::Contains(name));
}

void write_profile(const std::string& path, double compute_slowdown_with_comm) {
  fsdptune::Profile profile;
  profile.hardware = "h100-sxm";
  profile.contention.compute_slowdown_with_comm = compute_slowdown_with_comm;
  fsdptune::write_file_atomically(path, fsdptune::dump_json(fsdptune::profile_to_json(profile)));
}

}  // namespace

TEST_CASE("simulate --plan schedule.json without --model: a version 1 schedule",
          "[cli][simulate][schedule]") {
  const std::string dir = make_temp_dir("fsdptune-sim-schedule-v1");
  const std::string out = tuned(kTinyTune + " --memory-limit 20GiB", dir + "/schedule.json");
  const nlohmann::json file = fsdptune::read_json_file(out);

  // Nothing but the file: model, job, hardware and limit are the schedule's.
  const nlohmann::json json = run_json("simulate --json --plan " + out);
  CHECK(json.at("step_time_s").get<double>() == file["predicted"]["step_time_s"].get<double>());
  CHECK(json.at("peak_allocated_bytes") == file["predicted"]["peak_allocated_bytes"]);
  CHECK(json.at("model") == "tiny");
  CHECK(json.at("job") == file.at("job"));
  CHECK(json.at("hardware") == "h100-sxm");
  CHECK(json.at("cost_source") == "analytic");
  CHECK(json.at("memory_limit_bytes").get<std::int64_t>() == 20LL << 30);
  CHECK(json.at("plan").at("name") == "tuned");

  // Job flags that agree with the schedule are accepted and change nothing; so is its
  // hardware.
  const nlohmann::json agreeing = run_json(
      "simulate --json --gpus 8 --batch 2 --seq 1024 --ac none --pp 1 --hardware h100-sxm "
      "--plan " +
      out);
  CHECK(agreeing.at("step_time_s") == json.at("step_time_s"));
  // --model with the job flags and no --hardware: the schedule's hardware and costs (found by
  // QA: "--hardware: no hardware given").
  const nlohmann::json modelled =
      run_json("simulate --json --model tiny --gpus 8 --batch 2 --seq 1024 --plan " + out);
  CHECK(modelled.at("step_time_s") == json.at("step_time_s"));
  CHECK(modelled.at("hardware") == "h100-sxm");
  // The text form too.
  const CommandResult text = run_fsdptune("simulate --plan " + out);
  REQUIRE(text.exit_code == 0);
  CHECK_THAT(text.out, Catch::Contains("tiny on 8 x h100-sxm"));

  // A flag that disagrees: exit 2 naming the flag and both values, all disagreements listed.
  check_rejected("simulate --gpus 16 --plan " + out, {"--gpus", "16", "(the schedule's: 8)"});
  check_rejected("simulate --seq 1024 --ac full --float8 --plan " + out,
                 {"--ac full (the schedule's: none)", "--float8 on (the schedule's: off)"});
  check_rejected("simulate --pp-schedule gpipe --plan " + out,
                 {"--pp-schedule gpipe (the schedule's: 1f1b)"});
  check_rejected("simulate --ac sometimes --plan " + out, {"--ac", "sometimes"});
  // Every job flag, each alone (found by QA: a --cp that disagreed was taken silently).
  for (const char* flag : {"--gpus 16",
                           "--gpus-per-node 4",
                           "--tp 2",
                           "--dp-replicate 2",
                           "--cp 2",
                           "--batch 1",
                           "--seq 512",
                           "--ac full",
                           "--param-dtype fp32",
                           "--reduce-dtype bf16",
                           "--float8",
                           "--async-tp",
                           "--execution eager",
                           "--pp 2",
                           "--microbatches 2",
                           "--pipeline-steps 2",
                           "--pp-schedule gpipe",
                           "--virtual-stages 2",
                           "--pp-first-stage-less-layers 0",
                           "--pp-last-stage-less-layers 0",
                           "--pp-chunk-blocks 2,2"}) {
    const std::string name = std::string(flag).substr(0, std::string(flag).find(' '));
    check_rejected(fmt::format("simulate {} --plan {}", flag, out),
                   {name + ": disagrees with the job of"});
  }
  check_rejected("simulate --hardware a100-80g --plan " + out,
                 {"--hardware", "a100-80g", "h100-sxm"});
  std::filesystem::remove_all(dir);
}

TEST_CASE("every reader of a version 1 schedule holds its prediction to its program",
          "[cli][simulate][schedule]") {
  // Found by QA: an edited predicted.peak_allocated_bytes was accepted and `compare`
  // reported a peak error of -100% against it.
  const std::string dir = make_temp_dir("fsdptune-sim-schedule-peaks");
  const std::string out = tuned(kTinyTune, dir + "/schedule.json");
  nlohmann::json file = fsdptune::read_json_file(out);
  for (const char* field : {"peak_allocated_bytes", "peak_reserved_bytes"}) {
    nlohmann::json edited = file;
    edited["predicted"][field] = edited["predicted"][field].get<std::int64_t>() + 1;
    const std::string path = dir + "/edited.json";
    fsdptune::write_file_atomically(path, fsdptune::dump_json(edited));
    const std::vector<std::string> names = {path + ": predicted." + field,
                                            "but the schedule's program simulates to"};
    check_rejected("simulate --plan " + path, names);
    check_rejected("report " + path, names);
    check_rejected("compare " + path + " " + path, names);
  }
  // The step and each task's timing too (found by QA: a task's duration doubled was
  // replayed and compared against the stated step).
  nlohmann::json slower = file;
  slower["program"]["tasks"][6]["duration_s"] =
      2 * slower["program"]["tasks"][6]["duration_s"].get<double>();
  const std::string path = dir + "/slower.json";
  fsdptune::write_file_atomically(path, fsdptune::dump_json(slower));
  for (const std::string& command :
       {"simulate --plan " + path, "report " + path, "compare " + path + " " + path}) {
    const CommandResult result = run_fsdptune(command);
    CHECK(result.exit_code == 2);
    CHECK_THAT(result.err, Catch::Contains(path + ": predicted.step_time_s") ||
                               Catch::Contains(path + ": timings["));
  }
  nlohmann::json moved = file;
  moved["timings"][3][0] = moved["timings"][3][0].get<double>() * 0.5;
  fsdptune::write_file_atomically(path, fsdptune::dump_json(moved));
  check_rejected("simulate --plan " + path,
                 {path + ": timings[3]", "but the schedule's program simulates task 3 to"});
  // None at all (found by QA: read, and the report drew no Gantt chart without a word).
  nlohmann::json untimed = file;
  untimed["timings"] = nlohmann::json::array();
  fsdptune::write_file_atomically(path, fsdptune::dump_json(untimed));
  check_rejected("report " + path, {path + ": timings: 0 entries for"});
  // A first task that depends on another (found by QA: "an earlier task (0..-1)").
  nlohmann::json looped = file;
  looped["program"]["tasks"][0]["deps"] = {1};
  fsdptune::write_file_atomically(path, fsdptune::dump_json(looped));
  check_rejected("simulate --plan " + path,
                 {"program.tasks[0].deps[0]", "the first task can depend on none"});
  // The file as written passes.
  CHECK(run_fsdptune("simulate --plan " + out).exit_code == 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("every reader of a version 1 schedule holds its plan and its step's parts to it",
          "[cli][simulate][schedule]") {
  // Found by QA: an edited plan was printed, replayed as the stored Program and started
  // searches; an edited compute_s or breakdown entry was printed as read.
  const std::string dir = make_temp_dir("fsdptune-sim-schedule-plan");
  const std::string out = tuned(kTinyTune, dir + "/schedule.json");
  const nlohmann::json file = fsdptune::read_json_file(out);
  const std::string path = dir + "/edited.json";
  const auto rejected_by_readers = [&](const nlohmann::json& edited,
                                       const std::vector<std::string>& names) {
    fsdptune::write_file_atomically(path, fsdptune::dump_json(edited));
    check_rejected("simulate --plan " + path, names);
    check_rejected("report " + path, names);
    check_rejected("compare " + path + " " + path, names);
  };
  nlohmann::json shared = file;
  shared["plan"]["stream_layout"] =
      file["plan"]["stream_layout"] == "shared" ? "separate" : "shared";
  rejected_by_readers(shared, {path + ": plan", "does not lower to the schedule's program"});
  // Other forward buckets: one per unit, or all in one where the plan has one per unit.
  nlohmann::json rebucketed = file;
  nlohmann::json buckets = nlohmann::json::array();
  const bool per_unit = file["plan"]["forward_buckets"].size() == 6;
  for (int u = 0; u < (per_unit ? 1 : 6); ++u) buckets.push_back({u, per_unit ? 5 : u});
  rebucketed["plan"]["forward_buckets"] = buckets;
  rebucketed["plan"]["reshard_after_forward"] = std::vector<bool>(buckets.size(), true);
  rejected_by_readers(rebucketed, {path + ": plan", "does not lower to the schedule's program"});
  nlohmann::json parts = file;
  parts["predicted"]["compute_s"] = file["predicted"]["compute_s"].get<double>() + 1e-5;
  parts["predicted"]["idle_s"] = file["predicted"]["idle_s"].get<double>() - 1e-5;
  rejected_by_readers(parts,
                      {path + ": predicted.compute_s", "but the schedule's program simulates to"});
  // Its hardware too, where it was costed by the spec alone (found by QA: an edited spec
  // was printed and replayed; an edited id called the built-in one a missing profile).
  nlohmann::json faster = file;
  faster["hardware"]["hbm_bytes_per_s"] = 1e13;
  rejected_by_readers(faster, {path + ": hardware", "provenance.cost_hash"});
  nlohmann::json renamed = file;
  renamed["hardware"]["id"] = "h100-edited";
  rejected_by_readers(renamed, {path + ": hardware.id", "tuned on \"h100-sxm\""});
  nlohmann::json breakdown = file;
  breakdown["predicted"]["peak_breakdown"]["gradients"] =
      file["predicted"]["peak_breakdown"]["gradients"].get<std::int64_t>() + 1;
  rejected_by_readers(breakdown, {path + ": predicted.peak_breakdown.gradients",
                                  "but the schedule's program simulates to"});
  std::filesystem::remove_all(dir);
}

TEST_CASE("simulate --plan schedule.json without --model: a pipeline (version 2) schedule",
          "[cli][simulate][schedule][pipeline]") {
  const std::string dir = make_temp_dir("fsdptune-sim-schedule-v2");
  const std::string out = tuned(kTinyPipelineTune + " --memory-limit 20GiB", dir + "/pp.json");
  const nlohmann::json file = fsdptune::read_json_file(out);
  REQUIRE(file.at("version") == 2);

  const nlohmann::json json = run_json("simulate --json --plan " + out);
  CHECK(json.at("pipelined") == true);
  CHECK(json.at("step_time_s").get<double>() == file["predicted"]["step_time_s"].get<double>());
  CHECK(json.at("job") == file.at("job"));
  CHECK(json.at("plan") == "tuned");
  // Judged against the limit it was tuned for, as a version 1 schedule is.
  CHECK(json.at("memory_limit_bytes").get<std::int64_t>() == 20LL << 30);
  // With --model the flags must still say the whole job (unchanged behaviour): the same.
  const nlohmann::json with_model = run_json(
      "simulate --json --model tiny --gpus 8 --pp 2 --microbatches 4 --seq 256 "
      "--hardware h100-sxm --plan " +
      out);
  CHECK(with_model.at("step_time_s") == json.at("step_time_s"));

  check_rejected("simulate --pp 4 --microbatches 4 --plan " + out, {"--pp 4 (the schedule's: 2)"});
  std::filesystem::remove_all(dir);
}

TEST_CASE("simulate without --model needs a schedule file", "[cli][simulate][schedule]") {
  const std::string dir = make_temp_dir("fsdptune-sim-no-model");
  const std::string required = "--model is required (or pass a schedule file to --plan)";
  check_rejected("simulate --hardware h100-sxm --gpus 2", {required});
  check_rejected("simulate --hardware h100-sxm --plan simplefsdp-block",
                 {required, "simplefsdp-block"});
  // Found by QA: a missing file said "--model is required", its path in the hint only.
  check_rejected("simulate --plan " + dir + "/missing.json",
                 {"--plan " + dir + "/missing.json: no such file"});
  const std::string plan = dir + "/plan.json";
  fsdptune::write_file_atomically(plan, R"({"version": 1, "name": "one",
      "forward_buckets": [[0, 5]]})");
  check_rejected("simulate --plan " + plan, {required, "plan.json", "not a schedule"});
  // Found probing the CLI: a file of another fsdptune format, or JSON that is not an
  // object, was called "a plan"; it is named by its format, with or without --model.
  const std::string measured = dir + "/measured.json";
  fsdptune::write_file_atomically(measured, R"({"format": "fsdptune-measured", "version": 5})");
  for (const std::string& flags : {std::string(), std::string(" --model tiny --gpus 2")}) {
    check_rejected("simulate --hardware h100-sxm --plan " + measured + flags,
                   {"measured.json: format", "\"fsdptune-measured\", expected"});
  }
  fsdptune::write_file_atomically(plan, "[1, 2]");
  check_rejected("simulate --plan " + plan, {"plan.json", "a JSON array, not an object"});
  // Found by QA: a schedule file without its "format" was read, with --model, as its
  // "plan" alone (its version, program, model and job unchecked); without --model it was
  // called "a plan". Either way its missing format is named.
  const std::string unformatted = dir + "/unformatted.json";
  fsdptune::write_file_atomically(unformatted,
                                  R"({"version": 99, "plan": {"version": 1, "name": "one",
      "forward_buckets": [[0, 5]]}, "program": "garbage"})");
  for (const std::string& flags : {std::string(), std::string(" --model tiny --gpus 2")}) {
    check_rejected("simulate --hardware h100-sxm --plan " + unformatted + flags,
                   {"unformatted.json: format", "missing field", "\"plan\""});
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("simulate --plan schedule.json without --model: which costs",
          "[cli][simulate][schedule]") {
  const std::string dir = make_temp_dir("fsdptune-sim-schedule-costs");
  const std::string profile = dir + "/profile.json";
  write_profile(profile, 1.2);
  const std::string out = tuned(kTinyTune + " --profile " + profile, dir + "/schedule.json");
  const double predicted_s =
      fsdptune::read_json_file(out)["predicted"]["step_time_s"].get<double>();

  // The recorded profile, unchanged: used (the JSON says where the costs came from).
  nlohmann::json json = run_json("simulate --json --plan " + out);
  CHECK(json.at("cost_source") == profile);
  CHECK(json.at("step_time_s").get<double>() == predicted_s);
  // --profile given: it changes nothing in a version 1 replay, and `cost_source` still
  // names the costs of the stored program (found by QA: it named the unused --profile).
  const std::string other = dir + "/other.json";
  write_profile(other, 1.3);
  json = run_json("simulate --json --profile " + other + " --plan " + out);
  CHECK(json.at("cost_source") == profile);
  CHECK(json.at("step_time_s").get<double>() == predicted_s);
  // ...and says so (found by QA: read, checked, and silently unused).
  CommandResult noted = run_fsdptune("simulate --profile " + other + " --plan " + out);
  REQUIRE(noted.exit_code == 0);
  CHECK_THAT(noted.err, Catch::Contains("note: --profile " + other + ": " + out +
                                        " replays its stored program") &&
                            Catch::Contains("the profile changes nothing here"));
  noted = run_fsdptune("simulate --plan " + out);
  CHECK_THAT(noted.err, !Catch::Contains("note: --profile"));

  // Changed since: a version 1 replay keeps the schedule's step time, the recorded
  // profile's costs, and says that the file has changed (stderr with --json, stdout in the
  // text form; it said "costs: the analytic model" and `cost_source` "analytic").
  write_profile(profile, 1.25);
  CommandResult result = run_fsdptune("simulate --json --plan " + out);
  REQUIRE(result.exit_code == 0);
  json = nlohmann::json::parse(result.out);
  CHECK(json.at("cost_source") == profile);
  CHECK(json.at("step_time_s").get<double>() == predicted_s);
  CHECK_THAT(result.err, Catch::Contains("replays its stored program, whose durations are "
                                         "those of the profile " +
                                         profile) &&
                             Catch::Contains("has changed since"));
  CHECK_THAT(result.err, !Catch::Contains("the analytic model"));
  std::filesystem::remove(profile);
  result = run_fsdptune("simulate --plan " + out);
  REQUIRE(result.exit_code == 0);
  CHECK_THAT(result.out, Catch::Contains("is not found"));
  // Not to pass --profile: a version 1 replay costs nothing with it.
  CHECK_THAT(result.out, !Catch::Contains("Pass --profile"));

  // A profile of other hardware is refused, naming it.
  fsdptune::Profile a100;
  a100.hardware = "a100-80g";
  fsdptune::write_file_atomically(other, fsdptune::dump_json(fsdptune::profile_to_json(a100)));
  check_rejected("simulate --profile " + other + " --plan " + out,
                 {"--profile " + other, "a100-80g", "h100-sxm"});
  std::filesystem::remove_all(dir);
}

TEST_CASE("a spec file under a built-in's id: noted, and a replay names the figures it changes",
          "[cli][simulate][schedule]") {
  const std::string dir = make_temp_dir("fsdptune-sim-schedule-spec");
  const std::string out = tuned(kTinyTune + " --hardware h100-sxm", dir + "/schedule.json");
  nlohmann::json spec = fsdptune::hardware_to_json(fsdptune::builtin_hardware("h100-sxm"));
  // A copy of the built-in: read as it, without a word.
  const std::string copy = dir + "/copy.json";
  fsdptune::write_file_atomically(copy, fsdptune::dump_json(spec));
  CommandResult result = run_fsdptune("simulate --plan " + out + " --hardware " + copy);
  CHECK(result.exit_code == 0);
  CHECK_THAT(result.err, !Catch::Contains("note: --hardware"));
  // Other figures under its id (found by QA: outputs named a B200's figures "h100-sxm"
  // without a word, and the replay's refusal named no field).
  spec["peak_bf16_flops_per_s"] = 2e15;
  const std::string faster = dir + "/faster.json";
  fsdptune::write_file_atomically(faster, fsdptune::dump_json(spec));
  result = run_fsdptune("simulate --plan " + out + " --hardware " + faster);
  CHECK(result.exit_code == 2);
  CHECK_THAT(result.err,
             Catch::Contains("note: --hardware " + faster +
                             ": its id \"h100-sxm\" is a built-in's, with other figures "
                             "(peak_bf16_flops_per_s 989000000000000 (here: 2e+15))") &&
                 Catch::Contains("is another spec of \"h100-sxm\" than the one " + out +
                                 " was made with: peak_bf16_flops_per_s 989000000000000 "
                                 "(here: 2e+15)"));
  std::filesystem::remove_all(dir);
}

// Found by QA: `--plan <(...)` was "not a file" (blamed on --model without it) and
// `--start-plan <(...)` likewise, where every other input file is read from a pipe. A pipe
// holds its text once: simulate reads the schedule for its costs, its job and its Programs.
TEST_CASE("a schedule is read from a named pipe by --plan and --start-plan",
          "[cli][simulate][schedule]") {
  const std::string dir = make_temp_dir("fsdptune-plan-pipe");
  const std::string v1 = tuned(kTinyTune, dir + "/v1.json");
  const std::string v2 = tuned(kTinyPipelineTune, dir + "/v2.json");
  const std::string pipe = dir + "/pipe.json";
  REQUIRE(::mkfifo(pipe.c_str(), 0600) == 0);
  const auto through_pipe = [&](const std::string& file, const std::string& arguments) {
    return fsdptune::testing::run_command("cat " + file + " > " + pipe + " & " + FSDPTUNE_BINARY +
                                          " " + arguments);
  };
  for (const std::string& file : {v1, v2}) {
    const nlohmann::json direct = run_json("simulate --json --plan " + file);
    const CommandResult piped = through_pipe(file, "simulate --json --plan " + pipe);
    INFO(file << "\n" << piped.err);
    REQUIRE(piped.exit_code == 0);
    CHECK(nlohmann::json::parse(piped.out).at("step_time_s") == direct.at("step_time_s"));
  }
  // With --model and the job flags (the schedule's hardware, then its Program).
  const CommandResult with_model =
      through_pipe(v1, "simulate --json --model tiny --gpus 8 --batch 2 --seq 1024 --plan " + pipe);
  INFO(with_model.err);
  CHECK(with_model.exit_code == 0);
  const CommandResult start =
      through_pipe(v1, kTinyTune + " --out " + dir + "/again.json --start-plan " + pipe);
  INFO(start.err);
  CHECK(start.exit_code == 0);
  // A folder is named as such.
  check_rejected("simulate --plan " + dir, {"--plan " + dir + ": is a folder, not a file"});
  check_rejected(kTinyTune + " --out " + dir + "/x.json --start-plan " + dir,
                 {"--start-plan " + dir + ": is a folder, not a file"});
  std::filesystem::remove_all(dir);
}
