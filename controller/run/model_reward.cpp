#include "controller/run/model_reward.h"

#include "actor/model_config.h"
#include "actor/model_weights.h"
#include "actor/policy_torch.h"
#include "core/error.h"
#include "core/files.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <mutex>

namespace tandem {

ModelConfig read_reward_model_config(const std::string& dir) {
  if (!std::filesystem::is_directory(dir)) {
    throw Error(fmt::format("{}: no such directory (a reward model is the directory `tandem train-rm` exports to "
                            "RUN_DIR/reward_model: train it first)",
                            dir));
  }
  ModelConfig config = read_sequence_classifier_config(dir);
  if (config.num_labels != 1) {
    throw Error(fmt::format("{}: score.weight has {} rows; a reward model's has one (num_labels 1)", dir,
                            config.num_labels));
  }
  return config;
}

RewardModelSamples::RewardModelSamples(const RewardConfig& c, const ModelConfig& model)
    : dir_(c.model), eos_token_ids_(model.eos_token_ids), missing_eos_penalty_(c.missing_eos_penalty),
      tokenizer_(load_tokenizer(c.model)) {
  if (c.normalize) read_score_statistics();
}

std::vector<int32_t> RewardModelSamples::tokens(const RewardInput& input) const {
  std::vector<int32_t> ids = tokenizer_->encode(input.prompt);
  ids.insert(ids.end(), input.response_ids.begin(), input.response_ids.end());
  if (ids.empty()) ids.push_back(0);  // nothing to read: scored as a lone token
  return ids;
}

RewardOutcome RewardModelSamples::outcome(double raw_score, const RewardInput& input) const {
  const bool ended = !input.response_ids.empty() && is_end_of_sequence(input.response_ids.back());
  const double s = (raw_score - mean_) / std_ - (ended ? 0.0 : missing_eos_penalty_);
  if (!std::isfinite(s)) return {RewardResult{}, fmt::format("the reward model {} scored {}", dir_, s)};
  return {RewardResult{s, {{"missing_eos", ended ? 0.0 : 1.0}}}, ""};
}

bool RewardModelSamples::is_end_of_sequence(int32_t id) const {
  return std::find(eos_token_ids_.begin(), eos_token_ids_.end(), id) != eos_token_ids_.end();
}

// reward.N.normalize: the mean and standard deviation config.json records (tandem train-rm
// writes them over its validation answers; OpenRLHF's normalize_reward uses the same keys).
void RewardModelSamples::read_score_statistics() {
  const nlohmann::json config = nlohmann::json::parse(read_file(dir_ + "/config.json").value_or(""), nullptr, false);
  const auto number = [&](const char* key) -> double {
    if (!config.is_object() || !config.contains(key) || !config.at(key).is_number()) {
      throw Error(fmt::format("{}/config.json has no number \"{}\": normalize needs the mean and std of the "
                              "model's scores (tandem train-rm records them at its export; an older export gets "
                              "them from `tandem resume RUN_DIR --set experiment.steps=N` with N past its last "
                              "step; or set normalize: false)",
                              dir_, key));
    }
    return config.at(key).get<double>();
  };
  mean_ = number("mean");
  std_ = number("std");
  if (!std::isfinite(mean_) || !std::isfinite(std_) || std_ <= 0) {
    throw Error(fmt::format("{}/config.json: mean {} and std {} cannot normalize scores (std must be finite and "
                            "above 0)",
                            dir_, mean_, std_));
  }
}

namespace {

class ModelRewardScorer : public RewardScorer {
 public:
  explicit ModelRewardScorer(const RewardConfig& c) : dir_(c.model), batch_size_(c.batch_size > 0 ? c.batch_size : 32) {
    config_ = read_reward_model_config(dir_);
    ModelWeights weights = load_model_weights(dir_, config_);
    score_ = at::tensor(weights.get("score.weight").data, at::kFloat).view({1, config_.hidden_size});
    // PolicyModel is a causal LM: the trunk never reads its head, so a zero one (or the
    // tied embedding) fills the place of the classifier's score.
    std::vector<WeightTensor> tensors;
    for (const WeightTensor& t : weights.tensors()) {
      if (t.name != "score.weight") tensors.push_back(t);
    }
    config_.num_labels = 0;
    if (!config_.tie_word_embeddings) {
      WeightTensor head{"lm_head.weight", {config_.vocab_size, config_.hidden_size}, {}};
      head.data.assign(static_cast<size_t>(head.numel()), 0.0f);
      tensors.push_back(std::move(head));
    }
    model_ = std::make_unique<PolicyModel>(config_, ModelWeights(std::move(tensors)), at::kFloat);
    samples_ = std::make_unique<RewardModelSamples>(c, config_);
  }

