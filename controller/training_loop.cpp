#include "controller/training_loop.h"

#include "actor/model_config.h"
#include "actor/presets.h"
#include "actor/tokenizer.h"
#include "controller/checkpoints.h"
#include "controller/dataset.h"
#include "controller/metrics_writer.h"
#include "controller/progress.h"
#include "core/error.h"
#include "core/files.h"
#include "core/log.h"
#include "core/text.h"
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
#include <functional>
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

// A worker that hosts a learner rank died or failed: the controller restarts the
// learners from the last checkpoint (or stops when restarts are exhausted).
class LearnerLost : public Error {
 public:
  explicit LearnerLost(const WorkerFailure& failure) : Error(failure.what()), failure_(failure) {}
  const WorkerFailure& failure() const { return failure_; }

 private:
  WorkerFailure failure_;
};

// A command sent to a worker, and how to send it again to a restarted one.
struct Request {
  WorkerId worker;
  uint64_t id = 0;
  std::function<uint64_t()> send;
};

class TrainingLoop {
 public:
  TrainingLoop(WorkerPool& pool, const Config& config, const std::string& run_dir)
      : pool_(pool), c_(config), run_dir_(run_dir) {}

  void run(bool resume);

 private:
  void start_workers();
  void init_rollout(const WorkerId& worker);
  void init_learners(const std::vector<WorkerId>& workers);
  // Sends every request and waits for the replies (by request index). A rollout worker
  // that dies or hangs is restarted with the current weights and its requests are sent
  // again; a worker hosting a learner rank that dies or hangs is a LearnerLost. An error
  // a worker reports is thrown as it is.
  std::vector<CommandReply> collect(std::vector<Request> requests);
  bool hosts_learner(const WorkerId& worker) const;
  void count_restart(const WorkerFailure& failure);
  void restart_rollout(const WorkerFailure& failure);
  // After a LearnerLost: restarts every learner-hosting worker and restores the newest
  // whole checkpoint (or the start). Returns the last step done.
  int64_t recover_learners(const LearnerLost& lost);
  // Puts learners, data order and metrics at `checkpoint` (nullopt: the start, including
  // the warm-up), then syncs weights. Returns the last step done.
  int64_t restore(const std::optional<CheckpointRef>& checkpoint);
  void warm_up();
  // `steps_since` steps (this one included) have run since `since`: the pace for the ETA.
  void run_step(int64_t step, Clock::time_point since, int64_t steps_since);
  // prompts[i]: the token ids of the step's prompt i (encoded once per step).
  std::vector<Sample> generate(int64_t step, const std::vector<std::vector<int32_t>>& prompts);
  // Returns how many scores were fallback scores (reward on_error: fallback).
  int64_t score(std::vector<Sample>& samples, const std::vector<size_t>& rows);
  std::vector<std::vector<float>> per_token_from_learners(const std::string& command,
                                                         const std::vector<TrainingSample>& samples);
  double probe_logprobs(const std::vector<TrainingSample>& batch, int64_t version);
  void compute_advantages(const std::vector<Sample>& samples, std::vector<TrainingSample>& batch);
  nlohmann::json train(std::vector<TrainingSample>& batch);
  // `rewind`: after a restore the version may go back (rollout workers may be ahead).
  void sync_weights(int64_t version, bool rewind = false);
  void load_current_weights(const WorkerId& worker);
  void checkpoint(int64_t step);
  void export_policy();
  std::string config_for_workers() const;
  std::vector<std::vector<std::vector<TrainingSample>>> rank_shares(const std::vector<TrainingSample>& batch) const;
  std::vector<WorkerId> learner_hosts() const;

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
  std::unique_ptr<MetricsWriter> metrics_;
  std::unique_ptr<ProgressLine> progress_;
  int64_t weight_version_ = 0;      // what the rollout workers hold
  bool shm_published_ = false;      // shm_name_ holds weight_version_
  bool publishing_ = false;         // learners are writing the next version
  int64_t restarts_ = 0;            // worker restarts so far (launcher.max_restarts)
};

