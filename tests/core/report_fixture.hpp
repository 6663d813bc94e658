// A hand-built schedule and measured result for the report tests, plus a strict
// XML-ish parser that the HTML report must satisfy. Times are in units of 1/1024 s so
// that every sum and difference below is exact in binary floating point.
#pragma once

#include <cctype>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "fsdptune/report.hpp"
#include "fsdptune/units.hpp"

namespace fsdptune::report_test {

inline constexpr double kUnitS = 1.0 / 1024;  // about a millisecond

inline Task make_task(int id, int stream, TaskKind kind, const std::string& name,
                      double cost_units) {
  Task task;
  task.id = id;
  task.stream = stream;
  task.kind = kind;
  task.name = name;
  task.duration_s = cost_units * kUnitS;
  return task;
}

inline PlanSummary make_summary(const std::string& name, double step_units, std::int64_t peak_mib,
                                std::int64_t reserved_mib) {
  PlanSummary summary;
  summary.plan_name = name;
  summary.step_time_s = step_units * kUnitS;
  summary.tokens_per_s_per_gpu = 128 / summary.step_time_s;
  summary.mfu = 0.45;
  summary.compute_s = 12 * kUnitS;
  summary.comm_s = 7 * kUnitS;
  summary.exposed_comm_s = (step_units - 13) * kUnitS;
  summary.idle_s = 1 * kUnitS;
  summary.peak_allocated_bytes = peak_mib * kMiB;
  summary.peak_reserved_bytes = reserved_mib * kMiB;
  // sharded 1/6, gathered 2/6, gradients 1/6, activations 1.5/6, workspace 0.5/6 of peak.
  summary.peak_breakdown = {peak_mib * kMiB / 6, peak_mib * kMiB / 3, peak_mib * kMiB / 6,
                            peak_mib * kMiB / 4, peak_mib * kMiB / 12};
  summary.fits = reserved_mib * kMiB <= kGiB;
  return summary;
}

// Streams: 0 compute, 1 all_gather, 2 reduce_scatter. Predicted timings (units):
//   0 AG b0   [0,1]    1 fwd emb [1,2]    2 AG b1 [1,3]    3 fwd l0 [3,6]
//   4 bwd l0  [6,12]   5 RS b1   [12,15]  6 bwd emb [12,14] 7 RS b0 [15,16]
inline ScheduleFile make_schedule() {
  ScheduleFile schedule;
  schedule.model.name = "tiny";
  schedule.hardware.id = "h100-sxm";
  schedule.job.gpus = 8;
  schedule.job.dp_shard = 8;
  schedule.job.local_batch = 1;
  schedule.job.seq_len = 128;
  schedule.memory_limit_bytes = kGiB;
  Program& program = schedule.program;
  program.streams = {{"compute", StreamRole::kCompute},
                     {"all_gather", StreamRole::kAllGather},
                     {"reduce_scatter", StreamRole::kReduceScatter}};
  program.tasks = {
      make_task(0, 1, TaskKind::kAllGather, "AG b0 [tok_embeddings]", 1),
      make_task(1, 0, TaskKind::kForward, "fwd tok_embeddings", 1),
      make_task(2, 1, TaskKind::kAllGather, "AG b1 [layers.0]", 2),
      make_task(3, 0, TaskKind::kForward, "fwd layers.0", 3),
      make_task(4, 0, TaskKind::kBackward, "bwd layers.0", 6),
      make_task(5, 2, TaskKind::kReduceScatter, "RS b1 [layers.0]", 3),
      make_task(6, 0, TaskKind::kBackward, "bwd tok_embeddings", 2),
      make_task(7, 2, TaskKind::kReduceScatter, "RS b0 [tok_embeddings]", 1),
  };
  const double starts[] = {0, 1, 1, 3, 6, 12, 12, 15};
  const double ends[] = {1, 2, 3, 6, 12, 15, 14, 16};
  for (int t = 0; t < 8; ++t) schedule.timings.push_back({starts[t] * kUnitS, ends[t] * kUnitS});
  const double sample_units[] = {0, 1, 3, 6, 12, 16};
  const std::int64_t sample_mib[] = {100, 300, 500, 600, 400, 100};
  for (int s = 0; s < 6; ++s) {
    schedule.memory_timeline.push_back({sample_units[s] * kUnitS, sample_mib[s] * kMiB});
  }
  schedule.plan.name = "tuned";
  schedule.predicted = make_summary("tuned", 16, 600, 700);
  schedule.baselines = {make_summary("fsdp2", 20, 800, 900),
                        make_summary("simplefsdp-block", 18, 700, 750)};
  schedule.pareto = {{16 * kUnitS, 600 * kMiB, "tuned #1", 650 * kMiB},
                     {17 * kUnitS, 550 * kMiB, "tuned #2", 600 * kMiB},
                     {19 * kUnitS, 650 * kMiB, "tuned #3", 700 * kMiB},
                     {15 * kUnitS, 1200 * kMiB, "tuned #4", 1300 * kMiB}};
  schedule.lower_bound_s = 12.8 * kUnitS;
  schedule.provenance.tool = "fsdptune 0.1.0";
  schedule.provenance.cost_source = "h100-sxm";
  return schedule;
}

// Measured timings (units): 0 [0,1.5] 1 [1.5,2.5] 2 [1.5,4.5] 3 [4.5,7.5] 4 [7.5,14.5]
// 5 [14.5,17.5] 6 [14.5,16.5] 7 [17.5,19].
inline MeasuredResult make_measured() {
  MeasuredResult measured;
  measured.backend = "cpu";
  measured.world_size = 8;
  measured.iterations = 5;
  measured.warmup = 1;
  measured.data_checked = true;
  measured.step_time_s = 19 * kUnitS;
  measured.step_times_s = {19 * kUnitS, 19 * kUnitS};
  measured.compute_s = 13 * kUnitS;
  measured.exposed_comm_s = 4 * kUnitS;
  measured.peak_allocated_bytes = 640 * kMiB;
  const double starts[] = {0, 1.5, 1.5, 4.5, 7.5, 14.5, 14.5, 17.5};
  const double ends[] = {1.5, 2.5, 4.5, 7.5, 14.5, 17.5, 16.5, 19};
  for (int t = 0; t < 8; ++t) measured.timings.push_back({starts[t] * kUnitS, ends[t] * kUnitS});
  return measured;
}

// --- A strict parser for the XHTML-compatible subset the report writes. ------------------

struct XmlElement {
  std::string name;
  std::map<std::string, std::string> attributes;
  std::vector<XmlElement> children;
  std::string text;  // all character data directly inside, entities decoded

