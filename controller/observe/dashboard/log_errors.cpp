#include "controller/observe/dashboard/log_errors.h"

#include "controller/observe/dashboard/jsonl_files.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <filesystem>

namespace tandem::dashboard {
namespace {

constexpr size_t kTimeChars = 23;       // "2026-11-24 07:03:19.858"
constexpr size_t kMaxLineChars = 2000;  // a line longer than this is shortened on the page
constexpr size_t kMaxLinesPerLog = 20000;

bool starts_with_time(const std::string& line) {
  return line.size() > kTimeChars && std::isdigit(static_cast<unsigned char>(line[0])) && line[4] == '-' &&
         line[7] == '-' && line[10] == ' ' && line[13] == ':' && line[16] == ':' && line[19] == '.' &&
         line[kTimeChars] == ' ';
}

bool says_something_failed(const std::string& line) {
  std::string lower(line.size(), ' ');
  std::transform(line.begin(), line.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  static const std::array<const char*, 6> words = {"error", "fatal", "traceback", "terminate called", "abort",
                                                   "segmentation fault"};
  return std::any_of(words.begin(), words.end(), [&](const char* w) { return lower.find(w) != std::string::npos; });
}

std::string shortened(std::string text) {
  if (text.size() > kMaxLineChars) {
    text.resize(kMaxLineChars);
    text += "...";
  }
  return text;
}

void collect_from_log(const std::filesystem::path& path, size_t max_bytes, std::vector<LogErrorLine>& out) {
  const std::string name = path.filename().string();
  std::string last_time;
  for (const std::string& line : read_tail_lines(path.string(), kMaxLinesPerLog, max_bytes)) {
    if (starts_with_time(line)) {
      last_time = line.substr(0, kTimeChars);
      const size_t level_end = line.find(' ', kTimeChars + 1);
      if (level_end == std::string::npos) continue;
      const std::string level = line.substr(kTimeChars + 1, level_end - kTimeChars - 1);
      if (level != "ERROR" && level != "WARN") continue;
      const size_t text_start = line.find_first_not_of(' ', level_end);
      out.push_back({last_time, level, name, shortened(text_start == std::string::npos ? "" : line.substr(text_start))});
    } else if (says_something_failed(line)) {
      out.push_back({last_time, "OUTPUT", name, shortened(line)});
    }
  }
}

}  // namespace

std::vector<LogErrorLine> read_log_errors(const std::string& logs_dir, size_t count, size_t max_bytes_per_log) {
  std::vector<LogErrorLine> lines;
  std::error_code ec;
  std::vector<std::filesystem::path> logs;
  for (const auto& entry : std::filesystem::directory_iterator(logs_dir, ec)) {
    if (entry.path().extension() == ".log" && entry.is_regular_file(ec)) logs.push_back(entry.path());
  }
  std::sort(logs.begin(), logs.end());
  for (const auto& path : logs) collect_from_log(path, max_bytes_per_log, lines);
  // Times sort as text; a stable sort keeps each file's own order among equal times.
  std::stable_sort(lines.begin(), lines.end(), [](const LogErrorLine& a, const LogErrorLine& b) { return a.time < b.time; });
  if (lines.size() > count) lines.erase(lines.begin(), lines.end() - static_cast<ptrdiff_t>(count));
  return lines;
}

}  // namespace tandem::dashboard
