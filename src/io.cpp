#include "fsdptune/io.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <system_error>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "fsdptune/error.hpp"
#include "fsdptune/units.hpp"

namespace fsdptune {

std::string read_text_file(const std::string& path, std::int64_t max_bytes) {
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
  // In blocks, stopping past the limit: a FIFO or /dev/zero never ends.
  std::string text;
  std::vector<char> block(std::size_t{1} << 20);
  while (in) {
    in.read(block.data(), static_cast<std::streamsize>(block.size()));
    text.append(block.data(), static_cast<std::size_t>(in.gcount()));
    if (static_cast<std::int64_t>(text.size()) > max_bytes) {
      throw_bad_input(path, fmt::format("more than {} ({} bytes): larger than any such file "
                                        "fsdptune reads",
                                        format_bytes(max_bytes), max_bytes));
    }
  }
  if (in.bad()) throw_bad_input(path, "read failed");
  return text;
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

// Whether `path` is a character device (/dev/null, a terminal).
bool is_character_device(const std::filesystem::path& path) {
  struct stat status {};
  return ::stat(path.c_str(), &status) == 0 && S_ISCHR(status.st_mode);
}

// Whether `path`, as the kernel resolves it, is a FIFO, device or socket (written in place).
// Asked of the path itself, not of follow_links' target: /dev/stdout names
// /proc/self/fd/1, whose link text for a pipe is "pipe:[N]", no file (found by a tester:
// `--out /dev/stdout | jq` exited 2, "cannot create a file in /proc/self/fd").
bool is_special_file(const std::string& path) {
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  return !ec && std::filesystem::exists(status) && !std::filesystem::is_regular_file(status) &&
         !std::filesystem::is_directory(status);
}

// Where an output is the process's stdout (`--out /dev/stdout | jq`, `--trace t.json >
// t.json`), the command's report, printed to stdout, would be mixed into that file (found
// by QA: jq read the schedule, then the table, "Extra data"). The first such output moves
// stdout to a descriptor of its own (`stdout_output.fd`) and points descriptor 1 at stderr,
// where the report then goes. After the move a name like /dev/stdout names stderr, so each
// such output is known by the name it was given: a pipe, FIFO, socket or terminal is written
// in place to the moved descriptor (`in_place`); a regular file is written as any other, to
// a temporary renamed over the file it named before the move (`files`). A terminal counts:
// under mpirun each rank's stdout is a pseudo-terminal that mpirun forwards into the user's
// pipe (found by QA: `mpirun ... validate --out /dev/stdout | jq` read the report after the
// measured file). /dev/null as both is left alone.
struct StdoutOutput {
  int fd = -1;
  std::set<std::string> in_place;
  std::map<std::string, std::filesystem::path> files;
};
StdoutOutput stdout_output;

bool names_stdout(const std::string& path) {
  struct stat out_status {};
  struct stat path_status {};
  if (::fstat(STDOUT_FILENO, &out_status) != 0 || ::stat(path.c_str(), &path_status) != 0) {
    return false;
  }
  const bool read_as_file = S_ISFIFO(out_status.st_mode) || S_ISREG(out_status.st_mode) ||
                            S_ISSOCK(out_status.st_mode) || ::isatty(STDOUT_FILENO) == 1;
  return read_as_file && out_status.st_dev == path_status.st_dev &&
         out_status.st_ino == path_status.st_ino;
}

void give_stdout_to(const std::string& path) {
  struct stat out_status {};
  if (::fstat(STDOUT_FILENO, &out_status) != 0) return;
  // Before the move: /dev/stdout's link names the file only until then.
  const std::filesystem::path file =
      S_ISREG(out_status.st_mode) ? follow_links(path) : std::filesystem::path();
  if (stdout_output.fd < 0) {
    std::fflush(stdout);
    const int moved = ::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
    if (moved < 0 || ::dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
      if (moved >= 0) ::close(moved);
      return;  // the report stays mixed in: no worse than before
    }
    stdout_output.fd = moved;
  }
  if (file.empty()) {
    stdout_output.in_place.insert(path);
  } else {
    stdout_output.files.emplace(path, file);
  }
}

// ": <the C library's reason>" when the last failed call set errno (fstream does not say).
std::string errno_reason() {
  const int error = errno;
  return error != 0 ? fmt::format(": {}", std::strerror(error)) : std::string();
}

// Writes all of `content` to `fd`, again after a signal; false with errno set on failure.
bool write_all(int fd, const std::string& content) {
  std::size_t written = 0;
  while (written < content.size()) {
    const ssize_t wrote = ::write(fd, content.data() + written, content.size() - written);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) return false;
    written += static_cast<std::size_t>(wrote);
  }
  return true;
}

// Writes `content` straight into a FIFO, character device or socket (/dev/stdout): such a
// file cannot be replaced by a rename, and must not be.
void write_in_place(const std::string& path, const std::filesystem::path& target,
                    const std::string& content) {
  errno = 0;
  if (stdout_output.in_place.count(target.string()) > 0) {
    if (!write_all(stdout_output.fd, content)) throw_runtime(path, "write failed" + errno_reason());
    return;
  }
  std::ofstream out(target, std::ios::binary);
  if (!out) throw_runtime(path, "cannot open for writing" + errno_reason());
  out << content;
  out.flush();
  if (!out) throw_runtime(path, "write failed" + errno_reason());
}

// The longest file name fsdptune writes: 255 bytes, what Linux file systems take.
constexpr std::size_t kMaxFileName = 255;
// The bytes of a path the system takes, its terminating NUL included (Linux's PATH_MAX).
constexpr std::size_t kMaxPath = 4096;

// What an interrupted write leaves to remove: its temporaries and the folders it made
// (found by QA: SIGINT or SIGTERM between a temporary's creation and its rename left both).
// Slots a signal handler reads without locks or allocation: unlink and rmdir are
// async-signal-safe. Folders are registered deepest first, and removed only when empty.
struct PendingPath {
  std::atomic<bool> claimed{false};  // taken by a writer (its path may be half copied)
  std::atomic<bool> used{false};     // its path complete: the handler's to remove
  bool folder = false;
  std::array<char, kMaxPath> path{};
};
constexpr int kMaxPending = 64;
std::array<PendingPath, kMaxPending> pending_paths;

extern "C" void remove_pending_and_reraise(int signal_number) {
  // Files, then folders three times over (a later output's deeper folder may have been
  // registered after its parent).
  for (const bool folders : {false, true, true, true}) {
    for (PendingPath& entry : pending_paths) {
      if (!entry.used.load() || entry.folder != folders) continue;
      if (folders) {
        ::rmdir(entry.path.data());
      } else {
        ::unlink(entry.path.data());
      }
    }
  }
  std::signal(signal_number, SIG_DFL);
  std::raise(signal_number);
}

// The handler for SIGINT, SIGTERM and SIGHUP, where they would end the process (their
// default): one ignored (a background job's SIGINT) or handled by someone else stays so.
// Looked at on every write (a few system calls beside a file's): a disposition set back to
// the default since (a forked child's) gets the handler again.
void install_cleanup_handlers() {
  for (const int signal_number : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction current {};
    if (::sigaction(signal_number, nullptr, &current) != 0 || current.sa_handler != SIG_DFL)
      continue;
    struct sigaction action {};
    action.sa_handler = remove_pending_and_reraise;
    sigemptyset(&action.sa_mask);
    ::sigaction(signal_number, &action, nullptr);
  }
}

// `path` in a free slot until unregister_pending(slot); -1 (not registered) when the slots
// are taken or the path is too long: it is then left behind if a signal comes.
int register_pending(const std::string& path, bool folder) {
  if (path.size() >= PendingPath{}.path.size()) return -1;
  install_cleanup_handlers();
  for (int slot = 0; slot < kMaxPending; ++slot) {
    PendingPath& entry = pending_paths[static_cast<std::size_t>(slot)];
    bool free = false;
    // Claimed first (two threads writing at once take different slots), marked used once
    // the path is whole (a signal never reads a half-copied one).
    if (!entry.claimed.compare_exchange_strong(free, true)) continue;
    std::copy(path.begin(), path.end(), entry.path.begin());
    entry.path[path.size()] = '\0';
    entry.folder = folder;
    entry.used.store(true);
    return slot;
  }
  return -1;
}

void unregister_pending(int slot) {
  if (slot < 0) return;
  PendingPath& entry = pending_paths[static_cast<std::size_t>(slot)];
  entry.used.store(false);
  entry.claimed.store(false);
}

// Creates `target`'s temporary exclusively (O_EXCL: never through a link someone left at
// its name, never into another process's file) as TARGET.tmp.PID, or TARGET.tmp.PID.N where
// that exists (a stale one of an earlier process of the same pid), the target's name cut
// short where the suffix would pass kMaxFileName (found by QA: names of 246 to 255 bytes
// could not be written); writes `content` into it with the existing target's permissions
// (found by QA: a 0600 file came back 0644) and flushes it to the disk before the rename
// (fsync: else a crash soon after can leave the renamed file empty). Returns its path.
std::filesystem::path write_temporary(const std::string& path, const std::filesystem::path& target,
                                      const std::string& content, std::vector<int>& pending) {
  struct stat existing {};
  const bool replaces = ::stat(target.c_str(), &existing) == 0 && S_ISREG(existing.st_mode);
  // Room for the longest suffix (".tmp.PID.99"), so that every attempt has one stem.
  std::string stem = target.filename().string();
  stem.resize(std::min(stem.size(), kMaxFileName - fmt::format(".tmp.{}.99", ::getpid()).size()));
  for (int n = 0; n < 100; ++n) {
    const std::string suffix =
        n == 0 ? fmt::format(".tmp.{}", ::getpid()) : fmt::format(".tmp.{}.{}", ::getpid(), n);
    const std::string name = (target.parent_path() / (stem + suffix)).string();
    // Registered before it exists, so that a signal never finds it made and unregistered.
    const int slot = register_pending(name, false);
    errno = 0;
    const int fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) {
      const int error = errno;
      unregister_pending(slot);
      if (error == EEXIST) continue;
      errno = error;
      throw_runtime(path, "cannot open for writing" + errno_reason());
    }
    pending.push_back(slot);
    if (replaces) ::fchmod(fd, existing.st_mode & 07777);  // best effort, as cp's
    if (!write_all(fd, content)) {
      const std::string reason = errno_reason();
      ::close(fd);
      ::unlink(name.c_str());
      throw_runtime(path, "write failed" + reason);
    }
    // EINVAL: a file system that cannot sync (nothing to wait for).
    if (::fsync(fd) != 0 && errno != EINVAL) {
      const std::string reason = errno_reason();
      ::close(fd);
      ::unlink(name.c_str());
      throw_runtime(path, "write failed" + reason);
    }
    if (::close(fd) != 0) {
      const std::string reason = errno_reason();
      ::unlink(name.c_str());
      throw_runtime(path, "write failed" + reason);
    }
    return name;
  }
  throw_runtime(path, "cannot open for writing: 100 temporaries of its name exist",
                "remove the stale " + (target.parent_path() / stem).string() + ".tmp.* files");
}

