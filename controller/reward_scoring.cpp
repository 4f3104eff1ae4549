#include "controller/reward_scoring.h"

#include "controller/python_reward_pool.h"
#include "plugins/reward_registry.h"

#include <fmt/format.h>

#include <atomic>
#include <cmath>
#include <thread>

namespace tandem {

namespace {

class NativeScorer : public RewardScorer {
 public:
  NativeScorer(RewardFn fn, int64_t threads) : fn_(std::move(fn)), threads_(reward_parallelism(threads)) {}

  std::vector<RewardOutcome> score(const std::vector<RewardInput>& inputs) override {
    std::vector<RewardOutcome> outcomes(inputs.size());
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t i = next++; i < inputs.size(); i = next++) outcomes[i] = score_one(inputs[i]);
    };
    const size_t helpers = std::min<size_t>(static_cast<size_t>(threads_), inputs.size()) - (inputs.empty() ? 0 : 1);
    std::vector<std::thread> pool;
    for (size_t t = 0; t < helpers; ++t) pool.emplace_back(work);
    work();
    for (std::thread& t : pool) t.join();
    return outcomes;
  }

 private:
  RewardOutcome score_one(const RewardInput& input) const {
    RewardOutcome outcome;
    try {
      outcome.result = fn_(input);
      if (!std::isfinite(outcome.result.score)) {
        outcome.error = fmt::format("returned {}: scores must be finite", outcome.result.score);
      }
    } catch (const std::exception& e) {
      outcome.error = e.what();
    }
    return outcome;
  }

  RewardFn fn_;
  int64_t threads_;
};

}  // namespace

int64_t reward_parallelism(int64_t requested) {
  if (requested > 0) return requested;
  const int64_t cores = static_cast<int64_t>(std::thread::hardware_concurrency());
  return std::max<int64_t>(1, std::min<int64_t>(cores, 8));
}

std::unique_ptr<RewardScorer> make_native_scorer(RewardFn fn, int64_t threads) {
  return std::make_unique<NativeScorer>(std::move(fn), threads);
}

std::unique_ptr<RewardScorer> make_reward_scorer(const RewardConfig& config, size_t index) {
  if (!config.python.empty()) return std::make_unique<PythonRewardPool>(config, index);
  return make_native_scorer(make_reward(config), config.workers);
}

}  // namespace tandem
