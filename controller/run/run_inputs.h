// What a run reads before it trains, loaded and checked once: by `tandem validate`, and
// by `tandem run` / `resume` before a run directory is created or a worker started.
//
// Everything here that is wrong is a UsageError (exit 2) naming where: file:line:col of
// the config key (or the --set), or file:line of the dataset row. The checks:
//   model      model.path resolves (builtin: presets, a directory with config.json), the
//              architecture is supported, the tokenizer loads and fits config.json's
//              vocab_size (a padded vocabulary is fine: its extra ids are never sampled),
//              the safetensors headers hold every tensor with the right shape;
//              rollout.max_new_tokens leaves room in max_position_embeddings.
//   data       data.train (and data.val) reads; every row is a JSON object with data.prompt_key, the
//              sft.response_key when sft.steps > 0, and `answer` when a math_answer reward
//              reads it; every prompt encodes to 1..limit tokens, where the limit is
//              data.max_prompt_length (or the model's positions minus max_new_tokens):
//              longer ones are an error or skipped (data.on_long_prompt).
//              Message-list prompts (and string ones with data.prompt_as_user_message)
//              are rendered with the chat template first; data.answer_key's value
//              becomes the row's `answer`.
//   rewards    plugins load; every reward name is registered and its settings are valid;
//              python rewards' workers start and import their file.
//   environment (multi-turn) its workers import the file and find the class with the right
//              methods; the first training row's instance resets and its prompt renders
//              within the prompt limit.
//   tools      (multi-turn) each tool starts (python tools' workers import their file
//              and find the function; the sandbox runs a probe), the tool parser finds
//              its tokens in the vocabulary, the chat template shows the tools' schemas
//              in a prompt and frames the tool and user messages of later turns.
#pragma once

#include "actor/model_config.h"
#include "actor/tokenizer.h"
#include "controller/data/chat_prompts.h"
#include "controller/data/dataset.h"
#include "controller/data/preference_pairs.h"
#include "rewards/scoring.h"
#include "core/config.h"

#include <nlohmann/json.hpp>
#include <tandem/reward.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tandem {

struct RunInputs {
  std::string model_dir;  // model.path resolved (a builtin: preset written to the model cache)
  ModelConfig model;      // sampled_vocab_size set from the tokenizer
  std::shared_ptr<const Tokenizer> tokenizer;
  Dataset data;  // without the rows on_long_prompt: skip left out
  std::vector<std::vector<int32_t>> prompt_ids;  // [row]: data.prompt(row) encoded
  Dataset val_data;                                  // data.val's rows (none without data.val), checked as data's
  std::vector<std::vector<int32_t>> val_prompt_ids;  // [row]: val_data.prompt(row) encoded
  int64_t prompt_limit = 0;           // the longest prompt allowed, tokens
  int64_t skipped_long_prompts = 0;   // training rows left out (on_long_prompt: skip)
  int64_t val_skipped_long_prompts = 0;  // validation rows left out
  int64_t longest_prompt = 0;         // tokens, over the rows kept
  std::optional<ChatTemplate> chat_template;  // data.chat_template's (none: no template)
  std::vector<std::unique_ptr<RewardScorer>> rewards;  // one per config.reward entry (python: workers running)
  // Multi-turn (the config lists tools): the tools' schemas, as the chat template's
  // `tools` gets them in every prompt, and the template's turn frames for the rollout
  // workers (agent/chat_turn_template.h, JSON).
  nlohmann::ordered_json tool_schemas = nlohmann::ordered_json::array();
  std::string turn_frames;
  // With an environment: the chat template its reset() messages are rendered with (JSON
  // {"source", "special_tokens", "variables"}), and per row what its instances are made
  // from (JSON {"row", "before", "where"}: rollout_commands.capnp environmentRow). Its
  // prompt_ids are then one-token placeholders: each sample's prompt comes from reset().
  std::string environment_template;
  std::vector<std::string> environment_rows;
  std::vector<std::string> val_environment_rows;
  // tandem train-rm (load_reward_model_inputs): the preference pairs, encoded; `data` is
  // then empty and no reward is loaded.
  std::optional<PreferenceSet> preference_train, preference_val;
};

// What `tandem train-rm` reads: the model (as above) and reward_model.train / val as
// preference pairs (controller/data/preference_pairs.h), each sequence at most
// reward_model.max_length and the model's positions; errors name the config key or the
// file and line.
RunInputs load_reward_model_inputs(const LoadedConfig& loaded);

// The tool checks above, filling tool_schemas and turn_frames (run_tools.cpp). Needs the
// model and the chat template loaded.
void load_tools(const LoadedConfig& loaded, RunInputs& inputs);
// The environment check above (run_tools.cpp). Needs the tools and the data loaded.
void check_environment(const LoadedConfig& loaded, const RunInputs& inputs);

RunInputs load_run_inputs(const LoadedConfig& loaded);

// One line for the console: model, vocabulary, rows, prompt lengths, skipped rows.
std::string describe_run_inputs(const RunInputs& inputs);

}  // namespace tandem
