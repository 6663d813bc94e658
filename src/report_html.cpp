// The HTML report (docs/report.md): one self-contained page, inline CSS and SVG, no
// script and no network, written as XHTML-compatible markup (every element closed, every
// attribute quoted, all text escaped) so that a strict XML parser reads it too.
//
// Charts share one convention: a plot area inside margins, numeric axes with "nice"
// ticks (1, 2, 5 x 10^k) and a label that names the quantity and its unit, e.g.
// "time since step start (ms)". Coordinates are written with one decimal: enough for
// screen pixels and it keeps a 405B Gantt chart (thousands of rectangles) to a few
// hundred KiB.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "fsdptune/pipeline.hpp"
#include "fsdptune/report.hpp"
#include "fsdptune/units.hpp"
#include "report_internal.hpp"

namespace fsdptune {
namespace {

constexpr double kChartWidth = 1320;
constexpr double kCharWidthPx = 6.6;  // average glyph width of the 11px chart font

std::string px(double value) {
  if (std::fabs(value) < 0.05) return "0";
  return fmt::format("{:.1f}", value);
}

// --- Units and ticks --------------------------------------------------------------------

struct DisplayUnit {
  double base_per_unit = 1;  // seconds or bytes per displayed unit
  std::string name;          // "ms", "GiB"
};

DisplayUnit time_unit(double max_s) {
  if (max_s >= 1.0) return {1.0, "s"};
  if (max_s >= 1e-3) return {1e-3, "ms"};
  return {1e-6, "us"};
}

DisplayUnit bytes_unit(double max_bytes) {
  if (max_bytes >= static_cast<double>(kGiB)) return {static_cast<double>(kGiB), "GiB"};
  if (max_bytes >= static_cast<double>(kMiB)) return {static_cast<double>(kMiB), "MiB"};
  if (max_bytes >= static_cast<double>(kKiB)) return {static_cast<double>(kKiB), "KiB"};
  return {1.0, "B"};
}

// Tick step of about `target` ticks over [0, max]: 1, 2 or 5 times a power of ten.
double nice_step(double max, int target) {
  if (!(max > 0)) return 1;
  const double raw = max / target;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double normalized = raw / magnitude;
  double step = 10;
  if (normalized < 1.5) {
    step = 1;
  } else if (normalized < 3) {
    step = 2;
  } else if (normalized < 7) {
    step = 5;
  }
  return step * magnitude;
}

struct Axis {
  DisplayUnit unit;
  double min_units = 0;  // axis start, in display units (a whole number of steps)
  double max_units = 1;  // axis end, in display units (a whole number of steps)
  double step_units = 1;
  int decimals = 0;
  std::string label;  // "time since step start (ms)"
  double span_units() const { return max_units - min_units; }
};

// An axis over [min_base, max_base] (seconds or bytes) in `unit`, widened to whole ticks.
Axis make_axis(double min_base, double max_base, const DisplayUnit& unit,
               const std::string& quantity, int target) {
  Axis axis;
  axis.unit = unit;
  const double low = std::max(0.0, min_base / unit.base_per_unit);
  const double high = std::max(max_base / unit.base_per_unit, low + 1e-12);
  axis.step_units = nice_step(high - low, target);
  axis.min_units = std::floor(low / axis.step_units + 1e-9) * axis.step_units;
  axis.max_units = std::ceil(high / axis.step_units - 1e-9) * axis.step_units;
  if (axis.max_units <= axis.min_units) axis.max_units = axis.min_units + axis.step_units;
  axis.decimals = std::max(0, static_cast<int>(-std::floor(std::log10(axis.step_units) + 1e-9)));
  axis.label = fmt::format("{} ({})", quantity, unit.name);
  return axis;
}

// An axis from 0 to at least `max_base`.
Axis make_axis(double max_base, const DisplayUnit& unit, const std::string& quantity, int target) {
  return make_axis(0, max_base, unit, quantity, target);
}

// The plot rectangle inside an SVG.
struct Area {
  double left = 0;
  double top = 0;
  double width = 0;
  double height = 0;
  double right() const { return left + width; }
  double bottom() const { return top + height; }
};

double map_x(const Area& area, const Axis& axis, double base) {
  return area.left +
         (base / axis.unit.base_per_unit - axis.min_units) / axis.span_units() * area.width;
}
double map_y(const Area& area, const Axis& axis, double base) {
  return area.bottom() -
         (base / axis.unit.base_per_unit - axis.min_units) / axis.span_units() * area.height;
}

std::string svg_open(double width, double height, const std::string& id, const std::string& title) {
  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" id=\"{}\" width=\"{}\" "
      "height=\"{}\" viewBox=\"0 0 {} {}\" role=\"img\" aria-label=\"{}\">\n",
      escape_xml(id), px(width), px(height), px(width), px(height), escape_xml(title));
}

std::string text(double x, double y, const std::string& content, const std::string& css_class,
                 const std::string& anchor = "start") {
  return fmt::format("<text x=\"{}\" y=\"{}\" class=\"{}\" text-anchor=\"{}\">{}</text>\n", px(x),
                     px(y), css_class, anchor, escape_xml(content));
}

std::string x_axis(const Area& area, const Axis& axis, bool grid) {
  std::string out =
      fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" class=\"axis\"/>\n", px(area.left),
                  px(area.bottom()), px(area.right()), px(area.bottom()));
  const int ticks = static_cast<int>(std::llround(axis.span_units() / axis.step_units));
  for (int i = 0; i <= ticks; ++i) {
    const double value = axis.min_units + i * axis.step_units;
    const double x = area.left + i * axis.step_units / axis.span_units() * area.width;
    if (grid && i > 0) {
      out += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" class=\"grid\"/>\n", px(x),
                         px(area.top), px(x), px(area.bottom()));
    }
    out += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" class=\"axis\"/>\n", px(x),
                       px(area.bottom()), px(x), px(area.bottom() + 4));
    out +=
        text(x, area.bottom() + 16, fmt::format("{:.{}f}", value, axis.decimals), "tick", "middle");
  }
  out += fmt::format(
      "<text x=\"{}\" y=\"{}\" class=\"axis-label\" data-axis=\"x\" data-unit=\"{}\" "
      "text-anchor=\"middle\">{}</text>\n",
      px(area.left + area.width / 2), px(area.bottom() + 34), escape_xml(axis.unit.name),
      escape_xml(axis.label));
  return out;
}

std::string y_axis(const Area& area, const Axis& axis, bool grid) {
  std::string out = fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" class=\"axis\"/>\n",
                                px(area.left), px(area.top), px(area.left), px(area.bottom()));
  const int ticks = static_cast<int>(std::llround(axis.span_units() / axis.step_units));
  for (int i = 0; i <= ticks; ++i) {
    const double value = axis.min_units + i * axis.step_units;
    const double y = area.bottom() - i * axis.step_units / axis.span_units() * area.height;
    if (grid && i > 0) {
      out += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" class=\"grid\"/>\n",
                         px(area.left), px(y), px(area.right()), px(y));
    }
    out += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" class=\"axis\"/>\n",
                       px(area.left - 4), px(y), px(area.left), px(y));
    out += text(area.left - 7, y + 4, fmt::format("{:.{}f}", value, axis.decimals), "tick", "end");
  }
  const double x = area.left - 52;
  const double y = area.top + area.height / 2;
  out += fmt::format(
      "<text x=\"{}\" y=\"{}\" class=\"axis-label\" data-axis=\"y\" data-unit=\"{}\" "
      "text-anchor=\"middle\" transform=\"rotate(-90 {} {})\">{}</text>\n",
      px(x), px(y), escape_xml(axis.unit.name), px(x), px(y), escape_xml(axis.label));
  return out;
}

// The label of a categorical axis (plans, streams): no unit.
std::string category_axis_label(const Area& area, const std::string& label, double x) {
  const double y = area.top + area.height / 2;
  return fmt::format(
      "<text x=\"{}\" y=\"{}\" class=\"axis-label\" data-axis=\"y\" text-anchor=\"middle\" "
      "transform=\"rotate(-90 {} {})\">{}</text>\n",
      px(x), px(y), px(x), px(y), escape_xml(label));
}

struct LegendItem {
  std::string css_class;
  std::string label;
};

std::string legend(double x, double y, const std::vector<LegendItem>& items) {
  std::string out;
  for (const LegendItem& item : items) {
    out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" class=\"{}\"/>\n", px(x),
                       px(y - 10), item.css_class);
    out += text(x + 16, y, item.label, "legend");
    x += 16 + static_cast<double>(item.label.size()) * kCharWidthPx + 18;
  }
  return out;
}

std::string data_attributes(const std::string& pointer, const std::string& value) {
  return fmt::format(" data-json=\"{}\" data-value=\"{}\"", escape_xml(pointer), escape_xml(value));
}

// --- Tables -----------------------------------------------------------------------------

