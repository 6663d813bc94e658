// Sweep speed: the full `fsdptune sweep` search for Llama 3 405B on 1024 H100s at a global
// batch of 1024 sequences of 8192 tokens (docs/performance.md). Target: < 60 s on the
// 2-core CI machine.
#include <benchmark/benchmark.h>

#include <memory>
#include <thread>

#include "fsdptune/cost_model.hpp"
#include "fsdptune/hardware.hpp"
#include "fsdptune/model.hpp"
#include "fsdptune/sweep.hpp"

namespace {

void BM_Sweep405B(benchmark::State& state) {
  const fsdptune::ModelSpec model = fsdptune::builtin_model("llama3-405b");
  const auto costs = fsdptune::make_analytic_cost_model(fsdptune::builtin_hardware("h100-sxm"));
  fsdptune::SweepOptions options;
  options.gpus = 1024;
  options.global_batch_sequences = 1024;
  options.seq_len = 8192;
  options.threads = static_cast<int>(state.range(0));
  std::size_t configurations = 0;
  for (auto _ : state) {
    const fsdptune::SweepResult result = fsdptune::sweep(model, *costs, options);
    configurations = result.ranked.size() + result.rejected.size();
    benchmark::DoNotOptimize(result.ranked.data());
  }
  state.counters["configurations"] = static_cast<double>(configurations);
}
BENCHMARK(BM_Sweep405B)->Arg(1)->Arg(2)->Unit(benchmark::kSecond)->Iterations(1)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