int64_t host_cores() { return std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency())); }

// Workers get the config with thread counts that share this host's cores among them.
std::string TrainingLoop::config_for_workers() const {
  Config c = c_;
  if (c.rollout.threads == 0) c.rollout.threads = std::max<int64_t>(1, host_cores() / c.rollout.workers);
  return config_to_yaml(c);
}

void TrainingLoop::init_rollout(const WorkerId& worker) {
  const int64_t rank = worker.rank;
  pool_.wait({pool_.send(rollout_worker(c_, rank), "rollout_init",
                         nlohmann::json{{"model", model_dir_}, {"config", config_for_workers()}}.dump())});
}

void TrainingLoop::init_learners(const std::vector<WorkerId>& workers) {
  const std::string config_text = config_for_workers();
  const int64_t optimizer_steps = c_.experiment.steps * c_.learner.epochs * c_.learner.mini_batches;
  const std::string rendezvous = fmt::format("file://{}/.rendezvous-{}-{}", run_dir_, ::getpid(), restarts_);
  std::vector<uint64_t> pending;
  for (int64_t r = 0; r < c_.learner.workers; ++r) {
    nlohmann::json body = {{"model", model_dir_},
                           {"config", config_text},
                           {"rank", r},
                           {"world_size", c_.learner.workers},
                           {"rendezvous", c_.learner.workers > 1 ? rendezvous : std::string()},
                           {"total_optimizer_steps", optimizer_steps},
                           {"threads", c_.learner.threads > 0 ? c_.learner.threads
                                                              : std::max<int64_t>(1, host_cores() / c_.learner.workers)}};
    pending.push_back(pool_.send(workers[static_cast<size_t>(r)], "learner_init", body.dump()));
  }
  pool_.wait(pending);
  fs::remove(rendezvous.substr(7));
}

std::vector<WorkerId> TrainingLoop::learner_hosts() const {
  std::vector<WorkerId> ids;
  for (int64_t r = 0; r < c_.learner.workers; ++r) ids.push_back(learner_worker(c_, r));
  return ids;
}

bool TrainingLoop::hosts_learner(const WorkerId& worker) const {
  const std::vector<WorkerId> hosts = learner_hosts();
  return std::find(hosts.begin(), hosts.end(), worker) != hosts.end();
}

void TrainingLoop::start_workers() {
  for (int64_t r = 0; r < c_.rollout.workers; ++r) init_rollout(rollout_worker(c_, r));
  init_learners(learner_hosts());
}

void TrainingLoop::count_restart(const WorkerFailure& failure) {
  if (restarts_ >= c_.launcher.max_restarts) {
    throw Error(fmt::format("{}; not restarting it: the run has used all {} restarts (launcher.max_restarts)",
                            failure.what(), c_.launcher.max_restarts));
  }
  ++restarts_;
}

void TrainingLoop::restart_rollout(const WorkerFailure& failure) {
  WorkerFailure last = failure;
  while (true) {
    count_restart(last);
    log::warn("{}; restarting it ({} of {} restarts)", last.what(), restarts_, c_.launcher.max_restarts);
    try {
      pool_.restart(last.worker());
      init_rollout(last.worker());
      load_current_weights(last.worker());
      return;
    } catch (const WorkerFailure& again) {
      if (again.command_error() || hosts_learner(again.worker())) throw;
      last = again;  // the new process died too
    }
  }
}

// The weights the other rollout workers hold, for a restarted one.
void TrainingLoop::load_current_weights(const WorkerId& worker) {
  if (!shm_published_) return;  // the model directory's weights, which rollout_init loaded
  if (publishing_) return;       // the segment is being rewritten: the sync in progress delivers
  const auto replies = pool_.wait(
      {pool_.send(worker, "rollout_load_weights", nlohmann::json{{"shm", shm_name_}, {"rewind", true}}.dump())});
  const int64_t loaded = nlohmann::json::parse(replies.begin()->second.reply.body).at("version").get<int64_t>();
  TANDEM_CHECK(loaded == weight_version_, "{} loaded weight version {}, expected {}", worker.name(), loaded,
               weight_version_);
}

