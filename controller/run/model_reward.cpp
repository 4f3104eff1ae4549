#include "controller/run/model_reward.h"

#include "actor/model_config.h"
#include "actor/model_weights.h"
#include "actor/policy_torch.h"
#include "core/error.h"
#include "core/safetensors.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <fmt/format.h>

#include <mutex>

namespace tandem {

namespace {

class ModelRewardScorer : public RewardScorer {
 public:
  explicit ModelRewardScorer(const RewardConfig& c) : dir_(c.model), batch_size_(c.batch_size > 0 ? c.batch_size : 32) {
    config_ = read_model_config(dir_ + "/config.json");
    SafetensorsModel file = SafetensorsModel::open_directory(dir_);
    TANDEM_CHECK(file.contains("score.weight"),
                 "{}: no score.weight: not a reward model (tandem train-rm exports one to RUN_DIR/reward_model)", dir_);
    std::vector<WeightTensor> tensors;
    for (const std::string& name : file.names()) {
      const TensorView& view = file.get(name);
      if (name == "score.weight") {
        TANDEM_CHECK(view.shape == std::vector<int64_t>({1, config_.hidden_size}),
                     "{}: score.weight has {} values in {} dimensions; a reward model's is [1, {}] (one label)", dir_,
                     view.numel(), view.shape.size(), config_.hidden_size);
        score_ = at::tensor(tensor_to_float(view), at::kFloat).view({1, config_.hidden_size});
        continue;
      }
      if (config_.tie_word_embeddings && name == "lm_head.weight") continue;
      tensors.push_back({name, view.shape, tensor_to_float(view)});
    }
    // A sequence classifier has no LM head; the trunk never reads one, so a zero one fills
    // the place an untied model's has.
    if (!config_.tie_word_embeddings && !file.contains("lm_head.weight")) {
      WeightTensor head{"lm_head.weight", {config_.vocab_size, config_.hidden_size}, {}};
      head.data.assign(static_cast<size_t>(head.numel()), 0.0f);
      tensors.push_back(std::move(head));
    }
    ModelWeights weights(std::move(tensors));
    check_weights(config_, weights, dir_);
    model_ = std::make_unique<PolicyModel>(config_, weights, at::kFloat);
    tokenizer_ = load_tokenizer(dir_);
  }

  std::vector<RewardOutcome> score(const std::vector<RewardInput>& inputs) override {
    std::vector<RewardOutcome> out;
    out.reserve(inputs.size());
    std::lock_guard<std::mutex> lock(mutex_);  // one forward at a time: libtorch threads within it
    c10::InferenceMode guard;
    for (size_t begin = 0; begin < inputs.size(); begin += static_cast<size_t>(batch_size_)) {
      const size_t end = std::min(inputs.size(), begin + static_cast<size_t>(batch_size_));
      std::vector<std::vector<int32_t>> sequences;
      for (size_t i = begin; i < end; ++i) {
        std::vector<int32_t> ids = tokenizer_->encode(inputs[i].prompt);
        ids.insert(ids.end(), inputs[i].response_ids.begin(), inputs[i].response_ids.end());
        if (ids.empty()) ids.push_back(0);  // nothing to read: scored as a lone token
        sequences.push_back(std::move(ids));
      }
      const at::Tensor scores = sequence_scores(sequences);
      for (int64_t i = 0; i < scores.size(0); ++i) {
        const double s = scores[i].item<double>();
        if (std::isfinite(s)) {
          out.push_back({RewardResult{s, {}}, ""});
        } else {
          out.push_back({RewardResult{}, fmt::format("the reward model {} scored {}", dir_, s)});
        }
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
  std::unique_ptr<Tokenizer> tokenizer_;
  std::mutex mutex_;
};

}  // namespace

std::unique_ptr<RewardScorer> make_model_reward_scorer(const RewardConfig& config) {
  return std::make_unique<ModelRewardScorer>(config);
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
