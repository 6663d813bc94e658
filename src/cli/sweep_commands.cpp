// `fsdptune sweep`: rank every mesh / microbatching / AC / float8 configuration of a model
// on N GPUs; `fsdptune pipeline`: simulate one job with pipeline parallelism, stage by
// stage (docs/parallelism.md).
#include <sched.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "cost_options.hpp"
#include "fsdptune/cost_model.hpp"
#include "fsdptune/error.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/memory_bound.hpp"
#include "fsdptune/pipeline.hpp"
#include "fsdptune/plans.hpp"
#include "fsdptune/schedule.hpp"
#include "fsdptune/simulator.hpp"
#include "fsdptune/sweep.hpp"
#include "fsdptune/torchtitan.hpp"
#include "fsdptune/units.hpp"
#include "job_options.hpp"
#include "pipeline_cli.hpp"

namespace fsdptune::cli {
namespace {

std::string mesh_label(const JobSpec& job) {
  std::string label =
      fmt::format("dp_shard {} x dp_replicate {} x tp {} x pp {}",
                  dp_shard_text(job.dp_shard, job.cp), job.dp_replicate, job.tp, job.pp);
  return label;
}

// The cores this process may run on (its CPU affinity: taskset, a container's or a Slurm
// step's cpuset), all of the machine's where that is unknown (found by QA: --threads 0
// said 2 threads under `taskset -c 0`).
int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
}

constexpr const char* kShardedStateReason = "sharded state alone over the memory limit";

nlohmann::json candidate_json(const SweepCandidate& candidate) {
  nlohmann::json json{{"job", job_to_json(candidate.job)},
                      {"fits", candidate.fits},
                      {"step_time_s", candidate.step_time_s},
                      {"tokens_per_s_per_gpu", candidate.tokens_per_s_per_gpu},
                      {"mfu", candidate.mfu},
                      {"bubble_fraction", candidate.bubble_fraction},
                      {"peak_reserved_bytes", candidate.peak_reserved_bytes}};
  json["peak_allocated_bytes"] = candidate.peak_allocated_bytes;
  json["tuned"] = candidate.tuned;
  if (candidate.tuned) json["derived_from"] = candidate.derived_from;
  json["fsdp2_step_time_s"] = candidate.fsdp2_step_time_s;
  // sweep --fit any-timing: what `fits` was judged by (0 when not simulated).
  if (candidate.any_timing_reserved_bytes > 0) {
    json["any_timing_reserved_bytes"] = candidate.any_timing_reserved_bytes;
  }
  if (!candidate.fits) json["rejected"] = candidate.rejected;
  // Rejected by its sharded state alone: never simulated, its figures 0 (found by QA: they
  // read as a simulation's).
  json["simulated"] = candidate.rejection != SweepRejection::kShardedState;
  return json;
}

std::string config_label(const JobSpec& job) {
  std::string text = fmt::format(
      "tp{} pp{} rep{} shard{}{} b{} M{}", job.tp, job.pp, job.dp_replicate, job.dp_shard,
      job.cp > 1 ? fmt::format(" cp{}", job.cp) : "", job.local_batch, job.microbatches);
  if (job.pp > 1) {
    text += " " + to_string(job.pp_schedule);
    if (job.virtual_stages > 1) text += fmt::format(" v{}", job.virtual_stages);
  }
  text += " ac=" + to_string(job.ac);
  if (job.param_dtype == DType::kFP32) text += " fp32";
  if (job.float8) text += " fp8";
  if (job.async_tp) text += " async-tp";
  // The split of the blocks, where it is not torchtitan's default.
  const JobSpec defaults;
  if (job.pp * job.virtual_stages > 1 &&
      (job.pp_first_stage_less_layers != defaults.pp_first_stage_less_layers ||
       job.pp_last_stage_less_layers != defaults.pp_last_stage_less_layers)) {
    text +=
        fmt::format(" split{}/{}", job.pp_first_stage_less_layers, job.pp_last_stage_less_layers);
  }
  return text;
}

struct SweepCliOptions {
  std::string model;
  std::string hardware = kDefaultTuneHardware;
  std::int64_t gpus = 0;  // --gpus, required (checked in run_sweep, with a hint)
  bool gpus_given = false;
  std::optional<std::int64_t> gpus_per_node;  // --gpus-per-node; absent: the hardware's
  std::string global_batch;
  std::int64_t seq = 8192;
  std::string memory_limit;
  int top = 10;
  int threads = 0;  // 0 = every core this process may run on
  std::int64_t max_pp = 16;
  // --cp: the context-parallel degrees tried, comma-separated; not given (cp_given): 1, and
  // --job-toml's degree when it has one, or every power of two up to a node for sequences
  // of kLongSequenceTokens and more.
  std::string cp;
  bool cp_given = false;
  // --pp-first/last-stage-less-layers; absent: --job-toml's, else JobSpec's defaults.
  std::optional<std::int64_t> pp_first_less, pp_last_less;
  std::optional<std::int64_t> try_pp_splits;  // --try-pp-splits N
  bool no_float8 = false;
  bool async_tp = false;
  std::string execution;  // --execution; empty: --job-toml's, else compiled
  bool json = false;
  std::string torchtitan_toml;  // --emit-torchtitan-toml: the best configuration's job
  // --job-toml: a torchtitan config's model, sequence length and global batch (the flags
  // given win); set by the callback: whether --seq was given.
  std::string job_toml;
  bool seq_given = false;
  std::string out;
  std::int64_t tune_evaluations = SweepOptions{}.tune_evaluations;  // per chunk
  std::string step_tolerance;         // FRACTION; empty = SweepOptions' default
  std::string tune_top = "all";       // "all" or K: which configurations are tuned
  std::string keep_gathered = "any";  // --keep-gathered: SweepOptions::keep_gathered
  std::string fit = "predicted";      // --fit: SweepOptions::fit_at_any_timing
  bool fsdp2_exact = false;           // --fsdp2-exact: SweepOptions::fsdp2_exact
  bool simplefsdp_exact = false;      // --simplefsdp-exact: SweepOptions::simplefsdp_exact
};

// The sweep's flag behind a job flag the sweep sets itself: the microbatches come from
// the global batch (`batch_flag`: --global-batch, or the --job-toml it came from), the
// pipeline degrees from --max-pp, the TP degree from the node size.
std::string sweep_flag_of(const std::string& job_flag, const std::string& batch_flag) {
  if (job_flag == "--microbatches" || job_flag == "--batch") return batch_flag;
  if (job_flag == "--pp" || job_flag == "--virtual-stages") return "--max-pp";
  if (job_flag == "--tp") return "--gpus-per-node";
  return job_flag;
}

// {flag: count} of the configurations sweep_jobs left out.
nlohmann::json skipped_by_flag(const SweepSkips& skipped) {
  nlohmann::json by_flag = nlohmann::json::object();
  for (const SweepSkips::Reason& reason : skipped.reasons) by_flag[reason.flag] = reason.count;
  return by_flag;
}

// --tune-top: "all" (-1 in SweepOptions) or a count K >= 0.
std::int64_t parse_tune_top(const std::string& text) {
  if (text == "all") return -1;
  const bool digits =
      !text.empty() && text.size() <= 9 &&
      std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
  if (!digits) {
    throw_bad_input("--tune-top", fmt::format("'{}' is neither 'all' nor a count >= 0", text));
  }
  return std::stoll(text);
}

// --cp "1,2,4": the degrees, each 1 to kMaxJobGpus, in the order given, no repeats.
// From this sequence length on, `sweep` tries context parallelism without being asked.
constexpr std::int64_t kLongSequenceTokens = 32768;

std::vector<std::int64_t> parse_cp_degrees(const std::string& text) {
  const std::string what = fmt::format("distinct degrees from 1 to {} (e.g. 1,2,4)", kMaxJobGpus);
  const std::vector<std::int64_t> degrees = parse_count_list(text, "--cp", what, 64);
  for (std::size_t i = 0; i < degrees.size(); ++i) {
    if (degrees[i] < 1 || degrees[i] > kMaxJobGpus ||
        std::find(degrees.begin(), degrees.begin() + static_cast<std::ptrdiff_t>(i), degrees[i]) !=
            degrees.begin() + static_cast<std::ptrdiff_t>(i)) {
      throw_bad_input("--cp", fmt::format("'{}' is not a comma-separated list of {}", text, what));
    }
  }
  return degrees;
}

void run_sweep(const SweepCliOptions& o) {
  require_distinct_files({{"--out", o.out}, {"--emit-torchtitan-toml", o.torchtitan_toml}},
                         {{"--job-toml", o.job_toml},
                          {"--model", input_file(o.model)},
                          {"--hardware", input_file(o.hardware)}});
  // --top and --threads: int_range at the flags.
  // A torchtitan config gives no world size (its launcher does): said so (found by QA:
  // "--gpus is required" for `sweep --job-toml`, where simulate takes its degrees').
  if (!o.gpus_given) {
    throw_bad_input("--gpus", "required: the world size the sweep lays out",
                    o.job_toml.empty() ? ""
                                       : "a --job-toml gives the model, sequence length and "
                                         "global batch, not the world size (torchtitan's "
                                         "launcher does)");
  }
  if (o.gpus < 1) throw_bad_input("--gpus", "must be >= 1");
  // As every job is (normalize_job), before the batch is judged over it (found by QA: 10^9
  // GPUs were blamed on --global-batch, whose 8 sequences do not divide over them).
  if (o.gpus > kMaxJobGpus) {
    throw_bad_input("--gpus", fmt::format("{} is more than fsdptune simulates (at most {})", o.gpus,
                                          kMaxJobGpus));
  }
  if (o.gpus_per_node && *o.gpus_per_node < 1) {
    throw_bad_input("--gpus-per-node", "must be >= 1");
  }
  if (o.max_pp < 1) throw_bad_input("--max-pp", "must be >= 1");
  // The model, sequence length and global batch: the flags', else --job-toml's.
  std::string model_name = o.model;
  std::int64_t seq = o.seq;
  std::string global_batch = o.global_batch;
  std::int64_t first_less = JobSpec{}.pp_first_stage_less_layers;
  std::int64_t last_less = JobSpec{}.pp_last_stage_less_layers;
  Execution execution = Execution::kCompiled;
  std::string cp = o.cp_given ? o.cp : "1";
  // What the skips and errors of the global batch name: the flag, or the config it came
  // from (found by QA: "11 --global-batch" skipped where no --global-batch was given).
  std::string batch_flag = "--global-batch";
  if (!o.job_toml.empty()) {
    const TorchtitanConfig config = read_flag_file(
        "--job-toml", o.job_toml, [&] { return read_torchtitan_config(o.job_toml); });
    // As the other commands say them (QA, 2026-12-05: a misspelt degree changed the global
    // batch without a word).
    // Only those about the keys read: the sweep ranks its own meshes, not the config's
    // (found by QA: its reshard policy under PP was noted as priced).
    for (const std::string& note : torchtitan_key_notes(config)) {
      fmt::print(stderr, "note: {}\n", note);
    }
    if (o.execution.empty()) execution = torchtitan_execution(config);
    if (!o.cp_given && config.cp > 1) cp = fmt::format("1,{}", config.cp);
    first_less = config.pp_first_stage_less_layers;
    last_less = config.pp_last_stage_less_layers;
    if (model_name.empty()) model_name = torchtitan_builtin_model(config);
    if (!o.seq_given) seq = config.seq_len;
    if (global_batch.empty()) {
      global_batch = std::to_string(torchtitan_global_batch(config, o.gpus));
      batch_flag = "--job-toml's global batch";
    }
  } else if (model_name.empty() || global_batch.empty()) {
    throw_bad_input(model_name.empty() ? "--model" : "--global-batch", "is required",
                    "give it, or --job-toml with a torchtitan config");
  }
  if (seq < 1) throw_bad_input("--seq", "must be >= 1");
  const HardwareSpec hardware = resolve_hardware_option(o.hardware);
  const std::int64_t gpus_per_node = o.gpus_per_node.value_or(hardware.gpus_per_node);
  if (o.gpus_per_node) note_gpus_per_node(*o.gpus_per_node, hardware);
  // Long sequences: context parallelism is what makes them fit, so it is tried unless
  // --cp (or the config's degree) says otherwise: every power of two up to a node.
  if (!o.cp_given && cp == "1" && seq >= kLongSequenceTokens) {
    for (std::int64_t degree = 2; degree <= gpus_per_node; degree *= 2) {
      cp += fmt::format(",{}", degree);
    }
    if (cp != "1") {
      fmt::print(stderr,
                 "sweep: sequences of {} tokens: also trying context parallelism (--cp {}; "
                 "--cp 1 for none)\n",
                 seq, cp);
    }
  }
  const ModelSpec model = resolve_model_noted(model_name);
  const std::unique_ptr<CostModel> costs = make_analytic_cost_model(hardware);
  SweepOptions options;
  options.gpus = o.gpus;
  options.gpus_per_node = gpus_per_node;
  options.seq_len = seq;
  options.global_batch_sequences = parse_global_batch_sequences(global_batch, seq);
  if (!o.memory_limit.empty()) {
    options.memory_limit_bytes = given_memory_limit(o.memory_limit, hardware);
  }
  options.try_float8 = !o.no_float8;
  options.try_async_tp = o.async_tp;
  options.execution =
      o.execution.empty() ? execution : execution_from_string(o.execution, "--execution");
  if (options.try_async_tp && options.execution != Execution::kCompiled) {
    throw_bad_input(
        "--async-tp",
        fmt::format("async TP runs only compiled, not {}", to_string(options.execution)),
        "drop --async-tp, or sweep compiled (--execution compiled)");
  }
  options.max_pp = o.max_pp;
  options.keep_gathered = parse_keep_gathered(o.keep_gathered, "--keep-gathered");
  options.fit_at_any_timing = parse_fit_at_any_timing(o.fit);
  options.fsdp2_exact = o.fsdp2_exact;
  options.simplefsdp_exact = o.simplefsdp_exact;
  // Before the configurations are laid out (sweep() checks it too, for library callers).
  TunerOptions exactness;
  exactness.fsdp2_exact = o.fsdp2_exact;
  exactness.simplefsdp_exact = o.simplefsdp_exact;
  check_exactness(exactness, options.execution, "sweep");
  options.cp_degrees = parse_cp_degrees(cp);
  options.pp_first_stage_less_layers = o.pp_first_less.value_or(first_less);
  options.pp_last_stage_less_layers = o.pp_last_less.value_or(last_less);
  for (const auto& [flag, value] :
       {std::pair{"--pp-first-stage-less-layers", options.pp_first_stage_less_layers},
        std::pair{"--pp-last-stage-less-layers", options.pp_last_stage_less_layers}}) {
    if (value < 0 || value > kMaxModelLayers) {
      throw_bad_input(flag,
                      fmt::format("must be between 0 and {}, got {}", kMaxModelLayers, value));
    }
  }
  check_try_pp_splits(o.try_pp_splits);
  options.try_pp_less_layers = o.try_pp_splits.value_or(-1);
  options.tune_top = parse_tune_top(o.tune_top);
  if (o.tune_evaluations < 1) throw_bad_input("--tune-evaluations", "must be >= 1");
  options.tune_evaluations = o.tune_evaluations;
  if (!o.step_tolerance.empty()) {
    options.step_time_tolerance = parse_fraction(o.step_tolerance, "--step-tolerance");
  }
  options.threads = o.threads > 0 ? o.threads : usable_cores();
  SweepSkips skipped;
  const std::size_t total = sweep_jobs(model, hardware, options, &skipped).size();
  for (SweepSkips::Reason& reason : skipped.reasons) {
    if (reason.flag == "--global-batch") reason.flag = batch_flag;
  }
  // A sequence that splits into no 2 x cp chunks is --seq's (found by QA: `--seq 8190 --cp
  // 2` blamed --cp, "try powers of two"), named below with its reason.
  if (total == 0 && options.cp_degrees != std::vector<std::int64_t>{1} &&
      (skipped.count == 0 || skipped.main_reason().flag != "--seq")) {
    // The CP degrees asked for divide no mesh's shard group, where without CP there would
    // be configurations: --cp is at fault, not --gpus.
    SweepOptions without_cp = options;
    without_cp.cp_degrees = {1};
    if (!sweep_jobs(model, hardware, without_cp).empty()) {
      const bool powers_of_two =
          std::all_of(options.cp_degrees.begin(), options.cp_degrees.end(),
                      [](std::int64_t degree) { return (degree & (degree - 1)) == 0; });
      throw_bad_input("--cp " + cp,
                      fmt::format("no configuration of {} on {} at a global batch of {} "
                                  "has these context-parallel degrees",
                                  model.name, counted(o.gpus, "GPU"),
                                  counted(options.global_batch_sequences, "sequence")),
                      fmt::format("a CP degree must divide a shard group (dp_shard) and the "
                                  "sequence into 2 x cp chunks{}",
                                  powers_of_two ? "" : "; try powers of two"));
    }
  }
  if (total == 0) {
    // Named after the most frequent reason, with its message (found probing: `--seq
    // 99999999999` and a global batch of more microbatches than simulated both blamed
    // --gpus).
    const bool nodes = o.gpus > gpus_per_node && o.gpus % gpus_per_node != 0;
    const std::string flag = nodes || skipped.count == 0
                                 ? "--gpus"
                                 : sweep_flag_of(skipped.main_reason().flag, batch_flag);
    throw_bad_input(
        flag,
        fmt::format("no valid configuration of {} on {} at a global batch of {}{}", model.name,
                    counted(o.gpus, "GPU"), counted(options.global_batch_sequences, "sequence"),
                    skipped.count == 0
                        ? std::string()
                        : fmt::format(" ({} skipped: {}); the first: {}", skipped.count,
                                      skipped.summary(), skipped.main_reason().message)),
        nodes ? fmt::format("{} GPUs do not fill nodes of {} (--gpus-per-node)", o.gpus,
                            gpus_per_node)
        // Found by QA: no value offered.
        : flag == batch_flag && skipped.batch_above > 0
            ? fmt::format("give {} a batch one of the meshes here divides over its "
                          "data-parallel ranks, e.g. {} sequences",
                          batch_flag,
                          skipped.batch_below > 0
                              ? fmt::format("{} or {}", skipped.batch_below, skipped.batch_above)
                              : std::to_string(skipped.batch_above))
            : "");
  }
  fmt::print(stderr, "sweep: {} configurations ({} skipped{}), {}\n", total, skipped.count,
             skipped.count > 0 ? ": " + skipped.summary() : std::string(),
             counted(options.threads, "thread"));
  std::int64_t last_percent = -1;
  bool last_tuning = false;
  options.progress = [&](const SweepProgress& progress) {
    const std::int64_t percent = 100 * progress.done / progress.total;
    if (progress.tuning != last_tuning || percent / 10 != last_percent / 10 ||
        progress.done == progress.total) {
      // "checked": simulated, or rejected before simulation, as the summary counts them
      // (found by QA: "simulated 3120/3120" above "2160 configurations simulated").
      fmt::print(stderr, "sweep: {} {}/{} ({}%)\n", progress.tuning ? "tuned" : "checked",
                 progress.done, progress.total, percent);
      last_percent = percent;
      last_tuning = progress.tuning;
    }
  };
  const SweepResult result = sweep(model, *costs, options);
  if (result.tuned == 0) {
    fmt::print(stderr, "sweep: no configuration tuned\n");
  } else {
    // The cap is checked once the baselines and seeds are simulated (review: "at most 1 per
    // chunk" beside 39 plans simulated).
    fmt::print(stderr,
               "sweep: {} tuned ({} plans simulated; each chunk's search capped at {}, checked "
               "once its baselines and seeds are simulated)\n",
               counted(result.tuned, "configuration"), result.plans_evaluated, o.tune_evaluations);
  }

  // Nothing fits: the rankings and rejections are printed, nothing is written, exit 3 (as
  // tune's).
  const auto nothing_fits = [&] {
    std::string unwritten;
    for (const auto& [flag, path] :
         {std::pair{"--out", &o.out}, std::pair{"--emit-torchtitan-toml", &o.torchtitan_toml}}) {
      if (!path->empty()) unwritten += fmt::format("; nothing written to {}", flag);
    }
    // Where every configuration's sharded state alone is over the limit, the GPUs that
    // bring the model's (16 bytes a parameter: fp32 weights, gradients, AdamW's m and v)
    // under it, in whole nodes; a limit raised only where one was given (the default is
    // the GPU's memory less its reserve). Found by QA: "raise --memory-limit or add GPUs"
    // where simulate and tune name the GPUs.
    std::vector<std::string> ways;
    if (!o.memory_limit.empty()) ways.emplace_back("raise --memory-limit");
    const bool state_alone =
        !result.rejected.empty() &&
        std::all_of(result.rejected.begin(), result.rejected.end(), [](const auto& candidate) {
          return candidate.rejection == SweepRejection::kShardedState;
        });
    const double state_bytes = 16.0 * static_cast<double>(parameter_count(model));
    std::int64_t gpus = 0;
    if (state_alone && result.memory_limit_bytes > 0) {
      const double at_least = state_bytes / static_cast<double>(result.memory_limit_bytes);
      if (at_least < static_cast<double>(kMaxJobGpus)) {
        gpus = std::max<std::int64_t>(o.gpus + 1, static_cast<std::int64_t>(std::ceil(at_least)));
        if (gpus > gpus_per_node) gpus = (gpus + gpus_per_node - 1) / gpus_per_node * gpus_per_node;
        if (gpus > kMaxJobGpus) gpus = 0;
      }
    }
    ways.push_back(gpus > 0 ? fmt::format("shard over at least {} GPUs (--gpus {}: the model's "
                                          "sharded state, {} in all, is over the limit on "
                                          "fewer)",
                                          gpus, gpus,
                                          format_bytes(static_cast<std::int64_t>(state_bytes)))
                            : "add GPUs");
    if (options.fit_at_any_timing)
      ways.emplace_back("judge fit at the predicted timing (--fit predicted)");
    return Error(
        ErrorKind::kDoesNotFit, "--memory-limit",
        fmt::format("no configuration fits under {}{}{}", format_bytes(result.memory_limit_bytes),
                    options.fit_at_any_timing ? " at any timing (--fit any-timing)" : "",
                    unwritten),
        join_alternatives(ways, ", or "));
  };
  // --out and --emit-torchtitan-toml, written together: both or neither.
  std::vector<OutputFile> outputs;
  if (!o.torchtitan_toml.empty() && !result.ranked.empty()) {
    const JobSpec& best = result.ranked.front().job;
    outputs.push_back({o.torchtitan_toml, torchtitan_config_toml(model_name, model, best),
                       "--emit-torchtitan-toml"});
    for (const std::string& config_note :
         {torchtitan_without_fsdp_note(best), torchtitan_dtype_note(best)}) {
      if (!config_note.empty())
        fmt::print(stderr, "note: {}: {}\n", o.torchtitan_toml, config_note);
    }
  }
  // The note on the winner's chunks as its figures run them: its written schedule's (set
  // below), else its search's, else fsdp2's.
  std::optional<std::string> written_note;
  std::string best_written;
  if (!o.out.empty() && !result.ranked.empty()) {
    // The best configuration's tuned schedule (per stage when pipelined): version 1 for
    // pp = 1 and one microbatch, else version 2 (docs/schedule-format.md). Its search was
    // run by the sweep (deterministic budget, no clock): its result is written, not
    // searched again. A winner whose figures are not tuned (--tune-top 0, or fsdp2 kept)
    // is tuned here with the same options.
    const SweepCandidate& best = result.ranked.front();
    const Workload workload = build_workload(model, best.job);
    TunedSchedule tuned;
    if (result.best_tuning) {
      tuned = schedule_of_tuning(workload, hardware, *costs, *result.best_tuning);
    } else {
      fmt::print(stderr,
                 "sweep: tuning the best configuration (capped at {} per chunk, checked once "
                 "its baselines and seeds are simulated)\n",
                 counted(o.tune_evaluations, "plan"));
      tuned =
          tune_schedule(workload, hardware, *costs,
                        sweep_tuner_options(options, result.memory_limit_bytes, options.threads));
    }
    ScheduleFile& schedule = tuned.schedule;
    schedule.provenance.tool = std::string("fsdptune ") + FSDPTUNE_VERSION;
    schedule.provenance.cost_source = hardware.id;
    schedule.provenance.cost_hash = fnv1a64_hex(dump_json(hardware_to_json(hardware)));
    schedule.provenance.threads = options.threads;
    schedule.provenance.job_hash = schedule_job_hash(schedule.job);
    schedule.provenance.command = fmt::format(
        "fsdptune sweep --model {} --hardware {} --gpus {} --gpus-per-node {} --global-batch {} "
        "--seq {}{} --max-pp {}{}{}{}{} --tune-top {} --tune-evaluations {}{}",
        shell_word(model_name), shell_word(o.hardware), o.gpus, options.gpus_per_node,
        shell_word(global_batch), seq,
        o.memory_limit.empty() ? "" : " --memory-limit " + shell_word(o.memory_limit), o.max_pp,
        cp == "1" ? "" : " --cp " + cp, o.no_float8 ? " --no-float8" : "",
        o.async_tp ? " --async-tp" : "",
        options.execution != Execution::kCompiled ? " --execution " + to_string(options.execution)
                                                  : "",
        o.tune_top, o.tune_evaluations,
        o.keep_gathered == "any" ? "" : " --keep-gathered " + o.keep_gathered);
    // The flags that change the ranking or the pick, as resolved (a --job-toml's split).
    const JobSpec defaults;
    if (options.pp_first_stage_less_layers != defaults.pp_first_stage_less_layers ||
        options.pp_last_stage_less_layers != defaults.pp_last_stage_less_layers) {
      schedule.provenance.command +=
          fmt::format(" --pp-first-stage-less-layers {} --pp-last-stage-less-layers {}",
                      options.pp_first_stage_less_layers, options.pp_last_stage_less_layers);
    }
    if (o.try_pp_splits) {
      schedule.provenance.command += fmt::format(" --try-pp-splits {}", *o.try_pp_splits);
    }
    if (!o.step_tolerance.empty()) {
      schedule.provenance.command += " --step-tolerance " + shell_word(o.step_tolerance);
    }
    if (options.fit_at_any_timing) schedule.provenance.command += " --fit any-timing";
    // Where given: the file's provenance.threads is the count used (found by QA: rerun
    // without it on another core count, the bytes differed there).
    if (o.threads > 0) schedule.provenance.command += fmt::format(" --threads {}", o.threads);
    if (options.fsdp2_exact) schedule.provenance.command += " --fsdp2-exact";
    if (options.simplefsdp_exact) schedule.provenance.command += " --simplefsdp-exact";
    outputs.push_back({o.out, schedule_file_text(schedule, o.out), "--out"});
    written_note = torchtitan_keep_gathered_note(schedule);
    // Its memory beside its time, and, where the ranked row's figures were fsdp2's, those
    // (found by QA: a 0.5% faster plan reserving 24 GiB more was announced by its time).
    // A version 2 schedule's predicted peaks are its largest stage's.
    best_written = fmt::format(
        "{} (schedule format version {}, {}, {} reserved, from {}){}", o.out,
        schedule.pipeline ? kPipelineScheduleFormatVersion : kScheduleFormatVersion,
        format_seconds(schedule.predicted.step_time_s),
        format_bytes(schedule.predicted.peak_reserved_bytes), tuned.derived_from,
        result.best_tuning ? std::string()
                           : fmt::format("; the row ranked it by fsdp2's figures, {} and {} "
                                         "reserved",
                                         format_seconds(best.step_time_s),
                                         format_bytes(best.peak_reserved_bytes)));
  }
  // Said where its schedule or config is written, as tune says it.
  const std::string& note_subject = o.torchtitan_toml.empty() ? o.out : o.torchtitan_toml;
  if (!note_subject.empty() && !result.ranked.empty()) {
    const JobSpec& best = result.ranked.front().job;
    const std::string note =
        written_note ? *written_note
                     : torchtitan_keep_gathered_note(
                           best, result.best_tuning && result.best_tuning->pipeline
                                     ? result.best_tuning->pipeline->best.chunk_keep_gathered
                                     : std::vector<bool>(
                                           static_cast<std::size_t>(best.pp * best.virtual_stages),
                                           baseline_keep_gathered(options.keep_gathered, best)));
    if (!note.empty()) fmt::print(stderr, "note: {}: {}\n", note_subject, note);
  }
  write_files_atomically(outputs);

  const std::size_t shown =
      std::min<std::size_t>(static_cast<std::size_t>(o.top), result.ranked.size());
  std::map<std::string, std::int64_t> reasons;
  const auto unsimulated = static_cast<std::size_t>(std::count_if(
      result.rejected.begin(), result.rejected.end(),
      [](const SweepCandidate& c) { return c.rejection == SweepRejection::kShardedState; }));
  for (const SweepCandidate& candidate : result.rejected) {
    // Not simulated (the sharded state alone is too large) or simulated over the limit.
    ++reasons[candidate.rejection == SweepRejection::kShardedState ? kShardedStateReason
              : candidate.rejection == SweepRejection::kPeakAtAnyTiming
                  ? "no plan found within the limit at every timing (--fit any-timing)"
              : candidate.rejection == SweepRejection::kNotSimpleFsdp
                  ? "not tuned to a plan SimpleFSDP runs (--simplefsdp-exact)"
                  : "simulated peak reserved memory over the limit"];
  }
  if (o.json) {
    nlohmann::json top = nlohmann::json::array();
    for (std::size_t i = 0; i < shown; ++i) {
      top.push_back(candidate_json(result.ranked[i]));
    }
    nlohmann::json rejected = nlohmann::json::array();
    for (const SweepCandidate& candidate : result.rejected) {
      rejected.push_back(candidate_json(candidate));
    }
    nlohmann::json out = {{"format", "fsdptune-sweep"},
                          {"version", 1},
                          {"model", model.name},
                          {"hardware", hardware.id},
                          {"gpus", o.gpus},
                          {"global_batch_sequences", options.global_batch_sequences},
                          {"seq_len", seq},
                          {"memory_limit_bytes", result.memory_limit_bytes},
                          {"evaluated", total},
                          {"simulated", total - unsimulated},
                          {"fitting", result.ranked.size()},
                          {"tuned", result.tuned},
                          {"tune_evaluations", o.tune_evaluations},
                          {"step_time_tolerance", options.step_time_tolerance},
                          {"fit", o.fit},
                          {"plans_evaluated", result.plans_evaluated},
                          {"skipped_meshes", skipped.count},
                          {"skipped_by_flag", skipped_by_flag(skipped)},
                          {"top", top},
                          {"rejected", rejected}};
    // Only when given: the JSON of other sweeps keeps its text (found by review: the
    // restriction was recorded nowhere but in --out's command).
    if (options.fsdp2_exact) out["fsdp2_exact"] = true;
    if (options.simplefsdp_exact) out["simplefsdp_exact"] = true;
    fmt::print("{}", dump_json(out));
    if (result.ranked.empty()) throw nothing_fits();
    return;
  }
  fmt::print("{} on {} x {}, global batch {} sequences of {} tokens, memory limit {}{}\n",
             model.name, o.gpus, hardware.id, options.global_batch_sequences, seq,
             format_bytes(result.memory_limit_bytes),
             options.fit_at_any_timing ? " at any timing (--fit any-timing)" : "");
  // A blank line before the table, none over no table (the rejections start with one).
  fmt::print("{} simulated{}, {} fit; {} tuned{}\n{}",
             counted(total - unsimulated, "configuration"),
             unsimulated == 0 ? std::string()
                              : fmt::format(" ({} more rejected before simulation: {})",
                                            unsimulated, kShardedStateReason),
             result.ranked.size(), result.tuned,
             o.tune_top == "0" ? std::string()
                               : fmt::format(" (capped at {} per chunk, checked once the "
                                             "baselines and seeds are simulated)",
                                             counted(o.tune_evaluations, "plan")),
             shown > 0 ? "\n" : "");
  const bool any_timing = options.fit_at_any_timing;
  // The configuration column as wide as its longest label (found by QA: a split of an
  // interleaved async-TP row pushed its figures right).
  std::size_t label_width = 62;
  for (std::size_t i = 0; i < shown; ++i) {
    const SweepCandidate& c = result.ranked[i];
    label_width = std::max(label_width, config_label(c.job).size() + (c.tuned ? 6 : 0));
  }
  if (shown > 0) {  // no header over no rows when nothing fits
    fmt::print("{:>3}  {:<{}} {:>11} {:>13} {:>7} {:>7} {:>12}{}\n", "#", "configuration",
               label_width, "step time", "tokens/s/GPU", "MFU", "bubble", "peak reserv",
               any_timing ? fmt::format(" {:>12}", "any timing") : "");
  }
  for (std::size_t i = 0; i < shown; ++i) {
    const SweepCandidate& c = result.ranked[i];
    fmt::print("{:>3}  {:<{}} {:>11} {:>13.1f} {:>6.1f}% {:>6.1f}% {:>12}{}\n", i + 1,
               config_label(c.job) + (c.tuned ? " tuned" : ""), label_width,
               format_seconds(c.step_time_s), c.tokens_per_s_per_gpu, 100.0 * c.mfu,
               100.0 * c.bubble_fraction, format_bytes(c.peak_reserved_bytes),
               any_timing ? fmt::format(" {:>12}", format_bytes(c.any_timing_reserved_bytes)) : "");
  }
  // (The sweep prices with the analytic model; nothing to qualify without a row: QA.)
  if (shown > 0) fmt::print("{}\n", kThroughputCaveat);
  // Two bases in one column, said so (found by QA: the fastest rows, fp8, showed a lower MFU
  // than a slower bf16 one).
  if (std::any_of(result.ranked.begin(), result.ranked.begin() + static_cast<std::ptrdiff_t>(shown),
                  [](const SweepCandidate& c) { return c.job.float8; })) {
    fmt::print(
        "\nMFU of an fp8 row is of the hardware's fp8 peak, of the others of its bf16 peak "
        "(torchtitan logs a float8 run's against bf16's: twice this on an H100; "
        "docs/report.md)\n");
  }
  // Meshes of one shard rank listed: torchtitan applies no fully_shard there; with TP or
  // PP they are ranked in fp32 (sweep_jobs), else in mixed precision as under autocast.
  std::vector<std::string> unsharded;
  bool fp32 = false;
  for (std::size_t i = 0; i < shown; ++i) {
    const JobSpec& job = result.ranked[i].job;
    if (!torchtitan_without_fsdp_note(job).empty()) {
      unsharded.push_back(fmt::format("#{}", i + 1));
      fp32 = fp32 || !torchtitan_mixed_precision(job);
    }
  }
  if (!unsharded.empty()) {
    fmt::print(
        "\n{} {} shard1: FSDP2 over one-rank groups, where torchtitan would apply no "
        "fully_shard{}, docs/torchtitan-config.md\n",
        fmt::join(unsharded, ", "), unsharded.size() == 1 ? "is" : "are",
        fp32 ? " (with TP or PP ranked in fp32: torchtitan trains those without mixed "
               "precision)"
             : "");
  }
  if (!result.rejected.empty()) {
    fmt::print("\nrejected: {}\n",
               counted(static_cast<std::int64_t>(result.rejected.size()), "configuration"));
    for (const auto& [reason, count] : reasons) fmt::print("  {:>6}  {}\n", count, reason);
    // The rejected configuration with the highest throughput: what memory cost it.
    const SweepCandidate* fastest = nullptr;
    for (const SweepCandidate& c : result.rejected) {
      if (c.tokens_per_s_per_gpu > 0 &&
          (fastest == nullptr || c.tokens_per_s_per_gpu > fastest->tokens_per_s_per_gpu)) {
        fastest = &c;
      }
    }
    if (fastest != nullptr) {
      fmt::print("  fastest rejected: {} ({:.1f} tokens/s/GPU): {}\n", config_label(fastest->job),
                 fastest->tokens_per_s_per_gpu, fastest->rejected);
    }
  }
  if (skipped.count > 0) {
    // The configurations left out, by the flag at fault, each with its first message.
    fmt::print("skipped: {} configurations ({})\n", skipped.count, skipped.summary());
    for (const SweepSkips::Reason& reason : skipped.reasons) {
      fmt::print("  {}: {} (e.g. {})\n", reason.flag, reason.count, reason.message);
    }
  }
  if (result.ranked.empty()) throw nothing_fits();
  if (!o.out.empty()) fmt::print("\nwrote the best configuration, tuned, to {}\n", best_written);
  if (!o.torchtitan_toml.empty()) {
    fmt::print("wrote the best configuration as a torchtitan config to {}\n", o.torchtitan_toml);
  }
}

struct PipelineCliOptions {
  JobOptions job;
  std::string hardware = kDefaultTuneHardware;
  std::string memory_limit;
  std::string keep_gathered;  // --keep-gathered yes|no|torchtitan (resolve_keep_gathered)
  bool json = false;
  bool require_fit = false;  // exit 3 when a stage's reserved peak is over the limit
};

void run_pipeline(const PipelineCliOptions& o) {
  const ModelSpec model = resolve_model_option(o.job);
  const HardwareSpec hardware = resolve_hardware_option(o.hardware);
  const JobSpec job = to_job_spec(o.job, model, &hardware);
  validate_pipeline(job);
  PlanOptions keep_option;
  keep_option.keep_gathered = o.keep_gathered;
  const bool keep = resolve_keep_gathered(keep_option, job);
  check_job_hardware(job, hardware);
  const std::unique_ptr<CostModel> costs = make_analytic_cost_model(hardware);
  const std::int64_t limit = o.memory_limit.empty() ? default_memory_limit_bytes(hardware)
                                                    : given_memory_limit(o.memory_limit, hardware);
  const Workload workload = build_workload(model, job);
  SimOptions options;
  options.record_timeline = false;
  const auto chunks = pipeline_chunks(workload);
  std::vector<Plan> plans;
  for (const std::vector<int>& units : chunks) {
    plans.push_back(fsdp2_plan(chunk_workload(workload, units)));
  }
  const PipelineSimulation sim = simulate_pipelined_plans(
      workload, *costs, plans, std::vector<bool>(chunks.size(), keep), options);
  const std::vector<StageAnyTiming> any_timing = pipeline_any_timing(sim);
  if (o.json) {
    nlohmann::json stages = nlohmann::json::array();
    for (const StageResult& stage : sim.result.stages) {
      nlohmann::json chunk_units = nlohmann::json::array();
      for (int c = stage.rank; c < static_cast<int>(chunks.size()); c += static_cast<int>(job.pp)) {
        nlohmann::json names = nlohmann::json::array();
        for (int u : chunks[c]) names.push_back(workload.units[u].name);
        chunk_units.push_back(names);
      }
      stages.push_back({{"rank", stage.rank},
                        {"chunks", chunk_units},
                        {"busy_s", stage.busy_s},
                        {"held_s", stage.held_s},
                        {"pipeline_end_s", stage.pipeline_end_s},
                        {"end_s", stage.end_s},
                        {"max_in_flight", stage.max_in_flight},
                        {"peak_allocated_bytes", stage.peak_allocated_bytes},
                        {"peak_reserved_bytes", stage.peak_reserved_bytes},
                        {"fits", stage_fits(stage, limit)}});
    }
    nlohmann::json out = {{"format", "fsdptune-pipeline"},
                          {"version", 1},
                          {"model", model.name},
                          {"hardware", hardware.id},
                          {"job", job_to_json(job)},
                          {"step_time_s", sim.result.step_time_s},
                          {"bubble_fraction", sim.result.bubble_fraction},
                          {"tokens_per_s_per_gpu", sim.tokens_per_s_per_gpu},
                          {"mfu", sim.mfu},
                          {"send_s", sim.spec.send_s},
                          {"memory_limit_bytes", limit},
                          {"keep_gathered", keep},
                          {"stages", stages}};
    add_pipeline_any_timing_json(out, any_timing, limit);
    fmt::print("{}", dump_json(out));
    flush_stdout_before_error();
    if (o.require_fit) require_pipeline_fit(workload.model, job, sim, limit);
    return;
  }
  fmt::print("{} on {} x {}: {}, {} of {} x {} tokens, {}{}\n", model.name, job.gpus, hardware.id,
             mesh_label(job), microbatches_text(job), job.local_batch, job.seq_len,
             pipeline_schedule_text(job),
             job.virtual_stages > 1 ? fmt::format(" ({} virtual stages)", job.virtual_stages) : "");
  fmt::print("fsdp2 per chunk, parameters {}\n",
             keep ? "kept gathered across microbatches" : "re-gathered every microbatch");
  // Without a pipeline nothing is sent (and there is no bubble to speak of).
  fmt::print("step time {}   tokens/s/GPU {:.1f}   MFU {:.1f}%{}{}\n{}\n\n",
             format_seconds(sim.result.step_time_s), sim.tokens_per_s_per_gpu, 100.0 * sim.mfu,
             mfu_basis_note(sim.mfu, job, hardware),
             job.pp > 1
                 ? fmt::format("   bubble {:.1f}%   send {}", 100.0 * sim.result.bubble_fraction,
                               format_seconds(sim.spec.send_s))
                 : std::string(),
             kThroughputCaveat);
  print_stage_table(workload, chunks, sim.result.stages, any_timing, limit);
  const bool fits = pipeline_fits(sim.result, limit);
  fmt::print("{}", pipeline_any_timing_text(any_timing, limit, fits));
  flush_stdout_before_error();
  if (o.require_fit) require_pipeline_fit(workload.model, job, sim, limit);
}

}  // namespace

