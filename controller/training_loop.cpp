#include "controller/training_loop.h"

#include "actor/model_config.h"
#include "actor/presets.h"
#include "actor/tokenizer.h"
#include "controller/dataset.h"
#include "controller/metrics_writer.h"
#include "controller/progress.h"
#include "core/error.h"
#include "core/files.h"
#include "core/log.h"
#include "learner/advantages.h"
#include "learner/objective_registry.h"
#include "learner/sample_codec.h"
#include "plugins/reward_registry.h"
#include "weight_sync/shm.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>
#include <thread>

namespace tandem {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

bool colocated(const Config& c) { return c.placement == "colocated"; }

WorkerId rollout_worker(const Config& c, int64_t rank) {
  return {colocated(c) ? "colocated" : "rollout", static_cast<uint32_t>(rank)};
}

WorkerId learner_worker(const Config& c, int64_t rank) {
  return {colocated(c) ? "colocated" : "learner", static_cast<uint32_t>(rank)};
}

// One sampled response with everything the step computes about it.
struct Sample {
  size_t prompt_slot = 0;  // index into the step's prompts
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::string finish;
  int64_t version = 0;
  double reward = 0;
};

uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t x = a * 0x9E3779B97F4A7C15ULL ^ (b + 0x632BE59BD9B4E019ULL + (a << 6) + (a >> 2));
  x ^= x >> 31;
  return x * 0xBF58476D1CE4E5B9ULL;
}

class TrainingLoop {
 public:
  TrainingLoop(WorkerPool& pool, const Config& config, const std::string& run_dir)
      : pool_(pool), c_(config), run_dir_(run_dir) {}

  void run();

 private:
  void start_workers();
  // prompts[i]: the token ids of the step's prompt i (encoded once per step).
  std::vector<Sample> generate(int64_t step, const std::vector<std::vector<int32_t>>& prompts);
  void score(std::vector<Sample>& samples, const std::vector<size_t>& rows);
  void critic_values(std::vector<TrainingSample>& batch);
  void compute_advantages(const std::vector<Sample>& samples, std::vector<TrainingSample>& batch);
  nlohmann::json train(std::vector<TrainingSample>& batch);
  void sync_weights(int64_t version);
  void checkpoint(int64_t step);
  void export_policy();
  std::string config_for_workers() const;
  std::vector<std::vector<std::vector<TrainingSample>>> rank_shares(const std::vector<TrainingSample>& batch) const;

  WorkerPool& pool_;
  Config c_;
  std::string run_dir_;
  std::string model_dir_;
  ModelConfig model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  Dataset data_;
  std::optional<PromptOrder> order_;  // set once the dataset is loaded
  std::string shm_name_;
  std::vector<RewardFn> rewards_;
};

int64_t host_cores() { return std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency())); }

// Workers get the config with thread counts that share this host's cores among them.
std::string TrainingLoop::config_for_workers() const {
  Config c = c_;
  if (c.rollout.threads == 0) c.rollout.threads = std::max<int64_t>(1, host_cores() / c.rollout.workers);
  return config_to_yaml(c);
}

void TrainingLoop::start_workers() {
  const std::string config_text = config_for_workers();
  std::vector<uint64_t> pending;
  for (int64_t r = 0; r < c_.rollout.workers; ++r) {
    pending.push_back(pool_.send(rollout_worker(c_, r), "rollout_init",
                                 nlohmann::json{{"model", model_dir_}, {"config", config_text}}.dump()));
  }
  const int64_t optimizer_steps = c_.experiment.steps * c_.learner.epochs * c_.learner.mini_batches;
  const std::string rendezvous = "file://" + run_dir_ + "/.rendezvous-" + std::to_string(::getpid());
  for (int64_t r = 0; r < c_.learner.workers; ++r) {
    nlohmann::json body = {{"model", model_dir_},
                           {"config", config_text},
                           {"rank", r},
                           {"world_size", c_.learner.workers},
                           {"rendezvous", c_.learner.workers > 1 ? rendezvous : std::string()},
                           {"total_optimizer_steps", optimizer_steps},
                           {"threads", std::max<int64_t>(1, host_cores() / c_.learner.workers)}};
    pending.push_back(pool_.send(learner_worker(c_, r), "learner_init", body.dump()));
  }
  pool_.wait(pending);
  fs::remove(run_dir_ + "/.rendezvous-" + std::to_string(::getpid()));
}

