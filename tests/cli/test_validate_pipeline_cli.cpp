// End-to-end: fsdptune validate replays pipelined (version 2) schedules with the cpu
// backend under mpirun, and compare reads the measurement. Each run is the tiny model (4
// blocks, dim 256) at batch 1 x 128 tokens, 4 microbatches, a few steps: seconds.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "cli_support.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/measured.hpp"

using namespace fsdptune;
using namespace fsdptune::testing;

namespace {

std::string binary() { return FSDPTUNE_BINARY; }

// mpirun -np `ranks` validate --backend cpu --check-data `steps` (measured and warm-up
// steps), then compare --json; the measurement and the comparison.
std::pair<MeasuredResult, nlohmann::json> validate_pipeline(
    const std::string& schedule, int ranks, const std::string& steps = "--iters 2 --warmup 1") {
  const std::string measured_path = schedule + ".measured.json";
  const auto run = run_command(mpirun(ranks) + binary() + " validate " + schedule +
                               " --backend cpu --check-data " + steps + " --out " + measured_path);
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  CHECK_THAT(run.out, Catch::Contains("data checked") && Catch::Contains("pipeline: "));
  const MeasuredResult measured = measured_from_json(read_json_file(measured_path), measured_path);
  // One stage is gradient accumulation, not a pipeline schedule.
  CHECK((run.out.find("microbatches (gradient accumulation)") != std::string::npos) ==
        (measured.pp == 1));
  CHECK(measured.data_checked);
  CHECK(measured.world_size == ranks);
  CHECK(measured.timings.empty());  // no single Program
  REQUIRE(measured.pipeline.has_value());
  // An interleaved run's line names its virtual stages (found by QA: it read as 1F1B's).
  CHECK((run.out.find(" virtual stages)") != std::string::npos) ==
        (measured.pipeline->virtual_stages > 1));
  REQUIRE(static_cast<std::int64_t>(measured.pipeline->stages.size()) == measured.pp);
  REQUIRE(static_cast<int>(measured.ranks.size()) == ranks);
  for (const MeasuredStage& stage : measured.pipeline->stages) {
    CHECK(stage.busy_s > 0);
    CHECK(stage.pipeline_end_s <= stage.end_s);
    CHECK(stage.end_s <= measured.step_time_s);
    CHECK(stage.peak_allocated_bytes > 0);
  }
  // Every rank ran its stage's actions in the order the schedule predicts them, and every
  // task of its chunks at least once a step: a forward or backward compute task once per
  // microbatch of every pipeline step.
  const auto schedule_json = read_json_file(schedule);
  const auto& job = schedule_json.at("job");
  const std::int64_t step_microbatches =
      job.at("microbatches").get<std::int64_t>() * job.value("pipeline_steps", std::int64_t{1});
  const std::int64_t stage_size = ranks / measured.pp;
  for (int r = 0; r < ranks; ++r) {
    const RankMeasurement& view = measured.ranks[static_cast<std::size_t>(r)];
    const auto& predicted = schedule_json.at("pipeline")
                                .at("stages")[static_cast<std::size_t>(r / stage_size)]
                                .at("actions");
    REQUIRE(view.actions.size() == predicted.size());
    for (std::size_t a = 0; a < predicted.size(); ++a) {
      CHECK(view.actions[a].chunk == predicted[a].at("chunk"));
      CHECK(view.actions[a].microbatch == predicted[a].at("microbatch"));
      CHECK(view.actions[a].backward == predicted[a].at("backward"));
      CHECK(view.actions[a].start_s <= view.actions[a].end_s);
      if (a > 0) CHECK(view.actions[a - 1].end_s <= view.actions[a].start_s);
    }
    REQUIRE_FALSE(view.chunks.empty());
    for (const MeasuredChunk& chunk : view.chunks) {
      const auto& tasks = schedule_json.at("pipeline")
                              .at("chunks")[static_cast<std::size_t>(chunk.chunk)]
                              .at("program")
                              .at("tasks");
      REQUIRE(chunk.tasks.size() == tasks.size());
      for (std::size_t t = 0; t < tasks.size(); ++t) {
        INFO("rank " << r << " chunk " << chunk.chunk << " task " << t);
        CHECK(chunk.tasks[t].runs >= 1);
        const std::string kind = tasks[t].at("kind");
        if (kind == "forward" || kind == "backward") {
          CHECK(chunk.tasks[t].runs == step_microbatches);
        }
      }
    }
  }
  // Measured JSON round-trips.
  CHECK(measured_from_json(measured_to_json(measured), "again") == measured);
  const auto compared = run_fsdptune("compare " + schedule + " " + measured_path + " --json");
  INFO(compared.err);
  REQUIRE(compared.exit_code == 0);
  const auto comparison = parse_json_text(compared.out, "compare --json");
  const auto table = run_fsdptune("compare " + schedule + " " + measured_path);
  CHECK(table.exit_code == 0);
  CHECK_THAT(table.out, Catch::Contains("pipeline: ") && Catch::Contains("stage") &&
                            Catch::Contains("actions differing most") &&
                            Catch::Contains("tasks differing most"));
  CHECK(comparison.at("actions_differing_most").size() ==
        std::min<std::size_t>(
            10, measured.ranks.front().actions.size() * static_cast<std::size_t>(measured.pp)));
  CHECK_FALSE(comparison.at("tasks_differing_most").empty());
  // Every stage's measured peak within the most its actions can allocate at any timing
  // (the stage walk, docs/parallelism.md "Peak memory at any timing").
  for (const nlohmann::json& stage : comparison.at("stages")) {
    INFO("stage " << stage.at("rank"));
    CHECK(stage.at("peak_allocated_bytes").at("measured").get<double>() <=
          stage.at("any_timing_peak_allocated_bytes").get<double>());
  }
  CHECK_THAT(table.out,
             Catch::Contains("peak at any timing: stage 0 ") && !Catch::Contains("ABOVE"));
  return {measured, comparison};
}

}  // namespace

