// Pipeline schedules, per-stage memory and the 405B layouts (docs/parallelism.md).
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <tuple>

#include "fsdptune/cost_model.hpp"
#include "fsdptune/error.hpp"
#include "fsdptune/hardware.hpp"
#include "fsdptune/job.hpp"
#include "fsdptune/model.hpp"
#include "fsdptune/pipeline.hpp"
#include "fsdptune/plans.hpp"
#include "fsdptune/program.hpp"
#include "fsdptune/simulator.hpp"
#include "fsdptune/workload.hpp"

using namespace fsdptune;

namespace {

PipelineSpec uniform_spec(int stages, int virtual_stages, int microbatches,
                          PipelineSchedule schedule, double forward_s, double backward_s) {
  PipelineSpec spec;
  spec.stages = stages;
  spec.virtual_stages = virtual_stages;
  spec.microbatches = microbatches;
  spec.schedule = schedule;
  ChunkTimes chunk;
  chunk.first_forward_s = chunk.forward_s = forward_s;
  chunk.backward_s = chunk.last_backward_s = backward_s;
  chunk.activation_bytes = 100;
  // A single-microbatch FSDP peak that holds exactly its one microbatch of activations.
  chunk.base_peak_allocated_bytes = chunk.base_peak_reserved_bytes = 100;
  spec.chunks.assign(static_cast<std::size_t>(stages * virtual_stages), chunk);
  return spec;
}

}  // namespace

TEST_CASE("1F1B bubble fraction is (P-1)/(M+P-1) with free sends", "[pipeline]") {
  for (int P : {2, 4, 8}) {
    for (int M : {1, 4, 8, 16}) {
      const PipelineResult result =
          simulate_pipeline(uniform_spec(P, 1, M, PipelineSchedule::k1F1B, 1.0, 2.0));
      // Every rank is busy M * (1 + 2) s; the pipeline lasts (M + P - 1) * 3 s.
      CHECK(result.step_time_s == Approx((M + P - 1) * 3.0));
      CHECK(result.bubble_fraction == Approx(static_cast<double>(P - 1) / (M + P - 1)));
      // GPipe has the same bubble (all forwards, then all backwards).
      const PipelineResult gpipe =
          simulate_pipeline(uniform_spec(P, 1, M, PipelineSchedule::kGPipe, 1.0, 2.0));
      CHECK(gpipe.bubble_fraction == Approx(static_cast<double>(P - 1) / (M + P - 1)));
    }
  }
}

TEST_CASE("1F1B: the first stage holds the most microbatches in flight", "[pipeline]") {
  const int P = 4, M = 8;
  const PipelineResult result =
      simulate_pipeline(uniform_spec(P, 1, M, PipelineSchedule::k1F1B, 1.0, 2.0));
  for (int r = 0; r < P; ++r) {
    // Rank r runs P - 1 - r warm-up forwards plus one before its first backward.
    CHECK(result.stages[r].max_in_flight == std::min(P - r, M));
    // 100 bytes per microbatch, nothing else in these chunks.
    CHECK(result.stages[r].peak_allocated_bytes == 100 * std::min(P - r, M));
    if (r > 0) {
      CHECK(result.stages[r].peak_allocated_bytes < result.stages[r - 1].peak_allocated_bytes);
    }
  }
  // GPipe holds all M on every stage.
  const PipelineResult gpipe =
      simulate_pipeline(uniform_spec(P, 1, M, PipelineSchedule::kGPipe, 1.0, 2.0));
  for (const StageResult& stage : gpipe.stages) CHECK(stage.max_in_flight == M);
}