// A table cell showing `display` for the JSON number at `pointer`.
std::string number_cell(const std::string& pointer, const std::string& value,
                        const std::string& display) {
  return fmt::format("<td class=\"num\"{}>{}</td>", data_attributes(pointer, value),
                     escape_xml(display));
}
std::string seconds_cell(const std::string& pointer, double seconds) {
  return number_cell(pointer, json_number_text(seconds), format_seconds(seconds));
}
std::string bytes_cell(const std::string& pointer, std::int64_t bytes) {
  return number_cell(pointer, json_number_text(bytes), format_bytes(bytes));
}
std::string percent_cell(const std::string& pointer, double fraction) {
  return number_cell(pointer, json_number_text(fraction), format_percent(fraction));
}
std::string signed_percent_cell(const std::string& pointer, double fraction) {
  return number_cell(pointer, json_number_text(fraction), format_signed_percent(fraction));
}
std::string rate_cell(const std::string& pointer, double rate) {
  return number_cell(pointer, json_number_text(rate), format_rate(rate));
}
std::string text_cell(const std::string& content) { return "<td>" + escape_xml(content) + "</td>"; }

std::string header_row(const std::vector<std::string>& headers) {
  std::string out = "<tr>";
  for (const std::string& header : headers) out += "<th>" + escape_xml(header) + "</th>";
  return out + "</tr>\n";
}

// "fsdp2", "tuned", "greedy (tuned)": marks the schedule's own plan unless its name says so.
std::string plan_name(const ReportPlan& plan) {
  const bool says_tuned = plan.summary.plan_name.find("tuned") != std::string::npos;
  return plan.summary.plan_name + (plan.tuned && !says_tuned ? " (tuned)" : "");
}

std::string plan_label(const Report& report, std::size_t schedule, const ReportPlan& plan) {
  std::string label = plan_name(plan);
  if (report.schedules.size() > 1) label = fmt::format("[{}] {}", schedule + 1, label);
  return label;
}

std::string plans_table(const Report& report, std::size_t index) {
  const ScheduleReport& schedule = report.schedules[index];
  std::string out = "<table class=\"plans\">\n";
  out += header_row({"plan", "step time", "tokens/s/GPU", "MFU", "compute", "communication",
                     "exposed comm", "idle", "peak allocated", "peak reserved", "allocator reserve",
                     "fits"});
  for (std::size_t p = 0; p < schedule.plans.size(); ++p) {
    const ReportPlan& plan = schedule.plans[p];
    const PlanSummary& s = plan.summary;
    const std::string base = fmt::format("/schedules/{}/plans/{}/", index, p);
    out += plan.tuned ? "<tr class=\"tuned\">" : "<tr>";
    out += text_cell(plan_name(plan));
    out += seconds_cell(base + "step_time_s", s.step_time_s);
    out += rate_cell(base + "tokens_per_s_per_gpu", s.tokens_per_s_per_gpu);
    out += percent_cell(base + "mfu", s.mfu);
    out += seconds_cell(base + "compute_s", s.compute_s);
    out += seconds_cell(base + "comm_s", s.comm_s);
    out += seconds_cell(base + "exposed_comm_s", s.exposed_comm_s);
    out += seconds_cell(base + "idle_s", s.idle_s);
    out += bytes_cell(base + "peak_allocated_bytes", s.peak_allocated_bytes);
    out += bytes_cell(base + "peak_reserved_bytes", s.peak_reserved_bytes);
    out += bytes_cell(base + "allocator_reserve_bytes", plan.allocator_reserve_bytes);
    out += fmt::format("<td class=\"{}\">{}</td>", s.fits ? "yes" : "no", s.fits ? "yes" : "no");
    out += "</tr>\n";
  }
  return out + "</table>\n";
}

std::string memory_table(const Report& report, std::size_t index) {
  const ScheduleReport& schedule = report.schedules[index];
  std::vector<std::string> headers = {"plan"};
  for (int c = 0; c < static_cast<int>(MemoryCategory::kCount); ++c) {
    headers.push_back(report_detail::category_title(static_cast<MemoryCategory>(c)));
  }
  headers.push_back("allocator reserve");
  headers.push_back("peak reserved");
  std::string out = "<table class=\"memory\">\n" + header_row(headers);
  for (std::size_t p = 0; p < schedule.plans.size(); ++p) {
    const ReportPlan& plan = schedule.plans[p];
    const std::string base = fmt::format("/schedules/{}/plans/{}/", index, p);
    out += plan.tuned ? "<tr class=\"tuned\">" : "<tr>";
    out += text_cell(plan_name(plan));
    for (int c = 0; c < static_cast<int>(MemoryCategory::kCount); ++c) {
      const auto category = static_cast<MemoryCategory>(c);
      out += bytes_cell(base + "peak_breakdown/" + report_detail::category_key(category),
                        plan.summary.peak_breakdown[static_cast<std::size_t>(c)]);
    }
    out += bytes_cell(base + "allocator_reserve_bytes", plan.allocator_reserve_bytes);
    out += bytes_cell(base + "peak_reserved_bytes", plan.summary.peak_reserved_bytes);
    out += "</tr>\n";
  }
  // The tuned plan's heaviest state at any timing, against its predicted peak above.
  if (schedule.any_timing) {
    const ReportAnyTiming& bound = *schedule.any_timing;
    const std::string base = fmt::format("/schedules/{}/any_timing/", index);
    out += "<tr class=\"any-timing\">" + text_cell("tuned, at any timing");
    for (int c = 0; c < static_cast<int>(MemoryCategory::kCount); ++c) {
      const auto category = static_cast<MemoryCategory>(c);
      out += bytes_cell(base + "peak_breakdown/" + report_detail::category_key(category),
                        bound.peak_breakdown[static_cast<std::size_t>(c)]);
    }
    out += bytes_cell(
        base + "allocator_reserve_bytes",
        std::max<std::int64_t>(0, bound.peak_reserved_bytes - bound.peak_allocated_bytes));
    out += bytes_cell(base + "peak_reserved_bytes", bound.peak_reserved_bytes);
    out += "</tr>\n";
  }
  return out + "</table>\n";
}

// --- Per-plan bar charts -----------------------------------------------------------------

struct Segment {
  double value = 0;  // seconds or bytes
  std::string css_class;
  std::string pointer;  // JSON pointer of the figure, "" for none
  std::string value_text;
  std::string title;
};

struct Bar {
  std::string label;
  std::vector<Segment> segments;
  double total_marker = -1;  // draws a tick at this value (seconds/bytes) when >= 0
  double limit = -1;         // draws a limit line across the row when > 0
  std::string end_text;      // printed after the bar
};

std::string bar_chart(const std::string& id, const std::string& title, const std::vector<Bar>& bars,
                      const std::vector<LegendItem>& items, const DisplayUnit& unit,
                      const std::string& quantity, double max_base) {
  std::size_t longest = 4;
  for (const Bar& bar : bars) longest = std::max(longest, bar.label.size());
  Area area;
  area.left = std::min(360.0, 70 + static_cast<double>(longest) * kCharWidthPx);
  area.top = 40;
  area.width = kChartWidth - area.left - 190;
  const double row = 26;
  area.height = std::max(1.0, static_cast<double>(bars.size())) * row;
  const double height = area.bottom() + 48;
  const Axis axis = make_axis(max_base, unit, quantity, 8);

  std::string out = svg_open(kChartWidth, height, id, title);
  out += legend(area.left, 20, items);
  out += x_axis(area, axis, true);
  out += category_axis_label(area, "plan", 14);
  for (std::size_t b = 0; b < bars.size(); ++b) {
    const Bar& bar = bars[b];
    const double y = area.top + static_cast<double>(b) * row + 4;
    const double h = row - 8;
    out += text(area.left - 8, y + h / 2 + 4, bar.label, "row-label", "end");
    double cursor = 0;
    for (const Segment& segment : bar.segments) {
      if (segment.value <= 0) continue;
      const double x0 = map_x(area, axis, cursor);
      const double x1 = map_x(area, axis, cursor + segment.value);
      out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" class=\"{}\"{}>",
                         px(x0), px(y), px(std::max(x1 - x0, 0.5)), px(h), segment.css_class,
                         segment.pointer.empty()
                             ? std::string()
                             : data_attributes(segment.pointer, segment.value_text));
      out += "<title>" + escape_xml(segment.title) + "</title></rect>\n";
      cursor += segment.value;
    }
    if (bar.total_marker >= 0) {
      const double x = map_x(area, axis, bar.total_marker);
      out += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" class=\"marker\"/>\n",
                         px(x), px(y - 2), px(x), px(y + h + 2));
      cursor = std::max(cursor, bar.total_marker);
    }
    if (bar.limit > 0) {
      const double x = map_x(area, axis, bar.limit);
      out += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" class=\"limit\"/>\n", px(x),
                         px(y - 3), px(x), px(y + h + 3));
      cursor = std::max(cursor, bar.limit);
    }
    out += text(map_x(area, axis, cursor) + 6, y + h / 2 + 4, bar.end_text, "bar-value");
  }
  return out + "</svg>\n";
}

std::string step_time_chart(const Report& report) {
  std::vector<Bar> bars;
  double max_s = 0;
  for (std::size_t i = 0; i < report.schedules.size(); ++i) {
    const ScheduleReport& schedule = report.schedules[i];
    for (std::size_t p = 0; p < schedule.plans.size(); ++p) {
      const PlanSummary& s = schedule.plans[p].summary;
      const std::string base = fmt::format("/schedules/{}/plans/{}/", i, p);
      Bar bar;
      bar.label = plan_label(report, i, schedule.plans[p]);
      bar.segments = {
          {s.compute_s, "c-compute", base + "compute_s", json_number_text(s.compute_s),
           "compute " + format_seconds(s.compute_s)},
          {s.exposed_comm_s, "c-exposed", base + "exposed_comm_s",
           json_number_text(s.exposed_comm_s),
           "exposed communication " + format_seconds(s.exposed_comm_s)},
          {s.idle_s, "c-idle", base + "idle_s", json_number_text(s.idle_s),
           "idle " + format_seconds(s.idle_s)},
      };
      bar.total_marker = s.step_time_s;
      bar.end_text = format_seconds(s.step_time_s);
      max_s = std::max({max_s, s.step_time_s, s.compute_s + s.exposed_comm_s + s.idle_s});
      bars.push_back(std::move(bar));
    }
  }
  return bar_chart("step-time", "Step time per plan: compute, exposed communication, idle", bars,
                   {{"c-compute", "compute"},
                    {"c-exposed", "exposed communication"},
                    {"c-idle", "idle"},
                    {"marker-key", "step time"}},
                   time_unit(max_s), "time per step", max_s);
}

