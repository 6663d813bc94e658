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
