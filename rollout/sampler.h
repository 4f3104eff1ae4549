// Token sampling from one row of logits: temperature, top-k, top-p, greedy.
//
// Randomness is counter-based: the uniform draw for a token is a pure function of the
// sample's seed and the token's position, so a sequence gets the same tokens whether it
// runs alone, in a batch, or is preempted and recomputed. (Philox on the GPU later; the
// contract is the same: no RNG state carried between steps.)
#pragma once

#include <cstdint>
#include <vector>

namespace tandem {

struct SamplingParams {
  double temperature = 1.0;  // 0: greedy (argmax; log-probs then reported at temperature 1)
  int64_t top_k = 0;         // 0: off
  double top_p = 1.0;        // in (0, 1]; 1: off
};

// Throws Error naming the field when a value is out of range.
void check_sampling_params(const SamplingParams& params);

struct SampledToken {
  int32_t token = -1;
  // log softmax(logits / temperature)[token]: the full temperature-scaled distribution,
  // which is what the learner recomputes (it cannot see top-k/top-p truncation).
  float logprob = 0;
  // log-prob under the truncated, renormalised distribution actually drawn from
  // (equal to `logprob` without top-k/top-p; 0 for greedy).
  float sampling_logprob = 0;
};

// Uniform in [0, 1) from (seed, counter), by a splitmix64-style mix.
double uniform_from_counter(uint64_t seed, uint64_t counter);

class Sampler {
 public:
  // `uniform` in [0, 1) picks the token by inverse CDF over the allowed tokens, in
  // order of decreasing probability (ties: lower id first) when truncating, by id otherwise.
  SampledToken sample(const float* logits, int64_t vocab_size, const SamplingParams& params, double uniform);

 private:
  std::vector<double> weights_;      // exp(logits / temperature - their maximum)
  std::vector<int32_t> candidates_;  // token ids, sorted when truncating
};

}  // namespace tandem
