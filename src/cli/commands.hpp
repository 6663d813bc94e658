// The `fsdptune` subcommands. Each area registers its own in its own file; main.cpp
// calls every register_* in a fixed order. Handlers throw fsdptune::Error; main maps
// it to the exit code.
#pragma once

#include <CLI/CLI.hpp>

namespace fsdptune::cli {

// Registered subcommands (one line per area; keep the order of the README).
void register_model_commands(CLI::App& app);    // model, workload (model_commands.cpp)
void register_cost_commands(CLI::App& app);     // cost (cost_commands.cpp)
void register_profile_commands(CLI::App& app);  // profile ... (profile_commands.cpp)
void register_sim_commands(CLI::App& app);      // simulate (sim_commands.cpp)
void register_tune_commands(CLI::App& app);     // tune (tune_commands.cpp)
void register_sweep_commands(CLI::App& app);    // sweep, pipeline (sweep_commands.cpp)

}  // namespace fsdptune::cli