TEST_CASE("every schedule runs every action once, in dependency order", "[pipeline]") {
  struct Case {
    int P, V, M;
    PipelineSchedule schedule;
  };
  for (const Case& c :
       {Case{4, 1, 8, PipelineSchedule::k1F1B}, Case{4, 1, 3, PipelineSchedule::k1F1B},
        Case{4, 1, 8, PipelineSchedule::kGPipe}, Case{4, 2, 8, PipelineSchedule::kInterleaved1F1B},
        Case{2, 3, 4, PipelineSchedule::kInterleaved1F1B}}) {
    PipelineSpec spec = uniform_spec(c.P, c.V, c.M, c.schedule, 1.0, 2.0);
    spec.send_s = 0.25;
    const PipelineResult result = simulate_pipeline(spec);
    std::set<std::tuple<int, int, bool>> seen;
    std::map<std::tuple<int, int, bool>, PipelineAction> by_key;
    for (const StageResult& stage : result.stages) {
      double previous_end = 0;
      for (const PipelineAction& action : stage.actions) {
        CHECK(action.chunk % c.P == stage.rank);
        CHECK(action.start_s >= previous_end - 1e-12);  // one action at a time per rank
        previous_end = action.end_s;
        CHECK(seen.insert({action.chunk, action.microbatch, action.backward}).second);
        by_key[{action.chunk, action.microbatch, action.backward}] = action;
      }
    }
    CHECK(seen.size() == static_cast<std::size_t>(2 * c.P * c.V * c.M));
    for (const auto& [key, action] : by_key) {
      const auto [chunk, m, backward] = key;
      if (!backward && chunk > 0) {
        CHECK(action.start_s >= by_key[{chunk - 1, m, false}].end_s + 0.25 - 1e-12);
      }
      if (backward) {
        CHECK(action.start_s >= by_key[{chunk, m, false}].end_s - 1e-12);
        if (chunk + 1 < c.P * c.V) {
          CHECK(action.start_s >= by_key[{chunk + 1, m, true}].end_s + 0.25 - 1e-12);
        }
      }
    }
  }
}

TEST_CASE("interleaving shrinks the bubble", "[pipeline]") {
  // Same work per rank: V = 2 chunks of half the time each.
  const PipelineResult plain =
      simulate_pipeline(uniform_spec(4, 1, 8, PipelineSchedule::k1F1B, 1.0, 2.0));
  const PipelineResult interleaved =
      simulate_pipeline(uniform_spec(4, 2, 8, PipelineSchedule::kInterleaved1F1B, 0.5, 1.0));
  CHECK(interleaved.bubble_fraction < plain.bubble_fraction);
  CHECK(interleaved.step_time_s < plain.step_time_s);
}

TEST_CASE("pipeline flags are validated", "[pipeline]") {
  JobSpec job;
  job.pp = 4;
  job.microbatches = 6;
  job.pp_schedule = PipelineSchedule::kInterleaved1F1B;
  job.virtual_stages = 2;
  CHECK_THROWS_AS(validate_pipeline(job), Error);  // 6 % 4 != 0
  job.microbatches = 8;
  CHECK_NOTHROW(validate_pipeline(job));
  job.pp_schedule = PipelineSchedule::k1F1B;
  CHECK_THROWS_AS(validate_pipeline(job), Error);  // virtual stages without interleaving
}

TEST_CASE("chunks: contiguous layers, embedding first, output last", "[pipeline]") {
  const ModelSpec model = builtin_model("tiny");  // 4 layers: units 0..5
  JobSpec job;
  job.gpus = 8;
  job.pp = 2;
  job.seq_len = 64;
  const Workload workload = build_workload(model, normalize_job(model, job));
  const auto chunks = pipeline_chunks(workload);
  REQUIRE(chunks.size() == 2);
  CHECK(chunks[0] == std::vector<int>{0, 1, 2});
  CHECK(chunks[1] == std::vector<int>{3, 4, 5});
  const Workload first = chunk_workload(workload, chunks[0]);
  CHECK(first.units.size() == 3);
  CHECK(first.units[2].index == 2);
  CHECK(first.units[2].name == "layers.1");
}

