// Test-only: one prefill step of a rollout model backend (rollout/model_backend.h) that
// returns the logits of every position.
#pragma once

#include "rollout/model_backend.h"

#include <cstdint>
#include <vector>

namespace tandem::testing {

// Logits of every position of `tokens`, one prefill step into the blocks of `table`.
inline std::vector<float> prefill_logits(ModelBackend& backend, const std::vector<int32_t>& tokens,
                                         const std::vector<int32_t>& table) {
  ForwardBatch batch;
  batch.tokens = tokens;
  batch.sequences.push_back({0, static_cast<int64_t>(tokens.size()), 0, table.data()});
  for (size_t t = 0; t < tokens.size(); ++t) batch.logit_rows.push_back(static_cast<int64_t>(t));
  std::vector<float> logits;
  backend.forward(batch, logits);
  return logits;
}

}  // namespace tandem::testing
