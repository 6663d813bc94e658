// The one error type of fsdptune (STYLE.md rule 5).
//
// Expected failures -- a bad file, an invalid configuration, a plan that does not fit in
// memory, a CUDA/NCCL/MPI failure -- are thrown as fsdptune::Error. Each carries *where*
// (a file, a field, a flag, a line), *what* went wrong and, when there is one, *what to
// do*. `main` maps the kind to the process exit code. Broken invariants are not Errors:
// they abort with FSDPTUNE_CHECK.
#pragma once

#include <stdexcept>
#include <string>

namespace fsdptune {

enum class ErrorKind {
  kBadInput,    // bad file, field, flag or value: exit 2
  kDoesNotFit,  // nothing fits under the memory limit (with --require-fit / tune): exit 3
  kRuntime,     // hardware, MPI, NCCL, CUDA or I/O failure at run time: exit 1
};

class Error : public std::runtime_error {
 public:
  // `where` names the file/field/flag at fault (may be empty), `what` says what is wrong,
  // `hint` (may be empty) says what to do about it.
  Error(ErrorKind kind, std::string where, std::string what, std::string hint = "");

  ErrorKind kind() const { return kind_; }
  const std::string& where() const { return where_; }
  const std::string& message() const { return message_; }
  const std::string& hint() const { return hint_; }
  // 2 for kBadInput, 3 for kDoesNotFit, 1 for kRuntime.
  int exit_code() const;
  // An error every MPI rank raised alike, which one rank (rank 0) prints: on the others
  // `main` exits with its code and prints nothing (agree_on_errors).
  void mark_printed_by_another_rank() { printed_by_another_rank_ = true; }
  bool printed_by_another_rank() const { return printed_by_another_rank_; }

 private:
  ErrorKind kind_;
  std::string where_;
  std::string message_;
  std::string hint_;
  bool printed_by_another_rank_ = false;
};

// What `main` prints for `error`: "fsdptune: error: <where>: <what>\n" and, when there is
// one, "  hint: <hint>\n".
std::string error_report(const Error& error);

// Shorthands for the common kinds.
[[noreturn]] void throw_bad_input(std::string where, std::string what, std::string hint = "");
[[noreturn]] void throw_runtime(std::string where, std::string what, std::string hint = "");

// Aborts with file:line and the message when an internal invariant is broken.
[[noreturn]] void check_failed(const char* file, int line, const char* condition,
                               const std::string& message);

}  // namespace fsdptune

#define FSDPTUNE_CHECK(condition, message)                                 \
  do {                                                                     \
    if (!(condition)) {                                                    \
      ::fsdptune::check_failed(__FILE__, __LINE__, #condition, (message)); \
    }                                                                      \
  } while (false)
