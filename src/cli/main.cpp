// fsdptune: simulate, tune and validate FSDP training schedules.
#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "fsdptune/error.hpp"

namespace {

// An option given an empty value (`--trace ""`, `--memory-limit ""`, a shell variable that
// was never set) is refused rather than read as the option left out: every option of
// fsdptune's takes a non-empty value, and leaving one out is how a default is asked for.
void refuse_empty_values(CLI::App& app) {
  const CLI::Validator non_empty(
      [](std::string& value) {
        return value.empty() ? std::string("is empty: give a value, or leave the option out")
                             : std::string();
      },
      "");
  for (CLI::Option* option : app.get_options()) {
    if (option->get_type_size() != 0) option->check(non_empty);
  }
  for (CLI::App* command : app.get_subcommands([](CLI::App*) { return true; }))
    refuse_empty_values(*command);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fsdptune: performance simulator and schedule autotuner for FSDP training"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("fsdptune ") + FSDPTUNE_VERSION);

  // One line per area, in the README's order.
  fsdptune::cli::register_model_commands(app);
  fsdptune::cli::register_cost_commands(app);
  fsdptune::cli::register_profile_commands(app);
  fsdptune::cli::register_sim_commands(app);
  fsdptune::cli::register_tune_commands(app);
  fsdptune::cli::register_validate_commands(app);
  fsdptune::cli::register_report_commands(app);
  fsdptune::cli::register_sweep_commands(app);

  refuse_empty_values(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "fsdptune: error: {}\n", e.what());
    fmt::print(stderr, "run with --help for usage\n");
    return 2;
  } catch (const fsdptune::Error& e) {
    fmt::print(stderr, "fsdptune: error: {}\n", e.what());
    if (!e.hint().empty()) fmt::print(stderr, "  hint: {}\n", e.hint());
    return e.exit_code();
  } catch (const std::bad_alloc&) {
    // Sizes a flag or file asked for beyond this machine's memory (e.g. profile --sizes 1TiB).
    fmt::print(stderr,
               "fsdptune: error: out of memory: a size given by a flag or file needs more memory "
               "than this machine has\n");
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "fsdptune: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