  // Descendants (not this) named `tag`, in document order.
  void find_all(const std::string& tag, std::vector<const XmlElement*>& out) const {
    for (const XmlElement& child : children) {
      if (child.name == tag) out.push_back(&child);
      child.find_all(tag, out);
    }
  }
  std::vector<const XmlElement*> all(const std::string& tag) const {
    std::vector<const XmlElement*> out;
    find_all(tag, out);
    return out;
  }
  // Every descendant with the attribute.
  void find_with(const std::string& attribute, std::vector<const XmlElement*>& out) const {
    for (const XmlElement& child : children) {
      if (child.attributes.count(attribute)) out.push_back(&child);
      child.find_with(attribute, out);
    }
  }
  std::string attribute(const std::string& key) const {
    auto it = attributes.find(key);
    return it == attributes.end() ? std::string() : it->second;
  }
};

// The chart (an <svg> element) of the page with this id, or nullptr.
inline const XmlElement* chart_with_id(const XmlElement& root, const std::string& id) {
  for (const XmlElement* chart : root.all("svg")) {
    if (chart->attribute("id") == id) return chart;
  }
  return nullptr;
}

class XmlParser {
 public:
  explicit XmlParser(const std::string& input) : s_(input) {}

  // The root element. Throws std::runtime_error naming the byte offset of the first
  // violation: unbalanced or mismatched tags, unquoted or duplicate attributes, a raw '<'
  // or an unknown entity in text, content after the root.
  XmlElement parse() {
    skip_space();
    if (s_.compare(i_, 9, "<!DOCTYPE") == 0) {
      const auto end = s_.find('>', i_);
      if (end == std::string::npos) fail("unterminated DOCTYPE");
      i_ = end + 1;
    }
    skip_misc();
    if (i_ >= s_.size() || s_[i_] != '<') fail("expected the root element");
    XmlElement root = element();
    skip_misc();
    if (i_ != s_.size()) fail("content after the root element");
    return root;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error(what + " at byte " + std::to_string(i_) + ": '" + s_.substr(i_, 40) +
                             "'");
  }
  void skip_space() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  void skip_misc() {
    for (;;) {
      skip_space();
      if (s_.compare(i_, 4, "<!--") == 0) {
        const auto end = s_.find("-->", i_);
        if (end == std::string::npos) fail("unterminated comment");
        i_ = end + 3;
      } else {
        return;
      }
    }
  }
  static bool name_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == ':' || c == '_';
  }
  std::string name() {
    const std::size_t begin = i_;
    if (i_ >= s_.size() || !std::isalpha(static_cast<unsigned char>(s_[i_])))
      fail("expected a name");
    while (i_ < s_.size() && name_char(s_[i_])) ++i_;
    return s_.substr(begin, i_ - begin);
  }
  std::string entity() {
    const auto end = s_.find(';', i_);
    if (end == std::string::npos || end - i_ > 10) fail("unterminated entity");
    const std::string body = s_.substr(i_ + 1, end - i_ - 1);
    std::string decoded;
    if (body == "amp") {
      decoded = "&";
    } else if (body == "lt") {
      decoded = "<";
    } else if (body == "gt") {
      decoded = ">";
    } else if (body == "quot") {
      decoded = "\"";
    } else if (body == "apos" || body == "#39") {
      decoded = "'";
    } else if (body.size() > 1 && body[0] == '#' &&
               body.find_first_not_of("0123456789", 1) == std::string::npos) {
      const long code = std::stol(body.substr(1));
      if (code < 32 || code > 126) fail("numeric entity outside printable ASCII");
      decoded = std::string(1, static_cast<char>(code));
    } else {
      fail("unknown entity &" + body + ";");
    }
    i_ = end + 1;
    return decoded;
  }
  XmlElement element() {
    ++i_;  // '<'
    XmlElement node;
    node.name = name();
    for (;;) {
      const std::size_t before = i_;
      skip_space();
      if (i_ >= s_.size()) fail("unterminated tag");
      if (s_[i_] == '/') {
        if (s_.compare(i_, 2, "/>") != 0) fail("expected />");
        i_ += 2;
        return node;
      }
      if (s_[i_] == '>') {
        ++i_;
        break;
      }
      if (before == i_) fail("attributes must be separated by space");
      const std::string key = name();
      if (i_ >= s_.size() || s_[i_] != '=') fail("attribute without value");
      ++i_;
      if (i_ >= s_.size() || s_[i_] != '"') fail("attribute value not in double quotes");
      ++i_;
      std::string value;
      while (i_ < s_.size() && s_[i_] != '"') {
        if (s_[i_] == '<') fail("raw < in attribute");
        if (s_[i_] == '&') {
          value += entity();
        } else {
          value += s_[i_++];
        }
      }
      if (i_ >= s_.size()) fail("unterminated attribute value");
      ++i_;
      if (!node.attributes.emplace(key, value).second) fail("duplicate attribute " + key);
    }
    for (;;) {
      if (i_ >= s_.size()) fail("unclosed <" + node.name + ">");
      if (s_.compare(i_, 4, "<!--") == 0) {
        const auto end = s_.find("-->", i_);
        if (end == std::string::npos) fail("unterminated comment");
        i_ = end + 3;
      } else if (s_.compare(i_, 2, "</") == 0) {
        i_ += 2;
        const std::string closing = name();
        if (closing != node.name) fail("</" + closing + "> closes <" + node.name + ">");
        skip_space();
        if (i_ >= s_.size() || s_[i_] != '>') fail("expected >");
        ++i_;
        return node;
      } else if (s_[i_] == '<') {
        node.children.push_back(element());
      } else if (s_[i_] == '&') {
        node.text += entity();
      } else {
        node.text += s_[i_++];
      }
    }
  }

  const std::string& s_;
  std::size_t i_ = 0;
};

}  // namespace fsdptune::report_test
