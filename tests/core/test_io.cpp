#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include "fsdptune/error.hpp"
#include "fsdptune/io.hpp"

using namespace fsdptune;

namespace {

// A name of this process's own (two test runs on one machine must not share a folder).
std::string unique(const std::string& name) { return fmt::format("{}-{}", name, ::getpid()); }

}  // namespace

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
    // Well-formed JSON: not "malformed" (carried QA note).
    CHECK_THAT(e.message(), Catch::StartsWith("a number out of range"));
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
    CHECK_THAT(e.message(), !Catch::Contains("malformed"));  // maybe well-formed (review)
  }
  // A schedule's 7 levels and more are fine.
  CHECK(parse_json_text(std::string(64, '[') + std::string(64, ']'), "x").is_array());
}

// nlohmann keeps the last of two equal keys: a hand-edited file's first "tp" was dropped
// without a word.
TEST_CASE("parse_json_text refuses a key given twice and names it by its path", "[io]") {
  const auto duplicate_path = [](const std::string& text) {
    try {
      parse_json_text(text, "job.json");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kBadInput);
      CHECK(e.message() == "given twice");
      return e.where();
    }
    FAIL("accepted a duplicate key in " << text);
    return std::string();
  };
  CHECK(duplicate_path(R"({"tp": 8, "tp": 4})") == "job.json: field 'tp'");
  CHECK(duplicate_path(R"({"job": {"dp": 2, "tp": 8, "tp": 8}})") == "job.json: field 'job.tp'");
  CHECK(duplicate_path(R"({"a": [1, {"b": 2}, {"c": {"d": 1, "d": 2}}]})") ==
        "job.json: field 'a[2].c.d'");
  CHECK(duplicate_path(R"([[], {"x": [0, 0], "x": 1}])") == "job.json: field '[1].x'");
  // The same key in sibling and nested objects is no duplicate.
  const auto json = parse_json_text(R"({"a": {"a": 1}, "b": [{"a": 2}, {"a": 3}]})", "x");
  CHECK(json["b"][1]["a"] == 3);
}

TEST_CASE("write_file_atomically replaces the file and leaves no temporary", "[io]") {
  const auto dir = std::filesystem::temp_directory_path() / unique("fsdptune-io-test");
  std::filesystem::remove_all(dir);
  const std::string path = (dir / "sub" / "out.json").string();
  write_file_atomically(path, "first\n");
  write_file_atomically(path, "second\n");
  CHECK(read_text_file(path) == "second\n");
  // No temporary left beside it (out.json.tmp.<pid>).
  CHECK(std::distance(std::filesystem::directory_iterator(dir / "sub"),
                      std::filesystem::directory_iterator()) == 1);
  std::filesystem::remove_all(dir);
}

