// Fuzz target: a hardware spec file (docs/hardware.md), as `--hardware FILE` reads it
// (resolve_hardware: hardware_from_json), then what simulate and tune do with it: the
// default memory limit, the analytic cost model of the tiny workload lowered with the
// fsdp2 and simplefsdp-greedy plans, and the simulated step.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fsdptune/cost_model.hpp"
#include "fsdptune/hardware.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/plans.hpp"
#include "fsdptune/program.hpp"
#include "fsdptune/simulator.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace fsdptune;
  return fuzz::expect_errors([&] {
    const std::string source = "hardware.json";
    const HardwareSpec hardware =
        hardware_from_json(parse_json_text(fuzz::text_of(data, size), source), source);
    fuzz::require(hardware_from_json(hardware_to_json(hardware), source) == hardware,
                  "a hardware spec reads back as written");
    const std::int64_t limit_bytes = default_memory_limit_bytes(hardware);
    const auto costs = make_analytic_cost_model(hardware);
    const Workload& workload = fuzz::tiny_workload();
    std::vector<Plan> plans = {fsdp2_plan(workload)};
    // Without a default limit (reserve >= HBM) the CLI asks for --memory-limit instead.
    if (limit_bytes > 0) plans.push_back(simplefsdp_greedy_plan(workload, *costs, limit_bytes));
    for (const Plan& plan : plans) {
      const SimResult result = simulate(lower(workload, plan, *costs));
      fuzz::require(std::isfinite(result.step_time_s), "an accepted spec costs a finite step");
      (void)step_metrics(workload, hardware, result);
    }
  });
}
