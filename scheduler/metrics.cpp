#include "fsdptune/simulator.hpp"

namespace fsdptune {

StepMetrics step_metrics(const Workload& workload, const HardwareSpec& hardware,
                         const SimResult& result) {
  StepMetrics metrics;
  metrics.step_time_s = result.step_time_s;
  // The workload is one GPU's: its model FLOPs are that GPU's (torchtitan divides by
  // non_data_parallel_size too).
  const StepThroughput throughput =
      step_throughput(workload.job, static_cast<double>(workload.tokens_per_step()),
                      workload.model_flops_per_step(), hardware, result.step_time_s);
  metrics.tokens_per_s_per_gpu = throughput.tokens_per_s_per_gpu;
  metrics.mfu = throughput.mfu;
  return metrics;
}

}  // namespace fsdptune
