#include "cost_options.hpp"

#include <set>
#include <string>

#include <fmt/format.h>

#include "commands.hpp"
#include "fsdptune/error.hpp"
#include "fsdptune/io.hpp"

namespace fsdptune::cli {

void add_cost_options(CLI::App* command, CostOptions& options,
                      const std::string& default_hardware) {
  command->add_option(
      "--hardware", options.hardware,
      "Hardware: a built-in id (h100-sxm, h200, a100-80g) or a spec file" +
          (default_hardware.empty()
               ? std::string(" (no default: give it or --profile)")
               : fmt::format(" (default: {}, or the hardware of --profile)", default_hardware)));
  command->add_option("--profile", options.profile,
                      "Cost profile (JSON) with measured costs; its hardware id selects the "
                      "spec used for what it did not measure");
}

Profile read_profile_file(const std::string& path) {
  return profile_from_json(read_json_file(path), path);
}

Profile read_profile_option(const std::string& path) {
  return read_flag_file("--profile", path, [&] { return read_profile_file(path); });
}

namespace {

void note_builtin_id_taken(const std::string& id_or_path, const HardwareSpec& spec) {
  // A spec file under a built-in's id with other figures is read (a what-if copy), but
  // every output names it as the built-in: said, once per file (found by QA: two reports
  // both headed "h100-sxm", one of a B200's figures).
  if (is_builtin_hardware(id_or_path) || !is_builtin_hardware(spec.id)) return;
  const HardwareSpec builtin = builtin_hardware(spec.id);
  static std::set<std::string> noted;
  if (!same_figures(builtin, spec) && noted.insert(id_or_path).second) {
    fmt::print(stderr,
               "note: --hardware {}: its id \"{}\" is a built-in's, with other figures ({}): "
               "outputs name it \"{}\" as they name the built-in; give the file its own id\n",
               id_or_path, spec.id, figure_differences(builtin, spec), spec.id);
  }
}

}  // namespace

HardwareSpec resolve_hardware_option(const std::string& id_or_path) {
  HardwareSpec spec =
      read_flag_file("--hardware", id_or_path, [&] { return resolve_hardware(id_or_path); });
  note_builtin_id_taken(id_or_path, spec);
  return spec;
}

ResolvedCostModel resolve_cost_model(const CostOptions& options,
                                     const std::string& default_hardware) {
  ResolvedCostModel resolved;
  if (!options.profile.empty()) {
    resolved.profile = read_profile_option(options.profile);
  }
  if (!options.hardware.empty()) {
    resolved.hardware = resolve_hardware_option(options.hardware);
  } else if (resolved.profile) {
    try {
      resolved.hardware = builtin_hardware(resolved.profile->hardware);
    } catch (const Error&) {
      throw_bad_input(fmt::format("{}: field 'hardware'", options.profile),
                      fmt::format("'{}' is not a built-in hardware", resolved.profile->hardware),
                      "pass --hardware FILE with the spec of the GPU it was measured on");
    }
  } else if (!default_hardware.empty()) {
    resolved.hardware = resolve_hardware(default_hardware);
  } else {
    throw_bad_input("--hardware", "no hardware given",
                    "pass --hardware (h100-sxm, h200, a100-80g or a spec file) or --profile FILE");
  }
  if (resolved.profile) {
    if (resolved.profile->hardware != resolved.hardware.id) {
      throw_bad_input("--profile " + options.profile,
                      fmt::format("measured on '{}' but --hardware is '{}'",
                                  resolved.profile->hardware, resolved.hardware.id),
                      is_builtin_hardware(resolved.profile->hardware)
                          ? "drop --hardware or pass the spec of the GPU the profile was "
                            "measured on"
                          // Dropping it fails for a profile of a host ('cpu'): no built-in.
                          : fmt::format("pass --hardware FILE, the spec of '{}' the profile "
                                        "was measured on",
                                        resolved.profile->hardware));
    }
    resolved.model = make_profile_cost_model(*resolved.profile, resolved.hardware);
  } else {
    resolved.model = make_analytic_cost_model(resolved.hardware);
  }
  return resolved;
}

}  // namespace fsdptune::cli
