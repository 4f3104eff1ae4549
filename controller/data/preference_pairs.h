// Preference pairs for a reward model (tandem train-rm): JSONL rows
//   {"prompt": ..., "chosen": ..., "rejected": ...}
// `prompt` is a string or a chat message list; `chosen` and `rejected` are strings, or a
// list holding one assistant message ({"role": "assistant", "content": "..."}).
//
// Each answer becomes the token sequence the policy's own sample would be in an RL run of
// the same config: the prompt rendered as data.* renders prompts (chat template for message
// lists, or with data.prompt_as_user_message), its tokens, then the answer's tokens and the
// end-of-sequence token a finished sample ends with. So the reward model scores, later,
// exactly what it was trained on.
#pragma once

#include "actor/tokenizer.h"
#include "controller/data/chat_prompts.h"
#include "core/config.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tandem {

struct PreferencePair {
  std::vector<int32_t> chosen;    // prompt + preferred answer + end of sequence
  std::vector<int32_t> rejected;  // prompt + the other answer + end of sequence
  int64_t prompt_tokens = 0;
  std::string where;              // "file:line", for messages
};

struct PreferenceSet {
  std::string source;
  std::vector<PreferencePair> pairs;
  int64_t skipped_long = 0;  // pairs with an answer sequence over max_length, left out
};

struct PreferenceEncoding {
  const Tokenizer* tokenizer = nullptr;
  std::optional<ChatTemplate> chat_template;
  DataConfig data;              // how prompts are rendered (chat_template, prompt_as_user_message, ...)
  int32_t end_of_sequence = -1;  // appended to every answer; -1: none
  int64_t max_length = 0;       // tokens of a whole sequence; longer pairs are skipped and counted
};

// Reads and encodes `path`, a JSONL file or a built-in set (builtin:addition1_pairs: 2,600
// pairs, each single-digit sum's right answer chosen over every other number 0..18, four
// of 19..99 and malformed answers). An empty answer is the policy ending at once (the
// end-of-sequence token alone). Errors name the file and line: not JSON, not an object, a
// missing field, an empty prompt, an empty answer with no end-of-sequence token to stand
// for it, a field of the wrong type, an answer list that is not one
// assistant message, a template that fails; so is a file with no pair, or one whose every
// pair is over max_length (those are otherwise left out and counted).
PreferenceSet load_preference_pairs(const std::string& path, const PreferenceEncoding& encoding);

// Holds out the last `fraction` of `set` (at least one pair, at most all but one) after a
// shuffle by `seed`: the validation split when reward_model.val is empty.
PreferenceSet split_validation(PreferenceSet& set, double fraction, uint64_t seed);

}  // namespace tandem
