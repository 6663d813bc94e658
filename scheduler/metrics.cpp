#include "fsdptune/simulator.hpp"

namespace fsdptune {

StepMetrics step_metrics(const Workload& workload, const HardwareSpec& hardware,
                         const SimResult& result) {
  StepMetrics metrics;
  metrics.step_time_s = result.step_time_s;
  if (result.step_time_s <= 0) return metrics;
  // tokens_per_step counts the tokens of one data-parallel rank; the tp * pp GPUs of its
  // model-parallel group share them (torchtitan divides by non_data_parallel_size too).
  const double gpus_per_replica = static_cast<double>(workload.job.tp * workload.job.pp);
  metrics.tokens_per_s_per_gpu =
      static_cast<double>(workload.tokens_per_step()) / (result.step_time_s * gpus_per_replica);
  // MFU: model FLOPs of the step (no recompute, as torchtitan counts them) over what the
  // dense peak of the compute dtype would do in the same time.
  const double peak = workload.job.float8 && hardware.peak_fp8_flops_per_s > 0
                          ? hardware.peak_fp8_flops_per_s
                          : hardware.peak_bf16_flops_per_s;
  if (peak > 0) metrics.mfu = workload.model_flops_per_step() / (result.step_time_s * peak);
  return metrics;
}

}  // namespace fsdptune
