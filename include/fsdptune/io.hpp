// The thin I/O layer: the only core functions that touch the file system. Everything
// else takes and returns values.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "fsdptune/hardware.hpp"
#include "fsdptune/model.hpp"

namespace fsdptune {

// The most an input file may hold unless its reader says otherwise: far above any model,
// hardware, profile, schedule or measured file (a 405B schedule is about 1 MiB), and a
// bound on what /dev/zero or a FIFO that never ends makes a reader hold in memory.
constexpr std::int64_t kMaxInputFileBytes = std::int64_t{1} << 30;
// Throws Error(kBadInput) naming `path` when it cannot be read, is a folder, or holds more
// than `max_bytes` (reading stops there).
std::string read_text_file(const std::string& path, std::int64_t max_bytes = kMaxInputFileBytes);
// Writes `content` to a temporary file beside `path`, then renames it over `path`, so a
// failure never leaves a half-written file; missing parent folders are created. A symbolic
// link is followed (the file it names is replaced, the link kept); a FIFO or device
// (/dev/stdout) is written in place. Throws Error(kRuntime) naming `path`, after the flag
// that gave it where `flag` is not empty ("--trace /dev/full: write failed: ...").
void write_file_atomically(const std::string& path, const std::string& content,
                           const std::string& flag = "");
// Several outputs of one command, all or none: every file is written to its temporary
// beside it first, then all are renamed into place, so a failure while writing (a folder
// that cannot be created, a full disk) leaves every output as it was -- not the first
// written and the second missing. FIFOs and devices are written in place, last. Empty
// paths are skipped. Throws Error(kRuntime) naming the path at fault, after its flag.
struct OutputFile {
  OutputFile(std::string path_in, std::string content_in, std::string flag_in = "")
      : path(std::move(path_in)), content(std::move(content_in)), flag(std::move(flag_in)) {}
  std::string path;
  std::string content;
  std::string flag;  // the flag that named it, if any: named with the path on failure
};
void write_files_atomically(const std::vector<OutputFile>& files);
// A command's files, (flag or argument, path). Refuses two `outputs` of one file, or an
// output that is one of the `inputs` (which it would overwrite; inputs may repeat), links
// followed and "./a" = "a": Error(kBadInput) naming both flags; and an output that is a
// folder, or one where no file can be created (a probe file is made and removed in its
// folder, or the nearest existing one above), before anything is written (a command of
// several outputs wrote the others, then failed on it). Empty paths are skipped. An output
// naming a descriptor (/dev/stdout, /dev/fd/N, /proc/self/fd/N) that is closed or open for
// reading only is refused likewise. An output that is the process's stdout, a pipe,
// terminal or file (`--out /dev/stdout | jq`), takes stdout: what the command prints there
// from then on goes to stderr, so the output is read alone.
using NamedFiles = std::vector<std::pair<std::string, std::string>>;
void require_distinct_files(const NamedFiles& outputs, const NamedFiles& inputs = {});
// Whether an output took stdout (require_distinct_files), descriptor 1 then being stderr's.
bool stdout_taken_by_output();
// Flushes stdout before an error is said, with SIGPIPE ignored meanwhile: a reader of stdout
// that is gone must not take the error with it (found by review: `| true` left none); the
// failed write stays in stdout's error flag.
void flush_stdout_before_error();
// The file `path` names, as require_distinct_files compares paths: links followed, made
// absolute, "." and ".." resolved (lexically where the path does not exist).
std::filesystem::path resolved_file(const std::string& path);
// Parses JSON text; a syntax error becomes Error(kBadInput) with "source:line:column".
nlohmann::json parse_json_text(const std::string& text, const std::string& source);
nlohmann::json read_json_file(const std::string& path, std::int64_t max_bytes = kMaxInputFileBytes);
// Deterministic JSON text: 2-space indent, keys sorted, trailing newline.
std::string dump_json(const nlohmann::json& json);

// A file's optional "format" field, which must be `expected` where present (files of
// fsdptune's without one read as before): Error(kBadInput) on `where` saying the value
// found, `expected "fsdptune-hardware", got "fsdptune-profile"`.
void check_format_field(const nlohmann::json& json, const std::string& expected,
                        const std::string& where);
// An integer JSON value as int64: one of 2^63 or more (which get<int64_t> wraps to a
// negative number, reported as "must not be negative") throws Error(kBadInput) naming
// `where`. REQUIRES: value.is_number_integer().
std::int64_t json_int64(const nlohmann::json& value, const std::string& where);
// Whether `value` is a JSON whole number (signed or unsigned, any size) other than those of
// [low, high]: a version field's readers name such a value as a version they do not read,
// with the versions they do (0, -1 and 2^40 were "must be > 0", "must not be negative" and
// "out of range": found by QA).
bool json_integer_outside(const nlohmann::json& value, std::int64_t low, std::int64_t high);
// The first key of `object` (in sorted order) that is not one of `known`, if any: readers
// refuse it, as a misspelt field would otherwise be ignored.
std::optional<std::string> unknown_field(const nlohmann::json& object,
                                         const std::vector<std::string>& known);

// --model: a built-in name, a path to one of our model files, or a Hugging Face
// config.json. With `notes`, a config.json's hf_config_notes (model.hpp) are appended,
// each after "PATH: ".
ModelSpec resolve_model(const std::string& name_or_path, std::vector<std::string>* notes = nullptr);
// --hardware: a built-in id or a path to a hardware spec file.
HardwareSpec resolve_hardware(const std::string& id_or_path);
// Whether --hardware `id_or_path` names a spec file, as resolve_hardware reads it (no
// built-in id, and a path); else it is a word (a built-in id, or a device with no spec yet).
bool names_hardware_file(const std::string& id_or_path);

}  // namespace fsdptune
