#include "rewards/scoring.h"

#include "rewards/http.h"
#include "rewards/python/pool.h"
#include "rewards/registry.h"

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

// A row field as JSON: null when absent; an object or array when the field holds one
// (rows keep non-string values as JSON text) and `parse_structures`; else the text.
nlohmann::json row_value(const std::map<std::string, std::string>& row, const std::string& key, bool parse_structures) {
  auto it = row.find(key);
  if (it == row.end()) return nullptr;
  const std::string& text = it->second;
  if (parse_structures && !text.empty() && (text[0] == '{' || text[0] == '[')) {
    nlohmann::json parsed = nlohmann::json::parse(text, nullptr, false);
    if (!parsed.is_discarded()) return parsed;
  }
  return text;
}

nlohmann::json reward_arguments(const RewardInput& in) {
  auto data_source = in.row.find("data_source");
  nlohmann::json extra_info = row_value(in.row, "extra_info", true);
  if (in.conversation) {
    // Multi-turn: the conversation joins the row's extra_info (an object; anything else
    // the row held stays under "row_extra_info").
    if (!extra_info.is_object()) {
      nlohmann::json held = std::move(extra_info);
      extra_info = nlohmann::json::object();
      if (!held.is_null()) extra_info["row_extra_info"] = std::move(held);
    }
    const nlohmann::json conversation = nlohmann::json::parse(*in.conversation, nullptr, false);
    if (conversation.is_object()) {
      for (const auto& [key, value] : conversation.items()) extra_info[key] = value;
    }
  }
  return {{"data_source", data_source == in.row.end() ? std::string() : data_source->second},
          {"solution_str", in.response},
          {"ground_truth", row_value(in.row, "answer", false)},
          {"extra_info", std::move(extra_info)}};
}

RewardOutcome outcome_from_score_value(const nlohmann::json& value) {
  RewardOutcome outcome;
  const bool is_object = value.is_object() && value.contains("score") && value["score"].is_number();
  if (!value.is_number() && !is_object) {
    outcome.error = fmt::format("expected a number or an object with a numeric \"score\", got {}",
                                value.dump().substr(0, 200));
    return outcome;
  }
  outcome.result.score = (is_object ? value["score"] : value).get<double>();
  if (!std::isfinite(outcome.result.score)) {
    outcome.error = fmt::format("returned {}: scores must be finite", outcome.result.score);
    return outcome;
  }
  if (is_object) {
    for (const auto& [name, part] : value.items()) {
      if (name == "score") continue;
      if (part.is_number()) outcome.result.parts.emplace_back(name, part.get<double>());
      if (part.is_boolean()) outcome.result.parts.emplace_back(name, part.get<bool>() ? 1.0 : 0.0);
    }
  }
  return outcome;
}

std::unique_ptr<RewardScorer> make_reward_scorer(const RewardConfig& config, size_t index,
                                                 const std::vector<std::string>& python_path) {
  if (!config.python.empty()) return std::make_unique<PythonRewardPool>(config, index, "", python_path);
  if (!config.http.empty()) {
    auto reward = std::make_unique<HttpReward>(config, index);
    reward->check_answers();  // a server that is down is found now, not after a whole rollout
    return reward;
  }
  return make_native_scorer(make_reward(config), config.workers);
}

}  // namespace tandem