// The folders above `target` that do not exist yet, deepest first: what creating it makes.
std::vector<std::filesystem::path> missing_folders(const std::filesystem::path& target) {
  std::vector<std::filesystem::path> missing;
  std::error_code ec;
  for (std::filesystem::path folder = target.parent_path();
       !folder.empty() && !std::filesystem::exists(folder, ec) && folder != folder.parent_path();
       folder = folder.parent_path()) {
    missing.push_back(folder);
  }
  return missing;
}

}  // namespace

void write_file_atomically(const std::string& path, const std::string& content,
                           const std::string& flag) {
  write_files_atomically({{path, content, flag}});
}

void write_files_atomically(const std::vector<OutputFile>& files) {
  namespace fs = std::filesystem;
  struct Staged {
    const OutputFile* file;
    fs::path target;
    fs::path temporary;  // empty: written in place (a FIFO or device)
  };
  std::vector<Staged> staged;
  std::vector<fs::path> created;  // folders made for the outputs, deepest first per output
  // Removed by a SIGINT, SIGTERM or SIGHUP until the renames are done (pending_paths).
  std::vector<int> pending;
  struct Unregister {
    std::vector<int>& slots;
    ~Unregister() {
      for (const int slot : slots) unregister_pending(slot);
    }
  } unregister{pending};
  // On failure nothing is left behind: no temporary, no folder made for an output
  // (found by QA: a failed write left the folders it had created).
  const auto remove_temporaries = [&staged, &created] {
    for (const Staged& entry : staged) {
      std::error_code ignored;
      if (!entry.temporary.empty()) fs::remove(entry.temporary, ignored);
    }
    for (const fs::path& folder : created) {
      std::error_code ignored;
      fs::remove(folder, ignored);  // only if empty: another output's file may be in it
    }
  };
  // What an error names: the flag and the path (found by QA: "/dev/full: write failed" of
  // a command with several outputs did not say which flag).
  const auto named = [](const OutputFile& file) {
    return file.flag.empty() ? file.path : file.flag + " " + file.path;
  };
  try {
    for (const OutputFile& file : files) {
      if (file.path.empty()) continue;
      const auto moved_file = stdout_output.files.find(file.path);
      if (stdout_output.in_place.count(file.path) > 0 ||
          (moved_file == stdout_output.files.end() && is_special_file(file.path))) {
        staged.push_back({&file, fs::path(file.path), fs::path()});
        continue;
      }
      const fs::path target =
          moved_file != stdout_output.files.end() ? moved_file->second : follow_links(file.path);
      if (target.has_parent_path()) {
        const std::vector<fs::path> missing = missing_folders(target);
        for (const fs::path& folder : missing) pending.push_back(register_pending(folder, true));
        std::error_code ec;
        fs::create_directories(target.parent_path(), ec);
        // Deeper folders of a later output come first in `created`, so removing in order
        // empties each before its parent.
        created.insert(created.begin(), missing.begin(), missing.end());
        if (ec)
          throw_runtime(named(file), fmt::format("cannot create directory: {}", ec.message()));
      }
      // Per process: two runs writing one file (a sweep of jobs with the same --out) must
      // not rename each other's temporary away.
      staged.push_back(
          {&file, target, write_temporary(named(file), target, file.content, pending)});
    }
    // Devices and FIFOs before any rename: /dev/full failing after the renames left the
    // other outputs replaced. (What was written into a FIFO cannot be taken back.)
    for (const Staged& entry : staged) {
      if (entry.temporary.empty())
        write_in_place(named(*entry.file), entry.target, entry.file->content);
    }
    for (const Staged& entry : staged) {
      if (entry.temporary.empty()) continue;
      std::error_code ec;
      fs::rename(entry.temporary, entry.target, ec);
      if (ec) {
        throw_runtime(named(*entry.file),
                      fmt::format("cannot rename into place: {}", ec.message()));
      }
    }
  } catch (...) {
    remove_temporaries();
    throw;
  }
}

