#include "rewards/scoring_thread.h"

#include <chrono>

namespace tandem {

ScoringThread::ScoringThread(std::vector<std::unique_ptr<RewardScorer>>& rewards)
    : rewards_(rewards), thread_([this] { run(); }) {}

void ScoringThread::begin(std::vector<const std::string*> prompts, std::vector<const std::map<std::string, std::string>*> rows) {
  std::lock_guard<std::mutex> lock(mutex_);
  prompts_ = std::move(prompts);
  rows_ = std::move(rows);
  done_.clear();
  busy_seconds_ = 0;
}

ScoringThread::~ScoringThread() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    queue_.clear();
  }
  wake_.notify_all();
  thread_.join();
}

void ScoringThread::submit(std::vector<ScoredSample> samples) {
  if (samples.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(samples));
  }
  wake_.notify_all();
}

bool ScoringThread::wait_idle_for(double seconds) {
  std::unique_lock<std::mutex> lock(mutex_);
  return idle_.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return queue_.empty() && !busy_; });
}

std::map<std::pair<size_t, int64_t>, ScoredSample> ScoringThread::finish() {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_.wait(lock, [&] { return queue_.empty() && !busy_; });
  if (error_) {
    std::exception_ptr error = error_;
    error_ = nullptr;
    done_.clear();
    std::rethrow_exception(error);
  }
  return std::move(done_);
}

void ScoringThread::run() {
  while (true) {
    std::vector<ScoredSample> batch;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      // Everything queued so far, as one batch: the scorers spread it over their workers.
      while (!queue_.empty()) {
        for (ScoredSample& s : queue_.front()) batch.push_back(std::move(s));
        queue_.pop_front();
      }
      busy_ = true;
    }
    const auto start = std::chrono::steady_clock::now();
    std::vector<RewardInput> inputs;
    inputs.reserve(batch.size());
    for (const ScoredSample& s : batch) {
      inputs.push_back({*prompts_[s.prompt_slot], s.text, s.tokens, *rows_[s.prompt_slot],
                        s.conversation.empty() ? nullptr : &s.conversation});
    }
    std::vector<std::vector<RewardOutcome>> by_reward;
    try {
      for (auto& reward : rewards_) by_reward.push_back(reward->score(inputs));
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();  // for finish(): the run stops with it
      busy_ = false;
      idle_.notify_all();
      continue;
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (size_t i = 0; i < batch.size(); ++i) {
        for (auto& outcomes : by_reward) batch[i].outcomes.push_back(std::move(outcomes[i]));
        const std::pair<size_t, int64_t> key{batch[i].prompt_slot, batch[i].sample_index};
        done_[key] = std::move(batch[i]);
      }
      busy_seconds_ += seconds;
      busy_ = false;
    }
    idle_.notify_all();
  }
}

}  // namespace tandem