  std::vector<RewardOutcome> score(const std::vector<RewardInput>& inputs) override {
    std::vector<RewardOutcome> out;
    out.reserve(inputs.size());
    std::lock_guard<std::mutex> lock(mutex_);  // one forward at a time: libtorch threads within it
    c10::InferenceMode guard;
    for (size_t begin = 0; begin < inputs.size(); begin += static_cast<size_t>(batch_size_)) {
      const size_t end = std::min(inputs.size(), begin + static_cast<size_t>(batch_size_));
      std::vector<std::vector<int32_t>> sequences;
      for (size_t i = begin; i < end; ++i) sequences.push_back(samples_->tokens(inputs[i]));
      const at::Tensor scores = sequence_scores(sequences);
      for (int64_t i = 0; i < scores.size(0); ++i) {
        out.push_back(samples_->outcome(scores[i].item<double>(), inputs[begin + static_cast<size_t>(i)]));
      }
    }
    return out;
  }

 private:
  // [B] float32: each sequence's last token through the final norm and the score head.
  at::Tensor sequence_scores(const std::vector<std::vector<int32_t>>& sequences) const {
    const TokenLayout layout = padded_layout(sequences);
    const at::Tensor normed = model_->final_norm(model_->trunk(layout));
    const at::Tensor last = layout.segment_ids.gt(0).sum(1).sub(1).clamp_min(0);
    const at::Tensor hidden = normed.index({at::arange(normed.size(0), last.options()), last}).to(at::kFloat);
    return at::linear(hidden, score_).squeeze(-1);
  }

  std::string dir_;
  int64_t batch_size_;
  ModelConfig config_;
  std::unique_ptr<PolicyModel> model_;
  at::Tensor score_;
  std::unique_ptr<RewardModelSamples> samples_;
  std::mutex mutex_;
};

}  // namespace

std::unique_ptr<RewardScorer> make_model_reward_scorer(const RewardConfig& config) {
  return std::make_unique<ModelRewardScorer>(config);
}

void check_same_end_of_sequence(const std::string& reward_model_dir, const std::vector<int64_t>& policy_eos) {
  const ModelConfig mine = read_model_config(reward_model_dir + "/config.json");
  for (int64_t id : policy_eos) {
    if (std::find(mine.eos_token_ids.begin(), mine.eos_token_ids.end(), id) == mine.eos_token_ids.end()) {
      throw Error(fmt::format("the policy ends its samples with token {}, which the reward model {} does not count "
                              "as an end of sequence (its config.json's eos_token_id): missing_eos_penalty would "
                              "punish every sample that ended",
                              id, reward_model_dir));
    }
  }
}

void check_same_tokenizer(const std::string& reward_model_dir, const Tokenizer& policy) {
  const std::unique_ptr<Tokenizer> mine = load_tokenizer(reward_model_dir);
  if (mine->vocab_size() != policy.vocab_size()) {
    throw Error(fmt::format("the reward model {} has a vocabulary of {} ids and the policy {}: it would read the "
                            "policy's tokens as other ones",
                            reward_model_dir, mine->vocab_size(), policy.vocab_size()));
  }
  const std::string probe = "The answer is 42. <|im_end|>\nÜber → 3+4=7";
  if (mine->encode(probe) != policy.encode(probe)) {
    throw Error(fmt::format("the reward model {} encodes text differently from the policy's tokenizer: it would read "
                            "the policy's tokens as other ones",
                            reward_model_dir));
  }
}

}  // namespace tandem