// Memory charts include the device limit in their axis only when it is within twice the
// largest value drawn: a 64 MiB test job against an 80 GiB limit would otherwise be a flat
// line. An off-scale limit is written out instead.
bool limit_on_scale(std::int64_t limit_bytes, double data_max_bytes) {
  return limit_bytes > 0 && static_cast<double>(limit_bytes) <= 2 * data_max_bytes;
}

std::string memory_chart(const Report& report) {
  std::vector<Bar> bars;
  double data_max_bytes = 0;
  for (const ScheduleReport& schedule : report.schedules) {
    for (const ReportPlan& plan : schedule.plans) {
      data_max_bytes = std::max(
          {data_max_bytes, static_cast<double>(plan.summary.peak_reserved_bytes),
           static_cast<double>(plan.summary.peak_allocated_bytes + plan.allocator_reserve_bytes)});
    }
  }
  double max_bytes = data_max_bytes;
  for (std::size_t i = 0; i < report.schedules.size(); ++i) {
    const ScheduleReport& schedule = report.schedules[i];
    for (std::size_t p = 0; p < schedule.plans.size(); ++p) {
      const ReportPlan& plan = schedule.plans[p];
      const std::string base = fmt::format("/schedules/{}/plans/{}/", i, p);
      Bar bar;
      bar.label = plan_label(report, i, plan);
      for (int c = 0; c < static_cast<int>(MemoryCategory::kCount); ++c) {
        const auto category = static_cast<MemoryCategory>(c);
        const std::int64_t bytes = plan.summary.peak_breakdown[static_cast<std::size_t>(c)];
        bar.segments.push_back(
            {static_cast<double>(bytes), "m-" + report_detail::category_key(category),
             base + "peak_breakdown/" + report_detail::category_key(category),
             json_number_text(bytes),
             report_detail::category_title(category) + " " + format_bytes(bytes)});
      }
      bar.segments.push_back({static_cast<double>(plan.allocator_reserve_bytes), "m-reserve",
                              base + "allocator_reserve_bytes",
                              json_number_text(plan.allocator_reserve_bytes),
                              "allocator reserve " + format_bytes(plan.allocator_reserve_bytes)});
      bar.end_text = fmt::format("{} reserved{}", format_bytes(plan.summary.peak_reserved_bytes),
                                 plan.summary.fits ? "" : " (does not fit)");
      if (limit_on_scale(schedule.memory_limit_bytes, data_max_bytes)) {
        bar.limit = static_cast<double>(schedule.memory_limit_bytes);
        max_bytes = std::max(max_bytes, bar.limit);
      } else if (schedule.memory_limit_bytes > 0) {
        bar.end_text += fmt::format(" of {}", format_bytes(schedule.memory_limit_bytes));
      }
      bars.push_back(std::move(bar));
    }
  }
  std::vector<LegendItem> items;
  for (int c = 0; c < static_cast<int>(MemoryCategory::kCount); ++c) {
    const auto category = static_cast<MemoryCategory>(c);
    items.push_back(
        {"m-" + report_detail::category_key(category), report_detail::category_title(category)});
  }
  items.push_back({"m-reserve", "allocator reserve"});
  items.push_back({"limit-key", "device limit"});
  return bar_chart("peak-memory", "Peak memory per plan against the device limit", bars, items,
                   bytes_unit(max_bytes), "peak memory per GPU", max_bytes);
}

// --- Gantt chart ----------------------------------------------------------------------------

std::string kind_class(TaskKind kind) {
  switch (kind) {
    case TaskKind::kForward:
      return "t-fwd";
    case TaskKind::kRecompute:
      return "t-rec";
    case TaskKind::kBackward:
      return "t-bwd";
    case TaskKind::kCopyIn:
    case TaskKind::kCopyOut:
      return "t-copy";
    case TaskKind::kAllGather:
      return "t-ag";
    case TaskKind::kReduceScatter:
      return "t-rs";
    case TaskKind::kAllReduce:
      return "t-ar";
    case TaskKind::kOptimizer:
      return "t-opt";
  }
  return "t-opt";
}

// The task kind for readers: to_string's name with hyphens ("copy-in", "all-gather").
std::string kind_title(TaskKind kind) {
  std::string title = to_string(kind);
  std::replace(title.begin(), title.end(), '_', '-');
  return title;
}

// One bar of a Gantt chart: [start_s, end_s) on row `row`, clipped to the chart's window.
struct GanttBar {
  std::size_t row = 0;
  double start_s = 0;
  double end_s = 0;
  std::string css_class;  // its fill: "t-fwd", "t-fwd alt"
  std::string title;      // the tooltip
  std::string name;       // the label inside: the longest gantt_label of it that fits
};

// What a Gantt chart draws around its bars: a row per stream (or pipeline stage), the time
// axis over the window [begin_s, end_s), the legend, and optionally a line across every
// row at `marker_s` (the step time) named `marker_label`.
struct GanttFrame {
  std::string id;
  std::string title;
  std::vector<std::string> rows;  // top to bottom
  std::string row_quantity;       // the rows' axis label: "stream"
  std::vector<LegendItem> legend;
  double begin_s = 0;
  double end_s = 0;
  double marker_s = -1;  // none when < 0
  std::string marker_label;
};

std::string gantt_svg(const GanttFrame& frame, const std::vector<GanttBar>& bars) {
  std::size_t longest = 6;
  for (const std::string& row : frame.rows) longest = std::max(longest, row.size());
  Area area;
  area.left = 70 + static_cast<double>(longest) * kCharWidthPx;
  area.top = 40;
  area.width = kChartWidth - area.left - 20;
  const double row = 34;
  area.height = std::max<double>(1, static_cast<double>(frame.rows.size())) * row;
  const double height = area.bottom() + 48;
  const double begin_s = frame.begin_s;
  const double end_s = frame.end_s;
  const double span_s = std::max(end_s - begin_s, 1e-12);
  const Axis axis = make_axis(span_s, time_unit(span_s),
                              begin_s > 0 ? "time since step start, from " + format_seconds(begin_s)
                                          : "time since step start",
                              10);

  std::string out = svg_open(kChartWidth, height, frame.id, frame.title);
  out += legend(area.left, 20, frame.legend);
  out += x_axis(area, axis, true);
  out += category_axis_label(area, frame.row_quantity, 14);
  for (std::size_t r = 0; r < frame.rows.size(); ++r) {
    const double y = area.top + static_cast<double>(r) * row;
    out += text(area.left - 8, y + row / 2 + 4, frame.rows[r], "row-label", "end");
    if (r > 0) {
      out += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" class=\"grid\"/>\n",
                         px(area.left), px(y), px(area.right()), px(y));
    }
  }
  std::string labels;
  for (const GanttBar& bar : bars) {
    if (bar.end_s <= begin_s || bar.start_s >= end_s || bar.row >= frame.rows.size()) continue;
    const double start = std::max(bar.start_s, begin_s) - begin_s;
    const double stop = std::min(bar.end_s, end_s) - begin_s;
    const double x0 = map_x(area, axis, start);
    const double width = std::max(map_x(area, axis, stop) - x0, 0.4);
    const double y = area.top + static_cast<double>(bar.row) * row + 5;
    const double h = row - 10;
    out += fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" "
        "class=\"{}\"><title>{}</title></rect>\n",
        px(x0), px(y), px(width), px(h), bar.css_class, escape_xml(bar.title));
    const std::string label = gantt_label(bar.name, width);
    if (!label.empty()) labels += text(x0 + 2, y + h / 2 + 4, label, "task-label");
  }
  // Labels after all bars so that no bar covers a neighbour's label.
  out += labels;
  if (frame.marker_s >= begin_s && frame.marker_s <= end_s) {
    const double x = map_x(area, axis, frame.marker_s - begin_s);
    out += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" class=\"marker\"/>\n", px(x),
                       px(area.top - 3), px(x), px(area.bottom()));
    out += text(x - 4, area.top - 5, frame.marker_label, "annotation", "end");
  }
  return out + "</svg>\n";
}

