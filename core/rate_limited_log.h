// Warnings about what strangers send (garbage frames, forged messages, refused
// handshakes) must not let them flood the log: the first few are logged in full, then at
// most one summary line per interval counts the rest.
#pragma once

#include "core/log.h"

#include <chrono>
#include <cstdint>
#include <string>

namespace tandem {

class RateLimitedWarning {
 public:
  // `what`: the summary's subject ("control channel: rejected messages").
  explicit RateLimitedWarning(std::string what, int64_t in_full = 5, double interval_s = 10.0)
      : what_(std::move(what)), in_full_(in_full), interval_(std::chrono::duration<double>(interval_s)) {}

  // Logs `message` in full while the budget lasts; afterwards counts it, and logs a summary
  // (how many since the last line, and the latest message) once per interval.
  void warn(const std::string& message) {
    const auto now = std::chrono::steady_clock::now();
    if (logged_ < in_full_) {
      ++logged_;
      log::warn("{}{}", message, logged_ == in_full_ ? " (further ones are summarised)" : "");
      last_line_ = now;
      return;
    }
    ++suppressed_;
    if (now - last_line_ < interval_) return;
    log::warn("{}: {} more in the last {:.0f} s; the latest: {}", what_, suppressed_,
              std::chrono::duration<double>(now - last_line_).count(), message);
    suppressed_ = 0;
    last_line_ = now;
  }

 private:
  std::string what_;
  int64_t in_full_;
  std::chrono::duration<double> interval_;
  int64_t logged_ = 0;
  int64_t suppressed_ = 0;
  std::chrono::steady_clock::time_point last_line_{};
};

}  // namespace tandem