std::vector<CommandReply> TrainingLoop::collect(std::vector<Request> requests) {
  for (Request& r : requests) r.id = r.send();
  while (true) {
    std::vector<uint64_t> ids;
    for (const Request& r : requests) ids.push_back(r.id);
    try {
      auto replies = pool_.wait(ids);
      std::vector<CommandReply> out;
      for (const Request& r : requests) out.push_back(std::move(replies.at(r.id)));
      return out;
    } catch (const WorkerFailure& failure) {
      if (failure.command_error()) throw;  // it would fail again
      if (hosts_learner(failure.worker())) throw LearnerLost(failure);
      restart_rollout(failure);
      for (Request& r : requests) {
        if (r.worker == failure.worker()) r.id = r.send();  // its unfinished work, redone
      }
    }
  }
}

std::vector<Sample> TrainingLoop::generate(int64_t step, const std::vector<std::vector<int32_t>>& prompts) {
  const size_t workers = static_cast<size_t>(c_.rollout.workers);
  std::vector<Request> all;
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
    const WorkerId worker = rollout_worker(c_, static_cast<int64_t>(w));
    const std::string body = nlohmann::json{{"requests", requests}}.dump();
    all.push_back({worker, 0, [this, worker, body, tokens] {
                     return pool_.send(worker, "rollout_generate", body, {tokens});
                   }});
  }
  std::vector<Sample> samples;
  for (const CommandReply& reply : collect(std::move(all))) {
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

int64_t TrainingLoop::score(std::vector<Sample>& samples, const std::vector<size_t>& rows) {
  int64_t fallbacks = 0;
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
      const std::string what = rc.name + (rc.plugin.empty() ? "" : " (plugin " + rc.plugin + ")");
      std::string problem;  // what went wrong, as "reward X <problem>"
      double score = 0;
      try {
        score = rewards_[r]({prompt, response, s.tokens, row}).score;
        if (!std::isfinite(score)) {
          problem = fmt::format("returned {} for sample {} (prompt {}): scores must be finite", score, i, quoted(prompt));
        }
      } catch (const std::exception& e) {
        problem = fmt::format("failed on sample {} (prompt {}): {}", i, quoted(prompt), e.what());
      }
      if (!problem.empty()) {
        if (rc.on_error != "fallback") {
          throw Error(fmt::format("reward {} {} (reward.{}.on_error: fallback would score it reward.{}.fallback_score "
                                  "instead)",
                                  what, problem, r, r));
        }
        log::warn("reward {} {}: scored {} (fallback)", what, problem, rc.fallback_score);
        score = rc.fallback_score;
        ++fallbacks;
      }
      total += rc.weight * score;
    }
    s.reward = total;
  }
  return fallbacks;
}

