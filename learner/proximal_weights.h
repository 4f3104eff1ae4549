// Decoupled PPO for stale samples (algorithm.async, TrainingSample::stale), computed in the
// training forward itself.
//
// A stale sample was drawn with weights older than the learners'. Its ratio is taken
// against the proximal policy, the learners' own at the start of the update, and each
// token's policy loss is weighted by min(pi_proximal / pi_rollout, is_cap). When the
// update is one optimizer step, the forward that trains runs exactly those weights, so its
// log-probs (detached) are the proximal ones and no forward of their own is needed.
#pragma once

#include "learner/objective.h"

#include <ATen/core/Tensor.h>

namespace tandem {

struct ProximalWeights {
  double weight_sum = 0;  // of the stale tokens' importance weights
  double clipped = 0;     // stale tokens whose weight was cut to is_cap
  double tokens = 0;      // stale tokens
};

// On the tokens where `stale` [B, T] is 1: in.old_logprobs (the rollout's) become
// in.logprobs detached, and in.is_weights min(exp(that - the rollout's), is_cap); other
// tokens keep theirs. A NaN weight is an Error.
ProximalWeights use_forward_as_proximal(ActorObjectiveInputs& in, const at::Tensor& stale, double is_cap);

}  // namespace tandem
