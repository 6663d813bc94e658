// nccl-tests text output -> cost profile (include/fsdptune/importers.hpp).
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "fsdptune/error.hpp"
#include "fsdptune/importers.hpp"
#include "fsdptune/units.hpp"

namespace fsdptune {
namespace {

std::string lowercase(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// The whitespace split_whitespace splits on (a line of form feeds alone was not empty
// trimmed but had no tokens: fuzzing found the first token read from an empty row).
constexpr const char* kWhitespace = " \t\r\n\v\f";

std::string trim(const std::string& text) {
  const auto begin = text.find_first_not_of(kWhitespace);
  if (begin == std::string::npos) return "";
  const auto end = text.find_last_not_of(kWhitespace);
  return text.substr(begin, end - begin + 1);
}

std::vector<std::string> split_whitespace(const std::string& line) {
  std::istringstream stream(line);
  std::vector<std::string> tokens;
  std::string token;
  while (stream >> token) tokens.push_back(token);
  return tokens;
}

// What a name ("all_gather_perf", "logs/reduce-scatter.txt") says about the collective.
struct NamedCollective {
  std::optional<CollectiveKind> kind;  // a collective fsdptune imports
  std::string unsupported;             // or the nccl-tests collective it cannot import
};

NamedCollective collective_from_name(const std::string& name) {
  std::string squashed;
  for (char c : lowercase(name)) {
    if (c != '_' && c != '-') squashed.push_back(c);
  }
  // Longer names first: "allgather" contains "gather", "allreduce" contains "reduce".
  if (squashed.find("allgather") != std::string::npos) return {CollectiveKind::kAllGather, ""};
  if (squashed.find("reducescatter") != std::string::npos) {
    return {CollectiveKind::kReduceScatter, ""};
  }
  if (squashed.find("allreduce") != std::string::npos) return {CollectiveKind::kAllReduce, ""};
  for (const char* other :
       {"alltoall", "broadcast", "sendrecv", "hypercube", "gather", "scatter", "reduce"}) {
    if (squashed.find(other) != std::string::npos) return {std::nullopt, other};
  }
  return {};
}

// Bytes per element of the nccl-tests "type" column; 0 when unknown.
int element_bytes(const std::string& type) {
  static const std::map<std::string, int> kSizes = {
      {"int8", 1},   {"uint8", 1},  {"int32", 4},    {"uint32", 4},  {"int64", 8},
      {"uint64", 8}, {"half", 2},   {"float", 4},    {"double", 8},  {"bfloat16", 2},
      {"f8e4m3", 1}, {"f8e5m2", 1}, {"fp8_e4m3", 1}, {"fp8_e5m2", 1}};
  const auto it = kSizes.find(type);
  return it == kSizes.end() ? 0 : it->second;
}

std::optional<double> parse_number(const std::string& token) {
  double value = 0;
  const char* begin = token.data();
  const char* end = token.data() + token.size();
  const auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

std::optional<std::int64_t> parse_integer(const std::string& token) {
  std::int64_t value = 0;
  const char* end = token.data() + token.size();
  const auto [ptr, ec] = std::from_chars(token.data(), end, value);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

// A "#  Rank N Group G Pid P on HOST device D [BUS] NAME" line (numbers in digits, HOST
// without spaces, BUS anything but ']'), scanned by hand: std::regex matches recursively,
// and a line of a few hundred thousand characters overflowed the stack.
struct RankLine {
  std::string rank;
  std::string host;
  std::string device;  // NAME, the rest of the line
};

std::optional<RankLine> parse_rank_line(std::string_view line) {
  std::size_t at = 0;
  const auto is_space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  // Skips one or more spaces; false when there is none.
  const auto spaces = [&] {
    const std::size_t start = at;
    while (at < line.size() && is_space(line[at])) ++at;
    return at > start;
  };
  const auto word = [&] {
    const std::size_t start = at;
    while (at < line.size() && !is_space(line[at])) ++at;
    return line.substr(start, at - start);
  };
  const auto digits = [](std::string_view text) {
    return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
      return std::isdigit(static_cast<unsigned char>(c)) != 0;
    });
  };
  if (line.empty() || line[0] != '#') return std::nullopt;
  at = 1;
  RankLine result;
  for (const char* keyword : {"Rank", "Group", "Pid", "on", "device"}) {
    // rccl-tests and older nccl-tests print no Group (found by QA: their logs refused).
    if (std::string_view(keyword) == "Group") {
      const std::size_t before = at;
      if (!(spaces() && word() == "Group")) {
        at = before;
        continue;
      }
      at = before;
    }
    if (!spaces() || word() != keyword || !spaces()) return std::nullopt;
    const std::string_view value = word();
    if (std::string_view(keyword) == "on") {
      result.host = std::string(value);
    } else if (!digits(value)) {
      return std::nullopt;
    } else if (std::string_view(keyword) == "Rank") {
      result.rank = std::string(value);
    }
  }
  // " [BUS] NAME"
  if (!spaces() || at >= line.size() || line[at] != '[') return std::nullopt;
  const std::size_t close = line.find(']', at);
  if (close == std::string_view::npos) return std::nullopt;
  at = close + 1;
  if (!spaces()) return std::nullopt;
  result.device = std::string(line.substr(at));
  return result;
}

// `line` without the "[JOB,RANK]<stdout>:" (or <stderr>) that `mpirun --tag-output` puts
// before every line a rank prints (found by QA: such a log was "not an nccl-tests log").
std::string without_tag(const std::string& line) {
  if (line.empty() || line[0] != '[') return line;
  std::size_t at = 1;
  const auto number = [&] {
    const std::size_t start = at;
    while (at < line.size() && std::isdigit(static_cast<unsigned char>(line[at])) != 0) ++at;
    return at > start;
  };
  if (!number() || at >= line.size() || line[at++] != ',' || !number()) return line;
  for (const std::string_view tag : {"]<stdout>:", "]<stderr>:"}) {
    if (std::string_view(line).substr(at).starts_with(tag)) return line.substr(at + tag.size());
  }
  return line;
}

// "#", spaces, then the word "Rank": a line that must parse as a rank line.
bool is_rank_word_line(const std::string& line) {
  const std::size_t word = line.find_first_not_of(" \t", 1);
  return line[0] == '#' && word != 1 && word != std::string::npos &&
         line.compare(word, 5, "Rank ") == 0;
}

bool is_utf8(const std::string& text) {
  // nlohmann's serializer is what rejects it when the profile is written.
  try {
    (void)nlohmann::json(text).dump();
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

std::string base_name(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

NcclTestsLog parse_nccl_tests_log(const TextSource& log) {
  const std::string& source = log.name;
  auto at_line = [&](int line) { return fmt::format("{}:{}", source, line); };

  bool header_seen = false;
  bool columns_seen = false;
  std::size_t header_columns = 0;  // the column header's names: every data row has as many
  int header_line = 0;
  bool header_has_redop = false;  // older nccl-tests print all_gather without redop and root
  // Older nccl-tests name the check columns "error" and print the largest deviation there
  // (0e+00, or a rounding error such as 2e-07 for a float all_reduce); the run's verdict is
  // its "# Out of bounds values : N OK|FAILED" line. Newer ones count "#wrong" elements.
  bool header_error_columns = false;
  bool verdict_seen = false;  // "# Out of bounds values : N OK|FAILED"
  bool footer_seen = false;
  int footer_line = 0;
  std::string declared_test;  // from "# Collective test starting: NAME"
  std::set<std::int64_t> ranks;
  std::map<std::string, std::int64_t> ranks_by_host;
  std::string device;  // the first rank line's, which every other must name
  std::int64_t device_rank = 0;
  std::map<std::int64_t, std::vector<double>> samples_by_bytes;
  std::map<std::int64_t, int> line_of_size;  // nccl-tests prints each size once per run
  // Every row's size, count, type and redop: the first row's tell the collective, every
  // other row is checked against it at the end.
  struct RowShape {
    int line = 0;
    std::int64_t size = 0;
    std::optional<std::int64_t> count;
    std::string type;
    std::string redop;  // empty where the header has no redop column
  };
  std::vector<RowShape> rows;
  int zero_rows = 0;  // rows of 0 bytes, skipped
  struct Bandwidths {
    int line = 0;
    double algbw = 0;  // GB/s, as printed
    double busbw = 0;
  } widest;

  std::istringstream stream(log.text);
  std::string line;
  int line_number = 0;
  while (std::getline(stream, line)) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    line = without_tag(line);
    const std::string trimmed = trim(line);
    if (trimmed.empty()) continue;
    if (trimmed[0] == '#') {
      if (trimmed.rfind("# Collective test starting:", 0) == 0) {
        declared_test = trim(trimmed.substr(std::string("# Collective test starting:").size()));
      } else if (trimmed.rfind("# nThread", 0) == 0) {
        if (footer_seen) {
          throw_bad_input(at_line(line_number),
                          fmt::format("a second run after the first's end (line {})", footer_line),
                          "import each run's log on its own: one log is one run");
        }
        header_seen = true;
      } else if (const std::optional<RankLine> rank_line = parse_rank_line(trimmed)) {
        const std::optional<std::int64_t> parsed_rank = parse_integer(rank_line->rank);
        if (!parsed_rank) {
          throw_bad_input(at_line(line_number),
                          fmt::format("rank '{}' is not a 64-bit integer", rank_line->rank));
        }
        const std::int64_t rank = *parsed_rank;
        if (!ranks.insert(rank).second) {
          throw_bad_input(at_line(line_number), fmt::format("rank {} listed twice", rank));
        }
        ++ranks_by_host[rank_line->host];
        const std::string name = trim(rank_line->device);
        // The device name goes into the profile's JSON, whose text is UTF-8.
        if (!is_utf8(name)) {
          throw_bad_input(at_line(line_number), "the device name is not UTF-8 text");
        }
        // One kind of GPU per log, as per profile: a rank on another kind ran at its speed
        // under the first's name (found by QA: an A100 among H100s was imported as h100-sxm).
        if (device.empty()) {
          device = name;
          device_rank = rank;
        } else if (name != device) {
          throw_bad_input(at_line(line_number),
                          fmt::format("rank {} ran on '{}' but rank {} on '{}'", rank, name,
                                      device_rank, device),
                          "import logs of one kind of GPU into one profile");
        }
      } else if (is_rank_word_line(trimmed)) {
        // "#  Rank ..." that is no rank line: a rank left out of the count, which an
        // all-reduce's columns cannot show (found by fuzzing: a damaged last line imported
        // an 8-rank log as 7 ranks).
        throw_bad_input(at_line(line_number),
                        fmt::format("'{}' is no '#  Rank N Group G Pid P on HOST device D [BUS] "
                                    "NAME' line",
                                    trimmed.substr(0, 120)),
                        "import the log as nccl-tests printed it");
      } else if (trimmed.find("size") != std::string::npos &&
                 trimmed.find("count") != std::string::npos &&
                 trimmed.find("time") != std::string::npos) {
        // "#  size count type [redop [root]] time algbw busbw #wrong time algbw busbw
        // #wrong": the out-of-place and in-place columns are the last eight.
        std::vector<std::string> names = split_whitespace(trimmed.substr(1));
        const std::size_t n = names.size();
        const auto check_column = [&](std::size_t k) {
          return names[k] == "#wrong" || names[k] == "error";
        };
        if (n < 11 || names[0] != "size" || names[n - 8] != "time" || names[n - 4] != "time" ||
            !check_column(n - 5) || !check_column(n - 1) || names[n - 5] != names[n - 1]) {
          throw_bad_input(at_line(line_number),
                          fmt::format("column header '{}' is not nccl-tests' (size, count, type, "
                                      "..., then out-of-place and in-place time algbw busbw "
                                      "#wrong)",
                                      trimmed),
                          "import the log as nccl-tests printed it");
        }
        columns_seen = true;
        header_columns = n;
        header_error_columns = names[n - 1] == "error";
        header_has_redop = names[3] == "redop";
        header_line = line_number;
      } else if (trimmed.rfind("# Out of bounds values", 0) == 0) {
        if (trimmed.find("FAILED") != std::string::npos) {
          throw_bad_input(at_line(line_number),
                          fmt::format("'{}': the run failed nccl-tests' own data check", trimmed),
                          "fix the run; fsdptune does not import failed measurements");
        }
        verdict_seen = true;
      } else if (trimmed.rfind("# Avg bus bandwidth", 0) == 0) {
        footer_seen = true;
        footer_line = line_number;
      }
      continue;
    }
    // Non-comment lines: data rows (their first column an integer, the size) once the
    // column header was seen; NCCL INFO/WARN lines ("host:pid:tid [0] NCCL INFO ...", host
    // names that start with a digit too) and anything else a launcher prints are skipped.
    // A line of the header's columns whose first starts as a number does (no ':' of a
    // host:pid:tid) is a data row too, its size refused below unless it is an integer: a
    // damaged size ("8388608.5", "83886O8") was skipped with its samples (QA, 2026-12-05).
    const std::vector<std::string> tokens = split_whitespace(trimmed);
    const std::string& first = tokens.front();
    const bool integer =
        first.find_first_not_of("0123456789", first[0] == '-' ? 1 : 0) == std::string::npos &&
        first != "-";
    const std::size_t digit = first[0] == '-' || first[0] == '+' ? 1 : 0;
    const bool row_like = tokens.size() == header_columns && first.size() > digit &&
                          std::isdigit(static_cast<unsigned char>(first[digit])) != 0 &&
                          first.find(':') == std::string::npos;
    if (!columns_seen || !(integer || row_like)) continue;
    if (footer_seen) {
      throw_bad_input(at_line(line_number),
                      fmt::format("a data row after the run's end (line {})", footer_line),
                      "import each run's log on its own: one log is one run");
    }
    // size count type [redop [root]] + out-of-place (time algbw busbw #wrong) + in-place,
    // as many as the column header names (a column more or less would shift the times).
    if (tokens.size() != header_columns) {
      throw_bad_input(at_line(line_number),
                      fmt::format("data row has {} columns, the column header (line {}) names {}",
                                  tokens.size(), header_line, header_columns),
                      "is the row cut short or run together with other output?");
    }
    const std::optional<std::int64_t> size = parse_integer(tokens[0]);
    // nccl-tests prints rows of 0 bytes for the sizes below one element of each rank (`-b`
    // small): they move no data and are skipped (found by QA: real logs were refused).
    if (size && *size == 0) {
      ++zero_rows;
      continue;
    }
    if (!size || *size <= 0) {
      throw_bad_input(at_line(line_number),
                      fmt::format("size '{}' is not a positive integer", tokens[0]));
    }
    if (*size > kMaxOpCount) {
      throw_bad_input(at_line(line_number), fmt::format("size {} is more than a profile holds "
                                                        "(at most {} bytes)",
                                                        *size, kMaxOpCount));
    }
    // A size twice in one run: rows pasted or edited (they were pooled without a word).
    if (const auto [it, fresh] = line_of_size.emplace(*size, line_number); !fresh) {
      throw_bad_input(at_line(line_number),
                      fmt::format("size {} again (line {} has it): nccl-tests prints each size "
                                  "once per run",
                                  *size, it->second),
                      "import repeated runs as separate logs: their samples are pooled");
    }
    const std::size_t n = tokens.size();
    const std::pair<const char*, std::size_t> columns[] = {{"out-of-place", n - 8},
                                                           {"in-place", n - 4}};
    for (const auto& [which, time_index] : columns) {
      const std::optional<double> time_us = parse_number(tokens[time_index]);
      if (!time_us) {
        throw_bad_input(at_line(line_number),
                        fmt::format("{} time '{}' is not a number", which, tokens[time_index]));
      }
      // In seconds as the profile holds them: positive (a denormal microsecond count is 0 s)
      // and at most kMaxSampleSeconds.
      const double time_s = *time_us * 1e-6;
      if (!std::isfinite(*time_us) || !(time_s > 0)) {
        throw_bad_input(at_line(line_number),
                        fmt::format("{} time {} us is not positive", which, *time_us));
      }
      if (time_s < kMinSampleSeconds) {
        throw_bad_input(at_line(line_number), fmt::format("{} time {} us is less than {} s", which,
                                                          *time_us, kMinSampleSeconds));
      }
      if (time_s > kMaxSampleSeconds) {
        throw_bad_input(at_line(line_number), fmt::format("{} time {} us is more than {} s", which,
                                                          *time_us, kMaxSampleSeconds));
      }
      const std::string& wrong = tokens[time_index + 3];
      if (header_error_columns) {
        const std::optional<double> deviation = parse_number(wrong);
        if (wrong != "N/A" && !(deviation && std::isfinite(*deviation) && *deviation >= 0)) {
          throw_bad_input(at_line(line_number),
                          fmt::format("{} error '{}' is not a number", which, wrong));
        }
      } else if (wrong != "0" && wrong != "N/A") {
        throw_bad_input(
            at_line(line_number),
            fmt::format("{} #wrong is {}: the collective returned wrong data", which, wrong),
            "fix the run; fsdptune does not import failed measurements");
      }
      samples_by_bytes[*size].push_back(time_s);
    }
    rows.push_back({line_number, *size, parse_integer(tokens[1]), tokens[2],
                    header_has_redop ? tokens[3] : std::string()});
    // The out-of-place algbw and busbw of the row that moves the most: their ratio tells the
    // ranks (checked below).
    const std::optional<double> algbw = parse_number(tokens[n - 7]);
    const std::optional<double> busbw = parse_number(tokens[n - 6]);
    if (algbw && busbw && std::isfinite(*algbw) && std::isfinite(*busbw) && *algbw > widest.algbw) {
      widest = {line_number, *algbw, *busbw};
    }
  }

  if (!header_seen) {
    throw_bad_input(source, "not an nccl-tests log: no '# nThread ... nGpus ...' header line");
  }
  if (ranks.empty()) {
    throw_bad_input(source, "no '#  Rank N Group G Pid P on HOST device D' lines",
                    "the rank count comes from them; import the log as nccl-tests printed it");
  }
  // Ranks are numbered from 0: a rank number at or past the count proves lines missing
  // (found by QA: a 16-rank log keeping ranks 7 and 15 imported as a 2-rank sweep).
  if (*ranks.rbegin() != static_cast<std::int64_t>(ranks.size()) - 1 || *ranks.begin() != 0) {
    // Numbered from 0 to count - 1 by nccl-tests: lines missing, or numbers edited (review:
    // 1 to 8 said "missing").
    throw_bad_input(source,
                    fmt::format("its '#  Rank' lines list {} numbered {} to {}, where a run's "
                                "are numbered 0 to {}: lines missing, or numbers edited",
                                counted(static_cast<std::int64_t>(ranks.size()), "rank"),
                                *ranks.begin(), *ranks.rbegin(), ranks.size() - 1),
                    "import the log as nccl-tests printed it, every rank's line included");
  }
  if (!footer_seen) {
    throw_bad_input(source, "truncated: no '# Avg bus bandwidth' line at the end",
                    "the run did not finish; re-run it or import a complete log");
  }
  if (samples_by_bytes.empty()) {
    throw_bad_input(source,
                    zero_rows > 0 ? fmt::format("no data rows but {} of 0 bytes, which "
                                                "move no data",
                                                zero_rows)
                                  : std::string("no data rows"),
                    zero_rows > 0 ? "run nccl-tests with a larger -b" : "");
  }
  // An older log's rows give deviations, not a count of wrong elements: whether the data
  // was right is its verdict line's to say (found by QA: without it, a large deviation
  // imported silently).
  if (header_error_columns && !verdict_seen) {
    throw_bad_input(source,
                    "an older nccl-tests log ('error' columns) without its '# Out of bounds "
                    "values : N OK' line: whether the collective returned the right data is "
                    "unknown",
                    "import the log as nccl-tests printed it");
  }
  const RowShape& first = rows.front();

  NcclTestsLog result;
  result.device = device;
  result.group.ranks = static_cast<std::int64_t>(ranks.size());
  std::int64_t most_on_one_host = 0;
  for (const auto& [host, count] : ranks_by_host) {
    most_on_one_host = std::max(most_on_one_host, count);
  }
  result.group.ranks_per_node = most_on_one_host;

  // Which collective: declared > named > columns; any two that disagree is an error.
  std::optional<CollectiveKind> from_columns;
  const int element = element_bytes(first.type);
  if (element > 0 && first.count && first.size % element == 0) {
    // count x element = size, or count x element x ranks = size, by division: the count
    // is the log's, its product need not fit in 64 bits.
    const std::int64_t size_elements = first.size / element;
    if (*first.count == size_elements) {
      from_columns = CollectiveKind::kAllReduce;
    } else if (size_elements % result.group.ranks == 0 &&
               *first.count == size_elements / result.group.ranks) {
      // A gather reduces nothing: redop "none", or no redop column at all.
      from_columns = first.redop == "none" || first.redop.empty() ? CollectiveKind::kAllGather
                                                                  : CollectiveKind::kReduceScatter;
    }
  }
  std::optional<CollectiveKind> kind;
  std::string kind_origin;
  for (const auto& [name, origin] :
       {std::pair{declared_test, std::string("its '# Collective test starting' line")},
        std::pair{base_name(source), std::string("its file name")}}) {
    if (name.empty()) continue;
    const NamedCollective named = collective_from_name(name);
    if (!named.unsupported.empty()) {
      throw_bad_input(
          source,
          fmt::format("unknown collective: {} names '{}' ({})", origin, named.unsupported, name),
          "fsdptune imports all_gather_perf, reduce_scatter_perf and "
          "all_reduce_perf logs");
    }
    if (!named.kind) continue;
    if (kind && *kind != *named.kind) {
      throw_bad_input(source, fmt::format("{} says {} but {} says {}", kind_origin,
                                          to_string(*kind), origin, to_string(*named.kind)));
    }
    if (!kind) {
      kind = named.kind;
      kind_origin = origin;
    }
  }
  if (kind && from_columns && *kind != *from_columns) {
    throw_bad_input(source, fmt::format("{} says {} but its size/count columns are those of {}",
                                        kind_origin, to_string(*kind), to_string(*from_columns)));
  }
  // Named, but the first row's count fits neither shape over the listed ranks: the rank
  // lines are not the run's (a tester's log of one "#  Rank" line over 8-rank columns
  // imported as a 1-rank sweep).
  if (kind && !from_columns && element > 0 && first.count && *first.count > 0 &&
      first.size % element == 0) {
    const std::int64_t size_elements = first.size / element;
    const std::string implied =
        *kind != CollectiveKind::kAllReduce && size_elements % *first.count == 0
            ? fmt::format(" (those of {} ranks)", size_elements / *first.count)
            : std::string();
    throw_bad_input(
        source,
        fmt::format("its first row's count {} of {} bytes is no {} over the {} its '#  Rank' "
                    "lines list{}",
                    *first.count, first.size, to_string(*kind), counted(result.group.ranks, "rank"),
                    implied),
        "import the log as nccl-tests printed it, every rank's line included");
  }
  if (!kind) kind = from_columns;
  if (!kind) {
    throw_bad_input(source, "unknown collective: cannot tell which nccl-tests binary wrote it",
                    "name the file after it, e.g. all_gather_perf.log");
  }
  result.kind = *kind;
  // nccl-tests' bus bandwidth is the algorithm bandwidth times 2 (n - 1) / n for an
  // all-reduce, (n - 1) / n for the others: a ratio that is not the listed ranks' says rank
  // lines are missing, which an all-reduce's count column cannot show (found by fuzzing: a
  // log keeping 2 of its 8 rank lines imported as a 2-rank sweep). Checked on the row of
  // the largest algbw (printed to 2 decimals), within 0.5%.
  if (widest.algbw >= 1 && result.group.ranks > 1) {
    const double n = static_cast<double>(result.group.ranks);
    const double factor = (result.kind == CollectiveKind::kAllReduce ? 2.0 : 1.0) * (n - 1) / n;
    const double ratio = widest.busbw / widest.algbw;
    if (std::abs(ratio - factor) > 0.005 * factor) {
      throw_bad_input(
          at_line(widest.line),
          fmt::format("busbw / algbw is {:.4f}, where {} over the {} its '#  Rank' "
                      "lines list gives {:.4f}: rank lines are missing",
                      ratio, to_string(result.kind), counted(result.group.ranks, "rank"), factor),
          "import the log as nccl-tests printed it, every rank's line included");
    }
  }
  // The first row decided the collective; every other row must be one of it, in the same
  // type (a row edited or pasted from another run was pooled with the rest).
  for (const RowShape& row : rows) {
    if (row.type != first.type) {
      throw_bad_input(at_line(row.line),
                      fmt::format("type '{}' where the first row's is '{}'", row.type, first.type),
                      "import one data type per log (nccl-tests -d with one type)");
    }
    if (element == 0 || !row.count) continue;
    const std::int64_t per_rank =
        result.kind == CollectiveKind::kAllReduce ? element : element * result.group.ranks;
    if (row.size % per_rank != 0 || *row.count != row.size / per_rank) {
      throw_bad_input(
          at_line(row.line),
          fmt::format("count {} of {} bytes is no {} over {} (the first row's is)", *row.count,
                      row.size, to_string(result.kind), counted(result.group.ranks, "rank")),
          "import the log as nccl-tests printed it");
    }
  }
  for (auto& [bytes, samples] : samples_by_bytes) {
    result.points.push_back({bytes, std::move(samples)});
  }
  return result;
}

Profile import_nccl_tests(const std::vector<TextSource>& logs,
                          const NcclTestsImportOptions& options) {
  if (logs.empty()) throw_bad_input("import-nccl-tests", "no logs given");
  std::vector<NcclTestsLog> parsed;
  parsed.reserve(logs.size());
  for (const TextSource& log : logs) parsed.push_back(parse_nccl_tests_log(log));

  const std::string& device = parsed.front().device;
  for (std::size_t i = 1; i < parsed.size(); ++i) {
    if (parsed[i].device != device) {
      throw_bad_input(logs[i].name,
                      fmt::format("measured on '{}' but {} on '{}'", parsed[i].device,
                                  logs.front().name, device),
                      "import logs of one kind of GPU into one profile");
    }
  }

  Profile profile;
  profile.hardware =
      options.hardware.empty() ? hardware_id_from_device_name(device) : options.hardware;
  if (profile.hardware.empty()) {
    throw_bad_input(logs.front().name,
                    fmt::format("cannot tell the hardware from the device name '{}'", device),
                    "pass --hardware with the id of the GPU the logs were measured on");
  }
  std::map<std::tuple<CollectiveKind, std::int64_t, std::int64_t>, std::size_t> sweep_index;
  for (const NcclTestsLog& log : parsed) {
    const auto key = std::tuple{log.kind, log.group.ranks, log.group.ranks_per_node};
    auto [it, inserted] = sweep_index.try_emplace(key, profile.collectives.size());
    if (inserted) profile.collectives.push_back({log.kind, log.group, {}});
    CollectiveSweep& sweep = profile.collectives[it->second];
    for (const CollectivePoint& point : log.points) {
      auto existing =
          std::find_if(sweep.points.begin(), sweep.points.end(),
                       [&](const CollectivePoint& p) { return p.bytes == point.bytes; });
      if (existing == sweep.points.end()) {
        sweep.points.push_back(point);
      } else {
        existing->samples_s.insert(existing->samples_s.end(), point.samples_s.begin(),
                                   point.samples_s.end());
      }
    }
    std::sort(sweep.points.begin(), sweep.points.end(),
              [](const CollectivePoint& a, const CollectivePoint& b) { return a.bytes < b.bytes; });
  }
  profile.provenance.method = "nccl-tests import";
  profile.provenance.environment["gpu"] = device;
  return profile;
}

}  // namespace fsdptune