TEST_CASE("validate replays a 1F1B pipeline (pp 2, 4 microbatches) on 2 cpu ranks",
          "[cli][validate][pipeline]") {
  const std::string dir = make_temp_dir("fsdptune-validate-pp");
  const std::string schedule =
      tuned_tiny(dir, "pp2", "--gpus 2 --gpus-per-node 2 --pp 2 --microbatches 4");
  const auto [measured, comparison] = validate_pipeline(schedule, 2);
  CHECK(measured.pp == 2);
  CHECK(measured.pipeline->microbatches == 4);
  CHECK(measured.pipeline->schedule == "1f1b");
  // One microbatch's activation: 1 x 128 tokens x dim 256 in bf16.
  CHECK(measured.pipeline->message_bytes == 128 * 256 * 2);
  CHECK(comparison.at("version") == 7);
  CHECK(comparison.at("mesh").at("pp") == 2);
  CHECK(comparison.at("microbatches") == 4);
  REQUIRE(comparison.at("stages").size() == 2);
  const auto schedule_json = read_json_file(schedule);
  for (int r = 0; r < 2; ++r) {
    const auto& stage = comparison.at("stages")[static_cast<std::size_t>(r)];
    CHECK(stage.at("end_s").at("predicted").get<double>() ==
          schedule_json.at("pipeline")
              .at("stages")[static_cast<std::size_t>(r)]
              .at("end_s")
              .get<double>());
    CHECK(stage.at("end_s").at("measured").get<double>() ==
          measured.pipeline->stages[static_cast<std::size_t>(r)].end_s);
  }
  CHECK(comparison.at("step_time_s").at("predicted").get<double>() ==
        schedule_json.at("predicted").at("step_time_s").get<double>());
  CHECK(comparison.at("tasks_differing_most").at(0).contains("chunk"));
}

