// resolve_hardware: the file-reading side of hardware specs (io.hpp), kept apart from the
// pure parsing in hardware.cpp.
#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "fsdptune/error.hpp"
#include "fsdptune/hardware.hpp"
#include "fsdptune/io.hpp"

namespace fsdptune {

namespace {

// Anything that looks like a path is read as a spec file; a bare word is an id.
bool looks_like_path(const std::string& id_or_path) {
  std::error_code ec;
  return id_or_path.find('/') != std::string::npos || id_or_path.ends_with(".json") ||
         std::filesystem::exists(id_or_path, ec);
}

}  // namespace

HardwareSpec resolve_hardware(const std::string& id_or_path) {
  if (is_builtin_hardware(id_or_path)) return builtin_hardware(id_or_path);
  if (!looks_like_path(id_or_path)) {
    throw_bad_input(fmt::format("--hardware {}", id_or_path), "unknown hardware",
                    fmt::format("use a built-in id ({}) or the path of a hardware spec file",
                                fmt::join(builtin_hardware_names(), ", ")));
  }
  return hardware_from_json(read_json_file(id_or_path), id_or_path);
}

bool names_hardware_file(const std::string& id_or_path) {
  return !is_builtin_hardware(id_or_path) && looks_like_path(id_or_path);
}

}  // namespace fsdptune
