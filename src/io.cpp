#include "fsdptune/io.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include <unistd.h>

#include <fmt/format.h>

#include "fsdptune/error.hpp"

namespace fsdptune {

std::string read_text_file(const std::string& path) {
  std::error_code directory_ec;
  // An ifstream opens a folder and reads it as empty.
  if (std::filesystem::is_directory(path, directory_ec)) {
    throw_bad_input(path, "is a folder, not a file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::error_code ec;
    const bool exists = std::filesystem::exists(path, ec);
    throw_bad_input(path, exists ? "cannot be read" : "no such file");
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) throw_bad_input(path, "read failed");
  return buffer.str();
}

namespace {

// `path` with its symbolic links followed (a dangling one to the file it names), so that the
// rename replaces the file a link points to, not the link.
std::filesystem::path follow_links(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path target(path);
  for (int hops = 0; hops < 40; ++hops) {
    std::error_code ec;
    if (!fs::is_symlink(target, ec)) return target;
    const fs::path next = fs::read_symlink(target, ec);
    if (ec) throw_runtime(path, fmt::format("cannot read the link: {}", ec.message()));
    target = next.is_absolute() ? next : target.parent_path() / next;
  }
  throw_runtime(path, "too many levels of symbolic links");
}

// Writes `content` straight into a FIFO, character device or socket (/dev/stdout): such a
// file cannot be replaced by a rename, and must not be.
void write_in_place(const std::string& path, const std::filesystem::path& target,
                    const std::string& content) {
  std::ofstream out(target, std::ios::binary);
  if (!out) throw_runtime(path, "cannot open for writing");
  out << content;
  out.flush();
  if (!out) throw_runtime(path, "write failed");
}

}  // namespace

void write_file_atomically(const std::string& path, const std::string& content) {
  namespace fs = std::filesystem;
  const fs::path target = follow_links(path);
  std::error_code status_ec;
  const fs::file_status status = fs::status(target, status_ec);
  if (fs::exists(status) && !fs::is_regular_file(status) && !fs::is_directory(status)) {
    write_in_place(path, target, content);
    return;
  }
  if (target.has_parent_path()) {
    std::error_code ec;
    fs::create_directories(target.parent_path(), ec);
    if (ec) throw_runtime(path, fmt::format("cannot create directory: {}", ec.message()));
  }
  // Per process: two runs writing one file (a sweep of jobs with the same --out) must not
  // rename each other's temporary away.
  const fs::path temporary = fmt::format("{}.tmp.{}", target.string(), ::getpid());
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) throw_runtime(path, "cannot open for writing");
    out << content;
    out.flush();
    if (!out) {
      out.close();
      std::error_code ignored;
      fs::remove(temporary, ignored);
      throw_runtime(path, "write failed");
    }
  }
  std::error_code ec;
  fs::rename(temporary, target, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
    throw_runtime(path, fmt::format("cannot rename into place: {}", ec.message()));
  }
}

void require_distinct_files(const NamedFiles& outputs, const NamedFiles& inputs) {
  namespace fs = std::filesystem;
  const auto resolve = [](const std::string& path) {
    std::error_code ec;
    fs::path absolute = fs::absolute(follow_links(path), ec);
    if (ec) absolute = path;
    const fs::path canonical = fs::weakly_canonical(absolute, ec);
    return ec ? absolute.lexically_normal() : canonical;
  };
  std::vector<fs::path> written;
  for (const auto& [flag, path] : outputs)
    written.push_back(path.empty() ? fs::path() : resolve(path));
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].second.empty()) continue;
    for (std::size_t j = 0; j < i; ++j) {
      if (!outputs[j].second.empty() && written[j] == written[i]) {
        throw_bad_input(
            outputs[i].first + " " + outputs[i].second,
            fmt::format("is the file of {} too: one would overwrite the other", outputs[j].first),
            "give each output its own file");
      }
    }
  }
  for (const auto& [input_flag, input] : inputs) {
    if (input.empty()) continue;
    const fs::path read = resolve(input);
    for (std::size_t j = 0; j < outputs.size(); ++j) {
      if (!outputs[j].second.empty() && written[j] == read) {
        throw_bad_input(
            outputs[j].first + " " + outputs[j].second,
            fmt::format("is the file of {} too: writing it would overwrite that input", input_flag),
            "write the output to another file");
      }
    }
  }
}

namespace {

// "source:line:column" of the 1-based byte offset `byte` of `text` (nlohmann's position).
std::string text_position(const std::string& text, std::size_t byte, const std::string& source) {
  std::size_t line = 1;
  std::size_t column = 1;
  const std::size_t end = std::min<std::size_t>(byte == 0 ? 0 : byte - 1, text.size());
  for (std::size_t i = 0; i < end; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return fmt::format("{}:{}:{}", source, line, column);
}

// Accepts every value and remembers where the parse failed: nlohmann reports a number
// out of the range of a double (1e400) as an out_of_range exception without its place,
// but hands that place to a SAX handler's parse_error.
class ErrorPosition final : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::size_t byte = 0;

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception&) override {
    byte = position;
    return false;
  }
};

// Deeper than any file fsdptune reads (a schedule nests 7 levels, a Kineto trace's args a
// few more): nlohmann parses any depth, but copies and dumps a value recursively, so a
// file nested a million levels deep would overflow the stack in the error message that
// dumps it.
constexpr int kMaxJsonDepth = 256;

struct TooDeep {};

// nlohmann's message without its "[json.exception.parse_error.101] " prefix.
std::string parse_message(const nlohmann::json::exception& e, const char* kind) {
  std::string what = e.what();
  const auto start = what.find(kind);
  return start == std::string::npos ? what : what.substr(start);
}

}  // namespace

nlohmann::json parse_json_text(const std::string& text, const std::string& source) {
  try {
    return nlohmann::json::parse(
        text, [](int depth, nlohmann::json::parse_event_t, const nlohmann::json&) {
          if (depth > kMaxJsonDepth) throw TooDeep{};
          return true;
        });
  } catch (const TooDeep&) {
    throw_bad_input(source,
                    fmt::format("malformed JSON (nested deeper than {} levels)", kMaxJsonDepth));
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte is the 1-based offset of the error.
    throw_bad_input(text_position(text, e.byte, source),
                    fmt::format("malformed JSON ({})", parse_message(e, "parse error")));
  } catch (const nlohmann::json::out_of_range& e) {
    // A number too large for a double: the one out_of_range the parser throws.
    ErrorPosition position;
    nlohmann::json::sax_parse(text, &position);
    throw_bad_input(text_position(text, position.byte, source),
                    fmt::format("malformed JSON ({})", parse_message(e, "number overflow")));
  }
}

nlohmann::json read_json_file(const std::string& path) {
  return parse_json_text(read_text_file(path), path);
}

std::string dump_json(const nlohmann::json& json) { return json.dump(2) + "\n"; }

}  // namespace fsdptune
