// `fsdptune validate` (replay a schedule under mpirun / srun and measure it) and
// `fsdptune compare` (prediction vs measurement).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>
#include <string_view>
#include <thread>

#include <fmt/format.h>

#include "commands.hpp"
#include "fsdptune/compare.hpp"
#include "fsdptune/error.hpp"
#include "fsdptune/executor.hpp"
#include "fsdptune/hardware.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/job.hpp"
#include "fsdptune/kernels.hpp"
#include "fsdptune/measured.hpp"
#include "fsdptune/memory_bound.hpp"
#include "fsdptune/schedule.hpp"
#include "fsdptune/units.hpp"
#include "fsdptune/workload.hpp"

namespace fsdptune::cli {
namespace {

struct ValidateArgs {
  std::string schedule;
  std::string out;
  std::string attention = "auto";
  ExecutorOptions options;
};

struct CompareArgs {
  std::string schedule;
  std::string measured;
  bool json = false;
  int top = 10;
};

ScheduleFile load_schedule(const std::string& path) {
  return checked_schedule_from_json(read_json_file(path), path);
}

// The hidden test hooks must name what exists (found probing: --debug-corrupt-bucket 99
// corrupted nothing and the run passed "data checked", so a test with a wrong index would
// pass without testing anything). The corruptions act on the last rank, with --check-data.
void check_test_hooks(const ScheduleFile& schedule, const ExecutorOptions& options, int world,
                      const std::string& source) {
  if (options.stall_rank < -1 || options.stall_rank >= world) {
    throw_bad_input("--debug-stall-rank",
                    fmt::format("{} is not a rank of the {} started", options.stall_rank, world));
  }
  // Each corruption hook's index counts buckets or pipeline messages of the last rank, or a
  // TP collective of a step (only its sign is checked here; a hook that corrupts nothing
  // fails the run).
  const std::vector<CorruptionHook> hooks = corruption_hooks(options);
  if (std::none_of(hooks.begin(), hooks.end(),
                   [](const CorruptionHook& hook) { return hook.value != -1; })) {
    return;
  }
  const ReplayMesh mesh = replay_mesh(schedule, world - 1, world, options.scale_down, source);
  const ReplayLayout layout = make_replay_layout(
      schedule, build_workload(schedule.model, normalize_job(schedule.model, schedule.job)),
      world - 1, mesh);
  using Target = CorruptionHook::Target;
  for (const CorruptionHook& hook : hooks) {
    if (hook.value == -1) continue;
    if (!options.check_data) {
      throw_bad_input(hook.flag, "corrupts data for --check-data to find: give it");
    }
    const bool messages = hook.target == Target::kMessage;
    const std::size_t count = messages ? layout.messages.size() : layout.buckets.size();
    // A schedule without pipeline messages has none to name (found by QA: "(0 to -1)").
    if (messages && count == 0) {
      throw_bad_input(hook.flag, "the last rank sends no pipeline message to corrupt",
                      "a pipelined schedule (--pp 2 or more)");
    }
    if (hook.value < 0 ||
        (hook.target != Target::kTpCollective && static_cast<std::size_t>(hook.value) >= count)) {
      throw_bad_input(hook.flag, fmt::format("{} is not a {} of the last rank (0 to {})",
                                             hook.value, messages ? "pipeline message" : "bucket",
                                             static_cast<std::int64_t>(count) - 1));
    }
  }
}

// The checks of validate's flags' values, before MPI starts: each rank makes them alike
// from its command line alone (no file is looked at).
ExecutorOptions checked_options(const ValidateArgs& args) {
  ExecutorOptions options = args.options;
  if (options.iterations < 1 || options.iterations > kMaxMeasuredIterations) {
    throw_bad_input("--iters", fmt::format("must be 1 to {}, got {}", kMaxMeasuredIterations,
                                           options.iterations));
  }
  if (options.warmup < 0 || options.warmup > kMaxMeasuredIterations) {
    throw_bad_input("--warmup",
                    fmt::format("must be 0 to {}, got {}", kMaxMeasuredIterations, options.warmup));
  }
  // The watchdog looks every 50 ms (QA, 2026-12-05: --timeout 0.001 aborted saying "no
  // progress for 0.1 s").
  if (!(options.timeout_s >= 0.1) || !std::isfinite(options.timeout_s)) {
    throw_bad_input("--timeout", fmt::format("must be a finite number of seconds >= 0.1, got {}",
                                             options.timeout_s));
  }
  if (options.backend != "cpu" && options.backend != "cuda") {
    throw_bad_input("--backend", "unknown backend '" + options.backend + "'", "cpu or cuda");
  }
  options.attention = attention_kernel_from_string(args.attention, "--attention");
  if (options.backend == "cpu" && options.attention != AttentionKernel::kAuto) {
    throw_bad_input("--attention",
                    "the cpu backend has one attention (Eigen), not " + args.attention,
                    "--attention cudnn or cublas needs --backend cuda");
  }
  options.command = fmt::format(
      "fsdptune validate {} --backend {}{} --iters {} --warmup {}{}{}{} --out {}", args.schedule,
      options.backend,
      options.attention == AttentionKernel::kAuto ? "" : " --attention " + args.attention,
      options.iterations, options.warmup, options.check_data ? " --check-data" : "",
      options.scale_down ? " --scale-down" : "",
      options.serial_collectives ? " --serial-collectives" : "", args.out);
  options.source = args.schedule;
  return options;
}

void run_validate(const ValidateArgs& args) {
  // Every rank of `mpirun -np N` finds the same: said once (found by QA: N times, for the
  // flags' values and then for --out's path).
  ExecutorOptions options;
  said_once([&] { options = checked_options(args); });
  // The files each rank sees on its own node (a later rank on another node says its own).
  said_once([&] {
    require_distinct_files({{"--out", args.out}}, {{"the schedule", args.schedule}});
  });
  MpiSession mpi;
  Watchdog watchdog(mpi.rank(), options.timeout_s, "reading the schedule");
  ScheduleFile schedule;
  std::optional<Error> load_error;
  try {
    schedule = load_schedule(args.schedule);
  } catch (const Error& e) {
    load_error = e;
  }
  watchdog.beat("waiting for every rank to read its schedule");
  agree_on_errors(load_error);
  // Ranks given other files are told so before what one of the files fails (found by QA: a
  // launch with another job's schedule on rank 1 was refused for rank 1's host memory).
  watchdog.beat("agreeing on the schedule with every rank");
  const std::string hash = agree_on_schedule(schedule, options);
  std::optional<Error> check_error;
  try {
    check_replayable(schedule, mpi.world_size(), args.schedule, options.scale_down);
    if (options.backend == "cpu") {
      check_host_memory(schedule, mpi.local_size(), host_memory_bytes(), args.schedule);
    }
    if (options.check_data) {
      check_data_exact(schedule, mpi.world_size(), args.schedule, options.scale_down);
    }
    check_test_hooks(schedule, options, mpi.world_size(), args.schedule);
  } catch (const Error& e) {
    check_error = e;
  }
  watchdog.beat("waiting for every rank to check the schedule");
  agree_on_errors(check_error);

  const MeasuredResult measured = execute(schedule, hash, options, mpi, watchdog);
  if (mpi.rank() != 0) return;
  // Only rank 0 writes, and only after every rank finished: no partial measured.json.
  watchdog.beat("writing " + args.out);
  write_file_atomically(args.out, dump_json(measured_to_json(measured)), "--out");
  const std::string mesh =
      measured.shards_per_rank > 1
          ? fmt::format(" (scaled down: {} shards per rank)", measured.shards_per_rank)
          : "";
  fmt::print(
      "validated {} on {}{}, backend {}: step {} (median of {}), compute {}, "
      "exposed comm {}, peak {}{}\nwrote {}\n",
      args.schedule, counted(measured.world_size, "rank"), mesh, measured.backend,
      format_seconds(measured.step_time_s), measured.iterations, format_seconds(measured.compute_s),
      format_seconds(measured.exposed_comm_s), format_bytes(measured.peak_allocated_bytes),
      measured.data_checked ? ", data checked" : "", args.out);
  if (measured.pipeline) {
    fmt::print("pipeline: {} x {}{} ({}){}\n", counted(measured.pp, "stage"),
               counted(measured.pipeline->microbatches, "microbatch", "microbatches"),
               measured.pipeline->pipeline_steps > 1
                   ? fmt::format(" x {} pipeline steps", measured.pipeline->pipeline_steps)
                   : "",
               measured.pp == 1 ? std::string("gradient accumulation")
               : measured.pipeline->virtual_stages > 1
                   ? fmt::format("{}, {} virtual stages", measured.pipeline->schedule,
                                 measured.pipeline->virtual_stages)
                   : measured.pipeline->schedule,
               measured.pp > 1 ? ", messages of " + format_bytes(measured.pipeline->message_bytes)
                               : std::string());
    for (const MeasuredStage& stage : measured.pipeline->stages) {
      fmt::print("  stage {}: busy {}, last action {}, end {}, peak {}\n", stage.rank,
                 format_seconds(stage.busy_s), format_seconds(stage.pipeline_end_s),
                 format_seconds(stage.end_s), format_bytes(stage.peak_allocated_bytes));
    }
  }
}

void run_compare(const CompareArgs& args) {
  // --top: bounded as report's --top-errors at the flag (found by QA: any count was taken).
  const ScheduleFile schedule = load_schedule(args.schedule);
  const MeasuredResult measured = measured_from_json(read_json_file(args.measured), args.measured);
  const Comparison comparison = compare(schedule, measured, args.measured, args.top);
  note_cpu_replay(schedule, measured, args.measured);
  if (args.json) {
    std::cout << dump_json(comparison_to_json(comparison));
  } else {
    std::ostringstream text;
    print_comparison(text, comparison);
    std::cout << text.str();
  }
}

}  // namespace

void note_cpu_replay(const ScheduleFile& schedule, const MeasuredResult& measured,
                     const std::string& measured_path) {
  if (measured.backend == "cpu" && is_builtin_hardware(schedule.hardware.id)) {
    fmt::print(stderr,
               "note: {}: measured by the cpu backend, predicted for {}: its time errors compare "
               "this host with that GPU, not the model (the memory compares, up to timing: a "
               "stage's or Program's peak may reach its bound at any timing); to compare times, "
               "tune on a profile of this host (docs/validation.md \"The CPU loop on measured "
               "costs\")\n",
               measured_path, schedule.hardware.id);
  }
  if (const std::string crowded = host_oversubscription(measured); !crowded.empty()) {
    fmt::print(stderr,
               "note: {}: {}: the ranks' compute threads took turns on its cores, so its times "
               "are the crowding's, not the model's (the memory compares); replay with at most "
               "as many ranks a host as it has hardware threads (--scale-down replays a large "
               "schedule on fewer ranks: docs/validation.md)\n",
               measured_path, crowded);
  }
}

std::string later_launched_rank() {
  // The launcher's own variable first (Open MPI's, PMIx's, PMI's); Slurm's task id only in
  // an srun step and where none of those is set: a batch script's shell and what it starts
  // inherit SLURM_PROCID (found by review: any variable above 0 counted, an inherited one
  // too).
  for (const char* variable : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}) {
    const char* value = std::getenv(variable);
    if (value != nullptr && *value != '\0') {
      return std::string_view(value) == "0" ? std::string() : std::string(value);
    }
  }
  const char* step = std::getenv("SLURM_STEP_ID");
  const char* task = std::getenv("SLURM_PROCID");
  const bool later = step != nullptr && *step != '\0' && task != nullptr && *task != '\0' &&
                     std::string_view(task) != "0";
  return later ? std::string(task) : std::string();
}

