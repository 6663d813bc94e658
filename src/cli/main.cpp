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

// Writes `text` to stderr without throwing: fmt::print throws when stderr is closed
// (`2>&-`), and from a catch handler below that ended the program in std::terminate.
void say(const std::string& text) { std::fputs(text.c_str(), stderr); }

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

  const auto run = [&]() -> int {
    try {
      app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
      return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
      return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
      return app.exit(e);
    } catch (const CLI::ParseError& e) {
      say(fmt::format("fsdptune: error: {}\nrun with --help for usage\n", e.what()));
      return 2;
    } catch (const fsdptune::Error& e) {
      say(fmt::format("fsdptune: error: {}\n", e.what()));
      if (!e.hint().empty()) say(fmt::format("  hint: {}\n", e.hint()));
      return e.exit_code();
    } catch (const std::bad_alloc&) {
      // Sizes a flag or file asked for beyond this machine's memory (e.g. profile --sizes
      // 1TiB).
      say("fsdptune: error: out of memory: a size given by a flag or file needs more memory "
          "than this machine has\n");
      return 1;
    } catch (const std::exception& e) {
      say(fmt::format("fsdptune: error: {}\n", e.what()));
      return 1;
    }
    return 0;
  };
  const int code = run();
  // What went to stdout is buffered: a write that failed (stdout closed, a full disk)
  // shows only here, and the output is lost (it exited 0).
  if (std::fflush(stdout) != 0 || std::ferror(stdout) != 0) {
    say("fsdptune: error: standard output: the output could not be written\n");
    return code == 0 ? 1 : code;
  }
  return code;
}
