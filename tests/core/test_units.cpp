#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>

#include "fsdptune/error.hpp"
#include "fsdptune/intervals.hpp"
#include "fsdptune/units.hpp"

using namespace fsdptune;

TEST_CASE("parse_size_bytes reads binary, decimal and plain sizes", "[units]") {
  CHECK(parse_size_bytes("4096", "--bytes") == 4096);
  CHECK(parse_size_bytes("64MiB", "--bytes") == 64 * kMiB);
  CHECK(parse_size_bytes("1GiB", "--bytes") == kGiB);
  CHECK(parse_size_bytes("80GB", "--bytes") == 80'000'000'000);
  CHECK(parse_size_bytes("2e9", "--bytes") == 2'000'000'000);
  CHECK(parse_size_bytes("1.5KiB", "--bytes") == 1536);
  CHECK(parse_size_bytes("1.1GB", "--bytes") == 1'100'000'000);
  CHECK(parse_size_bytes("0.5KiB", "--bytes") == 512);
  // A fraction of a unit is rounded to the nearest byte, whatever the size (found by QA:
  // 19.4GiB was taken and 46.3MiB refused).
  CHECK(parse_size_bytes("46.3MiB", "--bytes") == 48549069);  // 48549068.8
  CHECK(parse_size_bytes("100.1KiB", "--bytes") == 102502);   // 102502.4
  CHECK(parse_size_bytes("19.4GiB", "--bytes") == 20830591386);
  CHECK(parse_size_bytes("2PiB", "--bytes") == 2048 * 1024 * kGiB);
  CHECK(parse_size_bytes("3EB", "--bytes") == 3'000'000'000'000'000'000);
}

TEST_CASE("format_change says no change rather than -0.00%", "[units]") {
  CHECK(format_change(0.997, 1.0, "step time") == "-0.30% step time");
  CHECK(format_change(1.5, 1.0, "step time") == "+50.00% step time");
  // Found by QA: "1.00x faster (-0.00% step time)".
  CHECK(format_change(0.99999, 1.0, "step time") == "the same step time");
  CHECK(format_change(1.0, 1.0, "step time") == "the same step time");
}

TEST_CASE("parse_size_bytes names a size past int64 as too large, not as junk", "[units]") {
  // "8EiB" read as "not a size" while the units stopped at TiB.
  for (const char* big : {"8EiB", "9.5EB", "9300PB", "1e19"}) {
    try {
      parse_size_bytes(big, "--bytes");
      FAIL("accepted '" << big << "'");
    } catch (const Error& e) {
      CHECK(e.where() == "--bytes");
      CHECK_THAT(e.what(), Catch::Matchers::Contains("too large (at most 9e18 bytes, 7.8 EiB)"));
    }
  }
}

TEST_CASE("parse_size_bytes rejects junk, zero and negatives naming the flag", "[units]") {
  // Fractions of a byte were rounded ("1.5" read as 2 B); hexadecimal was read by stod.
  for (const char* bad : {"", "abc", "12XB", "-5", "0", "MiB", "1e400", "1.5", "0.5", "2.5e0",
                          "0x10", "0x1p4", "0.0001KiB"}) {
    try {
      parse_size_bytes(bad, "--memory-limit");
      FAIL("accepted '" << bad << "'");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kBadInput);
      CHECK(e.where() == "--memory-limit");
      CHECK(e.exit_code() == 2);
    }
  }
}

TEST_CASE("parse_fraction reads fractions and percentages from 0 up to 1", "[units]") {
  CHECK(parse_fraction("0.001", "--step-tolerance") == 0.001);
  CHECK(parse_fraction("0.1%", "--step-tolerance") == Approx(0.001));
  CHECK(parse_fraction("0", "--step-tolerance") == 0.0);
  CHECK(parse_fraction("2.5%", "--step-tolerance") == Approx(0.025));
  for (const char* bad : {"", "%", "abc", "-0.1", "1", "100%", "0.1%%", "nan", "1e400"}) {
    try {
      parse_fraction(bad, "--step-tolerance");
      FAIL("accepted '" << bad << "'");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kBadInput);
      CHECK(e.where() == "--step-tolerance");
    }
  }
}

TEST_CASE("format_bytes and format_seconds pick readable units", "[units]") {
  CHECK(format_bytes(512) == "512 B");
  CHECK(format_bytes(64 * kMiB) == "64.0 MiB");
  CHECK(format_bytes(kGiB + kGiB / 2) == "1.50 GiB");
  CHECK(format_seconds(1.5) == "1.500 s");
  CHECK(format_seconds(0.0123) == "12.30 ms");
  CHECK(format_seconds(45.6e-6) == "45.6 us");
  // The unit is chosen after rounding (found probing the report: "1000.0 us", "1024 MiB").
  CHECK(format_seconds(0.0009999999) == "1.00 ms");
  CHECK(format_seconds(0.99999999) == "1.000 s");
  CHECK(format_seconds(999.94e-6) == "999.9 us");
  CHECK(format_bytes(1073740799) == "1.00 GiB");
  CHECK(format_bytes(1023 * kMiB) == "1023 MiB");
  CHECK(format_bytes(1048575) == "1.00 MiB");
  CHECK(format_bytes(4096 * 1024 * kGiB) == "4.00 PiB");
  CHECK(format_bytes(std::numeric_limits<std::int64_t>::max()) == "8.00 EiB");
}

TEST_CASE("ceil_div rounds up without overflowing near the int64 limit", "[units]") {
  CHECK(ceil_div(0, 7) == 0);
  CHECK(ceil_div(1, 7) == 1);
  CHECK(ceil_div(14, 7) == 2);
  CHECK(ceil_div(15, 7) == 3);
  const std::int64_t big = std::numeric_limits<std::int64_t>::max();
  CHECK(ceil_div(big, 2) == big / 2 + 1);  // (a + b - 1) / b would overflow
  CHECK(ceil_div(big, big) == 1);
  static_assert(ceil_div(82, 6) == 14);
}

TEST_CASE("join_alternatives lists hints' ways out", "[units]") {
  CHECK(fsdptune::join_alternatives({}, " or ").empty());
  CHECK(fsdptune::join_alternatives({"a"}, " or ") == "a");
  CHECK(fsdptune::join_alternatives({"1", "2"}, " or ") == "1 or 2");
  CHECK(fsdptune::join_alternatives({"1", "2", "4"}, " or ") == "1, 2 or 4");
  CHECK(fsdptune::join_alternatives({"a", "b", "c"}, ", or ") == "a, b, or c");
}

// Found by QA: a path with a space was recorded in provenance.command as two words.
TEST_CASE("counted puts a count with its noun in the singular or plural", "[units]") {
  CHECK(counted(1, "rank") == "1 rank");
  CHECK(counted(0, "rank") == "0 ranks");
  CHECK(counted(8, "rank") == "8 ranks");
  CHECK(counted(1, "microbatch", "microbatches") == "1 microbatch");
  CHECK(counted(4, "microbatch", "microbatches") == "4 microbatches");
  CHECK(counted(-1, "step") == "-1 steps");
}

TEST_CASE("shell_word quotes only what a shell would split or expand", "[units]") {
  CHECK(fsdptune::shell_word("models/llama3-8b.json") == "models/llama3-8b.json");
  CHECK(fsdptune::shell_word("76GiB") == "76GiB");
  CHECK(fsdptune::shell_word("0.1%") == "0.1%");
  CHECK(fsdptune::shell_word("/tmp/m dir/m.json") == "'/tmp/m dir/m.json'");
  CHECK(fsdptune::shell_word("it's") == "'it'\\''s'");
  CHECK(fsdptune::shell_word("$HOME") == "'$HOME'");
  CHECK(fsdptune::shell_word("") == "''");
}

TEST_CASE("nearest_multiples offers the multiples around a value", "[units]") {
  CHECK(nearest_multiples(20, 8) == "16 or 24");
  CHECK(nearest_multiples(6, 4) == "4 or 8");
  CHECK(nearest_multiples(3, 8) == "8");
  CHECK(nearest_multiples(16, 8) == "16");
}

// The replay's exposed communication and a Kineto op's busy time (found by mutation
// testing, 2026-12-07: advancing the list that ends later missed overlaps, and no test saw
// it; CPU timings are too noisy for the CLI's to).
TEST_CASE("interval unions and overlaps", "[units]") {
  const std::vector<TimeInterval> compute =
      merge_intervals({{2.0, 3.0}, {0.0, 1.0}, {0.5, 0.75}, {3.0, 3.5}});
  CHECK(compute == std::vector<TimeInterval>{{0.0, 1.0}, {2.0, 3.5}});  // touching joined
  CHECK(total_length(compute) == 2.5);
  // Communication [0.5, 2.5] beside compute [0, 1] and [2, 3.5]: 1.0 of it overlapped.
  const std::vector<TimeInterval> comm = {{0.5, 2.5}};
  CHECK(overlap_length(comm, compute) == 1.0);
  CHECK(overlap_length(compute, comm) == 1.0);
  CHECK(total_length(comm) - overlap_length(comm, compute) == 1.0);  // exposed
  CHECK(overlap_length({{0.0, 4.0}}, compute) == 2.5);               // all of it
  CHECK(overlap_length({{1.0, 2.0}}, compute) == 0.0);               // between, touching
  CHECK(overlap_length({}, compute) == 0.0);
  CHECK(merge_intervals({}).empty());
}
