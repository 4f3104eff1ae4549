// Process-wide logging: one line per event, "TIME LEVEL [tag] message".
//
// Every process writes its full log to one file (controller: logs/controller-0.log;
// workers: their stderr, which the launcher points at logs/<role>-<rank>.log) and
// the controller also prints a concise console view (warnings and above, plus what
// the CLI prints on purpose). Thread-safe: one mutex around each line.
#pragma once

#include <fmt/format.h>

#include <string>

namespace tandem::log {

enum class Level { debug = 0, info = 1, warn = 2, error = 3, off = 4 };

// Parses "debug" | "info" | "warn" | "error" | "off"; throws UsageError otherwise.
Level parse_level(const std::string& name);

struct Options {
  std::string tag = "tandem";        // e.g. "controller-0", "rollout-3"
  std::string file_path;             // empty: no file sink
  Level file_level = Level::debug;
  bool console = true;               // stderr sink
  Level console_level = Level::warn;
};

void init(const Options& options);
void write(Level level, const std::string& message);
bool enabled(Level level);

template <class... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::debug)) write(Level::debug, fmt::format(f, std::forward<Args>(args)...));
}
template <class... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::info)) write(Level::info, fmt::format(f, std::forward<Args>(args)...));
}
template <class... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::warn)) write(Level::warn, fmt::format(f, std::forward<Args>(args)...));
}
template <class... Args>
void error(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::error)) write(Level::error, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace tandem::log
