#include "job_options.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "commands.hpp"
#include "fsdptune/error.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/pipeline.hpp"
#include "fsdptune/plans.hpp"
#include "fsdptune/schedule.hpp"
#include "fsdptune/units.hpp"

namespace fsdptune::cli {

void add_job_options(CLI::App* command, JobOptions& options, JobFlags flags) {
  options.command = command;
  CLI::Option* model =
      command->add_option("--model", options.model,
                          "Built-in model name, model JSON file, or Hugging Face config.json");
  if (flags == JobFlags::kModelOnly) {
    model->required();
    return;
  }
  model->description(
      "Built-in model name, model JSON file, or Hugging Face config.json (required unless "
      "--job-toml names a model fsdptune has built in)");
  command->add_option("--job-toml", options.job_toml,
                      "torchtitan train config (TOML) to take the job (and model) from; job "
                      "flags given replace its fields (docs/torchtitan-config.md)");
  // Values are validated by normalize_job so that every error names its flag the same way.
  command->add_option("--gpus", options.gpus, "World size (GPUs)")->capture_default_str();
  command->add_option("--gpus-per-node", options.gpus_per_node,
                      "GPUs per node (default: the hardware spec's gpus_per_node where the "
                      "command takes --hardware, 8 for the built-in GPUs; else 8)");
  command->add_option("--tp", options.tp, "Tensor-parallel degree")->capture_default_str();
  command->add_option("--dp-replicate", options.dp_replicate, "HSDP replica groups")
      ->capture_default_str();
  command
      ->add_option("--cp", options.cp,
                   "Context-parallel degree: ranks of the FSDP shard group that split each "
                   "sequence (torchtitan's context_parallel_degree)")
      ->capture_default_str();
  command->add_option("--batch", options.batch, "Local batch: sequences per data-parallel rank")
      ->capture_default_str();
  command->add_option("--seq", options.seq, "Sequence length (tokens)")->capture_default_str();
  command
      ->add_option("--ac", options.ac,
                   "Activation checkpointing: none, selective (torchtitan's 'op' too) or full")
      ->capture_default_str();
  command
      ->add_option("--param-dtype", options.param_dtype,
                   "Dtype of gathered params: bf16, fp16, fp32 (or bfloat16, float16, float32)")
      ->capture_default_str();
  command
      ->add_option("--reduce-dtype", options.reduce_dtype,
                   "Dtype of gradient reduce-scatter: fp32, bf16, fp16 (or float32, ...)")
      ->capture_default_str();
  command->add_flag("--float8", options.float8, "float8 linears and float8 all-gather");
  command->add_flag("--async-tp", options.async_tp,
                    "Overlap the tensor-parallel collectives with the GEMMs");
  command
      ->add_option("--execution", options.execution,
                   "How PyTorch runs the norms, RoPE and SwiGLU: compiled (torch.compile, "
                   "fused), eager (PyTorch >= 2.8) or eager-unfused-rmsnorm (older eager)")
      ->capture_default_str();
}

void add_pipeline_options(CLI::App* command, JobOptions& options) {
  command->add_option("--pp", options.pp, "Pipeline-parallel stages")->capture_default_str();
  command
      ->add_option("--microbatches", options.microbatches,
                   "Pipeline microbatches per step (each of --batch sequences)")
      ->capture_default_str();
  command
      ->add_option("--pipeline-steps", options.pipeline_steps,
                   "Pipeline schedule runs per optimizer step (gradient accumulation under PP, "
                   "as torchtitan's global_batch_size above one step makes it)")
      ->capture_default_str();
  command
      ->add_option("--pp-schedule", options.pp_schedule,
                   "Pipeline schedule: 1f1b, interleaved-1f1b or gpipe")
      ->capture_default_str();
  command
      ->add_option("--virtual-stages", options.virtual_stages,
                   "Model chunks per pipeline rank (interleaved-1f1b)")
      ->capture_default_str();
  command->add_option("--pp-first-stage-less-layers", options.pp_first_less,
                      "With --pp: blocks the embedding counts as when the blocks split into the "
                      "chunks (default 1, torchtitan's pipeline_parallel_first_stage_less_layers)");
  command->add_option("--pp-last-stage-less-layers", options.pp_last_less,
                      "With --pp: blocks the final norm and output layer count as in that split "
                      "(default 1; 0 and 0 split the blocks alone evenly, as Megatron does)");
  command->add_option("--pp-chunk-blocks", options.pp_chunk_blocks,
                      "The blocks of each chunk, in order, comma-separated (e.g. 15,16,16,15; "
                      "torchtitan's module_fqns_per_model_part) instead of the weights' split");
}

std::vector<std::int64_t> parse_count_list(const std::string& text, const std::string& flag,
                                           const std::string& what, std::size_t max_count) {
  std::vector<std::int64_t> counts;
  std::size_t from = 0;
  while (from <= text.size()) {
    const std::size_t comma = std::min(text.find(',', from), text.size());
    const std::string part = text.substr(from, comma - from);
    const bool digits =
        !part.empty() && part.size() <= 9 &&
        std::all_of(part.begin(), part.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
    if (!digits) {
      throw_bad_input(flag, fmt::format("'{}' is not a comma-separated list of {}", text, what));
    }
    counts.push_back(std::stoll(part));
    if (counts.size() > max_count) throw_bad_input(flag, fmt::format("more than {}", max_count));
    from = comma + 1;
  }
  return counts;
}

std::vector<std::int64_t> parse_chunk_blocks(const std::string& text) {
  return parse_count_list(text, "--pp-chunk-blocks", "block counts (e.g. 15,16,16,15)",
                          static_cast<std::size_t>(kMaxModelLayers));
}

void check_try_pp_splits(const std::optional<std::int64_t>& value) {
  if (value && (*value < 0 || *value > kMaxTriedSplitWeight)) {
    throw_bad_input("--try-pp-splits",
                    fmt::format("must be between 0 and {}, got {}", kMaxTriedSplitWeight, *value),
                    "each weight pair multiplies the pipelined configurations");
  }
}

bool job_flag_given(const JobOptions& options, const char* flag) {
  const CLI::Option* option =
      options.command != nullptr ? options.command->get_option_no_throw(flag) : nullptr;
  return option != nullptr && option->count() > 0;
}

namespace {

// The --job-toml config, read the first time a caller needs it.
const TorchtitanConfig& job_toml_config(const JobOptions& options) {
  if (!options.job_toml_read) {
    options.job_toml_read = read_flag_file(
        "--job-toml", options.job_toml, [&] { return read_torchtitan_config(options.job_toml); });
  }
  return *options.job_toml_read;
}

}  // namespace

namespace {

// --param-dtype / --reduce-dtype: an unknown name lists what a job takes (fp8 is --float8's:
// normalize_job refuses it with that hint), not every dtype the formats know.
DType job_dtype(const std::string& text, const std::string& flag) {
  try {
    return dtype_from_string(text, flag);
  } catch (const Error&) {
    throw_bad_input(flag, fmt::format("unknown dtype '{}' (expected bf16, fp16 or fp32)", text));
  }
}

}  // namespace

const nlohmann::json& read_plan_json(const std::string& flag, const std::string& path) {
  static std::map<std::string, nlohmann::json> read;
  const auto known = read.find(path);
  if (known != read.end()) return known->second;
  return read
      .emplace(path, read_flag_file(flag.c_str(), path, [&] { return read_json_file(path); }))
      .first->second;
}

bool names_plan_input(const std::string& path) {
  const std::vector<std::string> names = builtin_plan_names();
  std::error_code error;
  return !path.empty() && std::find(names.begin(), names.end(), path) == names.end() &&
         std::filesystem::exists(path, error);
}

std::string input_file(const std::string& value) {
  std::error_code error;
  return !value.empty() && std::filesystem::is_regular_file(value, error) ? value : std::string();
}

std::string model_argument(const JobOptions& options) {
  if (!options.model.empty()) return options.model;
  if (options.job_toml.empty()) {
    throw_bad_input("--model", "no model given",
                    "give --model, or --job-toml with a torchtitan config whose model "
                    "fsdptune has built in");
  }
  return torchtitan_builtin_model(job_toml_config(options));
}

ModelSpec resolve_model_noted(const std::string& model) {
  std::vector<std::string> notes;
  ModelSpec spec = read_flag_file("--model", model, [&] { return resolve_model(model, &notes); });
  for (const std::string& note : notes) fmt::print(stderr, "note: --model {}\n", note);
  return spec;
}

ModelSpec resolve_model_option(const JobOptions& options) {
  return resolve_model_noted(model_argument(options));
}

std::string job_flags_of(const std::string& model, const JobSpec& job) {
  std::string flags = fmt::format(
      "--model {} --gpus {} --gpus-per-node {} --tp {} --dp-replicate {}{} --batch {} --seq {} "
      "--ac {} --param-dtype {} --reduce-dtype {}{}{}{}",
      shell_word(model), job.gpus, job.gpus_per_node, job.tp, job.dp_replicate,
      job.cp != 1 ? fmt::format(" --cp {}", job.cp) : "", job.local_batch, job.seq_len,
      to_string(job.ac), to_string(job.param_dtype), to_string(job.reduce_dtype),
      job.float8 ? " --float8" : "", job.async_tp ? " --async-tp" : "",
      job.execution != Execution::kCompiled ? " --execution " + to_string(job.execution) : "");
  if (job.pp > 1 || job.microbatches > 1) {
    flags += fmt::format(" --pp {} --microbatches {} --pp-schedule {} --virtual-stages {}", job.pp,
                         job.microbatches, to_string(job.pp_schedule), job.virtual_stages);
  }
  if (job.pipeline_steps > 1) flags += fmt::format(" --pipeline-steps {}", job.pipeline_steps);
  if (job.pp * job.virtual_stages > 1) flags += " " + pp_split_flags(job);
  return flags;
}

namespace {

// The job of --job-toml under the job flags given on the command line.
JobSpec torchtitan_job_spec(const JobOptions& options, const ModelSpec& model,
                            const HardwareSpec* hardware) {
  const TorchtitanConfig& config = job_toml_config(options);
  const auto given = [&](const char* flag) { return job_flag_given(options, flag); };
  JobOverrides o;
  const auto take = [&](const char* flag, auto& field, const auto& value) {
    if (given(flag)) field = value;
  };
  take("--gpus", o.gpus, options.gpus);
  take("--gpus-per-node", o.gpus_per_node, options.gpus_per_node);
  if (!given("--gpus-per-node") && hardware != nullptr) o.gpus_per_node = hardware->gpus_per_node;
  take("--tp", o.tp, options.tp);
  take("--dp-replicate", o.dp_replicate, options.dp_replicate);
  take("--cp", o.cp, options.cp);
  take("--batch", o.local_batch, options.batch);
  take("--seq", o.seq_len, options.seq);
  take("--pp", o.pp, options.pp);
  take("--microbatches", o.microbatches, options.microbatches);
  take("--pipeline-steps", o.pipeline_steps, options.pipeline_steps);
  take("--virtual-stages", o.virtual_stages, options.virtual_stages);
  take("--pp-first-stage-less-layers", o.pp_first_stage_less_layers, options.pp_first_less);
  take("--pp-last-stage-less-layers", o.pp_last_stage_less_layers, options.pp_last_less);
  if (given("--pp-chunk-blocks")) o.pp_chunk_blocks = parse_chunk_blocks(options.pp_chunk_blocks);
  if (given("--ac")) o.ac = ac_from_string(options.ac, "--ac");
  if (given("--param-dtype")) o.param_dtype = job_dtype(options.param_dtype, "--param-dtype");
  if (given("--reduce-dtype")) {
    o.reduce_dtype = job_dtype(options.reduce_dtype, "--reduce-dtype");
  }
  take("--float8", o.float8, options.float8);
  take("--async-tp", o.async_tp, options.async_tp);
  if (given("--execution")) o.execution = execution_from_string(options.execution, "--execution");
  if (given("--pp-schedule")) {
    o.pp_schedule = pipeline_schedule_from_string(options.pp_schedule, "--pp-schedule");
  }
  // Before the job, whose errors a misspelt key may explain (found by QA).
  for (const std::string& note : torchtitan_notes(config)) fmt::print(stderr, "note: {}\n", note);
  JobSpec job = torchtitan_job(config, model, o);
  if (job.pp > 1 && options.command != nullptr &&
      options.command->get_option_no_throw("--pp") == nullptr) {
    throw_bad_input(config.pp_where,
                    fmt::format("`{}` does not take pipeline parallelism (degree {})",
                                options.command->get_name(), job.pp),
                    "simulate, tune and pipeline do (docs/parallelism.md)");
  }
  const std::string without_fsdp = torchtitan_without_fsdp_note(job);
  if (!without_fsdp.empty()) fmt::print(stderr, "note: {}: {}\n", options.job_toml, without_fsdp);
  return job;
}

}  // namespace

void note_gpus_per_node(std::int64_t gpus_per_node, const HardwareSpec& hardware) {
  if (gpus_per_node <= hardware.gpus_per_node) return;
  fmt::print(stderr,
             "note: --gpus-per-node {} is more than {}'s {} per node: collectives within a node "
             "of {} are priced at its NVLink bandwidth\n",
             gpus_per_node, hardware.id, hardware.gpus_per_node, gpus_per_node);
}

namespace {

// `job`, after a note on stderr of what it models that torchtitan would not run so.
JobSpec noted_job(JobSpec job) {
  // A tester found this said only with --emit-torchtitan-toml (sweep skips the mesh).
  if (torchtitan_float8_gathers_bf16(job)) {
    fmt::print(stderr,
               "note: --float8 with a shard group of the {} context-parallel ranks alone: "
               "these figures are float8 all-gathers (FSDP2 with torchao's float8 all-gather); "
               "torchtitan all-gathers in bf16 there (data_parallel_shard_degree 1), which "
               "fsdptune does not model\n",
               job.cp);
  }
  // PyTorch's schedules run fewer microbatches than stages, and torchtitan warns of the
  // bubble (build_pipeline_schedule); so does fsdptune (found by QA: said nothing).
  // A schedule the pipeline then refuses is refused first, its note unsaid (found by QA:
  // the note, then the error of 1f1b with 2 virtual stages).
  const std::int64_t stages = job.pp * job.virtual_stages;
  if (job.pp > 1 && job.microbatches < stages) {
    validate_pipeline(job);
    fmt::print(stderr,
               "note: {} over {} ({} x {}): fewer microbatches than stages, which "
               "torchtitan warns leaves a bubble; the figures include it\n",
               counted(job.microbatches, "microbatch", "microbatches"),
               counted(stages, "pipeline stage"), counted(job.pp, "rank"),
               counted(job.virtual_stages, "chunk"));
  }
  return job;
}

}  // namespace

JobSpec to_job_spec(const JobOptions& options, const ModelSpec& model,
                    const HardwareSpec* hardware) {
  const bool per_node_given = job_flag_given(options, "--gpus-per-node");
  if (per_node_given && hardware != nullptr) note_gpus_per_node(options.gpus_per_node, *hardware);
  // The blocks of each chunk replace the weights' split: given together, the weights were
  // dropped without a word.
  if (job_flag_given(options, "--pp-chunk-blocks")) {
    for (const char* weight : {"--pp-first-stage-less-layers", "--pp-last-stage-less-layers"}) {
      if (!job_flag_given(options, weight)) continue;
      throw_bad_input("--pp-chunk-blocks",
                      fmt::format("given with {}: the blocks of each chunk "
                                  "replace the weights that split them",
                                  weight),
                      "give the blocks or the weights");
    }
  }
  if (!options.job_toml.empty()) return noted_job(torchtitan_job_spec(options, model, hardware));
  // The split of the blocks into pipeline chunks means nothing without a pipeline (it was
  // accepted and ignored).
  if (options.pp == 1) {
    for (const char* split :
         {"--pp-first-stage-less-layers", "--pp-last-stage-less-layers", "--pp-chunk-blocks"}) {
      if (!job_flag_given(options, split)) continue;
      throw_bad_input(split, "splits the blocks into pipeline stages, but pp is 1",
                      "give --pp too, or leave the flag out");
    }
  }
  JobSpec job;
  job.gpus = options.gpus;
  job.gpus_per_node =
      !per_node_given && hardware != nullptr ? hardware->gpus_per_node : options.gpus_per_node;
  job.tp = options.tp;
  job.dp_replicate = options.dp_replicate;
  job.cp = options.cp;
  job.local_batch = options.batch;
  job.seq_len = options.seq;
  job.ac = ac_from_string(options.ac, "--ac");
  job.param_dtype = job_dtype(options.param_dtype, "--param-dtype");
  job.reduce_dtype = job_dtype(options.reduce_dtype, "--reduce-dtype");
  job.float8 = options.float8;
  job.async_tp = options.async_tp;
  job.execution = execution_from_string(options.execution, "--execution");
  job.pp = options.pp;
  job.microbatches = options.microbatches;
  job.pipeline_steps = options.pipeline_steps;
  job.pp_schedule = pipeline_schedule_from_string(options.pp_schedule, "--pp-schedule");
  job.virtual_stages = options.virtual_stages;
  job.pp_first_stage_less_layers = options.pp_first_less;
  job.pp_last_stage_less_layers = options.pp_last_less;
  if (!options.pp_chunk_blocks.empty()) {
    job.pp_chunk_blocks = parse_chunk_blocks(options.pp_chunk_blocks);
  }
  try {
    return noted_job(normalize_job(model, job));
  } catch (const Error& e) {
    // Nodes of the hardware spec's size, not of a flag given (found by QA: "(--gpus-per-node)"
    // for a spec's gpus_per_node 3; cost says "the hardware's").
    const std::string flag_named = "(--gpus-per-node)";
    const std::size_t at = e.message().find(flag_named);
    if (per_node_given || hardware == nullptr || at == std::string::npos) throw;
    std::string message = e.message();
    message.replace(at, flag_named.size(), "(--gpus-per-node, the hardware's)");
    throw Error(e.kind(), e.where(), message, e.hint());
  }
}

void add_plan_options(CLI::App* command, PlanOptions& options, bool with_plan) {
  if (with_plan) {
    std::string names;
    for (const std::string& name : builtin_plan_names())
      names += (names.empty() ? "" : ", ") + name;
    command
        ->add_option("--plan", options.plan,
                     fmt::format("Built-in plan ({}), plan JSON file or schedule file", names))
        ->capture_default_str();
    command->add_option("--keep-gathered", options.keep_gathered,
                        "Pipelined jobs (--pp, or --microbatches above 1) with a built-in plan: "
                        "yes keeps the parameters gathered "
                        "across microbatches (one round of collectives), no re-gathers and "
                        "reduce-scatters in each; torchtitan (the default): yes under PP, no "
                        "without");
  }
  command->add_option("--memory-limit", options.memory_limit, kMemoryLimitHelp);
}

KeepGatheredChoice parse_keep_gathered(const std::string& text, const std::string& flag,
                                       bool tuner) {
  for (const KeepGatheredChoice choice :
       {KeepGatheredChoice::kAny, KeepGatheredChoice::kKept, KeepGatheredChoice::kRegathered,
        KeepGatheredChoice::kTorchtitan}) {
    if (text == to_string(choice)) return choice;
  }
  throw_bad_input(flag, fmt::format("unknown value '{}' (expected {}yes, no or torchtitan)", text,
                                    tuner ? "any, " : ""));
}

bool parse_fit_at_any_timing(const std::string& text) {
  if (text != "predicted" && text != "any-timing") {
    throw_bad_input("--fit",
                    fmt::format("unknown value '{}' (expected predicted or any-timing)", text));
  }
  return text == "any-timing";
}

void require_pipelined_for_keep_gathered(const JobSpec& job) {
  if (!is_pipelined(job)) {
    throw_bad_input("--keep-gathered",
                    "applies to a pipelined job: one microbatch on one stage keeps nothing "
                    "across microbatches",
                    "give --microbatches M (gradient accumulation) or --pp P");
  }
}

bool resolve_keep_gathered(const PlanOptions& options, const JobSpec& job) {
  if (options.keep_gathered.empty()) return default_keep_gathered(job);
  // One plan: 'any' is not offered (found by QA: listed, then refused).
  const KeepGatheredChoice choice =
      parse_keep_gathered(options.keep_gathered, "--keep-gathered", false);
  if (choice == KeepGatheredChoice::kAny) {
    throw_bad_input("--keep-gathered", "'any' is a tuner's choice: this command runs one plan",
                    "give yes, no or torchtitan (or tune the job)");
  }
  require_pipelined_for_keep_gathered(job);
  return allowed_keep_gathered(choice, job).front();
}

std::int64_t given_memory_limit(const std::string& text, const HardwareSpec& hardware) {
  const std::int64_t limit = parse_size_bytes(text, "--memory-limit");
  // Found by QA: `tune --memory-limit 1EiB` searched, then could not write its schedule.
  if (limit > kMaxScheduleBytes) {
    throw_bad_input(
        "--memory-limit " + text,
        // In bytes too: both round to the same figure just above (found by QA).
        fmt::format("is {} ({} bytes), more than a schedule holds (at most {}, {} "
                    "bytes)",
                    format_bytes(limit), limit, format_bytes(kMaxScheduleBytes), kMaxScheduleBytes),
        "give a GPU's memory, e.g. 70GiB");
  }
  if (hardware.hbm_bytes > 0 && limit > hardware.hbm_bytes) {
    fmt::print(stderr,
               "note: --memory-limit {} is above the {} GPU's memory ({}): plans judged to fit "
               "under it may not fit the GPU\n",
               format_bytes(limit), hardware.id, format_bytes(hardware.hbm_bytes));
  }
  // A number without a unit is bytes: `--memory-limit 70` is 70 B, which only the
  // output's "limit 70 B" showed.
  if (!text.empty() && std::isdigit(static_cast<unsigned char>(text.back())) != 0 &&
      limit < (std::int64_t{1} << 20)) {
    fmt::print(stderr, "note: --memory-limit {} has no unit: {} bytes (e.g. {}GiB for GiB)\n", text,
               limit, text);
  }
  return limit;
}

void run_naming_memory_limit(const std::string& given, const std::function<void()>& run) {
  try {
    run();
  } catch (const Error& e) {
    if (!given.empty() || e.kind() != ErrorKind::kDoesNotFit || e.where() != "--memory-limit") {
      throw;
    }
    throw Error(e.kind(), "--memory-limit (not given)", e.message(), e.hint());
  }
}

std::int64_t resolve_memory_limit(const PlanOptions& options, const HardwareSpec& hardware) {
  if (!options.memory_limit.empty()) return given_memory_limit(options.memory_limit, hardware);
  const std::int64_t limit = default_memory_limit_bytes(hardware);
  if (limit <= 0) {
    throw_bad_input("--memory-limit", fmt::format("hardware {} gives no default", hardware.id),
                    "give --memory-limit, e.g. --memory-limit 70GiB");
  }
  return limit;
}

Plan resolve_plan_option(const PlanOptions& options, const Workload& workload,
                         const CostModel& costs, std::int64_t memory_limit_bytes) {
  const std::vector<std::string> names = builtin_plan_names();
  const int unit_count = static_cast<int>(workload.units.size());
  if (std::find(names.begin(), names.end(), options.plan) != names.end()) {
    Plan plan = builtin_plan(options.plan, workload, costs, memory_limit_bytes, "--plan");
    validate_plan(plan, unit_count, "--plan " + options.plan);
    return plan;
  }
  if (!std::filesystem::exists(options.plan)) {
    // Not a file either: name the built-ins.
    builtin_plan(options.plan, workload, costs, memory_limit_bytes, "--plan");
  }
  return plan_of_file(options.plan, "--plan", workload);
}

Plan plan_of_file(const std::string& path, const std::string& flag, const Workload& workload) {
  const int unit_count = static_cast<int>(workload.units.size());
  // A folder is named by read_json_file; a pipe is read as every other input is (found by
  // QA: `--start-plan <(...)` was "not a file"). A missing file keeps its hint (review).
  std::error_code missing;
  if (!std::filesystem::exists(path, missing)) {
    throw_bad_input(flag + " " + path, "no such file",
                    "give a plan file (docs/plan-format.md) or a schedule file of `tune --out`");
  }
  const nlohmann::json& json = read_plan_json(flag, path);
  refuse_other_format(json, path);
  if (json.is_object() && json.contains("pipeline")) {
    throw_bad_input(flag,
                    fmt::format("{} is a pipeline schedule: its chunks have a plan each, not one "
                                "for the whole model",
                                path),
                    "give a plan file or a schedule of a job without a pipeline");
  }
  if (!is_schedule_json(json)) {
    Plan plan = plan_from_json(json, path);
    validate_plan(plan, unit_count, path);
    return plan;
  }
  // A schedule file carries its plan under "plan" (docs/schedule-format.md), read as every
  // reader of a schedule reads it (its job hash checked: found by QA, a schedule whose job
  // was edited was taken).
  const ScheduleFile schedule = schedule_from_json(json, path);
  // Another model of another unit count: said so, as `simulate --plan` says it (found by
  // QA: refused as "forward_buckets: leaves units 6..17 out").
  const std::vector<UnitRange>& buckets = schedule.plan.forward_buckets;
  const int schedule_units = buckets.empty() ? 0 : buckets.back().last + 1;
  if (schedule_units != unit_count && !(schedule.model == workload.model)) {
    throw_bad_input(
        flag + " " + path,
        fmt::format("its plan was tuned for model '{}' ({} units), not '{}' ({} units)",
                    schedule.model.name, schedule_units, workload.model.name, unit_count),
        "give a plan of this model's units");
  }
  validate_plan(schedule.plan, unit_count, path + ": plan");
  // The same number of units, another model (found by QA: taken without a word).
  if (!(schedule.model == workload.model)) {
    fmt::print(stderr,
               "note: {} {}: its plan was tuned for model '{}', this job's is '{}': its buckets "
               "are read as this model's units\n",
               flag, path, schedule.model.name, workload.model.name);
  }
  return schedule.plan;
}

std::string mfu_basis_note(double mfu, const JobSpec& job, const HardwareSpec& hardware) {
  if (!job.float8 || !(hardware.peak_fp8_flops_per_s > 0) ||
      !(hardware.peak_bf16_flops_per_s > 0)) {
    return "";
  }
  return fmt::format(" of the fp8 peak ({:.1f}% of bf16's, as torchtitan logs it)",
                     100.0 * mfu * hardware.peak_fp8_flops_per_s / hardware.peak_bf16_flops_per_s);
}

}  // namespace fsdptune::cli