namespace {

// Whether a file can be made where `path` would be written: a probe file created (and
// removed at once) in its folder, or in the nearest folder above it that exists (where the
// missing ones would be created). A file system that takes no new file (/proc, a read-only
// mount, a folder without write permission) failed only when the output was written, after
// the whole run (found probing: validate --out /proc/x.json replayed every step first).
// An existing device or FIFO is written in place: nothing to create.
void require_creatable(const std::string& flag, const std::string& path) {
  namespace fs = std::filesystem;
  if (is_special_file(path)) return;
  std::error_code ec;
  // The path as it is opened (relative stays relative), and absolute for its names.
  const fs::path opened = follow_links(path);
  const fs::path target = fs::absolute(opened, ec);
  if (ec) return;
  fs::path folder = opened.parent_path();
  while (!folder.empty() && !fs::exists(folder, ec) && folder != folder.parent_path()) {
    folder = folder.parent_path();
  }
  if (folder.empty()) folder = ".";
  // A name no file system takes, the file's or a folder's to be made: refused before the
  // run, as bad input (found by QA: exit 1 after the whole run).
  for (const fs::path& part : target) {
    const std::string name = part.string();
    if (name.size() > kMaxFileName) {
      throw_bad_input(flag + " " + path,
                      fmt::format("a name of {} bytes in the path, more than the {} a file "
                                  "system takes",
                                  name.size(), kMaxFileName),
                      "shorter names");
    }
  }
  // So is a path the system takes no longer (PATH_MAX with its NUL), as it is opened, its
  // temporary's suffix counted (found by QA: exit 1 after the whole run, "File name too
  // long"; review: a short relative path in a deep folder is opened as it is).
  const std::size_t written = opened.string().size() + fmt::format(".tmp.{}.99", ::getpid()).size();
  if (written >= kMaxPath) {
    throw_bad_input(flag + " " + path,
                    fmt::format("a path of {} bytes with its temporary's suffix, where the "
                                "system takes fewer than {}",
                                written, kMaxPath),
                    "a shorter path");
  }
  const fs::path probe = folder / fmt::format(".fsdptune-write-check.{}", ::getpid());
  errno = 0;
  std::FILE* file = std::fopen(probe.c_str(), "wx");
  // Another process's probe of that name (ranks of one pid on other nodes sharing the
  // folder): files can be created there.
  if (file == nullptr && errno == EEXIST) return;
  if (file == nullptr) {
    throw_bad_input(flag + " " + path,
                    fmt::format("cannot create a file in {}{}", folder.string(), errno_reason()),
                    "write it to a folder you can write in");
  }
  std::fclose(file);
  fs::remove(probe, ec);
}

}  // namespace

