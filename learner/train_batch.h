// What a learner rank trains on, and how samples become tensors for one micro-batch.
#pragma once

#include "actor/policy_torch.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace tandem {

// One sampled response, as the controller sends it to a learner rank.
struct TrainingSample {
  std::vector<int32_t> prompt;
  std::vector<int32_t> response;
  std::vector<float> old_logprobs;  // per response token: the policy that sampled it (the rollout's)
  std::vector<float> advantages;    // per response token
  std::vector<float> ref_logprobs;  // per response token, optional: the reference policy's
  // The critic's (advantage: gae), per response token, both or neither:
  std::vector<float> old_values;  // the value head when the rollout was scored (Trainer::values)
  std::vector<float> returns;     // value targets (AdvantageResult::returns)
  // Per response token, optional: the truncated importance weight of an off-policy sample
  // (algorithm.async): min(pi_learner_old / pi_rollout, is_cap). Multiplies the token's
  // policy loss; empty means 1.
  std::vector<float> is_weights;
  // The rollout's log-probs (old_logprobs) are of weights older than the learners'
  // (algorithm.async), and the learners' own log-probs at the start of this update are the
  // proximal policy: the forward that trains takes them (detached) as the ratio's old
  // log-probs, and weights each token by min(pi_proximal / pi_rollout, is_cap). Exact only
  // when the update is one optimizer step (one epoch of one mini-batch); otherwise the
  // controller asks for the proximal log-probs first and sends is_weights.
  bool stale = false;
  // Per response token, optional (multi-turn): 1 on the tokens the policy sampled, 0 on
  // the tool and environment messages and template tokens between its turns, which it
  // reads but did not write. Only 1s carry loss and count in loss_agg; empty means all 1.
  std::vector<float> loss_mask;
};

struct MicroBatch {
  TokenLayout layout;            // prompt + response, one sample per row, right-padded
  at::Tensor response_position;  // [B, T] int64: index into the row of response token t (0 where padding)
  at::Tensor mask;               // [B, T] float: 1 for response tokens that carry loss (TrainingSample::loss_mask)
  at::Tensor old_logprobs;       // [B, T] float
  at::Tensor advantages;         // [B, T] float
  at::Tensor ref_logprobs;       // [B, T] float, undefined unless every sample has them
  at::Tensor old_values;         // [B, T] float, undefined unless every sample has them
  at::Tensor returns;            // [B, T] float, likewise
  at::Tensor is_weights;         // [B, T] float, undefined unless some sample has them (1 where one has none)
  at::Tensor stale;              // [B, T] float: 1 on the tokens of stale samples; undefined unless some sample is
};

// Samples [begin, end) of `samples`, on `device` (the trainer's); T is their longest
// response. Errors name the sample whose per-token vectors do not match its response length.
MicroBatch make_micro_batch(const std::vector<TrainingSample>& samples, size_t begin, size_t end,
                            at::Device device = at::kCPU);

// Picks the response tokens' entries out of a per-position tensor [B, L] into [B, T].
at::Tensor response_values(const at::Tensor& per_position, const MicroBatch& batch);

}  // namespace tandem
