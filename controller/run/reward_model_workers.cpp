#include "controller/run/reward_model_workers.h"

#include "controller/launch/launch_plan.h"
#include "controller/run/model_reward.h"
#include "controller/workers/worker_pool.h"
#include "core/command_codec.h"
#include "core/error.h"
#include "core/files.h"
#include "core/log.h"
#include "rollout/rollout_commands.capnp.h"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <future>
#include <mutex>
#include <thread>

namespace tandem {

namespace {

// One score() call's sequences, for the owner thread.
struct ScoreJob {
  std::vector<int32_t> tokens;
  std::vector<uint32_t> lengths;
  std::promise<std::vector<float>> scores;  // one per sequence
};

class RewardModelWorkers : public RewardScorer {
 public:
  RewardModelWorkers(const Config& c, size_t index, int64_t first_rank)
      : config_(c), entry_(c.reward[index]), index_(index), model_(read_reward_model_config(entry_.model)),
        samples_(entry_, model_) {
    if (c.launcher.kind != "local" && c.launcher.kind != "slurm") {
      throw Error(fmt::format("reward-model workers are started by the local and slurm launchers; with launcher.kind "
                              "{} set reward.{}.workers: 0 (the controller scores)",
                              c.launcher.kind, index));
    }
    for (int64_t r = 0; r < entry_.workers; ++r) ids_.push_back({"reward_model", static_cast<uint32_t>(first_rank + r)});
    // The longest sequence a sample makes: its prompt and everything after it.
    const int64_t after_prompt = c.multi_turn() ? c.rollout.multi_turn.max_total_tokens : c.rollout.max_new_tokens;
    max_sequence_tokens_ = c.data.max_prompt_length > 0
                               ? std::min(model_.max_position_embeddings, c.data.max_prompt_length + after_prompt)
                               : model_.max_position_embeddings;
  }

  ~RewardModelWorkers() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (owner_.joinable()) owner_.join();
  }

  void start(const std::string& run_dir) override {
    if (owner_.joinable()) return;
    owner_ = std::thread([this, run_dir] { own_pool(run_dir); });
  }

  std::vector<RewardOutcome> score(const std::vector<RewardInput>& inputs) override {
    if (!owner_.joinable()) throw Error(fmt::format("reward.{}: the reward-model workers were not started", index_));
    if (inputs.empty()) return {};
    auto job = std::make_shared<ScoreJob>();
    for (const RewardInput& input : inputs) {
      const std::vector<int32_t> ids = samples_.tokens(input);
      job->tokens.insert(job->tokens.end(), ids.begin(), ids.end());
      job->lengths.push_back(static_cast<uint32_t>(ids.size()));
    }
    std::future<std::vector<float>> done = job->scores.get_future();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      jobs_.push_back(job);
    }
    wake_.notify_all();
    const std::vector<float> scores = done.get();  // rethrows the owner thread's failure
    std::vector<RewardOutcome> out;
    out.reserve(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) out.push_back(samples_.outcome(scores[i], inputs[i]));
    return out;
  }

 private:
  // The owner thread: the pool lives and dies here. Nothing may escape a thread
  // (std::terminate): a failure goes to the jobs, or to the log once the run's scoring ended.
  void own_pool(const std::string& run_dir) {
    try {
      serve(run_dir);
    } catch (const std::exception& e) {
      log::error("reward.{}: the reward-model workers' thread failed: {}", index_, e.what());
    } catch (...) {
      log::error("reward.{}: the reward-model workers' thread failed", index_);
    }
  }

