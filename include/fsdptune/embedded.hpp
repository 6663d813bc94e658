// Files compiled into the binary (see cmake/EmbedFiles.cmake): {stem, content} pairs.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace fsdptune::embedded {

// models/*.json, stem = built-in model name ("llama3-8b").
const std::vector<std::pair<std::string, std::string>>& model_files();
// profiles/{h100-sxm,h200,a100-80g}.json, stem = hardware id.
const std::vector<std::pair<std::string, std::string>>& hardware_files();

}  // namespace fsdptune::embedded