// One step of `program` with `timings` (one per task), tasks starting in [begin_s, end_s).
std::string gantt_chart(const std::string& id, const std::string& title, const Program& program,
                        const std::vector<TaskTiming>& timings, double begin_s, double end_s) {
  GanttFrame frame;
  frame.id = id;
  frame.title = title;
  for (const Stream& stream : program.streams) frame.rows.push_back(stream.name);
  frame.row_quantity = "stream";
  frame.legend = {{"t-fwd", "forward"},       {"t-rec", "recompute"},    {"t-bwd", "backward"},
                  {"t-opt", "optimizer"},     {"t-copy", "copy-in/out"}, {"t-ag", "all-gather"},
                  {"t-rs", "reduce-scatter"}, {"t-ar", "all-reduce"}};
  frame.begin_s = begin_s;
  frame.end_s = end_s;
  std::vector<GanttBar> bars;
  std::vector<int> drawn_per_stream(program.streams.size(), 0);
  for (const Task& task : program.tasks) {
    const TaskTiming& timing = timings[static_cast<std::size_t>(task.id)];
    if (timing.end_s <= begin_s || timing.start_s >= end_s) continue;
    if (task.stream < 0 || static_cast<std::size_t>(task.stream) >= program.streams.size())
      continue;
    // Every other task of a stream is a shade lighter, so that back-to-back tasks of one
    // kind stay distinguishable.
    const bool alternate = (drawn_per_stream[static_cast<std::size_t>(task.stream)]++ % 2) == 1;
    bars.push_back(
        {static_cast<std::size_t>(task.stream), timing.start_s, timing.end_s,
         kind_class(task.kind) + (alternate ? " alt" : ""),
         fmt::format("#{} {} ({}): {} at {}", task.id, task.name, kind_title(task.kind),
                     format_seconds(timing.end_s - timing.start_s), format_seconds(timing.start_s)),
         task.name});
  }
  return gantt_svg(frame, bars);
}

// The most bars a chart of the report draws (the --trace bound, kMaxTraceActions): a
// pipeline of more actions, or a Program of more tasks, gets a note instead (found by QA:
// 405B on PP 16 with 65536 microbatches wrote a 340 MB page).
constexpr std::size_t kMaxChartBars = 131072;

std::string chart_left_out(std::size_t bars, const char* what, const char* charts) {
  return fmt::format(
      "<p class=\"note\">{} {}, more than a chart draws (at most {}): no {}. The tables "
      "above hold the figures.</p>\n",
      bars, what, kMaxChartBars, charts);
}

// Does every stage of this pipeline schedule store its actions (schedules written since
// 2026-12-01)?
bool has_pipeline_actions(const SchedulePipeline& pipeline) {
  return !pipeline.stages.empty() &&
         std::all_of(pipeline.stages.begin(), pipeline.stages.end(),
                     [](const ScheduleStage& stage) { return !stage.actions.empty(); });
}

// The classic picture of a pipeline schedule (version 2): a row per stage, each
// microbatch's forward and backward on it as a bar from its start to its end, gaps the
// bubble; after a stage's last action its tail (the chunks' exposed reduce-scatters and
// optimizer, up to the stage's end_s), and after each earlier pipeline step's last action
// that step's exposed reduce-scatters; a line at the step time. One bar per action and
// stage keeps a 405B job (P x V x M x 2 actions) to a few thousand rectangles.
// REQUIRES: has_pipeline_actions(*file.pipeline).
std::string pipeline_gantt_chart(const std::string& id, const ScheduleFile& file) {
  const SchedulePipeline& pipeline = *file.pipeline;
  const std::int64_t stages = std::max<std::int64_t>(file.job.pp, 1);
  const bool interleaved = file.job.virtual_stages > 1;
  GanttFrame frame;
  frame.id = id;
  frame.title = "Pipeline schedule of one predicted step: forwards and backwards per stage";
  frame.row_quantity = "pipeline stage";
  frame.legend = {{"t-fwd", "forward"}, {"t-bwd", "backward"}};
  if (interleaved) {
    // Chunk c is virtual stage c / pp of its rank (Megatron's interleaving).
    const std::string odd = file.job.virtual_stages == 2 ? "virtual stage 1" : "odd virtual stage";
    frame.legend.push_back({"t-fwd alt", "forward, " + odd});
    frame.legend.push_back({"t-bwd alt", "backward, " + odd});
  }
  frame.legend.push_back({"pp-tail", "tail: exposed reduce-scatters, optimizer"});
  frame.legend.push_back({"marker-key", "step time"});
  frame.marker_s = file.predicted.step_time_s;
  frame.marker_label = "step time " + format_seconds(file.predicted.step_time_s);
  frame.end_s = file.predicted.step_time_s;
  std::vector<GanttBar> bars;
  for (std::size_t r = 0; r < pipeline.stages.size(); ++r) {
    const ScheduleStage& stage = pipeline.stages[r];
    frame.rows.push_back(fmt::format("stage {}", stage.rank));
    frame.end_s = std::max(frame.end_s, stage.end_s);
    double pipeline_end_s = 0;
    for (const PipelineAction& action : stage.actions) {
      pipeline_end_s = std::max(pipeline_end_s, action.end_s);
      const char* direction = action.backward ? "B" : "F";
      // pp-bar outlines each bar in white, so that back-to-back actions (the warm-up's
      // forwards, the cool-down's backwards) stay apart; interleaved, the chunks of odd
      // virtual stages are a shade lighter, as in Megatron-LM's pictures of the schedule.
      const bool lighter = (action.chunk / stages) % 2 == 1;
      bars.push_back(
          {r, action.start_s, action.end_s,
           std::string(action.backward ? "t-bwd" : "t-fwd") + (lighter ? " alt" : "") + " pp-bar",
           fmt::format("stage {} chunk {} microbatch {} {}: {} at {}", stage.rank, action.chunk,
                       action.microbatch, action.backward ? "backward" : "forward",
                       format_seconds(action.end_s - action.start_s),
                       format_seconds(action.start_s)),
           // Shrinks to "F3", then "3" (gantt_label: the last word, then its number).
           interleaved ? fmt::format("chunk {} {}{}", action.chunk, direction, action.microbatch)
                       : fmt::format("{}{}", direction, action.microbatch)});
    }
    // A backward that reduce-scatters makes the stage wait for them before its next action
    // (reduce_scatter_wait_s; docs/parallelism.md "A backward's reduce-scatters end before
    // the next action"): drawn as a tail after it.
    const int microbatches = static_cast<int>(std::max<std::int64_t>(file.job.microbatches, 1));
    for (std::size_t k = 0; k + 1 < stage.actions.size(); ++k) {
      const PipelineAction& action = stage.actions[k];
      if (!action.backward || static_cast<std::size_t>(action.chunk) >= pipeline.chunks.size()) {
        continue;
      }
      const ChunkTimes& times = pipeline.chunks[static_cast<std::size_t>(action.chunk)].times;
      const double wait_s = reduce_scatter_wait_s(times);
      if (!backward_reduce_scatters(times, action.microbatch, microbatches) || wait_s <= 0) {
        continue;
      }
      bars.push_back({r, action.end_s, action.end_s + wait_s, "pp-tail pp-bar",
                      fmt::format("stage {} chunk {} microbatch {}: its reduce-scatters, waited "
                                  "for: {}, end at {}",
                                  stage.rank, action.chunk, action.microbatch,
                                  format_seconds(wait_s), format_seconds(action.end_s + wait_s)),
                      "tail"});
    }
    if (stage.end_s > pipeline_end_s) {
      bars.push_back({r, pipeline_end_s, stage.end_s, "pp-tail pp-bar",
                      fmt::format("stage {} tail after its last action (exposed reduce-scatters, "
                                  "optimizer): {}, ends at {}",
                                  stage.rank, format_seconds(stage.end_s - pipeline_end_s),
                                  format_seconds(stage.end_s)),
                      "tail"});
    }
  }
  return gantt_svg(frame, bars);
}

// --- Memory over the step ---------------------------------------------------------------

// The device limit as a dashed line, or a note in the corner when it is off the scale.
std::string limit_line(const Area& area, const Axis& axis, std::int64_t limit_bytes,
                       bool on_scale) {
  if (limit_bytes <= 0) return "";
  if (!on_scale) {
    return text(area.right() - 4, area.top - 6,
                "device limit " + format_bytes(limit_bytes) + ", off the scale", "annotation",
                "end");
  }
  const double y = map_y(area, axis, static_cast<double>(limit_bytes));
  return fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" class=\"limit\"/>\n",
                     px(area.left), px(y), px(area.right()), px(y)) +
         text(area.right() - 4, y - 5, "device limit " + format_bytes(limit_bytes), "annotation",
              "end");
}

