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
#include "fsdptune/error.hpp"
#include "fsdptune/hardware.hpp"
#include "fsdptune/profile.hpp"

namespace fsdptune::cli {

struct CostOptions {
  std::string hardware;  // --hardware: built-in id or hardware spec file; empty: unset
  std::string profile;   // --profile: cost profile file; empty: unset
};

void add_cost_options(CLI::App* command, CostOptions& options);

// Reads and validates a profile file: Error(kBadInput) naming the file and field.
Profile read_profile_file(const std::string& path);

// Runs `read`, which reads the file `path` given to `flag`: an error about the file as a
// whole (no such file, a folder, too large) names the flag too ("--hardware spec.json: no
// such file"; it named only the file). Errors inside the file name the file and field.
template <typename Read>
auto read_flag_file(const char* flag, const std::string& path, Read&& read) -> decltype(read()) {
  try {
    return read();
  } catch (const Error& e) {
    if (e.where() != path) throw;
    throw Error(e.kind(), fmt::format("{} {}", flag, path), e.message(), e.hint());
  }
}

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
