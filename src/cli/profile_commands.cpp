// `fsdptune profile ...`: make cost profiles. One function per subcommand, each adding
// itself to the `profile` group; register_profile_commands lists them.
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "fsdptune/error.hpp"
#include "fsdptune/importers.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/profile.hpp"

namespace fsdptune::cli {
namespace {

// ISO 8601 UTC time of the run for a profile's provenance. SOURCE_DATE_EPOCH (the
// reproducible-builds convention) pins it so that the same inputs give the same bytes.
std::string provenance_date() {
  std::time_t seconds = std::time(nullptr);
  if (const char* epoch = std::getenv("SOURCE_DATE_EPOCH"); epoch != nullptr && *epoch != 0) {
    char* end = nullptr;
    const long long value = std::strtoll(epoch, &end, 10);
    if (*end != 0 || value < 0) {
      throw_bad_input("SOURCE_DATE_EPOCH", fmt::format("'{}' is not a Unix time", epoch));
    }
    seconds = static_cast<std::time_t>(value);
  }
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

void write_profile(const Profile& profile, const std::string& path) {
  write_file_atomically(path, dump_json(profile_to_json(profile)));
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
    std::vector<TextSource> sources;
    for (const std::string& path : options->logs) {
      sources.push_back({path, read_text_file(path)});
    }
    NcclTestsImportOptions import_options;
    if (!options->hardware.empty())
      import_options.hardware = resolve_hardware(options->hardware).id;
    Profile imported = import_nccl_tests(sources, import_options);
    imported.provenance.tool = std::string("fsdptune ") + FSDPTUNE_VERSION;
    imported.provenance.date = provenance_date();
    std::string command_line = "fsdptune profile import-nccl-tests";
    for (const std::string& path : options->logs) command_line += " " + path;
    command_line += " --out " + options->out;
    if (!options->hardware.empty()) command_line += " --hardware " + options->hardware;
    imported.provenance.command = command_line;
    write_profile(imported, options->out);
    fmt::print("wrote {} (hardware {}):\n", options->out, imported.hardware);
    for (const CollectiveSweep& sweep : imported.collectives) {
      fmt::print("  {} over {} ranks ({} per node): {} sizes\n", to_string(sweep.kind),
                 sweep.group.ranks, sweep.group.ranks_per_node, sweep.points.size());
    }
  });
}

}  // namespace

void register_profile_commands(CLI::App& app) {
  CLI::App* profile = app.add_subcommand("profile", "Measure or import cost profiles");
  profile->require_subcommand(1);
  add_import_nccl_tests(*profile);
}

}  // namespace fsdptune::cli
