// What the model commands (generate, logprobs) load from `--model`: a Hugging Face
// directory, a builtin:<preset>, a .gguf file, or a llama2.c .bin checkpoint (which has no
// tokenizer, like a .gguf without a vocabulary: such a model takes token ids only).
#pragma once

#include "actor/model_config.h"
#include "actor/model_weights.h"
#include "actor/tokenizer.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tandem {

struct CliModel {
  std::string source;  // the resolved path, for messages
  ModelConfig config;  // sampled_vocab_size set from the tokenizer when there is one
  ModelWeights weights;
  std::unique_ptr<Tokenizer> tokenizer;  // null for a llama2.c checkpoint or a vocabulary-less .gguf
};

CliModel load_cli_model(const std::string& model);

// A JSON array of token ids, each checked against `vocab_size` (UsageError naming `flag`):
// what `tokenize --decode` reads.
std::vector<int32_t> parse_token_ids(const std::string& input, int64_t vocab_size, const std::string& flag);
// "1,2,3" or "[1, 2, 3]": at least one id, checked as parse_token_ids does.
std::vector<int32_t> parse_id_list(const std::string& text, int64_t vocab, const std::string& flag);

}  // namespace tandem
