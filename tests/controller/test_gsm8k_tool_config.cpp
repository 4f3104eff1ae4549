// configs/gsm8k_tool.yaml as users run it, scaled down: multi-turn GRPO on
// ../shared/data/gsm8k with the sandboxed Python tool, the real Qwen3 tokenizer and chat
// template (tools in the system prompt, Hermes tool calls), a random small Qwen3-shaped
// policy. And what `run` refuses before it starts: a tool file without its function, a
// chat template that ignores `tools`, a parser whose tokens the vocabulary lacks.
//
// Exits 77 (skip) where ../shared/data/gsm8k is absent, the Qwen3 tokenizer was not
// fetched (TANDEM_OFFLINE=1), or bubblewrap is not installed (the sandbox's own test
// says why it cannot run).
#include "core/files.h"
#include "tests/support/gsm8k_assets.h"
#include "tests/support/run_tandem.h"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

using namespace tandem;
using namespace tandem::testing;
namespace fs = std::filesystem;

namespace {

void skip_without_bwrap() {
  if (std::system("command -v bwrap > /dev/null 2>&1") != 0) {
    std::printf("skipped: bwrap (bubblewrap) is not installed: scripts/install_deps.sh installs it\n");
    std::exit(77);
  }
  // Installed, but this machine may not allow the namespaces a sandbox needs (a container
  // without user namespaces): test_sandbox says why; this run could not even start.
  if (std::system("bwrap --unshare-all --ro-bind / / true > /dev/null 2>&1") != 0) {
    std::printf("skipped: bwrap cannot create namespaces here (see the sandbox test's skip reason)\n");
    std::exit(77);
  }
}

std::vector<std::string> scaled_down(const std::string& model, const std::string& run_dir, const std::string& val) {
  return {"run", kSource + "/configs/gsm8k_tool.yaml", "--run-dir", run_dir,
          "--set", "model.path=" + model, "--set", "model.dtype=float32",
          "--set", "data.train=" + kGsm8k + "/train.jsonl", "--set", "data.val=" + val,
          "--set", "experiment.steps=2", "--set", "experiment.eval_every=2", "--set", "experiment.checkpoint_every=2",
          "--set", "data.batch_size=2", "--set", "algorithm.group_size=2", "--set", "rollout.max_new_tokens=8",
          "--set", "rollout.kv_cache_mb=64", "--set", "learner.mini_batches=1", "--set", "learner.micro_batch_size=4",
          "--set", "rollout.multi_turn.max_total_tokens=256", "--set", "data.max_prompt_length=700",
          "--set", "reward.0.workers=1", "--set", "logging.console=plain"};
}

}  // namespace

TEST_CASE("configs/gsm8k_tool.yaml trains 2 multi-turn GRPO steps with the sandboxed Python tool") {
  skip_unless_present();
  skip_without_bwrap();
  TempDir dir;
  const std::string d = dir.path();
  const std::string model = small_qwen3(d);
  std::ifstream test_split(kGsm8k + "/test.jsonl");
  std::ofstream val(d + "/val.jsonl");
  std::string line;
  for (int i = 0; i < 3 && std::getline(test_split, line); ++i) val << line << "\n";
  val.close();
  const std::string run_dir = d + "/run";
  const ExitStatus status = run_tandem(scaled_down(model, run_dir, d + "/val.jsonl"), d + "/run.out", 540);
  INFO(read_text(d + "/run.out"));
  REQUIRE(status.success());

  bool saw_training = false;
  for (const nlohmann::json& row : read_json_lines(run_dir + "/metrics.jsonl")) {
    if (!row.contains("reward/gsm8k")) continue;
    saw_training = true;
    for (const char* key : {"multi_turn/turns_mean", "multi_turn/tool_calls_mean", "multi_turn/tool_errors",
                            "multi_turn/parse_errors", "multi_turn/stop/eos", "multi_turn/stop/length",
                            "multi_turn/stop/max_turns", "multi_turn/kv_pinned_blocks_max",
                            "multi_turn/evicted_sessions"}) {
      CHECK_MESSAGE(row.contains(key), key);
    }
    CHECK(row["multi_turn/turns_mean"].get<double>() >= 1.0);
    double stops = 0;
    for (const auto& [key, value] : row.items()) {
      if (key.rfind("multi_turn/stop/", 0) == 0) stops += value.get<double>();
    }
    CHECK(stops == 4);  // every sample ended with one reason (2 prompts x 2 samples)
  }
  CHECK(saw_training);
  // The prompt shows the tool (Qwen3's template lists it in the system message); each
  // sample keeps its conversation with token spans and why it stopped.
  const std::vector<nlohmann::json> samples = read_json_lines(run_dir + "/samples.jsonl");
  REQUIRE_FALSE(samples.empty());
  const std::string prompt = samples[0]["prompt"].get<std::string>();
  CHECK(prompt.find("# Tools") != std::string::npos);
  CHECK(prompt.find("\"name\": \"python\"") != std::string::npos);
  CHECK(prompt.find("<tool_call>") != std::string::npos);
  for (const nlohmann::json& s : samples) {
    REQUIRE(s.contains("messages"));
    REQUIRE(s.contains("stop_reason"));
    REQUIRE_FALSE(s["messages"].empty());
    CHECK(s["messages"][0]["role"] == "assistant");
    CHECK(s["messages"][0]["begin"] == 0);
  }
  CHECK(fs::exists(run_dir + "/val_samples.jsonl"));
}

TEST_CASE("multi-turn configs are refused before anything starts, naming the key and what is wrong") {
  skip_unless_present();
  TempDir dir;
  const std::string d = dir.path();
  const std::string model = small_qwen3(d);
  std::ofstream(d + "/calc.py") << "def add(a: int, b: int):\n    \"\"\"Adds.\"\"\"\n    return a + b\n";
  std::ofstream(d + "/plain.jinja")
      << "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}";
  struct Case {
    std::vector<std::string> sets;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {{"tools=[{python: " + d + "/calc.py, function: calculator}]"}, "calc.py has no function calculator (its functions and classes: add)"},
      {{"tools=[{python: " + d + "/calc.py, function: add}]", "data.chat_template=" + d + "/plain.jinja"},
       "does not show the tools in a prompt"},
      {{"tools=[{python: " + d + "/calc.py, function: add}]", "rollout.multi_turn.tool_parser=nope"}, "nope"},
      {{"tools=[{http: \"http://127.0.0.1:9/tool\"}]"}, "tools.0.name: missing (required for http tools"},
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    const Case& c = cases[k];
    const std::string out_path = d + "/validate" + std::to_string(k) + ".out";
    std::vector<std::string> args = {"validate", kSource + "/configs/gsm8k_tool.yaml", "--set", "model.path=" + model,
                                     "--set", "data.train=" + kGsm8k + "/train.jsonl", "--set", "data.val=" + kGsm8k + "/test.jsonl",
                                     "--set", "rollout.multi_turn.max_total_tokens=256"};
    for (const std::string& s : c.sets) args.insert(args.end(), {"--set", s});
    const ExitStatus status = run_tandem(args, out_path, 120);
    const std::string out = read_text(out_path);
    INFO(c.expected << "\n" << out);
    CHECK(status.exit_code == 2);
    CHECK(out.find(c.expected) != std::string::npos);
  }
}