std::filesystem::path resolved_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path absolute = fs::absolute(follow_links(path), ec);
  if (ec) absolute = path;
  const fs::path canonical = fs::weakly_canonical(absolute, ec);
  return ec ? absolute.lexically_normal() : canonical;
}

bool stdout_taken_by_output() { return stdout_output.fd >= 0; }

void flush_stdout_before_error() {
  struct sigaction ignore {};
  struct sigaction previous {};
  ignore.sa_handler = SIG_IGN;
  const bool ignored = ::sigaction(SIGPIPE, &ignore, &previous) == 0;
  std::fflush(stdout);
  if (ignored) ::sigaction(SIGPIPE, &previous, nullptr);
}

namespace {

// The descriptor `path` names, if it names one: /dev/stdin, /dev/stdout, /dev/stderr,
// /dev/fd/N or /proc/self/fd/N.
std::optional<int> named_descriptor(const std::string& path) {
  if (path == "/dev/stdin") return 0;
  if (path == "/dev/stdout") return 1;
  if (path == "/dev/stderr") return 2;
  for (const std::string_view prefix : {"/dev/fd/", "/proc/self/fd/"}) {
    if (!path.starts_with(prefix)) continue;
    const std::string_view number = std::string_view(path).substr(prefix.size());
    int fd = -1;
    const auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), fd);
    if (error == std::errc() && end == number.data() + number.size() && fd >= 0) return fd;
  }
  return std::nullopt;
}

}  // namespace

