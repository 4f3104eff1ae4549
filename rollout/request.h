// What callers ask the rollout engine for and what they get back.
#pragma once

#include "rollout/sampler.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

struct GenerationRequest {
  uint64_t id = 0;  // the caller's, echoed in every sample
  std::vector<int32_t> prompt;
  int64_t n = 1;  // independent samples of this prompt
  int64_t max_new_tokens = 16;
  SamplingParams sampling;
  std::vector<int32_t> stop_token_ids;    // besides the model's eos ids (unless ignore_eos)
  std::vector<std::string> stop_strings;  // matched in the decoded completion; needs a detokenizer
  bool ignore_eos = false;
  uint64_t seed = 0;  // sample i draws from (seed, i): reproducible whatever else runs
  // Multi-turn: each sample is a session. When a turn ends (a stop token, or its length)
  // the sample keeps its KV blocks and waits; RolloutEngine::continue_session appends the
  // next message's tokens and prefills only those, close_session lets it go.
  bool keep_session = false;
};

enum class FinishReason {
  finish_reason_stop,    // a stop token (kept as the last token) or stop string
  finish_reason_length,  // max_new_tokens, or the model's max_position_embeddings
};
const char* finish_reason_name(FinishReason reason);  // "stop" | "length"

struct GeneratedSample {
  uint64_t request_id = 0;
  int64_t sample_index = 0;
  std::vector<int32_t> tokens;  // the completion (prompt not included)
  std::vector<float> logprobs;  // per token: log softmax(logits / temperature), as the learner computes
  std::vector<float> sampling_logprobs;  // per token: under the top-k/top-p truncated distribution drawn from
  FinishReason finish_reason = FinishReason::finish_reason_length;
  std::string stop;  // the stop string, or the stop token id as text, that ended it
  int64_t weight_version = 0;  // the weights that produced its first token
  // Per token: the weight version that produced it. Rises part-way through a sample only
  // when the weights changed while it generated (a partial rollout, engine.h).
  std::vector<int64_t> token_versions;
  // keep_session: the session's id, for continue_session and close_session; tokens,
  // log-probs and versions above are this turn's, `turn` counts from 0.
  uint64_t session = 0;
  int64_t turn = 0;
};

}  // namespace tandem
