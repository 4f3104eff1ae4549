// The chat template's text between two model turns, learned from the template itself
// (issue 28, item 2), so that a trajectory appends only what is new and never
// re-tokenizes what the model wrote.
//
// For each sequence of message roles that can follow a model turn (one tool result, two,
// an environment's user message), the template renders, once, a probe conversation
//   [user, assistant: A, message_1: S_1, ..., message_k: S_k] + generation prompt
// with unique sentinels A and S_i. The text after A, cut at the S_i, is the turn's frame:
//   frame[0] S_1 frame[1] ... S_k frame[k]
// frame[0] closes the assistant message and opens the first new one; frame[k] closes the
// last and opens the next assistant message. Rendering new messages is then filling the
// frame with their contents: exactly the text the template gives for that tail, for any
// template whose tail does not depend on the words of the earlier messages (Qwen2.5,
// Qwen3, Llama-3.x; a template where it does, e.g. one numbering tool results across the
// conversation, would need a whole re-render: the frame derivation then fails its own
// consistency check and says so).
//
// How the template writes a message's content is found with a second probe, whose content
// has whitespace around it and a quote in it: as is, trimmed (Llama-3's `| trim`), or as
// a JSON string (Llama-3.x tool results: a string `is iterable` in Jinja, so it goes
// through `tojson`). Contents are then written here the same way.
//
// When the model ended its turn with the template's own closing (Qwen's <|im_end|>,
// Llama's <|eot_id|>), the frame's copy of that token is left out: the model's token
// stays, the template's is not added twice.
#pragma once

#include "actor/tokenizer.h"
#include "agent/turn_renderer.h"

#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tandem {

// The template rendering `messages` (tools and special tokens bound by the caller).
using ChatRender = std::function<std::string(const nlohmann::ordered_json& messages, bool add_generation_prompt)>;

enum class ContentForm { verbatim, trimmed, json_string };

struct TurnFrame {
  std::vector<std::string> texts;  // roles.size() + 1 pieces around the contents
  std::vector<ContentForm> forms;  // per message
};

// `content` as the template writes it in `form`.
std::string write_content(const std::string& content, ContentForm form);

class ChatTurnTemplate : public TurnRenderer {
 public:
  // `tokenizer` encodes the frames and contents (special tokens in frames become their
  // ids); `turn_end_tokens`: the model's end-of-turn ids (its eos ids), which the frame's
  // opening closing token is not repeated after.
  ChatTurnTemplate(ChatRender render, std::shared_ptr<const Tokenizer> tokenizer, std::vector<int32_t> turn_end_tokens);
  // From frames derived elsewhere (the controller, which runs the template's Jinja, sends
  // them to rollout workers): messages of other roles are an Error.
  ChatTurnTemplate(std::map<std::vector<std::string>, TurnFrame> frames, std::shared_ptr<const Tokenizer> tokenizer,
                   std::vector<int32_t> turn_end_tokens);

  // The frame for messages of these roles after an assistant turn; derived on first use
  // and kept. Throws Error naming the roles when the template's output cannot be framed.
  TurnFrame frame(const std::vector<std::string>& roles) const;
  // The text the template gives for `messages` after a model turn (the model's own
  // closing token, when it wrote one, left out as in render()).
  std::string render_text(const std::string& last_model_token_text, const std::vector<TrajectoryMessage>& messages) const;

  RenderedMessages render(int32_t last_model_token, const std::vector<TrajectoryMessage>& messages,
                          int64_t max_content_tokens) const override;

 private:
  ChatRender render_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::vector<int32_t> turn_end_tokens_;
  mutable std::mutex mutex_;
  mutable std::map<std::vector<std::string>, TurnFrame> frames_;
};

// The frames of `signatures` (derived now where not yet) as JSON: {"tool": {"texts": [...],
// "forms": ["verbatim" | "trimmed" | "json_string", ...]}, ...}, keyed by the roles joined
// with ",". And back: an Error says what in it is malformed.
nlohmann::json turn_frames_to_json(const ChatTurnTemplate& turns, const std::vector<std::vector<std::string>>& signatures);
std::map<std::vector<std::string>, TurnFrame> turn_frames_from_json(const nlohmann::json& frames);

// Trims spaces, tabs, carriage returns and newlines at both ends, as Jinja's `trim` does
// for those characters.
std::string trim_like_jinja(const std::string& text);

}  // namespace tandem
