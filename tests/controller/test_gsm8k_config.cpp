// configs/gsm8k.yaml as users run it, scaled down: GRPO on ../shared/data/gsm8k with the
// real Qwen3 tokenizer and chat template, a random small Qwen3-shaped policy
// (`tandem init-model --config`), the Python reward configs/rewards/gsm8k.py in worker
// processes, and evaluation on validation rows; then the same policy as a GGUF file.
//
// Exits 77 (skip) where ../shared/data/gsm8k is absent (a user's clone) or the Qwen3
// tokenizer was not fetched under TANDEM_OFFLINE=1.
#include "core/files.h"
#include "tests/support/gsm8k_assets.h"
#include "tests/support/run_tandem.h"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

using namespace tandem;
using namespace tandem::testing;
namespace fs = std::filesystem;

namespace {

void write_text(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

std::string output_of(const std::string& path) { return read_text(path); }

}  // namespace

TEST_CASE("configs/gsm8k.yaml trains 2 GRPO steps on GSM8K with Qwen3's chat template and the Python reward") {
  skip_unless_present();
  TempDir dir;
  const std::string d = dir.path();
  const std::string model = small_qwen3(d);
  CHECK(fs::exists(model + "/tokenizer_config.json"));  // the chat template came along
  // Evaluation on the first rows of the real test split (all 1319 would take minutes on CPU).
  std::ifstream test_split(kGsm8k + "/test.jsonl");
  std::ofstream val(d + "/val.jsonl");
  std::string line;
  for (int i = 0; i < 4 && std::getline(test_split, line); ++i) val << line << "\n";
  val.close();

  const std::string run_dir = d + "/run";
  const std::vector<std::string> args = {
      "run", kSource + "/configs/gsm8k.yaml", "--run-dir", run_dir,
      "--set", "model.path=" + model, "--set", "model.dtype=float32",
      "--set", "data.train=" + kGsm8k + "/train.jsonl", "--set", "data.val=" + d + "/val.jsonl",
      "--set", "experiment.steps=2", "--set", "experiment.eval_every=2", "--set", "experiment.checkpoint_every=2",
      "--set", "data.batch_size=2", "--set", "algorithm.group_size=2", "--set", "rollout.max_new_tokens=8",
      "--set", "rollout.kv_cache_mb=64", "--set", "learner.mini_batches=1", "--set", "learner.micro_batch_size=4",
      "--set", "reward.0.workers=2", "--set", "logging.console=plain"};
  const ExitStatus status = run_tandem(args, d + "/run.out", 540);
  INFO(output_of(d + "/run.out"));
  REQUIRE(status.success());

  const std::vector<nlohmann::json> metrics = read_json_lines(run_dir + "/metrics.jsonl");
  REQUIRE(metrics.size() >= 3);  // step 0 (evaluation before training), steps 1 and 2
  bool saw_training = false, saw_eval = false;
  for (const nlohmann::json& row : metrics) {
    if (row.contains("reward/gsm8k")) {
      saw_training = true;
      CHECK(row.contains("reward/gsm8k/format"));
      CHECK(row.contains("reward/gsm8k/acc"));
      CHECK(row["reward/mean"].get<double>() >= 0.0);
      // Samples were streamed to the reward while the rest generated; the share of
      // scoring time that hid under generation is reported.
      const double hidden = row.at("perf/reward_hidden_share").get<double>();
      CHECK((hidden >= 0.0 && hidden <= 1.0));
      CHECK(row.at("time/reward_hidden_s").get<double>() >= 0.0);
    }
    if (row.contains("val/accuracy")) {
      saw_eval = true;
      CHECK(row.contains("val/gsm8k"));
    }
  }
  CHECK(saw_training);
  CHECK(saw_eval);
  // The prompts were rendered: system message, the question as the user's, the
  // assistant's turn opened (Qwen3's template).
  const std::vector<nlohmann::json> samples = read_json_lines(run_dir + "/samples.jsonl");
  REQUIRE_FALSE(samples.empty());
  const std::string prompt = samples[0]["prompt"].get<std::string>();
  CHECK(prompt.rfind("<|im_start|>system\nSolve the math problem step by step.", 0) == 0);
  CHECK(prompt.find("<|im_end|>\n<|im_start|>user\n") != std::string::npos);
  CHECK(prompt.size() > 40);
  CHECK(prompt.substr(prompt.size() - 22) == "<|im_start|>assistant\n");
  CHECK(fs::exists(run_dir + "/val_samples.jsonl"));
  CHECK(fs::exists(run_dir + "/logs/reward-0-gsm8k.log"));

  // The same policy as a GGUF file (tokenizer and chat template inside it, nothing
  // beside it) trains with the same config: what a user with a downloaded .gguf does.
  const std::string gguf_dir = d + "/gguf";
  fs::create_directories(gguf_dir);
  REQUIRE(run_tandem({"convert", model, gguf_dir + "/policy.gguf", "--to", "gguf"}, d + "/convert.out").success());
  std::vector<std::string> gguf_args = args;
  for (size_t i = 0; i < gguf_args.size(); ++i) {
    if (gguf_args[i] == run_dir) gguf_args[i] = d + "/run_gguf";
    if (gguf_args[i] == "model.path=" + model) gguf_args[i] = "model.path=" + gguf_dir + "/policy.gguf";
    if (gguf_args[i] == "experiment.steps=2") gguf_args[i] = "experiment.steps=1";
    if (gguf_args[i] == "experiment.eval_every=2") gguf_args[i] = "experiment.eval_every=1";
  }
  const ExitStatus gguf_status = run_tandem(gguf_args, d + "/run_gguf.out", 540);
  INFO(output_of(d + "/run_gguf.out"));
  REQUIRE(gguf_status.success());
  const std::vector<nlohmann::json> gguf_samples = read_json_lines(d + "/run_gguf/samples.jsonl");
  REQUIRE_FALSE(gguf_samples.empty());
  CHECK(gguf_samples[0]["prompt"].get<std::string>().rfind("<|im_start|>system\n", 0) == 0);
  bool gguf_eval = false;
  for (const nlohmann::json& row : read_json_lines(d + "/run_gguf/metrics.jsonl")) gguf_eval |= row.contains("val/accuracy");
  CHECK(gguf_eval);
}

TEST_CASE("verl's layout trains as it is: message-list prompts, reward_model.ground_truth, data_source, extra_info") {
  skip_unless_present();
  TempDir dir;
  const std::string d = dir.path();
  const std::string model = small_qwen3(d);
  // GSM8K rows rewritten as verl's preprocessing writes them (its parquet, as JSONL).
  std::ifstream train(kGsm8k + "/train.jsonl");
  std::ofstream verl(d + "/verl.jsonl");
  std::string line;
  for (int i = 0; i < 8 && std::getline(train, line); ++i) {
    const nlohmann::json row = nlohmann::json::parse(line);
    const std::string answer = row["answer"].get<std::string>();
    std::string number = answer.substr(answer.rfind("####") + 4);
    number.erase(0, number.find_first_not_of(' '));
    verl << nlohmann::json{{"data_source", "openai/gsm8k"},
                           {"prompt", {{{"role", "user"}, {"content", row["question"].get<std::string>() +
                                                                          " Let's think step by step and output "
                                                                          "the final answer after \"####\"."}}}},
                           {"ability", "math"},
                           {"reward_model", {{"style", "rule"}, {"ground_truth", number}}},
                           {"extra_info", {{"split", "train"}, {"index", i}}}}
                .dump()
         << "\n";
  }
  verl.close();
  // A verl reward file, unchanged: it reads data_source and extra_info as verl passes them.
  write_text(d + "/my_reward.py",
             "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
             "    assert data_source == 'openai/gsm8k', data_source\n"
             "    assert extra_info['split'] == 'train', extra_info\n"
             "    answer = solution_str.rsplit('####', 1)[-1].strip()\n"
             "    return {'score': float(answer == ground_truth), 'has_marker': '####' in solution_str}\n");
  write_text(d + "/verl.yaml",
             "experiment: {name: verl-layout, steps: 1, checkpoint_every: 0, eval_every: 1, eval_before_train: false}\n"
             "model: {path: model}\n"
             "data: {train: verl.jsonl, val: verl.jsonl, prompt_key: prompt, answer_key: reward_model.ground_truth,\n"
             "       batch_size: 2}\n"
             "algorithm: {group_size: 2}\n"
             "rollout: {workers: 1, max_new_tokens: 6, kv_cache_mb: 64}\n"
             "learner: {workers: 1, micro_batch_size: 4}\n"
             "reward: [{python: my_reward.py, workers: 1}]\n"
             "logging: {console: plain}\n");
  const ExitStatus status = run_tandem({"run", d + "/verl.yaml", "--run-dir", d + "/run"}, d + "/run.out", 540);
  INFO(output_of(d + "/run.out"));
  INFO("worker log: ", output_of(d + "/run/logs/colocated-0.log"));
  REQUIRE(status.success());
  bool scored = false;
  for (const nlohmann::json& row : read_json_lines(d + "/run/metrics.jsonl")) {
    if (row.contains("reward/my_reward/has_marker")) scored = true;
  }
  CHECK(scored);
  const std::string prompt = read_json_lines(d + "/run/samples.jsonl").at(0)["prompt"].get<std::string>();
  CHECK(prompt.rfind("<|im_start|>user\n", 0) == 0);  // rendered with Qwen3's template, not JSON text
  CHECK(prompt.find("[{") == std::string::npos);
}
