// A trained reward model as a reward (reward: [{model: DIR}]): DIR is a Hugging Face
// *ForSequenceClassification directory with one label, as `tandem train-rm` exports it
// (config.json, the trunk's weights, score.weight [1, hidden], the tokenizer). Each sample
// is scored as the reward model was trained: the prompt's tokens (its text encoded with
// DIR's tokenizer) then the response's tokens, read at the last token through the final
// norm and the score head. Forward passes of `batch_size` samples, without gradients, on
// the scoring thread (so during generation with rollout.score_while_generating), in
// float32 on the CPU. With `normalize`, each score s becomes (s - mean) / std, config.json's
// `mean` and `std` (train-rm's statistics of its validation answers' scores).
#pragma once

#include "actor/model_config.h"
#include "actor/tokenizer.h"
#include "core/config.h"
#include "rewards/scoring.h"

#include <memory>
#include <string>
#include <vector>

namespace tandem {

// DIR's architecture as a one-label classifier (num_labels 1). An Error says what DIR lacks:
// the directory itself, score.weight, or one of shape [1, hidden_size].
ModelConfig read_reward_model_config(const std::string& dir);

// How samples meet a reward model, wherever it runs: the tokens it reads of each (the
// prompt's text encoded with DIR's tokenizer, then the response's ids) and the outcome its
// raw score becomes (normalize, missing_eos_penalty; a non-finite score is an error).
class RewardModelSamples {
 public:
  // Reads DIR's tokenizer, and with normalize its mean and std (an Error says what is
  // missing or unusable).
  RewardModelSamples(const RewardConfig& config, const ModelConfig& model);
  std::vector<int32_t> tokens(const RewardInput& input) const;
  RewardOutcome outcome(double raw_score, const RewardInput& input) const;

 private:
  bool is_end_of_sequence(int32_t id) const;
  void read_score_statistics();

  std::string dir_;
  std::vector<int64_t> eos_token_ids_;
  double missing_eos_penalty_;
  double mean_ = 0, std_ = 1;  // normalize: scores become (s - mean_) / std_
  std::unique_ptr<Tokenizer> tokenizer_;
};

// Loads DIR (errors name it: not a sequence classifier, no score.weight or one of the
// wrong shape, a missing tensor; with normalize, no usable mean and std in config.json).
// It scores in this process, with libtorch (reward.N.workers: 0).
std::unique_ptr<RewardScorer> make_model_reward_scorer(const RewardConfig& config);

// The policy's token ids must mean the same to the reward model: its tokenizer must encode
// as the policy's does. An Error says what differs (the vocabulary size, or a probe text's
// ids).
void check_same_tokenizer(const std::string& reward_model_dir, const Tokenizer& policy);

// missing_eos_penalty reads the end of sequence as the reward model's config.json has it:
// every id the policy stops on must be one of its. An Error names the id otherwise.
void check_same_end_of_sequence(const std::string& reward_model_dir, const std::vector<int64_t>& policy_eos);

}  // namespace tandem
