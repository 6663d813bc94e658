// `fsdptune simulate`: one training step of a plan, timed and its memory accounted.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "cost_options.hpp"
#include "fsdptune/error.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/pipeline.hpp"
#include "fsdptune/plans.hpp"
#include "fsdptune/program.hpp"
#include "fsdptune/schedule.hpp"
#include "fsdptune/simulator.hpp"
#include "fsdptune/trace.hpp"
#include "fsdptune/units.hpp"
#include "fsdptune/workload.hpp"
#include "job_options.hpp"
#include "pipeline_cli.hpp"

namespace fsdptune::cli {
namespace {

// Version of the `simulate --json` object.
constexpr int kSimulateJsonVersion = 1;

struct SimulateOptions {
  JobOptions job;
  CostOptions cost;
  PlanOptions plan;
  bool json = false;
  std::string trace_path;
  bool require_fit = false;
};

constexpr MemoryCategory kCategories[] = {
    MemoryCategory::kShardedState, MemoryCategory::kGatheredParams, MemoryCategory::kGradients,
    MemoryCategory::kActivations, MemoryCategory::kWorkspace};

std::int64_t at(const MemoryBreakdown& breakdown, MemoryCategory category) {
  return breakdown[static_cast<int>(category)];
}

double percent(double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0.0; }

// "does not fit: ..." naming what overflows: the limit, the excess, and the categories
// at the peak, largest first.
std::string overflow_line(const SimResult& result, std::int64_t limit_bytes) {
  std::vector<MemoryCategory> order(std::begin(kCategories), std::end(kCategories));
  std::stable_sort(order.begin(), order.end(), [&](MemoryCategory a, MemoryCategory b) {
    return at(result.peak_breakdown, a) > at(result.peak_breakdown, b);
  });
  std::string largest;
  for (std::size_t i = 0; i < 3 && i < order.size(); ++i) {
    if (!largest.empty()) largest += ", ";
    largest += fmt::format("{} {}", to_string(order[i]),
                           format_bytes(at(result.peak_breakdown, order[i])));
  }
  return fmt::format(
      "does not fit: peak {} reserved ({} allocated) exceeds the {} limit by {} (largest at "
      "the allocated peak: {})",
      format_bytes(result.peak_reserved_bytes), format_bytes(result.peak_allocated_bytes),
      format_bytes(limit_bytes), format_bytes(result.peak_reserved_bytes - limit_bytes), largest);
}

// `--plan FILE` naming a schedule file (docs/schedule-format.md): read, and checked to be
// made for the model, job and hardware that the flags describe (Error(kBadInput) naming
// the file and field otherwise). nullopt for a built-in plan or a plan file.
std::optional<ScheduleFile> schedule_of_plan_option(const PlanOptions& options,
                                                    const ModelSpec& model, const JobSpec& job,
                                                    const HardwareSpec& hardware) {
  const std::vector<std::string> builtins = builtin_plan_names();
  if (std::find(builtins.begin(), builtins.end(), options.plan) != builtins.end() ||
      !std::filesystem::is_regular_file(options.plan)) {
    return std::nullopt;
  }
  const nlohmann::json json = read_json_file(options.plan);
  if (!is_schedule_json(json)) return std::nullopt;
  ScheduleFile schedule = schedule_from_json(json, options.plan);
  check_schedule_matches(schedule, model, job, options.plan);
  if (schedule.hardware != hardware) {
    throw_bad_input(fmt::format("{}: hardware", options.plan),
                    fmt::format("the schedule was made for hardware \"{}\", not \"{}\"",
                                schedule.hardware.id, hardware.id),
                    fmt::format("pass --hardware {} (its costs are frozen in the schedule's "
                                "program), or tune again for {}",
                                schedule.hardware.id, hardware.id));
  }
  return schedule;
}

void run_simulate(const SimulateOptions& options) {
  const ModelSpec model = resolve_model_option(options.job);
  const JobSpec job = to_job_spec(options.job, model);
  const ResolvedCostModel costs = resolve_cost_model(options.cost);
  if (is_pipelined(job)) {  // --pp > 1 or --microbatches > 1: pipeline_cli.cpp
    run_simulate_pipelined(model, job, costs, options.cost, options.plan,
                           resolve_memory_limit(options.plan, costs.hardware), options.json,
                           options.require_fit, options.trace_path);
    return;
  }
  const Workload workload = build_workload(model, job);
  // A schedule file is re-simulated exactly: its stored Program (costs frozen when it was
  // tuned), not a new lowering of its plan; without --memory-limit, against the limit it
  // was tuned for.
  const std::optional<ScheduleFile> schedule =
      schedule_of_plan_option(options.plan, model, job, costs.hardware);
  const std::int64_t limit_bytes = schedule && options.plan.memory_limit.empty()
                                       ? schedule->memory_limit_bytes
                                       : resolve_memory_limit(options.plan, costs.hardware);
  const Plan plan = schedule
                        ? schedule->plan
                        : resolve_plan_option(options.plan, workload, *costs.model, limit_bytes);
  const Program program = schedule ? schedule->program : lower(workload, plan, *costs.model);
  SimOptions sim_options;
  sim_options.record_timings = !options.trace_path.empty();
  sim_options.record_timeline = !options.trace_path.empty();
  const SimResult result = simulate(program, sim_options);
  const StepMetrics metrics = step_metrics(workload, costs.hardware, result);
  const bool fits = plan_fits(result, limit_bytes);

  if (!options.trace_path.empty()) {
    const std::string title = fmt::format("{} {} on {} GPUs", model.name, plan.name, job.gpus);
    write_file_atomically(options.trace_path, dump_json(chrome_trace(program, result, title)));
  }

  if (options.json) {
    nlohmann::json breakdown = nlohmann::json::object();
    for (MemoryCategory category : kCategories) {
      breakdown[to_string(category)] = at(result.peak_breakdown, category);
    }
    const nlohmann::json out = {
        {"version", kSimulateJsonVersion},
        {"model", model.name},
        {"job", job_to_json(job)},
        {"hardware", costs.hardware.id},
        {"cost_source", options.cost.profile.empty() ? "analytic" : options.cost.profile},
        {"plan", plan_to_json(plan)},
        {"step_time_s", result.step_time_s},
        {"tokens_per_s_per_gpu", metrics.tokens_per_s_per_gpu},
        {"mfu", metrics.mfu},
        {"compute_s", result.compute_s},
        {"comm_s", result.comm_s},
        {"comm_standalone_s", result.comm_standalone_s},
        {"exposed_comm_s", result.exposed_comm_s},
        {"idle_s", result.idle_s},
        {"peak_allocated_bytes", result.peak_allocated_bytes},
        {"peak_reserved_bytes", result.peak_reserved_bytes},
        {"memory_limit_bytes", limit_bytes},
        {"fits", fits},
        {"memory_breakdown", breakdown},
        {"persistent_bytes", program.persistent_bytes},
        {"task_count", program.tasks.size()},
        {"event_count", result.event_count},
        {"cost_queries", program.cost_queries},
        {"cost_fallbacks", program.cost_fallbacks}};
    std::fputs(dump_json(out).c_str(), stdout);
  } else {
    fmt::print("{} on {} x {} (dp_shard {}, dp_replicate {}, tp {}), batch {} x seq {}, AC {}\n",
               model.name, job.gpus, costs.hardware.id, job.dp_shard, job.dp_replicate, job.tp,
               job.local_batch, job.seq_len, to_string(job.ac));
    fmt::print("plan {}: {} forward / {} backward / {} reduce-scatter buckets, {} tasks\n",
               plan.name, plan.forward_buckets.size(), plan.backward_buckets.size(),
               plan.reduce_scatter_buckets.size(), program.tasks.size());
    const double step = result.step_time_s;
    fmt::print("step time          {}\n", format_seconds(step));
    fmt::print("tokens/s/GPU       {:.0f}\n", metrics.tokens_per_s_per_gpu);
    fmt::print("MFU                {:.1f}%\n", 100.0 * metrics.mfu);
    fmt::print("  compute          {} ({:.1f}%)\n", format_seconds(result.compute_s),
               percent(result.compute_s, step));
    fmt::print("  exposed comm     {} ({:.1f}%)\n", format_seconds(result.exposed_comm_s),
               percent(result.exposed_comm_s, step));
    fmt::print("  idle             {} ({:.1f}%)\n", format_seconds(result.idle_s),
               percent(result.idle_s, step));
    fmt::print("communication      {} in flight, {:.1f}% of it hidden under compute\n",
               format_seconds(result.comm_s),
               percent(result.comm_s - result.exposed_comm_s, result.comm_s));
    fmt::print("peak memory        {} allocated, {} reserved (est.), limit {}\n",
               format_bytes(result.peak_allocated_bytes), format_bytes(result.peak_reserved_bytes),
               format_bytes(limit_bytes));
    for (MemoryCategory category : kCategories) {
      fmt::print("  {:<16} {}\n", to_string(category),
                 format_bytes(at(result.peak_breakdown, category)));
    }
    fmt::print("{}\n", fits ? "fits" : overflow_line(result, limit_bytes));
    fmt::print("costs              {} looked up, {} from the analytic model\n",
               program.cost_queries, program.cost_fallbacks);
    if (!options.trace_path.empty()) fmt::print("trace written to {}\n", options.trace_path);
  }
  std::fflush(stdout);
  if (!fits && options.require_fit) {
    throw Error(ErrorKind::kDoesNotFit, "--memory-limit", overflow_line(result, limit_bytes),
                "shard over more GPUs, use --ac selective/full, a smaller --batch, or another "
                "--plan");
  }
}

}  // namespace

void register_sim_commands(CLI::App& app) {
  auto options = std::make_shared<SimulateOptions>();
  CLI::App* command = app.add_subcommand(
      "simulate", "simulate one training step of a plan: time, overlap and memory");
  add_job_options(command, options->job);
  add_pipeline_options(command, options->job);
  add_cost_options(command, options->cost);
  add_plan_options(command, options->plan);
  command->add_flag("--json", options->json, "print one JSON object instead of text");
  command->add_option("--trace", options->trace_path,
                      "write a Chrome trace (Perfetto, chrome://tracing) of the step to FILE");
  command->add_flag("--require-fit", options->require_fit,
                    "exit 3 when the peak exceeds the memory limit");
  command->callback([options] { run_simulate(*options); });
}

}  // namespace fsdptune::cli
