#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "fsdptune/error.hpp"
#include "fsdptune/io.hpp"

using namespace fsdptune;

TEST_CASE("parse_json_text reports line and column of a syntax error", "[io]") {
  // The error is on line 3, where "b" lacks its value.
  const std::string text = "{\n  \"a\": 1,\n  \"b\": ,\n}\n";
  try {
    parse_json_text(text, "model.json");
    FAIL("accepted malformed JSON");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kBadInput);
    CHECK(e.where().rfind("model.json:3:", 0) == 0);
  }
}

// Fuzzing found: nlohmann throws out_of_range, not parse_error, for a number beyond a
// double's range, which escaped as a raw exception (exit 1, no file named).
TEST_CASE("parse_json_text reports a number out of a double's range at its place", "[io]") {
  // "1e400" is columns 8 to 12 of line 2; the position is its last character, as for a
  // syntax error.
  const std::string text = "{\n  \"a\": 1e400\n}\n";
  try {
    parse_json_text(text, "model.json");
    FAIL("accepted 1e400");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kBadInput);
    CHECK(e.where() == "model.json:2:12");
    CHECK_THAT(e.message(), Catch::Contains("number overflow parsing '1e400'"));
  }
}

// Fuzzing found: a file nested a few hundred thousand levels deep parsed, then overflowed
// the stack (a segfault of the CLI) where an error message dumped the value.
TEST_CASE("parse_json_text rejects JSON nested deeper than any format", "[io]") {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  try {
    parse_json_text("{\"dim\": " + deep + "}", "model.json");
    FAIL("accepted 100000 levels");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kBadInput);
    CHECK(e.where() == "model.json");
    CHECK_THAT(e.message(), Catch::Contains("nested deeper than"));
  }
  // A schedule's 7 levels and more are fine.
  CHECK(parse_json_text(std::string(64, '[') + std::string(64, ']'), "x").is_array());
}

TEST_CASE("write_file_atomically replaces the file and leaves no temporary", "[io]") {
  const auto dir = std::filesystem::temp_directory_path() / "fsdptune-io-test";
  std::filesystem::remove_all(dir);
  const std::string path = (dir / "sub" / "out.json").string();
  write_file_atomically(path, "first\n");
  write_file_atomically(path, "second\n");
  CHECK(read_text_file(path) == "second\n");
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("read_text_file names a missing file", "[io]") {
  try {
    read_text_file("/nonexistent/fsdptune.json");
    FAIL("read a missing file");
  } catch (const Error& e) {
    CHECK(e.where() == "/nonexistent/fsdptune.json");
    CHECK(e.exit_code() == 2);
  }
}
