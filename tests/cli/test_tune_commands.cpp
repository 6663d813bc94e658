// `fsdptune tune`: the table, the files it writes, determinism, and exit 3 when nothing
// fits.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_support.hpp"
#include "fsdptune/error.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/memory_bound.hpp"
#include "fsdptune/plan.hpp"
#include "fsdptune/schedule.hpp"
#include "fsdptune/units.hpp"

using fsdptune::testing::CommandResult;
using fsdptune::testing::make_temp_dir;
using fsdptune::testing::run_fsdptune;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// tiny (6 units) on 8 GPUs: a search of a fraction of a second, bounded by evaluations so
// that the result is deterministic whatever the machine's speed.
const std::string kTinyJob =
    "--model tiny --gpus 8 --batch 2 --seq 1024 --max-evaluations 300 --time-budget 60";

// `tune ARGS --json --out OUT`, which must succeed: its JSON summary.
nlohmann::json tune_json(const std::string& args, const std::string& out) {
  const CommandResult result = run_fsdptune("tune " + args + " --json --out " + out);
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  return nlohmann::json::parse(result.out);
}

// How many chunks of a pipelined schedule run SimpleFSDP's unbucketed plan.
int unbucketed_chunks(const std::string& schedule_path) {
  // Held: a range-for over a temporary's member would read freed memory.
  const nlohmann::json schedule = fsdptune::read_json_file(schedule_path);
  int unbucketed = 0;
  for (const nlohmann::json& chunk : schedule["pipeline"]["chunks"]) {
    unbucketed += chunk["plan"]["one_collective_per_parameter"].get<bool>() ? 1 : 0;
  }
  return unbucketed;
}

}  // namespace

TEST_CASE("tune prints baselines and the tuned plan and writes a loadable schedule",
          "[cli][tune]") {
  const std::string dir = make_temp_dir("fsdptune-tune-cli");
  const std::string out = dir + "/schedule.json";
  const std::string torchtitan = dir + "/torchtitan.json";
  const CommandResult result =
      run_fsdptune("tune " + kTinyJob + " --out " + out + " --emit-torchtitan " + torchtitan);
  INFO("stderr: " << result.err);
  REQUIRE(result.exit_code == 0);
  // Headed as simulate heads the job (found by QA: the mesh was missing).
  CHECK(result.out.rfind("tiny on 8 x h100-sxm (dp_shard 8, dp_replicate 1, tp 1), batch 2 x seq "
                         "1024, AC none; memory limit ",
                         0) == 0);
  for (const char* row : {"fsdp2", "simplefsdp-block", "simplefsdp-greedy", "tuned"}) {
    CHECK(result.out.find(row) != std::string::npos);
  }
  CHECK(result.out.find("tokens/s/GPU") != std::string::npos);
  CHECK(result.out.find("lower bound") != std::string::npos);
  CHECK(result.out.find("wrote " + out) != std::string::npos);
  CHECK(result.out.find("wrote " + torchtitan) != std::string::npos);

  const fsdptune::ScheduleFile schedule =
      fsdptune::schedule_from_json(fsdptune::read_json_file(out), out);
  CHECK(schedule.model.name == "tiny");
  CHECK(schedule.plan.name == "tuned");
  CHECK(schedule.baselines.size() == 3);
  CHECK(schedule.predicted.fits);
  CHECK(schedule.timings.size() == schedule.program.tasks.size());
  CHECK(schedule.lower_bound_s <= schedule.predicted.step_time_s);
  for (const fsdptune::PlanSummary& baseline : schedule.baselines) {
    if (baseline.fits) CHECK(schedule.predicted.step_time_s <= baseline.step_time_s);
  }
  CHECK(schedule.provenance.command.find("--model tiny") != std::string::npos);
  CHECK(schedule.provenance.cost_source == "h100-sxm");
  CHECK(schedule.provenance.cost_hash.size() == 16);
  // The speed against the best baseline that fits, with the memory it costs (found by QA:
  // "1.00x faster" of a plan reserving 23 GiB more).
  const fsdptune::PlanSummary* best = nullptr;
  for (const fsdptune::PlanSummary& baseline : schedule.baselines) {
    if (baseline.fits && (best == nullptr || baseline.step_time_s < best->step_time_s)) {
      best = &baseline;
    }
  }
  REQUIRE(best != nullptr);
  CHECK_THAT(result.out,
             Catch::Contains(fmt::format("tuned vs best baseline ({}): ", best->plan_name)) &&
                 Catch::Contains(
                     fmt::format("% step time), {} reserved against {}\n",
                                 fsdptune::format_bytes(schedule.predicted.peak_reserved_bytes),
                                 fsdptune::format_bytes(best->peak_reserved_bytes))));

  const nlohmann::json exported = fsdptune::read_json_file(torchtitan);
  CHECK(exported.at("format") == "fsdptune-torchtitan");
  CHECK(fsdptune::testing::readme_lists_format(exported));
  CHECK(fsdptune::testing::readme_lists_format(fsdptune::read_json_file(out)));
  CHECK(exported.at("simplefsdp").at("forward_all_gather_buckets").at(0).at(0) == "tok_embeddings");
}