  void serve(const std::string& run_dir) {
    std::exception_ptr start_failure;
    std::unique_ptr<TempDir> sockets;  // before the pool: it outlives the pool's socket
    std::unique_ptr<WorkerPool> pool;
    try {
      sockets = std::make_unique<TempDir>("tandem-rm-");
      Config launch = config_;
      launch.launcher.port = 0;  // the run's own pool holds a fixed port; these take any free one
      LaunchPlan plan = plan_launch(launch, run_dir, sockets->path(), ids_);
      pool = std::make_unique<WorkerPool>(std::move(plan.pool), std::move(plan.launcher));
      pool->start(ids_);
      load(*pool, ids_);
    } catch (...) {
      start_failure = std::current_exception();
    }
    while (true) {
      std::shared_ptr<ScoreJob> job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        // Idle with a pool: wake often to keep its heartbeats going.
        wake_.wait_for(lock, std::chrono::milliseconds(pool && !start_failure ? 0 : 200),
                       [&] { return stopping_ || !jobs_.empty(); });
        if (stopping_) break;
        if (!jobs_.empty()) {
          job = jobs_.front();
          jobs_.pop_front();
        }
      }
      if (!job) {
        try {
          if (pool && !start_failure) idle(*pool);
        } catch (...) {
          start_failure = std::current_exception();  // every later call gets it
        }
        continue;
      }
      if (start_failure) {
        job->scores.set_exception(start_failure);
        continue;
      }
      try {
        job->scores.set_value(run(*pool, *job));
      } catch (...) {
        job->scores.set_exception(std::current_exception());
      }
    }
    if (pool) pool->shutdown("the run's scoring ended");  // idempotent; ~WorkerPool ends the rest
  }

  // Between calls: heartbeats out, messages and exits in; a worker's failure is recorded
  // by the pool and handled by the next call.
  static void idle(WorkerPool& pool) {
    try {
      pool.poll_events(0.05);
    } catch (const Interrupted&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the run's own thread stops the run
    }
  }

  std::string init_body() const {
    return encode_body<wire::RewardModelInit>([&](wire::RewardModelInit::Builder b) {
      b.setModel(entry_.model);
      b.setDevice(entry_.device);
      b.setDtype(config_.rollout.dtype);
      b.setThreads(config_.rollout.threads);
      b.setMaxSequenceTokens(max_sequence_tokens_);
      b.setPassTokens(std::max<int64_t>(config_.rollout.max_batch_tokens, 1));
      b.setPassSequences(entry_.batch_size > 0 ? entry_.batch_size : 32);
    });
  }

  void load(WorkerPool& pool, const std::vector<WorkerId>& ids) const {
    std::vector<uint64_t> requests;
    for (const WorkerId& id : ids) requests.push_back(pool.send(id, "reward_model_init", init_body()));
    std::map<uint64_t, CommandReply> replies = pool.wait(requests);
    for (size_t i = 0; i < ids.size(); ++i) {
      const Body<wire::RewardModelReady> ready(replies.at(requests[i]).reply.body, "reward_model_init");
      log::info("reward.{}: {} holds {} on {}", index_, ids[i].name(), entry_.model, to_string(ready->getBackend()));
    }
  }

  // The job's sequences in contiguous parts, one per worker; a failed part's worker is
  // restarted, loaded again and sent the part again, once.
  std::vector<float> run(WorkerPool& pool, const ScoreJob& job) const {
    const size_t n = job.lengths.size();
    const size_t workers = std::min(ids_.size(), n);
    const size_t per_worker = (n + workers - 1) / workers;
    struct Part {
      WorkerId worker;
      size_t first = 0, last = 0;
      int64_t token_begin = 0, token_end = 0;
    };
    std::vector<Part> parts;
    int64_t token = 0;
    for (size_t w = 0, first = 0; first < n; ++w, first += per_worker) {
      Part part{ids_[w], first, std::min(n, first + per_worker), token, token};
      for (size_t s = part.first; s < part.last; ++s) part.token_end += job.lengths[s];
      token = part.token_end;
      parts.push_back(part);
    }
    std::vector<float> scores(n);
    const auto send = [&](const Part& part) {
      const std::string body = encode_body<wire::RewardModelScore>([&](wire::RewardModelScore::Builder b) {
        auto lengths = b.initLengths(static_cast<unsigned>(part.last - part.first));
        for (size_t s = part.first; s < part.last; ++s) lengths.set(static_cast<unsigned>(s - part.first), job.lengths[s]);
      });
      std::string frame(static_cast<size_t>(part.token_end - part.token_begin) * sizeof(int32_t), '\0');
      std::memcpy(frame.data(), job.tokens.data() + part.token_begin, frame.size());
      return pool.send(part.worker, "reward_model_score", body, {std::move(frame)});
    };
    const auto take = [&](const Part& part, const CommandReply& reply) {
      const size_t count = part.last - part.first;
      if (reply.attachments.size() != 1 || reply.attachments[0].size() != count * sizeof(float)) {
        throw Error(fmt::format("reward.{}: {} answered reward_model_score without {} scores", index_,
                                part.worker.name(), count));
      }
      std::memcpy(scores.data() + part.first, reply.attachments[0].data(), reply.attachments[0].size());
    };
    std::vector<uint64_t> requests(parts.size(), 0);  // 0: not sent
    const auto forget_all = [&] {
      for (uint64_t request : requests) {
        if (request != 0) pool.forget(request);
      }
    };
    for (int attempt = 0;; ++attempt) {
      try {
        // What is not in flight goes (again): a restart forgets its worker's requests.
        for (size_t p = 0; p < parts.size(); ++p) {
          if (requests[p] == 0 || !pool.has_request(requests[p])) requests[p] = send(parts[p]);
        }
        std::map<uint64_t, CommandReply> replies = pool.wait(requests);
        for (size_t p = 0; p < parts.size(); ++p) take(parts[p], replies.at(requests[p]));
        return scores;
      } catch (const WorkerFailure& failure) {
        // A bad request would fail again; a second failure in one call is not chance.
        if (failure.command_error() || attempt > 0) {
          forget_all();
          throw;
        }
        log::warn("reward.{}: {}; restarting it and scoring its part again", index_, failure.what());
        try {
          pool.restart(failure.worker());
          load(pool, {failure.worker()});
        } catch (...) {
          forget_all();
          throw;
        }
      }
    }
  }

  Config config_;
  RewardConfig entry_;
  size_t index_;
  ModelConfig model_;
  RewardModelSamples samples_;
  std::vector<WorkerId> ids_;
  int64_t max_sequence_tokens_ = 0;

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<ScoreJob>> jobs_;
  bool stopping_ = false;
  std::thread owner_;
};

}  // namespace

std::unique_ptr<RewardScorer> make_reward_model_workers(const Config& config, size_t index, int64_t first_rank) {
  return std::make_unique<RewardModelWorkers>(config, index, first_rank);
}

}  // namespace tandem
