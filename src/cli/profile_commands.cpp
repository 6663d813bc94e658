// `fsdptune profile ...`: make cost profiles. One function per subcommand, each adding
// itself to the `profile` group; register_profile_commands lists them.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cost_options.hpp"

#include "commands.hpp"
#include "fsdptune/collector.hpp"
#include "fsdptune/error.hpp"
#include "fsdptune/hardware.hpp"
#include "fsdptune/importers.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/kernels.hpp"
#include "fsdptune/profile.hpp"
#include "fsdptune/profile_compare.hpp"
#include "fsdptune/profile_merge.hpp"
#include "fsdptune/units.hpp"
#include "fsdptune/workload.hpp"
#include "job_options.hpp"

namespace fsdptune::cli {
namespace {

// --hardware given for an import whose input names another GPU (the profile's
// provenance.environment "gpu"): the flag wins, as documented, and is said to on stderr
// (found by QA: an H100 trace recorded as h200 without a word).
void note_hardware_override(const Profile& profile) {
  const auto gpu = profile.provenance.environment.find("gpu");
  if (gpu == profile.provenance.environment.end()) return;
  const std::string from_device = hardware_id_from_device_name(gpu->second);
  // Another built-in's device, or a device of no built-in recorded as a built-in (found by
  // QA: an A100 40GB and an MI300X taken as a100-80g and h100-sxm without a word; a B200
  // recorded as "b200" is as asked).
  const bool other_builtin = !from_device.empty() && from_device != profile.hardware;
  const bool taken_for_builtin = from_device.empty() && is_builtin_hardware(profile.hardware);
  if (other_builtin || taken_for_builtin) {
    fmt::print(stderr, "note: --hardware: recorded as {}, the input names '{}' ({})\n",
               profile.hardware, gpu->second,
               from_device.empty() ? "no built-in hardware" : from_device);
  }
}

// Each input file once, as the kernel resolves it (links, `..`): a repeat is refused
// naming both spellings and why.
void require_each_once(const std::vector<std::string>& paths, const std::string& why,
                       const std::string& hint) {
  std::vector<std::filesystem::path> seen;
  for (const std::string& path : paths) {
    std::filesystem::path resolved = resolved_file(path);
    const auto first = std::find(seen.begin(), seen.end(), resolved);
    if (first != seen.end()) {
      throw_bad_input(path,
                      fmt::format("given twice (as {}): {}",
                                  paths[static_cast<std::size_t>(first - seen.begin())], why),
                      hint);
    }
    seen.push_back(std::move(resolved));
  }
}

// ISO 8601 UTC time of the run for a profile's provenance. SOURCE_DATE_EPOCH (the
// reproducible-builds convention) pins it so that the same inputs give the same bytes.
std::string provenance_date() {
  std::time_t seconds = std::time(nullptr);
  if (const char* epoch = std::getenv("SOURCE_DATE_EPOCH"); epoch != nullptr && *epoch != 0) {
    char* end = nullptr;
    errno = 0;
    const long long value = std::strtoll(epoch, &end, 10);
    // Up to 9999-12-31T23:59:59Z: ISO 8601's four-digit years (gmtime wrote year 10000,
    // negative years and day 00 past it).
    constexpr long long kLastIsoSecond = 253402300799;
    if (*end != 0 || value < 0 || errno == ERANGE) {
      throw_bad_input("SOURCE_DATE_EPOCH", fmt::format("'{}' is not a Unix time", epoch));
    }
    if (value > kLastIsoSecond) {
      throw_bad_input("SOURCE_DATE_EPOCH",
                      fmt::format("{} is after 9999-12-31T23:59:59Z ({}), the last time a "
                                  "profile's ISO 8601 date holds",
                                  epoch, kLastIsoSecond));
    }
    seconds = static_cast<std::time_t>(value);
  }
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

// The hardware id a profile records for --hardware `id_or_path`: the id of the spec file it
// names (read once, noted where it takes a built-in's id with other figures), else the word
// itself; a word that is no built-in id is kept (a device with no spec yet), with a note
// that reading the profile then takes --hardware with a spec file of that id.
std::string profile_hardware_id(const std::string& id_or_path) {
  // A word the spec reader would refuse as an id is no id a profile can record (review: a
  // tab made a profile no spec file could name).
  if (has_control_character(id_or_path)) {
    throw_bad_input("--hardware", "holds a control character (newline, tab, NUL...)",
                    "a hardware id is one line of text");
  }
  const std::string id =
      names_hardware_file(id_or_path) ? resolve_hardware_option(id_or_path).id : id_or_path;
  if (id == id_or_path && !is_builtin_hardware(id)) {
    fmt::print(stderr,
               "note: --hardware {}: no built-in hardware ({}); the profile records '{}', and "
               "reading it takes --hardware with a spec file of that id\n",
               id, fmt::join(builtin_hardware_names(), ", "), id);
  }
  return id;
}

void write_profile(const Profile& profile, const std::string& path) {
  write_file_atomically(path, dump_json(profile_to_json(profile)), "--out");
}

// profile import-nccl-tests LOG... --out FILE [--hardware ID]
void add_import_nccl_tests(CLI::App& profile) {
  struct Options {
    std::vector<std::string> logs;
    std::string out;
    std::string hardware;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = profile.add_subcommand(
      "import-nccl-tests",
      "Import nccl-tests logs (all_gather_perf, reduce_scatter_perf, all_reduce_perf) into a "
      "cost profile");
  command->add_option("logs", options->logs, "nccl-tests text output files")->required();
  command->add_option("--out", options->out, "Profile file to write")->required();
  command->add_option("--hardware", options->hardware,
                      "Hardware the logs were measured on (default: from their device names)");
  command->callback([options] {
    NamedFiles inputs = {{"--hardware", input_file(options->hardware)}};
    for (const std::string& path : options->logs) inputs.emplace_back("a log", path);
    require_distinct_files({{"--out", options->out}}, inputs);
    // One log given twice would pool its rows twice (found by QA: its samples doubled).
    require_each_once(options->logs, "its rows would be pooled twice",
                      "give each log once (repeated runs of one size pool from several logs)");
    std::vector<TextSource> sources;
    for (const std::string& path : options->logs) {
      sources.push_back({path, read_text_file(path)});
    }
    NcclTestsImportOptions import_options;
    if (!options->hardware.empty())
      import_options.hardware = profile_hardware_id(options->hardware);
    Profile imported = import_nccl_tests(sources, import_options);
    if (!options->hardware.empty()) note_hardware_override(imported);
    imported.provenance.tool = std::string("fsdptune ") + FSDPTUNE_VERSION;
    imported.provenance.date = provenance_date();
    std::string command_line = "fsdptune profile import-nccl-tests";
    for (const std::string& path : options->logs) command_line += " " + shell_word(path);
    command_line += " --out " + shell_word(options->out);
    if (!options->hardware.empty()) command_line += " --hardware " + shell_word(options->hardware);
    imported.provenance.command = command_line;
    write_profile(imported, options->out);
    fmt::print("wrote {} (hardware {}):\n", options->out, imported.hardware);
    for (const CollectiveSweep& sweep : imported.collectives) {
      fmt::print("  {} over {} ({} per node): {}\n", to_string(sweep.kind),
                 counted(sweep.group.ranks, "rank"), sweep.group.ranks_per_node,
                 counted(static_cast<std::int64_t>(sweep.points.size()), "size"));
    }
  });
}

// --- Measuring and trace import (issue: profiler) ---

struct CollectFlags {
  JobOptions job;
  std::string backend;
  std::string hardware;
  std::int64_t reps = 10;
  std::int64_t warmup = 3;
  std::vector<std::string> sizes;
  std::vector<std::string> collectives;
  bool no_contention = false;
  double timeout_s = CollectorOptions{}.timeout_s;
  int stall_rank = -1;
  std::int64_t ranks_per_node = 0;
  std::string attention = "auto";
  std::string out;
  std::string hardware_out;
};

struct KinetoFlags {
  std::string trace;
  std::string hardware;
  std::int64_t ranks_per_node = 8;
  std::string out;
};

// The command line of this process, for provenance (Linux: /proc/self/cmdline), as
// "fsdptune <arguments>": the path the binary was started by (./fsdptune, build/...) is not
// part of what was measured, and the other commands' provenance says "fsdptune" too.
std::string this_command_line() {
  std::ifstream cmdline("/proc/self/cmdline", std::ios::binary);
  const std::string raw((std::istreambuf_iterator<char>(cmdline)),
                        std::istreambuf_iterator<char>());
  const std::size_t arguments = raw.find('\0');
  std::string out = "fsdptune";
  if (arguments != std::string::npos) {
    // Each argument one shell word (a path with a space was recorded as two).
    std::size_t from = arguments + 1;
    while (from < raw.size()) {
      const std::size_t end = std::min(raw.find('\0', from), raw.size());
      out += " " + shell_word(raw.substr(from, end - from));
      from = end + 1;
    }
  }
  return out == "fsdptune" ? "fsdptune profile" : out;
}

// --sizes items: "64MiB" (one size) or "1KiB:64MiB" (powers of two, both ends included).
std::vector<std::int64_t> parse_sizes(const std::vector<std::string>& items) {
  std::vector<std::int64_t> sizes;
  for (const auto& item : items) {
    const auto colon = item.find(':');
    if (colon == std::string::npos) {
      sizes.push_back(parse_size_bytes(item, "--sizes"));
      continue;
    }
    const std::int64_t low = parse_size_bytes(item.substr(0, colon), "--sizes");
    const std::int64_t high = parse_size_bytes(item.substr(colon + 1), "--sizes");
    auto power_of_two = [](std::int64_t v) { return (v & (v - 1)) == 0; };
    if (!power_of_two(low) || !power_of_two(high) || low > high) {
      throw_bad_input("--sizes", fmt::format("range '{}' needs powers of two, low <= high", item),
                      "e.g. --sizes 1KiB:64MiB");
    }
    const auto range = power_of_two_sizes(low, high);
    sizes.insert(sizes.end(), range.begin(), range.end());
  }
  return sizes;
}

// What every rank of `mpirun -np N fsdptune profile` finds alike, checked before the
// collector starts MPI: said once (found by QA: each rank said it).
CollectorOptions checked_collector_options(const CollectFlags& flags) {
  if (flags.backend != "cpu" && flags.backend != "cuda") {
    throw_bad_input("--backend", fmt::format("'{}' is not a backend", flags.backend),
                    "use --backend cpu or --backend cuda");
  }
  if (flags.out.empty()) throw_bad_input("--out", "required: the profile file to write");
  require_distinct_files({{"--out", flags.out}, {"--hardware-out", flags.hardware_out}},
                         {{"--model", input_file(flags.job.model)},
                          {"--job-toml", flags.job.job_toml},
                          {"--hardware", input_file(flags.hardware)}});
  if (!flags.hardware_out.empty() && flags.backend != "cpu") {
    throw_bad_input("--hardware-out", "only the cpu backend derives a hardware spec",
                    "GPUs have built-in specs (--hardware h200)");
  }
  CollectorOptions options;
  options.reps = flags.reps;
  options.warmup = flags.warmup;
  options.collective_sizes_bytes = parse_sizes(flags.sizes);
  if (!flags.collectives.empty()) {
    options.collective_kinds.clear();
    for (const auto& name : flags.collectives) {
      // The kinds a profile sweeps (found by QA: the error listed send_recv, which the
      // collector then refuses as not swept, as it still says of it).
      if (name != "all_gather" && name != "reduce_scatter" && name != "all_reduce" &&
          name != "send_recv") {
        throw_bad_input("--collectives", fmt::format("unknown collective '{}' (expected "
                                                     "all_gather, reduce_scatter or all_reduce)",
                                                     name));
      }
      options.collective_kinds.push_back(collective_from_string(name, "--collectives"));
    }
  }
  options.measure_contention = !flags.no_contention;
  options.timeout_s = flags.timeout_s;
  options.stall_rank = flags.stall_rank;
  options.ranks_per_node = flags.ranks_per_node;
  options.attention = attention_kernel_from_string(flags.attention, "--attention");
  if (flags.backend == "cpu" && options.attention != AttentionKernel::kAuto) {
    throw_bad_input("--attention",
                    "the cpu backend has one attention (Eigen), not " + flags.attention,
                    "--attention cudnn or cublas needs --backend cuda");
  }
  options.hardware = flags.hardware.empty() ? flags.backend : profile_hardware_id(flags.hardware);
  options.tool = std::string("fsdptune ") + FSDPTUNE_VERSION;
  options.date = provenance_date();
  options.command = this_command_line();
  validate_collector_options(options);
  return options;
}

void run_collect(const CollectFlags& flags) {
  CollectorOptions options;
  std::optional<Workload> workload;
  said_once([&] {
    options = checked_collector_options(flags);
    const ModelSpec model = resolve_model_option(flags.job);
    workload = build_workload(model, to_job_spec(flags.job, model));
  });
  std::unique_ptr<Collector> collector =
      flags.backend == "cpu" ? make_cpu_collector() : make_cuda_collector();
  const Profile profile = collector->collect(*workload, options);
  if (collector->rank() != 0) return;  // rank 0 writes and reports

  // The profile and its hardware spec (--hardware-out), written together: both or neither.
  std::vector<OutputFile> outputs = {{flags.out, dump_json(profile_to_json(profile)), "--out"}};
  HardwareSpec spec;
  const bool swept_all_gather =
      std::any_of(profile.collectives.begin(), profile.collectives.end(),
                  [](const auto& sweep) { return sweep.kind == CollectiveKind::kAllGather; });
  if (!flags.hardware_out.empty()) {
    HostFacts host;
    host.id = profile.hardware;
    host.ranks_per_node =
        profile.collectives.empty() ? 1 : profile.collectives.front().group.ranks_per_node;
    host.name = fmt::format("{}, {} per host", profile.provenance.environment.at("cpu"),
                            counted(host.ranks_per_node, "rank"));
    host.memory_bytes = static_cast<std::int64_t>(sysconf(_SC_PHYS_PAGES)) *
                        static_cast<std::int64_t>(sysconf(_SC_PAGE_SIZE));
    spec = cpu_hardware_spec(profile, host);
    if (!swept_all_gather) spec.name += "; collectives not measured (assumed)";
    outputs.push_back({flags.hardware_out, dump_json(hardware_to_json(spec)), "--hardware-out"});
  }
  write_files_atomically(outputs);
  std::size_t points = 0;
  for (const auto& sweep : profile.collectives) points += sweep.points.size();
  fmt::print("profiled {} distinct compute ops of {} ({} after {} warm-up each) on {}\n",
             profile.compute.size(), workload->model.name, counted(options.reps, "rep"),
             options.warmup, counted(collector->world_size(), "rank"));
  fmt::print("collectives: {}, {} -- {}\n",
             counted(static_cast<std::int64_t>(profile.collectives.size()), "sweep"),
             counted(static_cast<std::int64_t>(points), "point"),
             profile.provenance.environment.at("collectives"));
  fmt::print(
      "contention: compute slowdown with comm {:.3f}, comm share efficiency {:.3f}, comm "
      "slowdown with compute {:.3f} -- {}\n",
      profile.contention.compute_slowdown_with_comm, profile.contention.comm_share_efficiency,
      profile.contention.comm_slowdown_with_compute,
      profile.provenance.environment.at("contention"));
  fmt::print("copies beside compute: copy slowdown {:.3f}, compute slowdown {:.3f} -- {}\n",
             profile.contention.copy_slowdown_with_compute,
             profile.contention.compute_slowdown_with_copy,
             profile.provenance.environment.at("copy_beside_compute"));
  if (collector->world_size() > 1 && collector->world_size() != workload->job.dp_shard) {
    fmt::print(
        "note: the sweep ran over {} ranks but the job shards over {} (--gpus); a "
        "cost model looks collectives up by group size\n",
        collector->world_size(), workload->job.dp_shard);
  }
  fmt::print("wrote {}\n", flags.out);
  if (!flags.hardware_out.empty()) {
    fmt::print(
        "wrote {} (hardware spec '{}': GEMM {:.3g} GFLOP/s, memory {:.3g} GB/s, "
        "all-gather busbw {:.3g} GB/s after {}{})\n",
        flags.hardware_out, spec.id, spec.peak_fp32_flops_per_s * 1e-9, spec.hbm_bytes_per_s * 1e-9,
        spec.nvlink_busbw_bytes_per_s * 1e-9, format_seconds(spec.collective_base_latency_s),
        swept_all_gather
            ? ""
            : fmt::format(", not measured: no all-gather was swept ({}), half the memory rate "
                          "after 10 us assumed",
                          collector->world_size() == 1 ? "one rank" : "--collectives"));
  }
}

void run_import_kineto(const KinetoFlags& flags) {
  if (flags.out.empty()) throw_bad_input("--out", "required: the profile file to write");
  require_distinct_files({{"--out", flags.out}},
                         {{"the trace", flags.trace}, {"--hardware", input_file(flags.hardware)}});
  KinetoImportOptions options;
  if (!flags.hardware.empty()) options.hardware = profile_hardware_id(flags.hardware);
  options.ranks_per_node = flags.ranks_per_node;
  // Traces of a profiled training step run to hundreds of MiB, some past the 1 GiB of
  // other inputs.
  constexpr std::int64_t kMaxTraceBytes = std::int64_t{4} << 30;
  KinetoImportResult result =
      import_kineto_trace(read_json_file(flags.trace, kMaxTraceBytes), options, flags.trace);
  if (result.profile.compute.empty() && result.profile.collectives.empty()) {
    // As import-nccl-tests refuses a log without data rows: an empty profile measures nothing.
    throw_bad_input(flags.trace, "no GEMM, attention, memory-bound or NCCL kernel to import",
                    result.notes.empty() ? std::string("is it a torch.profiler trace of a step?")
                                         : fmt::format("{}", fmt::join(result.notes, "; ")));
  }
  if (!flags.hardware.empty()) note_hardware_override(result.profile);
  result.profile.provenance.tool = std::string("fsdptune ") + FSDPTUNE_VERSION;
  result.profile.provenance.date = provenance_date();
  result.profile.provenance.command = this_command_line();
  write_profile(result.profile, flags.out);
  std::size_t points = 0;
  for (const auto& sweep : result.profile.collectives) points += sweep.points.size();
  fmt::print("imported {} GEMM, {} attention and {} into {} and {} into {} from {}\n",
             result.gemm_calls, result.attention_calls,
             counted(result.memory_calls, "memory-bound op call"),
             counted(static_cast<std::int64_t>(result.profile.compute.size()), "compute entry",
                     "compute entries"),
             counted(result.nccl_kernels, "NCCL kernel"),
             counted(static_cast<std::int64_t>(points), "collective point"), flags.trace);
  for (const auto& note : result.notes) fmt::print("{}\n", note);
  fmt::print("wrote {} (hardware {})\n", flags.out, result.profile.hardware);
}

// profile --backend cpu|cuda <job flags> --out FILE: measure here (the `profile` command
// itself runs this when no import subcommand is given).
void add_collect(CLI::App& profile) {
  // Owned by the CLI11 app for the life of the process (CLI11 binds to these).
  auto collect = std::make_shared<CollectFlags>();
  add_job_options(&profile, collect->job);
  // --model is required to measure, not to import: checked in the callback.
  profile.get_option("--model")->required(false);
  profile.add_option("--backend", collect->backend,
                     "Measure on: cpu (Eigen + MPI) or cuda "
                     "(CUPTI + NCCL)");
  profile.add_option("--hardware", collect->hardware,
                     "HardwareSpec id recorded in the profile, or a spec file whose id to "
                     "record (default: the backend name)");
  profile.add_option("--reps", collect->reps, "Timed repetitions per op and size")
      ->capture_default_str();
  profile.add_option("--warmup", collect->warmup, "Untimed repetitions before each")
      ->capture_default_str();
  profile
      .add_option("--sizes", collect->sizes,
                  "Collective sizes: 64MiB, or 1KiB:64MiB for powers of two (default: cpu "
                  "1KiB:64MiB, cuda 1KiB:4GiB)")
      ->delimiter(',');
  profile
      .add_option("--collectives", collect->collectives,
                  "all_gather,reduce_scatter,all_reduce (default: all three)")
      ->delimiter(',');
  profile
      .add_option("--attention", collect->attention,
                  "cuda: auto (cuDNN's fused attention where it runs the op, else cuBLAS), "
                  "cudnn or cublas")
      ->capture_default_str();
  profile.add_flag("--no-contention", collect->no_contention,
                   "Skip the overlap measurements (keep the default factors)");
  profile
      .add_option("--timeout", collect->timeout_s,
                  "Seconds a rank waits for the others before every rank aborts")
      ->capture_default_str();
  // Test hook, hidden from --help.
  profile.add_option("--debug-stall-rank", collect->stall_rank)->group("");
  profile
      .add_option("--ranks-per-node", collect->ranks_per_node,
                  "Ranks per node recorded for the sweeps (default: cpu, the ranks sharing "
                  "this host; cuda, --gpus-per-node; at most the ranks swept)")
      // (CLI::PositiveNumber's message quoted the largest double in 300 digits.)
      ->check(CLI::Validator(
          [](std::string& value) {
            std::int64_t parsed = 0;
            const auto [end, error] =
                std::from_chars(value.data(), value.data() + value.size(), parsed);
            const bool integer = error == std::errc{} && end == value.data() + value.size();
            return integer && parsed < 1 ? fmt::format("must be at least 1, got {}", value)
                                         : std::string();
          },
          ""));
  profile.add_option("--out", collect->out, "Profile file to write");
  profile.add_option("--hardware-out", collect->hardware_out,
                     "cpu: also write a hardware spec of this host derived from the profile "
                     "(for --hardware of simulate/tune)");
  profile.callback([&profile, collect] {
    if (!profile.get_subcommands().empty()) return;  // an import subcommand ran instead
    if (collect->job.model.empty() && collect->job.job_toml.empty()) {
      throw_bad_input("--model", "required to measure a profile (or --job-toml)",
                      "fsdptune profile --backend cpu|cuda --model NAME ... --out FILE");
    }
    if (collect->backend.empty()) {
      throw_bad_input("--backend", "required to measure a profile",
                      "fsdptune profile --backend cpu|cuda --model NAME ... --out FILE, or a "
                      "subcommand: fsdptune profile --help");
    }
    run_collect(*collect);
  });
}

// profile import-kineto TRACE.json --out FILE
void add_import_kineto(CLI::App& profile) {
  auto kineto = std::make_shared<KinetoFlags>();
  CLI::App* import = profile.add_subcommand(
      "import-kineto",
      "Take GEMM, attention, norm/embedding/AdamW and NCCL kernel times from a PyTorch "
      "profiler Chrome trace");
  import->add_option("trace", kineto->trace, "Trace JSON (torch.profiler export_chrome_trace)")
      ->required();
  import->add_option("--hardware", kineto->hardware,
                     "HardwareSpec id, or a spec file whose id to record (default: from the "
                     "trace's deviceProperties)");
  import->add_option("--ranks-per-node", kineto->ranks_per_node, "GPUs per node of the traced job")
      ->capture_default_str();
  import->add_option("--out", kineto->out, "Profile file to write")->required();
  import->callback([kineto] { run_import_kineto(*kineto);
});
}  // namespace

// profile merge A.json B.json [...] --out C.json [--prefer first|last]
void add_merge(CLI::App& profile) {
  struct Options {
    std::vector<std::string> inputs;
    std::string out;
    std::string prefer = "error";
  };
  auto options = std::make_shared<Options>();
  CLI::App* merge = profile.add_subcommand(
      "merge",
      "Merge profiles of one hardware into one (e.g. CUPTI compute + nccl-tests collectives)");
  merge->add_option("profiles", options->inputs, "Profile files, two or more")->required();
  merge->add_option("--out", options->out, "Profile file to write")->required();
  merge
      ->add_option("--prefer", options->prefer,
                   "When two inputs measured the same op, sweep or contention: keep the "
                   "first's or the last's (default: error)")
      ->capture_default_str();
  merge->callback([options] {
    NamedFiles profiles;
    for (const std::string& path : options->inputs) profiles.emplace_back("a profile", path);
    require_distinct_files({{"--out", options->out}}, profiles);
    // A profile merged with itself (found by QA: taken with --prefer, its second part empty).
    require_each_once(options->inputs, "it would be merged with itself", "give each profile once");
    const MergeOverlap overlap = merge_overlap_from_string(options->prefer, "--prefer");
    std::vector<NamedProfile> inputs;
    for (const std::string& path : options->inputs) {
      inputs.push_back({path, profile_from_json(read_json_file(path), path)});
    }
    ProfileMergeResult result = merge_profiles(inputs, overlap);
    Profile& merged = result.profile;
    merged.provenance.tool = std::string("fsdptune ") + FSDPTUNE_VERSION;
    merged.provenance.date = provenance_date();
    std::string command_line = "fsdptune profile merge";
    for (const std::string& path : options->inputs) command_line += " " + shell_word(path);
    command_line += " --out " + shell_word(options->out);
    if (overlap != MergeOverlap::kError) command_line += " --prefer " + options->prefer;
    merged.provenance.command = command_line;
    write_profile(merged, options->out);

    fmt::print("merged {} profiles (hardware {}) into {}, {}:\n", inputs.size(), merged.hardware,
               counted(static_cast<std::int64_t>(merged.compute.size()), "compute entry",
                       "compute entries"),
               counted(static_cast<std::int64_t>(merged.collectives.size()), "sweep"));
    for (std::size_t p = 0; p < merged.parts.size(); ++p) {
      std::size_t compute = 0, sweeps = 0;
      for (const auto& entry : merged.compute) compute += entry.part == static_cast<int>(p);
      for (const auto& sweep : merged.collectives) sweeps += sweep.part == static_cast<int>(p);
      const ProfilePart& part = merged.parts[p];
      fmt::print("  {} ({}): {} compute, {}{}\n", part.source,
                 part.provenance.method.empty() ? "method unknown" : part.provenance.method,
                 compute, counted(static_cast<std::int64_t>(sweeps), "sweep"),
                 merged.contention_part == static_cast<int>(p) ? ", contention" : "");
    }
    if (merged.contention_part < 0) fmt::print("  contention: defaults (no input measured it)\n");
    for (const std::string& note : result.notes) fmt::print("  {}\n", note);
    fmt::print("wrote {}\n", options->out);
  });
}

// profile compare PROFILE.json [--hardware ID|FILE] [--json|--markdown]
void add_compare(CLI::App& profile) {
  struct Options {
    std::string profile;
    std::string hardware;
    bool json = false;
    bool markdown = false;
  };
  auto options = std::make_shared<Options>();
  CLI::App* compare = profile.add_subcommand(
      "compare", "Compare a measured profile with the analytic model, op by op and size by size");
  compare->add_option("profile", options->profile, "Profile file")->required();
  compare->add_option("--hardware", options->hardware,
                      "Analytic model of: a built-in id or a spec file (default: the profile's "
                      "hardware)");
  compare->add_flag("--json", options->json, "Print one JSON object");
  compare->add_flag("--markdown", options->markdown, "Print Markdown tables");
  compare->callback([options] {
    if (options->json && options->markdown) {
      throw_bad_input("--json/--markdown", "give at most one of --json and --markdown");
    }
    const Profile measured = read_profile_file(options->profile);
    const std::string hardware_id =
        options->hardware.empty() ? measured.hardware : options->hardware;
    HardwareSpec hardware;
    try {
      hardware = resolve_hardware_option(hardware_id);
    } catch (const Error&) {
      if (!options->hardware.empty()) throw;
      throw_bad_input(fmt::format("{}: field 'hardware'", options->profile),
                      fmt::format("'{}' is not a built-in hardware", measured.hardware),
                      "pass --hardware FILE with the spec to compare against");
    }
    const auto analytic = make_analytic_cost_model(hardware);
    const ProfileComparison comparison = compare_profile(measured, *analytic);
    // fp32 GEMMs past the fp32 peak ran on TF32 tensor cores, which the model does not price
    // (found by QA: a trace's cutlass tensorop fp32 GEMM read "+476.7%", unsaid).
    std::int64_t tf32 = 0;
    double fastest = 0;
    for (const OpComparison& row : comparison.ops) {
      if (row.op.kind == OpKind::kGemm && row.op.dtype == DType::kFP32 &&
          row.measured_rate > hardware.peak_fp32_flops_per_s) {
        ++tf32;
        fastest = std::max(fastest, row.measured_rate);
      }
    }
    if (tf32 > 0) {
      fmt::print(stderr,
                 "note: {}: {} at up to {}, past the fp32 peak of {} ({}): TF32 tensor cores "
                 "(torch.backends.cuda.matmul.allow_tf32, or "
                 "set_float32_matmul_precision(\"high\")), which the model prices as fp32; "
                 "the errors are that, not the model's\n",
                 options->profile, counted(tf32, "fp32 GEMM"), format_flops_per_s(fastest),
                 hardware.id, format_flops_per_s(hardware.peak_fp32_flops_per_s));
    }
    if (options->json) {
      fmt::print("{}", dump_json(profile_comparison_to_json(comparison)));
      return;
    }
    std::ostringstream text;
    print_profile_comparison(text, comparison, options->markdown);
    fmt::print("{}", text.str());
  });
}

}  // namespace fsdptune::cli

void register_profile_commands(CLI::App& app) {
  CLI::App* profile = app.add_subcommand("profile", "Measure or import cost profiles");
  profile->require_subcommand(0, 1);  // none: measure (add_collect)
  add_import_nccl_tests(*profile);
  add_collect(*profile);
  add_import_kineto(*profile);
  add_merge(*profile);
  add_compare(*profile);
}

}  // namespace fsdptune::cli
