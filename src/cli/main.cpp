// fsdptune: simulate, tune and validate FSDP training schedules.
#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "fsdptune/error.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/units.hpp"

namespace {

// The name check_option_values knows an int_range validator by.
constexpr const char* kIntRangeName = "int_range";

// The length of a leading sign of `value` (0 or 1).
std::size_t sign_length(const std::string& value) {
  return !value.empty() && (value[0] == '-' || value[0] == '+') ? 1 : 0;
}

// The deepest command the words named (`fsdptune profile import-kineto` -> import-kineto).
CLI::App& last_command(CLI::App& app) {
  CLI::App* command = &app;
  while (!command->get_subcommands().empty()) command = command->get_subcommands().front();
  return *command;
}

// Whether `word` is given as an option: a dash and not a number ("-8", "-.5").
bool option_like(const std::string& word) {
  const bool number = word.size() > 1 && ((word[1] >= '0' && word[1] <= '9') || word[1] == '.');
  return word.size() > 1 && word[0] == '-' && !number;
}

// What to say of words no option or positional took, in the order given (CLI11 lists
// them last first: "not expected: 2 --tpp"): an unknown option first, with the nearest of
// the command's own within two edits ("--tpp (did you mean --tp?)"; none for a name of
// fewer than three letters, which every short option is near); empty when none of them
// is an option (see unexpected_words), or after "--", where every word is positional.
std::string unknown_option_message(CLI::App& app, bool positional_only) {
  if (positional_only) return {};
  CLI::App& command = last_command(app);
  for (const std::string& word : app.remaining(true)) {
    if (!option_like(word)) continue;
    const std::string flag = word.substr(0, word.find('='));
    const std::size_t dashes = std::min(flag.find_first_not_of('-'), flag.size());
    std::string nearest;
    std::size_t best = 3;
    for (const CLI::Option* option : command.get_options()) {
      for (const std::string& name : option->get_lnames()) {
        if (flag.size() - dashes < 3 || name == "help") continue;
        const std::size_t distance = fsdptune::edit_distance(flag, "--" + name, 2);
        if (distance < best) {
          best = distance;
          nearest = "--" + name;
        }
      }
    }
    const std::string where = &command == &app ? "fsdptune" : command.get_name();
    return fmt::format(
        "{} has no option {}{}", where, flag,
        nearest.empty() ? std::string() : fmt::format(" (did you mean {}?)", nearest));
  }
  return {};
}

// Whether `name` (without dashes) is a long option of `app` or of any of its commands.
bool is_an_option(CLI::App& app, const std::string& name) {
  for (const CLI::Option* option : app.get_options()) {
    const auto& names = option->get_lnames();
    if (std::find(names.begin(), names.end(), name) != names.end()) return true;
  }
  for (CLI::App* command : app.get_subcommands([](CLI::App*) { return true; })) {
    if (is_an_option(*command, name)) return true;
  }
  return false;
}

// Words a command does not take: "compare does not take 'c.json'".
std::string unexpected_words(CLI::App& app) {
  CLI::App& command = last_command(app);
  std::string words;
  for (const std::string& word : app.remaining(true)) {
    words += (words.empty() ? "'" : ", '") + word + "'";
  }
  return fmt::format("{} does not take {}", &command == &app ? "fsdptune" : command.get_name(),
                     words);
}

// Checks every option's value before CLI11 converts it:
// - An option given an empty value (`--trace ""`, `--memory-limit ""`, a shell variable that
//   was never set) is refused rather than read as the option left out: every option of
//   fsdptune's takes a non-empty value, and leaving one out is how a default is asked for.
// - A whole number is decimal digits (CLI11 reads "0x80" as hexadecimal and "010" as octal;
//   found probing: `--seq 0x80` ran at 128, `--gpus 010` on 8 GPUs); leading zeros are
//   dropped, so "010" is ten. One past 64 bits is refused as given (CLI11 saturates it:
//   `--seed 18446744073709551616` ran as seed 2^64 - 1).
// - A number with a fraction or exponent is decimal too (CLI11 reads "0x1p1" as 2).
void check_option_values(CLI::App& app) {
  const CLI::Validator non_empty(
      [](std::string& value) {
        return value.empty() ? std::string("an empty value: give one, or leave the option out")
                             : std::string();
      },
      "");
  // `ranged`: the option has an int_range validator, which says its range of a value past
  // 64 bits too (found by review: "(a 64-bit integer)" of an int option).
  const auto whole_number = [](bool is_unsigned, bool ranged) {
    return CLI::Validator(
        [is_unsigned, ranged](std::string& value) {
          if (value.empty()) return std::string();  // non_empty's to say
          const std::size_t first = sign_length(value);
          const bool digits = value.size() > first &&
                              std::all_of(value.begin() + static_cast<std::ptrdiff_t>(first),
                                          value.end(), [](char c) { return c >= '0' && c <= '9'; });
          if (!digits) return fmt::format("'{}' is not a whole number in decimal digits", value);
          const std::size_t nonzero =
              std::min(value.find_first_not_of('0', first), value.size() - 1);
          value.erase(first, nonzero - first);
          if (value == "-0" || value == "+0") value = "0";  // zero has no sign
          const char* begin = value.data() + (value[0] == '+' ? 1 : 0);
          const char* end = value.data() + value.size();
          std::errc error{};
          if (is_unsigned && value[0] != '-') {
            std::uint64_t parsed = 0;
            error = std::from_chars(begin, end, parsed).ec;
          } else {
            std::int64_t parsed = 0;
            error = std::from_chars(begin, end, parsed).ec;
          }
          return error == std::errc::result_out_of_range && !ranged
                     ? fmt::format("{} is out of range (a 64-bit {}integer)", value,
                                   is_unsigned ? "unsigned " : "")
                     : std::string();
        },
        "");
  };
  const CLI::Validator decimal_real(
      [](std::string& value) {
        std::size_t at = sign_length(value);
        const auto digits = [&] {
          const std::size_t from = at;
          while (at < value.size() && value[at] >= '0' && value[at] <= '9') ++at;
          return at - from;
        };
        std::size_t mantissa = digits();
        if (at < value.size() && value[at] == '.') {
          ++at;
          mantissa += digits();
        }
        bool valid = mantissa > 0;
        if (valid && at < value.size() && (value[at] == 'e' || value[at] == 'E')) {
          ++at;
          if (at < value.size() && (value[at] == '-' || value[at] == '+')) ++at;
          valid = digits() > 0;
        }
        return valid && at == value.size()
                   ? std::string()
                   : fmt::format("'{}' is not a number in decimal digits", value);
      },
      "");
  for (CLI::Option* option : app.get_options()) {
    if (option->get_items_expected_max() == 0) {
      // A flag given twice is refused as an option given twice is (`--float8 --float8` ran);
      // asking for help twice is still asking for help.
      if (option != app.get_help_ptr() && option != app.get_version_ptr())
        option->multi_option_policy(CLI::MultiOptionPolicy::Throw);
      continue;
    }
    option->check(non_empty);
    // "INT", or "INT:INT in [0 - 1000000]" with a range check.
    const std::string full_type = option->get_type_name();
    const std::string type = full_type.substr(0, full_type.find(':'));
    if (type == "INT" || type == "UINT") {
      bool ranged = true;
      try {
        option->get_validator(kIntRangeName);
      } catch (const CLI::OptionNotFound&) {
        ranged = false;
      }
      option->transform(whole_number(type == "UINT", ranged));
    } else if (type == "FLOAT") {
      option->check(decimal_real);
    }
  }
  for (CLI::App* command : app.get_subcommands([](CLI::App*) { return true; }))
    check_option_values(*command);
}

// Writes `text` to stderr without throwing: fmt::print throws when stderr is closed
// (`2>&-`), and from a catch handler below that ended the program in std::terminate.
// After what the command printed to stdout, where both go to one file or pipe (found by QA:
// tune's exit-3 error came before its table under `> log 2>&1`, stdout being buffered).
// Flushed with SIGPIPE ignored (flush_stdout_before_error); the failed flush is said at the
// end.
void say(const std::string& text) {
  fsdptune::flush_stdout_before_error();
  std::fputs(text.c_str(), stderr);
}

}  // namespace

