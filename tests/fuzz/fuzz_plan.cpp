// Fuzz target: a plan file (docs/plan-format.md), as `simulate --plan FILE` reads it
// (resolve_plan_option: plan_from_json of the file, or of its "plan" when it is a schedule
// file, then validate_plan against the workload's units), then what simulate does with it:
// the tiny workload lowered with the plan, the step simulated with its timings and memory
// timeline, and the plan's torchtitan export.
#include <cstddef>
#include <cstdint>

#include "fsdptune/cost_model.hpp"
#include "fsdptune/hardware.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/plan.hpp"
#include "fsdptune/program.hpp"
#include "fsdptune/schedule.hpp"
#include "fsdptune/simulator.hpp"
#include "fsdptune/trace.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace fsdptune;
  return fuzz::expect_errors([&] {
    const nlohmann::json json = parse_json_text(fuzz::text_of(data, size), "plan.json");
    const bool schedule = json.is_object() && json.contains("plan") && json["plan"].is_object();
    const std::string source = schedule ? "plan.json: plan" : "plan.json";
    const Plan plan = plan_from_json(schedule ? json["plan"] : json, source);
    fuzz::require(plan_from_json(plan_to_json(plan), source) == plan,
                  "a plan reads back as written");
    const Workload& workload = fuzz::tiny_workload();
    validate_plan(plan, static_cast<int>(workload.units.size()), source);
    static const auto costs = make_analytic_cost_model(builtin_hardware("h100-sxm"));
    const Program program = lower(workload, plan, *costs);
    SimOptions options;
    options.record_timings = true;
    options.record_timeline = true;
    const SimResult result = simulate(program, options);
    (void)chrome_trace(program, result, plan.name);
    (void)torchtitan_plan_to_json(workload, plan);
  });
}
