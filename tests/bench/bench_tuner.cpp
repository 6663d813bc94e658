// Tuner speed (docs/performance.md): a whole search for Llama 3 405B on 1024 H100s, and
// the cost of one plan evaluation (lower + simulate without timings), the unit of work of
// the search.
#include <benchmark/benchmark.h>

#include <memory>

#include "fsdptune/cost_model.hpp"
#include "fsdptune/hardware.hpp"
#include "fsdptune/job.hpp"
#include "fsdptune/model.hpp"
#include "fsdptune/plans.hpp"
#include "fsdptune/program.hpp"
#include "fsdptune/simulator.hpp"
#include "fsdptune/tuner.hpp"
#include "fsdptune/workload.hpp"

namespace {

using namespace fsdptune;

struct Job405b {
  Job405b() : hardware(builtin_hardware("h100-sxm")), costs(make_analytic_cost_model(hardware)) {
    const ModelSpec model = builtin_model("llama3-405b");
    JobSpec job;
    job.gpus = 1024;
    job.local_batch = 1;
    job.seq_len = 8192;
    job.ac = ActivationCheckpointing::kFull;
    workload = build_workload(model, normalize_job(model, job));
  }
  HardwareSpec hardware;
  std::unique_ptr<CostModel> costs;
  Workload workload;
};

const Job405b& job405b() {
  static const Job405b job;
  return job;
}

// The whole search with default options (converges by itself; the 10 s time budget is a
// safety net), on `threads` threads.
void BM_Tune405bOn1024(benchmark::State& state) {
  const Job405b& job = job405b();
  TunerOptions options;
  options.threads = static_cast<int>(state.range(0));
  std::int64_t evaluated = 0;
  bool exhausted = false;
  double step_time_s = 0;
  for (auto _ : state) {
    const TunerResult result = Tuner(options).tune(job.workload, *job.costs);
    evaluated += result.plans_evaluated;
    exhausted = exhausted || result.budget_exhausted;
    step_time_s = result.best.step_time_s;
    benchmark::DoNotOptimize(result);
  }
  state.counters["plans"] =
      benchmark::Counter(static_cast<double>(evaluated) / static_cast<double>(state.iterations()));
  state.counters["plans_per_s"] =
      benchmark::Counter(static_cast<double>(evaluated), benchmark::Counter::kIsRate);
  state.counters["budget_exhausted"] = exhausted ? 1 : 0;
  state.counters["tuned_step_ms"] = step_time_s * 1e3;
}
// What the stall rule costs in quality: the same search on one thread with a longer stall
// (5,000 simulations) and run to convergence (0: until no single or pair move improves
// and the perturbations are spent), the default's (1,500) beside them. Without a step
// tolerance the result is the fastest plan found (with the default 0.1% it is the least
// memory within it, and a longer search could report a slower plan; found by QA).
void BM_Tune405bOn1024Stall(benchmark::State& state) {
  const Job405b& job = job405b();
  TunerOptions options;
  options.threads = 1;
  options.step_time_tolerance = 0;
  options.time_budget_s = 120;
  options.stall_evaluations = state.range(0);
  for (auto _ : state) {
    const TunerResult result = Tuner(options).tune(job.workload, *job.costs);
    state.counters["plans"] = static_cast<double>(result.plans_evaluated);
    state.counters["tuned_step_ms"] = result.best.step_time_s * 1e3;
    state.counters["budget_exhausted"] = result.budget_exhausted ? 1 : 0;
  }
}
BENCHMARK(BM_Tune405bOn1024Stall)
    ->Arg(TunerOptions{}.stall_evaluations)
    ->Arg(5000)
    ->Arg(0)
    ->Unit(benchmark::kSecond)
    ->Iterations(1)
    ->UseRealTime();

BENCHMARK(BM_Tune405bOn1024)
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kSecond)
    ->Iterations(1)
    ->UseRealTime();

// One candidate as the search evaluates it: a per-thread Lowerer lowers the fsdp2 plan
// into a reused Program without names or slots, then the simulator runs in a reused
// workspace without per-task timings or the memory timeline.
void BM_EvaluatePlan405b(benchmark::State& state) {
  const Job405b& job = job405b();
  const Plan plan = fsdp2_plan(job.workload);
  SimOptions options;
  options.record_timings = false;
  options.record_timeline = false;
  Lowerer lowerer(job.workload, *job.costs);
  Program program;
  SimWorkspace workspace;
  for (auto _ : state) {
    lowerer.lower_for_simulation(plan, program);
    benchmark::DoNotOptimize(simulate(program, options, workspace));
  }
  state.counters["plans_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_EvaluatePlan405b)->Unit(benchmark::kMicrosecond);

// The two halves of BM_EvaluatePlan405b.
void BM_LowerForSimulation405b(benchmark::State& state) {
  const Job405b& job = job405b();
  const Plan plan = fsdp2_plan(job.workload);
  Lowerer lowerer(job.workload, *job.costs);
  Program program;
  for (auto _ : state) {
    lowerer.lower_for_simulation(plan, program);
    benchmark::DoNotOptimize(program.tasks.data());
  }
}
BENCHMARK(BM_LowerForSimulation405b)->Unit(benchmark::kMicrosecond);

void BM_SimulateNoRecording405b(benchmark::State& state) {
  const Job405b& job = job405b();
  const Program program = lower(job.workload, fsdp2_plan(job.workload), *job.costs);
  SimOptions options;
  options.record_timings = false;
  options.record_timeline = false;
  SimWorkspace workspace;
  for (auto _ : state) benchmark::DoNotOptimize(simulate(program, options, workspace));
}
BENCHMARK(BM_SimulateNoRecording405b)->Unit(benchmark::kMicrosecond);

// The way the tuner evaluated a candidate before the Lowerer: a full lower() (every op
// costed, names and slots formatted, fresh vectors) and a simulation.
void BM_LowerFullAndSimulate405b(benchmark::State& state) {
  const Job405b& job = job405b();
  const Plan plan = fsdp2_plan(job.workload);
  SimOptions options;
  options.record_timings = false;
  options.record_timeline = false;
  for (auto _ : state) {
    const Program program = lower(job.workload, plan, *job.costs);
    benchmark::DoNotOptimize(simulate(program, options));
  }
}
BENCHMARK(BM_LowerFullAndSimulate405b)->Unit(benchmark::kMicrosecond);

// A search of one simulation on a model of state.range(0) small blocks (tiny's dims) on 8
// GPUs: its time is the dynamic program's seeds (docs/tuner.md "Seeds"), whose groups are
// windowed above 512 units. --time-budget does not bound them.
void BM_TuneSeedsManyBlocks(benchmark::State& state) {
  ModelSpec model = builtin_model("tiny");
  model.n_layers = state.range(0);
  JobSpec job;
  job.gpus = 8;
  job.seq_len = 1024;
  const HardwareSpec hardware = builtin_hardware("h100-sxm");
  const std::unique_ptr<CostModel> costs = make_analytic_cost_model(hardware);
  const Workload workload = build_workload(model, normalize_job(model, job));
  TunerOptions options;
  options.threads = 1;
  options.time_budget_s = 0;
  options.max_evaluations = 1;
  for (auto _ : state) benchmark::DoNotOptimize(Tuner(options).tune(workload, *costs));
}
BENCHMARK(BM_TuneSeedsManyBlocks)
    ->Arg(256)
    ->Arg(512)
    ->Arg(2000)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