// `command` (learner_values or learner_logprobs) over every sample: each rank reads a
// contiguous share; one float per response token comes back.
std::vector<std::vector<float>> TrainingLoop::per_token_from_learners(const std::string& command,
                                                                      const std::vector<TrainingSample>& samples) {
  const size_t ranks = static_cast<size_t>(c_.learner.workers);
  std::vector<Request> requests;
  for (size_t r = 0; r < ranks; ++r) {
    std::vector<TrainingSample> share;
    for (size_t i = samples.size() * r / ranks; i < samples.size() * (r + 1) / ranks; ++i) {
      TrainingSample probe;  // tokens are what matters; the codec wants every per-token field sized
      probe.prompt = samples[i].prompt;
      probe.response = samples[i].response;
      probe.old_logprobs.assign(samples[i].response.size(), 0.0f);
      probe.advantages.assign(samples[i].response.size(), 0.0f);
      share.push_back(std::move(probe));
    }
    auto encoded = std::make_shared<EncodedBatch>(encode_training_batch({share}));
    const WorkerId worker = learner_worker(c_, static_cast<int64_t>(r));
    requests.push_back({worker, 0, [this, worker, command, encoded] {
                          return pool_.send(worker, command, encoded->header, encoded->attachments);
                        }});
  }
  const std::vector<CommandReply> replies = collect(std::move(requests));
  std::vector<std::vector<float>> out;
  for (size_t r = 0; r < ranks; ++r) {
    TANDEM_CHECK(!replies[r].attachments.empty(), "{} reply: no frame", command);
    const std::string& frame = replies[r].attachments[0];
    size_t offset = 0;
    for (size_t i = samples.size() * r / ranks; i < samples.size() * (r + 1) / ranks; ++i) {
      const size_t n = samples[i].response.size();
      TANDEM_CHECK((offset + n) * 4 <= frame.size(), "{} reply: frame too short", command);
      out.emplace_back(n);
      std::memcpy(out.back().data(), frame.data() + offset * 4, n * 4);
      offset += n;
    }
  }
  return out;
}

// The weight-sync probe: the rollout engine's log-probs of the samples it just drew must
// be the learner's for the same tokens: both hold weight version `version`.
// Returns the largest difference; above weight_sync.probe_tolerance is an Error.
double TrainingLoop::probe_logprobs(const std::vector<TrainingSample>& batch, int64_t version) {
  const size_t count = std::min<size_t>(batch.size(), 16);
  const std::vector<TrainingSample> probes(batch.begin(), batch.begin() + static_cast<std::ptrdiff_t>(count));
  const std::vector<std::vector<float>> learner = per_token_from_learners("learner_logprobs", probes);
  double worst = 0;
  for (size_t i = 0; i < count; ++i) {
    for (size_t t = 0; t < probes[i].old_logprobs.size(); ++t) {
      const double d = std::abs(static_cast<double>(learner[i][t]) - probes[i].old_logprobs[t]);
      worst = std::isnan(d) ? INFINITY : std::max(worst, d);
    }
  }
  if (!(worst <= c_.weight_sync.probe_tolerance)) {
    throw Error(fmt::format("weight-sync probe at version {}: the rollout engine's log-probs differ from the learner's "
                            "by up to {:.3g} (weight_sync.probe_tolerance {}): the rollout workers do not hold the "
                            "learner's weights",
                            version, worst, c_.weight_sync.probe_tolerance));
  }
  return worst;
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
  std::vector<Request> requests;
  for (int64_t r = 0; r < c_.learner.workers; ++r) {
    auto encoded = std::make_shared<EncodedBatch>(encode_training_batch(shares[static_cast<size_t>(r)]));
    const WorkerId worker = learner_worker(c_, r);
    requests.push_back({worker, 0, [this, worker, encoded] {
                          return pool_.send(worker, "learner_train", encoded->header, encoded->attachments);
                        }});
  }
  return nlohmann::json::parse(collect(std::move(requests)).at(0).reply.body);
}

