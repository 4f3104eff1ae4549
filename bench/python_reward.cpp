// Python reward throughput: calls/s of tandem's reward pool (embedded-CPython worker
// processes) with 1 and N workers, against the same function called in a plain Python
// loop in one interpreter (what a single-process trainer does), measured in the same run.
//
//   build/bench/python_reward [REWARD.py FUNCTION] [--samples N]
// Default: configs/rewards/gsm8k.py compute_score on GSM8K-shaped responses, and a
// "costly" reward (tests/python/bench_rewards.py: ~2 ms of CPU per call, like a
// sympy/math-verify check). Prints one JSON line per (reward, workers).
#include "rewards/python/pool.h"
#include "core/files.h"
#include "core/process.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

using namespace tandem;

namespace {

using Clock = std::chrono::steady_clock;

struct Case {
  std::string file, function, label;
};

std::vector<std::string> responses(size_t count) {
  std::vector<std::string> out;
  for (size_t i = 0; i < count; ++i) {
    out.push_back(fmt::format("Natalia sold {} clips in April and half as many in May, so {} + {} = {}.\n#### {}", 48 + i,
                              48 + i, (48 + i) / 2, 48 + i + (48 + i) / 2, i % 2 ? 72 : 48 + i + (48 + i) / 2));
  }
  return out;
}

// The plain-Python reference: calls/s of `function` over the same inputs in one process.
double python_loop_rate(const Case& c, const std::vector<std::string>& texts) {
  TempDir dir;
  const std::string inputs = dir.path() + "/inputs.json", out = dir.path() + "/rate.txt";
  std::ofstream(inputs) << nlohmann::json(texts).dump();
  const std::string script = fmt::format(
      "import importlib.util, json, sys, time\n"
      "spec = importlib.util.spec_from_file_location('r', '{}')\n"
      "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
      "f = getattr(m, '{}'); texts = json.load(open('{}'))\n"
      "start = time.perf_counter()\n"
      "for t in texts: f('gsm8k', t, '72', None)\n"
      "print(len(texts) / (time.perf_counter() - start))\n",
      c.file, c.function, inputs);
  std::ofstream(dir.path() + "/loop.py") << script;
  ChildProcess p = ChildProcess::spawn({"/usr/bin/python3", dir.path() + "/loop.py"}, {out, true});
  const auto status = p.wait_for(600);
  if (!status || !status->success()) return 0;
  return std::stod(read_file(out).value_or("0"));
}

}  // namespace

int main(int argc, char** argv) {
  size_t samples = 2048;
  std::vector<Case> cases;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--samples" && i + 1 < argc) {
      samples = std::stoul(argv[++i]);
    } else if (i + 1 < argc) {
      cases.push_back({arg, argv[++i], "custom"});
    }
  }
  if (cases.empty()) {
    cases = {{std::string(TANDEM_SOURCE_DIR) + "/configs/rewards/gsm8k.py", "compute_score", "gsm8k"},
             {std::string(TANDEM_SOURCE_DIR) + "/tests/python/bench_rewards.py", "costly", "costly_2ms"}};
  }
  const std::vector<std::string> texts = responses(samples);
  const std::map<std::string, std::string> row = {{"answer", "72"}, {"data_source", "gsm8k"}};
  const std::string prompt = "question";
  const std::vector<int32_t> ids = {1};
  std::vector<RewardInput> inputs;
  for (const std::string& t : texts) inputs.push_back({prompt, t, ids, row});
  const int64_t cores = static_cast<int64_t>(std::thread::hardware_concurrency());

  for (const Case& c : cases) {
    const double reference = python_loop_rate(c, texts);
    for (int64_t workers : {int64_t{1}, std::max<int64_t>(2, cores)}) {
      RewardConfig config;
      config.name = c.label;
      config.python = c.file;
      config.function = c.function;
      config.workers = workers;
      PythonRewardPool pool(config, 0, TANDEM_BINARY);
      pool.score(std::vector<RewardInput>(inputs.begin(), inputs.begin() + 64));  // warm-up
      const Clock::time_point start = Clock::now();
      const std::vector<RewardOutcome> outcomes = pool.score(inputs);
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      size_t errors = 0;
      for (const RewardOutcome& o : outcomes) errors += !o.error.empty();
      const double rate = static_cast<double>(inputs.size()) / seconds;
      std::printf("%s\n", nlohmann::json{{"bench", "python_reward"},
                                         {"reward", c.label},
                                         {"workers", workers},
                                         {"samples", inputs.size()},
                                         {"errors", errors},
                                         {"calls_per_s", rate},
                                         {"reference", "plain python loop, one process"},
                                         {"reference_calls_per_s", reference},
                                         {"ratio", reference > 0 ? rate / reference : 0.0}}
                              .dump()
                              .c_str());
      std::fflush(stdout);
    }
  }
  return 0;
}
