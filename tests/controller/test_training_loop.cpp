// `tandem run` end to end on real worker processes: both placements, the metrics and
// files a run leaves, plugin rewards and critics, and a failing reward.
#include "actor/lora.h"
#include "actor/model_config.h"
#include "actor/model_weights.h"
#include "actor/presets.h"
#include "actor/tokenizer.h"
#include "tests/support/forward_tolerance.h"
#include "tests/support/run_tandem.h"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <set>
#include <sstream>

using namespace tandem;
using namespace tandem::testing;

namespace fs = std::filesystem;

namespace {

const char* kShortRun = R"(experiment: {name: t, seed: 3, steps: 4, checkpoint_every: 2, keep_checkpoints: 1}
model: {path: "builtin:tiny"}
data: {train: "builtin:addition1", batch_size: 4}
algorithm: {advantage: grpo, group_size: 4, kl: {coef: 0.01}}
rollout: {workers: 2, max_new_tokens: 3, kv_cache_mb: 8}
learner: {workers: 1, micro_batch_size: 8, optimizer: {lr: 1.0e-3}}
logging: {console: plain}
)";

// kShortRun's longest sequence, an upper bound: builtin:addition1's prompts ("a+b=", 4 byte
// tokens, a few more with special tokens; 16 is ample) and 3 new ones. Longer only loosens the bound.
constexpr int64_t kLongestShortRunSequence = 19;

std::vector<nlohmann::json> metric_lines(const std::string& run_dir) {
  return read_json_lines(run_dir + "/metrics.jsonl");
}

// What float32 allows the weight-sync probe (the rollout engine's log-probs against the
// learner's, both float32 forwards) on the run's last checkpoint: forward_tolerance.h's
// bound for two forwards, sequences up to `max_tokens`. Earlier probes saw weights a few
// lr-sized steps away, whose norms (all the bound reads) differ by far under 10%: the
// factor 1.1 covers them.
double probe_bound(const std::string& run, int64_t max_tokens, double temperature) {
  std::string last;
  for (const auto& entry : fs::directory_iterator(run + "/checkpoints")) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step_", 0) == 0 && (last.empty() || std::stoi(name.substr(5)) > std::stoi(last.substr(5)))) last = name;
  }
  REQUIRE_MESSAGE(!last.empty(), "no checkpoint in " << run);
  const std::string dir = run + "/checkpoints/" + last;
  const ModelConfig config = read_model_config(dir + "/config.json");
  return 1.1 * logprob_agreement(config, load_model_weights(dir, config), max_tokens, temperature);
}

std::string run_config(const TempDir& dir, const std::string& yaml, const std::vector<std::string>& sets,
                       int expected_exit) {
  write_file_atomic(dir.path() + "/run.yaml", yaml);
  std::vector<std::string> args = {"run", dir.path() + "/run.yaml", "--run-dir", dir.path() + "/run"};
  for (const std::string& s : sets) {
    args.push_back("--set");
    args.push_back(s);
  }
  const ExitStatus status = run_tandem(args, dir.path() + "/out.txt", 180);
  INFO(read_text(dir.path() + "/out.txt"));
  REQUIRE(status.exit_code == expected_exit);
  return dir.path() + "/run";
}

}  // namespace

std::set<std::string> weight_segments() {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator("/dev/shm")) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("tandem-", 0) == 0) names.insert(name);
  }
  return names;
}