std::vector<Sample> TrainingLoop::generate(int64_t step, const std::vector<std::vector<int32_t>>& prompts) {
  const size_t workers = static_cast<size_t>(c_.rollout.workers);
  std::vector<uint64_t> pending;
  for (size_t w = 0; w < workers; ++w) {
    const size_t begin = prompts.size() * w / workers, end = prompts.size() * (w + 1) / workers;
    nlohmann::json requests = nlohmann::json::array();
    std::string tokens;
    for (size_t i = begin; i < end; ++i) {
      const std::vector<int32_t>& prompt = prompts[i];
      tokens.append(reinterpret_cast<const char*>(prompt.data()), prompt.size() * 4);
      requests.push_back({{"id", i},
                          {"prompt_length", prompt.size()},
                          {"n", c_.algorithm.group_size},
                          {"seed", mix(static_cast<uint64_t>(c_.experiment.seed), mix(step, i))}});
    }
    pending.push_back(pool_.send(rollout_worker(c_, static_cast<int64_t>(w)), "rollout_generate",
                                 nlohmann::json{{"requests", requests}}.dump(), {tokens}));
  }
  std::vector<Sample> samples;
  auto replies = pool_.wait(pending);
  for (uint64_t id : pending) {
    const CommandReply& reply = replies.at(id);
    const nlohmann::json body = nlohmann::json::parse(reply.reply.body);
    TANDEM_CHECK(reply.attachments.size() == 2, "rollout_generate reply: expected 2 frames, got {}",
                 reply.attachments.size());
    size_t offset = 0;
    for (const auto& s : body.at("samples")) {
      Sample sample;
      sample.prompt_slot = s[0].get<size_t>();
      const size_t length = s[2].get<size_t>();
      TANDEM_CHECK((offset + length) * 4 <= reply.attachments[0].size() &&
                       (offset + length) * 4 <= reply.attachments[1].size(),
                   "rollout_generate reply from {}: sample frames too short", reply.reply.worker.name());
      sample.tokens.resize(length);
      sample.logprobs.resize(length);
      std::memcpy(sample.tokens.data(), reply.attachments[0].data() + offset * 4, length * 4);
      std::memcpy(sample.logprobs.data(), reply.attachments[1].data() + offset * 4, length * 4);
      offset += length;
      sample.finish = s[3].get<std::string>();
      sample.version = s[4].get<int64_t>();
      samples.push_back(std::move(sample));
    }
  }
  TANDEM_CHECK(samples.size() == prompts.size() * static_cast<size_t>(c_.algorithm.group_size),
               "the rollout workers returned {} samples for {} prompts x group_size {}", samples.size(), prompts.size(),
               c_.algorithm.group_size);
  // Group order: the samples of prompt i are [i * group_size, (i + 1) * group_size).
  std::stable_sort(samples.begin(), samples.end(),
                   [](const Sample& a, const Sample& b) { return a.prompt_slot < b.prompt_slot; });
  return samples;
}

void TrainingLoop::score(std::vector<Sample>& samples, const std::vector<size_t>& rows) {
  for (size_t i = 0; i < samples.size(); ++i) {
    Sample& s = samples[i];
    std::vector<int32_t> text_ids;
    for (int32_t id : s.tokens) {
      bool eos = false;
      for (int64_t e : model_.eos_token_ids) eos = eos || id == e;
      if (!eos) text_ids.push_back(id);
    }
    const std::string response = tokenizer_->decode(text_ids);
    const DataRow& row = data_.rows[rows[s.prompt_slot]];
    const std::string& prompt = data_.prompt(rows[s.prompt_slot]);
    double total = 0;
    for (size_t r = 0; r < rewards_.size(); ++r) {
      const RewardConfig& rc = c_.reward[r];
      RewardResult result;
      try {
        result = rewards_[r]({prompt, response, s.tokens, row});
      } catch (const std::exception& e) {
        throw Error(fmt::format("reward {}{} failed on sample {} (prompt {}): {}", rc.name,
                                rc.plugin.empty() ? "" : " (plugin " + rc.plugin + ")", i, prompt, e.what()));
      }
      if (!std::isfinite(result.score)) {
        throw Error(fmt::format("reward {} returned {} for sample {} (prompt {}): scores must be finite", rc.name,
                                result.score, i, prompt));
      }
      total += rc.weight * result.score;
    }
    s.reward = total;
  }
}

