// `fsdptune tune`: search for the best plan of a job and write the schedule file
// (docs/tuner.md, docs/schedule-format.md).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "cost_options.hpp"
#include "fsdptune/cost_model.hpp"
#include "fsdptune/error.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/memory_bound.hpp"
#include "fsdptune/pipeline.hpp"
#include "fsdptune/profile.hpp"
#include "fsdptune/program.hpp"
#include "fsdptune/schedule.hpp"
#include "fsdptune/simulator.hpp"
#include "fsdptune/torchtitan.hpp"
#include "fsdptune/tuner.hpp"
#include "fsdptune/units.hpp"
#include "fsdptune/workload.hpp"
#include "job_options.hpp"
#include "pipeline_cli.hpp"

namespace fsdptune::cli {
namespace {

// Why the search stopped, for the summary line: a budget, or on its own (the stall rule
// of the search's `stall_evaluations`).
std::string stop_reason(const TunerResult& result, std::int64_t stall_evaluations) {
  if (result.budget_exhausted) return "; stopped by the time budget";
  if (result.max_evaluations_reached) return "; stopped at --max-evaluations";
  if (result.stalled) {
    // The stall rule ends a local search, not the search (TunerOptions::stall_evaluations).
    return fmt::format(
        "; converged: every local search ran until no move improved or its plan gained under "
        "{:g}% in {} simulations",
        100 * TunerOptions::kStallImprovement, stall_evaluations);
  }
  // (QA: "every move from every start was tried" said more than the search does: the best
  // starts are searched, and pairs of moves are sampled.)
  return "; converged: every local search ran until no move (nor sampled pair of moves) "
         "improved";
}

struct TuneOptions {
  JobOptions job;
  CostOptions cost;            // --hardware (default kDefaultTuneHardware) / --profile
  std::string memory_limit;    // SIZE; empty = hardware default
  std::string step_tolerance;  // FRACTION; empty = TunerOptions' default
  double time_budget_s = 10.0;
  std::int64_t max_evaluations = 0;
  int threads = 1;
  std::uint64_t seed = 0;
  std::string out;
  std::string torchtitan_out;
  std::string torchtitan_toml;  // --emit-torchtitan-toml: the job as a torchtitan config
  std::string trace_path;
  bool json = false;
  std::optional<std::int64_t> try_pp_splits;  // --try-pp-splits N; none: the job's split only
  std::string keep_gathered = "any";          // --keep-gathered: TunerOptions::keep_gathered
  std::string fit = "predicted";              // --fit: TunerOptions::fit_at_any_timing
  bool fsdp2_exact = false;                   // --fsdp2-exact: TunerOptions::fsdp2_exact
  bool simplefsdp_exact = false;              // --simplefsdp-exact: TunerOptions::simplefsdp_exact
  std::vector<std::string> start_plans;       // --start-plan: TunerOptions::start_plans
};

// One split of the stages `tune --try-pp-splits` searched.
struct SplitTried {
  JobSpec job;
  std::vector<std::int64_t> blocks;  // per chunk (pipeline_chunk_blocks)
  double step_time_s = 0;
  bool fits = false;
};

// The job's split, and with --try-pp-splits every other distinct one, each tuned; the
// workload and search of the fastest that fits (the job's own when none does, so that
// its error says why), and what each split gave.
struct SplitSearch {
  Workload workload;
  ConfigurationTuning tuning;
  std::vector<SplitTried> tried;
};

SplitSearch search_splits(const TuneOptions& options, const ModelSpec& model, const JobSpec& job,
                          const CostModel& costs, const TunerOptions& tuner_options) {
  const std::vector<JobSpec> jobs = options.try_pp_splits
                                        ? pipeline_split_jobs(model, job, *options.try_pp_splits)
                                        : std::vector<JobSpec>{job};
  std::optional<SplitSearch> best;
  std::vector<SplitTried> tried;
  for (const JobSpec& candidate : jobs) {
    Workload workload = build_workload(model, candidate);
    ConfigurationTuning tuning = tune_configuration(workload, costs, tuner_options);
    const PipelineTuning& searched = *tuning.pipeline;
    tried.push_back({candidate, pipeline_chunk_blocks(candidate, model.n_layers),
                     searched.best.result.step_time_s, searched.fits});
    const bool better =
        !best || (searched.fits && (!best->tuning.pipeline->fits ||
                                    searched.best.result.step_time_s <
                                        best->tuning.pipeline->best.result.step_time_s));
    if (better) best = SplitSearch{std::move(workload), std::move(tuning), {}};
  }
  best->tried = std::move(tried);
  return std::move(*best);
}

void print_splits(const std::vector<SplitTried>& tried, const JobSpec& chosen) {
  fmt::print(
      "\nsplits of the stages tried (--try-pp-splits): embedding/output weights, step, fits, "
      "blocks per chunk\n");
  for (const SplitTried& split : tried) {
    // A split given block by block (--pp-chunk-blocks) has no weights of its own: its
    // job's are the defaults, which another split tried may have too.
    const std::string weights = split.job.pp_chunk_blocks.empty()
                                    ? fmt::format("{}/{}", split.job.pp_first_stage_less_layers,
                                                  split.job.pp_last_stage_less_layers)
                                    : std::string("given");
    fmt::print("  {:<5}  {:>11}  {:<3}  {}{}\n", weights, format_seconds(split.step_time_s),
               split.fits ? "yes" : "no", chunk_blocks_text(split.blocks),
               split.job == chosen ? "  <- written" : "");
  }
}

// The command line as the provenance records it: the flags that determine the result,
// in a fixed order (file names of outputs are left out so that the same search gives the
// same file wherever it is written). The job is the resolved one, as flags: a job read
// from --job-toml is recorded as the flags that give it.
std::string canonical_command(const TuneOptions& o, const std::string& model, const JobSpec& job) {
  std::string command = "fsdptune tune " + job_flags_of(model, job);
  // Each value one shell word (a path with a space was recorded as two).
  if (!o.cost.hardware.empty()) command += " --hardware " + shell_word(o.cost.hardware);
  if (!o.cost.profile.empty()) command += " --profile " + shell_word(o.cost.profile);
  if (!o.memory_limit.empty()) command += " --memory-limit " + shell_word(o.memory_limit);
  if (!o.step_tolerance.empty()) command += " --step-tolerance " + shell_word(o.step_tolerance);
  command +=
      fmt::format(" --time-budget {} --threads {} --seed {}", o.time_budget_s, o.threads, o.seed);
  if (o.max_evaluations > 0) command += fmt::format(" --max-evaluations {}", o.max_evaluations);
  if (o.keep_gathered != "any") command += " --keep-gathered " + o.keep_gathered;
  for (const std::string& path : o.start_plans) command += " --start-plan " + shell_word(path);
  // Found checking the demo's schedule: its command left --fit out, and rerun it searched
  // under the other criterion.
  if (o.fit != "predicted") command += " --fit " + o.fit;
  if (o.fsdp2_exact) command += " --fsdp2-exact";
  if (o.simplefsdp_exact) command += " --simplefsdp-exact";
  return command;
}

// What a note on the written schedule names: the torchtitan config where one is written,
// else the schedule file.
std::string note_subject(const TuneOptions& options) {
  return options.torchtitan_toml.empty() ? options.out : options.torchtitan_toml;
}

// Stamps the provenance of this run on `schedule` and returns --out and
// --emit-torchtitan-toml (empty when not asked for) to write.
std::vector<OutputFile> schedule_outputs(ScheduleFile& schedule, const TuneOptions& options,
                                         const std::string& cost_source,
                                         const std::string& cost_hash) {
  const std::string model = model_argument(options.job);
  schedule.provenance.tool = std::string("fsdptune ") + FSDPTUNE_VERSION;
  schedule.provenance.cost_source = cost_source;
  schedule.provenance.cost_hash = cost_hash;
  schedule.provenance.seed = options.seed;
  schedule.provenance.threads = options.threads;
  schedule.provenance.command = canonical_command(options, model, schedule.job);
  schedule.provenance.job_hash = schedule_job_hash(schedule.job);
  std::vector<OutputFile> outputs = {
      {options.out, schedule_file_text(schedule, options.out), "--out"}};
  if (!options.torchtitan_toml.empty()) {
    outputs.push_back({options.torchtitan_toml,
                       torchtitan_config_toml(model, schedule.model, schedule.job),
                       "--emit-torchtitan-toml"});
    for (const std::string& config_note :
         {torchtitan_without_fsdp_note(schedule.job), torchtitan_dtype_note(schedule.job)}) {
      if (!config_note.empty()) {
        fmt::print(stderr, "note: {}: {}\n", options.torchtitan_toml, config_note);
      }
    }
  }
  // Said with or without the config (found 2026-12-06: tune's default `any` picked chunks
  // re-gathered per microbatch for Llama 3 8B under PP 2, 1.4% faster than kept, silently).
  const std::string note = torchtitan_keep_gathered_note(schedule);
  if (!note.empty()) fmt::print(stderr, "note: {}: {}\n", note_subject(options), note);
  return outputs;
}

// Stamps `schedule` as schedule_outputs does and writes its files together: --out,
// --emit-torchtitan-toml, --emit-torchtitan (the pipeline's module groups per chunk, or the
// Program's) and --trace.
void write_schedule_outputs(ScheduleFile& schedule, const TuneOptions& options,
                            const std::string& cost_source, const std::string& cost_hash,
                            const Workload& workload, const CostModel& costs) {
  std::vector<OutputFile> outputs = schedule_outputs(schedule, options, cost_source, cost_hash);
  if (!options.torchtitan_out.empty()) {
    outputs.push_back(
        {options.torchtitan_out,
         dump_json(schedule.pipeline ? torchtitan_pipeline_to_json(workload, *schedule.pipeline)
                                     : torchtitan_plan_to_json(workload, schedule.plan)),
         "--emit-torchtitan"});
  }
  if (!options.trace_path.empty()) {
    outputs.push_back(
        {options.trace_path, dump_json(schedule_trace(schedule, workload, costs)), "--trace"});
  }
  write_files_atomically(outputs);
}

// `tune --json` (docs/tuner.md "tune --json"): its format's name and version.
nlohmann::json tune_json_header() {
  return nlohmann::json{{"format", "fsdptune-tune"}, {"version", 1}};
}

nlohmann::json summary_json(const PlanSummary& summary) {
  // The schedule file's summary form (one writer for both).
  ScheduleFile holder;
  holder.predicted = summary;
  return schedule_to_json(holder).at("predicted");
}

// `tune --fit any-timing`: a table row's any-timing reserved bound, what its fit was judged
// by (0: not computed, the row does not fit at its predicted timing), and the tuner's
// verdict.
struct AnyTimingFit {
  std::int64_t reserved_bytes = 0;
  bool fits = false;
};

// `any_timing`: one per row with --fit any-timing, else empty (fit at the predicted timing).
// `caveat`: kThroughputCaveat under the table (throughput_caveat_applies).
void print_table(const std::vector<PlanSummary>& rows, std::int64_t limit_bytes,
                 const std::vector<AnyTimingFit>& any_timing, bool caveat) {
  const bool judged_at_any_timing = !any_timing.empty();
  fmt::print("{:<20} {:>11} {:>13} {:>7} {:>12} {:>12} {:>12}{}  {}\n", "plan", "step time",
             "tokens/s/GPU", "MFU", "exposed comm", "peak alloc", "peak reserv",
             judged_at_any_timing ? fmt::format(" {:>12}", "any timing") : "", "fits");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const PlanSummary& row = rows[i];
    std::string bound_column;
    bool fits = row.fits;
    if (judged_at_any_timing) {
      const std::int64_t bound_bytes = any_timing[i].reserved_bytes;
      bound_column = fmt::format(" {:>12}", bound_bytes > 0 ? format_bytes(bound_bytes) : "-");
      fits = any_timing[i].fits;
    }
    fmt::print("{:<20} {:>11} {:>13.1f} {:>6.1f}% {:>12} {:>12} {:>12}{}  {}\n", row.plan_name,
               format_seconds(row.step_time_s), row.tokens_per_s_per_gpu, 100.0 * row.mfu,
               format_seconds(row.exposed_comm_s), format_bytes(row.peak_allocated_bytes),
               format_bytes(row.peak_reserved_bytes), bound_column,
               fits ? "yes" : fmt::format("no (limit {})", format_bytes(limit_bytes)));
  }
  if (caveat) fmt::print("{}\n", kThroughputCaveat);
}

void run_tune(const TuneOptions& options) {
  if (options.out.empty()) throw_bad_input("--out", "is required: where to write the schedule");
  NamedFiles inputs = {{"--job-toml", options.job.job_toml},
                       {"--profile", options.cost.profile},
                       {"--model", input_file(options.job.model)},
                       {"--hardware", input_file(options.cost.hardware)}};
  // A start plan is an input like the others (found by QA: `--start-plan X --out X` replaced
  // the file it started from).
  for (const std::string& path : options.start_plans) inputs.emplace_back("--start-plan", path);
  require_distinct_files({{"--out", options.out},
                          {"--emit-torchtitan", options.torchtitan_out},
                          {"--emit-torchtitan-toml", options.torchtitan_toml},
                          {"--trace", options.trace_path}},
                         inputs);
  // --threads: int_range at the flag.
  // Finite: 1e400 read as infinity, an unbounded search (0 is how to ask for none).
  if (!(options.time_budget_s >= 0) || !std::isfinite(options.time_budget_s)) {
    throw_bad_input(
        "--time-budget",
        fmt::format("must be a finite number of seconds >= 0, got {}", options.time_budget_s),
        "0 runs the search until it converges (every start and perturbation searched) or "
        "--max-evaluations");
  }
  if (options.max_evaluations < 0) throw_bad_input("--max-evaluations", "must be >= 0");
  check_try_pp_splits(options.try_pp_splits);

  const ModelSpec model = resolve_model_option(options.job);
  const ResolvedCostModel resolved = resolve_cost_model(options.cost, kDefaultTuneHardware);
  const HardwareSpec& hardware = resolved.hardware;
  const JobSpec job = to_job_spec(options.job, model, &hardware);
  check_job_hardware(job, hardware);
  check_trace_size(model, job, options.trace_path);
  const CostModel& costs = *resolved.model;
  // What the costs came from, for the provenance: the profile (measured, with the
  // hardware's analytic model where unmeasured) or the hardware spec alone.
  const std::string cost_source = resolved.profile ? options.cost.profile : hardware.id;
  const std::string cost_hash = resolved.profile
                                    ? fnv1a64_hex(dump_json(profile_to_json(*resolved.profile)))
                                    : fnv1a64_hex(dump_json(hardware_to_json(hardware)));
  TunerOptions tuner_options;
  if (!options.memory_limit.empty()) {
    tuner_options.memory_limit_bytes = given_memory_limit(options.memory_limit, hardware);
  }
  if (!options.step_tolerance.empty()) {
    tuner_options.step_time_tolerance = parse_fraction(options.step_tolerance, "--step-tolerance");
  }
  tuner_options.time_budget_s = options.time_budget_s;
  tuner_options.max_evaluations = options.max_evaluations;
  tuner_options.threads = options.threads;
  tuner_options.seed = options.seed;
  tuner_options.keep_gathered = parse_keep_gathered(options.keep_gathered, "--keep-gathered");
  if (options.keep_gathered != "any") require_pipelined_for_keep_gathered(job);
  if (!options.start_plans.empty() && is_pipelined(job)) {
    throw_bad_input("--start-plan",
                    "a pipelined job (--pp or --microbatches above 1) is tuned chunk by chunk: "
                    "a start plan is one plan for the whole model",
                    "drop --start-plan, or tune the job without a pipeline");
  }
  tuner_options.fit_at_any_timing = parse_fit_at_any_timing(options.fit);
  tuner_options.fsdp2_exact = options.fsdp2_exact;
  tuner_options.simplefsdp_exact = options.simplefsdp_exact;
  // Progress on stderr once a search has run for a second: rewritten in place twice a
  // second on a terminal, a line every two seconds otherwise (logs).
  // A pipelined job runs one search per chunk, each counting from 0 (found by QA: the line
  // showed one chunk's count, clock and one-microbatch best, and went quiet once a later
  // chunk's clock stayed under the last report): plans and seconds of the whole command,
  // and a best only of a single Program's search.
  const bool terminal = isatty(fileno(stderr)) != 0;
  const auto progress_started = std::chrono::steady_clock::now();
  const bool one_search = !is_pipelined(job);
  double last_report_s = 0;
  bool reported = false;
  std::int64_t earlier_searches_plans = 0;
  std::int64_t search_plans = 0;
  tuner_options.progress = [&](const TunerProgress& progress) {
    if (progress.plans_evaluated < search_plans) earlier_searches_plans += search_plans;
    search_plans = progress.plans_evaluated;
    const double elapsed_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - progress_started).count();
    const double interval_s = terminal ? 0.5 : 2.0;
    // (The first line at 1 s on a log too: it waited for the 2 s interval.)
    if (elapsed_s >= 1.0 && (last_report_s == 0 || elapsed_s - last_report_s >= interval_s)) {
      last_report_s = elapsed_s;
      reported = terminal;
      fmt::print(stderr, "{}tuning: {} plans simulated{}, {:.1f} s{}", terminal ? "\r" : "",
                 earlier_searches_plans + search_plans,
                 !one_search ? std::string(" (chunk by chunk)")
                 : progress.best_step_time_s > 0
                     ? ", best " + format_seconds(progress.best_step_time_s)
                     : std::string(", best -"),
                 elapsed_s, terminal ? "" : "\n");
      std::fflush(stderr);
    }
    return true;
  };
  if (options.try_pp_splits && job.pp * job.virtual_stages == 1) {
    throw_bad_input("--try-pp-splits",
                    "the job has one pipeline chunk: there is no split of the stages to try",
                    "give --pp (or --virtual-stages) for more than one chunk");
  }
  if (is_pipelined(job)) {
    // Per stage (pipeline_cli.cpp): a version 2 schedule.
    const auto pipeline_started = std::chrono::steady_clock::now();
    SplitSearch split = search_splits(options, model, job, costs, tuner_options);
    const Workload& workload = split.workload;
    TunedSchedule tuned = schedule_of_tuning(workload, hardware, costs, split.tuning);
    if (reported) fmt::print(stderr, "\n");
    const double pipeline_elapsed_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - pipeline_started).count();
    ScheduleFile& schedule = tuned.schedule;
    write_schedule_outputs(schedule, options, cost_source, cost_hash, workload, costs);
    const double efficiency = schedule.predicted.step_time_s > 0
                                  ? schedule.lower_bound_s / schedule.predicted.step_time_s
                                  : 0.0;
    // The written schedule's stages at any timing (under --fit any-timing what its fit was
    // judged by), and fsdp2's fit as judged (at any timing under --fit any-timing).
    // (What the tuner judged under --fit any-timing, the same Programs: not computed again.)
    const PipelineTuning& tuning = *split.tuning.pipeline;
    const std::vector<StageAnyTiming> any_timing =
        tuning.best_any_timing.empty() ? pipeline_any_timing(schedule) : tuning.best_any_timing;
    const PlanSummary& fsdp2 = schedule.baselines.front();
    const std::vector<StageAnyTiming>& fsdp2_any_timing = tuning.fsdp2_any_timing;
    const std::int64_t fsdp2_reserved = fsdp2_any_timing.empty()
                                            ? fsdp2.peak_reserved_bytes
                                            : largest_any_timing_reserved_bytes(fsdp2_any_timing);
    const bool fsdp2_fits = fsdp2_reserved <= schedule.memory_limit_bytes;
    if (options.json) {
      nlohmann::json out = tune_json_header();
      out["baselines"] = nlohmann::json::array();
      for (const PlanSummary& row : schedule.baselines) {
        nlohmann::json baseline = summary_json(row);
        // --fit any-timing: fsdp2's largest stage at any timing and the verdict (`fits`
        // stays the predicted one), as for a job without a pipeline.
        if (!fsdp2_any_timing.empty()) {
          baseline["any_timing_reserved_bytes"] = fsdp2_reserved;
          baseline["fits_at_any_timing"] = fsdp2_fits;
        }
        out["baselines"].push_back(std::move(baseline));
      }
      out["tuned"] = summary_json(schedule.predicted);
      out["derived_from"] = tuned.derived_from;
      out["lower_bound_s"] = schedule.lower_bound_s;
      out["efficiency"] = efficiency;
      out["pareto_points"] = schedule.pareto.size();
      if (!options.torchtitan_out.empty()) out["torchtitan"] = options.torchtitan_out;
      if (!options.torchtitan_toml.empty()) out["torchtitan_toml"] = options.torchtitan_toml;
      out["bubble_fraction"] = schedule.pipeline->bubble_fraction;
      out["memory_limit_bytes"] = schedule.memory_limit_bytes;
      out["plans_evaluated"] = tuned.plans_evaluated;
      out["budget_exhausted"] = tuned.budget_exhausted;
      out["max_evaluations_reached"] = tuned.max_evaluations_reached;
      out["schedule"] = options.out;
      out["schedule_hash"] = schedule_hash(schedule);
      out["fit"] = options.fit;
      add_pipeline_any_timing_json(out, any_timing, schedule.memory_limit_bytes);
      if (options.try_pp_splits) {
        out["splits"] = nlohmann::json::array();
        for (const SplitTried& tried : split.tried) {
          out["splits"].push_back(
              {{"pp_first_stage_less_layers", tried.job.pp_first_stage_less_layers},
               {"pp_last_stage_less_layers", tried.job.pp_last_stage_less_layers},
               {"chunk_blocks", tried.blocks},
               {"step_time_s", tried.step_time_s},
               {"fits", tried.fits}});
        }
      }
      fmt::print("{}", dump_json(out));
      return;
    }
    std::vector<std::int64_t> judged;  // --fit any-timing: fsdp2's bound, then the tuned one's
    if (!fsdp2_any_timing.empty()) {
      judged = {fsdp2_reserved, largest_any_timing_reserved_bytes(any_timing)};
    }
    print_pipeline_schedule(schedule, workload, judged);
    if (options.try_pp_splits) print_splits(split.tried, schedule.job);
    if (fsdp2_fits) {
      // The change and the memory beside it, as a single Program's line (found by QA:
      // "1.00x faster" alone hid a plan 0.03% slower that reserved less).
      // Under --fit any-timing both reservations at any timing, as judged.
      const std::int64_t tuned_reserved =
          judged.empty() ? schedule.predicted.peak_reserved_bytes : judged[1];
      // Slower only under --simplefsdp-exact, where fsdp2 is no candidate: said as slower
      // (found checking it: "1.00x faster (+0.36% step time)").
      const double speedup = fsdp2.step_time_s / schedule.predicted.step_time_s;
      fmt::print(
          "\ntuned vs fsdp2 per stage: {:.2f}x {} ({}), {} reserved{} "
          "against {} (from {}{})\n",
          speedup >= 1 ? speedup : 1 / speedup, speedup >= 1 ? "faster" : "slower",
          format_change(schedule.predicted.step_time_s, fsdp2.step_time_s, "step time"),
          format_bytes(tuned_reserved), judged.empty() ? "" : " at any timing",
          format_bytes(fsdp2_reserved), tuned.derived_from,
          tuner_options.simplefsdp_exact ? "; fsdp2 is no plan SimpleFSDP runs" : "");
    } else {
      // A slower tuned plan is no "0.86x faster": fsdp2 is out of the running.
      fmt::print(
          "\ntuned vs fsdp2 per stage: fsdp2 does not fit ({} step, {} reserved{}; tuned "
          "{}, from {})\n",
          format_seconds(fsdp2.step_time_s), format_bytes(fsdp2_reserved),
          fsdp2_any_timing.empty() ? "" : " at any timing",
          format_seconds(schedule.predicted.step_time_s), tuned.derived_from);
    }
    fmt::print("{}", pipeline_any_timing_text(any_timing, schedule.memory_limit_bytes));
    const std::string splits =
        split.tried.size() > 1
            ? fmt::format(" (the written split's; {} splits tuned)", split.tried.size())
            : "";
    fmt::print("search: {} plans simulated over {} chunks{} in {:.2f} s{}\n", tuned.plans_evaluated,
               schedule.pipeline->chunks.size(), splits, pipeline_elapsed_s,
               tuned.budget_exhausted ? "; stopped by the time budget"
               : tuned.max_evaluations_reached
                   ? "; stopped at --max-evaluations (each chunk's)"
                   : "; converged: each chunk's search stopped on its own");
    fmt::print("lower bound {}: efficiency {:.1f}%; Pareto front of {} compositions\n",
               format_seconds(schedule.lower_bound_s), 100.0 * efficiency, schedule.pareto.size());
    fmt::print("wrote {} (schedule {})\n", options.out, schedule_hash(schedule));
    if (!options.torchtitan_out.empty()) fmt::print("wrote {}\n", options.torchtitan_out);
    if (!options.torchtitan_toml.empty()) fmt::print("wrote {}\n", options.torchtitan_toml);
    if (!options.trace_path.empty()) fmt::print("wrote {}\n", options.trace_path);
    return;
  }
  const Workload workload = build_workload(model, job);
  for (const std::string& path : options.start_plans) {
    tuner_options.start_plans.push_back(plan_of_file(path, "--start-plan", workload));
  }
  const auto started = std::chrono::steady_clock::now();
  const TunerResult result = Tuner(tuner_options).tune(workload, costs);
  const double elapsed_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (reported) fmt::print(stderr, "\n");

  // The baselines, then the start plans (--start-plan; not in the schedule's baselines).
  std::vector<PlanSummary> rows;
  // With --fit any-timing: each row's bound and verdict (print_table); else empty.
  std::vector<AnyTimingFit> any_timing;
  for (const std::vector<EvaluatedPlan>* plans : {&result.baselines, &result.start_plans}) {
    for (const EvaluatedPlan& plan : *plans) {
      rows.push_back(plan.summary);
      if (tuner_options.fit_at_any_timing) {
        any_timing.push_back({plan.any_timing_reserved_bytes, plan.fits_at_any_timing});
      }
    }
  }
  const std::size_t baseline_rows = result.baselines.size();

  // The job as simulate heads it (found by QA: tune's said neither the mesh nor the dtypes),
  // above the table whether or not a plan fits (found by QA: not when none did).
  const auto print_job_line = [&] {
    fmt::print("{}; memory limit {}{}\n\n", single_program_job_line(model, job, hardware.id),
               format_bytes(result.memory_limit_bytes),
               tuner_options.fit_at_any_timing ? " at any timing (--fit any-timing)" : "");
  };
  if (!result.fits) {
    if (!options.json) {
      print_job_line();
      // How the plans' costs were priced is not counted here (no schedule): said.
      print_table(rows, result.memory_limit_bytes, any_timing, true);
    }
    throw Error(
        ErrorKind::kDoesNotFit, "--memory-limit",
        fmt::format("no plan fits in {} per GPU{}: the smallest peak found is {} ({}), "
                    "{} over{}",
                    format_bytes(result.memory_limit_bytes),
                    tuner_options.fit_at_any_timing ? " at any timing (--fit any-timing)" : "",
                    format_bytes(result.smallest_peak_bytes), result.smallest_peak_plan,
                    format_bytes(result.smallest_peak_bytes - result.memory_limit_bytes),
                    // TunerResult::smallest_peak_bytes: mixed measures.
                    tuner_options.fit_at_any_timing
                        ? " (at any timing where the predicted peak fits, else the "
                          "predicted peak, a lower bound of it)"
                        : ""),
        does_not_fit_hint(workload.model, job, tuner_options.fit_at_any_timing,
                          ShardingGain{result.smallest_peak_bytes,
                                       workload.persistent_state_bytes(), result.memory_limit_bytes,
                                       padded_peak_bytes(result.smallest_peak_breakdown)}));
  }

  // The chosen plan, simulated once more with per-task timings and the memory timeline.
  ScheduleFile schedule = schedule_of_tuned_plan(workload, hardware, result, costs);
  schedule.model = model;
  schedule.job = job;
  write_schedule_outputs(schedule, options, cost_source, cost_hash, workload, costs);

  const double efficiency = schedule.predicted.step_time_s > 0
                                ? result.lower_bound_s / schedule.predicted.step_time_s
                                : 0.0;
  if (options.json) {
    nlohmann::json out = tune_json_header();
    out["baselines"] = nlohmann::json::array();
    for (std::size_t i = 0; i < rows.size(); ++i) {
      nlohmann::json baseline = summary_json(rows[i]);
      // --fit any-timing: what the baseline's fit was judged by (0: not fitting already at
      // its predicted timing) and the verdict (`fits` stays the predicted one).
      if (!any_timing.empty()) {
        baseline["any_timing_reserved_bytes"] = any_timing[i].reserved_bytes;
        baseline["fits_at_any_timing"] = any_timing[i].fits;
      }
      // The start plans in their own array, only when given (other outputs keep their keys).
      if (i >= baseline_rows) {
        baseline["file"] = options.start_plans[i - baseline_rows];
        out["start_plans"].push_back(std::move(baseline));
      } else {
        out["baselines"].push_back(std::move(baseline));
      }
    }
    out["tuned"] = summary_json(schedule.predicted);
    out["derived_from"] = result.derived_from;
    out["plan"] = plan_to_json(schedule.plan);
    out["lower_bound_s"] = result.lower_bound_s;
    out["efficiency"] = efficiency;
    out["memory_limit_bytes"] = result.memory_limit_bytes;
    out["plans_evaluated"] = result.plans_evaluated;
    out["plans_aborted"] = result.plans_aborted;
    out["budget_exhausted"] = result.budget_exhausted;
    out["max_evaluations_reached"] = result.max_evaluations_reached;
    out["schedule"] = options.out;
    out["schedule_hash"] = schedule_hash(schedule);
    out["cost_queries"] = schedule.cost_queries;  // of the tuned plan's lowering
    out["cost_fallbacks"] = schedule.cost_fallbacks;
    out["any_timing_peak_allocated_bytes"] = any_timing_peak(schedule.program).peak_allocated_bytes;
    // What the tuner judged the fit by when it did (the same Program, lowered for the
    // search): not computed again.
    out["any_timing_reserved_bytes"] = tuner_options.fit_at_any_timing
                                           ? result.best_any_timing_reserved_bytes
                                           : any_timing_reserved_bytes(schedule.program);
    out["fit"] = options.fit;
    if (!options.torchtitan_out.empty()) out["torchtitan"] = options.torchtitan_out;
    if (!options.torchtitan_toml.empty()) out["torchtitan_toml"] = options.torchtitan_toml;
    fmt::print("{}", dump_json(out));
    return;
  }

  rows.push_back(schedule.predicted);
  if (tuner_options.fit_at_any_timing) {
    any_timing.push_back({result.best_any_timing_reserved_bytes, result.fits});
  }
  print_job_line();
  print_table(rows, result.memory_limit_bytes, any_timing,
              throughput_caveat_applies(schedule.cost_queries, schedule.cost_fallbacks, job.pp));
  // Of the baselines the pick could have been (found by review: under --fsdp2-exact, or
  // without torch.compile, the simplefsdp-* plans cannot).
  const PlanSummary* best_baseline = nullptr;
  for (std::size_t i = 0; i < schedule.baselines.size(); ++i) {
    const PlanSummary& row = schedule.baselines[i];
    const bool fits = any_timing.empty() ? row.fits : any_timing[i].fits;
    if (!runs_as_simulated(tuner_options, job, result.baselines[i].plan)) continue;
    if (fits && (best_baseline == nullptr || row.step_time_s < best_baseline->step_time_s)) {
      best_baseline = &row;
    }
  }
  fmt::print("\n");
  if (best_baseline != nullptr) {
    // The memory the speed costs beside it (found by QA: "1.00x faster" of a plan 0.3%
    // faster that reserved 23 GiB more).
    fmt::print(
        "tuned vs best baseline ({}): {:.2f}x faster ({}), {} reserved "
        "against {}\n",
        best_baseline->plan_name, best_baseline->step_time_s / schedule.predicted.step_time_s,
        format_change(schedule.predicted.step_time_s, best_baseline->step_time_s, "step time"),
        format_bytes(schedule.predicted.peak_reserved_bytes),
        format_bytes(best_baseline->peak_reserved_bytes));
    // A gain smaller than the predictions resolve, bought with much more memory: said, with
    // the flag that trades it back (found by QA: 0.4% faster for 26 GiB more on Llama 3 70B).
    const double gain = 1 - schedule.predicted.step_time_s / best_baseline->step_time_s;
    const std::int64_t more =
        schedule.predicted.peak_reserved_bytes - best_baseline->peak_reserved_bytes;
    if (gain > 0 && gain < 0.01 && more * 10 >= best_baseline->peak_reserved_bytes &&
        tuner_options.step_time_tolerance < 0.01) {
      fmt::print(
          "note: {:.2f}% faster for {} more reserved, a gain within what the predictions "
          "resolve (docs/calibration.md \"Relative effects\"); --step-tolerance 0.01 takes "
          "the plan that reserves the least within 1% of the fastest\n",
          100 * gain, format_bytes(more));
    }
  }
  fmt::print("lower bound {}: efficiency {:.1f}%\n", format_seconds(result.lower_bound_s),
             100.0 * efficiency);
  const Plan& plan = schedule.plan;
  // Backward buckets whose units all stayed gathered after forward gather nothing (found
  // by QA: "82 backward all-gather buckets" of which one gathered).
  const std::string backward = backward_buckets_text(plan, true);
  fmt::print(
      "plan: {} forward / {} backward all-gather buckets, {} reduce-scatter buckets, "
      "prefetch {}/{}, {} streams{}{} (found as {})\n",
      plan.forward_buckets.size(), backward, plan.reduce_scatter_buckets.size(),
      plan.forward_prefetch, plan.backward_prefetch, to_string(plan.stream_layout),
      // The knobs the buckets do not say (found by QA: a plan of one collective per
      // parameter read as 34 buckets).
      plan.one_collective_per_parameter ? ", one collective per parameter" : "",
      plan.copy_in_out ? "" : ", no flat-buffer copies", result.derived_from);
  fmt::print("{}", any_timing_text(schedule.program, result.memory_limit_bytes));
  fmt::print(
      "search: {} plans simulated ({} stopped early over the limit) in {:.2f} s, "
      "{:.0f} plans/s{}\n",
      result.plans_evaluated, result.plans_aborted, elapsed_s,
      elapsed_s > 0 ? static_cast<double>(result.plans_evaluated) / elapsed_s : 0.0,
      stop_reason(result, tuner_options.stall_evaluations));
  fmt::print("costs: {} looked up, {} from the analytic model ({})\n", schedule.cost_queries,
             schedule.cost_fallbacks, cost_source);
  fmt::print("wrote {} (schedule {})\n", options.out, schedule_hash(schedule));
  if (!options.torchtitan_out.empty()) fmt::print("wrote {}\n", options.torchtitan_out);
  if (!options.torchtitan_toml.empty()) fmt::print("wrote {}\n", options.torchtitan_toml);
  if (!options.trace_path.empty()) fmt::print("wrote {}\n", options.trace_path);
}

}  // namespace