TEST_CASE("the 405B layouts simulate: FSDP 8 x TP 8 x PP 8 and FSDP 128 x TP 8",
          "[pipeline][models]") {
  const ModelSpec model = builtin_model("llama3-405b");
  const auto costs = make_analytic_cost_model(builtin_hardware("h100-sxm"));
  const ChunkPlanner planner = [](const Workload& chunk) { return fsdp2_plan(chunk); };
  struct Layout {
    std::int64_t gpus, pp, microbatches, virtual_stages;
    PipelineSchedule schedule;
  };
  for (const Layout& layout : {Layout{512, 8, 16, 1, PipelineSchedule::k1F1B},
                               Layout{512, 8, 16, 2, PipelineSchedule::kInterleaved1F1B},
                               Layout{1024, 1, 1, 1, PipelineSchedule::k1F1B}}) {
    JobSpec job;
    job.gpus = layout.gpus;
    job.tp = 8;
    job.pp = layout.pp;
    job.microbatches = layout.microbatches;
    job.virtual_stages = layout.virtual_stages;
    job.pp_schedule = layout.schedule;
    job.seq_len = 8192;
    job.ac = ActivationCheckpointing::kFull;
    job = normalize_job(model, job);
    validate_pipeline(job);
    CHECK(job.dp_shard == layout.gpus / (8 * layout.pp));
    const Workload workload = build_workload(model, job);
    const PipelineSimulation sim = simulate_pipelined_job(workload, *costs, planner);
    INFO("gpus " << layout.gpus << " pp " << layout.pp << " v " << layout.virtual_stages);
    CHECK(sim.result.stages.size() == static_cast<std::size_t>(layout.pp));
    CHECK(sim.result.step_time_s > 0);
    CHECK(sim.tokens_per_s_per_gpu > 0);
    CHECK(sim.mfu > 0.05);
    CHECK(sim.mfu < 1.0);
    for (const StageResult& stage : sim.result.stages) {
      CHECK(stage.peak_allocated_bytes > 0);
      CHECK(stage.peak_allocated_bytes < 80LL * (1LL << 30));  // fits an H100 with full AC
    }
    if (layout.pp > 1 && layout.schedule == PipelineSchedule::k1F1B) {
      // P = 8, M = 16: at least the ideal (P-1)/(M+P-1) = 7/23 is idle (stages differ).
      CHECK(sim.result.bubble_fraction >= 7.0 / 23.0 - 0.02);
      CHECK(sim.result.stages[0].max_in_flight == 8);
      CHECK(sim.result.stages[7].max_in_flight == 1);
    }
  }
}

TEST_CASE("one stage, one microbatch is the plain FSDP simulation", "[pipeline]") {
  const ModelSpec model = builtin_model("tiny");
  JobSpec job;
  job.gpus = 8;
  job.seq_len = 128;
  const Workload workload = build_workload(model, normalize_job(model, job));
  const auto costs = make_analytic_cost_model(builtin_hardware("h100-sxm"));
  const PipelineSimulation sim = simulate_pipelined_job(
      workload, *costs, [](const Workload& chunk) { return fsdp2_plan(chunk); });
  const SimResult plain = simulate(lower(workload, fsdp2_plan(workload), *costs));
  CHECK(sim.result.step_time_s == Approx(plain.step_time_s).epsilon(1e-12));
  CHECK(sim.result.stages[0].peak_allocated_bytes == plain.peak_allocated_bytes);
  CHECK(sim.result.bubble_fraction == Approx(0.0).margin(1e-12));
  // More microbatches through one stage: M times the tokens, less than M times the time
  // (the all-gathers and reduce-scatters are paid once).
  JobSpec accumulating = workload.job;
  accumulating.microbatches = 4;
  const Workload four = build_workload(model, accumulating);
  const PipelineSimulation sim4 =
      simulate_pipelined_job(four, *costs, [](const Workload& chunk) { return fsdp2_plan(chunk); });
  CHECK(sim4.result.step_time_s < 4 * sim.result.step_time_s);
  CHECK(sim4.tokens_per_s_per_gpu > sim.tokens_per_s_per_gpu);
}
