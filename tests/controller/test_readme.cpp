// The README's walkthrough, exactly as written: its dataset, reward plugin, build command
// and config are read out of README.md (the blocks after `<!-- file: NAME -->` and
// `<!-- command: NAME -->` markers), and its commands run in that order from a fresh
// directory with `tandem` on PATH. A README edit that breaks a new user's path fails here.
#include "core/files.h"
#include "core/process.h"
#include "tests/support/run_tandem.h"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

using namespace tandem;
using namespace tandem::testing;
namespace fs = std::filesystem;

namespace {

// The fenced block that follows `marker` in `text` (without its fence lines).
std::string block_after(const std::string& text, const std::string& marker) {
  const size_t at = text.find(marker);
  REQUIRE_MESSAGE(at != std::string::npos, "README.md has no " << marker);
  const size_t fence = text.find("```", at + marker.size());
  REQUIRE(fence != std::string::npos);
  const size_t body = text.find('\n', fence) + 1;
  const size_t end = text.find("\n```", body - 1);
  REQUIRE(end != std::string::npos);
  return text.substr(body, end - body + 1);
}

// Runs a shell command line in `dir` with `tandem` on PATH; output appended to `out`.
ExitStatus shell(const std::string& dir, const std::string& command, const std::string& out, double timeout_s = 240) {
  const std::string line = fmt::format("cd '{}' && export PATH='{}/bin':\"$PATH\" && {}", dir, dir, command);
  ChildProcess child = ChildProcess::spawn({"/bin/sh", "-c", line}, {out, false});
  auto status = child.wait_for(timeout_s);
  REQUIRE_MESSAGE(status.has_value(), command << " did not finish in " << timeout_s << " s");
  return *status;
}

}  // namespace

TEST_CASE("the README's own dataset, reward plugin, config, run, resume, extend, plot and generate work as written") {
  const std::string readme = read_file(TANDEM_SOURCE_DIR "/README.md").value_or("");
  REQUIRE(!readme.empty());
  TempDir dir;
  const std::string d = dir.path();
  fs::create_directories(d + "/bin");
  fs::create_symlink(TANDEM_BINARY, d + "/bin/tandem");
  for (const char* name : {"my_data.jsonl", "my_reward.cpp", "my_config.yaml"}) {
    std::ofstream(d + "/" + name) << block_after(readme, fmt::format("<!-- file: {} -->", name));
  }
  const std::string build_plugin = block_after(readme, "<!-- command: build-plugin -->");
  CHECK(build_plugin.find("tandem plugin-flags") != std::string::npos);
  const std::string out = d + "/out.txt";
  INFO(read_text(out));
  REQUIRE(shell(d, build_plugin, out).exit_code == 0);
  REQUIRE(fs::exists(d + "/libmy_reward.so"));

  // The commands, as the README shows them (each must appear there verbatim).
  const std::vector<std::pair<std::string, int>> commands = {
      {"tandem validate my_config.yaml", 0},
      {"tandem run my_config.yaml --run-dir runs/first", 0},
      {"tandem resume runs/first", 0},
      {"tandem resume runs/first --set experiment.steps=9", 0},
      {"tandem plot runs/first", 0},
      {"tandem generate --model runs/first/policy --prompt \"2+3=\"", 0},
  };
  for (const auto& [command, expected] : commands) {
    INFO(command);
    CHECK_MESSAGE(readme.find(command) != std::string::npos, "README.md does not show: " << command);
    fs::remove(out);
    const ExitStatus status = shell(d, command, out);
    INFO(read_text(out));
    REQUIRE(status.exit_code == expected);
    if (command == "tandem resume runs/first") CHECK(read_text(out).find("is finished") != std::string::npos);
  }
  const std::vector<nlohmann::json> metrics = read_json_lines(d + "/runs/first/metrics.jsonl");
  REQUIRE(metrics.size() == 9);
  // The plugin's reward ran: its weighted mean and its part are metrics.
  for (const nlohmann::json& row : metrics) {
    CHECK(row.contains("reward/short_answer"));
    bool has_part = false;
    for (const auto& [key, value] : row.items()) has_part = has_part || key.rfind("reward/short_answer/", 0) == 0;
    CHECK(has_part);
  }
  CHECK(fs::exists(d + "/runs/first/plots/index.html"));
  CHECK(fs::exists(d + "/runs/first/policy/model.safetensors"));
}