TEST_CASE("validate replays interleaved 1F1B (2 virtual stages) and gradient accumulation",
          "[cli][validate][pipeline]") {
  const std::string dir = make_temp_dir("fsdptune-validate-pp");
  const std::string interleaved =
      tuned_tiny(dir, "interleaved",
                 "--gpus 2 --gpus-per-node 2 --pp 2 --microbatches 4 --pp-schedule "
                 "interleaved-1f1b --virtual-stages 2");
  const auto [measured, comparison] = validate_pipeline(interleaved, 2);
  CHECK(measured.pipeline->virtual_stages == 2);
  CHECK(measured.pipeline->schedule == "interleaved-1f1b");
  const auto table = run_fsdptune("compare " + interleaved + " " + interleaved + ".measured.json");
  REQUIRE(table.exit_code == 0);
  CHECK_THAT(table.out, Catch::Contains("pipeline: 2 stages (interleaved-1f1b, 2 virtual "
                                        "stages), 4 microbatches"));
  // 3 microbatches on 2 stages: one round of 3, as PyTorch runs it (since 2026-12-06).
  const std::string round_of_3 =
      tuned_tiny(dir, "interleaved3",
                 "--gpus 2 --gpus-per-node 2 --pp 2 --microbatches 3 --pp-schedule "
                 "interleaved-1f1b --virtual-stages 2");
  const auto [measured3, comparison3] = validate_pipeline(round_of_3, 2, "--iters 1 --warmup 0");
  CHECK(measured3.pipeline->microbatches == 3);
  // pp 1: one stage, 4 microbatches of gradient accumulation on 2 shard ranks, no sends.
  const std::string accumulation =
      tuned_tiny(dir, "accumulation", "--gpus 2 --gpus-per-node 2 --microbatches 4");
  const auto [accumulated, accumulated_comparison] = validate_pipeline(accumulation, 2);
  CHECK(accumulated.pp == 1);
  CHECK(accumulated.dp_shard == 2);
  CHECK(accumulated_comparison.at("stages").size() == 1);
  // The same chunk with the other choice, so both replay: re-gathering every microbatch
  // (FSDP2's gradient accumulation, fsdp2's default without PP) gathers and
  // reduce-scatters 4 times, the fp32 gradient shards receive 4 copy-outs; kept gathered,
  // once, from unsharded gradients accumulated over the 4; --check-data holds each to it.
  auto edited = read_json_file(accumulation);
  const bool tuned_keep = edited.at("pipeline").at("chunks")[0].at("keep_gathered");
  edited.at("pipeline").at("chunks")[0]["keep_gathered"] = !tuned_keep;
  const std::string other = dir + "/other-keep.json";
  write_file_atomically(other, dump_json(edited));
  const auto [replayed, replayed_comparison] = validate_pipeline(other, 2, "--iters 1 --warmup 0");
  CHECK(replayed.pipeline->microbatches == 4);
}

TEST_CASE("validate replays pp 2 x dp_shard 2 on 4 cpu ranks", "[cli][validate][pipeline]") {
  const std::string dir = make_temp_dir("fsdptune-validate-pp");
  const std::string schedule =
      tuned_tiny(dir, "pp2dp2", "--gpus 4 --gpus-per-node 4 --pp 2 --microbatches 4");
  const auto [measured, comparison] = validate_pipeline(schedule, 4, "--iters 1 --warmup 0");
  CHECK(measured.pp == 2);
  CHECK(measured.dp_shard == 2);
  CHECK(comparison.at("stages").size() == 2);
  // Scaled down to 2 ranks: the stages' and the actions' times hold communication over
  // fewer ranks, said by compare and report (found by QA: the actions and report's stage
  // table were not marked).
  const auto [scaled, scaled_comparison] =
      validate_pipeline(schedule, 2, "--iters 1 --warmup 0 --scale-down");
  CHECK(scaled.shards_per_rank == 2);
  CHECK(scaled_comparison.at("communication_comparable") == false);
  const std::string measured_path = schedule + ".measured.json";
  const auto table = run_fsdptune("compare " + schedule + " " + measured_path);
  CHECK_THAT(table.out, Catch::Contains("the stages' busy and end times hold their "
                                        "communication too, which ran over fewer ranks (*)") &&
                            Catch::Contains("the actions hold their chunk's communication too"));
  const auto report = run_fsdptune("report " + schedule + " --measured " + measured_path);
  CHECK(report.exit_code == 0);
  CHECK_THAT(report.out, Catch::Contains("the stages' busy and end times hold their "
                                         "communication too, which ran over fewer ranks"));
}

