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
#include "fsdptune/memory_bound.hpp"
#include "fsdptune/pipeline.hpp"
#include "fsdptune/plans.hpp"
#include "fsdptune/profile.hpp"
#include "fsdptune/program.hpp"
#include "fsdptune/report.hpp"
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

// Where a version 1 schedule's replayed costs come from: its stored Program's durations,
// the costs it was tuned with (the profile path `tune` recorded, or the analytic model of
// its hardware), whatever --profile says (found by QA: `cost_source` named a --profile the
// replay did not use, and "analytic" for a recorded profile since changed).
std::string stored_program_cost_source(const ScheduleFile& schedule) {
  const std::string& recorded = schedule.provenance.cost_source;
  return recorded.empty() || recorded == schedule.hardware.id ? "analytic" : recorded;
}

// `--plan FILE` naming a schedule file (docs/schedule-format.md): read, and checked to be
// made for the model, job and hardware that the flags describe (Error(kBadInput) naming
// the file and field otherwise). nullopt for a built-in plan or a plan file.
std::optional<ScheduleFile> schedule_of_plan_option(const PlanOptions& options,
                                                    const ModelSpec& model, const JobSpec& job,
                                                    const HardwareSpec& hardware) {
  if (!names_plan_input(options.plan)) return std::nullopt;
  const nlohmann::json& json = read_plan_json("--plan", options.plan);
  refuse_other_format(json, options.plan);
  if (!is_schedule_json(json)) return std::nullopt;
  ScheduleFile schedule = checked_schedule_from_json(json, options.plan);
  check_schedule_matches(schedule, model, job, options.plan);
  check_schedule_hardware(schedule, hardware, options.plan);
  return schedule;
}

// What a simulation runs on: the model, job and costs of the flags, or (no --model) of the
// schedule file that --plan names.
struct SimulateInputs {
  ModelSpec model;
  JobSpec job;
  ResolvedCostModel costs;
  CostOptions cost_options;  // as used: --profile, or the schedule's recorded profile
  std::string cost_note;     // why the costs differ from the schedule's, when they may
};

// One job flag as given and as the schedule's job has it, in the flag's own spelling.
struct JobFlagValues {
  const char* flag;
  std::string given;
  std::string schedule;
};

std::vector<JobFlagValues> job_flag_values(const JobOptions& flags, const JobSpec& job) {
  const auto on_off = [](bool on) { return std::string(on ? "on" : "off"); };
  // Enum flags are parsed first (an invalid value names its flag), then spelled as the
  // job prints them.
  return {
      {"--gpus", std::to_string(flags.gpus), std::to_string(job.gpus)},
      {"--gpus-per-node", std::to_string(flags.gpus_per_node), std::to_string(job.gpus_per_node)},
      {"--tp", std::to_string(flags.tp), std::to_string(job.tp)},
      {"--dp-replicate", std::to_string(flags.dp_replicate), std::to_string(job.dp_replicate)},
      // Found by QA: --cp was left out, and a --cp that disagreed was taken silently.
      {"--cp", std::to_string(flags.cp), std::to_string(job.cp)},
      {"--batch", std::to_string(flags.batch), std::to_string(job.local_batch)},
      {"--seq", std::to_string(flags.seq), std::to_string(job.seq_len)},
      {"--ac", to_string(ac_from_string(flags.ac, "--ac")), to_string(job.ac)},
      {"--param-dtype", to_string(dtype_from_string(flags.param_dtype, "--param-dtype")),
       to_string(job.param_dtype)},
      {"--reduce-dtype", to_string(dtype_from_string(flags.reduce_dtype, "--reduce-dtype")),
       to_string(job.reduce_dtype)},
      {"--float8", on_off(flags.float8), on_off(job.float8)},
      {"--async-tp", on_off(flags.async_tp), on_off(job.async_tp)},
      {"--execution", to_string(execution_from_string(flags.execution, "--execution")),
       to_string(job.execution)},
      {"--pp", std::to_string(flags.pp), std::to_string(job.pp)},
      {"--microbatches", std::to_string(flags.microbatches), std::to_string(job.microbatches)},
      {"--pipeline-steps", std::to_string(flags.pipeline_steps),
       std::to_string(job.pipeline_steps)},
      {"--pp-schedule",
       to_string(pipeline_schedule_from_string(flags.pp_schedule, "--pp-schedule")),
       to_string(job.pp_schedule)},
      {"--virtual-stages", std::to_string(flags.virtual_stages),
       std::to_string(job.virtual_stages)},
      {"--pp-first-stage-less-layers", std::to_string(flags.pp_first_less),
       std::to_string(job.pp_first_stage_less_layers)},
      {"--pp-last-stage-less-layers", std::to_string(flags.pp_last_less),
       std::to_string(job.pp_last_stage_less_layers)},
      {"--pp-chunk-blocks",
       flags.pp_chunk_blocks.empty() ? ""
                                     : chunk_blocks_text(parse_chunk_blocks(flags.pp_chunk_blocks)),
       job.pp_chunk_blocks.empty() ? "none, split by " + pp_split_flags(job)
                                   : chunk_blocks_text(job.pp_chunk_blocks)}};
}