void require_distinct_files(const NamedFiles& outputs, const NamedFiles& inputs) {
  namespace fs = std::filesystem;
  // A link that cannot be followed (a loop) is bad input of its flag (found by QA: exit 1
  // naming the path alone).
  const auto resolved = [](const std::string& flag, const std::string& path) {
    try {
      return resolved_file(path);
    } catch (const Error& error) {
      throw_bad_input(flag + " " + path, error.message(), "name a file, or a link to one");
    }
  };
  std::vector<fs::path> written;
  for (const auto& [flag, path] : outputs) {
    // Found by review: `--out /dev/stdout >&-` said "cannot create a file in /proc/self/fd";
    // `--trace /dev/fd/0` wrote into the command's own input.
    if (const std::optional<int> fd = named_descriptor(path)) {
      constexpr std::array<const char*, 3> kStandard = {" (standard input)", " (standard output)",
                                                        " (standard error)"};
      const char* standard = *fd < 3 ? kStandard[static_cast<std::size_t>(*fd)] : "";
      const int flags = ::fcntl(*fd, F_GETFL);
      if (flags < 0) {
        throw_bad_input(flag + " " + path,
                        fmt::format("names descriptor {}{}, which is not open", *fd, standard),
                        "give a file, or run it with that descriptor open");
      }
      if ((flags & O_ACCMODE) == O_RDONLY) {
        throw_bad_input(flag + " " + path,
                        fmt::format("names descriptor {}{}, open for reading only", *fd, standard),
                        "give a file, or a descriptor open for writing");
      }
    }
    written.push_back(path.empty() ? fs::path() : resolved(flag, path));
    std::error_code ec;
    if (!path.empty() && fs::is_directory(written.back(), ec)) {
      throw_bad_input(flag + " " + path, "is a folder, not a file", "name a file to write");
    }
    if (path.empty()) continue;
    // A name that ends in a folder separator (or `.`, `..`) is a folder: refused here, not
    // after the run when the file is written.
    const fs::path given(path);
    if (!given.has_filename() || given.filename() == "." || given.filename() == "..") {
      throw_bad_input(flag + " " + path, "names a folder, not a file", "name a file to write");
    }
    // Every existing folder on the way, as written (before `..` is resolved), must be a
    // folder: `--out s.json/m.json` and `--out s.json/../m.json` failed only when written,
    // after the whole run (validate replayed every step first).
    fs::path above;
    const fs::path absolute = fs::absolute(given, ec);
    for (auto part = absolute.begin(); !ec && part != absolute.end(); ++part) {
      if (std::next(part) == absolute.end()) break;  // the file itself
      above /= *part;
      const fs::file_status status = fs::status(above, ec);
      if (ec && !fs::exists(status)) {
        ec.clear();
        break;  // missing: created when written
      }
      if (fs::exists(status) && !fs::is_directory(status)) {
        throw_bad_input(flag + " " + path,
                        fmt::format("{} is a file, not a folder to write in", above.string()),
                        "name a file in a folder");
      }
    }
  }
  for (const auto& [flag, path] : outputs) {
    if (!path.empty()) require_creatable(flag, path);
  }
  // An output that is the file stderr goes to (`--out /dev/stdout > f 2>&1`, `--trace t.json
  // > t.json 2>&1`): renamed over it, the messages said since would be in the file replaced
  // (found by QA: the report, notes and `wrote` line were lost without a word).
  struct stat error_status {};
  if (::fstat(STDERR_FILENO, &error_status) == 0 && S_ISREG(error_status.st_mode)) {
    for (const auto& [flag, path] : outputs) {
      struct stat path_status {};
      if (!path.empty() && ::stat(path.c_str(), &path_status) == 0 &&
          path_status.st_dev == error_status.st_dev && path_status.st_ino == error_status.st_ino) {
        throw_bad_input(flag + " " + path,
                        "is the file stderr goes to: replaced by it, the command's messages "
                        "would be lost",
                        "send stderr elsewhere (2> FILE), or write the output to another file");
      }
    }
  }
  for (const auto& [flag, path] : outputs) {
    if (!path.empty() && names_stdout(path)) give_stdout_to(path);
  }
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].second.empty()) continue;
    for (std::size_t j = 0; j < i; ++j) {
      // A character device (/dev/null) takes both: neither overwrites the other (QA).
      if (!outputs[j].second.empty() && written[j] == written[i] &&
          !is_character_device(written[i])) {
        throw_bad_input(
            outputs[i].first + " " + outputs[i].second,
            fmt::format("is the file of {} too: one would overwrite the other", outputs[j].first),
            "give each output its own file");
      }
    }
  }
  for (const auto& [input_flag, input] : inputs) {
    if (input.empty()) continue;
    const fs::path read = resolved(input_flag, input);
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

void check_format_field(const nlohmann::json& json, const std::string& expected,
                        const std::string& where) {
  if (!json.is_object()) return;
  const auto format = json.find("format");
  if (format == json.end() || (format->is_string() && format->get<std::string>() == expected)) {
    return;
  }
  // Another of fsdptune's files: which flag takes it (found by QA: a hardware spec given to
  // --profile, a profile to --hardware, said only what the field held).
  static const std::map<std::string, std::string> kTakenBy = {
      {"fsdptune-hardware", "a hardware spec: give it to --hardware"},
      {"fsdptune-profile", "a cost profile: give it to --profile"},
      {"fsdptune-model", "a model file: give it to --model"},
      {"fsdptune-schedule",
       "a schedule: simulate --plan, report, validate and compare's first argument read it"},
      {"fsdptune-measured",
       "a measured file: compare's second argument and report --measured read it"}};
  const auto taken =
      format->is_string() ? kTakenBy.find(format->get<std::string>()) : kTakenBy.end();
  throw_bad_input(where, fmt::format("expected \"{}\", got {}", expected, format->dump()),
                  taken == kTakenBy.end() ? "" : "this is " + taken->second);
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

// Deeper than any file fsdptune reads (a schedule nests 7 levels, a Kineto trace's args a
// few more): nlohmann parses any depth, but copies and dumps a value recursively, so a
// file nested a million levels deep would overflow the stack in the error message that
// dumps it.
constexpr int kMaxJsonDepth = 256;

// nlohmann's message without its "[json.exception.parse_error.101] " prefix.
std::string parse_message(const std::string& what) {
  for (const char* kind : {"parse error", "number overflow"}) {
    const auto start = what.find(kind);
    if (start != std::string::npos) return what.substr(start);
  }
  return what;
}

// One pass over the text, before the document is built, for what nlohmann's parser lets
// through or reports without its place:
// - a syntax error, and a number out of a double's range (the parser throws out_of_range
//   for 1e400 without a position; a SAX handler is handed it with one);
// - nesting deeper than kMaxJsonDepth;
// - a key given twice in one object: nlohmann keeps the last silently, so a hand-edited
//   file whose first "tp" was meant would run with the second. The key is named as the
//   readers name fields ("job.tp", "compute[3].name").
// (A parse callback could check the last two, but makes nlohmann's parser some 30 times
// slower: minutes for a large Kineto trace.)
class JsonChecker final : public nlohmann::json_sax<nlohmann::json> {
 public:
  enum class Fault { kNone, kSyntax, kTooDeep, kDuplicateKey };
  Fault fault = Fault::kNone;
  std::size_t byte = 0;  // kSyntax: the 1-based offset nlohmann gives
  std::string message;   // kSyntax: nlohmann's; kDuplicateKey: the key's path

  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override { return open(false); }
  bool start_array(std::size_t) override { return open(true); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(string_t& name) override {
    Frame& frame = frames_.back();
    frame.key = name;
    if (frame.keys.insert(name).second) return true;
    fault = Fault::kDuplicateKey;
    message = path();
    return false;
  }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& e) override {
    fault = Fault::kSyntax;
    byte = position;
    message = parse_message(e.what());
    return false;
  }

 private:
  struct Frame {
    bool array = false;
    std::string key;        // an object's current key
    std::size_t index = 0;  // an array's current element
    std::set<std::string> keys;
  };

  bool open(bool array) {
    if (frames_.size() >= static_cast<std::size_t>(kMaxJsonDepth)) {
      fault = Fault::kTooDeep;
      return false;
    }
    frames_.push_back(Frame{array, {}, 0, {}});
    return true;
  }
  bool close() {
    frames_.pop_back();
    return value();
  }
  bool value() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
    return true;
  }

  std::string path() const {
    std::string text;
    for (const Frame& frame : frames_) {
      if (frame.array) {
        text += fmt::format("[{}]", frame.index);
      } else {
        if (!text.empty()) text += '.';
        text += frame.key;
      }
    }
    return text;
  }

  std::vector<Frame> frames_;
};

}  // namespace