TEST_CASE("a run trains over real workers in both placements and leaves metrics, checkpoints and the policy") {
  // A segment left by a controller killed with SIGKILL: a process that has ended.
  ChildProcess ended = ChildProcess::spawn({"/bin/true"});
  REQUIRE(ended.wait_for(10).has_value());
  const std::string stale = "/dev/shm/tandem-" + std::to_string(ended.pid()) + "-weights";
  write_file_atomic(stale, "left behind");
  const std::set<std::string> segments_before = weight_segments();  // e.g. of killed runs
  for (const char* placement : {"colocated", "disaggregated"}) {
    INFO(std::string(placement));
    TempDir dir;
    const std::string run = run_config(dir, kShortRun, {std::string("placement=") + placement}, 0);
    const auto lines = metric_lines(run);
    REQUIRE(lines.size() == 4);
    for (size_t i = 0; i < lines.size(); ++i) {
      for (const char* key : {"step", "weight_version", "reward/mean", "reward/std", "response/length_mean",
                              "actor/pg_loss", "actor/kl", "actor/entropy", "actor/clipfrac", "actor/grad_norm",
                              "actor/lr", "time/rollout_s", "time/reward_s", "time/train_s", "time/sync_s",
                              "time/step_s", "perf/rollout_tokens_per_s", "perf/train_tokens_per_s"}) {
        INFO(key);
        REQUIRE(lines[i].contains(key));
        CHECK(lines[i][key].is_number());
      }
      CHECK(lines[i]["step"].get<int>() == static_cast<int>(i) + 1);
      CHECK(lines[i]["weight_version"].get<int>() == static_cast<int>(i) + 1);
      CHECK(lines[i]["response/length_mean"].get<double>() > 0);
      // rollout.prefix_sharing (on): each prompt is prefilled once for its group of 4 (a
      // cache of 8 MB preempts nothing here); more is saved if a batch repeats a prompt.
      const double computed = lines[i].at("rollout/prefill_tokens"), saved = lines[i].at("rollout/prefill_tokens_saved");
      CHECK(computed > 0);
      CHECK(saved >= 3 * computed);
    }
    // keep_checkpoints 1: only the newest, whole.
    CHECK_FALSE(fs::exists(run + "/checkpoints/step_2"));
    CHECK(fs::exists(run + "/checkpoints/step_4/trainer_state.json"));
    CHECK(nlohmann::json::parse(read_text(run + "/checkpoints/step_4/controller_state.json"))["step"] == 4);
    const ModelConfig config = read_model_config(run + "/policy/config.json");
    CHECK(load_model_weights(run + "/policy", config).parameter_count() == parameter_count(config));
    CHECK(fs::exists(run + "/policy/tokenizer.json"));
  }
  // The runs removed their weight segments and the stale one; nothing else was touched.
  CHECK_FALSE(fs::exists(stale));
  for (const std::string& name : weight_segments()) CHECK(segments_before.count(name) == 1);
}