// Found by QA: a 0600 file came back 0644 (world-readable), and names of 246 to 255 bytes
// could not be written (the temporary's suffix took them past the 255 a name may have).
TEST_CASE("write_file_atomically keeps the file's permissions and takes any name length", "[io]") {
  const auto dir = std::filesystem::temp_directory_path() / unique("fsdptune-io-mode");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "private.json").string();
  // A mode no umask makes of a new file's 0666 (review: 0600 is what umask 077 gives).
  const mode_t umask_before = ::umask(022);
  write_file_atomically(path, "first\n");
  REQUIRE(::chmod(path.c_str(), 0640) == 0);
  write_file_atomically(path, "second\n");
  ::umask(umask_before);
  struct stat status {};
  REQUIRE(::stat(path.c_str(), &status) == 0);
  CHECK((status.st_mode & 07777) == 0640);
  CHECK(read_text_file(path) == "second\n");
  for (const std::size_t length : {245, 250, 255}) {
    const std::string name = (dir / std::string(length, 'e')).string();
    write_file_atomically(name, "x\n");
    CHECK(read_text_file(name) == "x\n");
  }
  // What no file system takes, as the file's name or a folder's to be made: refused before
  // anything is written, as bad input.
  for (const std::string& too_long : {(dir / std::string(256, 'e')).string(),
                                      (dir / std::string(256, 'd') / "x.json").string()}) {
    try {
      require_distinct_files({{"--out", too_long}});
      FAIL("a 256-byte name was taken");
    } catch (const Error& error) {
      CHECK(error.kind() == ErrorKind::kBadInput);
      CHECK_THAT(error.message(), Catch::Contains("a name of 256 bytes in the path"));
    }
  }
  // So is a path longer than the system takes, each name short (found by QA: refused only
  // when written, after the run).
  std::filesystem::path deep = dir;
  for (int i = 0; i < 22; ++i) deep /= std::string(200, 'c');
  try {
    require_distinct_files({{"--out", (deep / "s.json").string()}});
    FAIL("a path of more than 4096 bytes was taken");
  } catch (const Error& error) {
    CHECK(error.kind() == ErrorKind::kBadInput);
    CHECK_THAT(error.message(), Catch::Contains("bytes with its temporary's suffix, where the "
                                                "system takes fewer than 4096"));
  }
  // A relative path is measured as it is opened, not in its absolute form (review: refused
  // in a deep folder): 20 folders of 200 bytes, then a 200-byte name with its suffix.
  std::filesystem::path nested = dir;
  for (int i = 0; i < 20; ++i) nested /= std::string(200, 'c');
  std::filesystem::create_directories(nested);
  const std::filesystem::path before = std::filesystem::current_path();
  std::filesystem::current_path(nested);
  const std::string relative = std::string(200, 'n') + ".json";
  CHECK(nested.string().size() + relative.size() > 4096);
  CHECK_NOTHROW(require_distinct_files({{"--out", relative}}));
  CHECK_NOTHROW(write_file_atomically(relative, "x\n"));
  std::filesystem::current_path(before);
  std::filesystem::remove_all(dir / std::string(200, 'c'));
  // Nothing but the outputs: no temporary left.
  CHECK(std::distance(std::filesystem::directory_iterator(dir),
                      std::filesystem::directory_iterator()) == 4);
  std::filesystem::remove_all(dir);
}

// Found by QA: the temporary was opened with truncation, so a link left at its name
// (out.json.tmp.<pid>) was written through.
TEST_CASE("write_file_atomically makes its temporary afresh, never through a link", "[io]") {
  const auto dir = std::filesystem::temp_directory_path() / unique("fsdptune-io-excl");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string victim = (dir / "victim").string();
  write_file_atomically(victim, "keep\n");
  const std::string path = (dir / "out.json").string();
  std::filesystem::create_symlink(victim, path + ".tmp." + std::to_string(::getpid()));
  write_file_atomically(path, "new\n");
  CHECK(read_text_file(path) == "new\n");
  CHECK(read_text_file(victim) == "keep\n");
  CHECK(std::filesystem::is_symlink(path + ".tmp." + std::to_string(::getpid())));
  std::filesystem::remove_all(dir);
}

