// The one error policy of tandem (see STYLE.md "Errors").
//
// - Broken invariants and bad input throw tandem::Error (or a subclass) carrying
//   file:line and a message; TANDEM_CHECK is the usual way to raise one.
// - Library code never calls exit() or abort(): errors travel up to the CLI, which
//   maps them to exit codes (0 done, 1 run failed, 2 bad config or command line).
// - Errors that concern a worker carry its role and rank (WorkerFailure in controller/).
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace tandem {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// The user's input (config, command line) is wrong; nothing was started. Exit code 2.
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& message) : Error(message) {}
};

[[noreturn]] void throw_check_failure(const char* file, int line, const char* condition,
                                      const std::string& message);

}  // namespace tandem

// TANDEM_CHECK(cond, "fmt {}", args...): throws tandem::Error naming file, line and condition.
#define TANDEM_CHECK(condition, ...)                                                  \
  do {                                                                                \
    if (!(condition)) {                                                               \
      ::tandem::throw_check_failure(__FILE__, __LINE__, #condition,                   \
                                    ::fmt::format(__VA_ARGS__));                      \
    }                                                                                 \
  } while (0)
