#include "fsdptune/io.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include <fmt/format.h>

#include "fsdptune/error.hpp"

namespace fsdptune {

std::string read_text_file(const std::string& path) {
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

void write_file_atomically(const std::string& path, const std::string& content) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  if (target.has_parent_path()) {
    std::error_code ec;
    fs::create_directories(target.parent_path(), ec);
    if (ec) throw_runtime(path, fmt::format("cannot create directory: {}", ec.message()));
  }
  const fs::path temporary = target.string() + ".tmp";
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

nlohmann::json parse_json_text(const std::string& text, const std::string& source) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte is the 1-based offset of the error; turn it into line:column.
    std::size_t line = 1;
    std::size_t column = 1;
    const std::size_t end = std::min<std::size_t>(e.byte == 0 ? 0 : e.byte - 1, text.size());
    for (std::size_t i = 0; i < end; ++i) {
      if (text[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    std::string what = e.what();
    const auto colon = what.find("parse error");
    if (colon != std::string::npos) what = what.substr(colon);
    throw_bad_input(fmt::format("{}:{}:{}", source, line, column),
                    fmt::format("malformed JSON ({})", what));
  }
}

nlohmann::json read_json_file(const std::string& path) {
  return parse_json_text(read_text_file(path), path);
}

std::string dump_json(const nlohmann::json& json) { return json.dump(2) + "\n"; }

}  // namespace fsdptune
