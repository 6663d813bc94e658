// The cost-model flags every costing subcommand shares (cost, simulate, tune, ...):
// --hardware NAME|FILE and --profile FILE. Register them with add_cost_options, then build
// the CostModel with resolve_cost_model.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "fsdptune/cost_model.hpp"
#include "fsdptune/hardware.hpp"
#include "fsdptune/profile.hpp"

namespace fsdptune::cli {

struct CostOptions {
  std::string hardware;  // --hardware: built-in id or hardware spec file; empty: unset
  std::string profile;   // --profile: cost profile file; empty: unset
};

// The hardware of `tune` and `sweep` when neither --hardware nor --profile names one
// (`simulate` and `cost` ask for it).
inline constexpr const char* kDefaultTuneHardware = "h100-sxm";

// `default_hardware`: the command's hardware when none is given, said in --help (empty:
// none, resolve_cost_model refuses).
void add_cost_options(CLI::App* command, CostOptions& options,
                      const std::string& default_hardware = "");

// Reads and validates a profile file: Error(kBadInput) naming the file and field.
Profile read_profile_file(const std::string& path);
// The same for the file given to --profile, and resolve_hardware of the value of
// --hardware: an unreadable file names the flag too (read_flag_file).
Profile read_profile_option(const std::string& path);
// A spec file under a built-in's id with other figures is noted on stderr, once per file.
HardwareSpec resolve_hardware_option(const std::string& id_or_path);

struct ResolvedCostModel {
  HardwareSpec hardware;
  std::optional<Profile> profile;  // when --profile was given
  std::unique_ptr<CostModel> model;
};

// --profile alone: the profile's `hardware` id selects the built-in spec for the analytic
// fallback. --hardware alone: the analytic model. Both: the profile over that spec, whose
// id must equal the profile's. Neither: `default_hardware` if not empty, else
// Error(kBadInput) asking for one.
ResolvedCostModel resolve_cost_model(const CostOptions& options,
                                     const std::string& default_hardware = "");

}  // namespace fsdptune::cli