namespace fsdptune::cli {

CLI::Validator int_range(std::int64_t low, std::int64_t high, const std::string& low_text) {
  return CLI::Validator(
      [=](std::string& value) {
        // Not a whole number in decimal digits (or empty): check_option_values' validators
        // name it.
        const std::size_t first = sign_length(value);
        if (value.size() <= first ||
            !std::all_of(value.begin() + static_cast<std::ptrdiff_t>(first), value.end(),
                         [](char c) { return c >= '0' && c <= '9'; })) {
          return std::string();
        }
        std::int64_t parsed = 0;
        const char* begin = value.data() + (value[0] == '+' ? 1 : 0);
        const auto [end, error] = std::from_chars(begin, value.data() + value.size(), parsed);
        if (error == std::errc() && end == value.data() + value.size() && parsed >= low &&
            parsed <= high) {
          return std::string();
        }
        return fmt::format("must be {} to {}, got {}",
                           low_text.empty() ? std::to_string(low) : low_text, high, value);
      },
      "", kIntRangeName);
}

}  // namespace fsdptune::cli

int main(int argc, char** argv) {
  // An error of the command line: the same on every rank a launcher started `validate` with
  // (mpirun -np N fsdptune validate ...), said by the first, the others waiting to be
  // stopped (found by QA: N times; commands.hpp, kLaterRankGraceSeconds).
  const std::string later_rank = argc > 1 && (std::string_view(argv[1]) == "validate" ||
                                              std::string_view(argv[1]) == "profile")
                                     ? fsdptune::cli::later_launched_rank()
                                     : std::string();
  const auto say_usage_error = [&later_rank](const std::string& text) {
    if (later_rank.empty()) {
      say(text);
    } else {
      fsdptune::cli::wait_as_a_later_rank();
      say(fsdptune::cli::said_by_rank(text, later_rank));
    }
  };
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

  check_option_values(app);

  const auto run = [&]() -> int {
    // A first word that is no command: CLI11 said only "A subcommand is required".
    if (argc > 1 && argv[1][0] != '-') {
      const std::string word = argv[1];
      std::string commands;
      bool known = false;
      for (const CLI::App* command : app.get_subcommands([](CLI::App*) { return true; })) {
        known = known || command->get_name() == word;
        commands += (commands.empty() ? "" : ", ") + command->get_name();
      }
      if (!known) {
        say_usage_error(
            fmt::format("fsdptune: error: '{}' is not a command (commands: {})\nrun with "
                        "--help for usage\n",
                        word, commands));
        return 2;
      }
    }
    // "--model=" with nothing after the '=': CLI11 took the next word as its value and named
    // the word after that ("argument was not expected: h100-sxm").
    bool positional_only = false;  // a "--" given: the words after it are positional
    for (int i = 1; i < argc; ++i)
      positional_only = positional_only || std::string_view(argv[i]) == "--";
    for (int i = 1; i < argc; ++i) {
      const std::string_view word = argv[i];
      if (word == "--") break;
      if (word.size() > 3 && word.starts_with("--") && word.ends_with('=') &&
          is_an_option(app, std::string(word.substr(2, word.size() - 3)))) {
        say_usage_error(
            fmt::format("fsdptune: error: {}: an empty value ('{}')\nrun with --help for usage\n",
                        word.substr(0, word.size() - 1), word));
        return 2;
      }
    }
    try {
      app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
      return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
      return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
      return app.exit(e);
    } catch (const CLI::ExtrasError&) {
      const std::string unknown = unknown_option_message(app, positional_only);
      if (!unknown.empty()) {
        say_usage_error(fmt::format("fsdptune: error: {}\nrun with --help for usage\n", unknown));
        return 2;
      }
      // A word after a command that has commands of its own (`profile bogus`): name them.
      const auto all = [](CLI::App*) { return true; };
      CLI::App* command = &last_command(app);
      std::string commands;
      for (const CLI::App* sub : command->get_subcommands(all)) {
        commands += (commands.empty() ? "" : ", ") + sub->get_name();
      }
      if (command != &app && !commands.empty()) {
        say_usage_error(
            fmt::format("fsdptune: error: {} (the commands of {}: {})\nrun with --help for usage\n",
                        unexpected_words(app), command->get_name(), commands));
        return 2;
      }
      say_usage_error(
          fmt::format("fsdptune: error: {}\nrun with --help for usage\n", unexpected_words(app)));
      return 2;
    } catch (const CLI::ConversionError& e) {
      // The validators of check_option_values took every other value: a whole number out of
      // the range of an option narrower than 64 bits, which CLI11 words "Could not convert:
      // --iters = 99999999999" (found by QA).
      const std::string what = e.what();
      const std::string prefix = "Could not convert: ";
      const std::size_t equals = what.find(" = ");
      const std::string name = equals == std::string::npos
                                   ? std::string()
                                   : what.substr(prefix.size(), equals - prefix.size());
      // A flag given a value (`--json=garbage`) was "garbage is out of range" (found by QA).
      const CLI::Option* option = nullptr;
      for (CLI::App* command = &last_command(app); command != nullptr && option == nullptr;
           command = command->get_parent()) {
        option = command->get_option_no_throw(name);
      }
      if (what.rfind(prefix, 0) == 0 && option != nullptr && option->get_expected_min() == 0) {
        say_usage_error(fmt::format(
            "fsdptune: error: {}: a flag takes no value, got '{}'\nrun with --help for usage\n",
            name, what.substr(equals + 3)));
      } else if (what.rfind(prefix, 0) == 0 && equals != std::string::npos) {
        say_usage_error(fmt::format(
            "fsdptune: error: {}: {} is out of range for this option\nrun with --help "
            "for usage\n",
            what.substr(prefix.size(), equals - prefix.size()), what.substr(equals + 3)));
      } else {
        say_usage_error(fmt::format("fsdptune: error: {}\nrun with --help for usage\n", what));
      }
      return 2;
    } catch (const CLI::ArgumentMismatch& e) {
      // A flag given twice, which CLI11 words "--gpus: At Most 1 required but received 2"
      // (found by QA).
      const std::string what = e.what();
      const std::string marker = ": At Most 1 required but received ";
      const std::size_t at = what.find(marker);
      if (at != std::string::npos) {
        say_usage_error(
            fmt::format("fsdptune: error: {}: given {} times; give it once\nrun with --help for "
                        "usage\n",
                        what.substr(0, at), what.substr(at + marker.size())));
      } else {
        say_usage_error(fmt::format("fsdptune: error: {}\nrun with --help for usage\n", what));
      }
      return 2;
    } catch (const CLI::ParseError& e) {
      // CLI11 checks required options before leftover words: `--outt x` is reported as
      // "--out is required". A mistyped option or a stray word is the cause: say it first.
      std::string what = unknown_option_message(app, positional_only);
      if (what.empty() && !app.remaining(true).empty()) what = unexpected_words(app);
      say_usage_error(fmt::format("fsdptune: error: {}\nrun with --help for usage\n",
                                  what.empty() ? std::string(e.what()) : what));
      return 2;
    } catch (const fsdptune::Error& e) {
      if (e.printed_by_another_rank()) return e.exit_code();
      say(fsdptune::error_report(e));
      return e.exit_code();
    } catch (const std::bad_alloc&) {
      // Sizes a flag or file asked for beyond this machine's memory (e.g. profile --sizes
      // 1TiB).
      say("fsdptune: error: out of memory: a size given by a flag or file needs more memory "
          "than this machine has\n");
      return 1;
    } catch (const std::exception& e) {
      // A write to standard output that failed (fmt's "cannot write to file"): said once,
      // below, naming standard output (found by QA: two lines, the first naming a file).
      if (std::ferror(stdout) != 0) return 1;
      say(fmt::format("fsdptune: error: {}\n", e.what()));
      return 1;
    }
    return 0;
  };
  const int code = run();
  // What went to stdout is buffered: a write that failed (stdout closed, a full disk)
  // shows only here, and the output is lost (it exited 0).
  if (std::fflush(stdout) != 0 || std::ferror(stdout) != 0) {
    // Where an output took stdout, what went there is the report, sent to stderr.
    say(fsdptune::stdout_taken_by_output()
            ? "fsdptune: error: standard error: the report (moved there, an output having "
              "taken standard output) could not be written\n"
            : "fsdptune: error: standard output: the output could not be written\n");
    return code == 0 ? 1 : code;
  }
  return code;
}
