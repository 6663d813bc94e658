#include "cli_support.hpp"

#include <sys/wait.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <vector>

#include <unistd.h>

#include <catch2/catch.hpp>

#ifndef FSDPTUNE_MPIEXEC
#define FSDPTUNE_MPIEXEC "mpirun"
#endif

namespace fsdptune::testing {
namespace {

// Every directory make_temp_dir created, removed when the test program exits (a static
// destructor: runs after Catch2's main returns, also when tests failed). Set
// FSDPTUNE_KEEP_TEST_FILES=1 to keep them for a post-mortem.
class TempDirRegistry {
 public:
  ~TempDirRegistry() {
    if (std::getenv("FSDPTUNE_KEEP_TEST_FILES") != nullptr) return;
    std::error_code ignored;
    for (const auto& dir : dirs_) std::filesystem::remove_all(dir, ignored);
  }
  void add(const std::filesystem::path& dir) {
    const std::lock_guard<std::mutex> lock(mutex_);
    dirs_.push_back(dir);
  }

 private:
  std::mutex mutex_;
  std::vector<std::filesystem::path> dirs_;
};

TempDirRegistry& temp_dirs() {
  static TempDirRegistry registry;
  return registry;
}

}  // namespace

std::size_t occurrences(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

std::string make_temp_dir(const std::string& prefix) {
  static std::atomic<int> counter{0};
  const auto dir = std::filesystem::temp_directory_path() /
                   (prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  temp_dirs().add(dir);
  return dir.string();
}

CommandResult run_command(const std::string& command_line) {
  const std::string dir = make_temp_dir("fsdptune-cmd");
  const std::string err_path = dir + "/stderr";
  const std::string full = command_line + " 2>" + err_path;
  CommandResult result;
  FILE* pipe = ::popen(full.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("popen failed: " + command_line);
  std::array<char, 4096> buffer{};
  std::size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0)
    result.out.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream err(err_path);
  std::ostringstream err_text;
  err_text << err.rdbuf();
  result.err = err_text.str();
  std::filesystem::remove_all(dir);
  return result;
}

std::string mpirun(int ranks) {
  return std::string(
             "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
             "OMPI_MCA_rmaps_base_oversubscribe=1 ") +
         FSDPTUNE_MPIEXEC + " --oversubscribe -np " + std::to_string(ranks) + " ";
}

CommandResult run_fsdptune(const std::string& arguments) {
  return run_command(std::string(FSDPTUNE_BINARY) + " " + arguments);
}

bool readme_lists_format(const nlohmann::json& output) {
  // Built with append (g++ 12 warns of a false overlap in "`" + string under -O3).
  std::string name(1, '`');
  name.append(output.at("format").get<std::string>()).push_back('`');
  std::string version(1, 'v');
  version.append(std::to_string(output.at("version").get<int>()));
  std::ifstream readme(std::string(FSDPTUNE_SOURCE_DIR) + "/README.md");
  REQUIRE(readme.good());
  const std::regex versions("\\bv[0-9]+\\b");
  for (std::string line; std::getline(readme, line);) {
    if (line.empty() || line.front() != '|') continue;
    const std::size_t at = line.find(name);
    if (at == std::string::npos) continue;
    // The versions follow the name up to the next format's name or the end of its cell.
    const std::size_t from = at + name.size();
    const std::string cell = line.substr(from, line.find_first_of("`|", from) - from);
    for (auto it = std::sregex_iterator(cell.begin(), cell.end(), versions);
         it != std::sregex_iterator(); ++it) {
      if (it->str() == version) return true;
    }
    UNSCOPED_INFO("README.md lists " << name << " as:" << cell);
    return false;
  }
  UNSCOPED_INFO("README.md has no row naming " << name);
  return false;
}

std::string tuned_tiny(const std::string& dir, const std::string& name, const std::string& job) {
  const std::string out = dir + "/" + name + ".json";
  const auto result =
      run_fsdptune("tune --model tiny " + job +
                   " --batch 1 --seq 128 --hardware h100-sxm --max-evaluations 20 --out " + out);
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  return out;
}

}  // namespace fsdptune::testing