void register_tune_commands(CLI::App& app) {
  auto options = std::make_shared<TuneOptions>();
  CLI::App* tune = app.add_subcommand(
      "tune", "Search bucketing, prefetch, resharding and streams; write the best schedule");
  add_job_options(tune, options->job);
  add_pipeline_options(tune, options->job);
  add_cost_options(tune, options->cost, kDefaultTuneHardware);
  tune->add_option("--memory-limit", options->memory_limit, kMemoryLimitHelp);
  tune->add_option("--step-tolerance", options->step_tolerance,
                   "Of the plans within this fraction of the fastest step (0.001 or 0.1%), "
                   "take the one that reserves the least memory (default 0.1%; 0 = the "
                   "fastest)");
  tune->add_option("--time-budget", options->time_budget_s,
                   "Search time limit in seconds (0 = none: the search runs until it converges "
                   "or --max-evaluations)")
      ->capture_default_str();
  tune->add_option("--max-evaluations", options->max_evaluations,
                   "Stop the search once this many plans were simulated (0 = no limit; "
                   "deterministic); the baselines and seeds, and a batch under way, still run");
  tune->add_option(
          "--threads", options->threads,
          "Plans simulated in parallel (1 to 1024; a batch is 32 plans, more threads idle)")
      ->check(int_range(1, kMaxThreads))
      ->capture_default_str();
  tune->add_flag("--fsdp2-exact", options->fsdp2_exact,
                 "Search only plans FSDP2's fully_shard groups run as simulated (one grouping "
                 "for both collectives, separate streams): what torchtitan can apply "
                 "(--emit-torchtitan says exact)");
  tune->add_flag("--simplefsdp-exact", options->simplefsdp_exact,
                 "Search only plans SimpleFSDP's manual bucketing runs as simulated (one bucket "
                 "list, one reshard setting, one stream, one bucket ahead; compiled jobs "
                 "only): what its torchtitan section can apply (--emit-torchtitan says exact)");
  tune->add_option("--seed", options->seed, "Seed of the search")
      ->check(CLI::Validator(
          [](std::string& value) {
            // "-0" is zero (check_option_values makes it "0").
            const bool negative = value.find('-') != std::string::npos &&
                                  value.find_first_of("123456789") != std::string::npos;
            return negative ? std::string("must not be negative") : std::string();
          },
          ""))
      ->capture_default_str();
  tune->add_option("--out", options->out, "Where to write the schedule file")->required();
  tune->add_option("--emit-torchtitan", options->torchtitan_out,
                   "Also write the bucket plan as torchtitan module groups");
  tune->add_option("--emit-torchtitan-toml", options->torchtitan_toml,
                   "Also write the job as a torchtitan train config (TOML)");
  tune->add_option("--trace", options->trace_path,
                   "Also write a Chrome trace (Perfetto) of the tuned step to FILE (a process "
                   "per pipeline stage when pipelined)")
      ->type_name("FILE");
  tune->add_option("--try-pp-splits", options->try_pp_splits,
                   "Also tune every other split of the blocks into the pipeline stages with "
                   "the embedding and norm+output counted as 0..N blocks each (N <= 4), and "
                   "write the fastest that fits");
  tune->add_option("--keep-gathered", options->keep_gathered,
                   "Pipelined jobs: which ways of running a chunk across microbatches to "
                   "search: any, yes (parameters kept gathered), no (gathered and "
                   "reduce-scattered in each microbatch) or torchtitan (what it runs "
                   "unchanged: yes under PP, no without)")
      ->capture_default_str();
  tune->add_option("--fit", options->fit, kFitHelp)->capture_default_str();
  tune->add_option("--start-plan", options->start_plans,
                   "Also start from this plan (a plan file or a schedule file of tune --out, "
                   "e.g. tuned for other hardware or another mesh of the model; repeatable): "
                   "the tuned plan is never slower than one that fits (beyond "
                   "--step-tolerance); jobs without a pipeline only")
      ->take_all();
  tune->add_flag("--json", options->json, "Print one JSON object instead of the table");
  tune->callback(
      [options] { run_naming_memory_limit(options->memory_limit, [&] { run_tune(*options); }); });
}

}  // namespace fsdptune::cli
