// Sweep speed: the full `fsdptune sweep` search for Llama 3 405B on 1024 H100s at a global
// batch of 1024 sequences of 8192 tokens (docs/performance.md), every configuration that
// fits tuned (per stage when pipelined) with a budget of evaluations per chunk. Target:
// < 60 s on the 2-core CI machine.
#include <benchmark/benchmark.h>

#include <memory>

#include "fsdptune/cost_model.hpp"
#include "fsdptune/hardware.hpp"
#include "fsdptune/model.hpp"
#include "fsdptune/sweep.hpp"

namespace {

// Arguments: threads, plans per chunk (0: no tuning, fsdp2 per chunk only).
void BM_Sweep405B(benchmark::State& state) {
  const fsdptune::ModelSpec model = fsdptune::builtin_model("llama3-405b");
  const auto costs = fsdptune::make_analytic_cost_model(fsdptune::builtin_hardware("h100-sxm"));
  fsdptune::SweepOptions options;
  options.gpus = 1024;
  options.global_batch_sequences = 1024;
  options.seq_len = 8192;
  options.threads = static_cast<int>(state.range(0));
  options.tune_evaluations = state.range(1);
  if (state.range(1) == 0) options.tune_top = 0;
  fsdptune::SweepResult result;
  for (auto _ : state) {
    result = fsdptune::sweep(model, *costs, options);
    benchmark::DoNotOptimize(result.ranked.data());
  }
  state.counters["configurations"] =
      static_cast<double>(result.ranked.size() + result.rejected.size());
  state.counters["fitting"] = static_cast<double>(result.ranked.size());
  state.counters["tuned"] = static_cast<double>(result.tuned);
  state.counters["plans"] = static_cast<double>(result.plans_evaluated);
  state.counters["best_step_s"] = result.ranked.empty() ? 0.0 : result.ranked.front().step_time_s;
}
BENCHMARK(BM_Sweep405B)
    ->Args({2, 0})
    ->Args({2, 100})
    ->Args({2, 400})
    ->Unit(benchmark::kSecond)
    ->Iterations(1)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