// The learners' critic values of every sample (gae): each rank scores a contiguous share.
void TrainingLoop::critic_values(std::vector<TrainingSample>& batch) {
  const size_t ranks = static_cast<size_t>(c_.learner.workers);
  std::vector<uint64_t> pending;
  for (size_t r = 0; r < ranks; ++r) {
    const size_t begin = batch.size() * r / ranks, end = batch.size() * (r + 1) / ranks;
    std::vector<TrainingSample> share;
    for (size_t i = begin; i < end; ++i) {
      TrainingSample probe;  // tokens are what matters; the codec wants every per-token field sized
      probe.prompt = batch[i].prompt;
      probe.response = batch[i].response;
      probe.old_logprobs = batch[i].old_logprobs;
      probe.advantages.assign(batch[i].response.size(), 0.0f);
      share.push_back(std::move(probe));
    }
    EncodedBatch encoded = encode_training_batch({share});
    pending.push_back(pool_.send(learner_worker(c_, static_cast<int64_t>(r)), "learner_values", encoded.header,
                                 encoded.attachments));
  }
  auto replies = pool_.wait(pending);
  for (size_t r = 0; r < ranks; ++r) {
    const std::string& frame = replies.at(pending[r]).attachments.at(0);
    size_t offset = 0;
    for (size_t i = batch.size() * r / ranks; i < batch.size() * (r + 1) / ranks; ++i) {
      const size_t n = batch[i].response.size();
      TANDEM_CHECK((offset + n) * 4 <= frame.size(), "learner_values reply: frame too short");
      batch[i].old_values.resize(n);
      std::memcpy(batch[i].old_values.data(), frame.data() + offset * 4, n * 4);
      offset += n;
    }
  }
}

void TrainingLoop::compute_advantages(const std::vector<Sample>& samples, std::vector<TrainingSample>& batch) {
  const int64_t count = static_cast<int64_t>(samples.size());
  int64_t longest = 1;
  for (const Sample& s : samples) longest = std::max<int64_t>(longest, static_cast<int64_t>(s.tokens.size()));
  std::vector<float> rewards, mask(static_cast<size_t>(count * longest), 0.0f), values(mask.size(), 0.0f);
  for (int64_t i = 0; i < count; ++i) {
    rewards.push_back(static_cast<float>(samples[i].reward));
    for (size_t t = 0; t < samples[i].tokens.size(); ++t) mask[i * longest + t] = 1;
    if (!batch[i].old_values.empty()) {
      for (size_t t = 0; t < samples[i].tokens.size(); ++t) values[i * longest + t] = batch[i].old_values[t];
    }
  }
  AdvantageInputs in;
  in.rewards = at::tensor(rewards, at::kFloat);
  in.mask = at::tensor(mask, at::kFloat).view({count, longest});
  in.values = at::tensor(values, at::kFloat).view({count, longest});
  in.group_size = c_.algorithm.group_size;
  AdvantageParams params = advantage_params(c_.algorithm);
  const AdvantageResult result = find_advantage_estimator(c_.algorithm.advantage)(in, params);
  const at::Tensor advantages = result.advantages.to(at::kFloat).contiguous();
  const at::Tensor returns = result.returns.defined() ? result.returns.to(at::kFloat).contiguous() : at::Tensor();
  for (int64_t i = 0; i < count; ++i) {
    const float* a = advantages.data_ptr<float>() + i * longest;
    batch[i].advantages.assign(a, a + samples[i].tokens.size());
    if (returns.defined() && c_.algorithm.advantage == "gae") {
      const float* r = returns.data_ptr<float>() + i * longest;
      batch[i].returns.assign(r, r + samples[i].tokens.size());
    }
  }
}

// mini-batch m, rank r: contiguous shares (whole groups stay together when sizes divide).
std::vector<std::vector<std::vector<TrainingSample>>> TrainingLoop::rank_shares(
    const std::vector<TrainingSample>& batch) const {
  const size_t minis = static_cast<size_t>(c_.learner.mini_batches), ranks = static_cast<size_t>(c_.learner.workers);
  std::vector<std::vector<std::vector<TrainingSample>>> shares(ranks, std::vector<std::vector<TrainingSample>>(minis));
  for (size_t m = 0; m < minis; ++m) {
    const size_t begin = batch.size() * m / minis, end = batch.size() * (m + 1) / minis;
    for (size_t r = 0; r < ranks; ++r) {
      const size_t b = begin + (end - begin) * r / ranks, e = begin + (end - begin) * (r + 1) / ranks;
      shares[r][m].assign(batch.begin() + static_cast<std::ptrdiff_t>(b), batch.begin() + static_cast<std::ptrdiff_t>(e));
    }
  }
  return shares;
}