TEST_CASE("write_files_atomically writes all of a command's outputs or none", "[io]") {
  // Found probing: tune --out o.json --trace FILE/x.json wrote o.json, then failed.
  const auto dir = std::filesystem::temp_directory_path() / unique("fsdptune-io-all");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string first = (dir / "first.json").string();
  const std::string blocker = (dir / "afile").string();
  write_file_atomically(first, "old\n");
  write_file_atomically(blocker, "a file, not a folder\n");
  try {
    write_files_atomically({{first, "new\n"}, {blocker + "/x.json", "x\n"}});
    FAIL("wrote under a file");
  } catch (const Error& e) {
    CHECK(e.where() == blocker + "/x.json");
  }
  CHECK(read_text_file(first) == "old\n");  // untouched
  // No temporary left: first.json and afile only.
  CHECK(std::distance(std::filesystem::directory_iterator(dir),
                      std::filesystem::directory_iterator()) == 2);
  // Found probing the CLI: a device written in place failed after the renames (tune --out
  // /dev/full --trace t.json replaced t.json). Devices are written first now; the reason
  // is said.
  if (std::filesystem::exists("/dev/full")) {
    try {
      write_files_atomically({{first, "newer\n"}, {"/dev/full", "x\n"}});
      FAIL("wrote into /dev/full");
    } catch (const Error& e) {
      CHECK(e.where() == "/dev/full");
      CHECK_THAT(e.message(), Catch::Contains("write failed: No space left on device"));
    }
    CHECK(read_text_file(first) == "old\n");
    CHECK(std::distance(std::filesystem::directory_iterator(dir),
                        std::filesystem::directory_iterator()) == 2);
    // Nor the folders it made for an output (found by QA: left behind).
    try {
      write_files_atomically({{(dir / "made" / "deeper" / "x.json").string(), "x\n"},
                              {(dir / "made" / "other" / "y.json").string(), "y\n"},
                              {"/dev/full", "x\n"}});
      FAIL("wrote into /dev/full");
    } catch (const Error& e) {
      CHECK(e.where() == "/dev/full");
    }
    CHECK_FALSE(std::filesystem::exists(dir / "made"));
  }
  // Both written when both can be; empty paths skipped.
  write_files_atomically(
      {{first, "new\n"}, {"", "ignored"}, {(dir / "second.json").string(), "2\n"}});
  CHECK(read_text_file(first) == "new\n");
  CHECK(read_text_file((dir / "second.json").string()) == "2\n");
  std::filesystem::remove_all(dir);
}

// Found probing the CLI: `--hardware /dev/zero` grew to gigabytes and never ended, and a
// file of NUL bytes read as "unexpected end of input" at 1:1.
TEST_CASE("read_text_file stops at its limit and JSON text refuses NUL bytes", "[io]") {
  const auto dir = std::filesystem::temp_directory_path() / unique("fsdptune-io-limit");
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "big.json").string();
  write_file_atomically(path, std::string(5000, ' ') + "{}");
  CHECK(read_text_file(path, 5002).size() == 5002);
  try {
    read_text_file(path, 5001);
    FAIL("read past the limit");
  } catch (const Error& e) {
    CHECK(e.where() == path);
    CHECK(e.exit_code() == 2);
    CHECK_THAT(e.message(), Catch::Contains("more than 4.88 KiB (5001 bytes)"));
  }
  if (std::filesystem::exists("/dev/zero")) {
    try {
      read_text_file("/dev/zero", 3 << 20);
      FAIL("read /dev/zero to its end");
    } catch (const Error& e) {
      CHECK(e.where() == "/dev/zero");
    }
  }
  write_file_atomically(path, std::string("{\"a\": 1}\n\0garbage", 18));
  try {
    read_json_file(path);
    FAIL("read text after a NUL byte");
  } catch (const Error& e) {
    CHECK(e.where() == path + ":2:1");
    CHECK(e.message() == "a NUL byte: not JSON text");
  }
  // A gzipped trace (PyTorch writes .json.gz): said so, with the way out (found by QA).
  write_file_atomically(path, std::string("\x1f\x8b\x08\0\0\0\0\0", 8));
  try {
    read_json_file(path);
    FAIL("read a gzip file as JSON");
  } catch (const Error& e) {
    CHECK(e.where() == path);
    CHECK(e.message() == "gzip-compressed: not JSON text");
    CHECK_THAT(e.hint(), Catch::Contains("gunzip -c " + path + " > "));
  }
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