TEST_CASE("validate of a pipeline: wrong world size, cuda without a GPU, a corrupted message",
          "[cli][validate][pipeline]") {
  const std::string dir = make_temp_dir("fsdptune-validate-pp");
  const std::string schedule =
      tuned_tiny(dir, "pp2", "--gpus 2 --gpus-per-node 2 --pp 2 --microbatches 4");
  const std::string measured_path = dir + "/measured.json";
  // Wrong world size: named by job.pp, with the product.
  auto run = run_command(mpirun(3) + binary() + " validate " + schedule +
                         " --backend cpu --iters 1 --warmup 0 --out " + measured_path);
  CHECK(run.exit_code == 2);
  CHECK_THAT(run.err, Catch::Contains("job.pp") &&
                          Catch::Contains("the schedule is for 2 ranks but 3 were started (pp 2 "
                                          "x dp_replicate 1 x dp_shard 1 x tp 1)"));
  // The cuda backend: replays it where two GPUs are visible, else stops every rank cleanly
  // (no GPU; or one GPU, which two ranks cannot share).
  run = run_command(mpirun(2) + binary() + " validate " + schedule +
                    " --backend cuda --iters 1 --warmup 0 --check-data --out " + measured_path);
  if (run.exit_code == 0) {
    const MeasuredResult measured =
        measured_from_json(read_json_file(measured_path), measured_path);
    CHECK(measured.data_checked);
    CHECK(measured.pipeline.has_value());
    std::filesystem::remove(measured_path);
  } else {
    CHECK(run.exit_code == 1);
    CHECK_THAT(run.err, Catch::Contains("no CUDA device") ||
                            Catch::Contains("built without CUDA") ||
                            Catch::Contains("needs its own GPU, but only 1 CUDA device visible"));
    CHECK_FALSE(std::filesystem::exists(measured_path));
    WARN("skipped: fewer than 2 GPUs (the cuda backend reported: " << run.err << ")");
  }
  // A received activation that is not the sender's: the last rank's first message is the
  // activation of chunk 0 microbatch 0 it receives.
  run = run_command(mpirun(2) + binary() + " validate " + schedule +
                    " --backend cpu --iters 1 --warmup 0 --check-data --debug-corrupt-message 0 "
                    "--out " +
                    measured_path);
  CHECK(run.exit_code == 1);
  CHECK_THAT(run.err, Catch::Contains("pipeline message activation of chunk 0 microbatch 0") &&
                          Catch::Contains("expected"));
  CHECK_FALSE(std::filesystem::exists(measured_path));
}

TEST_CASE("validate --check-data sizes the gradient pattern to 2 ranks x 33 bf16 microbatches",
          "[cli][validate][pipeline]") {
  // A chunk kept gathered accumulates 33 microbatches in bf16 before its reduce-scatter over
  // 2 ranks: 66 addends per element, so the gradients lie in [-3, 3] (256 / 66), and the
  // replay's bf16 sums are exact (with [-8, 8] this reported "expected 363, got 364").
  // 8 tokens per microbatch keep the 66 microbatch actions to seconds.
  const std::string dir = make_temp_dir("fsdptune-validate-pp");
  const auto tune = [&](int microbatches) {
    const std::string out = fmt::format("{}/m{}.json", dir, microbatches);
    const auto result = run_fsdptune(fmt::format(
        "tune --model tiny --gpus 2 --gpus-per-node 2 --microbatches {} --reduce-dtype bf16 "
        "--batch 1 --seq 8 --hardware h100-sxm --max-evaluations 20 --out {}",
        microbatches, out));
    INFO(result.err);
    REQUIRE(result.exit_code == 0);
    REQUIRE(read_json_file(out).at("pipeline").at("chunks")[0].at("keep_gathered") == true);
    return out;
  };
  const auto [measured, comparison] = validate_pipeline(tune(33), 2, "--iters 1 --warmup 0");
  CHECK(measured.pipeline->microbatches == 33);
  // 129 microbatches: 258 addends, more than bf16's 256 exact integers. Refused before the
  // replay, on every rank, with the flag and the reason.
  const std::string measured_path = dir + "/refused.json";
  const auto run =
      run_command(mpirun(2) + binary() + " validate " + tune(129) +
                  " --backend cpu --check-data --iters 1 --warmup 0 --out " + measured_path);
  CHECK(run.exit_code == 2);
  CHECK_THAT(run.err, Catch::Contains("--check-data") &&
                          Catch::Contains("sums 258 gradients per element (2 shard ranks x 1 "
                                          "replica x 129 microbatches)") &&
                          Catch::Contains("--reduce-dtype fp32"));
  CHECK_FALSE(std::filesystem::exists(measured_path));
}

TEST_CASE(
    "validate replays gradient accumulation over pipeline steps (pp 2 x dp_shard 2, 2 "
    "steps) on 4 cpu ranks",
    "[cli][validate][pipeline]") {
  // Each rank runs the 1F1B schedule of 2 microbatches twice, reduce-scattering in each
  // step, the optimizer after the second: --check-data holds the fp32 gradient shards to
  // both steps' sums (kept gathered: one reduce-scatter of 2 microbatches per step;
  // re-gathered: one per microbatch, 4).
  const std::string dir = make_temp_dir("fsdptune-validate-pp");
  const std::string steps = "--gpus 4 --gpus-per-node 4 --pp 2 --microbatches 2 --pipeline-steps 2";
  for (const std::string keep : {"yes", "no"}) {
    INFO("--keep-gathered " << keep);
    const std::string schedule =
        tuned_tiny(dir, "steps-" + keep, steps + " --keep-gathered " + keep);
    const auto schedule_json = read_json_file(schedule);
    CHECK(schedule_json.at("job").at("pipeline_steps") == 2);
    for (const auto& chunk : schedule_json.at("pipeline").at("chunks")) {
      CHECK(chunk.at("keep_gathered") == (keep == "yes"));
    }
    const auto [measured, comparison] = validate_pipeline(schedule, 4, "--iters 1 --warmup 0");
    CHECK(measured.pipeline->microbatches == 2);
    CHECK(measured.pipeline->pipeline_steps == 2);
    CHECK(comparison.at("pipeline_steps") == 2);
  }
}

