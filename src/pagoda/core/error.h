// Errors that reach the user, and internal invariant checks.
//
// A user-facing failure throws pagoda::Error with a message written for the user and the process exit
// status it maps to: 2 for configuration errors (bad options, values, files), 1 for everything else.
// PAGODA_CHECK guards internal invariants and reports file and line.
#pragma once

#include <stdexcept>
#include <string>

#include "pagoda/core/strings.h"

namespace pagoda {

enum class ErrorKind { kConfig, kRuntime, kInternal };

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string message) : std::runtime_error(std::move(message)), kind_(kind) {}
  ErrorKind kind() const { return kind_; }
  int exit_code() const { return kind_ == ErrorKind::kConfig ? 2 : 1; }

 private:
  ErrorKind kind_;
};

// Bad user input: options, values, config files. Exit status 2.
template <typename... Args>
[[noreturn]] void throw_config_error(const Args&... args) {
  throw Error(ErrorKind::kConfig, str_cat(args...));
}

// A failure at run time that the user can act on (a missing file, no valid backend). Exit status 1.
template <typename... Args>
[[noreturn]] void throw_runtime_error(const Args&... args) {
  throw Error(ErrorKind::kRuntime, str_cat(args...));
}

[[noreturn]] void check_failed(const char* file, int line, const char* cond, const std::string& msg);

}  // namespace pagoda

#define PAGODA_CHECK(cond, ...)                                                              \
  do {                                                                                       \
    if (!(cond)) ::pagoda::check_failed(__FILE__, __LINE__, #cond, ::pagoda::str_cat(__VA_ARGS__)); \
  } while (0)