void register_sweep_commands(CLI::App& app) {
  {
    auto options = std::make_shared<SweepCliOptions>();
    CLI::App* command = app.add_subcommand(
        "sweep",
        "Tune and rank meshes, microbatching, AC and float8 for a model on N GPUs by tokens/s/GPU");
    command->add_option("--model", options->model,
                        "Built-in model, model file or config.json (or --job-toml's)");
    command->add_option("--job-toml", options->job_toml,
                        "torchtitan train config: its model, seq_len and global batch (local "
                        "batch x data-parallel degree on --gpus) unless given "
                        "(docs/torchtitan-config.md)");
    command
        ->add_option("--hardware", options->hardware,
                     "Hardware: a built-in id (h100-sxm, h200, a100-80g) or a spec file")
        ->capture_default_str();
    command->add_option("--gpus", options->gpus, "World size (required)");
    command->add_option("--gpus-per-node", options->gpus_per_node,
                        "GPUs per node (default: the hardware spec's gpus_per_node, 8 for the "
                        "built-in GPUs)");
    command->add_option("--global-batch", options->global_batch,
                        "Sequences per step (1024), or tokens with 'tok' (8Mtok, 8388608tok); "
                        "required unless --job-toml");
    command->add_option("--seq", options->seq, "Sequence length")->capture_default_str();
    command->add_option("--memory-limit", options->memory_limit, kMemoryLimitHelp);
    command->add_option("--top", options->top, "Configurations to print")
        ->check(int_range(1, std::numeric_limits<int>::max()))
        ->capture_default_str();
    command
        ->add_option("--threads", options->threads,
                     "Configurations simulated / tuned at once, one per thread (0 = every core "
                     "this process may run on; at most 1024)")
        ->check(int_range(0, kMaxThreads, "0 (every core this process may run on)"))
        ->capture_default_str();
    command->add_option("--max-pp", options->max_pp, "Largest pipeline degree tried")
        ->capture_default_str();
    command->add_option("--cp", options->cp,
                        "Context-parallel degrees tried, comma-separated (e.g. 1,2,4), each where "
                        "it divides a mesh's shard group and the sequence (default 1, and "
                        "--job-toml's degree; for sequences of 32768 tokens and more every "
                        "power of two up to a node)");
    command->add_option("--pp-first-stage-less-layers", options->pp_first_less,
                        "Blocks the embedding counts as in the split into pipeline stages "
                        "(default 1, torchtitan's; or --job-toml's)");
    command->add_option("--pp-last-stage-less-layers", options->pp_last_less,
                        "Blocks norm+output count as in the split (default 1; or --job-toml's)");
    command->add_option("--try-pp-splits", options->try_pp_splits,
                        "Also try every split of the blocks into pipeline stages with the "
                        "embedding and norm+output counted as 0..N blocks each (N <= 4)");
    command->add_flag("--no-float8", options->no_float8, "Do not try float8");
    command->add_flag("--async-tp", options->async_tp, "Also try async TP where tp > 1");
    command->add_option("--execution", options->execution,
                        "compiled, eager or eager-unfused-rmsnorm (default: compiled, or "
                        "--job-toml's compile setting)");
    command->add_flag("--json", options->json, "Print JSON instead of a table");
    command->add_option("--out", options->out,
                        "Write the best configuration's tuned schedule file here");
    command->add_option("--emit-torchtitan-toml", options->torchtitan_toml,
                        "Write the best configuration as a torchtitan train config (TOML) here");
    command
        ->add_option("--tune-top", options->tune_top,
                     "Which configurations are tuned before ranking: 'all' (every one that "
                     "fits with fsdp2, and those over the limit whose least-memory plans fit), "
                     "or K (the K best by fsdp2; 0 = none: fsdp2 per stage figures)")
        ->capture_default_str();
    command
        ->add_option("--tune-evaluations", options->tune_evaluations,
                     "Plans simulated per chunk by each configuration's search, a cap checked "
                     "once its baselines and seeds are simulated (deterministic budget)")
        ->capture_default_str();
    command->add_option("--step-tolerance", options->step_tolerance,
                        "Each search takes, of the plans within this fraction of its fastest "
                        "(0.001 or 0.1%), the one that reserves the least (default 0.1%; 0 = "
                        "the fastest)");
    command->add_option("--fit", options->fit, kFitHelp)->capture_default_str();
    command->add_flag("--fsdp2-exact", options->fsdp2_exact,
                      "Tune only plans FSDP2's fully_shard groups run as simulated (as tune "
                      "--fsdp2-exact; eager sweeps always)");
    command->add_flag("--simplefsdp-exact", options->simplefsdp_exact,
                      "Tune only plans SimpleFSDP's manual bucketing runs as simulated (as tune "
                      "--simplefsdp-exact; compiled sweeps only)");
    command
        ->add_option("--keep-gathered", options->keep_gathered,
                     "Pipelined configurations (PP, or gradient accumulation): any, yes "
                     "(parameters kept gathered across microbatches), no (gathered and "
                     "reduce-scattered in each) or torchtitan (what it runs unchanged: yes "
                     "under PP, no without)")
        ->capture_default_str();
    command->callback([options, command] {
      options->seq_given = command->count("--seq") > 0;
      options->gpus_given = command->count("--gpus") > 0;
      options->cp_given = command->count("--cp") > 0;
      run_naming_memory_limit(options->memory_limit, [&] { run_sweep(*options); });
    });
  }
  {
    auto options = std::make_shared<PipelineCliOptions>();
    CLI::App* command = app.add_subcommand(
        "pipeline", "Simulate a job with pipeline parallelism, stage by stage (fsdp2 per stage)");
    add_job_options(command, options->job);
    add_pipeline_options(command, options->job);
    command
        ->add_option("--hardware", options->hardware,
                     "Hardware: a built-in id (h100-sxm, h200, a100-80g) or a spec file")
        ->capture_default_str();
    command->add_option("--memory-limit", options->memory_limit, kMemoryLimitHelp);
    command->add_option("--keep-gathered", options->keep_gathered,
                        "yes keeps every chunk's parameters gathered across microbatches, no "
                        "re-gathers and reduce-scatters in each; torchtitan (the default): yes "
                        "under PP, no without");
    command->add_flag("--json", options->json, "Print JSON instead of a table");
    command->add_flag("--require-fit", options->require_fit,
                      "Exit 3 when a stage's reserved peak exceeds the memory limit");
    command->callback([options] {
      run_naming_memory_limit(options->memory_limit, [&] { run_pipeline(*options); });
    });
  }
}

}  // namespace fsdptune::cli
