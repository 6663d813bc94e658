// resolve_model: the --model argument. Thin I/O: the only model code that reads files.
#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "fsdptune/error.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/model.hpp"

namespace fsdptune {

ModelSpec resolve_model(const std::string& name_or_path, std::vector<std::string>* notes) {
  if (name_or_path.empty()) throw_bad_input("--model", "must not be empty");
  const auto names = builtin_model_names();
  if (std::find(names.begin(), names.end(), name_or_path) != names.end()) {
    return builtin_model(name_or_path);
  }
  // Any file but a folder: a named pipe or `--model <(...)` too, which read_json_file reads
  // as it reads a --hardware or --job-toml pipe (a folder: "is a folder, not a file").
  std::error_code ec;
  if (std::filesystem::exists(name_or_path, ec)) {
    // Our model format or a Hugging Face config.json; model_from_json tells them apart.
    const nlohmann::json json = read_json_file(name_or_path);
    ModelSpec model = model_from_json(json, name_or_path);
    if (notes != nullptr) {
      for (const std::string& note : hf_config_notes(json)) {
        notes->push_back(fmt::format("{}: {}", name_or_path, note));
      }
    }
    return model;
  }
  // A path (a folder in it, or a .json name) that is not there: the file is at fault, as
  // every other flag that reads a file says (found by QA: "unknown model").
  if (name_or_path.find('/') != std::string::npos || name_or_path.ends_with(".json")) {
    throw_bad_input("--model " + name_or_path, "no such file");
  }
  // Llama 3.1's names (found by QA: a user asked for llama3.1-70b): the built-in llama3-*
  // are Llama 3.1's 8B, 70B and 405B (the same architecture as Llama 3's).
  const bool llama31 = name_or_path.starts_with("llama3.1");
  throw_bad_input("--model",
                  fmt::format("unknown model '{}': not a built-in model nor a file; built-in "
                              "models: {}",
                              name_or_path, fmt::join(names, ", ")),
                  llama31 ? "llama3-8b, llama3-70b and llama3-405b are Llama 3.1's (Meta's "
                            "params.json; the architecture of Llama 3's)"
                          : "");
}

}  // namespace fsdptune
