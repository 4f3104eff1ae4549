// What the model commands (generate, logprobs) load from `--model`: a Hugging Face
// directory, a builtin:<preset>, or a llama2.c .bin checkpoint (which has no tokenizer:
// such a model takes token ids only).
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
  std::unique_ptr<Tokenizer> tokenizer;  // null for a llama2.c checkpoint
};

CliModel load_cli_model(const std::string& model);

// "1,2,3" (or a JSON array) -> ids, each checked against `vocab` (UsageError naming `flag`).
std::vector<int32_t> parse_id_list(const std::string& text, int64_t vocab, const std::string& flag);

}  // namespace tandem
