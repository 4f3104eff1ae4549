// Scoring whole sequences with a sequence classifier (a reward model) on a rollout
// backend: prefill-only forward passes that read each sequence's last token through the
// final norm and score.weight (ModelConfig::num_labels), with no sampling and nothing kept
// between calls. The reward-model worker (rollout/reward_model_role.h) serves it.
//
// A call's sequences are packed into passes of at most `pass_tokens` tokens and
// `pass_sequences` sequences whose KV blocks fit the cache; a sequence longer than a pass
// runs alone in chunks of pass_tokens (chunked prefill), only its last chunk's last row
// kept. Each sequence's score depends on its own tokens only (the backends' attention
// reads a sequence's own blocks), so how they were packed changes nothing but rounding
// on backends that are not batch-invariant.
#pragma once

#include "rollout/engine.h"
#include "rollout/model_backend.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace tandem {

struct ScoringLimits {
  int64_t max_sequence_tokens = 4096;  // the longest sequence a call may hold
  int64_t pass_tokens = 2048;
  int64_t pass_sequences = 64;
};

// Engine options for a backend that scores within `limits`: block size 16, a KV cache of
// exactly the blocks one pass (or the longest sequence) needs, on `base`'s device, dtype
// and threads.
EngineOptions scoring_engine_options(const ModelConfig& config, const ScoringLimits& limits, EngineOptions base);

class SequenceScorer {
 public:
  // `backend` holds a classifier (config().num_labels > 0) made with `options`
  // (scoring_engine_options' block size and cache).
  SequenceScorer(std::unique_ptr<ModelBackend> backend, const EngineOptions& options, ScoringLimits limits);

  // Scores [lengths.size() * labels()], sequence by sequence: the sequences' tokens are
  // `tokens`, back to back, lengths[i] of them for sequence i. An empty sequence, one past
  // max_sequence_tokens or the model's positions, or lengths that do not add up to the
  // tokens is an Error naming it; an id outside the vocabulary is the backend's Error.
  std::vector<float> score(const std::vector<int32_t>& tokens, const std::vector<uint32_t>& lengths);

  int64_t labels() const { return backend_->config().num_labels; }
  const ModelBackend& backend() const { return *backend_; }

 private:
  int64_t blocks_for(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }
  // One pass over sequences [first, last) (whole ones), their scores into `out`.
  void score_pass(const std::vector<int32_t>& tokens, const std::vector<int64_t>& starts,
                  const std::vector<uint32_t>& lengths, size_t first, size_t last, std::vector<float>& out);
  // Sequence `index` alone, in chunks of pass_tokens.
  void score_chunked(const std::vector<int32_t>& tokens, int64_t start, int64_t length, size_t index,
                     std::vector<float>& out);

  std::unique_ptr<ModelBackend> backend_;
  int64_t block_size_;
  ScoringLimits limits_;
};

}  // namespace tandem
