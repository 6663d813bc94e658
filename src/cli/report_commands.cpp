// `fsdptune report`: reads schedule files and measured results, matches them by schedule
// hash, and prints / writes the reports of docs/report.md. The rendering is pure
// (src/report*.cpp); this file reads, matches, bounds each tuned Program's memory at any
// timing (scheduler/, which the core report cannot call) and writes.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "fsdptune/compare.hpp"
#include "fsdptune/error.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/measured.hpp"
#include "fsdptune/memory_bound.hpp"
#include "fsdptune/report.hpp"
#include "fsdptune/report_bounds.hpp"
#include "fsdptune/schedule.hpp"

namespace fsdptune::cli {
namespace {

struct ReportCommandOptions {
  std::vector<std::string> schedules;
  std::vector<std::string> measured;
  std::string html_path;
  std::string markdown_path;
  bool json = false;
  int top_errors = 10;
};

// Attaches each measured file to the schedule it replayed (MeasuredResult::schedule_hash):
// the first given with that hash and no measurement yet, so copies of one schedule take
// one measured file each, in order.
void attach_measured(std::vector<ReportEntry>& entries, const std::vector<std::string>& paths) {
  // Each schedule's hash and its whole text's (what measured files written before
  // 2026-12-04 name: schedule_has_hash), computed once.
  std::vector<std::string> hashes;
  std::vector<std::string> text_hashes;
  for (const ReportEntry& entry : entries) {
    hashes.push_back(schedule_hash(entry.schedule));
    text_hashes.push_back(schedule_text_hash(entry.schedule));
  }
  for (const std::string& path : paths) {
    MeasuredResult measured = read_flag_file(
        "--measured", path, [&] { return measured_from_json(read_json_file(path), path); });
    std::size_t match = hashes.size();
    for (std::size_t i = 0; i < hashes.size(); ++i) {
      if (measured.schedule_hash != hashes[i] && measured.schedule_hash != text_hashes[i]) {
        continue;
      }
      if (match == hashes.size()) match = i;
      if (!entries[i].measured) {
        match = i;
        break;
      }
    }
    if (match == hashes.size()) {
      std::string known;
      for (std::size_t i = 0; i < hashes.size(); ++i) {
        known += fmt::format("{}{} ({})", i == 0 ? "" : ", ", entries[i].source, hashes[i]);
      }
      throw_bad_input(path + ": schedule_hash",
                      fmt::format("'{}' matches none of the schedules given: {}",
                                  measured.schedule_hash, known),
                      "pass the schedule file that was replayed to produce it");
    }
    if (entries[match].measured) {
      throw_bad_input(path, fmt::format("a second measured file for {}", entries[match].source),
                      "give one measured file per schedule");
    }
    // compare's checks that the measurement replayed this schedule (mesh, tasks, pipeline
    // actions): the report showed a measurement compare refuses.
    (void)compare(entries[match].schedule, measured, path, 0);
    // As compare says it (found by QA: report showed -99.4% with no word).
    note_cpu_replay(entries[match].schedule, measured, path);
    entries[match].measured = std::move(measured);
  }
}

void run_report(const ReportCommandOptions& options) {
  // --top-errors: int_range at the flag (not CLI11's range, which said "Value  not in range"
  // of an empty value: QA, 2026-12-05).
  NamedFiles inputs;
  for (const std::string& path : options.schedules) inputs.emplace_back("a schedule", path);
  for (const std::string& path : options.measured) inputs.emplace_back("--measured", path);
  require_distinct_files({{"--html", options.html_path}, {"--md", options.markdown_path}}, inputs);
  std::vector<ReportEntry> entries;
  for (const std::string& path : options.schedules) {
    ReportEntry entry;
    entry.source = path;
    entry.schedule = checked_schedule_from_json(read_json_file(path), path);
    set_report_any_timing(entry);
    entries.push_back(std::move(entry));
  }
  attach_measured(entries, options.measured);
  ReportOptions report_options;
  report_options.largest_task_errors = options.top_errors;

  std::vector<OutputFile> outputs;
  if (!options.html_path.empty()) {
    outputs.push_back({options.html_path, render_report_html(entries, report_options), "--html"});
  }
  if (!options.markdown_path.empty()) {
    outputs.push_back(
        {options.markdown_path, render_report_markdown(entries, report_options), "--md"});
  }
  // Every output rendered before any is written: a failure rendering the last one left
  // the files written.
  const std::string printed =
      options.json ? dump_json(report_to_json(summarize_report(entries, report_options)))
                   : render_report_text(entries, report_options);
  write_files_atomically(outputs);
  // With --json stdout carries only the JSON summary; the file notes go to stderr.
  std::FILE* notes = options.json ? stderr : stdout;
  fmt::print("{}", printed);
  if (!options.html_path.empty()) fmt::print(notes, "HTML report: {}\n", options.html_path);
  if (!options.markdown_path.empty()) {
    fmt::print(notes, "Markdown report: {}\n", options.markdown_path);
  }
}

}  // namespace

void register_report_commands(CLI::App& app) {
  auto options = std::make_shared<ReportCommandOptions>();
  CLI::App* report = app.add_subcommand(
      "report", "Compare plans and predictions: terminal table, HTML, Markdown, JSON");
  // No CLI::ExistingFile: the readers name a missing file as every command does, and the
  // check ran before CLI11 named an unknown flag (`report s.json --gpus 2` said "File does
  // not exist: 2").
  report->add_option("schedules", options->schedules, "Schedule files (fsdptune tune --out)")
      ->required();
  report->add_option("--measured", options->measured,
                     "Measured results (fsdptune validate); each is matched to its schedule by "
                     "schedule_hash");
  report->add_option("--html", options->html_path, "Write the self-contained HTML report here");
  report->add_option("--md", options->markdown_path, "Write the Markdown report here");
  report->add_flag("--json", options->json, "Print the JSON summary instead of the table");
  report
      ->add_option("--top-errors", options->top_errors,
                   "Rows of the largest per-task errors table (0 to 1000000)")
      ->check(int_range(0, 1000000))
      ->capture_default_str();
  report->callback([options] { run_report(*options); });
}

}  // namespace fsdptune::cli