TEST_CASE("a run whose learner splits the model over 2 ranks (tensor and sequence parallel) trains as one rank does") {
  // Step 1 samples from the same initial weights in both runs, so its rollouts, rewards and
  // update see the same tokens; the update's numbers then agree to float32 reordering (the
  // learner's own tests bound it: tests/learner/test_tensor_parallel.cpp). The weight-sync
  // probe checks the split learner's log-probs against the engine's after every step.
  // The tiny model earns no reward yet: the entropy bonus gives the update a gradient.
  const std::vector<std::string> two_steps = {"experiment.steps=2", "experiment.checkpoint_every=2",
                                              "algorithm.entropy_coef=0.01"};
  TempDir whole_dir, split_dir;
  const std::string whole = run_config(whole_dir, kShortRun, two_steps, 0);
  std::vector<std::string> split_sets = two_steps;
  for (const char* s : {"learner.workers=2", "learner.tensor_parallel=2", "learner.sequence_parallel=true"}) {
    split_sets.push_back(s);
  }
  const std::string split = run_config(split_dir, kShortRun, split_sets, 0);
  const auto whole_lines = metric_lines(whole), split_lines = metric_lines(split);
  REQUIRE(whole_lines.size() == 2);
  REQUIRE(split_lines.size() == 2);
  CHECK(split_lines[0].at("reward/mean").get<double>() == whole_lines[0].at("reward/mean").get<double>());
  CHECK(split_lines[0].at("response/length_mean").get<double>() == whole_lines[0].at("response/length_mean").get<double>());
  CHECK(whole_lines[0].at("actor/grad_norm").get<double>() > 0);
  CHECK(split_lines[0].at("actor/grad_norm").get<double>() > 0);
  // Step 1's loss, entropy and KL are token means of per-token values each within
  // forward_tolerance.h's bound of two float32 forwards of the initial weights (the split
  // one reorders its sums, nothing else); the loss carries the entropy times its
  // coefficient, the KL is 0 in both (policy = reference). A mean of N such values moves by
  // no more than each does, plus its own reordering, N·u·|mean|. (The gradient norm's
  // agreement needs each sample's gradient norm, which a run does not report: the learner
  // test bounds it, tests/learner/test_tensor_parallel.cpp.)
  const ModelConfig initial_config = read_model_config(resolve_model_path("builtin:tiny") + "/config.json");
  const ModelWeights initial = load_model_weights(resolve_model_path("builtin:tiny"), initial_config);
  const double tokens = whole_lines[0].at("response/count").get<double>() * 3;  // max_new_tokens 3
  const double per_token = logprob_agreement(initial_config, initial, kLongestShortRunSequence, 1.0);
  for (const char* key : {"actor/loss", "actor/entropy", "actor/kl"}) {
    CAPTURE(key);
    const double a = whole_lines[0].at(key).get<double>(), b = split_lines[0].at(key).get<double>();
    CHECK(std::abs(a - b) <= per_token + tokens * kUnitRoundoff * std::abs(a));
  }
  // The split update's collectives are in the metrics: per layer and micro-batch 2 all-gathers
  // forward under sequence parallelism, so at least 2 per layer of the tiny model's 2.
  CHECK(split_lines[0].at("tensor_parallel/forward_all_gather_calls").get<double>() >= 4);
  CHECK(split_lines[0].at("tensor_parallel/forward_all_gather_mb").get<double>() > 0);
  CHECK_FALSE(whole_lines[0].contains("tensor_parallel/forward_all_gather_calls"));
  // The rollout worker off the learners' slot took the weights as slices of the 2 shards.
  CHECK(read_text(split + "/logs/controller-0.log").find("weight sync: shm between tensor-parallel layouts, 2 learner "
                                                         "shards -> 1 per engine") != std::string::npos);
  // A model that does not split so is refused before anything starts, naming the key and why.
  const ExitStatus refused =
      run_tandem({"validate", split_dir.path() + "/run.yaml", "--set", "learner.workers=3", "--set",
                  "learner.tensor_parallel=3", "--set", "data.batch_size=2", "--set", "rollout.workers=1"},
                 split_dir.path() + "/validate.txt", 60);
  CHECK(refused.exit_code == 2);
  CHECK(read_text(split_dir.path() + "/validate.txt")
            .find("learner.tensor_parallel: the model builtin:tiny: 3 does not divide the model's 4 attention heads") !=
        std::string::npos);
  // The checkpoint is canonical: the split run's loads as any model directory does.
  const ModelConfig config = read_model_config(split + "/policy/config.json");
  CHECK(load_model_weights(split + "/checkpoints/step_2", config).parameter_count() == parameter_count(config));
}

TEST_CASE("rollout engines split over 2 ranks take the weights as slices and sample what the learner scores") {
  // Learner unsplit, engines split (rollout.tensor_parallel 2): the shm sync writes each
  // engine rank its slices; the probe after every sync compares the split engine's
  // log-probs with the learner's, within two float32 forwards' bound.
  TempDir dir;
  const std::string run = run_config(dir, kShortRun,
                                     {"experiment.steps=2", "experiment.checkpoint_every=2", "rollout.tensor_parallel=2",
                                      "weight_sync.probe_every=1"},
                                     0);
  const auto lines = metric_lines(run);
  REQUIRE(lines.size() == 2);
  const double bound = probe_bound(run, kLongestShortRunSequence, 1.0);
  for (const nlohmann::json& line : lines) {
    const double diff = line.at("sync/probe_logprob_max_diff").get<double>();
    CHECK(std::isfinite(diff));
    CHECK(diff <= bound);
  }
  CHECK(read_text(run + "/logs/controller-0.log").find("1 learner shards -> 2 per engine") != std::string::npos);

  // Across hosts the same slices travel over Gloo, a group per (learner shard, engine rank)
  // pair (weight_sync.method: collective; here on loopback), from both learner shards.
  // Disaggregated: colocated, a learner shard's process would also be a receiver.
  TempDir collective_dir;
  const std::string over_gloo =
      run_config(collective_dir, kShortRun,
                 {"experiment.steps=2", "experiment.checkpoint_every=2", "rollout.tensor_parallel=2",
                  "learner.workers=2", "learner.tensor_parallel=2", "weight_sync.method=collective",
                  "placement=disaggregated", "weight_sync.probe_every=1"},
                 0);
  const auto gloo_lines = metric_lines(over_gloo);
  REQUIRE(gloo_lines.size() == 2);
  const double gloo_bound = probe_bound(over_gloo, kLongestShortRunSequence, 1.0);
  for (const nlohmann::json& line : gloo_lines) {
    const double diff = line.at("sync/probe_logprob_max_diff").get<double>();
    CHECK(std::isfinite(diff));
    CHECK(diff <= gloo_bound);
    CHECK(line.at("sync/bytes").get<double>() > 0);
  }
  const std::string gloo_log = read_text(over_gloo + "/logs/controller-0.log");
  CHECK(gloo_log.find("collective between tensor-parallel layouts, 2 learner shards -> 2 per engine") !=
        std::string::npos);
  CHECK_FALSE(fs::exists(over_gloo + "/weight_sync/group-1.s0.d0"));  // rendezvous directories go once used
  // A split CUDA engine needs 2 GPUs and NCCL here: where they are missing (CI has no GPU),
  // refused before anything starts, naming the key.
  const ExitStatus checked = run_tandem({"validate", dir.path() + "/run.yaml", "--set", "rollout.tensor_parallel=2",
                                         "--set", "rollout.device=cuda"},
                                        dir.path() + "/validate.txt", 60);
  const std::string said = read_text(dir.path() + "/validate.txt");
  INFO(said);
  if (checked.exit_code != 0) {  // 0 only on a machine with 2 usable GPUs
    CHECK(checked.exit_code == 2);
    CHECK(said.find("rollout.device") != std::string::npos);
  }
}