nlohmann::json TrainingLoop::train(std::vector<TrainingSample>& batch) {
  const auto shares = rank_shares(batch);
  std::vector<uint64_t> pending;
  for (int64_t r = 0; r < c_.learner.workers; ++r) {
    EncodedBatch encoded = encode_training_batch(shares[static_cast<size_t>(r)]);
    pending.push_back(pool_.send(learner_worker(c_, r), "learner_train", encoded.header, encoded.attachments));
  }
  auto replies = pool_.wait(pending);
  return nlohmann::json::parse(replies.at(pending[0]).reply.body);
}

void TrainingLoop::sync_weights(int64_t version) {
  // The colocated slot 0 takes learner rank 0's weights in memory; everyone else reads shm.
  const bool local = colocated(c_);
  const bool shm = !local || c_.rollout.workers > 1;
  nlohmann::json publish = {{"version", version}, {"bucket_bytes", c_.weight_sync.bucket_mb << 20}};
  if (local) publish["local"] = true;
  if (shm) publish["shm"] = shm_name_;
  std::vector<uint64_t> pending;
  for (int64_t r = 0; r < c_.learner.workers; ++r) {
    pending.push_back(pool_.send(learner_worker(c_, r), "learner_publish", publish.dump()));
  }
  pool_.wait(pending);
  pending.clear();
  for (int64_t r = 0; r < c_.rollout.workers; ++r) {
    const nlohmann::json load = local && r == 0 ? nlohmann::json{{"local", true}} : nlohmann::json{{"shm", shm_name_}};
    pending.push_back(pool_.send(rollout_worker(c_, r), "rollout_load_weights", load.dump()));
  }
  for (const auto& [id, reply] : pool_.wait(pending)) {
    const int64_t loaded = nlohmann::json::parse(reply.reply.body).at("version").get<int64_t>();
    TANDEM_CHECK(loaded == version, "{} loaded weight version {}, expected {}", reply.reply.worker.name(), loaded,
                 version);
  }
}

void TrainingLoop::checkpoint(int64_t step) {
  const std::string dir = fmt::format("{}/checkpoints/step_{}", run_dir_, step);
  fs::create_directories(run_dir_ + "/checkpoints");
  std::vector<uint64_t> pending;
  for (int64_t r = 0; r < c_.learner.workers; ++r) {
    pending.push_back(pool_.send(learner_worker(c_, r), "learner_save", nlohmann::json{{"dir", dir}}.dump()));
  }
  pool_.wait(pending);
  const PromptOrder::Position position = order_->position();
  write_file_atomic(dir + "/controller_state.json",
                    nlohmann::json{{"step", step}, {"data_epoch", position.epoch}, {"data_index", position.index}}
                            .dump(2) +
                        "\n");
  // Keep the newest keep_checkpoints.
  std::vector<std::pair<int64_t, std::string>> existing;
  for (const auto& entry : fs::directory_iterator(run_dir_ + "/checkpoints")) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step_", 0) == 0 && name.find('.') == std::string::npos) {
      existing.emplace_back(std::stoll(name.substr(5)), entry.path().string());
    }
  }
  std::sort(existing.begin(), existing.end());
  while (static_cast<int64_t>(existing.size()) > c_.experiment.keep_checkpoints) {
    fs::remove_all(existing.front().second);
    existing.erase(existing.begin());
  }
}

void TrainingLoop::export_policy() {
  std::vector<uint64_t> pending;
  for (int64_t r = 0; r < c_.learner.workers; ++r) {
    pending.push_back(pool_.send(learner_worker(c_, r), "learner_export",
                                 nlohmann::json{{"dir", run_dir_ + "/policy"}, {"tokenizer_from", model_dir_}}.dump()));
  }
  pool_.wait(pending);
}

