// Test-only: running the `tandem` binary under test and reading what it wrote.
#pragma once

#include "core/files.h"
#include "core/process.h"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

namespace tandem::testing {

// The file's text, or "" while it does not exist yet.
inline std::string read_text(const std::string& path) { return read_file(path).value_or(""); }

// The rows of a run's metrics.jsonl (or any JSON-lines file), parsed.
inline std::vector<nlohmann::json> read_json_lines(const std::string& path) {
  std::vector<nlohmann::json> rows;
  std::istringstream lines(read_text(path));
  for (std::string line; std::getline(lines, line);) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

// Runs `tandem args...` with stdout and stderr appended to `output_path`.
inline ExitStatus run_tandem(const std::vector<std::string>& args, const std::string& output_path,
                             double timeout_s = 60) {
  std::vector<std::string> argv = {TANDEM_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  ChildProcess child = ChildProcess::spawn(argv, {output_path, false});
  auto status = child.wait_for(timeout_s);
  REQUIRE_MESSAGE(status.has_value(), "tandem did not finish in ", timeout_s, " s");
  return *status;
}

// The pid of the controller's worker `tandem worker --role ROLE --rank RANK` (from /proc), or 0.
inline int find_worker_pid(int controller, const std::string& role, int rank) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = read_text(entry.path() / "cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    const std::string stat = read_text(entry.path() / "stat");
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    std::string state;
    int ppid = 0;
    rest >> state >> ppid;
    if (ppid == controller && cmdline.find(" worker --role " + role + " --rank " + std::to_string(rank) + " ") !=
                                  std::string::npos) {
      return std::stoi(name);
    }
  }
  return 0;
}

}  // namespace tandem::testing