TEST_CASE("a LoRA run trains its adapters over the frozen base and leaves them in PEFT's format") {
  TempDir dir;
  const std::string run = run_config(dir, kShortRun,
                                     {"learner.lora.rank=4", "learner.lora.target_modules=[q_proj, v_proj, down_proj]",
                                      "algorithm.entropy_coef=0.01", "learner.optimizer.lr=1.0e-2",
                                      "weight_sync.probe_every=1"},
                                     0);
  const auto lines = metric_lines(run);
  REQUIRE(lines.size() == 4);
  CHECK(lines[0].at("actor/grad_norm").get<double>() > 0);
  // Each sync moved the adapters only (their float32 values, each tensor 64-byte aligned),
  // and the engines, applying them over the base they hold, score as the learner does.
  const ModelConfig tiny = read_model_config(resolve_model_path("builtin:tiny") + "/config.json");
  int64_t adapter_bytes = 0, aligned_bytes = 0;
  for (const ParameterShard& s : lora_adapter_layout(tiny, {4, 16.0, {"q_proj", "v_proj", "down_proj"}}, {})) {
    const int64_t bytes = 4 * s.canonical_shape[0] * s.canonical_shape[1];
    adapter_bytes += bytes;
    aligned_bytes += (bytes + 63) / 64 * 64;
  }
  const double bound = probe_bound(run, kLongestShortRunSequence, 1.0);
  for (const nlohmann::json& line : lines) {
    CHECK(line.at("sync/bytes").get<double>() >= static_cast<double>(adapter_bytes));
    CHECK(line.at("sync/bytes").get<double>() <= static_cast<double>(aligned_bytes));
    CHECK(line.at("sync/bytes").get<double>() < 4.0 * static_cast<double>(parameter_count(tiny)) / 10);
    CHECK(line.at("sync/probe_logprob_max_diff").get<double>() <= bound);
  }
  // The policy is the merged model (any loader reads it) and the adapters beside it.
  const ModelConfig config = read_model_config(run + "/policy/config.json");
  const ModelWeights policy = load_model_weights(run + "/policy", config);
  const ModelWeights base = load_model_weights(resolve_model_path("builtin:tiny"), config);
  double moved = 0;
  for (const char* name : {"model.layers.0.self_attn.q_proj.weight", "model.layers.1.mlp.down_proj.weight"}) {
    const auto& a = policy.get(name).data;
    const auto& b = base.get(name).data;
    for (size_t i = 0; i < a.size(); ++i) moved = std::max(moved, std::abs(static_cast<double>(a[i]) - b[i]));
  }
  CHECK(moved > 0);
  CHECK(policy.get("model.layers.0.self_attn.k_proj.weight").data == base.get("model.layers.0.self_attn.k_proj.weight").data);
  const nlohmann::json peft = nlohmann::json::parse(read_text(run + "/policy/adapter/adapter_config.json"));
  CHECK(peft.at("target_modules") == nlohmann::json::array({"q_proj", "v_proj", "down_proj"}));
  CHECK(peft.at("base_model_name_or_path") == "builtin:tiny");
  CHECK(fs::exists(run + "/checkpoints/step_4/adapter/adapter_model.safetensors"));
  // A bf16-stored base: the engines round theirs alike, so the probe still agrees.
  TempDir half_dir;
  const std::string half = run_config(half_dir, kShortRun,
                                      {"experiment.steps=2", "experiment.checkpoint_every=2", "learner.lora.rank=4",
                                       "learner.lora.base_dtype=bf16", "weight_sync.probe_every=1"},
                                      0);
  for (const nlohmann::json& line : metric_lines(half)) {
    CHECK(line.at("sync/probe_logprob_max_diff").get<double>() <= probe_bound(half, kLongestShortRunSequence, 1.0));
  }
  // A typo in the targets is refused before the run, naming the key.
  const ExitStatus refused = run_tandem({"validate", dir.path() + "/run.yaml", "--set", "learner.lora.rank=4", "--set",
                                         "learner.lora.target_modules=[q_proj, qv_proj]"},
                                        dir.path() + "/validate.txt", 60);
  CHECK(refused.exit_code == 2);
  CHECK(read_text(dir.path() + "/validate.txt").find("learner.lora.target_modules: \"qv_proj\" is not a projection") !=
        std::string::npos);
}

