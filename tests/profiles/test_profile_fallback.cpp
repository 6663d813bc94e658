// A profile measured for a workload covers its compute ops; an op the profile lacks falls
// back to the analytic model, and the estimate says so (measured == false), which is what
// results count as fallbacks.
#include <catch2/catch.hpp>

#include "fsdptune/collector.hpp"
#include "fsdptune/cost_model.hpp"
#include "fsdptune/hardware.hpp"
#include "fsdptune/profile.hpp"
#include "fsdptune/workload.hpp"

using namespace fsdptune;

namespace {

Workload tiny_workload() {
  const ModelSpec model = builtin_model("tiny");
  JobSpec job;
  job.gpus = 2;
  job.gpus_per_node = 2;
  job.seq_len = 64;
  return build_workload(model, normalize_job(model, job));
}

}  // namespace

TEST_CASE("a profile lacking an op falls back to the analytic model and says so",
          "[profiler][fallback]") {
  const Workload workload = tiny_workload();
  const auto ops = distinct_compute_ops(workload);
  REQUIRE(ops.size() >= 2);
  // A profile as a collector writes it, every op measured at 1 ms, 2 ms, ... except the
  // first, which is left out.
  Profile profile;
  profile.hardware = "h100-sxm";
  for (std::size_t i = 1; i < ops.size(); ++i) {
    const double seconds = 1e-3 * static_cast<double>(i);
    profile.compute.push_back({ops[i].signature(), ops[i], {seconds, seconds}});
  }
  const HardwareSpec hardware = builtin_hardware("h100-sxm");
  const auto model = make_profile_cost_model(profile, hardware);
  const auto analytic = make_analytic_cost_model(hardware);

  std::int64_t fallbacks = 0;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const CostEstimate estimate = model->compute(ops[i]);
    if (!estimate.measured) {
      ++fallbacks;
      CHECK(estimate.seconds == analytic->compute(ops[i]).seconds);
    } else {
      CHECK(estimate.seconds == Approx(1e-3 * static_cast<double>(i)));  // the median
    }
  }
  CHECK(fallbacks == 1);
  CHECK_FALSE(model->compute(ops[0]).measured);

  // Every op of every unit (not just the distinct ones) is covered once the missing one is
  // added: zero fallbacks over the whole workload.
  profile.compute.push_back({ops[0].signature(), ops[0], {5e-3}});
  const auto complete = make_profile_cost_model(profile, hardware);
  std::int64_t workload_fallbacks = 0;
  for (const auto& unit : workload.units) {
    for (const auto* list : {&unit.forward_ops, &unit.recompute_ops, &unit.backward_ops}) {
      for (const Op& op : *list) {
        if (op.kind != OpKind::kCollective && !complete->compute(op).measured) {
          ++workload_fallbacks;
        }
      }
    }
  }
  CHECK(workload_fallbacks == 0);
}
