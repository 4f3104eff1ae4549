// Token sampling on the GPU: per-row temperature, top-k, top-p and seed, one block per row.
//
// The contract is rollout/sampler.h's:
// - temperature 0 is greedy (argmax, lowest id on ties; log-prob at temperature 1,
//   sampling log-prob 0);
// - candidates are ordered by decreasing logit, ties by lower id; top-k keeps the first k,
//   top-p then keeps the smallest prefix whose probability reaches top_p of the kept mass;
//   no other token can be emitted;
// - the uniform draw is a pure function of (seed, position): Philox4x32-10 (kernels/philox.h),
//   so no RNG state is carried between steps;
// - logprob is log softmax(logits / T)[token] over the whole vocabulary (what the learner
//   recomputes); sampling_logprob is the log-prob under the truncated distribution drawn from.
// The token is drawn by inverse CDF over the kept tokens in id order (the distribution is
// the sampler's; the CPU sampler walks sorted order when truncating, so the same uniform
// may pick a different token).
//
// How: no sort. The top-k and top-p boundaries are found by radix selection on the
// logits' order-preserving bit patterns (4 passes of 8-bit digits over the row, a shared
// histogram of counts and fixed-point masses each), then on token ids when the boundary
// falls inside a run of equal logits. Masses are exp(z - max) in 2^-40 fixed point,
// summed in 64-bit integers: exact and independent of thread order, so a row's token is
// deterministic. (A token whose probability is below 2^-40 of the most likely one is
// never drawn.)
//
// Values held on the device are checked where they are read: a row with a NaN or +inf logit or
// out-of-range parameters, or a sampled (non-greedy) row whose logits / T have no finite
// maximum (all -inf, or overflowing fp32 at a tiny T), gets token -1 and NaN log-probs. The engine checks parameters
// with check_sampling_params before uploading them.
// Float64 reference: kernels/reference/sampling_reference.h.
#pragma once

#include "kernels/kernel_types.h"

#include <cstdint>

namespace tandem::kernels {

struct SamplingBatch {
  const float* logits = nullptr;        // [rows, vocab], row r at logits + r * logits_stride
  int64_t logits_stride = 0;            // elements; 0: one row of logits shared by all rows
  int64_t rows = 0;
  int64_t vocab = 0;                    // at most 2^23 (fixed-point mass sums)
  const float* temperature = nullptr;   // [rows]: >= 0; 0 is greedy
  const int32_t* top_k = nullptr;       // [rows]: >= 0; 0 (or >= vocab) is off
  const float* top_p = nullptr;         // [rows]: in (0, 1]; 1 is off
  const uint64_t* seeds = nullptr;      // [rows]: the sample's seed
  const int64_t* positions = nullptr;   // [rows]: the drawn token's position in its sequence
};

struct SamplingOutput {
  int32_t* tokens = nullptr;            // [rows]
  float* logprobs = nullptr;            // [rows]: log softmax(logits / T)[token], T = 1 when greedy
  float* sampling_logprobs = nullptr;   // [rows]: under the truncated distribution; 0 when greedy
};

void sample_tokens(const SamplingBatch& batch,
                   const SamplingOutput& out,
                   CudaStream stream);

}  // namespace tandem::kernels