std::string said_by_rank(const std::string& text, const std::string& rank) {
  const std::string head = "fsdptune: error: ";
  if (!text.starts_with(head)) return fmt::format("rank {}: {}", rank, text);
  return fmt::format("{}rank {}: {}", head, rank, text.substr(head.size()));
}

void wait_as_a_later_rank() {
  std::this_thread::sleep_for(std::chrono::seconds(kLaterRankGraceSeconds));
}

void said_once(const std::function<void()>& check) {
  try {
    check();
  } catch (const Error& e) {
    const std::string later = later_launched_rank();
    if (later.empty()) throw;
    wait_as_a_later_rank();
    throw Error(e.kind(),
                e.where().empty() ? fmt::format("rank {}", later)
                                  : fmt::format("rank {}: {}", later, e.where()),
                e.message(), e.hint());
  }
}

void register_validate_commands(CLI::App& app) {
  auto validate_args = std::make_shared<ValidateArgs>();
  CLI::App* validate = app.add_subcommand(
      "validate",
      "Replay a schedule on real hardware under mpirun/srun (one process per rank) and measure "
      "it");
  validate->add_option("schedule", validate_args->schedule, "schedule.json to replay")->required();
  validate->add_option("--backend", validate_args->options.backend, "cpu or cuda")
      ->capture_default_str();
  validate
      ->add_option("--attention", validate_args->attention,
                   "cuda: auto (cuDNN's fused attention where it runs the op, else cuBLAS), "
                   "cudnn or cublas")
      ->capture_default_str();
  validate->add_option("--iters", validate_args->options.iterations, "Measured steps")
      ->check(int_range(1, kMaxMeasuredIterations))
      ->capture_default_str();
  validate->add_option("--warmup", validate_args->options.warmup, "Untimed steps before them")
      ->check(int_range(0, kMaxMeasuredIterations))
      ->capture_default_str();
  validate->add_flag("--check-data", validate_args->options.check_data,
                     "Check every bucket's gathered parameters and reduced gradients, the "
                     "accumulated fp32 gradient shards and every TP collective's output in one "
                     "extra step before the warm-up");
  validate->add_flag("--scale-down", validate_args->options.scale_down,
                     "Replay a schedule for a larger dp_shard on fewer ranks (pp x "
                     "dp_replicate x tp x a divisor of dp_shard), each rank holding several "
                     "shards (docs/validation.md)");
  validate->add_flag("--serial-collectives", validate_args->options.serial_collectives,
                     "Run the compute tasks' TP and CP collectives in op order, not beside the "
                     "compute the model overlaps them with (async TP, the CP K/V gather)");
  validate
      ->add_option("--timeout", validate_args->options.timeout_s,
                   "Seconds without progress after which every rank aborts")
      ->capture_default_str();
  validate->add_option("--out", validate_args->out, "measured.json to write (rank 0)")->required();
  // Test hooks, hidden from --help.
  validate->add_option("--debug-stall-rank", validate_args->options.stall_rank)->group("");
  validate->add_option("--debug-corrupt-bucket", validate_args->options.corrupt_bucket)->group("");
  validate
      ->add_option("--debug-corrupt-gradient-shard", validate_args->options.corrupt_gradient_shard)
      ->group("");
  validate
      ->add_option("--debug-corrupt-tp-collective", validate_args->options.corrupt_tp_collective)
      ->group("");
  validate->add_option("--debug-corrupt-message", validate_args->options.corrupt_message)
      ->group("");
  validate->callback([validate_args] { run_validate(*validate_args); });

  auto compare_args = std::make_shared<CompareArgs>();
  CLI::App* compare_command = app.add_subcommand(
      "compare", "Compare a schedule's prediction with what fsdptune validate measured");
  compare_command->add_option("schedule", compare_args->schedule, "schedule.json")->required();
  compare_command->add_option("measured", compare_args->measured, "measured.json")->required();
  compare_command->add_flag("--json", compare_args->json, "JSON instead of a table");
  compare_command
      ->add_option("--top", compare_args->top, "Tasks (and pipeline actions) to list, 0 to 1000000")
      ->check(int_range(0, 1000000))
      ->capture_default_str();
  compare_command->callback([compare_args] { run_compare(*compare_args); });
}

}  // namespace fsdptune::cli