std::string memory_timeline_chart(const std::string& id, const ScheduleFile& schedule) {
  const std::vector<MemorySample>& samples = schedule.memory_timeline;
  double max_bytes = 0;
  double max_s = schedule.predicted.step_time_s;
  for (const MemorySample& sample : samples) {
    max_bytes = std::max(max_bytes, static_cast<double>(sample.allocated_bytes));
    max_s = std::max(max_s, sample.time_s);
  }
  const bool show_limit = limit_on_scale(schedule.memory_limit_bytes, max_bytes);
  if (show_limit) max_bytes = std::max(max_bytes, static_cast<double>(schedule.memory_limit_bytes));
  Area area;
  area.left = 90;
  area.top = 40;
  area.width = kChartWidth - area.left - 30;
  area.height = 260;
  const Axis x_axis_spec = make_axis(max_s, time_unit(max_s), "time since step start", 10);
  const Axis y_axis_spec = make_axis(max_bytes, bytes_unit(max_bytes), "allocated memory", 6);
  std::string out = svg_open(kChartWidth, area.bottom() + 48, id,
                             "Allocated memory over one step against the device limit");
  out += legend(area.left, 20, {{"line-key", "allocated"}, {"limit-key", "device limit"}});
  out += x_axis(area, x_axis_spec, true);
  out += y_axis(area, y_axis_spec, true);

  // The allocation is a step function: it holds its value until the next sample. With
  // many samples, each half-pixel column keeps its first, highest, lowest and last value
  // so that no peak is lost.
  std::string path;
  if (!samples.empty()) {
    auto x_of = [&](double t) { return map_x(area, x_axis_spec, t); };
    auto y_of = [&](std::int64_t b) { return map_y(area, y_axis_spec, static_cast<double>(b)); };
    constexpr double kColumnPx = 0.5;
    std::size_t i = 0;
    double previous_y = 0;
    bool first = true;
    while (i < samples.size()) {
      const double column = std::floor(x_of(samples[i].time_s) / kColumnPx);
      const double x = column * kColumnPx;
      std::int64_t high = samples[i].allocated_bytes;
      std::int64_t low = samples[i].allocated_bytes;
      const std::int64_t begin_bytes = samples[i].allocated_bytes;
      std::size_t j = i;
      while (j < samples.size() && std::floor(x_of(samples[j].time_s) / kColumnPx) == column) {
        high = std::max(high, samples[j].allocated_bytes);
        low = std::min(low, samples[j].allocated_bytes);
        ++j;
      }
      const std::int64_t end_bytes = samples[j - 1].allocated_bytes;
      if (first) {
        path += fmt::format("M{} {}", px(x), px(y_of(begin_bytes)));
        first = false;
      } else {
        path += fmt::format("H{}V{}", px(x), px(y_of(begin_bytes)));
      }
      if (high != low) path += fmt::format("V{}V{}", px(y_of(high)), px(y_of(low)));
      path += fmt::format("V{}", px(y_of(end_bytes)));
      previous_y = y_of(end_bytes);
      i = j;
    }
    (void)previous_y;
    path += fmt::format("H{}", px(x_of(max_s)));
    out += "<path class=\"memory-line\" d=\"" + path + "\"/>\n";
    std::int64_t peak = samples.front().allocated_bytes;
    double peak_t = samples.front().time_s;
    for (const MemorySample& sample : samples) {
      if (sample.allocated_bytes > peak) {
        peak = sample.allocated_bytes;
        peak_t = sample.time_s;
      }
    }
    out += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"3.5\" class=\"peak\"/>\n", px(x_of(peak_t)),
                       px(y_of(peak)));
    out += text(x_of(peak_t) + 6, y_of(peak) - 6,
                fmt::format("peak {} at {}", format_bytes(peak), format_seconds(peak_t)),
                "annotation");
  } else {
    out += text(area.left + area.width / 2, area.top + area.height / 2,
                "no memory timeline recorded in this schedule", "annotation", "middle");
  }
  out += limit_line(area, y_axis_spec, schedule.memory_limit_bytes, show_limit);
  return out + "</svg>\n";
}

// --- Pareto front -------------------------------------------------------------------------

struct ScatterPoint {
  double step_time_s = 0;
  double peak_bytes = 0;
  std::string label;
};

std::string pareto_chart(const std::string& id, const ScheduleFile& schedule) {
  std::vector<ScatterPoint> explored;
  for (const ParetoPoint& point : schedule.pareto) {
    explored.push_back(
        {point.step_time_s, static_cast<double>(point.peak_allocated_bytes), point.label});
  }
  std::vector<ScatterPoint> named;
  for (const PlanSummary& baseline : schedule.baselines) {
    named.push_back({baseline.step_time_s, static_cast<double>(baseline.peak_allocated_bytes),
                     baseline.plan_name});
  }
  const ScatterPoint tuned{schedule.predicted.step_time_s,
                           static_cast<double>(schedule.predicted.peak_allocated_bytes),
                           schedule.predicted.plan_name.find("tuned") != std::string::npos
                               ? schedule.predicted.plan_name
                               : schedule.predicted.plan_name + " (tuned)"};
  double min_s = tuned.step_time_s;
  double max_s = tuned.step_time_s;
  double min_bytes = tuned.peak_bytes;
  double max_bytes = tuned.peak_bytes;
  for (const auto* list : {&explored, &named}) {
    for (const ScatterPoint& point : *list) {
      min_s = std::min(min_s, point.step_time_s);
      max_s = std::max(max_s, point.step_time_s);
      min_bytes = std::min(min_bytes, point.peak_bytes);
      max_bytes = std::max(max_bytes, point.peak_bytes);
    }
  }
  const bool show_limit = limit_on_scale(schedule.memory_limit_bytes, max_bytes);
  if (show_limit) max_bytes = std::max(max_bytes, static_cast<double>(schedule.memory_limit_bytes));
  // The axes start near the smallest value, not at 0, so that close plans stay apart;
  // a margin of 5% of the range keeps points off the axes.
  const double margin_s = 0.05 * std::max(max_s - min_s, 0.1 * max_s);
  const double margin_bytes = 0.05 * std::max(max_bytes - min_bytes, 0.1 * max_bytes);
  min_s = std::max(0.0, min_s - margin_s);
  max_s += margin_s;
  min_bytes = std::max(0.0, min_bytes - margin_bytes);
  max_bytes += margin_bytes;
  Area area;
  area.left = 90;
  area.top = 40;
  area.width = kChartWidth - area.left - 200;
  area.height = 320;
  const Axis x_spec = make_axis(min_s, max_s, time_unit(max_s), "step time", 10);
  const Axis y_spec =
      make_axis(min_bytes, max_bytes, bytes_unit(max_bytes), "peak allocated memory", 6);
  std::string out = svg_open(kChartWidth, area.bottom() + 48, id,
                             "Pareto front of peak memory against step time");
  out += legend(area.left, 20,
                {{"p-explored", "explored plan"},
                 {"p-front", "Pareto front"},
                 {"p-baseline", "baseline"},
                 {"p-tuned", "tuned plan"},
                 {"limit-key", "device limit"}});
  out += x_axis(area, x_spec, true);
  out += y_axis(area, y_spec, true);

  // Non-dominated points: sorted by step time (then memory), a point is on the front
  // when it needs less memory than every faster point.
  std::vector<ScatterPoint> sorted = explored;
  sorted.push_back(tuned);
  for (const ScatterPoint& point : named) sorted.push_back(point);
  std::stable_sort(sorted.begin(), sorted.end(), [](const ScatterPoint& a, const ScatterPoint& b) {
    if (a.step_time_s != b.step_time_s) return a.step_time_s < b.step_time_s;
    return a.peak_bytes < b.peak_bytes;
  });
  std::vector<ScatterPoint> front;
  double lowest = std::numeric_limits<double>::infinity();
  for (const ScatterPoint& point : sorted) {
    if (point.peak_bytes < lowest) {
      front.push_back(point);
      lowest = point.peak_bytes;
    }
  }
  for (const ScatterPoint& point : explored) {
    out += fmt::format(
        "<circle cx=\"{}\" cy=\"{}\" r=\"2.5\" class=\"p-explored\"><title>{}</title></circle>\n",
        px(map_x(area, x_spec, point.step_time_s)), px(map_y(area, y_spec, point.peak_bytes)),
        escape_xml(fmt::format("{}: {}, {}", point.label, format_seconds(point.step_time_s),
                               format_bytes(static_cast<std::int64_t>(point.peak_bytes)))));
  }
  if (!front.empty()) {
    std::string path;
    for (std::size_t f = 0; f < front.size(); ++f) {
      const double x = map_x(area, x_spec, front[f].step_time_s);
      const double y = map_y(area, y_spec, front[f].peak_bytes);
      path += f == 0 ? fmt::format("M{} {}", px(x), px(y)) : fmt::format("H{}V{}", px(x), px(y));
    }
    out += "<path class=\"front-line\" d=\"" + path + "\"/>\n";
    for (const ScatterPoint& point : front) {
      out += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"3.5\" class=\"p-front\"/>\n",
                         px(map_x(area, x_spec, point.step_time_s)),
                         px(map_y(area, y_spec, point.peak_bytes)));
    }
  }
  out += limit_line(area, y_spec, schedule.memory_limit_bytes, show_limit);
  for (std::size_t n = 0; n < named.size(); ++n) {
    const double x = map_x(area, x_spec, named[n].step_time_s);
    const double y = map_y(area, y_spec, named[n].peak_bytes);
    out += fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"8\" height=\"8\" class=\"p-baseline\" "
        "transform=\"rotate(45 {} {})\"/>\n",
        px(x - 4), px(y - 4), px(x), px(y));
    // Alternate labels above and below so that close baselines stay readable.
    out += text(x + 8, y + (n % 2 == 0 ? -7 : 14), named[n].label, "annotation");
  }
  const double tx = map_x(area, x_spec, tuned.step_time_s);
  const double ty = map_y(area, y_spec, tuned.peak_bytes);
  out += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"6\" class=\"p-tuned\"/>\n", px(tx), px(ty));
  out += text(tx + 9, ty + 4, tuned.label, "annotation strong");
  return out + "</svg>\n";
}

// --- Predicted vs measured --------------------------------------------------------------