TEST_CASE("tune --fsdp2-exact writes a plan torchtitan's FSDP2 runs as simulated", "[cli][tune]") {
  // Found by QA: on Llama 3 8B the tuned plan's backward buckets were not its forward ones
  // ("exact": false), and on 70B with full AC it ran both collectives on one stream. (Llama
  // 3.2 1B since 2026-12-07: Llama 3 8B's free pick is one FSDP2 runs, its partitions
  // spaced evenly alike.)
  const std::string dir = make_temp_dir("fsdptune-tune-exact");
  const std::string job = "--model llama3.2-1b --gpus 8 --hardware h100-sxm --time-budget 0 ";
  auto result = run_fsdptune("tune " + job + "--out " + dir + "/free.json --emit-torchtitan " +
                             dir + "/free-tt.json");
  REQUIRE(result.exit_code == 0);
  CHECK(fsdptune::read_json_file(dir + "/free-tt.json")["fsdp2"]["exact"] == false);
  result = run_fsdptune("tune " + job + "--fsdp2-exact --out " + dir +
                        "/exact.json --emit-torchtitan " + dir + "/exact-tt.json");
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  CHECK(fsdptune::read_json_file(dir + "/exact-tt.json")["fsdp2"]["exact"] == true);
  const nlohmann::json schedule = fsdptune::read_json_file(dir + "/exact.json");
  CHECK_THAT(schedule["provenance"]["command"].get<std::string>(),
             Catch::EndsWith(" --fsdp2-exact"));
  // A gain below what the predictions resolve, for much more memory, is said with the flag
  // that trades it back (found by QA: 0.4% faster for 25 GiB more).
  result = run_fsdptune(
      "tune --model llama3-70b --gpus 64 --ac full --hardware h100-sxm --time-budget 0 --out " +
      dir + "/70b.json");
  REQUIRE(result.exit_code == 0);
  CHECK_THAT(result.out, Catch::Contains("a gain within what the predictions resolve") &&
                             Catch::Contains("--step-tolerance 0.01"));
  // Backward buckets that gather nothing are counted as such (found by QA: "82 backward
  // all-gather buckets", of which one gathered).
  result = run_fsdptune(
      "tune --model llama3-70b --gpus 64 --tp 8 --ac full --hardware h100-sxm --time-budget 0 "
      "--out " +
      dir + "/70b-tp8.json");
  REQUIRE(result.exit_code == 0);
  CHECK_THAT(result.out, Catch::Contains(" gathering: the others' units stay gathered after "
                                         "forward) backward all-gather buckets"));
  // Not to a user who already gave that tolerance.
  result = run_fsdptune(
      "tune --model llama3-70b --gpus 64 --ac full --hardware h100-sxm --time-budget 0 "
      "--step-tolerance 0.01 --out " +
      dir + "/70b.json");
  REQUIRE(result.exit_code == 0);
  CHECK_THAT(result.out, !Catch::Contains("a gain within what the predictions resolve"));
  // Pipelined, where nothing FSDP2 runs fits: said so, not SimpleFSDP's unbucketed plan
  // (found by review: every stage came back with one collective per parameter), with the
  // flag and for a job without torch.compile, which SimpleFSDP does not run.
  for (const char* only_fsdp2 : {"--fsdp2-exact", "--execution eager"}) {
    INFO(only_fsdp2);
    result = run_fsdptune(
        std::string("tune --model llama3-70b --gpus 64 --pp 4 --microbatches 8 --ac full "
                    "--hardware h100-sxm --max-evaluations 100 --time-budget 0 --memory-limit "
                    "37.5GiB ") +
        only_fsdp2 + " --out " + dir + "/pp.json");
    CHECK(result.exit_code == 3);
    CHECK_THAT(result.err, Catch::Contains("no per-stage plan fits"));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("tune --simplefsdp-exact writes a plan SimpleFSDP's bucketing runs as simulated",
          "[cli][tune]") {
  const std::string dir = make_temp_dir("fsdptune-tune-simplefsdp-exact");
  const std::string job = "--model llama3-8b --gpus 8 --hardware h100-sxm --time-budget 0 ";
  auto result = run_fsdptune("tune " + job + "--out " + dir + "/free.json --emit-torchtitan " +
                             dir + "/free-tt.json");
  REQUIRE(result.exit_code == 0);
  CHECK(fsdptune::read_json_file(dir + "/free-tt.json")["simplefsdp"]["exact"] == false);
  result = run_fsdptune("tune " + job + "--simplefsdp-exact --out " + dir +
                        "/exact.json --emit-torchtitan " + dir + "/exact-tt.json");
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  CHECK(fsdptune::read_json_file(dir + "/exact-tt.json")["simplefsdp"]["exact"] == true);
  CHECK_THAT(result.out, Catch::Contains("prefetch 1/1, shared streams"));
  const nlohmann::json schedule = fsdptune::read_json_file(dir + "/exact.json");
  CHECK_THAT(schedule["provenance"]["command"].get<std::string>(),
             Catch::EndsWith(" --simplefsdp-exact"));
  // The schedule's recorded command gives the same bytes again.
  result = run_fsdptune("tune " + job + "--simplefsdp-exact --out " + dir + "/again.json");
  REQUIRE(result.exit_code == 0);
  CHECK(slurp(dir + "/again.json") == slurp(dir + "/exact.json"));
  // With microbatches the chunks are SimpleFSDP's too, fsdp2 listed and never picked (found
  // by QA and review: fsdp2 came back, "exact": false), and a slower pick said so.
  result = run_fsdptune("tune " + job + "--microbatches 2 --simplefsdp-exact --out " + dir +
                        "/mb.json --emit-torchtitan " + dir + "/mb-tt.json");
  REQUIRE(result.exit_code == 0);
  for (const auto& stage : fsdptune::read_json_file(dir + "/mb-tt.json").at("stages")) {
    CHECK(stage.at("simplefsdp").at("exact") == true);
  }
  CHECK_THAT(result.out,
             Catch::Contains("x slower (+") && Catch::Contains("fsdp2 is no plan SimpleFSDP runs"));
  // Nor a point of the front (found by review: it dominated the tuned point there).
  for (const auto& point : fsdptune::read_json_file(dir + "/mb.json").at("pareto")) {
    CHECK(point.at("label") != "fsdp2");
  }
  // Errors name the flag.
  result =
      run_fsdptune("tune " + job + "--simplefsdp-exact --fsdp2-exact --out " + dir + "/x.json");
  CHECK(result.exit_code == 2);
  CHECK_THAT(result.err, Catch::Contains("--simplefsdp-exact: not with --fsdp2-exact"));
  result =
      run_fsdptune("tune " + job + "--simplefsdp-exact --execution eager --out " + dir + "/x.json");
  CHECK(result.exit_code == 2);
  CHECK_THAT(result.err, Catch::Contains("--simplefsdp-exact: SimpleFSDP runs under "
                                         "torch.compile only, and the job is eager"));
  CHECK_FALSE(std::filesystem::exists(dir + "/x.json"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("tune with the same seed writes the same bytes", "[cli][tune]") {
  const std::string dir = make_temp_dir("fsdptune-tune-seed");
  const std::string out = dir + "/schedule.json";
  const std::string command = "tune " + kTinyJob + " --seed 5 --threads 2 --out " + out;
  REQUIRE(run_fsdptune(command).exit_code == 0);
  const std::string first = slurp(out);
  REQUIRE(run_fsdptune(command).exit_code == 0);
  CHECK(slurp(out) == first);
  REQUIRE_FALSE(first.empty());
}

TEST_CASE("tune --json gives the summaries, the lower bound and the files", "[cli][tune]") {
  const std::string dir = make_temp_dir("fsdptune-tune-json");
  const std::string out = dir + "/schedule.json";
  const CommandResult result = run_fsdptune("tune " + kTinyJob + " --json --out " + out);
  REQUIRE(result.exit_code == 0);
  const nlohmann::json json = nlohmann::json::parse(result.out);
  CHECK(json.at("format") == "fsdptune-tune");
  CHECK(json.at("version") == 1);
  CHECK(fsdptune::testing::readme_lists_format(json));
  CHECK(json.at("baselines").size() == 3);
  CHECK(json.at("tuned").at("plan_name") == "tuned");
  CHECK(json.at("efficiency").get<double>() > 0);
  CHECK(json.at("efficiency").get<double>() <= 1.0);
  CHECK(json.at("schedule") == out);
  const fsdptune::ScheduleFile schedule =
      fsdptune::schedule_from_json(fsdptune::read_json_file(out), out);
  CHECK(json.at("schedule_hash") == fsdptune::schedule_hash(schedule));
  CHECK(json.at("tuned").at("step_time_s").get<double>() == schedule.predicted.step_time_s);
  CHECK(json.at("any_timing_peak_allocated_bytes").get<std::int64_t>() ==
        fsdptune::any_timing_peak(schedule.program).peak_allocated_bytes);
  CHECK(json.at("any_timing_peak_allocated_bytes").get<std::int64_t>() >=
        schedule.predicted.peak_allocated_bytes);
}

TEST_CASE("tune --fit any-timing picks a plan that fits under the limit at every timing",
          "[cli][tune][fit]") {
  const std::string dir = make_temp_dir("fsdptune-tune-any-timing");
  // tiny with full AC at seq 256 under a 40,000,000-byte limit (38.1 MiB): the plan tuned
  // by its predicted peak (37.3 MiB reserved) reaches 43.6 MiB at another timing.
  const std::string job =
      "tune --model tiny --gpus 8 --batch 1 --seq 256 --ac full --max-evaluations 300 "
      "--time-budget 60 --memory-limit 40000000 ";
  const CommandResult predicted =
      run_fsdptune(job + "--fit predicted --json --out " + dir + "/predicted.json");
  REQUIRE(predicted.exit_code == 0);
  const nlohmann::json leaning = nlohmann::json::parse(predicted.out);
  CHECK(leaning.at("fit") == "predicted");
  CHECK(leaning.at("tuned").at("peak_reserved_bytes").get<std::int64_t>() <= 40000000);
  CHECK(leaning.at("any_timing_reserved_bytes").get<std::int64_t>() > 40000000);
  CHECK_FALSE(leaning.at("baselines").at(0).contains("any_timing_reserved_bytes"));

  const std::string out = dir + "/any-timing.json";
  const CommandResult robust = run_fsdptune(job + "--fit any-timing --json --out " + out);
  INFO("stderr: " << robust.err);
  REQUIRE(robust.exit_code == 0);
  const nlohmann::json json = nlohmann::json::parse(robust.out);
  CHECK(json.at("fit") == "any-timing");
  const fsdptune::ScheduleFile schedule =
      fsdptune::schedule_from_json(fsdptune::read_json_file(out), out);
  const std::int64_t bound = fsdptune::any_timing_reserved_bytes(schedule.program);
  CHECK(json.at("any_timing_reserved_bytes").get<std::int64_t>() == bound);
  CHECK(bound <= 40000000);
  CHECK(bound >= schedule.predicted.peak_reserved_bytes);
  // The provenance's command reproduces the search: --fit included, and rerun from it
  // (another --out) the same schedule.
  CHECK_THAT(schedule.provenance.command, Catch::EndsWith(" --fit any-timing"));
  CHECK_THAT(
      fsdptune::read_json_file(dir + "/predicted.json")["provenance"]["command"].get<std::string>(),
      !Catch::Contains("--fit"));
  const CommandResult rerun =
      run_fsdptune(schedule.provenance.command.substr(std::string("fsdptune ").size()) +
                   " --json --out " + dir + "/rerun.json");
  REQUIRE(rerun.exit_code == 0);
  CHECK(nlohmann::json::parse(rerun.out).at("schedule_hash") == json.at("schedule_hash"));
  // Each baseline says what its fit was judged by: simplefsdp-greedy (39.4 MiB predicted)
  // does not fit at its predicted timing already (0: not computed).
  for (const nlohmann::json& baseline : json.at("baselines")) {
    INFO(baseline.at("plan_name"));
    const auto reserved = baseline.at("any_timing_reserved_bytes").get<std::int64_t>();
    if (baseline.at("fits").get<bool>()) {
      CHECK(reserved >= baseline.at("peak_reserved_bytes").get<std::int64_t>());
    } else {
      CHECK(reserved == 0);
    }
    CHECK(baseline.at("fits_at_any_timing").get<bool>() == (reserved > 0 && reserved <= 40000000));
  }

  // The table: the limit says how fit is judged, an "any timing" column, no warning line.
  const CommandResult text = run_fsdptune(job + "--fit any-timing --out " + dir + "/text.json");
  REQUIRE(text.exit_code == 0);
  CHECK_THAT(text.out, Catch::Contains("memory limit 38.1 MiB at any timing (--fit any-timing)") &&
                           Catch::Contains("any timing  fits") &&
                           !Catch::Contains("above the 38.1 MiB limit"));
  const CommandResult warned = run_fsdptune(job + "--out " + dir + "/warned.json");
  REQUIRE(warned.exit_code == 0);
  CHECK_THAT(warned.out, Catch::Contains("reserved above the 38.1 MiB limit") &&
                             Catch::Contains("tune --fit any-timing"));

  // Nothing fits at any timing: exit 3, saying so.
  const CommandResult tight = run_fsdptune(
      "tune --model tiny --gpus 8 --batch 1 --seq 256 --ac full --max-evaluations 50 "
      "--memory-limit 30MiB --fit any-timing --out " +
      dir + "/tight.json");
  CHECK(tight.exit_code == 3);
  CHECK_THAT(tight.err, Catch::Contains("no plan fits in 30.0 MiB per GPU at any timing") &&
                            Catch::Contains("(--fit predicted)"));
  // Only the two values (exit 2 naming the flag).
  for (const std::string& flags : {std::string("--fit sometimes"), std::string("--fit ''")}) {
    INFO(flags);
    const CommandResult bad =
        run_fsdptune("tune --model tiny --gpus 4 " + flags + " --out " + dir + "/bad.json");
    CHECK(bad.exit_code == 2);
    CHECK_THAT(bad.err, Catch::Contains("--fit"));
    CHECK_FALSE(std::ifstream(dir + "/bad.json").good());
  }
}

TEST_CASE("tune --fit any-timing of 405B on PP 8: kept-gathered stages bound as predicted",
          "[cli][tune][pipeline]") {
  // Each chunk kept gathered computes alone between its first forward and last backward:
  // its stage's bound at any timing is its predicted peak (2026-12-05; before, each chunk's
  // whole Program was bounded and 56 GiB cost the robust pick 0.17 % of step time). Both
  // criteria pick the same plan just above the tight end (found probing: 53.9 GiB reserved
  // at 54 GiB; 54.7 GiB at 55 GiB since the later backwards hold the gradient each unit
  // makes, 2026-12-06).
  const std::string dir = make_temp_dir("fsdptune-tune-405b-any-timing");
  const std::string job =
      "tune --model llama3-405b --gpus 512 --tp 8 --pp 8 --microbatches 16 --batch 1 --seq 8192 "
      "--ac full --hardware h100-sxm --threads 1 --seed 0 --memory-limit 55GiB --json ";
  const CommandResult predicted = run_fsdptune(job + "--out " + dir + "/predicted.json");
  const CommandResult robust = run_fsdptune(job + "--fit any-timing --out " + dir + "/robust.json");
  REQUIRE(predicted.exit_code == 0);
  REQUIRE(robust.exit_code == 0);
  const nlohmann::json loose = nlohmann::json::parse(predicted.out);
  const nlohmann::json safe = nlohmann::json::parse(robust.out);
  const std::int64_t limit = 55LL << 30;
  const std::int64_t peak = loose["tuned"]["peak_reserved_bytes"].get<std::int64_t>();
  CHECK(peak > limit - (1LL << 30));
  CHECK(loose["any_timing_reserved_bytes"].get<std::int64_t>() == peak);
  CHECK(safe["any_timing_reserved_bytes"].get<std::int64_t>() <= limit);
  CHECK(safe["tuned"]["step_time_s"] == loose["tuned"]["step_time_s"]);
  const nlohmann::json schedule = fsdptune::read_json_file(dir + "/predicted.json");
  for (const nlohmann::json& chunk : schedule["pipeline"]["chunks"]) {
    CHECK(chunk["keep_gathered"] == true);
  }
}

TEST_CASE("tune --fit any-timing of a pipelined job: every stage within the limit at any timing",
          "[cli][tune][pipeline]") {
  const std::string dir = make_temp_dir("fsdptune-tune-pp-any-timing");
  // 2 stages x 4 microbatches of the tiny model under full AC, re-gathered every
  // microbatch, with a 44 MiB limit: the default pick fits as predicted, not at every timing
  // (found probing 2026-12-06: 43.2 MiB reserved predicted, 45.3 MiB at any timing; the
  // pick at any timing 43.2 MiB at both. Batch 1 at 32 MiB before a stage rounded each event
  // it holds to segments, as the simulator does: its picks now reserve 43.2 MiB at both).
  const std::string job =
      "tune --model tiny --gpus 4 --pp 2 --microbatches 4 --batch 2 --seq 256 --ac full "
      "--keep-gathered no --max-evaluations 50 --threads 1 --memory-limit 44MiB ";
  const std::int64_t limit = 44 << 20;
  const CommandResult predicted = run_fsdptune(job + "--json --out " + dir + "/predicted.json");
  INFO(predicted.err);
  REQUIRE(predicted.exit_code == 0);
  const nlohmann::json loose = nlohmann::json::parse(predicted.out);
  CHECK(loose["fit"] == "predicted");
  CHECK(loose["tuned"]["peak_reserved_bytes"].get<std::int64_t>() <= limit);
  CHECK(loose["any_timing_reserved_bytes"].get<std::int64_t>() > limit);
  REQUIRE(loose["any_timing_stages"].size() == 2);
  CHECK_FALSE(loose["baselines"][0].contains("fits_at_any_timing"));

  const CommandResult robust =
      run_fsdptune(job + "--fit any-timing --json --out " + dir + "/robust.json");
  INFO(robust.err);
  REQUIRE(robust.exit_code == 0);
  const nlohmann::json safe = nlohmann::json::parse(robust.out);
  CHECK(safe["fit"] == "any-timing");
  CHECK(safe["any_timing_reserved_bytes"].get<std::int64_t>() <= limit);
  for (const nlohmann::json& stage : safe["any_timing_stages"]) {
    CHECK(stage["fits"] == true);
    CHECK(stage["peak_reserved_bytes"].get<std::int64_t>() <= limit);
  }
  CHECK(safe["tuned"]["step_time_s"].get<double>() >= loose["tuned"]["step_time_s"].get<double>());
  CHECK(safe["baselines"][0].contains("fits_at_any_timing"));
  // simulate --plan of the written schedule finds the same stages at any timing.
  const CommandResult replay = run_fsdptune("simulate --plan " + dir + "/robust.json --json");
  REQUIRE(replay.exit_code == 0);
  const nlohmann::json replayed = nlohmann::json::parse(replay.out);
  CHECK(replayed["any_timing_stages"] == safe["any_timing_stages"]);
  CHECK(replayed["any_timing_reserved_bytes"] == safe["any_timing_reserved_bytes"]);

  // The text: the default pick is said to risk running out of memory, the robust one not.
  const CommandResult warned = run_fsdptune(job + "--out " + dir + "/warned.json");
  CHECK_THAT(warned.out, Catch::Contains("\nany timing ") &&
                             Catch::Contains("reserved above the 44.0 MiB limit") &&
                             Catch::Contains("tune --fit any-timing"));
  const CommandResult quiet = run_fsdptune(job + "--fit any-timing --out " + dir + "/quiet.json");
  CHECK_THAT(quiet.out, Catch::Contains("\nany timing ") && !Catch::Contains("above the"));
  // Nothing fits at any timing: exit 3, saying so.
  const CommandResult tight = run_fsdptune(
      "tune --model tiny --gpus 4 --pp 2 --microbatches 4 --batch 1 --seq 256 --ac full "
      "--max-evaluations 50 --threads 1 --memory-limit 20MiB --fit any-timing --out " +
      dir + "/tight.json");
  CHECK(tight.exit_code == 3);
  CHECK_THAT(tight.err,
             Catch::Contains("no per-stage plan fits in 20.0 MiB per GPU at any timing"));
  // ...and that its figure is the bound at any timing (QA: read as the predicted peak).
  CHECK_THAT(tight.err, Catch::Contains("largest-stage reserved peak at any timing found is"));
  CHECK_FALSE(std::ifstream(dir + "/tight.json").good());
}

TEST_CASE("tune --pp: --keep-gathered any no slower than no, --fit any-timing no faster",
          "[cli][tune][pipeline]") {
  const std::string dir = make_temp_dir("fsdptune-tune-pp-choices");
  const auto step = [&](const std::string& flags, const std::string& name) {
    return tune_json(flags + " --threads 1 --step-tolerance 0", dir + "/" + name + ".json");
  };
  // Tiny on 4 GPUs, PP 2, 4 microbatches at fsdp2 re-gathered's largest stage (55.8 MiB):
  // kept gathered nothing fits. Found by QA 2026-12-05 at 46.3 MiB, where fsdp2
  // re-gathered per microbatch was faster than any composition of the candidates: `any`
  // picked 2.452 ms, `no` fsdp2's 2.404 ms (since the headroom's searches, a composition of
  // 2.398 ms; since a stage rounds each event it holds to segments, 2026-12-06, fsdp2
  // reserves 55.8 MiB and a composition of 2.324 ms fits beside it).
  const std::string tiny =
      "--model tiny --gpus 4 --gpus-per-node 4 --seq 512 --pp 2 --microbatches 4 "
      "--memory-limit 58510540 --max-evaluations 60";
  const nlohmann::json any = step(tiny + " --keep-gathered any", "any");
  const nlohmann::json no = step(tiny + " --keep-gathered no", "no");
  CHECK(any["tuned"]["step_time_s"].get<double>() <= no["tuned"]["step_time_s"].get<double>());
  // Where fsdp2 re-gathered is the fastest: Llama 3 405B on 1024 GPUs, TP 2 x PP 4 x HSDP
  // 4 x 32, 8 microbatches, full AC (a row of the README's sweep).
  const std::string large =
      "--model llama3-405b --gpus 1024 --tp 2 --pp 4 --dp-replicate 4 --microbatches 8 "
      "--seq 8192 --ac full --max-evaluations 60";
  const nlohmann::json large_any = step(large + " --keep-gathered any", "large-any");
  const nlohmann::json large_no = step(large + " --keep-gathered no", "large-no");
  CHECK(large_any["derived_from"] == "fsdp2 re-gathered per microbatch");
  CHECK(large_any["tuned"]["step_time_s"].get<double>() ==
        large_no["tuned"]["step_time_s"].get<double>());
  // The same candidates under either fit: the stricter criterion is never faster (found by
  // QA: Llama 3 8B on 16 GPUs, PP 2, picked 0.4866 s under --fit any-timing, 0.4964 s by
  // default, from SimpleFSDP's unbucketed plans that only --fit any-timing offered).
  const std::string llama =
      "--model llama3-8b --gpus 16 --seq 2048 --pp 2 --microbatches 4 --max-evaluations 60";
  const nlohmann::json predicted = step(llama, "predicted");
  const nlohmann::json robust = step(llama + " --fit any-timing", "robust");
  CHECK(robust["tuned"]["step_time_s"].get<double>() >=
        predicted["tuned"]["step_time_s"].get<double>());
  CHECK(unbucketed_chunks(dir + "/robust.json") == 0);
}

TEST_CASE("tune --pp: SimpleFSDP's unbucketed plan is the last resort of both fit criteria",
          "[cli][tune][pipeline]") {
  const std::string dir = make_temp_dir("fsdptune-tune-pp-last-resort");
  // Llama 3 70B, TP 8 x PP 4, 8 microbatches, full AC at seq 4096 under 18.7 GiB: no
  // composition of the FSDP2-style candidates and no fsdp2 fits (found by QA 2026-12-05:
  // the default criterion exited 3 while --fit any-timing, alone offered simplefsdp-none,
  // fitted with it on stage 0).
  const std::string job =
      "--model llama3-70b --gpus 64 --tp 8 --pp 4 --microbatches 8 --ac full --seq 4096 "
      "--max-evaluations 40 --threads 1";
  const auto tuned = [&](const std::string& flags, const std::string& name) {
    const std::string out = dir + "/" + name + ".json";
    const double step_s = tune_json(job + " " + flags, out)["tuned"]["step_time_s"].get<double>();
    return std::pair{step_s, unbucketed_chunks(out)};
  };
  const auto [tight_s, tight_unbucketed] = tuned("--memory-limit 20065781022", "tight");
  const auto [robust_s, robust_unbucketed] =
      tuned("--memory-limit 20065781022 --fit any-timing", "robust");
  CHECK(tight_unbucketed > 0);
  CHECK(robust_unbucketed == tight_unbucketed);
  CHECK(robust_s == tight_s);
  // Where an FSDP2-style composition fits, it is never offered.
  CHECK(tuned("--memory-limit 40GiB", "roomy").second == 0);
}

TEST_CASE("tune exits 3 when nothing fits, naming the smallest peak and what to change",
          "[cli][tune]") {
  const std::string dir = make_temp_dir("fsdptune-tune-fit");
  const std::string out = dir + "/schedule.json";
  // Llama 3 70B on 8 GPUs at seq 8192 without AC: sharded state is 141 GB / 8, and the
  // rest of the peak alone is over the limit: no number of GPUs fits it, none is offered
  // alone (QA, 2026-12-05: it offered to double them at any size); but the sharded state
  // alone, 131 GiB, is over the limit too, so the GPUs that bring it under are needed with
  // the rest (QA, 2026-12-06: --ac full, as offered, still did not fit).
  const CommandResult result = run_fsdptune(
      "tune --model llama3-70b --gpus 8 --batch 1 --seq 8192 --max-evaluations 50 --out " + out);
  INFO("stdout: " << result.out << "\nstderr: " << result.err);
  CHECK(result.exit_code == 3);
  CHECK(result.err.find("no plan fits") != std::string::npos);
  CHECK(result.err.find("smallest peak") != std::string::npos);
  // The job heads the table, as when a plan fits (found by QA: no header then).
  CHECK_THAT(result.out, Catch::StartsWith("llama3-70b on 8 x h100-sxm (dp_shard 8, "));
  CHECK_THAT(result.err,
             Catch::Contains("hint: shard over at least 16 GPUs (--gpus 16: the sharded state "
                             "alone, 131 GiB, is over the limit); with that, checkpoint "
                             "activations (--ac full), split each sequence over more ranks "
                             "(--cp 2), split each layer over more GPUs (--tp 2), or use a "
                             "shorter --seq (now 8192)"));
  // With full AC it is the sharded state: the fewest GPUs of a valid job (whole nodes) whose
  // share brings the smallest peak under the limit, 160 GiB - 131 GiB * 2/3 at 24 (16 leave
  // 94.6 GiB; tuned at 24 it reserves 72.7 GiB). Doubling offered 32 (found by QA: and 6
  // GPUs were offered 12, not whole nodes).
  const CommandResult sharded =
      run_fsdptune("tune --model llama3-70b --gpus 8 --ac full --max-evaluations 50 --out " + out);
  CHECK(sharded.exit_code == 3);
  // The sharded state alone is over the limit: nothing else fits without GPUs (review).
  CHECK_THAT(sharded.err,
             Catch::Contains("hint: shard over at least 16 GPUs (--gpus 16: the sharded state "
                             "alone, 131 GiB, is over the limit); with that, shard over more "
                             "GPUs (--gpus 24), split each sequence over more ranks (--cp 2), "
                             "split each layer over more GPUs (--tp 2), or use a shorter --seq "
                             "(now 8192)"));
  CHECK_FALSE(std::ifstream(out).good());  // no schedule written
  // Where the GPUs that bring the sharded state under the limit fit the whole peak, they
  // are the one change offered (under 100 GiB: 160 GiB - 131 GiB / 2 at 16).
  const CommandResult enough = run_fsdptune(
      "tune --model llama3-70b --gpus 8 --ac full --memory-limit 100GiB --max-evaluations 50 "
      "--out " +
      out);
  CHECK(enough.exit_code == 3);
  CHECK_THAT(enough.err, Catch::EndsWith("hint: shard over more GPUs (--gpus 16)\n"));
  // The hint offers only what is still open: it said "--ac full, already" and a smaller
  // batch than 1.
  const CommandResult full = run_fsdptune(
      "tune --model llama3-70b --gpus 8 --batch 2 --seq 8192 --ac full --max-evaluations 50 "
      "--out " +
      out);
  CHECK(full.exit_code == 3);
  // 48 GPUs (tuned: 73.9 GiB reserved; 40 leave 78.3 GiB).
  CHECK_THAT(full.err, Catch::Contains("with that, shard over more GPUs (--gpus 48), split each "
                                       "sequence over more ranks (--cp 2), split each layer over "
                                       "more GPUs (--tp 2), use a smaller --batch (now 2), or use "
                                       "a shorter --seq (now 8192)"));
  // Pipelined, likewise (found probing: it offered --ac full with full AC and a smaller
  // batch than 1, and printed a peak 19 MiB over the limit as the limit itself).
  const CommandResult staged = run_fsdptune(
      "tune --model tiny --gpus 4 --pp 2 --microbatches 2 --hardware h100-sxm --memory-limit "
      "1MiB --ac full --batch 1 --seq 128 --out " +
      out);
  CHECK(staged.exit_code == 3);
  // More GPUs judged by the largest stage's sharded state (since 2026-12-07; it offered 8
  // GPUs, doubling, where a stage's 16 MiB of sharded state alone is over 1 MiB).
  CHECK_THAT(staged.err, Catch::Contains("MiB over") &&
                             Catch::Contains("hint: shard over at least 80 GPUs (--gpus 80: the "
                                             "sharded state alone, 16.0 MiB, is over the limit); "
                                             "with that, more pipeline stages (--pp 4), split each "
                                             "sequence over more ranks (--cp 2), split each layer "
                                             "over more GPUs (--tp 2), or use a shorter --seq"));
}

// Found by QA: a job of 2^30 tokens per sequence was tuned and written with a step of
// 4.3e9 s, beyond what the schedule reader takes; every command then refused the file.
TEST_CASE("tune refuses to write a schedule that would not read back", "[cli][tune]") {
  const std::string dir = make_temp_dir("fsdptune-tune-unreadable");
  const std::string model = dir + "/mid.json";
  std::ofstream(model) << R"({"format": "fsdptune-model", "version": 1, "name": "mid",
      "dim": 4096, "n_layers": 32, "n_heads": 32, "n_kv_heads": 8, "head_dim": 128,
      "ffn_dim": 14336, "vocab_size": 256})";
  const std::string out = dir + "/schedule.json";
  const CommandResult result = run_fsdptune(
      "tune --model " + model +
      " --gpus 64 --ac full --seq 1073741824 --hardware h100-sxm --memory-limit 1024TiB "
      "--max-evaluations 20 --time-budget 0 --out " +
      out);
  INFO("stderr: " << result.err);
  CHECK(result.exit_code == 2);
  CHECK_THAT(result.err, Catch::Contains(out + ": predicted.step_time_s: is ") &&
                             Catch::Contains("expected 0 to 1000000000 (in the schedule this "
                                             "run would write)") &&
                             Catch::Contains("a shorter --seq"));
  CHECK_FALSE(std::ifstream(out).good());
  std::filesystem::remove_all(dir);
}

// Found by QA: on strictly faster hardware the search missed the plan it had found on the
// slower spec. --start-plan hands such a plan to the search.
// Found by QA (2026-12-06): a start plan 0.006% faster than the search's best stopped the
// step tolerance, so tune returned it at 53.4 GiB reserved where the search alone picked
// 33.2 GiB. A baseline still stops it: the pick is never slower than one that fits.
TEST_CASE("tune --start-plan: a faster start plan does not stop the step tolerance",
          "[cli][tune]") {
  const std::string dir = make_temp_dir("fsdptune-tune-start-tolerance");
  const std::string job =
      "--model tiny --gpus 8 --gpus-per-node 8 --seq 128 --hardware h100-sxm "
      "--max-evaluations 20";
  const nlohmann::json fastest = tune_json(job + " --step-tolerance 0", dir + "/fastest.json");
  const nlohmann::json picked = tune_json(
      job + " --step-tolerance 50% --start-plan " + dir + "/fastest.json", dir + "/picked.json");
  REQUIRE(picked["start_plans"].size() == 1);
  const nlohmann::json& start = picked["start_plans"][0];
  CHECK(start["step_time_s"] == fastest["tuned"]["step_time_s"]);
  double fastest_baseline_s = std::numeric_limits<double>::infinity();
  for (const nlohmann::json& baseline : picked["baselines"]) {
    if (baseline["fits"].get<bool>()) {
      fastest_baseline_s = std::min(fastest_baseline_s, baseline["step_time_s"].get<double>());
    }
  }
  const nlohmann::json& tuned = picked["tuned"];
  CHECK(tuned["step_time_s"].get<double>() > start["step_time_s"].get<double>());
  CHECK(tuned["step_time_s"].get<double>() <= fastest_baseline_s);
  CHECK(tuned["peak_reserved_bytes"].get<std::int64_t>() <
        start["peak_reserved_bytes"].get<std::int64_t>());
}

// Found by QA (2026-12-06): --max-evaluations was reported as budget_exhausted, which the
// docs keep for a search the time budget cut short (not reproducible); and a search that
// stopped on its own said nothing of it.
TEST_CASE("tune says why its search stopped", "[cli][tune]") {
  const std::string dir = make_temp_dir("fsdptune-tune-stop");
  const std::string job = "--model tiny --gpus 8 --gpus-per-node 8 --seq 128 --hardware h100-sxm";
  const nlohmann::json capped = tune_json(job + " --max-evaluations 20", dir + "/capped.json");
  CHECK(capped["max_evaluations_reached"].get<bool>());
  CHECK_FALSE(capped["budget_exhausted"].get<bool>());
  const CommandResult text =
      run_fsdptune("tune " + job + " --max-evaluations 20 --out " + dir + "/text.json");
  REQUIRE(text.exit_code == 0);
  CHECK_THAT(text.out, Catch::Contains("; stopped at --max-evaluations\n"));
  const CommandResult own =
      run_fsdptune("tune " + job + " --time-budget 0 --out " + dir + "/own.json");
  REQUIRE(own.exit_code == 0);
  CHECK_THAT(own.out, Catch::Contains("; converged: "));
  // A pipelined job's chunks too.
  const CommandResult pipelined =
      run_fsdptune("tune " + job + " --pp 2 --microbatches 4 --out " + dir + "/pp.json");
  REQUIRE(pipelined.exit_code == 0);
  CHECK_THAT(pipelined.out, Catch::Contains("; converged: each chunk's search stopped on its own"));
}

TEST_CASE("tune --start-plan starts from a plan tuned before and is never slower than it",
          "[cli][tune]") {
  const std::string dir = make_temp_dir("fsdptune-tune-start");
  const std::string earlier = dir + "/a100.json";
  tune_json(kTinyJob + " --hardware a100-80g", earlier);
  const nlohmann::json tuned =
      tune_json(kTinyJob + " --hardware h100-sxm --start-plan " + earlier, dir + "/h100.json");
  REQUIRE(tuned["start_plans"].size() == 1);
  const nlohmann::json& start = tuned["start_plans"][0];
  CHECK(start["plan_name"] == "start plan 1");
  CHECK(start["file"] == earlier);
  CHECK(tuned["baselines"].size() == 3);
  // Within the default step tolerance (0.1%) of it.
  CHECK(tuned["tuned"]["step_time_s"].get<double>() <= start["step_time_s"].get<double>() * 1.001);
  const nlohmann::json schedule = fsdptune::read_json_file(dir + "/h100.json");
  CHECK(schedule["provenance"]["command"].get<std::string>().find("--start-plan " + earlier) !=
        std::string::npos);
  CHECK(schedule["baselines"].size() == 3);
  // A path with a space is one word of the recorded command (found by QA: two), and the
  // command runs again to the same schedule.
  const std::string spaced = dir + "/with space.json";
  std::filesystem::copy_file(earlier, spaced);
  const std::string again = dir + "/again.json";
  tune_json(kTinyJob + " --hardware h100-sxm --start-plan '" + spaced + "'", again);
  const std::string recorded =
      fsdptune::read_json_file(again)["provenance"]["command"].get<std::string>();
  CHECK(recorded.find("--start-plan '" + spaced + "'") != std::string::npos);
  const CommandResult rerun = run_fsdptune(recorded.substr(std::string("fsdptune ").size()) +
                                           " --out " + dir + "/rerun.json");
  CHECK(rerun.exit_code == 0);
  CHECK(fsdptune::read_json_file(dir + "/rerun.json")["provenance"]["command"] == recorded);
  const CommandResult table = run_fsdptune("tune " + kTinyJob + " --hardware h100-sxm --out " +
                                           dir + "/t.json --start-plan " + earlier);
  CHECK(table.out.find("\nstart plan 1 ") != std::string::npos);

  const auto refused = [&](const std::string& arguments, const std::string& says) {
    const CommandResult result =
        run_fsdptune("tune " + kTinyJob + " --out " + dir + "/x.json " + arguments);
    INFO(arguments);
    CHECK(result.exit_code == 2);
    CHECK(result.err.find(says) != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(dir + "/x.json"));
  };
  refused("--start-plan " + dir + "/none.json",
          "--start-plan " + dir +
              "/none.json: no such file\n  hint: give a plan file (docs/plan-format.md) or a "
              "schedule file of `tune --out`");
  refused("--start-plan " + dir, "--start-plan " + dir + ": is a folder, not a file");
  refused("--start-plan " + dir + "/h100.json --pp 2 --gpus-per-node 4",
          "--start-plan: a pipelined job");
  // A schedule of another model's units, naming the file and both models (found by QA: "plan:
  // forward_buckets: leaves units 6..17 out").
  const std::string other = dir + "/1b.json";
  tune_json("--model llama3.2-1b --gpus 8 --seq 256 --max-evaluations 20", other);
  refused("--start-plan " + other, "--start-plan " + other +
                                       ": its plan was tuned for model 'llama3.2-1b' (18 units), "
                                       "not 'tiny' (6 units)");
  // A plan file of another unit count, naming it.
  const std::string plan_file = dir + "/1b-plan.json";
  std::ofstream(plan_file) << fsdptune::read_json_file(other)["plan"].dump();
  refused("--start-plan " + plan_file, plan_file);
  // The output is never the start plan's file (found by QA: it replaced it).
  const std::string before = fsdptune::read_text_file(earlier);
  const CommandResult in_place = run_fsdptune("tune " + kTinyJob + " --hardware h100-sxm --out " +
                                              earlier + " --start-plan " + earlier);
  CHECK(in_place.exit_code == 2);
  CHECK(in_place.err.find("--out " + earlier + ": is the file of --start-plan too") !=
        std::string::npos);
  CHECK(fsdptune::read_text_file(earlier) == before);
  // A schedule is read as every reader reads it: its job hash checked (found by QA: an
  // edited job was taken).
  nlohmann::json edited = fsdptune::read_json_file(earlier);
  edited["job"]["seq_len"] = 2048;
  const std::string tampered = dir + "/tampered.json";
  std::ofstream(tampered) << edited.dump();
  refused("--start-plan " + tampered, tampered + ": job");
  // Another model of as many units is taken with a note (found by QA: without a word).
  nlohmann::json wider = fsdptune::read_json_file(earlier)["model"];
  wider["name"] = "tiny-wide";
  wider["dim"] = 512;
  const std::string wide_model = dir + "/tiny-wide.json";
  std::ofstream(wide_model) << wider.dump();
  const CommandResult noted =
      run_fsdptune("tune --model " + wide_model + kTinyJob.substr(kTinyJob.find(" --gpus")) +
                   " --out " + dir + "/wide.json --start-plan " + earlier);
  CHECK(noted.exit_code == 0);
  CHECK(noted.err.find("note: --start-plan " + earlier +
                       ": its plan was tuned for model 'tiny', this job's is 'tiny-wide'") !=
        std::string::npos);
  // A pipeline schedule has a plan per chunk.
  const std::string staged = dir + "/pp.json";
  tune_json(kTinyJob + " --microbatches 2", staged);
  refused("--start-plan " + staged, "is a pipeline schedule");
}

TEST_CASE("tune rejects bad tuner flags with exit 2 naming the flag", "[cli][tune]") {
  const std::string dir = make_temp_dir("fsdptune-tune-bad");
  CommandResult result = run_fsdptune("tune --model tiny --threads 0 --out " + dir + "/s.json");
  CHECK(result.exit_code == 2);
  CHECK(result.err.find("--threads") != std::string::npos);
  // Found probing: --seed 2^64 ran as 2^64 - 1 (CLI11 saturates 64-bit options).
  result = run_fsdptune("tune --model tiny --seed 18446744073709551616 --out " + dir + "/s.json");
  CHECK(result.exit_code == 2);
  CHECK(result.err.find("--seed: 18446744073709551616 is out of range (a 64-bit unsigned "
                        "integer)") != std::string::npos);
  result = run_fsdptune("simulate --model tiny --gpus 99999999999999999999");
  CHECK(result.exit_code == 2);
  CHECK(result.err.find("--gpus: 99999999999999999999 is out of range") != std::string::npos);
  // Found probing: --threads 2147483647 exited 1 out of memory, 100000 built a lowerer each.
  result = run_fsdptune("tune --model tiny --threads 1025 --out " + dir + "/s.json");
  CHECK(result.exit_code == 2);
  CHECK(result.err.find("--threads: must be 1 to 1024, got 1025") != std::string::npos);
  result = run_fsdptune("tune --model tiny --time-budget nan --out " + dir + "/s.json");
  CHECK(result.exit_code == 2);
  CHECK(result.err.find("--time-budget") != std::string::npos);
  result = run_fsdptune("tune --model tiny --memory-limit lots --out " + dir + "/s.json");
  CHECK(result.exit_code == 2);
  CHECK(result.err.find("--memory-limit") != std::string::npos);
  result = run_fsdptune("tune --model tiny --step-tolerance 120% --out " + dir + "/s.json");
  CHECK(result.exit_code == 2);
  CHECK(result.err.find("--step-tolerance") != std::string::npos);
  result = run_fsdptune(
      "sweep --model tiny --gpus 2 --global-batch 4 --seq 128 "
      "--step-tolerance 1.5");
  CHECK(result.exit_code == 2);
  CHECK(result.err.find("--step-tolerance") != std::string::npos);
  result = run_fsdptune("tune --model tiny");
  CHECK(result.exit_code == 2);
  CHECK(result.err.find("--out") != std::string::npos);
  // Found probing the CLI: --seed -1 wrapped to 2^64 - 1, and an empty value (an unset
  // shell variable) was read as the option left out: the default limit, no trace.
  for (const std::string& flags : {std::string("--seed -1"), std::string("--memory-limit ''"),
                                   std::string("--trace ''"), std::string("--profile \"\"")}) {
    result = run_fsdptune("tune --model tiny " + flags + " --out " + dir + "/s.json");
    CHECK(result.exit_code == 2);
    CHECK(result.err.find(flags.substr(0, flags.find(' '))) != std::string::npos);
  }
  // "-0" is zero: the seed 0's schedule (it was refused as negative).
  for (const std::string seed : {"0", "-0"}) {
    result = run_fsdptune("tune --model tiny --gpus 2 --max-evaluations 5 --seed " + seed +
                          " --out " + dir + "/seed" + seed + ".json");
    CHECK(result.exit_code == 0);
  }
  CHECK(slurp(dir + "/seed-0.json") == slurp(dir + "/seed0.json"));
  // An unknown dtype lists what a job takes (it listed fp8, then refused it).
  result = run_fsdptune("simulate --model tiny --hardware h100-sxm --reduce-dtype int8");
  CHECK(result.exit_code == 2);
  CHECK_THAT(result.err, Catch::Contains("--reduce-dtype: unknown dtype 'int8' (expected bf16, "
                                         "fp16 or fp32)"));
  result = run_fsdptune("simulate --model tiny --hardware ''");
  CHECK(result.exit_code == 2);
  CHECK(result.err.find("--hardware: an empty value") != std::string::npos);
  // Two outputs of one file (found probing the CLI: the export replaced the schedule).
  result = run_fsdptune("tune --model tiny --out " + dir + "/s.json --emit-torchtitan " + dir +
                        "/./s.json");
  CHECK(result.exit_code == 2);
  CHECK(result.err.find("is the file of --out too") != std::string::npos);
  result = run_fsdptune("sweep --model tiny --gpus 2 --global-batch 4 --seq 128 --out " + dir +
                        "/s.json --emit-torchtitan-toml " + dir + "/s.json");
  CHECK(result.exit_code == 2);
  CHECK(result.err.find("--emit-torchtitan-toml") != std::string::npos);
  CHECK_FALSE(std::ifstream(dir + "/s.json").good());  // nothing written
  // An output over a --hardware or --model file (found probing: tune replaced the hardware
  // spec with the schedule, exit 0). A built-in name is no file: nothing to overwrite.
  const std::string spec = dir + "/spec.json";
  const std::string model = dir + "/model.json";
  fsdptune::write_file_atomically(spec, fsdptune::read_text_file(std::string(FSDPTUNE_SOURCE_DIR) +
                                                                 "/tests/fuzz/corpus/hardware/"
                                                                 "h100-sxm.json"));
  fsdptune::write_file_atomically(
      model, fsdptune::read_text_file(std::string(FSDPTUNE_SOURCE_DIR) + "/models/tiny.json"));
  const std::string spec_text = fsdptune::read_text_file(spec);
  const std::string model_text = fsdptune::read_text_file(model);
  for (const std::string& command :
       {"tune --model tiny --hardware " + spec + " --out " + spec,
        "tune --model " + model + " --out " + model,
        "simulate --model tiny --hardware " + spec + " --trace " + spec,
        "sweep --model " + model + " --gpus 2 --global-batch 4 --seq 128 --out " + model,
        "sweep --model tiny --hardware " + spec + " --gpus 2 --global-batch 4 --seq 128 --out " +
            spec}) {
    INFO(command);
    result = run_fsdptune(command);
    CHECK(result.exit_code == 2);
    CHECK_THAT(result.err, Catch::Contains("is the file of") &&
                               (Catch::Contains("--hardware") || Catch::Contains("--model")));
  }
  CHECK(fsdptune::read_text_file(spec) == spec_text);
  CHECK(fsdptune::read_text_file(model) == model_text);
  // A limit above the GPU's memory is taken, with a note (found probing: 100 GiB on an
  // h100-sxm judged plans of 79.6 GiB reserved to fit, silently).
  result = run_fsdptune("simulate --model tiny --hardware h100-sxm --memory-limit 100GiB");
  CHECK(result.exit_code == 0);
  CHECK_THAT(result.err, Catch::Contains("--memory-limit 100 GiB is above the h100-sxm GPU's"));
  CHECK(run_fsdptune("simulate --model tiny --hardware h100-sxm --memory-limit 60GiB").err.empty());
  // tune says so too (found probing: it read the flag without the note).
  result = run_fsdptune(
      "tune --model tiny --hardware h100-sxm --memory-limit 100GiB "
      "--max-evaluations 5 --out " +
      dir + "/over.json");
  CHECK(result.exit_code == 0);
  CHECK_THAT(result.err, Catch::Contains("--memory-limit 100 GiB is above the h100-sxm GPU's"));
  // float8 where the GPU has no fp8 tensor cores (found probing: an A100 job ran with the
  // casts charged and the GEMMs at the bf16 rate).
  for (const std::string& command : std::vector<std::string>{
           "simulate --model tiny --hardware a100-80g --float8",
           "tune --model tiny --hardware a100-80g --float8 --out " + dir + "/fp8.json",
           "pipeline --model tiny --hardware a100-80g --float8 --pp 2 --microbatches 2"}) {
    INFO(command);
    result = run_fsdptune(command);
    CHECK(result.exit_code == 2);
    CHECK_THAT(result.err, Catch::Contains("--float8: a100-80g has no fp8 tensor cores"));
  }
  CHECK_FALSE(std::filesystem::exists(dir + "/fp8.json"));
}

TEST_CASE("tune --pp says when fsdp2 per stage does not fit rather than a speed-up below 1",
          "[cli][tune]") {
  // Found probing: "tuned vs fsdp2 per stage: 0.86x faster" of a tuned plan slower than an
  // fsdp2 that does not fit.
  const std::string dir = make_temp_dir("fsdptune-tune-pp-fit");
  const CommandResult result = run_fsdptune(
      "tune --model llama3-8b --gpus 16 --pp 2 --microbatches 4 --hardware h100-sxm "
      "--memory-limit 46GiB --max-evaluations 10 --out " +
      dir + "/s.json");
  REQUIRE(result.exit_code == 0);
  CHECK_THAT(result.out, Catch::Contains("tuned vs fsdp2 per stage: fsdp2 does not fit (") &&
                             !Catch::Contains("x faster"));
}

TEST_CASE("tune and sweep --keep-gathered restrict what a microbatch keeps", "[cli][tune]") {
  const std::string dir = make_temp_dir("fsdptune-tune-keep");
  const std::string job =
      "--model tiny --gpus 2 --gpus-per-node 2 --seq 128 --microbatches 4 "
      "--max-evaluations 20 --time-budget 0";
  const auto chunks_kept = [&](const std::string& choice) {
    const std::string out = dir + "/" + choice + ".json";
    const CommandResult result =
        run_fsdptune("tune " + job + " --keep-gathered " + choice + " --out " + out);
    INFO(result.err);
    REQUIRE(result.exit_code == 0);
    // A schedule torchtitan does not run as it is says so, config or not (found
    // 2026-12-06: said only with --emit-torchtitan-toml).
    CHECK((result.err.find("note: " + out + ": 1 of 1 chunks keep their parameters gathered") !=
           std::string::npos) == (choice == "any"));
    const nlohmann::json schedule = nlohmann::json::parse(slurp(out));
    // The provenance says what was searched (any is the default, left out).
    CHECK((schedule.at("provenance")
               .at("command")
               .get<std::string>()
               .find("--keep-gathered " + choice) != std::string::npos) == (choice != "any"));
    std::vector<bool> kept;
    for (const auto& chunk : schedule.at("pipeline").at("chunks")) {
      kept.push_back(chunk.at("keep_gathered").get<bool>());
    }
    return kept;
  };
  // Free, the tuner keeps tiny's one chunk gathered; torchtitan's loop re-gathers.
  CHECK(chunks_kept("any") == std::vector<bool>{true});
  // Its chunk table's peak is the chunk alone, said under it (found by QA).
  const CommandResult table = run_fsdptune("tune " + job + " --out " + dir + "/table.json");
  CHECK_THAT(table.out, Catch::Contains("gathered   peak alone\n") &&
                            Catch::Contains("; peak alone = the chunk's one-microbatch Program"));
  // Its backward buckets are those that gather anything (found by QA: every one counted).
  const nlohmann::json table_chunk =
      nlohmann::json::parse(slurp(dir + "/table.json")).at("pipeline").at("chunks").at(0);
  const fsdptune::Plan chunk_plan = fsdptune::plan_from_json(table_chunk.at("plan"), "table.json");
  CHECK_THAT(table.out,
             Catch::Contains(fmt::format(" {}/{}/{} ", chunk_plan.forward_buckets.size(),
                                         fsdptune::gathering_backward_buckets(chunk_plan),
                                         chunk_plan.reduce_scatter_buckets.size())) &&
                 Catch::Contains("buckets = forward all-gather / backward all-gather (those "
                                 "that gather) / reduce-scatter"));
  CHECK(chunks_kept("no") == std::vector<bool>{false});
  CHECK(chunks_kept("torchtitan") == std::vector<bool>{false});
  // Written as a torchtitan config, a schedule torchtitan does not run as it is says so.
  for (const std::string choice : {"any", "torchtitan"}) {
    const CommandResult emitted =
        run_fsdptune("tune " + job + " --keep-gathered " + choice + " --out " + dir +
                     "/e.json --emit-torchtitan-toml " + dir + "/e.toml");
    REQUIRE(emitted.exit_code == 0);
    CHECK((emitted.err.find("e.toml: 1 of 1 chunks keep their parameters gathered") !=
           std::string::npos) == (choice == "any"));
  }
  CommandResult result =
      run_fsdptune("tune " + job + " --keep-gathered sometimes --out " + dir + "/bad.json");
  CHECK(result.exit_code == 2);
  CHECK(result.err.find("--keep-gathered: unknown value 'sometimes'") != std::string::npos);
  result = run_fsdptune("tune --model tiny --gpus 2 --seq 128 --keep-gathered yes --out " + dir +
                        "/bad.json");
  CHECK(result.exit_code == 2);
  CHECK(result.err.find("applies to a pipelined job") != std::string::npos);
  CHECK_FALSE(std::ifstream(dir + "/bad.json").good());
  // The sweep passes it to every pipelined configuration's search: here every one is
  // gradient accumulation on one stage (16 sequences per rank, at most 8 in a microbatch),
  // and the winner re-gathers as torchtitan runs it.
  const std::string sweep_job =
      "sweep --model tiny --hardware h100-sxm --gpus 2 --gpus-per-node 2 --global-batch 32 "
      "--seq 128 --max-pp 1 --no-float8 --threads 1 --tune-evaluations 20";
  const std::string sweep = sweep_job + " --emit-torchtitan-toml " + dir + "/best.toml";
  result = run_fsdptune(sweep + " --keep-gathered torchtitan --out " + dir + "/best.json");
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  CHECK(result.err.find("note: ") == std::string::npos);
  // Free to choose, its winner keeps gathered: the config's note says what it needs.
  const CommandResult free = run_fsdptune(sweep);
  REQUIRE(free.exit_code == 0);
  CHECK(free.err.find("best.toml: 1 of 1 chunks keep their parameters gathered") !=
        std::string::npos);
  // Its schedule alone says it too.
  const CommandResult schedule_only = run_fsdptune(sweep_job + " --out " + dir + "/only.json");
  REQUIRE(schedule_only.exit_code == 0);
  CHECK(schedule_only.err.find("note: " + dir +
                               "/only.json: 1 of 1 chunks keep their "
                               "parameters gathered") != std::string::npos);
  const nlohmann::json best = nlohmann::json::parse(slurp(dir + "/best.json"));
  REQUIRE(best.contains("pipeline"));
  for (const auto& chunk : best.at("pipeline").at("chunks")) CHECK_FALSE(chunk.at("keep_gathered"));
  CHECK(best.at("provenance").at("command").get<std::string>().find("--keep-gathered torchtitan") !=
        std::string::npos);
}

namespace {

// tiny on 8 GPUs as `simulate` takes it (the flags of kTinyJob without the tuner's).
const std::string kTinySimulate =
    "simulate --model tiny --hardware h100-sxm --gpus 8 --batch 2 --seq 1024";

nlohmann::json without_thread_count(nlohmann::json schedule) {
  // The provenance records --threads (in `threads` and in `command`); nothing else in the
  // file depends on it.
  schedule["provenance"].erase("threads");
  schedule["provenance"].erase("command");
  return schedule;
}

}  // namespace

TEST_CASE("simulate --plan schedule.json re-simulates the stored program exactly",
          "[cli][tune][simulate]") {
  const std::string dir = make_temp_dir("fsdptune-tune-resim");
  const std::string out = dir + "/schedule.json";
  REQUIRE(run_fsdptune("tune " + kTinyJob + " --memory-limit 20GiB --out " + out).exit_code == 0);
  const fsdptune::ScheduleFile schedule =
      fsdptune::schedule_from_json(fsdptune::read_json_file(out), out);

  const CommandResult result = run_fsdptune(kTinySimulate + " --json --plan " + out);
  INFO("stderr: " << result.err);
  REQUIRE(result.exit_code == 0);
  const nlohmann::json json = nlohmann::json::parse(result.out);
  CHECK(json.at("format") == "fsdptune-simulation");
  CHECK(fsdptune::testing::readme_lists_format(json));
  // Exactly: the stored Program with its frozen costs, simulated again.
  CHECK(json.at("step_time_s").get<double>() == schedule.predicted.step_time_s);
  CHECK(json.at("peak_allocated_bytes").get<std::int64_t>() ==
        schedule.predicted.peak_allocated_bytes);
  CHECK(json.at("peak_reserved_bytes").get<std::int64_t>() ==
        schedule.predicted.peak_reserved_bytes);
  CHECK(json.at("exposed_comm_s").get<double>() == schedule.predicted.exposed_comm_s);
  CHECK(json.at("task_count").get<std::size_t>() == schedule.program.tasks.size());
  CHECK(json.at("plan").at("name") == "tuned");
  // Judged against the limit it was tuned for (no --memory-limit given).
  CHECK(json.at("memory_limit_bytes").get<std::int64_t>() == 20LL << 30);
  CHECK(json.at("fits").get<bool>() == schedule.predicted.fits);

  // The stored Program, not a new lowering of the plan: scale every task's duration by 2
  // in the file and it simulates to twice the step (all durations scale, so every event
  // does), which the reader holds to the stated prediction (since 2026-12-05; before, the
  // doubled step was printed). A new lowering would have given the stated step.
  nlohmann::json edited = fsdptune::read_json_file(out);
  for (nlohmann::json& task : edited.at("program").at("tasks")) {
    task["duration_s"] = 2 * task.at("duration_s").get<double>();
  }
  const std::string doubled = dir + "/doubled.json";
  fsdptune::write_file_atomically(doubled, fsdptune::dump_json(edited));
  const CommandResult slower = run_fsdptune(kTinySimulate + " --json --plan " + doubled);
  CHECK(slower.exit_code == 2);
  CHECK(slower.err.find(fmt::format("predicted.step_time_s: is {} s, but the schedule's program "
                                    "simulates to {} s",
                                    schedule.predicted.step_time_s,
                                    2 * schedule.predicted.step_time_s)) != std::string::npos);
}

TEST_CASE("simulate --plan rejects a schedule of another model, job, hardware or version",
          "[cli][tune][simulate]") {
  const std::string dir = make_temp_dir("fsdptune-tune-reject");
  const std::string out = dir + "/schedule.json";
  REQUIRE(run_fsdptune("tune " + kTinyJob + " --out " + out).exit_code == 0);

  // Another model (same job flags): the field named is the schedule's model.
  CommandResult result = run_fsdptune(
      "simulate --model llama3.2-1b --hardware h100-sxm --gpus 8 --batch 2 --seq 1024 --plan " +
      out);
  CHECK(result.exit_code == 2);
  CHECK(result.err.find(out + ": model") != std::string::npos);
  // Another job: dp_shard 16 instead of 8.
  result = run_fsdptune(
      "simulate --model tiny --hardware h100-sxm --gpus 16 --batch 2 --seq 1024 --plan " + out);
  CHECK(result.exit_code == 2);
  CHECK(result.err.find(out + ": job") != std::string::npos);
  CHECK(result.err.find("dp_shard") != std::string::npos);
  // Another hardware: the Program's costs were frozen for the H100.
  result = run_fsdptune(
      "simulate --model tiny --hardware a100-80g --gpus 8 --batch 2 --seq 1024 --plan " + out);
  CHECK(result.exit_code == 2);
  CHECK(result.err.find(out + ": hardware") != std::string::npos);
  // Another format version.
  nlohmann::json edited = fsdptune::read_json_file(out);
  edited["version"] = 99;
  const std::string future = dir + "/future.json";
  fsdptune::write_file_atomically(future, fsdptune::dump_json(edited));
  result = run_fsdptune(kTinySimulate + " --plan " + future);
  CHECK(result.exit_code == 2);
  CHECK(result.err.find(future + ": version") != std::string::npos);
  CHECK(result.err.find("99") != std::string::npos);
  // Its own job edited after tuning (the stored Program is the old job's): alone, with no
  // flags to compare, simulate --plan read it; provenance.job_hash refuses it.
  edited = fsdptune::read_json_file(out);
  REQUIRE(edited.at("provenance").contains("job_hash"));
  edited["job"]["seq_len"] = 2048;
  const std::string longer = dir + "/longer.json";
  fsdptune::write_file_atomically(longer, fsdptune::dump_json(edited));
  result = run_fsdptune("simulate --plan " + longer);
  CHECK(result.exit_code == 2);
  CHECK(result.err.find(longer + ": job: differs from the job the schedule was tuned for") !=
        std::string::npos);
}

TEST_CASE("a search that converges gives the same bytes for the same seed, any thread count",
          "[cli][tune]") {
  // No --max-evaluations: the search stops on its own (stall) long before the 60 s budget,
  // so the result is a function of the seed alone.
  const std::string dir = make_temp_dir("fsdptune-tune-converge");
  const std::string job =
      "tune --model tiny --gpus 8 --batch 2 --seq 1024 --time-budget 60 --seed 3 --json";
  std::vector<std::string> files;
  std::vector<std::string> hashes;
  for (const std::string threads : {"1", "1", "2", "2"}) {
    const std::string out = dir + "/schedule-" + std::to_string(files.size()) + ".json";
    const CommandResult result = run_fsdptune(job + " --threads " + threads + " --out " + out);
    INFO("stderr: " << result.err);
    REQUIRE(result.exit_code == 0);
    CHECK_FALSE(nlohmann::json::parse(result.out).at("budget_exhausted").get<bool>());
    CHECK_FALSE(nlohmann::json::parse(result.out).at("max_evaluations_reached").get<bool>());
    hashes.push_back(nlohmann::json::parse(result.out).at("schedule_hash").get<std::string>());
    files.push_back(slurp(out));
    REQUIRE_FALSE(files.back().empty());
  }
  CHECK(files[1] == files[0]);  // byte-identical, 1 thread
  CHECK(files[3] == files[2]);  // byte-identical, 2 threads
  // Across thread counts only the provenance's record of --threads differs.
  CHECK(without_thread_count(nlohmann::json::parse(files[2])) ==
        without_thread_count(nlohmann::json::parse(files[0])));
  CHECK(files[2] != files[0]);
  // ... and that record is not part of the schedule's hash, so a measurement of one is a
  // measurement of the other (found probing: --threads gave another schedule_hash).
  CHECK(hashes[2] == hashes[0]);
}

// Found by QA: a limit nobody gave (the hardware's default) was named as the flag, as if
// the user had given it.
TEST_CASE("nothing fits: the error says when --memory-limit was not given", "[cli][tune]") {
  const std::string dir = make_temp_dir("fsdptune-default-limit");
  const std::string job = " --model llama3-70b --gpus 8 --hardware h100-sxm";
  for (const std::string& command : {"tune" + job + " --max-evaluations 5 --out " + dir + "/s.json",
                                     "simulate" + job + " --require-fit",
                                     "pipeline" + job + " --pp 2 --microbatches 2 --require-fit"}) {
    INFO(command);
    const CommandResult defaulted = run_fsdptune(command);
    CHECK(defaulted.exit_code == 3);
    CHECK_THAT(defaulted.err, Catch::Contains("fsdptune: error: --memory-limit (not given): "));
    const CommandResult given = run_fsdptune(command + " --memory-limit 70GiB");
    CHECK(given.exit_code == 3);
    CHECK_THAT(given.err, Catch::Contains("fsdptune: error: --memory-limit: "));
  }
  CHECK_FALSE(std::filesystem::exists(dir + "/s.json"));
}

TEST_CASE("tune's error follows its table where stdout and stderr are one file", "[cli][tune]") {
  // Found by QA: under `> log 2>&1` the exit-3 error came before the table (stdout buffered).
  const std::string dir = make_temp_dir("fsdptune-tune-log");
  const auto result =
      fsdptune::testing::run_command(std::string("{ ") + FSDPTUNE_BINARY +
                                     " tune --model tiny --gpus 2 --gpus-per-node 2 --seq 128 "
                                     "--hardware h100-sxm --memory-limit 10MiB --out " +
                                     dir + "/s.json > " + dir + "/log.txt 2>&1; }");
  CHECK(result.exit_code == 3);
  const std::string log = fsdptune::read_text_file(dir + "/log.txt");
  const std::size_t table = log.find("fsdp2 ");
  const std::size_t error = log.find("fsdptune: error: --memory-limit");
  REQUIRE(table != std::string::npos);
  REQUIRE(error != std::string::npos);
  CHECK(table < error);
}

TEST_CASE("tune's error is said where the reader of its stdout is gone", "[cli][tune]") {
  // Found by review: stdout flushed before the error met the closed pipe, and SIGPIPE took
  // the message with it (`| true`).
  const auto result = fsdptune::testing::run_command(
      fmt::format("{{ {} tune --model tiny --gpus 2 --gpus-per-node 2 --seq 128 --hardware "
                  "h100-sxm --memory-limit 10MiB --out {}/s.json | true; }}",
                  FSDPTUNE_BINARY, make_temp_dir("fsdptune-tune-gone")));
  CHECK_THAT(result.err, Catch::Contains("fsdptune: error: --memory-limit: no plan fits"));
}

TEST_CASE("an output naming a closed descriptor says so", "[cli][tune]") {
  // Found by review: `--out /dev/stdout >&-` said "cannot create a file in /proc/self/fd".
  const auto result = fsdptune::testing::run_command(
      std::string(FSDPTUNE_BINARY) +
      " tune --model tiny --gpus 2 --gpus-per-node 2 --seq 128 --hardware h100-sxm "
      "--max-evaluations 5 --out /dev/stdout >&-");
  CHECK(result.exit_code == 2);
  CHECK_THAT(result.err, Catch::Contains("--out /dev/stdout: names descriptor 1 (standard "
                                         "output), which is not open"));
}

TEST_CASE("a pipelined step over the limit is offered re-gathering, and says so past a pipe",
          "[cli][pipeline]") {
  // Found by QA: parameters kept gathered across microbatches do not shrink with more GPUs,
  // and --keep-gathered no was never offered. Found by review: simulate and pipeline flushed
  // stdout into a closed pipe before the error, and SIGPIPE took it.
  const auto result = fsdptune::testing::run_command(
      fmt::format("{{ {} pipeline --model tiny --gpus 4 --pp 2 --microbatches 2 --hardware "
                  "h100-sxm --memory-limit 30MiB --seq 128 --require-fit | true; }}",
                  FSDPTUNE_BINARY));
  CHECK(result.exit_code == 0);  // true's
  CHECK_THAT(result.err,
             Catch::Contains("fsdptune: error: --memory-limit: stage 1 reserves") &&
                 Catch::Contains("or re-gather the parameters every microbatch (--keep-gathered "
                                 "no)"));
  const auto regathered = run_fsdptune(
      "pipeline --model tiny --gpus 4 --pp 2 --microbatches 2 --hardware h100-sxm "
      "--memory-limit 30MiB --seq 128 --require-fit --keep-gathered no");
  CHECK_THAT(regathered.err, !Catch::Contains("--keep-gathered no"));
}

TEST_CASE("an output naming a descriptor open for reading is refused", "[cli][tune]") {
  // Found by review: `--trace /dev/fd/0` wrote into the command's own input.
  const std::string dir = make_temp_dir("fsdptune-read-descriptor");
  std::ofstream(dir + "/in.txt") << "input\n";
  const auto result = fsdptune::testing::run_command(
      fmt::format("{} simulate --model tiny --hardware h100-sxm --seq 512 --trace /dev/fd/3 3< {}",
                  FSDPTUNE_BINARY, dir + "/in.txt"));
  CHECK(result.exit_code == 2);
  CHECK_THAT(result.err, Catch::Contains("--trace /dev/fd/3: names descriptor 3, open for "
                                         "reading only"));
  CHECK(fsdptune::read_text_file(dir + "/in.txt") == "input\n");
}

TEST_CASE("the GPUs a does-not-fit hint offers make the step fit", "[cli][simulate]") {
  // Found by review: the gathered parameters grow with the padding to the shard group, and
  // 405B on 16 GPUs was offered 1,224, still 1.2 GiB over.
  for (const std::string& job :
       {std::string("--model llama3-405b --gpus 16 --ac full"),
        std::string("--model llama3-405b --gpus 8 --gpus-per-node 4 --ac full --seq 1024"),
        std::string("--model llama3-70b --gpus 8 --ac full"),
        // Half the counts on nodes of 4 with 2 replicas straddle nodes (review, 2026-12-07:
        // the 64 counts tried ended short of 2,736, and no count was offered).
        std::string("--model llama3-405b --gpus 1400 --gpus-per-node 4 --dp-replicate 2 "
                    "--ac full")}) {
    const auto over = run_fsdptune("simulate --hardware h100-sxm --require-fit " + job);
    REQUIRE(over.exit_code == 3);
    const std::string marker = "shard over more GPUs (--gpus ";
    const std::size_t at = over.err.find(marker);
    REQUIRE(at != std::string::npos);
    const std::string gpus =
        over.err.substr(at + marker.size(), over.err.find(')', at) - at - marker.size());
    const std::string followed = job.substr(0, job.find("--gpus ")) + "--gpus " + gpus +
                                 job.substr(job.find(' ', job.find("--gpus ") + 7));
    INFO(followed);
    CHECK(run_fsdptune("simulate --hardware h100-sxm --require-fit " + followed).exit_code == 0);
  }
  // The next node, where it fits (found by QA, 2026-12-07: 405B on 1,360 GPUs, its rows
  // padded by 8% to the shard group, was offered 2,064; 1,368, padded by 0.2%, fits).
  const auto near = run_fsdptune(
      "simulate --hardware h100-sxm --require-fit --model llama3-405b --gpus 1360 --ac full");
  CHECK(near.exit_code == 3);
  CHECK_THAT(near.err, Catch::Contains("shard over more GPUs (--gpus 1368)"));
  // tune's offer, from its smallest peak's breakdown (review: untested), fits as tune judges;
  // under --fit any-timing it is said to be judged at the predicted timing (review: 405B on
  // 16 GPUs was offered 568, 3.6 GiB over at any timing).
  const std::string tune =
      "tune --hardware h100-sxm --max-evaluations 20 --model llama3-405b "
      "--ac selective --seq 1024 --out " +
      make_temp_dir("fsdptune-hint-tune") + "/s.json --gpus ";
  const auto over = run_fsdptune(tune + "256");
  CHECK(over.exit_code == 3);
  CHECK_THAT(over.err, Catch::Contains("shard over more GPUs (--gpus 472)"));
  CHECK(run_fsdptune(tune + "472").exit_code == 0);
  CHECK_THAT(run_fsdptune(tune + "256 --fit any-timing").err,
             Catch::Contains("(--gpus 472, judged at the predicted timing)"));
}

// Found by QA: an HSDP job that fits with fewer replicas on the same GPUs was offered only
// more GPUs (8B on 8 GPUs with 8 replicas: 16; one replica reserves 32 GiB).
TEST_CASE("a does-not-fit hint offers fewer HSDP replicas that fit on the same GPUs",
          "[cli][simulate]") {
  for (const std::string& job :
       {std::string("--model llama3-8b --gpus 8 --dp-replicate 8 --ac full"),
        std::string("--model llama3-8b --gpus 16 --dp-replicate 4"),
        // Down to one replica (found by mutation testing: never offered, untested).
        std::string(
            "--model llama3-8b --gpus 8 --dp-replicate 2 --ac full --memory-limit 40GiB")}) {
    const auto over = run_fsdptune("simulate --hardware h100-sxm --require-fit " + job);
    REQUIRE(over.exit_code == 3);
    const std::string marker = "with fewer replicas (--dp-replicate ";
    const std::size_t at = over.err.find(marker);
    INFO(over.err);
    REQUIRE(at != std::string::npos);
    const std::string replicas =
        over.err.substr(at + marker.size(), over.err.find(':', at) - at - marker.size());
    const std::size_t flag = job.find("--dp-replicate ");
    const std::string followed = job.substr(0, flag) + "--dp-replicate " + replicas +
                                 job.substr(std::min(job.size(), job.find(' ', flag + 15)));
    INFO(followed);
    CHECK(run_fsdptune("simulate --hardware h100-sxm --require-fit " + followed).exit_code == 0);
  }
  // More pipeline stages only where a deeper pipeline of these GPUs is a job (found by QA:
  // offered at pp 4 with 6 replicas on 24 GPUs, where pp 8 needs 48).
  const std::string untied =
      "pipeline --hardware h100-sxm --require-fit --memory-limit 10GiB --seq 512 "
      "--microbatches 4 --model " +
      std::string(FSDPTUNE_TEST_DATA) + "/models/llama3.2-1b-untied.json --gpus 24";
  const auto deepest = run_fsdptune(untied + " --pp 4 --dp-replicate 6");
  CHECK(deepest.exit_code == 3);
  CHECK_THAT(deepest.err, Catch::Contains("hint: keep the 24 GPUs with fewer replicas") &&
                              !Catch::Contains("more pipeline stages"));
  const auto deeper = run_fsdptune(untied + " --pp 2 --dp-replicate 6");
  CHECK(deeper.exit_code == 3);
  CHECK_THAT(deeper.err, Catch::Contains("more pipeline stages (--pp 4)"));
  // Without replicas, none offered.
  const auto plain =
      run_fsdptune("simulate --hardware h100-sxm --require-fit --model llama3-70b --gpus 8");
  CHECK(plain.exit_code == 3);
  CHECK_THAT(plain.err, !Catch::Contains("fewer replicas"));
}
