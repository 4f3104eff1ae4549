#include "controller/run/run_inputs.h"

#include "controller/run/memory_estimate.h"
#include "controller/run/model_reward.h"
#include "controller/run/reward_model_workers.h"

#include "actor/model_weights.h"
#include "actor/presets.h"
#include "actor/tensor_parallel_layout.h"
#include "core/error.h"
#include "core/text.h"
#include "plugins/plugin_loader.h"
#include "rewards/registry.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <utility>

namespace tandem {

namespace {

// Runs `load`; an Error from it becomes a UsageError starting with the key's origin.
template <class Load>
auto at_key(const LoadedConfig& loaded, const std::string& key, Load load) {
  try {
    return load();
  } catch (const Error& e) {
    throw UsageError(fmt::format("{}: {}: {}", loaded.origin_of(key), key, e.what()));
  }
}

// Sizes that cannot fit in memory (controller/run/memory_estimate.h): refused with the numbers.
void check_memory(const LoadedConfig& loaded, const ModelConfig& model, int64_t longest_prompt) {
  const MemoryEstimate estimate = estimate_memory(loaded.config, model, longest_prompt);
  const std::string problem = memory_problem(loaded.config, estimate, machine_memory_bytes());
  if (!problem.empty()) throw UsageError(fmt::format("{}: {}", loaded.source, problem));
}

void load_model(const LoadedConfig& loaded, RunInputs& in) {
  const Config& c = loaded.config;
  in.model_dir = at_key(loaded, "model.path", [&] { return resolve_model_path(c.model.path); });
  at_key(loaded, "model.path", [&] {
    in.model = read_model_config(in.model_dir + "/config.json");
    if (!std::filesystem::exists(in.model_dir + "/tokenizer.json")) {
      // Named as the user wrote it: a .bin or .gguf is read through a cache directory.
      throw Error(fmt::format("the model {} has no tokenizer (no tokenizer.json): training reads text prompts and "
                              "needs one. Put the model's tokenizer.json (and tokenizer_config.json) beside its "
                              "config.json, or make a model with one (tandem init-model --tokenizer DIR). Without "
                              "a tokenizer, tandem generate and tandem logprobs take token ids",
                              c.model.path));
    }
    in.tokenizer = load_tokenizer(in.model_dir);
    limit_to_tokenizer(in.model, in.tokenizer->vocab_size(), in.model_dir);
    return 0;
  });
  // Heads, MLP columns and the vocabulary must split over learner.tensor_parallel ranks.
  at_key(loaded, "learner.tensor_parallel", [&] {
    check_tensor_parallel(in.model, static_cast<int>(c.learner.tensor_parallel), "the model " + c.model.path);
    return 0;
  });
  at_key(loaded, "rollout.tensor_parallel", [&] {
    check_tensor_parallel(in.model, static_cast<int>(c.rollout.tensor_parallel), "the model " + c.model.path);
    return 0;
  });
  // Before anything that walks the layers: a shape no machine holds is refused now
  // (prompts of 0 tokens: a lower bound of the full estimate load_run_inputs makes).
  check_memory(loaded, in.model, 0);
  at_key(loaded, "model.path", [&] {
    check_model_weights_file(in.model_dir, in.model);
    return 0;
  });
  in.chat_template = at_key(loaded, "data.chat_template", [&] {
    return find_chat_template(c.data.chat_template, in.model_dir);
  });
  const int64_t positions = in.model.max_position_embeddings;
  // A response is one turn, or (multi-turn) a whole trajectory of turns and tool messages.
  const bool multi_turn = c.multi_turn();
  const std::string response_key = multi_turn ? "rollout.multi_turn.max_total_tokens" : "rollout.max_new_tokens";
  const int64_t response = multi_turn ? c.rollout.multi_turn.max_total_tokens : c.rollout.max_new_tokens;
  if (response >= positions) {
    throw UsageError(fmt::format("{}: {}: {} leaves no room for a prompt in the model's {} positions "
                                 "(max_position_embeddings in {}/config.json)",
                                 loaded.origin_of(response_key), response_key, response, positions, in.model_dir));
  }
  in.prompt_limit = positions - response;
  if (c.data.max_prompt_length > 0) {
    if (c.data.max_prompt_length > in.prompt_limit) {
      throw UsageError(fmt::format(
          "{}: data.max_prompt_length: {} prompt tokens + {} {} exceed the model's {} positions "
          "(max_position_embeddings in {}/config.json); at most {} fits",
          loaded.origin_of("data.max_prompt_length"), c.data.max_prompt_length, response_key, response, positions,
          in.model_dir, in.prompt_limit));
    }
    in.prompt_limit = c.data.max_prompt_length;
  }
}

// The fields every row must have: the prompt, the gold response of the warm-up (training
// rows only), the answer math_answer compares. (key, what reads it).
std::vector<std::pair<std::string, std::string>> required_fields(const Config& c, bool training) {
  std::vector<std::pair<std::string, std::string>> fields;
  if (training && c.sft.steps > 0) {
    fields.emplace_back(c.sft.response_key, "sft.response_key, the warm-up's gold response");
  }
  for (size_t i = 0; i < c.reward.size(); ++i) {
    const RewardConfig& r = c.reward[i];
    const bool math_answer = r.name == "math_answer" && r.plugin.empty() && r.python.empty() && r.http.empty();
    const bool verl_style = (!r.python.empty() || !r.http.empty()) && r.needs_ground_truth;
    if (math_answer || verl_style) {
      fields.emplace_back("answer", math_answer ? fmt::format("the answer reward.{} (math_answer) compares", i)
                                                : fmt::format("the ground_truth reward.{} ({}) is given; set "
                                                              "reward.{}.needs_ground_truth: false if it reads none",
                                                              i, r.name, i));
      break;
    }
  }
  return fields;
}

// For a row without the answer field: where its ground truth is when the row has verl's
// layout (reward_model.ground_truth), as a hint naming the data.answer_key to set.
std::string answer_key_hint(const std::map<std::string, std::string>& row, const std::string& answer_key) {
  auto reward_model = row.find("reward_model");
  if (reward_model == row.end() || answer_key == "reward_model.ground_truth") return "";
  if (reward_model->second.find("\"ground_truth\"") == std::string::npos) return "";
  return "; the row has verl's layout: set data.answer_key: reward_model.ground_truth";
}

struct PromptSet {
  Dataset data;
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::string> environment_rows;
  int64_t skipped = 0, longest = 0;
};

// With an environment: every row goes to its instances as it is; the prompt, made by
// reset(), is checked at the first row (check_environment) and by the engine.
PromptSet environment_prompts(const Config& c, Dataset all, const RunInputs& in, bool training) {
  PromptSet out;
  for (size_t row = 0; row < all.rows.size(); ++row) {
    for (const auto& [field, reader] : required_fields(c, training)) {
      if (!all.rows[row].count(field)) throw UsageError(fmt::format("{}: no \"{}\" field ({})", all.where(row), field, reader));
    }
  }
  const int32_t placeholder = in.model.eos_token_ids.empty() ? 0 : static_cast<int32_t>(in.model.eos_token_ids.front());
  for (size_t row = 0; row < all.rows.size(); ++row) {
    const nlohmann::ordered_json before = messages_before_environment(all, row, c.data);
    out.environment_rows.push_back(nlohmann::ordered_json{{"row", all.objects.at(row)}, {"before", before}, {"where", all.where(row)}}
                                       .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    // Rewards and samples.jsonl read the prompt field: the messages before reset()'s.
    if (!all.rows[row].count(all.prompt_key)) all.rows[row][all.prompt_key] = before.empty() ? "" : before.dump();
    out.ids.push_back({placeholder});
  }
  out.longest = 1;
  out.data = std::move(all);
  return out;
}

// The rows of `spec` (the value of config key `key`: data.train or data.val), checked and
// encoded, the long ones skipped or refused (data.on_long_prompt).
PromptSet load_prompts(const LoadedConfig& loaded, const std::string& key, const std::string& spec,
                       const RunInputs& in, bool training) {
  const Config& c = loaded.config;
  Dataset all;
  try {
    all = load_dataset(spec, DatasetKeys{c.data.prompt_key, c.data.answer_key, c.sft.response_key,
                                         c.has_environment()});
  } catch (const Error& e) {
    std::string what = e.what();
    for (const char* data_key : {"data.prompt_key", "data.answer_key"}) {
      if (what.rfind(std::string(data_key) + ":", 0) == 0) {
        throw UsageError(fmt::format("{}: {}", loaded.origin_of(data_key), what));
      }
    }
    // Messages about the whole file say data.train; those about a row start with file:line.
    if (what.rfind("data.train:", 0) == 0) what = key + what.substr(std::string("data.train").size());
    throw UsageError(what.rfind(key + ":", 0) == 0 ? fmt::format("{}: {}", loaded.origin_of(key), what) : what);
  }
  if (c.has_environment()) return environment_prompts(c, std::move(all), in, training);
  try {
    render_chat_prompts(all, c.data, in.chat_template, in.tool_schemas);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  const auto fields = required_fields(c, training);
  PromptSet out;
  out.data = all;
  out.data.rows.clear();
  out.data.lines.clear();
  out.data.prompt_messages.clear();
  for (size_t row = 0; row < all.rows.size(); ++row) {
    for (const auto& [field, reader] : fields) {
      if (!all.rows[row].count(field)) {
        const bool answer = field == "answer";
        const bool answer_key_set = answer && c.data.answer_key != "answer";
        throw UsageError(fmt::format("{}: no \"{}\" field ({}{}){}", all.where(row),
                                     answer ? c.data.answer_key : field, reader,
                                     answer_key_set ? fmt::format(", found by data.answer_key ({})",
                                                                  loaded.origin_of("data.answer_key"))
                                                    : "",
                                     answer ? answer_key_hint(all.rows[row], c.data.answer_key) : ""));
      }
    }
    std::vector<int32_t> ids = in.tokenizer->encode(all.prompt(row));
    if (ids.empty()) {
      throw UsageError(fmt::format("{}: the prompt (field \"{}\") is empty", all.where(row), c.data.prompt_key));
    }
    const int64_t length = static_cast<int64_t>(ids.size());
    if (length > in.prompt_limit) {
      if (c.data.on_long_prompt == "skip") {
        ++out.skipped;
        continue;
      }
      throw UsageError(fmt::format(
          "{}: the prompt is {} tokens, over the limit of {} ({}); set data.on_long_prompt: skip to leave such rows "
          "out",
          all.where(row), length, in.prompt_limit,
          c.data.max_prompt_length > 0
              ? "data.max_prompt_length"
              : fmt::format("the model's {} positions minus rollout.max_new_tokens {}",
                            in.model.max_position_embeddings, c.rollout.max_new_tokens)));
    }
    out.longest = std::max(out.longest, length);
    out.data.rows.push_back(all.rows[row]);
    out.data.prompt_messages.push_back(all.prompt_messages.at(row));
    if (!all.lines.empty()) out.data.lines.push_back(all.lines[row]);
    out.ids.push_back(std::move(ids));
  }
  if (out.data.rows.empty()) {
    throw UsageError(fmt::format("{}: {}: every one of the {} rows of {} is over the prompt limit of {} tokens "
                                 "(data.on_long_prompt: skip left none)",
                                 loaded.origin_of(key), key, all.rows.size(), all.source, in.prompt_limit));
  }
  return out;
}

void load_data(const LoadedConfig& loaded, RunInputs& in) {
  PromptSet train = load_prompts(loaded, "data.train", loaded.config.data.train, in, true);
  in.data = std::move(train.data);
  in.prompt_ids = std::move(train.ids);
  in.environment_rows = std::move(train.environment_rows);
  in.skipped_long_prompts = train.skipped;
  in.longest_prompt = train.longest;
  if (!loaded.config.data.val.empty()) {
    PromptSet val = load_prompts(loaded, "data.val", loaded.config.data.val, in, false);
    in.val_data = std::move(val.data);
    in.val_prompt_ids = std::move(val.ids);
    in.val_environment_rows = std::move(val.environment_rows);
    in.val_skipped_long_prompts = val.skipped;
    in.longest_prompt = std::max(in.longest_prompt, val.longest);
  }
}

void load_rewards(const LoadedConfig& loaded, RunInputs& in) {
  const Config& c = loaded.config;
  try {
    load_config_plugins(c, [&](const std::string& key) { return loaded.origin_of(key); });
  } catch (const Error& e) {
    throw UsageError(e.what());  // a plugin that cannot load is a config problem: nothing starts
  }
  int64_t reward_model_ranks = 0;  // model entries' workers, numbered in turn
  for (size_t i = 0; i < c.reward.size(); ++i) {
    const std::string key = !c.reward[i].python.empty() ? fmt::format("reward.{}.python", i)
                            : !c.reward[i].http.empty() ? fmt::format("reward.{}.http", i)
                            : !c.reward[i].model.empty() ? fmt::format("reward.{}.model", i)
                                                         : fmt::format("reward.{}", i);
    in.rewards.push_back(at_key(loaded, key, [&]() -> std::unique_ptr<RewardScorer> {
      if (c.reward[i].model.empty()) return make_reward_scorer(c.reward[i], i, c.python.path);
      if (c.reward[i].workers == 0) return make_model_reward_scorer(c.reward[i]);
      const int64_t first_rank = std::exchange(reward_model_ranks, reward_model_ranks + c.reward[i].workers);
      return make_reward_model_workers(c, i, first_rank);
    }));
  }
}

}  // namespace

RunInputs load_run_inputs(const LoadedConfig& loaded) {
  RunInputs in;
  load_rewards(loaded, in);  // first: no model or data is read for a config whose plugin is missing
  load_model(loaded, in);
  for (size_t i = 0; i < loaded.config.reward.size(); ++i) {
    if (loaded.config.reward[i].model.empty()) continue;
    at_key(loaded, fmt::format("reward.{}.model", i), [&] {
      check_same_tokenizer(loaded.config.reward[i].model, *in.tokenizer);
      if (loaded.config.reward[i].missing_eos_penalty > 0) {
        check_same_end_of_sequence(loaded.config.reward[i].model, in.model.eos_token_ids);
      }
      return 0;
    });
  }
  if (loaded.config.multi_turn()) load_tools(loaded, in);  // before the data: prompts show the tools
  load_data(loaded, in);
  if (loaded.config.has_environment()) check_environment(loaded, in);
  check_memory(loaded, in.model, in.longest_prompt);
  return in;
}

RunInputs load_reward_model_inputs(const LoadedConfig& loaded) {
  const Config& c = loaded.config;
  if (c.reward_model.train.empty()) {
    throw UsageError(fmt::format("{}: reward_model.train: tandem train-rm needs preference pairs (JSONL rows "
                                 "{{prompt, chosen, rejected}})",
                                 loaded.source));
  }
  RunInputs in;
  load_model(loaded, in);
  PreferenceEncoding encoding;
  encoding.tokenizer = in.tokenizer.get();
  encoding.chat_template = in.chat_template;
  encoding.data = c.data;
  // A finished RL sample ends with the model's end of sequence: so do the pairs.
  if (!in.model.eos_token_ids.empty()) encoding.end_of_sequence = static_cast<int32_t>(in.model.eos_token_ids.front());
  encoding.max_length = std::min(c.reward_model.max_length, in.model.max_position_embeddings);
  auto load = [&](const std::string& key, const std::string& path) {
    try {
      return load_preference_pairs(path, encoding);
    } catch (const UsageError& e) {
      throw UsageError(fmt::format("{}: {}", loaded.origin_of(key), e.what()));
    }
  };
  in.preference_train = load("reward_model.train", c.reward_model.train);
  if (!c.reward_model.val.empty()) {
    in.preference_val = load("reward_model.val", c.reward_model.val);
  } else {
    if (in.preference_train->pairs.size() < 2) {
      throw UsageError(fmt::format("{}: reward_model.train: {} holds one pair; a validation split needs two (or set "
                                   "reward_model.val)",
                                   loaded.origin_of("reward_model.train"), c.reward_model.train));
    }
    in.preference_val = split_validation(*in.preference_train, c.reward_model.val_fraction,
                                         static_cast<uint64_t>(c.experiment.seed));
  }
  return in;
}

std::string describe_run_inputs(const RunInputs& in) {
  if (in.preference_train) {
    return fmt::format("model {} ({}), {} preference pairs from {}{}, {} validation pairs", in.model_dir,
                       in.model.model_type, in.preference_train->pairs.size(), in.preference_train->source,
                       in.preference_train->skipped_long > 0
                           ? fmt::format(" ({} over reward_model.max_length left out)", in.preference_train->skipped_long)
                           : std::string(),
                       in.preference_val->pairs.size());
  }
  std::string text = fmt::format("model {} ({}, vocabulary {}{}), {} rows from {}, prompts up to {} tokens (limit {})",
                                 in.model_dir, in.model.model_type, in.model.vocab_size,
                                 in.model.sampled_vocab_size > 0
                                     ? fmt::format(", {} sampled", in.model.sampled_vocab_size)
                                     : std::string(),
                                 in.data.rows.size(), in.data.source, in.longest_prompt, in.prompt_limit);
  if (!in.val_data.rows.empty()) {
    text += fmt::format(", {} validation rows from {}{}", in.val_data.rows.size(), in.val_data.source,
                        in.val_skipped_long_prompts > 0
                            ? fmt::format(" ({} skipped as too long)", in.val_skipped_long_prompts)
                            : std::string());
  }
  if (in.skipped_long_prompts > 0) {
    text += fmt::format(", {} rows skipped as too long (data.on_long_prompt: skip)", in.skipped_long_prompts);
  }
  return text;
}

}  // namespace tandem
