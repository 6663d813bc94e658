#include "fsdptune/error.hpp"

#include <cstdio>
#include <cstdlib>
#include <utility>

namespace fsdptune {
namespace {

std::string compose(const std::string& where, const std::string& what) {
  return where.empty() ? what : where + ": " + what;
}

}  // namespace

Error::Error(ErrorKind kind, std::string where, std::string what, std::string hint)
    : std::runtime_error(compose(where, what)),
      kind_(kind),
      where_(std::move(where)),
      message_(std::move(what)),
      hint_(std::move(hint)) {}

int Error::exit_code() const {
  switch (kind_) {
    case ErrorKind::kBadInput:
      return 2;
    case ErrorKind::kDoesNotFit:
      return 3;
    case ErrorKind::kRuntime:
      return 1;
  }
  return 1;
}

std::string error_report(const Error& error) {
  std::string report = "fsdptune: error: ";
  report += error.what();
  report += '\n';
  if (!error.hint().empty()) {
    report += "  hint: ";
    report += error.hint();
    report += '\n';
  }
  return report;
}

void throw_bad_input(std::string where, std::string what, std::string hint) {
  throw Error(ErrorKind::kBadInput, std::move(where), std::move(what), std::move(hint));
}

void throw_runtime(std::string where, std::string what, std::string hint) {
  throw Error(ErrorKind::kRuntime, std::move(where), std::move(what), std::move(hint));
}

void check_failed(const char* file, int line, const char* condition, const std::string& message) {
  std::fprintf(stderr, "fsdptune: internal error at %s:%d: check '%s' failed: %s\n", file, line,
               condition, message.c_str());
  std::abort();
}

}  // namespace fsdptune
