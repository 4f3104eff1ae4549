// Test-only: running the `tandem` binary under test and reading what it wrote.
#pragma once

#include "core/files.h"
#include "core/process.h"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

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

}  // namespace tandem::testing