std::string measured_chart(const std::string& id, std::size_t index,
                           const MeasuredComparison& measured) {
  struct Row {
    std::string label;
    double predicted_s;
    double measured_s;
    std::string predicted_pointer;
    std::string measured_pointer;
  };
  const std::string base = fmt::format("/schedules/{}/measured/", index);
  std::vector<Row> rows;
  rows.push_back({"step time", measured.predicted_step_time_s, measured.measured_step_time_s,
                  base + "predicted_step_time_s", base + "measured_step_time_s"});
  for (std::size_t s = 0; s < measured.streams.size(); ++s) {
    const StreamComparison& stream = measured.streams[s];
    const std::string stream_base = fmt::format("{}streams/{}/", base, s);
    rows.push_back({"busy " + stream.stream, stream.predicted_busy_s, stream.measured_busy_s,
                    stream_base + "predicted_busy_s", stream_base + "measured_busy_s"});
  }
  for (std::size_t r = 0; r < measured.stages.size(); ++r) {
    const StageMeasurement& stage = measured.stages[r];
    const std::string stage_base = fmt::format("{}stages/{}/", base, r);
    rows.push_back({fmt::format("stage {} busy", stage.rank), stage.predicted_busy_s,
                    stage.measured_busy_s, stage_base + "predicted_busy_s",
                    stage_base + "measured_busy_s"});
    rows.push_back({fmt::format("stage {} end", stage.rank), stage.predicted_end_s,
                    stage.measured_end_s, stage_base + "predicted_end_s",
                    stage_base + "measured_end_s"});
  }
  double max_s = 0;
  std::size_t longest = 4;
  for (const Row& row : rows) {
    max_s = std::max({max_s, row.predicted_s, row.measured_s});
    longest = std::max(longest, row.label.size());
  }
  Area area;
  area.left = 70 + static_cast<double>(longest) * kCharWidthPx;
  area.top = 40;
  area.width = kChartWidth - area.left - 110;
  const double row_height = 40;
  area.height = static_cast<double>(rows.size()) * row_height;
  const Axis axis = make_axis(max_s, time_unit(max_s), "time", 8);
  std::string out = svg_open(kChartWidth, area.bottom() + 48, id,
                             measured.stages.empty() ? "Predicted against measured time per stream"
                                                     : "Predicted against measured time per stage");
  out += legend(area.left, 20, {{"v-predicted", "predicted"}, {"v-measured", "measured"}});
  out += x_axis(area, axis, true);
  out += category_axis_label(area, "figure", 14);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const Row& row = rows[r];
    const double y = area.top + static_cast<double>(r) * row_height + 5;
    out += text(area.left - 8, y + 19, row.label, "row-label", "end");
    const double predicted_w = map_x(area, axis, row.predicted_s) - area.left;
    const double measured_w = map_x(area, axis, row.measured_s) - area.left;
    out += fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"14\" class=\"v-predicted\"{}/>\n",
        px(area.left), px(y), px(std::max(predicted_w, 0.5)),
        data_attributes(row.predicted_pointer, json_number_text(row.predicted_s)));
    out +=
        fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"14\" class=\"v-measured\"{}/>\n",
                    px(area.left), px(y + 15), px(std::max(measured_w, 0.5)),
                    data_attributes(row.measured_pointer, json_number_text(row.measured_s)));
    out += text(area.left + predicted_w + 5, y + 11, format_seconds(row.predicted_s), "bar-value");
    out += text(area.left + measured_w + 5, y + 26, format_seconds(row.measured_s), "bar-value");
  }
  return out + "</svg>\n";
}

std::string measured_tables(std::size_t index, const MeasuredComparison& m) {
  const std::string base = fmt::format("/schedules/{}/measured/", index);
  std::string out = "<table class=\"measured\">\n";
  out += header_row({"figure", "predicted", "measured", "error"});
  out += "<tr>" + text_cell("step time") +
         seconds_cell(base + "predicted_step_time_s", m.predicted_step_time_s) +
         seconds_cell(base + "measured_step_time_s", m.measured_step_time_s) +
         signed_percent_cell(base + "step_time_relative_error", m.step_time_relative_error) +
         "</tr>\n";
  out += "<tr>" + text_cell("exposed comm") +
         seconds_cell(base + "predicted_exposed_comm_s", m.predicted_exposed_comm_s) +
         seconds_cell(base + "measured_exposed_comm_s", m.measured_exposed_comm_s) +
         signed_percent_cell(base + "exposed_comm_relative_error", m.exposed_comm_relative_error) +
         "</tr>\n";
  out += "<tr>" + text_cell("peak allocated") +
         bytes_cell(base + "predicted_peak_allocated_bytes", m.predicted_peak_allocated_bytes) +
         bytes_cell(base + "measured_peak_allocated_bytes", m.measured_peak_allocated_bytes) +
         signed_percent_cell(base + "peak_relative_error", m.peak_relative_error) + "</tr>\n";
  for (std::size_t s = 0; s < m.streams.size(); ++s) {
    const StreamComparison& stream = m.streams[s];
    const std::string stream_base = fmt::format("{}streams/{}/", base, s);
    out += "<tr>" + text_cell("busy " + stream.stream) +
           seconds_cell(stream_base + "predicted_busy_s", stream.predicted_busy_s) +
           seconds_cell(stream_base + "measured_busy_s", stream.measured_busy_s) +
           signed_percent_cell(stream_base + "relative_error", stream.relative_error) + "</tr>\n";
  }
  for (std::size_t r = 0; r < m.stages.size(); ++r) {
    const StageMeasurement& stage = m.stages[r];
    const std::string stage_base = fmt::format("{}stages/{}/", base, r);
    const auto row = [&](const std::string& label, const std::string& cells,
                         const std::string& error_key, double error) {
      return "<tr>" + text_cell(fmt::format("stage {} {}", stage.rank, label)) + cells +
             signed_percent_cell(stage_base + error_key, error) + "</tr>\n";
    };
    out += row("busy",
               seconds_cell(stage_base + "predicted_busy_s", stage.predicted_busy_s) +
                   seconds_cell(stage_base + "measured_busy_s", stage.measured_busy_s),
               "busy_relative_error", stage.busy_relative_error);
    out += row("end",
               seconds_cell(stage_base + "predicted_end_s", stage.predicted_end_s) +
                   seconds_cell(stage_base + "measured_end_s", stage.measured_end_s),
               "end_relative_error", stage.end_relative_error);
    out += row("peak allocated",
               bytes_cell(stage_base + "predicted_peak_allocated_bytes",
                          stage.predicted_peak_allocated_bytes) +
                   bytes_cell(stage_base + "measured_peak_allocated_bytes",
                              stage.measured_peak_allocated_bytes),
               "peak_relative_error", stage.peak_relative_error);
  }
  out += "</table>\n";
  out += "<p>" + escape_xml(report_detail::measured_legend(m)) + ".</p>\n";
  if (m.rank_compute_s.size() > 1) {
    out += "<p>" + escape_xml(rank_compute_summary(m.rank_compute_s)) + ".</p>\n";
  }
  if (m.largest_task_errors.empty()) {
    if (!m.stages.empty()) {
      return out +
             "<p>The actions and chunk tasks of a pipeline that differ most from the "
             "prediction: <code>fsdptune compare</code>.</p>\n";
    }
    // Its streams' busy times come from the same per-task timings: with them, the table
    // is only asked for no rows (`--top-errors 0`; found by QA).
    if (!m.streams.empty()) return out;
    return out + "<p>The measured file has no per-task timings.</p>\n";
  }
  out += "<h4>Largest per-task errors</h4>\n<table class=\"task-errors\">\n";
  out += header_row(
      {"task", "name", "stream", "predicted", "measured", "predicted - measured", "error"});
  for (std::size_t k = 0; k < m.largest_task_errors.size(); ++k) {
    const TaskError& error = m.largest_task_errors[k];
    const std::string error_base = fmt::format("{}largest_task_errors/{}/", base, k);
    out += "<tr>" + text_cell(fmt::format("#{}", error.task)) + text_cell(error.name) +
           text_cell(error.stream) + seconds_cell(error_base + "predicted_s", error.predicted_s) +
           seconds_cell(error_base + "measured_s", error.measured_s) +
           seconds_cell(error_base + "error_s", error.error_s) +
           signed_percent_cell(error_base + "relative_error", error.relative_error) + "</tr>\n";
  }
  return out + "</table>\n";
}

