#include "core/log.h"

#include "core/error.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace tandem::log {
namespace {

struct State {
  std::mutex mutex;
  Options options;
  std::FILE* file = nullptr;
};

State& state() {
  static State s;
  return s;
}

const char* level_name(Level level) {
  switch (level) {
    case Level::debug: return "DEBUG";
    case Level::info: return "INFO";
    case Level::warn: return "WARN";
    case Level::error: return "ERROR";
    case Level::off: return "OFF";
  }
  return "?";
}

std::string timestamp() {
  auto now = std::chrono::system_clock::now();
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  std::time_t seconds = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  localtime_r(&seconds, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%d %H:%M:%S", &tm);
  return fmt::format("{}.{:03d}", buffer, static_cast<int>(ms % 1000));
}

}  // namespace

Level parse_level(const std::string& name) {
  if (name == "debug") return Level::debug;
  if (name == "info") return Level::info;
  if (name == "warn") return Level::warn;
  if (name == "error") return Level::error;
  if (name == "off") return Level::off;
  throw UsageError(fmt::format("unknown log level \"{}\" (allowed: debug, info, warn, error, off)", name));
}

void init(const Options& options) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.file) std::fclose(s.file);
  s.file = nullptr;
  s.options = options;
  if (!options.file_path.empty()) {
    s.file = std::fopen(options.file_path.c_str(), "a");
    if (!s.file) throw Error(fmt::format("cannot open log file {}", options.file_path));
  }
}

bool enabled(Level level) {
  const Options& o = state().options;
  return (state().file && level >= o.file_level) || (o.console && level >= o.console_level);
}

void write(Level level, const std::string& message) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  std::string line = fmt::format("{} {:5} [{}] {}\n", timestamp(), level_name(level), s.options.tag, message);
  if (s.file && level >= s.options.file_level) {
    std::fputs(line.c_str(), s.file);
    std::fflush(s.file);
  }
  if (s.options.console && level >= s.options.console_level) {
    // The console view is concise: no timestamp, the level only when it matters.
    std::string console = level >= Level::warn
        ? fmt::format("{}: {}\n", level == Level::warn ? "warning" : "error", message)
        : message + "\n";
    std::fputs(console.c_str(), stderr);
  }
}

}  // namespace tandem::log
