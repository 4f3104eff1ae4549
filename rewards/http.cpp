#include "rewards/http.h"

#include "core/error.h"
#include "core/http_post.h"
#include "core/log.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

namespace tandem {

namespace {

// Worth trying again: the server may answer next time.
bool transient(long status) { return status == 0 || status == 429 || status >= 500; }

}  // namespace

HttpReward::HttpReward(const RewardConfig& config, size_t index) : config_(config), index_(index) {}

std::vector<RewardOutcome> HttpReward::score_batch(const std::vector<RewardInput>& inputs, size_t begin,
                                                   size_t end) const {
  nlohmann::json samples = nlohmann::json::array();
  for (size_t i = begin; i < end; ++i) {
    nlohmann::json sample = reward_arguments(inputs[i]);
    sample["prompt"] = inputs[i].prompt;
    samples.push_back(std::move(sample));
  }
  const std::string body =
      nlohmann::json{{"samples", samples}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const size_t count = end - begin;
  auto all = [&](const std::string& error) {
    std::vector<RewardOutcome> outcomes(count);
    for (RewardOutcome& o : outcomes) o.error = error;
    return outcomes;
  };

  HttpPostResult response;
  double backoff_s = 0.5;
  for (int64_t attempt = 0;; ++attempt) {
    response = http_post_json(config_.http, body, config_.timeout_s);
    if (response.permanent || !transient(response.status) || attempt >= config_.retries) break;
    log::warn("reward.{} ({}): POST {} {}; trying again in {} s ({} of {} retries)", index_, config_.name, config_.http,
              response.status == 0 ? response.body : fmt::format("answered {}", response.status), backoff_s,
              attempt + 1, config_.retries);
    std::this_thread::sleep_for(std::chrono::duration<double>(backoff_s));
    backoff_s *= 2;
  }
  const std::string attempts = fmt::format("{} attempt{}", config_.retries + 1, config_.retries == 0 ? "" : "s");
  if (response.status == 0) {
    return all(fmt::format("POST {} failed after {}: {}", config_.http, attempts, response.body));
  }
  if (response.status != 200) {
    return all(fmt::format("POST {} answered HTTP {}{}: {}", config_.http, response.status,
                           transient(response.status) ? " after " + attempts : std::string(),
                           response.body.substr(0, 300)));
  }
  nlohmann::json answer = nlohmann::json::parse(response.body, nullptr, false);
  if (answer.is_object() && answer.contains("scores")) answer = answer["scores"];
  if (!answer.is_array() || answer.size() != count) {
    return all(fmt::format("POST {} answered {} for {} samples; expected {{\"scores\": [...]}} with one score per "
                           "sample",
                           config_.http,
                           answer.is_array() ? fmt::format("{} scores", answer.size()) : response.body.substr(0, 200),
                           count));
  }
  std::vector<RewardOutcome> outcomes;
  for (const nlohmann::json& value : answer) {
    outcomes.push_back(outcome_from_score_value(value));
    if (!outcomes.back().error.empty()) outcomes.back().error = "the server's score: " + outcomes.back().error;
  }
  return outcomes;
}

void HttpReward::check_answers() const {
  const double timeout_s = std::min(config_.timeout_s, 5.0);
  const HttpPostResult response = http_post_json(config_.http, "{\"samples\": []}", timeout_s);
  if (response.status == 0) {
    throw Error(fmt::format("{} does not answer (a POST of an empty batch, the health check, within {} s: {}); start "
                            "the reward server first, or check the URL",
                            config_.http, timeout_s, response.body));
  }
  if (response.status == 404 || response.status == 405) {
    throw Error(fmt::format("{} answered HTTP {} to a POST (the health check, an empty batch): a server is there, "
                            "but not a reward endpoint at this path",
                            config_.http, response.status));
  }
}

std::vector<RewardOutcome> HttpReward::score(const std::vector<RewardInput>& inputs) {
  std::vector<RewardOutcome> outcomes(inputs.size());
  if (inputs.empty()) return outcomes;
  const size_t concurrency = static_cast<size_t>(reward_parallelism(config_.workers));
  const size_t batch = config_.batch_size > 0 ? static_cast<size_t>(config_.batch_size)
                                              : (inputs.size() + concurrency - 1) / concurrency;
  const size_t batches = (inputs.size() + batch - 1) / batch;
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t b = next++; b < batches; b = next++) {
      const size_t begin = b * batch, end = std::min(inputs.size(), begin + batch);
      std::vector<RewardOutcome> scored = score_batch(inputs, begin, end);
      std::move(scored.begin(), scored.end(), outcomes.begin() + static_cast<std::ptrdiff_t>(begin));
    }
  };
  std::vector<std::thread> threads;
  for (size_t t = 1; t < std::min(concurrency, batches); ++t) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
  return outcomes;
}

}  // namespace tandem