// Without --model the job is the schedule's: every job flag given must say the same
// (Error(kBadInput) naming the first flag that does not, listing all of them).
void check_job_flags_agree(const SimulateOptions& options, const JobSpec& job,
                           const std::string& path) {
  std::string first, disagreements;
  for (const JobFlagValues& values : job_flag_values(options.job, job)) {
    if (!job_flag_given(options.job, values.flag) || values.given == values.schedule) continue;
    if (first.empty()) first = values.flag;
    disagreements += fmt::format("{}{} {} (the schedule's: {})", disagreements.empty() ? "" : ", ",
                                 values.flag, values.given, values.schedule);
  }
  if (first.empty()) return;
  throw_bad_input(first, fmt::format("disagrees with the job of {}: {}", path, disagreements),
                  "without --model the job is the schedule's: drop the flag, or pass --model "
                  "and the whole job to simulate a built-in plan or plan file for another job");
}

// The costs without --model. The stored Programs carry the durations they were tuned with;
// what a replay still costs (a pipeline's chunk compute times and sends) comes from:
// --profile when given (measured on the schedule's hardware); else the profile recorded in
// the provenance when that file still exists with the same content (its hash); else the
// analytic model of the schedule's hardware spec, with a note saying so. --hardware, when
// given, must be the schedule's.
void resolve_schedule_costs(const CostOptions& flags, const ScheduleFile& schedule,
                            const std::string& path, SimulateInputs& inputs) {
  const HardwareSpec& hardware = schedule.hardware;
  if (!flags.hardware.empty()) {
    const HardwareSpec given = resolve_hardware_option(flags.hardware);
    if (!same_figures(given, hardware)) {
      throw_bad_input(
          "--hardware",
          given.id == hardware.id
              ? fmt::format("{} is another spec of \"{}\" than the one {} was made with: {}",
                            flags.hardware, hardware.id, path, figure_differences(hardware, given))
              : fmt::format("{} (\"{}\") but {} was made for hardware \"{}\"", flags.hardware,
                            given.id, path, hardware.id),
          "drop --hardware: without --model the schedule's own hardware spec is used (its "
          "costs are frozen in the stored program)");
    }
  }
  inputs.cost_options = flags;
  inputs.costs.hardware = hardware;
  const std::string& recorded = schedule.provenance.cost_source;
  if (flags.profile.empty() && !recorded.empty() && recorded != hardware.id) {
    std::string why;
    if (!std::filesystem::is_regular_file(recorded)) {
      why = "is not found";
    } else {
      try {
        Profile profile = read_profile_file(recorded);
        if (fnv1a64_hex(dump_json(profile_to_json(profile))) == schedule.provenance.cost_hash) {
          inputs.costs.profile = std::move(profile);
          inputs.cost_options.profile = recorded;
        } else {
          why = "has changed since (its content hash is not the schedule's cost_hash)";
        }
      } catch (const Error& error) {
        why = fmt::format("cannot be read ({})", error.what());
      }
    }
    if (!why.empty() && schedule.pipeline) {
      inputs.cost_note = fmt::format(
          "costs: the analytic model of {}, not the profile {} that {} was tuned with: it {}. "
          "The chunks' compute times and sends are costed again, so the step time may differ "
          "from the schedule's prediction. Pass --profile to use measured costs.",
          hardware.id, recorded, path, why);
    } else if (!why.empty()) {
      // A version 1 replay costs nothing: its durations are the recorded profile's even
      // when the file is gone (it said "costs: the analytic model" and then that the step
      // was the schedule's).
      inputs.cost_note = fmt::format(
          "costs: {} replays its stored program, whose durations are those of the profile {} "
          "it was tuned with, so the step time is the schedule's; {} {}",
          path, recorded, recorded, why);
    }
  } else if (!flags.profile.empty()) {
    inputs.costs.profile = read_profile_option(flags.profile);
  }
  if (inputs.costs.profile) {
    if (inputs.costs.profile->hardware != hardware.id) {
      throw_bad_input("--profile " + inputs.cost_options.profile,
                      fmt::format("measured on '{}' but {} was made for hardware '{}'",
                                  inputs.costs.profile->hardware, path, hardware.id),
                      "pass a profile measured on the schedule's hardware, or none");
    }
    inputs.costs.model = make_profile_cost_model(*inputs.costs.profile, hardware);
  } else {
    inputs.costs.model = make_analytic_cost_model(hardware);
  }
}

