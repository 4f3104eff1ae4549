// The error and warning lines of a run's logs (logs/*.log), for the dashboard's errors
// panel. tandem's own lines read "YYYY-MM-DD HH:MM:SS.mmm LEVEL [tag] message"
// (core/log.h): those at WARN and ERROR are kept. Lines in another format (a crash
// message from the C++ runtime, a Python traceback of a reward) are kept when they say
// error, fatal, traceback, terminate, abort or segmentation fault; they take the time of
// the tandem line before them in the same file.
#pragma once

#include <string>
#include <vector>

namespace tandem::dashboard {

struct LogErrorLine {
  std::string time;   // "YYYY-MM-DD HH:MM:SS.mmm", or "" before the file's first dated line
  std::string level;  // ERROR | WARN | OUTPUT (a line in another format)
  std::string log;    // the file name, e.g. "rollout-1.log"
  std::string text;   // the rest of the line: "[tag] message"
};

// The newest `count` such lines over every log of `logs_dir`, oldest first. Only the last
// `max_bytes_per_log` of each log are read.
std::vector<LogErrorLine> read_log_errors(const std::string& logs_dir, size_t count, size_t max_bytes_per_log);

}  // namespace tandem::dashboard