// The supervised warm-up (sft:): each step one batch of prompts with their gold
// responses (the dataset's sft.response_key field, then end-of-sequence), one optimizer
// step on the learners. Its own seeded prompt order leaves the RL order untouched.
void TrainingLoop::warm_up() {
  if (c_.sft.steps == 0) return;
  TANDEM_CHECK(!model_.eos_token_ids.empty(), "sft: the model {} names no end-of-sequence token", model_dir_);
  for (size_t i = 0; i < data_.rows.size(); ++i) {
    if (!data_.rows[i].count(c_.sft.response_key)) {
      throw Error(fmt::format("sft.response_key: {} row {}{} has no field \"{}\" (the gold response for the warm-up)",
                              data_.source, i + 1, data_.lines.empty() ? "" : fmt::format(" (line {})", data_.lines[i]),
                              c_.sft.response_key));
    }
  }
  const std::string path = run_dir_ + "/sft_metrics.jsonl";
  truncate_metrics(path, 0);
  MetricsWriter metrics(c_.logging.jsonl ? path : "");
  ProgressLine progress(c_.logging.console, c_.sft.steps);
  PromptOrder order(data_.rows.size(), mix(static_cast<uint64_t>(c_.experiment.seed), 0x5f7), true);
  const int32_t eos = static_cast<int32_t>(model_.eos_token_ids.front());
  const size_t ranks = static_cast<size_t>(c_.learner.workers);
  for (int64_t step = 1; step <= c_.sft.steps; ++step) {
    const Clock::time_point start = Clock::now();
    std::vector<TrainingSample> batch;
    for (size_t row : order.next(static_cast<size_t>(c_.sft.batch_size))) {
      TrainingSample s;
      s.prompt = tokenizer_->encode(data_.prompt(row));
      s.response = tokenizer_->encode(data_.rows[row].at(c_.sft.response_key));
      s.response.push_back(eos);
      s.old_logprobs.assign(s.response.size(), 0.0f);
      s.advantages.assign(s.response.size(), 0.0f);
      batch.push_back(std::move(s));
    }
    std::vector<Request> requests;
    for (size_t r = 0; r < ranks; ++r) {
      const std::vector<TrainingSample> share(batch.begin() + static_cast<std::ptrdiff_t>(batch.size() * r / ranks),
                                              batch.begin() + static_cast<std::ptrdiff_t>(batch.size() * (r + 1) / ranks));
      auto encoded = std::make_shared<EncodedBatch>(encode_training_batch({share}));
      const std::string body =
          nlohmann::json{{"lr", c_.sft.lr}, {"batch", nlohmann::json::parse(encoded->header)}}.dump();
      const WorkerId worker = learner_worker(c_, static_cast<int64_t>(r));
      requests.push_back({worker, 0, [this, worker, body, encoded] {
                            return pool_.send(worker, "learner_sft", body, encoded->attachments);
                          }});
    }
    const nlohmann::json result = nlohmann::json::parse(collect(std::move(requests)).at(0).reply.body);
    const double loss = result.at("loss").get<double>();
    metrics.write({{"step", static_cast<double>(step)},
                   {"sft/loss", loss},
                   {"sft/grad_norm", result.at("grad_norm").get<double>()},
                   {"sft/tokens", result.at("tokens").get<double>()},
                   {"time/step_s", seconds_since(start)}});
    progress.update(step, fmt::format("warm-up loss {:.3f}", loss));
    log::info("warm-up step {}: loss {:.4f}", step, loss);
  }
  progress.finish();
}

void TrainingLoop::sync_weights(int64_t version, bool rewind) {
  // The colocated slot 0 takes learner rank 0's weights in memory; everyone else reads shm.
  const bool local = colocated(c_);
  const bool shm = !local || c_.rollout.workers > 1;
  nlohmann::json publish = {{"version", version}, {"bucket_bytes", c_.weight_sync.bucket_mb << 20}};
  if (local) publish["local"] = true;
  if (shm) publish["shm"] = shm_name_;
  std::vector<Request> requests;
  for (const WorkerId& worker : learner_hosts()) {
    const std::string body = publish.dump();
    requests.push_back({worker, 0, [this, worker, body] { return pool_.send(worker, "learner_publish", body); }});
  }
  publishing_ = true;  // a rollout worker restarted meanwhile gets this version in the load below
  collect(std::move(requests));
  publishing_ = false;
  weight_version_ = version;
  shm_published_ = shm;
  requests.clear();
  for (int64_t r = 0; r < c_.rollout.workers; ++r) {
    const WorkerId worker = rollout_worker(c_, r);
    nlohmann::json load = local && r == 0 ? nlohmann::json{{"local", true}} : nlohmann::json{{"shm", shm_name_}};
    if (rewind) load["rewind"] = true;
    const std::string body = load.dump();
    requests.push_back({worker, 0, [this, worker, body] { return pool_.send(worker, "rollout_load_weights", body); }});
  }
  for (const CommandReply& reply : collect(std::move(requests))) {
    const int64_t loaded = nlohmann::json::parse(reply.reply.body).at("version").get<int64_t>();
    TANDEM_CHECK(loaded == version, "{} loaded weight version {}, expected {}", reply.reply.worker.name(), loaded,
                 version);
  }
}

