#include "fsdptune/units.hpp"

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
    {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
    {"KB", 1e3},     {"MB", 1e6},        {"GB", 1e9},           {"TB", 1e12},
    {"B", 1.0},
};

// The whole of `digits` as a finite number, or nullopt.
std::optional<double> parse_number(const std::string& digits) {
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
  if (bytes < 1.0) {
    throw_bad_input(std::string(what), fmt::format("size '{}' must be positive", original));
  }
  if (bytes > 9.0e18) {
    throw_bad_input(std::string(what), fmt::format("size '{}' is too large", original));
  }
  return static_cast<std::int64_t>(std::llround(bytes));
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

std::string format_bytes(std::int64_t bytes) {
  const double magnitude = std::fabs(static_cast<double>(bytes));
  if (magnitude < 1024.0) return fmt::format("{} B", bytes);
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes) / 1024.0;
  int unit = 0;
  while (std::fabs(value) >= 1024.0 && unit < 3) {
    value /= 1024.0;
    ++unit;
  }
  const int decimals = std::fabs(value) >= 100 ? 0 : (std::fabs(value) >= 10 ? 1 : 2);
  return fmt::format("{:.{}f} {}", value, decimals, units[unit]);
}

std::string format_seconds(double seconds) {
  const double magnitude = std::fabs(seconds);
  if (magnitude >= 1.0) return fmt::format("{:.3f} s", seconds);
  if (magnitude >= 1e-3) return fmt::format("{:.2f} ms", seconds * 1e3);
  return fmt::format("{:.1f} us", seconds * 1e6);
}

}  // namespace fsdptune