SimulateInputs resolve_inputs(const SimulateOptions& options) {
  SimulateInputs inputs;
  if (!options.job.model.empty() || !options.job.job_toml.empty()) {  // as the flags say
    inputs.model = resolve_model_option(options.job);
    // Without --hardware or --profile, a schedule given to --plan has them (found by QA:
    // "--hardware: no hardware given" for the schedule's own model and job).
    const std::string& plan = options.plan.plan;
    if (options.cost.hardware.empty() && options.cost.profile.empty() && names_plan_input(plan)) {
      const nlohmann::json& json = read_plan_json("--plan", plan);
      refuse_other_format(json, plan);
      if (is_schedule_json(json)) {
        resolve_schedule_costs(options.cost, checked_schedule_from_json(json, plan), plan, inputs);
        inputs.job = to_job_spec(options.job, inputs.model, &inputs.costs.hardware);
        return inputs;
      }
    }
    inputs.costs = resolve_cost_model(options.cost);
    inputs.job = to_job_spec(options.job, inputs.model, &inputs.costs.hardware);
    inputs.cost_options = options.cost;
    return inputs;
  }
  const std::string& path = options.plan.plan;
  const std::vector<std::string> builtins = builtin_plan_names();
  const bool builtin = std::find(builtins.begin(), builtins.end(), path) != builtins.end();
  const std::string required = "--model is required (or pass a schedule file to --plan)";
  // Found by QA: a missing schedule said "--model is required", its path in the hint only.
  std::error_code ec;
  if (!builtin && !std::filesystem::exists(path, ec)) {
    throw_bad_input("--plan " + path, "no such file",
                    "a schedule file (fsdptune tune --out), or --model and the job flags with a "
                    "plan");
  }
  if (builtin) {
    throw_bad_input(
        "", required,
        fmt::format("--plan {} is a built-in plan: give --model and the job flags to apply it to",
                    path));
  }
  // A folder is named by read_json_file; a pipe is read as every other input is (found by
  // QA: `--plan <(...)` was "not a file", blamed on --model).
  const nlohmann::json& json = read_plan_json("--plan", path);
  refuse_other_format(json, path);
  if (!is_schedule_json(json)) {
    throw_bad_input("", required,
                    fmt::format("{} is a plan, not a schedule file (\"format\": "
                                "\"fsdptune-schedule\"): it does not say the model and job",
                                path));
  }
  const ScheduleFile schedule = checked_schedule_from_json(json, path);
  check_job_flags_agree(options, schedule.job, path);
  inputs.model = schedule.model;
  inputs.job = schedule.job;
  resolve_schedule_costs(options.cost, schedule, path, inputs);
  return inputs;
}

