// What a training step reports about its samples: reward parts, lengths, clipping,
// advantages (metrics.jsonl), and a few whole completions (samples.jsonl), as verl's
// generation logger does.
#include "controller/loop/training_loop_impl.h"

#include "agent/trajectory.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

namespace tandem::training {

namespace {

// Keys in first-seen order with running sums, for the reward parts.
struct MeanByKey {
  std::vector<std::string> order;
  std::map<std::string, std::pair<double, double>> sum_count;
  void add(const std::string& key, double value) {
    auto [it, inserted] = sum_count.emplace(key, std::pair<double, double>{0.0, 0.0});
    if (inserted) order.push_back(key);
    it->second.first += value;
    it->second.second += 1;
  }
};

}  // namespace

std::string metric_name_part(const std::string& name) {
  std::string out;
  for (char ch : name) out += ch == '/' || static_cast<unsigned char>(ch) < 0x20 ? '_' : ch;
  return out;
}

std::vector<std::string> reward_metric_keys(const std::vector<RewardConfig>& rewards) {
  std::map<std::string, int> uses;
  for (const RewardConfig& r : rewards) ++uses[metric_name_part(r.name)];
  // The total's and the counters' keys: a reward named `timeouts` becomes reward/timeouts_N.
  std::set<std::string> taken = {"reward/mean", "reward/std", "reward/fallbacks", "reward/timeouts"};
  std::vector<std::string> keys;
  for (size_t i = 0; i < rewards.size(); ++i) {
    const std::string name = metric_name_part(rewards[i].name);
    std::string key = "reward/" + name;
    if (uses[name] > 1 || taken.count(key)) key += "_" + std::to_string(i);
    while (taken.count(key)) key += "_";  // a reward literally named like another's suffixed key
    taken.insert(key);
    keys.push_back(key);
  }
  return keys;
}

namespace {

// multi_turn/*: per sample means of turns and calls, counts of errors and stop reasons.
MetricRow multi_turn_metrics(const Config& c, const std::vector<Sample>& samples) {
  double environment_reward = 0, environment_steps = 0;
  double turns = 0, calls = 0, errors = 0, parse_errors = 0, tool_seconds = 0, policy_tokens = 0;
  std::map<std::string, double> stops;
  for (StopReason reason : all_stop_reasons()) stops[stop_reason_name(reason)] = 0;
  for (const Sample& s : samples) {
    turns += static_cast<double>(s.turns);
    calls += static_cast<double>(s.tool_calls);
    errors += static_cast<double>(s.tool_errors);
    parse_errors += static_cast<double>(s.parse_errors);
    tool_seconds += s.tool_seconds;
    for (float m : s.loss_mask) policy_tokens += m;
    stops[s.stop_reason] += 1;
    environment_reward += s.environment_reward;
    environment_steps += static_cast<double>(s.environment_steps);
  }
  const double n = static_cast<double>(samples.size());
  MetricRow row = {{"multi_turn/turns_mean", turns / n},
                   {"multi_turn/tool_calls_mean", calls / n},
                   {"multi_turn/tool_errors", errors},
                   {"multi_turn/parse_errors", parse_errors},
                   {"multi_turn/tool_seconds_mean", calls > 0 ? tool_seconds / calls : 0.0},
                   {"multi_turn/policy_tokens_mean", policy_tokens / n}};
  for (const auto& [reason, count] : stops) row.emplace_back("multi_turn/stop/" + reason, count);
  if (c.has_environment()) {
    row.emplace_back("multi_turn/env_reward_mean", environment_reward / n);
    row.emplace_back("multi_turn/env_steps_mean", environment_steps / n);
  }
  return row;
}

}  // namespace

MetricRow sample_metrics(const Config& c, const std::vector<Sample>& samples, const std::vector<TrainingSample>& batch) {
  MetricRow row;
  if (samples.empty()) return row;
  const double n = static_cast<double>(samples.size());
  const std::vector<std::string> keys = reward_metric_keys(c.reward);
  MeanByKey parts;
  for (size_t r = 0; r < c.reward.size(); ++r) {
    double sum = 0;
    for (const Sample& s : samples) {
      sum += c.reward[r].weight * s.reward_results.at(r).score;
      for (const auto& [part, value] : s.reward_results[r].parts) {
        parts.add(keys[r] + "/" + metric_name_part(part), value);
      }
    }
    row.emplace_back(keys[r], sum / n);
  }
  for (const std::string& key : parts.order) {
    const auto& [sum, count] = parts.sum_count.at(key);
    row.emplace_back(key, sum / count);
  }

  double length_sum = 0, clipped = 0;
  double length_max = 0, length_min = std::numeric_limits<double>::infinity();
  for (const Sample& s : samples) {
    const double length = static_cast<double>(s.tokens.size());
    length_sum += length;
    length_max = std::max(length_max, length);
    length_min = std::min(length_min, length);
    if (s.finish_reason == "length") clipped += 1;
  }
  row.insert(row.end(), {{"response/length_mean", length_sum / n},
                         {"response/length_max", length_max},
                         {"response/length_min", length_min},
                         {"response/clip_ratio", clipped / n}});
  if (c.multi_turn()) {
    const MetricRow turns = multi_turn_metrics(c, samples);
    row.insert(row.end(), turns.begin(), turns.end());
  }

  double prompt_sum = 0, advantage_sum = 0, advantage_count = 0;
  double advantage_max = -std::numeric_limits<double>::infinity(), advantage_min = -advantage_max;
  for (const TrainingSample& t : batch) {
    prompt_sum += static_cast<double>(t.prompt.size());
    for (float a : t.advantages) {
      advantage_sum += a;
      advantage_count += 1;
      advantage_max = std::max(advantage_max, static_cast<double>(a));
      advantage_min = std::min(advantage_min, static_cast<double>(a));
    }
  }
  // Every sample of a prompt repeats its length: the mean over samples is the mean over prompts.
  row.emplace_back("prompt/length_mean", prompt_sum / static_cast<double>(batch.size()));
  if (advantage_count > 0) {
    row.insert(row.end(), {{"critic/advantages/mean", advantage_sum / advantage_count},
                           {"critic/advantages/max", advantage_max},
                           {"critic/advantages/min", advantage_min}});
  }
  return row;
}

std::vector<std::string> sample_log_rows(const Config& c, int64_t step, const std::vector<Sample>& samples,
                                         const Dataset& data, const std::vector<size_t>& rows, size_t count) {
  std::vector<std::string> lines;
  count = std::min(samples.size(), count);
  const std::vector<std::string> keys = reward_metric_keys(c.reward);
  for (size_t k = 0; k < count; ++k) {
    // Spread over the batch: with group_size samples per prompt, different prompts first.
    const Sample& s = samples[k * samples.size() / count];
    nlohmann::ordered_json rewards = nlohmann::ordered_json::object(), parts = nlohmann::ordered_json::object();
    for (size_t r = 0; r < c.reward.size(); ++r) {
      const std::string name = keys[r].substr(std::string("reward/").size());
      rewards[name] = s.reward_results.at(r).score;
      for (const auto& [part, value] : s.reward_results[r].parts) parts[name + "/" + metric_name_part(part)] = value;
    }
    nlohmann::ordered_json row = {{"step", step},
                                {"weight_version", s.version},
                                {"prompt", data.prompt(rows.at(s.prompt_slot))},  // an environment's: in messages
                                {"response", s.text},
                                {"reward", s.reward},
                                {"rewards", rewards},
                                {"reward_parts", parts},
                                {"response_tokens", s.tokens.size()},
                                {"finish_reason", s.finish_reason}};
    const DataRow& data_row = data.rows.at(rows.at(s.prompt_slot));
    if (auto it = data_row.find("answer"); it != data_row.end()) row["ground_truth"] = it->second;
    if (auto it = data_row.find("data_source"); it != data_row.end()) row["data_source"] = it->second;
    if (s.multi_turn) {  // the whole conversation, each message with its token span and kind
      row["stop_reason"] = s.stop_reason;
      const nlohmann::ordered_json conversation = nlohmann::ordered_json::parse(s.conversation, nullptr, false);
      if (conversation.is_object() && conversation.contains("messages")) row["messages"] = conversation["messages"];
    }
    lines.push_back(row.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  return lines;
}

}  // namespace tandem::training
