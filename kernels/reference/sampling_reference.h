// Float64 reference of kernels/sampling.h: the kept set written from its definition by
// sorting (decreasing logit, lower id first on ties), then inverse CDF in id order.
#pragma once

#include <cstdint>
#include <vector>

namespace tandem::kernels::reference {

struct SampleReference {
  int32_t token = -1;
  double logprob = 0;           // log softmax(logits / T)[token]; T = 1 when greedy
  double sampling_logprob = 0;  // log-prob under the truncated distribution; 0 when greedy
  // The distribution drawn from, [vocab]: 0 outside the kept set; one-hot when greedy.
  std::vector<double> probabilities;
  std::vector<char> kept;  // [vocab]: 1 for tokens top-k and top-p keep
};

// temperature >= 0 (0: greedy), top_k >= 0 (0 or >= vocab: off), top_p in (0, 1],
// uniform in [0, 1) (kernels/philox.h philox_uniform(seed, position) for the kernel's draw).
SampleReference sample(const float* logits,  // [vocab]
                       int64_t vocab,
                       double temperature,
                       int64_t top_k,
                       double top_p,
                       double uniform);

}  // namespace tandem::kernels::reference