constexpr const char* kStyle = R"(
body { font-family: "DejaVu Sans", "Liberation Sans", Arial, sans-serif; margin: 24px 32px;
       color: #1d1d1f; background: #ffffff; }
h1 { font-size: 24px; margin: 0 0 4px 0; }
h2 { font-size: 19px; margin: 30px 0 8px 0; border-bottom: 1px solid #d0d0d0; }
h3 { font-size: 15px; margin: 20px 0 6px 0; }
h4 { font-size: 13px; margin: 14px 0 6px 0; }
p.meta, p.note { color: #555555; font-size: 13px; margin: 4px 0; }
p.warning { color: #a11d1d; font-size: 13px; font-weight: bold; margin: 4px 0; }
table { border-collapse: collapse; font-size: 12px; margin: 6px 0 10px 0; }
th, td { border: 1px solid #d6d6d6; padding: 3px 8px; }
th { background: #f2f2f2; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.no { color: #b00020; font-weight: bold; }
tr.tuned td { background: #eef5ff; font-weight: bold; }
.figures { display: flex; flex-wrap: wrap; gap: 12px; margin: 8px 0; }
.figure { border: 1px solid #d6d6d6; border-radius: 6px; padding: 6px 12px; min-width: 150px; }
.figure .value { font-size: 20px; font-weight: bold; }
.figure .name { font-size: 12px; color: #555555; }
svg.chart { display: block; margin: 6px 0 14px 0; background: #ffffff; }
svg text { font-family: "DejaVu Sans", "Liberation Sans", Arial, sans-serif; font-size: 11px;
           fill: #1d1d1f; }
svg text.axis-label { font-size: 12px; font-weight: bold; }
svg text.tick, svg text.bar-value { fill: #444444; }
svg text.task-label { font-size: 9px; fill: #ffffff; pointer-events: none; }
svg text.strong { font-weight: bold; }
svg .axis { stroke: #333333; stroke-width: 1; }
svg .grid { stroke: #e4e4e4; stroke-width: 1; }
svg .marker { stroke: #1d1d1f; stroke-width: 2; }
svg .limit { stroke: #d62728; stroke-width: 2; stroke-dasharray: 6 3; }
svg .marker-key { fill: #1d1d1f; }
svg .limit-key { fill: #d62728; }
svg .line-key { fill: #1f5fa8; }
svg .memory-line { fill: none; stroke: #1f5fa8; stroke-width: 1.5; }
svg .front-line { fill: none; stroke: #2ca02c; stroke-width: 1.5; }
svg .peak { fill: #d62728; }
svg .c-compute { fill: #4c78a8; } svg .c-exposed { fill: #f58518; } svg .c-idle { fill: #bab0ac; }
svg .m-sharded_state { fill: #4c78a8; } svg .m-gathered_params { fill: #f58518; }
svg .m-gradients { fill: #e45756; } svg .m-activations { fill: #54a24b; }
svg .m-workspace { fill: #b279a2; }
svg .m-reserve { fill: #e8e8e8; stroke: #999999; stroke-width: 0.5; }
svg .t-fwd { fill: #4c78a8; } svg .t-rec { fill: #72b7b2; } svg .t-bwd { fill: #2f7d32; }
svg .t-opt { fill: #7f7f7f; } svg .t-copy { fill: #b279a2; } svg .t-ag { fill: #f58518; }
svg .t-rs { fill: #d62728; } svg .t-ar { fill: #9d755d; } svg rect.alt { fill-opacity: 0.72; }
svg .pp-tail { fill: #d62728; fill-opacity: 0.55; }
svg rect.pp-bar { stroke: #ffffff; stroke-width: 0.5; }
svg .p-explored { fill: #c7c7c7; } svg .p-front { fill: #2ca02c; }
svg .p-baseline { fill: #9467bd; } svg .p-tuned { fill: #1f5fa8; stroke: #ffffff; stroke-width: 1.5; }
svg .v-predicted { fill: #4c78a8; } svg .v-measured { fill: #f58518; }
)";

std::string key_figure(const std::string& pointer, const std::string& value,
                       const std::string& display, const std::string& name) {
  return fmt::format(
      "<div class=\"figure\"><div class=\"value\"{}>{}</div><div class=\"name\">{}</div></div>\n",
      data_attributes(pointer, value), escape_xml(display), escape_xml(name));
}

// The stages of a pipeline schedule (version 2) as predicted, and its chunks' plans.
// Its figures from the report's stages (report_to_json's /schedules/i/pipeline/stages), each
// number cell pointing at its JSON.
std::string stages_table(const ScheduleFile& file, const ScheduleReport& report,
                         std::size_t index) {
  const SchedulePipeline& pipeline = *file.pipeline;
  // The chunks' unit names (a schedule read from a file has chunks, checked on load
  // against this workload).
  const Workload workload =
      pipeline.chunks.empty() ? Workload{} : build_workload(file.model, file.job);
  // The shape as the text says it (found by QA: the virtual stages and the split were left
  // out, and "1 stages").
  std::string out = fmt::format(
      "<p class=\"meta\">{}, {}, {}. The trace of this step: "
      "<code>fsdptune simulate ... --plan FILE --trace trace.json</code>.</p>\n",
      counted(file.job.pp, "stage"), microbatches_text(file.job),
      // pp = 1: gradient accumulation, no pipeline schedule, nothing sent.
      escape_xml(report_detail::pipeline_shape_text(file.job)) +
          (file.job.pp > 1 ? fmt::format(": bubble {}, send {} per microbatch between stages",
                                         format_percent(pipeline.bubble_fraction),
                                         escape_xml(format_seconds(pipeline.send_s)))
                           : ""));
  const bool bounded = !report.stages.empty() && report.stages.front().any_timing;
  std::vector<std::string> headers = {"stage",     "chunks",         "busy",          "end",
                                      "in flight", "peak allocated", "peak reserved", "fits"};
  if (bounded) headers.insert(headers.end() - 1, "reserved at any timing");
  out += "<table class=\"stages\">\n" + header_row(headers);
  for (std::size_t r = 0; r < report.stages.size(); ++r) {
    const ReportStage& stage = report.stages[r];
    const std::string base = fmt::format("/schedules/{}/pipeline/stages/{}/", index, r);
    std::string chunks;
    for (const ScheduleChunk& chunk : pipeline.chunks) {
      if (chunk.rank != stage.rank) continue;
      chunks += fmt::format("{}{}: {} ({} / {} / {} buckets, {})", chunks.empty() ? "" : "; ",
                            unit_range(workload, chunk.units),
                            counted(static_cast<std::int64_t>(chunk.units.size()), "unit"),
                            chunk.plan.forward_buckets.size(), chunk.plan.backward_buckets.size(),
                            chunk.plan.reduce_scatter_buckets.size(),
                            chunk.keep_gathered ? "kept gathered" : "gathered per microbatch");
    }
    out += "<tr>" + text_cell(std::to_string(stage.rank)) + text_cell(chunks) +
           seconds_cell(base + "busy_s", stage.busy_s) + seconds_cell(base + "end_s", stage.end_s) +
           number_cell(base + "max_in_flight", json_number_text(stage.max_in_flight),
                       std::to_string(stage.max_in_flight)) +
           bytes_cell(base + "peak_allocated_bytes", stage.peak_allocated_bytes) +
           bytes_cell(base + "peak_reserved_bytes", stage.peak_reserved_bytes);
    if (bounded) {
      out += stage.any_timing ? bytes_cell(base + "any_timing_peak_reserved_bytes",
                                           stage.any_timing->peak_reserved_bytes)
                              : text_cell("-");
    }
    out += text_cell(stage.fits ? "yes" : "no") + "</tr>\n";
  }
  return out + "</table>\n";
}

std::string schedule_section(const Report& report, std::size_t index, const ReportEntry& entry) {
  const ScheduleReport& schedule = report.schedules[index];
  const ScheduleFile& file = entry.schedule;
  const std::size_t tuned_index = schedule.plans.size() - 1;
  const std::string tuned_base = fmt::format("/schedules/{}/plans/{}/", index, tuned_index);
  const PlanSummary& tuned = schedule.plans[tuned_index].summary;
  const std::string base = fmt::format("/schedules/{}/", index);
  std::string out = fmt::format("<section class=\"schedule\" id=\"schedule-{}\">\n", index + 1);
  out += fmt::format("<h2>[{}] {}: {} on {} x {}</h2>\n", index + 1, escape_xml(schedule.source),
                     escape_xml(schedule.model), schedule.gpus, escape_xml(schedule.hardware));
  // A pipeline has a Program per chunk (QA, 2026-12-05: "in the program" of 4 chunks').
  const std::string programs =
      !file.pipeline ? std::string("the program")
      : file.pipeline->chunks.size() == 1
          ? std::string("its 1 chunk's program")
          : fmt::format("its {} chunks' programs", file.pipeline->chunks.size());
  out += fmt::format(
      "<p class=\"meta\">{}, memory limit {}, {} tasks in {}; tool {}, costs from {}</p>\n",
      escape_xml(report_detail::job_text(schedule)),
      escape_xml(format_bytes(schedule.memory_limit_bytes)), schedule.task_count, programs,
      escape_xml(file.provenance.tool), escape_xml(file.provenance.cost_source));
  out += "<div class=\"figures\">\n";
  out += key_figure(tuned_base + "step_time_s", json_number_text(tuned.step_time_s),
                    format_seconds(tuned.step_time_s), "tuned step time");
  out +=
      key_figure(tuned_base + "tokens_per_s_per_gpu", json_number_text(tuned.tokens_per_s_per_gpu),
                 format_rate(tuned.tokens_per_s_per_gpu), "tokens/s/GPU");
  out +=
      key_figure(tuned_base + "mfu", json_number_text(tuned.mfu), format_percent(tuned.mfu), "MFU");
  out += key_figure(tuned_base + "peak_reserved_bytes", json_number_text(tuned.peak_reserved_bytes),
                    format_bytes(tuned.peak_reserved_bytes), "peak reserved memory");
  if (schedule.any_timing) {
    out += key_figure(base + "any_timing/peak_allocated_bytes",
                      json_number_text(schedule.any_timing->peak_allocated_bytes),
                      format_bytes(schedule.any_timing->peak_allocated_bytes),
                      "peak allocated at any timing");
    out += key_figure(base + "any_timing/peak_reserved_bytes",
                      json_number_text(schedule.any_timing->peak_reserved_bytes),
                      format_bytes(schedule.any_timing->peak_reserved_bytes),
                      "peak reserved at any timing");
  }
  if (schedule.lower_bound_s > 0) {
    out += key_figure(base + "lower_bound_s", json_number_text(schedule.lower_bound_s),
                      format_seconds(schedule.lower_bound_s), "lower bound on step time");
    out += key_figure(base + "tuned_efficiency", json_number_text(schedule.tuned_efficiency),
                      format_percent(schedule.tuned_efficiency), "lower bound / tuned step time");
  }
  out += "</div>\n";
  out += "<h3>Plans</h3>\n" + plans_table(report, index);
  if (throughput_caveat_applies(entry.schedule.cost_queries, entry.schedule.cost_fallbacks,
                                entry.schedule.job.pp)) {
    out += std::string("<p class=\"note\">") + escape_xml(kThroughputCaveat) + ".</p>\n";
  }
  if (const std::string basis = report_detail::mfu_basis_line(entry.schedule); !basis.empty()) {
    out += "<p class=\"note\">" + escape_xml(basis) + ".</p>\n";
  }
  out += "<h3>Peak memory breakdown</h3>\n" + memory_table(report, index);
  const std::vector<std::string> any_timing = report_detail::any_timing_lines(schedule);
  if (!any_timing.empty()) {
    out += "<p class=\"" + std::string(schedule.fits_at_any_timing ? "note" : "warning") + "\">" +
           escape_xml(any_timing[0]) + ".</p>\n";
    for (std::size_t l = 1; l < any_timing.size(); ++l) {
      out += "<p class=\"note\">" + escape_xml(any_timing[l]) + ".</p>\n";
    }
  }

  const Program& program = file.program;
  if (file.pipeline) {
    out += "<h3>Pipeline stages</h3>\n" + stages_table(file, schedule, index);
    std::size_t actions = 0;
    for (const ScheduleStage& stage : file.pipeline->stages) actions += stage.actions.size();
    if (actions > kMaxChartBars) {
      out += chart_left_out(actions, "pipeline actions", "Gantt chart");
    } else if (has_pipeline_actions(*file.pipeline)) {
      out += "<h3>One step, predicted (pipeline schedule)</h3>\n";
      out += pipeline_gantt_chart(fmt::format("pipeline-{}", index + 1), file);
    } else {
      out +=
          "<p class=\"note\">This schedule stores no pipeline actions (written before "
          "2026-12-01): no Gantt chart. Tuning it again stores them.</p>\n";
    }
  } else if (program.tasks.empty() || file.timings.size() != program.tasks.size()) {
    out += "<p class=\"note\">This schedule has no per-task timings: no Gantt chart.</p>\n";
  } else if (program.tasks.size() > kMaxChartBars) {
    out += chart_left_out(program.tasks.size(), "tasks",
                          "Gantt chart, memory chart or measured Gantt chart");
  } else {
    double step_s = file.predicted.step_time_s;
    for (const TaskTiming& timing : file.timings) step_s = std::max(step_s, timing.end_s);
    // The schedule's plan alone (found by QA: a user comparing SimpleFSDP with FSDP2 looked
    // for the baselines' overlap in it).
    out += "<h3>One step of the " + escape_xml(file.plan.name) +
           " plan, predicted (Gantt)</h3>\n<p class=\"note\">The baselines' steps: <code>fsdptune "
           "simulate --model ... --plan fsdp2 --trace FILE</code> (or simplefsdp-block, "
           "simplefsdp-greedy) writes one as a Chrome trace.</p>\n";
    out += gantt_chart(fmt::format("gantt-{}", index + 1), "Gantt chart of one predicted step",
                       program, file.timings, 0, step_s);
    // A dense step (hundreds of tasks) gets a readable close-up of its start: the first
    // all-gathers and forward units with their labels.
    if (program.tasks.size() > 200) {
      out += "<h3>The first tenth of the step, enlarged</h3>\n";
      out += gantt_chart(fmt::format("gantt-{}-start", index + 1),
                         "Gantt chart of the first tenth of the predicted step", program,
                         file.timings, 0, step_s / 10);
    }
  }
  // A pipeline schedule has per-stage peaks (above), no memory timeline.
  if (!file.pipeline && program.tasks.size() <= kMaxChartBars) {
    out += "<h3>Memory over the step</h3>\n";
    out += memory_timeline_chart(fmt::format("memory-{}", index + 1), file);
  }
  out += "<h3>Pareto front explored by the tuner</h3>\n";
  out += pareto_chart(fmt::format("pareto-{}", index + 1), file);
  if (const std::string legend = report_detail::pareto_legend(file); !legend.empty()) {
    out += "<p>" + escape_xml(legend) + ".</p>\n";
  }
  if (schedule.measured) {
    const MeasuredComparison& m = *schedule.measured;
    out +=
        "<h3>Predicted vs measured (" + escape_xml(report_detail::measured_heading(m)) + ")</h3>\n";
    out += measured_chart(fmt::format("measured-{}", index + 1), index, m);
    out += measured_tables(index, m);
    if (entry.measured && entry.measured->timings.size() == program.tasks.size() &&
        !program.tasks.empty() && program.tasks.size() <= kMaxChartBars) {
      double step_s = entry.measured->step_time_s;
      for (const TaskTiming& timing : entry.measured->timings)
        step_s = std::max(step_s, timing.end_s);
      out += "<h3>One step, measured (Gantt)</h3>\n";
      out += gantt_chart(fmt::format("gantt-{}-measured", index + 1),
                         "Gantt chart of one measured step", program, entry.measured->timings, 0,
                         step_s);
    }
  }
  return out + "</section>\n";
}

}  // namespace

// The label drawn inside a task's bar, the longest that fits. Communication tasks
// ("AG fwd b3 layers.2..layers.4", "copy-in AG fwd b3 layers.2"): the full name, the name up
// to its bucket ("AG fwd b3"), the bucket ("b3"). Compute tasks ("bwd layers.3") and
// pipeline actions ("chunk 2 F3"): the full name, the last word ("layers.3", "F3"), its
// number ("3"). Else nothing.
std::string gantt_label(const std::string& name, double width_px) {
  auto fits = [&](const std::string& label) {
    return !label.empty() && static_cast<double>(label.size()) * kCharWidthPx + 4 <= width_px;
  };
  std::vector<std::string> words;
  for (std::size_t begin = 0; begin < name.size();) {
    const std::size_t end = std::min(name.find(' ', begin), name.size());
    if (end > begin) words.push_back(name.substr(begin, end - begin));
    begin = end + 1;
  }
  auto is_bucket = [](const std::string& word) {
    return word.size() > 1 && word[0] == 'b' &&
           word.find_first_not_of("0123456789", 1) == std::string::npos;
  };
  std::vector<std::string> candidates = {name};
  std::string prefix;
  bool bucket = false;
  for (const std::string& word : words) {
    prefix += (prefix.empty() ? "" : " ") + word;
    if (is_bucket(word)) {
      candidates.push_back(prefix);
      candidates.push_back(word);
      bucket = true;
      break;
    }
  }
  if (!bucket && !words.empty()) {
    const std::string& last = words.back();
    std::size_t digits = last.size();
    while (digits > 0 && std::isdigit(static_cast<unsigned char>(last[digits - 1]))) --digits;
    candidates.push_back(last);
    candidates.push_back(last.substr(digits));
  }
  for (const std::string& label : candidates) {
    if (fits(label)) return label;
  }
  return "";
}

std::string render_report_html(const std::vector<ReportEntry>& entries,
                               const ReportOptions& options) {
  const Report report = summarize_report(entries, options);
  std::string out =
      "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n"
      "<meta charset=\"utf-8\"/>\n<title>fsdptune report</title>\n<style>";
  out += kStyle;
  out += "</style>\n</head>\n<body>\n<h1>fsdptune report</h1>\n";
  out += fmt::format("<p class=\"meta\">{}: ",
                     counted(static_cast<std::int64_t>(report.schedules.size()), "schedule"));
  for (std::size_t i = 0; i < report.schedules.size(); ++i) {
    if (i > 0) out += ", ";
    out += fmt::format("<a href=\"#schedule-{}\">[{}] {}</a>", i + 1, i + 1,
                       escape_xml(report.schedules[i].source));
  }
  out += ". Times are per training step, memory is per GPU.</p>\n";
  if (!report.schedules.empty()) {
    out += "<section id=\"overview\">\n<h2>All plans</h2>\n";
    // Several schedules: which is best (found by QA: the step-time bars read the reverse of
    // tokens/s/GPU for a pipeline of several microbatches a step).
    if (const auto ranking = report_detail::ranking_rows(report); !ranking.empty()) {
      out +=
          "<h3>Ranking of the tuned plans</h3>\n<p>Those that fit first, then by "
          "tokens/s/GPU; a step's time compares only steps of the same tokens.</p>\n";
      out += "<table class=\"ranking\">\n" + header_row(ranking.front());
      for (std::size_t r = 1; r < ranking.size(); ++r) {
        out += r == 1 ? "<tr class=\"tuned\">" : "<tr>";
        for (const std::string& cell : ranking[r]) out += text_cell(cell);
        out += "</tr>\n";
      }
      out += "</table>\n";
      if (const std::string caveat = report_detail::ranking_caveat(report); !caveat.empty()) {
        out += "<p class=\"note\">Note: " + escape_xml(caveat) + ".</p>\n";
      }
    }
    out += "<h3>Step time breakdown</h3>\n";
    out += step_time_chart(report);
    out += "<h3>Peak memory breakdown</h3>\n";
    out += memory_chart(report);
    out += "</section>\n";
  }
  for (std::size_t i = 0; i < report.schedules.size(); ++i) {
    out += schedule_section(report, i, entries[i]);
  }
  out += "</body>\n</html>\n";
  return out;
}

}  // namespace fsdptune