void TrainingLoop::checkpoint(int64_t step) {
  const std::string dir = fmt::format("{}/checkpoints/step_{}", run_dir_, step);
  fs::create_directories(run_dir_ + "/checkpoints");
  std::vector<Request> requests;
  for (const WorkerId& worker : learner_hosts()) {
    const std::string body = nlohmann::json{{"dir", dir}}.dump();
    requests.push_back({worker, 0, [this, worker, body] { return pool_.send(worker, "learner_save", body); }});
  }
  collect(std::move(requests));
  const PromptOrder::Position position = order_->position();
  write_file_atomic(dir + "/controller_state.json",
                    nlohmann::json{{"step", step}, {"data_epoch", position.epoch}, {"data_index", position.index}}
                            .dump(2) +
                        "\n");
  write_checkpoint_manifest(dir);  // last: only now is the checkpoint usable
  prune_checkpoints(run_dir_, c_.experiment.keep_checkpoints);
}

int64_t TrainingLoop::restore(const std::optional<CheckpointRef>& checkpoint) {
  int64_t step = 0;
  order_.emplace(data_.rows.size(), static_cast<uint64_t>(c_.experiment.seed), c_.data.shuffle);
  if (checkpoint) {
    std::vector<Request> requests;
    for (const WorkerId& worker : learner_hosts()) {
      const std::string body = nlohmann::json{{"dir", checkpoint->dir}}.dump();
      requests.push_back({worker, 0, [this, worker, body] { return pool_.send(worker, "learner_load", body); }});
    }
    collect(std::move(requests));
    const std::string state_path = checkpoint->dir + "/controller_state.json";
    const nlohmann::json state = nlohmann::json::parse(read_file(state_path).value());
    step = state.at("step").get<int64_t>();
    order_->restore({state.at("data_epoch").get<int64_t>(), state.at("data_index").get<int64_t>()});
    log::info("restored {} (step {})", checkpoint->dir, step);
  } else {
    warm_up();
  }
  const std::string metrics_path = run_dir_ + "/metrics.jsonl";
  metrics_.reset();  // truncation replaces the file: reopen after it
  truncate_metrics(metrics_path, step);
  metrics_ = std::make_unique<MetricsWriter>(c_.logging.jsonl ? metrics_path : "");
  sync_weights(step, /*rewind=*/true);
  return step;
}

int64_t TrainingLoop::recover_learners(const LearnerLost& lost) {
  WorkerFailure last = lost.failure();
  while (true) {
    count_restart(last);
    log::warn("{}; restarting the learners from the last checkpoint ({} of {} restarts)", last.what(), restarts_,
              c_.launcher.max_restarts);
    std::fprintf(stderr, "\ntandem: %s\ntandem: restarting the learners from the last checkpoint\n", last.what());
    try {
      for (const WorkerId& worker : learner_hosts()) pool_.restart(worker);
      if (colocated(c_)) {  // the restarted slots hosted rollout ranks too
        for (const WorkerId& worker : learner_hosts()) {
          if (worker.rank < static_cast<uint32_t>(c_.rollout.workers)) init_rollout(worker);
        }
      }
      init_learners(learner_hosts());
      return restore(newest_whole_checkpoint(run_dir_));
    } catch (const LearnerLost& again) {
      last = again.failure();  // lost again while recovering
    } catch (const WorkerFailure& again) {
      if (again.command_error()) throw;
      last = again;
    }
  }
}

