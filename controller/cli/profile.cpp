// `tandem profile RUN_DIR [--step N]`: the critical path and idle shares of a traced step
// (logging.trace_every writes RUN_DIR/traces/step_<N>.json).
#include "controller/cli/cli.h"
#include "controller/observe/step_trace.h"
#include "controller/observe/trace_profile.h"
#include "core/error.h"
#include "core/files.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <regex>

namespace tandem {
namespace {

// The newest step with a trace, or -1.
int64_t newest_traced_step(const std::string& run_dir) {
  int64_t newest = -1;
  std::error_code error;
  const std::regex name("step_([0-9]+)\\.json");
  for (const auto& entry : std::filesystem::directory_iterator(run_dir + "/traces", error)) {
    std::smatch m;
    const std::string file = entry.path().filename().string();
    if (std::regex_match(file, m, name)) newest = std::max<int64_t>(newest, std::stoll(m[1]));
  }
  return newest;
}

}  // namespace

int cli_profile(const ProfileArgs& args) {
  if (!std::filesystem::is_regular_file(args.run_dir + "/config.yaml")) {
    throw UsageError(fmt::format("tandem profile: {} is not a run directory (no config.yaml in it)", args.run_dir));
  }
  const int64_t step = args.step >= 0 ? args.step : newest_traced_step(args.run_dir);
  if (step < 0) {
    throw UsageError(fmt::format("tandem profile: {} has no traces: run with logging.trace_every: N to trace every "
                                 "N-th step",
                                 args.run_dir));
  }
  const std::string path = step_trace_path(args.run_dir, step);
  const std::optional<std::string> text = read_file(path);
  if (!text) {
    throw UsageError(fmt::format("tandem profile: no trace of step {} ({} is missing; logging.trace_every says which "
                                 "steps are traced)",
                                 step, path));
  }
  nlohmann::json trace;
  try {
    trace = nlohmann::json::parse(*text);
  } catch (const std::exception& e) {
    throw Error(fmt::format("{}: not JSON: {}", path, e.what()));
  }
  try {
    std::fputs(describe_step_profile(profile_step_trace(trace)).c_str(), stdout);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", path, e.what()));
  }
  std::printf("\ntrace: %s (open it in https://ui.perfetto.dev or chrome://tracing)\n", path.c_str());
  return 0;
}

}  // namespace tandem