nlohmann::json parse_json_text(const std::string& text, const std::string& source) {
  // nlohmann's lexer reads a NUL byte as the end of the input: a file of NULs was "unexpected
  // end of input" at 1:1, and text after a NUL would be ignored.
  if (const std::size_t nul = text.find('\0'); nul != std::string::npos) {
    throw_bad_input(text_position(text, nul + 1, source), "a NUL byte: not JSON text");
  }
  JsonChecker checker;
  nlohmann::json::sax_parse(text, &checker);
  switch (checker.fault) {
    case JsonChecker::Fault::kNone:
      return nlohmann::json::parse(text);
    case JsonChecker::Fault::kSyntax:
      // A number beyond a double (1e400) is valid JSON that no field takes: said as such
      // (carried QA note: "malformed JSON" for a well-formed file).
      if (checker.message.find("number overflow") != std::string::npos) {
        throw_bad_input(text_position(text, checker.byte, source),
                        fmt::format("a number out of range ({})", checker.message));
      }
      throw_bad_input(text_position(text, checker.byte, source),
                      fmt::format("malformed JSON ({})", checker.message));
    case JsonChecker::Fault::kTooDeep:
      // Well-formed JSON maybe, but deeper than any format of fsdptune (review: "malformed").
      throw_bad_input(source, fmt::format("nested deeper than {} levels (fsdptune's limit: no "
                                          "format of it nests so deep)",
                                          kMaxJsonDepth));
    case JsonChecker::Fault::kDuplicateKey:
      throw_bad_input(fmt::format("{}: field '{}'", source, checker.message), "given twice",
                      "keep one of the two");
  }
  // Not FSDPTUNE_CHECK(false, ...): at -O0 g++ does not see that it never returns.
  check_failed(__FILE__, __LINE__, "a JSON fault", "unhandled JSON fault");
}