void TrainingLoop::export_policy() {
  std::vector<Request> requests;
  for (const WorkerId& worker : learner_hosts()) {
    const std::string body =
        nlohmann::json{{"dir", run_dir_ + "/policy"}, {"tokenizer_from", model_dir_}}.dump();
    requests.push_back({worker, 0, [this, worker, body] { return pool_.send(worker, "learner_export", body); }});
  }
  collect(std::move(requests));
}

void TrainingLoop::run_step(int64_t step, Clock::time_point since, int64_t steps_since) {
  const Clock::time_point step_start = Clock::now();
  const std::vector<size_t> rows = order_->next(static_cast<size_t>(c_.data.batch_size));
  std::vector<std::vector<int32_t>> prompts;
  for (size_t row : rows) prompts.push_back(tokenizer_->encode(data_.prompt(row)));
  std::vector<Sample> samples = generate(step, prompts);
  const double rollout_s = seconds_since(step_start);

  Clock::time_point t = Clock::now();
  const int64_t fallbacks = score(samples, rows);
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
  if (c_.algorithm.advantage == "gae") {
    std::vector<std::vector<float>> values = per_token_from_learners("learner_values", batch);
    for (size_t i = 0; i < batch.size(); ++i) batch[i].old_values = std::move(values[i]);
  }
  double probe_diff = NAN;
  if (c_.weight_sync.probe_every > 0 && (step - 1) % c_.weight_sync.probe_every == 0) {
    probe_diff = probe_logprobs(batch, step - 1);
  }
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
                   {"reward/fallbacks", static_cast<double>(fallbacks)},
                   {"response/count", n},
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
                         {"perf/train_tokens_per_s", static_cast<double>(response_tokens) / train_s},
                         {"perf/worker_restarts", static_cast<double>(restarts_)}});
  if (!std::isnan(probe_diff)) row.emplace_back("sync/probe_logprob_max_diff", probe_diff);
  metrics_->write(row);
  const double eta =
      seconds_since(since) / static_cast<double>(steps_since) * static_cast<double>(c_.experiment.steps - step);
  progress_->update(step, fmt::format("reward {:.3f}  kl {:.4f}  len {:.1f}  {:.0f} tok/s  eta {:.0f}s", mean,
                                      update.value("actor/kl", 0.0), static_cast<double>(response_tokens) / n,
                                      static_cast<double>(response_tokens) / step_s, eta));
  log::info("step {}: reward {:.4f}, step {:.2f}s (rollout {:.2f}, train {:.2f}, sync {:.3f})", step, mean, step_s,
            rollout_s, train_s, sync_s);
}

void TrainingLoop::run(bool resume) {
  model_dir_ = resolve_model_path(c_.model.path);
  model_ = read_model_config(model_dir_ + "/config.json");
  tokenizer_ = load_tokenizer(model_dir_);
  data_ = load_dataset(c_.data.train, c_.data.prompt_key);
  for (const RewardConfig& r : c_.reward) rewards_.push_back(make_reward(r));
  for (const std::string& stale : remove_stale_weights_shm()) log::info("removed stale weight segment {}", stale);
  shm_name_ = controller_weights_shm_name(::getpid());
  try {
    start_workers();
    int64_t step = restore(resume ? newest_whole_checkpoint(run_dir_) : std::nullopt);
    if (resume) std::fprintf(stderr, "tandem: resuming after step %lld\n", static_cast<long long>(step));
    progress_ = std::make_unique<ProgressLine>(c_.logging.console, c_.experiment.steps);
    Clock::time_point since = Clock::now();  // ETA: the pace of the steps run since (re)starting
    int64_t steps_since = 0;
    while (step < c_.experiment.steps) {
      try {
        run_step(++step, since, ++steps_since);
      } catch (const LearnerLost& lost) {
        step = recover_learners(lost);
        since = Clock::now();
        steps_since = 0;
      }
    }
    progress_->finish();
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

void run_training(WorkerPool& pool, const Config& config, const std::string& run_dir, bool resume) {
  TrainingLoop(pool, config, run_dir).run(resume);
}

}  // namespace tandem