TEST_CASE("read_text_file refuses a folder", "[io]") {
  const auto dir = std::filesystem::temp_directory_path() / unique("fsdptune-io-folder");
  std::filesystem::create_directories(dir);
  try {
    read_text_file(dir.string());
    FAIL("read a folder as an empty file");
  } catch (const Error& e) {
    CHECK(e.where() == dir.string());
    CHECK_THAT(e.message(), Catch::Contains("is a folder"));
    CHECK(e.exit_code() == 2);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("write_file_atomically writes through a link and into a FIFO", "[io]") {
  namespace fs = std::filesystem;
  const auto dir = fs::temp_directory_path() / unique("fsdptune-io-links");
  fs::remove_all(dir);
  fs::create_directories(dir / "real");
  // A link (relative, into another folder) keeps pointing at the file, which is replaced.
  write_file_atomically((dir / "real" / "out.json").string(), "old\n");
  fs::create_symlink("real/out.json", dir / "link.json");
  write_file_atomically((dir / "link.json").string(), "new\n");
  CHECK(fs::is_symlink(dir / "link.json"));
  CHECK(read_text_file((dir / "real" / "out.json").string()) == "new\n");
  // The temporary went beside the file, not the link: only the two files are left there.
  CHECK(std::distance(fs::directory_iterator(dir / "real"), fs::directory_iterator()) == 1);
  // A dangling link: the file it names is created.
  fs::create_symlink("real/later.json", dir / "dangling.json");
  write_file_atomically((dir / "dangling.json").string(), "later\n");
  CHECK(fs::is_symlink(dir / "dangling.json"));
  CHECK(read_text_file((dir / "real" / "later.json").string()) == "later\n");
  // A FIFO (as /dev/stdout may be) is written in place, not replaced by a regular file.
  const fs::path fifo = dir / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::string received;
  std::thread reader([&] { received = read_text_file(fifo.string()); });
  write_file_atomically(fifo.string(), "through\n");
  reader.join();
  CHECK(received == "through\n");
  CHECK(fs::is_fifo(fifo));
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 4);
  fs::remove_all(dir);
}

// Found by QA: SIGINT or SIGTERM between a temporary's creation and its rename left the
// temporary and the folders made for it. A child writes a file into a new folder and a
// FIFO, which blocks (no reader) after the file's temporary is written and before any
// rename; killed there, it leaves nothing.
TEST_CASE("write_files_atomically: a SIGTERM mid-write leaves no temporary or folder", "[io]") {
  namespace fs = std::filesystem;
  const auto dir = fs::temp_directory_path() / unique("fsdptune-io-signal");
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path fifo = dir / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::signal(SIGTERM, SIG_DFL);  // as in fsdptune (Catch2 handles it in the tests)
    write_files_atomically({{(dir / "new" / "deeper" / "out.json").string(), "{}\n", "--out"},
                            {fifo.string(), "blocked\n", "--trace"}});
    std::_Exit(0);  // not reached: nothing reads the FIFO
  }
  // Its temporary made (registered before it exists), the child goes on to the FIFO
  // (polled: no time is asserted; killed before the FIFO, it leaves nothing either).
  const auto temporary_written = [&] {
    if (!fs::exists(dir / "new" / "deeper")) return false;
    for (const auto& entry : fs::directory_iterator(dir / "new" / "deeper")) {
      if (entry.path().filename().string().rfind("out.json.tmp.", 0) == 0) return true;
    }
    return false;
  };
  while (!temporary_written()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(::kill(child, SIGTERM) == 0);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGTERM);
  CHECK_FALSE(fs::exists(dir / "new"));  // the temporary, then both folders made for it
  CHECK(fs::is_fifo(fifo));
  fs::remove_all(dir);
}

