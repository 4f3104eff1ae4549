// The tokens that go between two model turns (issue 28, item 2): the end of the model's
// message where the template closes it and the model did not, the new messages (tool
// results, an environment's reply) as the chat template renders them, and the header of
// the next assistant message. Only these are rendered: the model's own tokens are never
// re-tokenized.
#pragma once

#include "agent/trajectory.h"

#include <cstdint>
#include <vector>

namespace tandem {

struct RenderedMessages {
  std::vector<int32_t> tokens;
  std::vector<TokenKind> kinds;  // observation (message content) or template
  // Per message: its content's tokens, [begin, end) in `tokens`.
  std::vector<std::pair<int64_t, int64_t>> content_spans;
  bool truncated = false;  // some content was cut to max_content_tokens
};

class TurnRenderer {
 public:
  virtual ~TurnRenderer() = default;
  // `last_model_token`: the token the model's turn ended with (a turn-end token, or the
  // tool call's closing token, or any token where the length ran out). Each message's
  // content is cut to `max_content_tokens` tokens (< 0: no cut).
  virtual RenderedMessages render(int32_t last_model_token, const std::vector<TrajectoryMessage>& messages,
                                  int64_t max_content_tokens) const = 0;
};

}  // namespace tandem
