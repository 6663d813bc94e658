#include "fsdptune/units.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "fsdptune/error.hpp"

namespace fsdptune {
namespace {

struct Suffix {
  std::string_view text;
  double multiplier;
};

// Longest suffixes first so "GiB" is not read as "B".
constexpr Suffix kSuffixes[] = {
    {"KiB", 1024.0},
    {"MiB", 1048576.0},
    {"GiB", 1073741824.0},
    {"TiB", 1099511627776.0},
    {"PiB", 1125899906842624.0},
    {"EiB", 1152921504606846976.0},
    {"KB", 1e3},
    {"MB", 1e6},
    {"GB", 1e9},
    {"TB", 1e12},
    {"PB", 1e15},
    {"EB", 1e18},
    {"B", 1.0},
};

// The whole of `digits` as a finite number, or nullopt.
std::optional<double> parse_number(const std::string& digits) {
  // Decimal notation only: std::stod also reads hexadecimal ("0x10", "0x1p4").
  if (digits.find_first_not_of("0123456789.eE+-") != std::string::npos) return std::nullopt;
  std::size_t consumed = 0;
  double value = 0;
  try {
    value = std::stod(digits, &consumed);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (digits.empty() || consumed != digits.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

}  // namespace

std::int64_t parse_size_bytes(std::string_view text, std::string_view what) {
  const std::string original(text);
  std::string_view number = text;
  double multiplier = 1.0;
  for (const Suffix& suffix : kSuffixes) {
    if (number.size() > suffix.text.size() && number.ends_with(suffix.text)) {
      number.remove_suffix(suffix.text.size());
      multiplier = suffix.multiplier;
      break;
    }
  }
  while (!number.empty() && std::isspace(static_cast<unsigned char>(number.back()))) {
    number.remove_suffix(1);
  }
  const std::optional<double> value = parse_number(std::string(number));
  if (!value) {
    throw_bad_input(std::string(what), fmt::format("'{}' is not a size", original),
                    "write a number of bytes with an optional unit: 4096, 64MiB, 1GiB, 80GB, 2e9");
  }
  const double bytes = *value * multiplier;
  if (bytes <= 0) {
    throw_bad_input(std::string(what), fmt::format("size '{}' must be positive", original));
  }
  if (bytes > 9.0e18) {
    // Its bound said (found by QA: "too large" alone, where 1EiB named the limit).
    throw_bad_input(std::string(what),
                    fmt::format("size '{}' is too large (at most 9e18 bytes, 7.8 EiB)", original));
  }
  // A plain number is whole bytes ("1.5" was rounded to 2 B, "0.5" called not positive),
  // with the slack of a decimal fraction's rounding; a number of a unit is rounded to the
  // nearest byte (found by QA: 19.4GiB was taken, rounded, and 46.3MiB refused).
  const double whole = std::round(bytes);
  if (whole < 1 || (multiplier == 1.0 && std::fabs(bytes - whole) > 1e-9 * std::max(1.0, bytes))) {
    throw_bad_input(std::string(what),
                    fmt::format("size '{}' is not a whole number of bytes", original));
  }
  return static_cast<std::int64_t>(whole);
}

double parse_fraction(std::string_view text, std::string_view what) {
  const std::string original(text);
  std::string_view number = text;
  const bool percent = number.ends_with('%');
  if (percent) number.remove_suffix(1);
  std::optional<double> value = parse_number(std::string(number));
  if (value && percent) *value /= 100.0;
  if (!value || *value < 0 || *value >= 1) {
    throw_bad_input(std::string(what), fmt::format("'{}' is not a fraction in [0, 1)", original),
                    "write a fraction or a percentage: 0.001, 0.1%, 0");
  }
  return *value;
}

namespace {

// `value` as printed with `decimals` decimals (what the unit's choice must look at: 1023.96
// MiB prints as "1024 MiB", which is 1.00 GiB).
double printed(double value, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return std::round(value * scale) / scale;
}

}  // namespace

std::string format_bytes(std::int64_t bytes) {
  const double magnitude = std::fabs(static_cast<double>(bytes));
  if (magnitude < 1024.0) return fmt::format("{} B", bytes);
  const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  const auto decimals_of = [](double v) {
    return std::fabs(v) >= 100 ? 0 : (std::fabs(v) >= 10 ? 1 : 2);
  };
  double value = static_cast<double>(bytes) / 1024.0;
  int unit = 0;
  while (std::fabs(printed(value, decimals_of(value))) >= 1024.0 && unit < 5) {
    value /= 1024.0;
    ++unit;
  }
  return fmt::format("{:.{}f} {}", value, decimals_of(value), units[unit]);
}

std::string counted(std::int64_t count, std::string_view noun, std::string_view plural) {
  if (count == 1) return fmt::format("1 {}", noun);
  if (plural.empty()) return fmt::format("{} {}s", count, noun);
  return fmt::format("{} {}", count, plural);
}

std::string nearest_multiples(std::int64_t value, std::int64_t step) {
  const std::int64_t below = value / step * step;
  if (below <= 0) return std::to_string(step);
  if (below == value) return std::to_string(value);
  return fmt::format("{} or {}", below, below + step);
}

std::size_t edit_distance(const std::string& a, const std::string& b, std::size_t limit) {
  if ((a.size() > b.size() ? a.size() - b.size() : b.size() - a.size()) > limit) return limit + 1;
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    std::size_t best = row[0];
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
      best = std::min(best, row[j]);
    }
    if (best > limit) return limit + 1;
  }
  return row[b.size()];
}

std::string join_alternatives(const std::vector<std::string>& items, std::string_view last) {
  std::string text;
  for (std::size_t k = 0; k < items.size(); ++k) {
    if (k > 0) text += k + 1 == items.size() ? std::string(last) : std::string(", ");
    text += items[k];
  }
  return text;
}

std::string shell_word(const std::string& word) {
  const bool plain = !word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 ||
           std::string_view("_-.,/:=+@%").find(c) != std::string_view::npos;
  });
  if (plain) return word;
  std::string quoted = "'";
  for (const char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

std::string format_change(double value, double base, std::string_view what) {
  const double percent = 100.0 * (value / base - 1.0);
  if (std::abs(percent) < 0.005) return fmt::format("the same {}", what);
  return fmt::format("{:+.2f}% {}", percent, what);
}

std::string format_seconds(double seconds) {
  // Each unit as long as its printed value stays below the next one's (999.96 us printed
  // "1000.0 us").
  if (std::fabs(printed(seconds * 1e6, 1)) < 1000.0) return fmt::format("{:.1f} us", seconds * 1e6);
  if (std::fabs(printed(seconds * 1e3, 2)) < 1000.0) return fmt::format("{:.2f} ms", seconds * 1e3);
  return fmt::format("{:.3f} s", seconds);
}

namespace {

// `--gemm 1,1,1` printed "0.0 GFLOP/s", a tiny collective "0.0 MB/s", a CPU's GEMM in
// `profile compare` "0.0 TFLOP/s": the prefix follows the rate.
std::string format_rate(double per_s, const char* unit) {
  constexpr std::pair<double, const char*> kPrefixes[] = {{1e12, "T"}, {1e9, "G"}, {1e6, "M"}};
  for (const auto& [scale, prefix] : kPrefixes) {
    // What rounds to 1000.0 of the unit below is 1.0 of this one.
    if (per_s >= scale * 0.99995) return fmt::format("{:.1f} {}{}/s", per_s / scale, prefix, unit);
  }
  return fmt::format("{:.1f} k{}/s", per_s / 1e3, unit);
}

}  // namespace

std::string format_flops_per_s(double flops_per_s) { return format_rate(flops_per_s, "FLOP"); }
std::string format_bytes_per_s(double bytes_per_s) { return format_rate(bytes_per_s, "B"); }

std::size_t utf8_sequence_length(const std::string& text, std::size_t at) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(at);
  if (lead < 0x80) return 1;
  // Length and the range of the first continuation byte (RFC 3629's table).
  std::size_t length = 0;
  unsigned char low = 0x80, high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;   // overlong
    if (lead == 0xED) high = 0x9F;  // surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;   // overlong
    if (lead == 0xF4) high = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  if (at + length > text.size() || byte(at + 1) < low || byte(at + 1) > high) return 0;
  for (std::size_t k = 2; k < length; ++k) {
    if (byte(at + k) < 0x80 || byte(at + k) > 0xBF) return 0;
  }
  return length;
}

std::string valid_utf8(const std::string& text) {
  static constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t length = utf8_sequence_length(text, i);
    // U+FFFE and U+FFFF (EF BF BE, EF BF BF) are no XML characters either.
    const bool noncharacter = length == 3 && static_cast<unsigned char>(text[i]) == 0xEF &&
                              static_cast<unsigned char>(text[i + 1]) == 0xBF &&
                              static_cast<unsigned char>(text[i + 2]) >= 0xBE;
    if (length == 0 || noncharacter) {
      out += kReplacement;
      i += noncharacter ? 3 : 1;
      continue;
    }
    out.append(text, i, length);
    i += length;
  }
  return out;
}

bool has_control_character(const std::string& text) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte < 0x20 || byte == 0x7F) return true;
    // U+0080..U+009F (C1 controls, NEL among them: C2 80..9F) and the line and paragraph
    // separators U+2028, U+2029 (E2 80 A8, A9): line breaks too (review).
    const auto next = [&](std::size_t k) {
      return i + k < text.size() ? static_cast<unsigned char>(text[i + k]) : 0;
    };
    if (byte == 0xC2 && next(1) >= 0x80 && next(1) <= 0x9F) return true;
    if (byte == 0xE2 && next(1) == 0x80 && (next(2) == 0xA8 || next(2) == 0xA9)) return true;
  }
  return false;
}

}  // namespace fsdptune