TEST_CASE("a padded vocabulary (config.json vocab_size above the tokenizer's) trains: padded ids are never sampled") {
  // As Qwen's checkpoints: 151936 embedding rows for 151669 tokenizer ids. Here 259 ids and
  // 320 rows; with random weights about a fifth of every draw over all rows is padding.
  TempDir dir;
  const std::string model_dir = dir.path() + "/padded";
  fs::create_directories(model_dir);
  ModelConfig config = model_preset_config("tiny");
  const int64_t tokenizer_ids = config.vocab_size;
  config.vocab_size = 320;
  write_file_atomic(model_dir + "/config.json", model_config_to_json(config));
  save_model_weights(model_dir, random_model_weights(config, 7, 0.5), DType::f32);
  write_byte_level_tokenizer(model_dir, model_preset_special_tokens());
  REQUIRE(load_tokenizer(model_dir)->vocab_size() == tokenizer_ids);
  const std::string run = run_config(dir, kShortRun,
                                     {"model.path=" + model_dir, "weight_sync.probe_every=1", "rollout.temperature=1.5",
                                      "rollout.max_new_tokens=8", "sft.steps=0"},
                                     0);
  const auto lines = metric_lines(run);
  REQUIRE(lines.size() == 4);
  // The learner normalises over the same ids as the rollout engine: the probe agrees.
  const double bound = probe_bound(run, 64, 1.5);  // addition prompts and 8 new tokens: under 64
  for (const auto& line : lines) CHECK(line.at("sync/probe_logprob_max_diff").get<double>() <= bound);
  for (const nlohmann::json& s : read_json_lines(run + "/samples.jsonl")) CHECK(s.at("response").is_string());
}

TEST_CASE("a plugin reward and a critic (gae) run; a reward that throws stops the run naming it and the sample") {
  TempDir dir;
  const std::string plugin = EXAMPLE_PLUGIN;
  const std::string run = run_config(
      dir, kShortRun,
      {"algorithm.advantage=gae", "reward=[{plugin: " + plugin + ", name: exact_answer}]", "experiment.steps=2"}, 0);
  const auto lines = metric_lines(run);
  REQUIRE(lines.size() == 2);
  CHECK(lines[1].contains("critic/value_loss"));

  TempDir broken;
  write_file_atomic(broken.path() + "/data.jsonl", "{\"prompt\": \"1+1=\"}\n{\"prompt\": \"2+2=\"}\n");
  run_config(broken, kShortRun,
             {"reward=[{plugin: " + plugin + ", name: exact_answer}]", "data.train=" + broken.path() + "/data.jsonl",
              "data.batch_size=2"},
             1);
  const std::string out = read_text(broken.path() + "/out.txt");
  const std::string failure = "reward exact_answer (plugin " + plugin + ") failed on sample 0 (prompt";
  CHECK(out.find(failure) != std::string::npos);
  CHECK(out.find(failure, out.find(failure) + 1) == std::string::npos);  // said once
  CHECK(out.find("no \"answer\" field") != std::string::npos);
}