void TrainingLoop::run() {
  model_dir_ = resolve_model_path(c_.model.path);
  model_ = read_model_config(model_dir_ + "/config.json");
  tokenizer_ = load_tokenizer(model_dir_);
  data_ = load_dataset(c_.data.train, c_.data.prompt_key);
  order_.emplace(data_.rows.size(), static_cast<uint64_t>(c_.experiment.seed), c_.data.shuffle);
  for (const RewardConfig& r : c_.reward) rewards_.push_back(find_reward(r.name));
  shm_name_ = fmt::format("/tandem-{}-weights", ::getpid());
  start_workers();

  MetricsWriter metrics(c_.logging.jsonl ? run_dir_ + "/metrics.jsonl" : "");
  ProgressLine progress(c_.logging.console, c_.experiment.steps);
  const Clock::time_point run_start = Clock::now();
  try {
    for (int64_t step = 1; step <= c_.experiment.steps; ++step) {
      const Clock::time_point step_start = Clock::now();
      const std::vector<size_t> rows = order_->next(static_cast<size_t>(c_.data.batch_size));
      std::vector<std::vector<int32_t>> prompts;
      for (size_t row : rows) prompts.push_back(tokenizer_->encode(data_.prompt(row)));
      std::vector<Sample> samples = generate(step, prompts);
      const double rollout_s = seconds_since(step_start);

      Clock::time_point t = Clock::now();
      score(samples, rows);
      const double reward_s = seconds_since(t);

      t = Clock::now();
      std::vector<TrainingSample> batch(samples.size());
      int64_t response_tokens = 0;
      for (size_t i = 0; i < samples.size(); ++i) {
        batch[i].prompt = prompts[samples[i].prompt_slot];
        batch[i].response = samples[i].tokens;
        batch[i].old_logprobs = samples[i].logprobs;
        response_tokens += static_cast<int64_t>(samples[i].tokens.size());
      }
      if (c_.algorithm.advantage == "gae") critic_values(batch);
      compute_advantages(samples, batch);
      const nlohmann::json update = train(batch);
      const double train_s = seconds_since(t);

      t = Clock::now();
      sync_weights(step);
      const double sync_s = seconds_since(t);
      if (c_.experiment.checkpoint_every > 0 && step % c_.experiment.checkpoint_every == 0) checkpoint(step);

      double reward_sum = 0, reward_sq = 0;
      for (const Sample& s : samples) {
        reward_sum += s.reward;
        reward_sq += s.reward * s.reward;
      }
      const double n = static_cast<double>(samples.size());
      const double mean = reward_sum / n, std = std::sqrt(std::max(0.0, reward_sq / n - mean * mean));
      const double step_s = seconds_since(step_start);
      MetricRow row = {{"step", static_cast<double>(step)},
                       {"weight_version", static_cast<double>(step)},
                       {"reward/mean", mean},
                       {"reward/std", std},
                       {"response/length_mean", static_cast<double>(response_tokens) / n}};
      for (const auto& [key, value] : update.items()) {
        if (key.rfind("actor/", 0) == 0 || key.rfind("critic/", 0) == 0) row.emplace_back(key, value.get<double>());
      }
      row.insert(row.end(), {{"time/rollout_s", rollout_s},
                             {"time/reward_s", reward_s},
                             {"time/train_s", train_s},
                             {"time/sync_s", sync_s},
                             {"time/step_s", step_s},
                             {"perf/rollout_tokens_per_s", static_cast<double>(response_tokens) / rollout_s},
                             {"perf/train_tokens_per_s", static_cast<double>(response_tokens) / train_s}});
      metrics.write(row);
      const double elapsed = seconds_since(run_start);
      const double eta = elapsed / static_cast<double>(step) * static_cast<double>(c_.experiment.steps - step);
      progress.update(step, fmt::format("reward {:.3f}  kl {:.4f}  len {:.1f}  {:.0f} tok/s  eta {:.0f}s", mean,
                                        update.value("actor/kl", 0.0), static_cast<double>(response_tokens) / n,
                                        static_cast<double>(response_tokens) / step_s, eta));
      log::info("step {}: reward {:.4f}, step {:.2f}s (rollout {:.2f}, train {:.2f}, sync {:.3f})", step, mean, step_s,
                rollout_s, train_s, sync_s);
    }
    progress.finish();
    export_policy();
  } catch (...) {
    remove_weights_shm(shm_name_);
    throw;
  }
  remove_weights_shm(shm_name_);
}

}  // namespace

std::vector<WorkerId> training_workers(const Config& c) {
  std::vector<WorkerId> ids;
  if (colocated(c)) {
    for (int64_t s = 0; s < std::max(c.rollout.workers, c.learner.workers); ++s) ids.push_back(rollout_worker(c, s));
    return ids;
  }
  for (int64_t r = 0; r < c.rollout.workers; ++r) ids.push_back(rollout_worker(c, r));
  for (int64_t r = 0; r < c.learner.workers; ++r) ids.push_back(learner_worker(c, r));
  return ids;
}

void run_training(WorkerPool& pool, const Config& config, const std::string& run_dir) {
  TrainingLoop(pool, config, run_dir).run();
}

}  // namespace tandem
