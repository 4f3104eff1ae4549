// The LM head's log-probs and entropies for chosen tokens, computed a chunk of rows at a
// time so that the [tokens, vocab] float32 logits and their gradient never exist whole.
//
// With a 151k-token vocabulary, one 512-token micro-batch's logits are 310 MB, and
// autograd would keep them, their softmax and their gradient alive at once. Here forward
// keeps only each row's log-sum-exp and entropy; backward recomputes each chunk's logits
// from the hidden states and turns them straight into the gradients of the hidden states
// and of the head's weight. The idea is Liger's fused linear cross-entropy, extended to
// the entropy (which RL objectives read and may train on).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace tandem {

struct HeadLogProbs {
  at::Tensor logprobs;  // [N] float32: log softmax(hidden_i · weightᵀ / temperature)[targets_i]
  at::Tensor entropy;   // [N] float32: entropy of that distribution
};

// hidden [N, H] and weight [V, H] (any float dtype; the logits are float32), targets [N]
// int64 in [0, V). Differentiable in `hidden` and `weight`. `chunk_elements` bounds the
// logits held at once (rows x vocabulary); at least one row is always taken.
HeadLogProbs head_logprobs(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                           double temperature, int64_t chunk_elements = int64_t{1} << 22);

}  // namespace tandem