TEST_CASE("the quickstart learns: after its warm-up the reward rises over 40 steps (fixed seed)") {
  TempDir dir;
  const std::string quickstart = read_text(TANDEM_SOURCE_DIR "/configs/quickstart.yaml");
  const std::string run = run_config(dir, quickstart,
                                     {"experiment.steps=40", "experiment.checkpoint_every=0", "logging.console=quiet"}, 0);
  const auto rows = metric_lines(run);
  REQUIRE(rows.size() == 40);
  double first = 0, last = 0;
  for (size_t i = 0; i < 10; ++i) {
    first += rows[i].at("reward/mean").get<double>() / 10;
    last += rows[30 + i].at("reward/mean").get<double>() / 10;
  }
  INFO("mean reward of steps 1-10: ", first, ", of steps 31-40: ", last);
  CHECK(first > 0.05);  // the warm-up left something to reinforce
  CHECK(last >= first + 0.1);
  // The warm-up's own curve: its loss fell.
  std::vector<double> losses;
  for (const auto& row : read_json_lines(run + "/sft_metrics.jsonl")) losses.push_back(row.at("sft/loss"));
  REQUIRE(losses.size() == 50);
  CHECK(losses.back() < 0.5 * losses.front());
}

TEST_CASE("fallback scores are counted, rewards combine with weights, and the weight-sync probe checks log-probs") {
  const std::string plugin = EXAMPLE_PLUGIN;
  TempDir dir;
  write_file_atomic(dir.path() + "/data.jsonl", "{\"prompt\": \"1+1=\"}\n{\"prompt\": \"2+2=\"}\n");
  // exact_answer throws on rows without an answer: each of the 2 x 4 samples falls back to 0.5.
  const std::vector<std::string> sets = {
      "reward=[{plugin: " + plugin + ", name: exact_answer, on_error: fallback, fallback_score: 0.5}, "
          "{name: length_penalty, max_length: 2, weight: 0.5}]",
      "data.train=" + dir.path() + "/data.jsonl", "data.batch_size=2", "weight_sync.probe_every=1"};
  const std::string run = run_config(dir, kShortRun, sets, 0);
  const auto rows = metric_lines(run);
  const double bound = probe_bound(run, 64, 1.0);  // addition prompts and 3 new tokens: under 64
  for (const auto& row : rows) {
    CHECK(row.at("reward/fallbacks").get<double>() == 8);
    // 0.5 + 0.5 x length_penalty, which is 0 (length <= 2) or -0.5 (length 3)
    CHECK(row.at("reward/mean").get<double>() <= 0.5);
    CHECK(row.at("reward/mean").get<double>() >= 0.25);
    REQUIRE(row.contains("sync/probe_logprob_max_diff"));
    CHECK(row.at("sync/probe_logprob_max_diff").get<double>() <= bound);
  }
  // One console line per step, not one per failed sample; every error in reward_errors.log.
  auto count = [](const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  const std::string log = read_text(run + "/logs/controller-0.log");
  CHECK(count(log, "8 of 8 samples failed and scored 0.5 (on_error: fallback); first: sample 0: ") == rows.size());
  CHECK(count(log, "failed on sample") == 0);
  CHECK(count(read_text(run + "/logs/reward_errors.log"), "failed on sample") == 8 * rows.size());

  // A tolerance no float32 pair of engines meets: the probe stops the run and says why.
  TempDir strict;
  write_file_atomic(strict.path() + "/data.jsonl", read_text(dir.path() + "/data.jsonl"));
  std::vector<std::string> strict_sets = sets;
  strict_sets[1] = "data.train=" + strict.path() + "/data.jsonl";
  strict_sets.push_back("weight_sync.probe_tolerance=1e-12");
  run_config(strict, kShortRun, strict_sets, 1);
  CHECK(read_text(strict.path() + "/out.txt").find("weight-sync probe at version 0") != std::string::npos);
}