void run_simulate(const SimulateOptions& options) {
  // --plan may be a built-in plan's name: only a file can be overwritten.
  require_distinct_files({{"--trace", options.trace_path}},
                         {{"--plan", input_file(options.plan.plan)},
                          {"--job-toml", options.job.job_toml},
                          {"--profile", options.cost.profile},
                          {"--model", input_file(options.job.model)},
                          {"--hardware", input_file(options.cost.hardware)}});
  const SimulateInputs inputs = resolve_inputs(options);
  if (!inputs.cost_note.empty()) {
    // With --json stdout holds only the object.
    fmt::print(options.json ? stderr : stdout, "{}\n", inputs.cost_note);
  }
  const ModelSpec& model = inputs.model;
  const JobSpec& job = inputs.job;
  const ResolvedCostModel& costs = inputs.costs;
  check_job_hardware(job, costs.hardware);
  resolve_keep_gathered(options.plan, job);  // its errors before any work
  if (is_pipelined(job)) {                   // --pp > 1 or --microbatches > 1: pipeline_cli.cpp
    run_simulate_pipelined(model, job, costs, inputs.cost_options, options.plan,
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
  // Found by QA: --profile was read, checked against the hardware and then not used, without
  // a word (the stored Program's durations are the costs it was tuned with).
  if (schedule && !options.cost.profile.empty()) {
    fmt::print(stderr,
               "note: --profile {}: {} replays its stored program, whose durations are the costs "
               "it was tuned with; the profile changes nothing here (tune with --profile to "
               "cost a plan with it)\n",
               options.cost.profile, options.plan.plan);
  }
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

  // Under --require-fit a step that does not fit exits 3 writing nothing, as tune does
  // (found by QA: the trace was written, or replaced, before the exit).
  const bool write_trace = !options.trace_path.empty() && (fits || !options.require_fit);
  if (write_trace) {
    write_file_atomically(
        options.trace_path,
        dump_json(chrome_trace(program, result, trace_title(model.name, plan.name))), "--trace");
  }

  if (options.json) {
    const AnyTimingPeak any_timing = any_timing_peak(program);
    nlohmann::json breakdown = nlohmann::json::object();
    nlohmann::json any_timing_breakdown = nlohmann::json::object();
    for (MemoryCategory category : kCategories) {
      breakdown[to_string(category)] = at(result.peak_breakdown, category);
      any_timing_breakdown[to_string(category)] = at(any_timing.breakdown, category);
    }
    const nlohmann::json out = {
        {"format", "fsdptune-simulation"},
        {"version", kSimulateJsonVersion},
        {"model", model.name},
        {"job", job_to_json(job)},
        {"hardware", costs.hardware.id},
        {"cost_source", schedule ? stored_program_cost_source(*schedule)
                        : inputs.cost_options.profile.empty() ? "analytic"
                                                              : inputs.cost_options.profile},
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
        {"any_timing_peak_allocated_bytes", any_timing.peak_allocated_bytes},
        {"any_timing_breakdown", any_timing_breakdown},
        {"any_timing_reserved_bytes", any_timing_reserved_bytes(program)},
        {"persistent_bytes", program.persistent_bytes},
        {"task_count", program.tasks.size()},
        {"event_count", result.event_count},
        {"cost_queries", program.cost_queries},
        {"cost_fallbacks", program.cost_fallbacks}};
    std::fputs(dump_json(out).c_str(), stdout);
  } else {
    fmt::print("{}\n", single_program_job_line(model, job, costs.hardware.id));
    // A plan's reduce_after_backward changes the timeline: said (found by QA, 2026-12-06).
    // Backward buckets that gather nothing said, as tune says them (found by review).
    fmt::print("plan {}: {} forward / {} backward / {} reduce-scatter buckets{}, {} tasks\n",
               plan.name, plan.forward_buckets.size(), backward_buckets_text(plan, false),
               plan.reduce_scatter_buckets.size(),
               plan.reduce_after_backward ? " (after the backward)" : "", program.tasks.size());
    const double step = result.step_time_s;
    fmt::print("step time          {}\n", format_seconds(step));
    fmt::print("tokens/s/GPU       {}\n", format_rate(metrics.tokens_per_s_per_gpu));
    fmt::print("MFU                {:.1f}%{}\n", 100.0 * metrics.mfu,
               mfu_basis_note(metrics.mfu, job, costs.hardware));
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
    fmt::print("{}", any_timing_text(program, limit_bytes, fits));
    fmt::print("{}\n", fits ? "fits" : overflow_line(result, limit_bytes));
    fmt::print("costs              {} looked up, {} from the analytic model\n",
               program.cost_queries, program.cost_fallbacks);
    if (throughput_caveat_applies(program.cost_queries, program.cost_fallbacks, job.pp)) {
      fmt::print("{}\n", kThroughputCaveat);
    }
    if (write_trace) fmt::print("wrote {}\n", options.trace_path);
  }
  flush_stdout_before_error();
  if (!fits && options.require_fit) {
    // The ways out this job has (found by QA: --ac full was offered under --ac full).
    throw Error(ErrorKind::kDoesNotFit, "--memory-limit", overflow_line(result, limit_bytes),
                does_not_fit_hint(
                    workload.model, job, false,
                    ShardingGain{result.peak_reserved_bytes, workload.persistent_state_bytes(),
                                 limit_bytes, padded_peak_bytes(result.peak_breakdown)},
                    {"use another --plan"}));
  }
}

}  // namespace

std::string backward_buckets_text(const Plan& plan, bool explained) {
  const int gathering = gathering_backward_buckets(plan);
  const std::size_t count = plan.backward_buckets.size();
  if (static_cast<std::size_t>(gathering) == count) return std::to_string(count);
  if (!explained) return fmt::format("{} ({} gathering)", count, gathering);
  if (gathering == 0) {
    return fmt::format("{} (none gathering: every unit stays gathered after forward)", count);
  }
  return fmt::format("{} ({} gathering: the others' units stay gathered after forward)", count,
                     gathering);
}

std::string any_timing_text(const Program& program, std::int64_t limit_bytes,
                            bool fits_as_predicted) {
  const AnyTimingPeak peak = any_timing_peak(program);
  const std::int64_t reserved = any_timing_reserved_bytes(program);
  std::string text = fmt::format("any timing         {} allocated, {} reserved at most: {}\n",
                                 format_bytes(peak.peak_allocated_bytes), format_bytes(reserved),
                                 describe_any_timing_state(program, peak));
  // What that state holds, against the predicted peak's breakdown above it.
  std::string parts;
  for (MemoryCategory category : kCategories) {
    const std::int64_t bytes = at(peak.breakdown, category);
    if (bytes == 0) continue;
    parts +=
        fmt::format("{}{} {}", parts.empty() ? "" : ", ", to_string(category), format_bytes(bytes));
  }
  text += fmt::format("  holding          {}\n", parts.empty() ? "nothing" : parts);
  if (reserved > limit_bytes) {
    text +=
        "  " +
        any_timing_verdict(peak.peak_allocated_bytes, reserved, limit_bytes, fits_as_predicted) +
        "\n";
  }
  return text;
}

void register_sim_commands(CLI::App& app) {
  auto options = std::make_shared<SimulateOptions>();
  CLI::App* command = app.add_subcommand(
      "simulate",
      "Simulate one training step of a plan: time, overlap and memory; `simulate --plan "
      "schedule.json` alone re-simulates a tuned schedule with its own model, job and hardware");
  add_job_options(command, options->job);
  add_pipeline_options(command, options->job);
  // A schedule file says its model, job and hardware: --model is then optional.
  command->get_option("--model")->description(
      "Built-in model name, model JSON file, or Hugging Face config.json; without it (and "
      "without --job-toml) --plan must be a schedule file, whose model, job and hardware are "
      "used (job flags given must agree with it)");
  add_cost_options(command, options->cost);
  add_plan_options(command, options->plan);
  command->add_flag("--json", options->json, "Print one JSON object instead of text");
  command
      ->add_option("--trace", options->trace_path,
                   "Write a Chrome trace (Perfetto, chrome://tracing) of the step to FILE")
      ->type_name("FILE");
  command->add_flag("--require-fit", options->require_fit,
                    "Exit 3 when the peak exceeds the memory limit");
  command->callback([options] {
    run_naming_memory_limit(options->plan.memory_limit, [&] { run_simulate(*options); });
  });
}

}  // namespace fsdptune::cli
