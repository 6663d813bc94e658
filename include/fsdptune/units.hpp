// Sizes and times as they travel through fsdptune (STYLE.md rule 4): sizes are
// std::int64_t counts of bytes in variables named `*_bytes`, times are double seconds in
// variables named `*_s` (or `*_us` where microseconds are meant). Binary prefixes are
// written KiB/MiB/GiB (powers of 1024), decimal ones KB/MB/GB (powers of 1000).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fsdptune {

inline constexpr std::int64_t kKiB = 1024;
inline constexpr std::int64_t kMiB = 1024 * kKiB;
inline constexpr std::int64_t kGiB = 1024 * kMiB;

// Parses "64MiB", "1GiB", "80GB", "512KiB", "2e9", "4096" (plain numbers are bytes).
// Throws Error(kBadInput) naming `what` (e.g. "--bytes") on malformed, negative or zero
// input.
std::int64_t parse_size_bytes(std::string_view text, std::string_view what);

// Parses a fraction in [0, 1): "0.001" or a percentage "0.1%". Throws Error(kBadInput)
// naming `what` (e.g. "--step-tolerance") on malformed, negative or >= 1 input.
double parse_fraction(std::string_view text, std::string_view what);

// "1.50 GiB", "64.0 MiB", "512 B": binary units, three significant figures.
std::string format_bytes(std::int64_t bytes);

// "1.234 s", "12.3 ms", "45.6 us".
std::string format_seconds(double seconds);

// `value` against `base` as a signed percentage of `what` to two decimals, "-0.30% step
// time", or "the same step time" where it rounds to no change (never "-0.00%").
// REQUIRES: base > 0.
std::string format_change(double value, double base, std::string_view what);

// A rate with the largest decimal prefix that keeps it at least 1 (kilo at the least):
// "989.4 TFLOP/s", "2.1 GFLOP/s", "450.0 GB/s", "3.2 kB/s".
std::string format_flops_per_s(double flops_per_s);
// `count` with its noun: "1 rank", "3 ranks", and `plural` for a noun that takes more
// than an s ("2 microbatches"). Every count fsdptune prints goes through it, so none reads
// "1 ranks" or "rank(s)".
std::string counted(std::int64_t count, std::string_view noun, std::string_view plural = {});
// The multiples of `step` nearest `value` for a hint: "16 or 24" (value 20, step 8), "8"
// below the first. REQUIRES: step > 0.
std::string nearest_multiples(std::int64_t value, std::int64_t step);
// `items` as a list of alternatives: "a, b or c" with `last` " or ", "a, b, or c" with
// ", or" (hints' ways out). Empty for none.
std::string join_alternatives(const std::vector<std::string>& items, std::string_view last);
// `word` as one word of a POSIX shell command line: as it is when it holds only
// characters no shell treats specially (letters, digits, `_-.,/:=+@%`), else in single
// quotes (a quote as '\''). What a recorded command (provenance.command) needs to run
// again: a path with a space was recorded as two words.
std::string shell_word(const std::string& word);
// Levenshtein distance between `a` and `b`, stopping early above `limit` (then limit + 1):
// what the "did you mean" hints for names and flags measure.
std::size_t edit_distance(const std::string& a, const std::string& b, std::size_t limit);
std::string format_bytes_per_s(double bytes_per_s);

// The length of the well-formed UTF-8 sequence starting at text[at] (1 for ASCII), or 0
// where it is not one (a stray continuation byte, an overlong form, a surrogate, a code
// point above U+10FFFF, a sequence cut short). REQUIRES: at < text.size().
std::size_t utf8_sequence_length(const std::string& text, std::size_t at);

// `text` as valid UTF-8 that XML 1.0 can hold: each byte of a malformed sequence (a file
// name in another encoding), each overlong form, surrogate or code point above U+10FFFF,
// and U+FFFE / U+FFFF, replaced by U+FFFD; everything else unchanged.
std::string valid_utf8(const std::string& text);

// Whether `text` holds a control character (below 0x20, DEL, UTF-8's C1 controls U+0080 to
// U+009F) or a Unicode line or paragraph separator: a name that is no one line of text (a
// newline or NUL split or cut the reports' headings).
bool has_control_character(const std::string& text);

// ceil(a / b) for a >= 0, b > 0, without a + b overflowing.
constexpr std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return a / b + (a % b != 0 ? 1 : 0);
}

// Rounds `value` up to a multiple of `multiple` (multiple > 0).
constexpr std::int64_t round_up(std::int64_t value, std::int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

}  // namespace fsdptune