TEST_CASE(
    "validate on the cpu backend reuses released blocks: its pool does not grow with the steps",
    "[cli][validate][pipeline]") {
  // Gradient accumulation on one stage allocates and frees activations every microbatch,
  // gathered parameters and unsharded gradients every step. Each block released is kept for
  // the next allocation of its size (as PyTorch's caching allocator keeps them), so 7 steps
  // hold what 1 step holds; freed instead, 7 steps would have made 7 times the blocks.
  const std::string dir = make_temp_dir("fsdptune-validate-pool");
  const std::string schedule =
      tuned_tiny(dir, "accumulation", "--gpus 2 --gpus-per-node 2 --microbatches 4");
  const auto pool_bytes = [&](const std::string& steps) {
    const std::string measured_path = dir + "/pool.json";
    const auto run = run_command(mpirun(2) + binary() + " validate " + schedule +
                                 " --backend cpu " + steps + " --out " + measured_path);
    INFO(run.out << run.err);
    REQUIRE(run.exit_code == 0);
    const MeasuredResult measured =
        measured_from_json(read_json_file(measured_path), measured_path);
    return std::stoll(measured.environment.at("block_pool_bytes"));
  };
  const long long one_step = pool_bytes("--iters 1 --warmup 0");
  const long long seven_steps = pool_bytes("--iters 5 --warmup 2");
  CHECK(one_step > 0);
  // Equal, but for a block the replay's timing happens to hold twice at once in one step.
  CHECK(seven_steps < 2 * one_step);
}

// An older fsdptune's version 2 schedule stores the figures of its own composition, above
// the bound of today's; report says so, and compare did not (found by QA: its stage 0 peak
// read +17.3% with no word, where today's composition predicts what was measured).
TEST_CASE("compare says a pipeline schedule's stored figures are an older composition's",
          "[cli][validate][pipeline]") {
  const std::string dir = make_temp_dir("fsdptune-compare-stale");
  const std::string schedule = dir + "/stale.json";
  std::filesystem::copy_file(
      std::string(FSDPTUNE_TEST_DATA) + "/schedules/tiny-interleaved-v2-even-split.json", schedule);
  const std::string measured = dir + "/measured.json";
  const auto run = run_command(mpirun(2) + binary() + " validate " + schedule +
                               " --backend cpu --iters 2 --warmup 1 --out " + measured);
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  const auto table = run_fsdptune("compare " + schedule + " " + measured);
  INFO(table.err);
  REQUIRE(table.exit_code == 0);
  CHECK_THAT(table.out, Catch::Contains("stage 0 stores a peak of 57.5 MiB allocated, above "
                                        "that bound: the schedule's figures are an older "
                                        "fsdptune's composition; fsdptune simulate --plan "
                                        "gives today's"));
  // Today's schedule: no such line.
  const std::string fresh = dir + "/fresh.json";
  const auto tuned = run_fsdptune(
      "tune --model tiny --gpus 2 --gpus-per-node 2 --pp 2 --microbatches 4 --seq 128 "
      "--hardware h100-sxm --time-budget 0 --max-evaluations 20 --threads 1 --out " +
      fresh);
  REQUIRE(tuned.exit_code == 0);
  const auto again = run_command(mpirun(2) + binary() + " validate " + fresh +
                                 " --backend cpu --iters 2 --warmup 1 --out " + measured);
  REQUIRE(again.exit_code == 0);
  const auto fresh_table = run_fsdptune("compare " + fresh + " " + measured);
  REQUIRE(fresh_table.exit_code == 0);
  CHECK_THAT(fresh_table.out,
             Catch::Contains("peak at any timing: stage 0") && !Catch::Contains("stores a peak"));
  std::filesystem::remove_all(dir);
}
