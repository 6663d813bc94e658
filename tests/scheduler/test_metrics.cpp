// step_metrics: tokens/s/GPU and MFU of a simulated step.
#include <catch2/catch.hpp>

#include "fsdptune/simulator.hpp"

using namespace fsdptune;

namespace {

// dim 8, 1 layer, 2 heads of 4, 1 kv head, ffn 16, vocab 32 (hand-counted in
// tests/core/test_workload.cpp).
Workload hand_workload(bool float8, std::int64_t tp = 1) {
  ModelSpec model;
  model.name = "hand";
  model.dim = 8;
  model.n_layers = 1;
  model.n_heads = 2;
  model.n_kv_heads = tp;
  model.head_dim = 4;
  model.ffn_dim = 16;
  model.vocab_size = 32;
  JobSpec job;
  job.gpus = 2;
  job.tp = tp;
  job.local_batch = 1;
  job.seq_len = 4;
  job.float8 = float8;
  return build_workload(model, normalize_job(model, job));
}

}  // namespace

TEST_CASE("step_metrics divides tokens and model FLOPs by the step time", "[metrics]") {
  const Workload workload = hand_workload(false);
  // Block: 5120 forward + 10240 backward; output GEMM 2*4*32*8 = 2048 forward, 4096
  // backward; embedding and memory-bound ops 0. Total 21504 FLOPs for 4 tokens.
  REQUIRE(workload.model_flops_per_step() == 21504);
  HardwareSpec hardware;
  hardware.peak_bf16_flops_per_s = 1e5;
  hardware.peak_fp8_flops_per_s = 2e5;
  SimResult result;
  result.step_time_s = 0.5;
  const StepMetrics metrics = step_metrics(workload, hardware, result);
  CHECK(metrics.step_time_s == 0.5);
  CHECK(metrics.tokens_per_s_per_gpu == Approx(8.0));  // 4 tokens / 0.5 s
  CHECK(metrics.mfu == Approx(21504 / (0.5 * 1e5)));   // 0.43008
}

TEST_CASE("step_metrics uses the fp8 peak for float8 jobs", "[metrics]") {
  const Workload workload = hand_workload(true);
  HardwareSpec hardware;
  hardware.peak_bf16_flops_per_s = 1e5;
  hardware.peak_fp8_flops_per_s = 2e5;
  SimResult result;
  result.step_time_s = 1.0;
  CHECK(step_metrics(workload, hardware, result).mfu == Approx(21504 / 2e5));
  hardware.peak_fp8_flops_per_s = 0;  // no fp8 units: fall back to bf16
  CHECK(step_metrics(workload, hardware, result).mfu == Approx(21504 / 1e5));
}

TEST_CASE("step_metrics of an empty result is zero, not a division by zero", "[metrics]") {
  const StepMetrics metrics = step_metrics(hand_workload(false), HardwareSpec{}, SimResult{});
  CHECK(metrics == StepMetrics{});
}

TEST_CASE("step_metrics shares a data-parallel rank's tokens among its TP group", "[metrics]") {
  // tp = 2: the two GPUs of the TP group work on the same 4 tokens; each does half the
  // model FLOPs (model_flops_per_step is per rank).
  const Workload workload = hand_workload(false, 2);
  HardwareSpec hardware;
  hardware.peak_bf16_flops_per_s = 1e5;
  SimResult result;
  result.step_time_s = 0.5;
  const StepMetrics metrics = step_metrics(workload, hardware, result);
  CHECK(metrics.tokens_per_s_per_gpu == Approx(4.0));  // 4 tokens / 0.5 s / 2 GPUs
  CHECK(metrics.mfu == Approx(workload.model_flops_per_step() / (0.5 * 1e5)));
}
