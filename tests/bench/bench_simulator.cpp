// Speed of the simulator on the biggest case the tuner meets: one training step of
// Llama 3 405B (126 blocks) with the fsdp2 plan on 128 H100s, analytic costs.
// Run: bench_simulator --benchmark_min_time=2 ; results in docs/performance.md.
#include <benchmark/benchmark.h>

#include <map>
#include <memory>
#include <string>

#include "fsdptune/cost_model.hpp"
#include "fsdptune/hardware.hpp"
#include "fsdptune/job.hpp"
#include "fsdptune/memory_bound.hpp"
#include "fsdptune/model.hpp"
#include "fsdptune/plans.hpp"
#include "fsdptune/program.hpp"
#include "fsdptune/simulator.hpp"
#include "fsdptune/workload.hpp"

namespace {

using namespace fsdptune;

struct Case {
  Workload workload;
  std::unique_ptr<CostModel> costs;
  Plan plan;
  Program program;
};

const Case& llama405b(const std::string& plan_name) {
  static std::map<std::string, Case> cases;
  auto it = cases.find(plan_name);
  if (it != cases.end()) return it->second;
  Case c;
  const ModelSpec model = builtin_model("llama3-405b");
  JobSpec job;
  job.gpus = 128;
  job.gpus_per_node = 8;
  job.local_batch = 1;
  job.seq_len = 8192;
  job.ac = ActivationCheckpointing::kFull;
  c.workload = build_workload(model, normalize_job(model, job));
  const HardwareSpec hardware = builtin_hardware("h100-sxm");
  c.costs = make_analytic_cost_model(hardware);
  c.plan = builtin_plan(plan_name, c.workload, *c.costs, default_memory_limit_bytes(hardware));
  c.program = lower(c.workload, c.plan, *c.costs);
  return cases.emplace(plan_name, std::move(c)).first->second;
}

// The tuner's inner loop: simulate without recording timings or the timeline.
// With `reuse`, the scratch arrays are kept between calls (SimWorkspace), as the tuner's
// workers and the sweep simulate.
void BM_SimulateStep(benchmark::State& state, const std::string& plan_name, bool record,
                     bool reuse) {
  const Case& c = llama405b(plan_name);
  SimOptions options;
  options.record_timings = record;
  options.record_timeline = record;
  SimWorkspace workspace;
  std::int64_t events = 0;
  for (auto _ : state) {
    SimResult result =
        reuse ? simulate(c.program, options, workspace) : simulate(c.program, options);
    events += result.event_count;
    benchmark::DoNotOptimize(result.step_time_s);
  }
  state.counters["tasks"] = static_cast<double>(c.program.tasks.size());
  state.counters["events/s"] =
      benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
}

// Lowering (plan -> costed Program), which the tuner also pays per candidate.
void BM_Lower(benchmark::State& state, const std::string& plan_name) {
  const Case& c = llama405b(plan_name);
  for (auto _ : state) {
    Program program = lower(c.workload, c.plan, *c.costs);
    benchmark::DoNotOptimize(program.tasks.data());
  }
}

// Lowering with the plan-independent compute costs computed once (what the tuner does).
void BM_LowerPrecomputed(benchmark::State& state, const std::string& plan_name) {
  const Case& c = llama405b(plan_name);
  const ComputeCosts compute = compute_costs(c.workload, *c.costs);
  for (auto _ : state) {
    Program program = lower(c.workload, c.plan, *c.costs, compute);
    benchmark::DoNotOptimize(program.tasks.data());
  }
}

// The peak at any timing (one maximum flow over the memory events), which simulate and
// tune print once for the plan they show.
void BM_AnyTimingPeak(benchmark::State& state, const std::string& plan_name) {
  const Case& c = llama405b(plan_name);
  for (auto _ : state) {
    AnyTimingPeak peak = any_timing_peak(c.program);
    benchmark::DoNotOptimize(peak.peak_allocated_bytes);
  }
  state.counters["tasks"] = static_cast<double>(c.program.tasks.size());
}

BENCHMARK_CAPTURE(BM_SimulateStep, fsdp2, std::string("fsdp2"), false, false)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_SimulateStep, fsdp2_workspace, std::string("fsdp2"), false, true)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_SimulateStep, fsdp2_recorded, std::string("fsdp2"), true, false)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_SimulateStep, simplefsdp_none, std::string("simplefsdp-none"), false, false)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Lower, fsdp2, std::string("fsdp2"))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_LowerPrecomputed, fsdp2, std::string("fsdp2"))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_AnyTimingPeak, fsdp2, std::string("fsdp2"))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_AnyTimingPeak, simplefsdp_none, std::string("simplefsdp-none"))
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
