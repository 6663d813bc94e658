// read_torchtitan_config: `--job-toml FILE`. Thin I/O: the only torchtitan-config code that
// reads files (the parsing is torchtitan_config.cpp's, pure).
#include "fsdptune/io.hpp"
#include "fsdptune/torchtitan.hpp"

namespace fsdptune {

TorchtitanConfig read_torchtitan_config(const std::string& path) {
  return torchtitan_config_from_toml(read_text_file(path, kMaxTorchtitanConfigBytes), path);
}

}  // namespace fsdptune