nlohmann::json read_json_file(const std::string& path, std::int64_t max_bytes) {
  const std::string text = read_text_file(path, max_bytes);
  // PyTorch's trace handler writes `.json.gz` (found by QA: "1:4: a NUL byte").
  if (text.starts_with("\x1f\x8b")) {
    // gunzip -k refuses a name without .gz (found by QA): -c into a file of its own.
    const std::string out =
        path.ends_with(".gz") ? path.substr(0, path.size() - 3) : std::string("decompressed.json");
    throw_bad_input(
        path, "gzip-compressed: not JSON text",
        "decompress it first (gunzip -c " + shell_word(path) + " > " + shell_word(out) + ")");
  }
  return parse_json_text(text, path);
}

// Strings that are not UTF-8 (a file name from argv in another encoding) are written with
// U+FFFD where their bytes are not, rather than failing the whole output.
std::string dump_json(const nlohmann::json& json) {
  return json.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::int64_t json_int64(const nlohmann::json& value, const std::string& where) {
  if (value.is_number_unsigned() &&
      value.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) {
    throw_bad_input(where, fmt::format("is {}, more than 2^63 - 1", value.dump()));
  }
  return value.get<std::int64_t>();
}

bool json_integer_outside(const nlohmann::json& value, std::int64_t low, std::int64_t high) {
  if (!value.is_number_integer()) return false;
  if (value.is_number_unsigned()) {
    const auto number = value.get<std::uint64_t>();
    return number > static_cast<std::uint64_t>(INT64_MAX) ||
           static_cast<std::int64_t>(number) < low || static_cast<std::int64_t>(number) > high;
  }
  const auto number = value.get<std::int64_t>();
  return number < low || number > high;
}

std::optional<std::string> unknown_field(const nlohmann::json& object,
                                         const std::vector<std::string>& known) {
  for (const auto& item : object.items()) {
    if (std::find(known.begin(), known.end(), item.key()) == known.end()) return item.key();
  }
  return std::nullopt;
}

}  // namespace fsdptune