TEST_CASE("require_distinct_files names the two flags of one file", "[io]") {
  namespace fs = std::filesystem;
  const auto dir = fs::temp_directory_path() / unique("fsdptune-io-distinct");
  fs::remove_all(dir);
  fs::create_directories(dir / "sub");
  const std::string out = (dir / "s.json").string();
  write_file_atomically(out, "{}\n");
  CHECK_NOTHROW(require_distinct_files({{"--out", out}, {"--trace", ""}, {"--html", ""}}));
  CHECK_NOTHROW(require_distinct_files({{"--out", out}, {"--trace", out + ".trace"}}));
  // The same file written two ways (found probing the CLI: tune --out s.json
  // --emit-torchtitan s.json kept only the export), and through a link.
  const std::string other = (dir / "sub" / ".." / "s.json").string();
  fs::create_symlink("s.json", dir / "link.json");
  fs::create_symlink("later.json", dir / "dangling.json");  // to a file not written yet
  for (const std::string& same : {out, other, (dir / "link.json").string()}) {
    try {
      require_distinct_files({{"--out", out}, {"--emit-torchtitan", same}});
      FAIL("accepted " << same);
    } catch (const Error& e) {
      CHECK(e.exit_code() == 2);
      CHECK(e.where() == "--emit-torchtitan " + same);
      CHECK_THAT(e.message(), Catch::Contains("is the file of --out too"));
    }
  }
  CHECK_THROWS_AS(require_distinct_files({{"--out", (dir / "later.json").string()},
                                          {"--trace", (dir / "dangling.json").string()}}),
                  Error);
  // An output that is an input names the output; inputs may repeat (report a.json a.json).
  try {
    require_distinct_files({{"--out", other}}, {{"the schedule", out}});
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(e.where() == "--out " + other);
    CHECK_THAT(e.message(), Catch::Contains("is the file of the schedule too"));
  }
  CHECK_NOTHROW(require_distinct_files({{"--html", (dir / "r.html").string()}},
                                       {{"a schedule", out}, {"a schedule", out}}));
  // A link loop is bad input naming its flag (found by QA: exit 1 naming the path alone).
  fs::create_symlink("loop.json", dir / "loop.json");
  const std::string loop = (dir / "loop.json").string();
  for (const auto& [outputs, inputs] :
       {std::pair{NamedFiles{{"--trace", loop}}, NamedFiles{}},
        std::pair{NamedFiles{{"--out", out + ".2"}}, NamedFiles{{"--model", loop}}}}) {
    try {
      require_distinct_files(outputs, inputs);
      FAIL("accepted a link loop");
    } catch (const Error& e) {
      CHECK(e.exit_code() == 2);
      CHECK_THAT(e.where(), Catch::EndsWith(" " + loop));
      CHECK_THAT(e.message(), Catch::Contains("too many levels of symbolic links"));
    }
  }
  // An output that is a folder, refused before any output is written (found probing: tune
  // --out s.json --emit-torchtitan-toml FOLDER wrote s.json, then failed with exit 1).
  try {
    require_distinct_files({{"--out", out}, {"--emit-torchtitan-toml", (dir / "sub").string()}});
    FAIL("accepted a folder");
  } catch (const Error& e) {
    CHECK(e.exit_code() == 2);
    CHECK(e.where() == "--emit-torchtitan-toml " + (dir / "sub").string());
    CHECK(e.message() == "is a folder, not a file");
  }
  // A file where a folder above the output must be (found probing: validate --out
  // s.json/m.json replayed every step, then failed with exit 1); missing folders are fine.
  // Also before `..` is resolved: s.json/../m.json cannot be written either.
  for (const fs::path& inside : {dir / "s.json" / "m.json", dir / "s.json" / "a" / "m.json",
                                 dir / "s.json" / ".." / "m.json"}) {
    try {
      require_distinct_files({{"--out", inside.string()}});
      FAIL("accepted " << inside);
    } catch (const Error& e) {
      CHECK(e.exit_code() == 2);
      CHECK_THAT(e.message(), Catch::Contains("s.json is a file, not a folder to write in"));
    }
  }
  // A name ending in a separator (a folder not there yet) is refused before the run
  // (found probing: sweep --out outdir/ swept, tuned, made the folder and exited 1).
  for (const std::string& folder :
       {(dir / "outdir").string() + "/", (dir / "new").string() + "/."}) {
    try {
      require_distinct_files({{"--out", folder}});
      FAIL("accepted " << folder);
    } catch (const Error& e) {
      CHECK(e.exit_code() == 2);
      CHECK(e.where() == "--out " + folder);
      CHECK(e.message() == "names a folder, not a file");
    }
  }
  CHECK_NOTHROW(require_distinct_files({{"--out", (dir / "new" / "deeper" / "m.json").string()}}));
  CHECK_NOTHROW(require_distinct_files({{"--out", (dir / "new" / ".." / "m.json").string()}}));
  CHECK_NOTHROW(require_distinct_files({{"--out", "relative-new-folder/m.json"}}));
  fs::remove_all(dir);
}
