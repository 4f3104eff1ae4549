#include "controller/data/preference_pairs.h"

#include "core/error.h"
#include "core/files.h"
#include "python/jinja_render.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <random>
#include <sstream>

namespace tandem {

namespace {

// Preference files are hand-made or converted datasets: 8 GiB, as data.train's bound.
constexpr uint64_t kMaxPreferenceBytes = 8ull << 30;

// The prompt's text as an RL run of this config would show it to the policy.
std::string prompt_text(const nlohmann::ordered_json& prompt, const PreferenceEncoding& e, const std::string& where) {
  const bool messages = prompt.is_array();
  if (!messages && !prompt.is_string()) {
    throw UsageError(fmt::format("{}: \"prompt\" must be a string or a list of chat messages, got {}", where,
                                 prompt.type_name()));
  }
  if (!messages && !e.data.prompt_as_user_message) return prompt.get<std::string>();
  if (!e.chat_template) {
    throw UsageError(fmt::format("{}: the prompt {} but there is no chat template to render it; set "
                                 "data.chat_template to a Jinja file",
                                 where, messages ? "is a list of chat messages" : "is to become a user message"));
  }
  python::JinjaInputs inputs;
  if (messages) {
    inputs.messages = prompt;
  } else {
    inputs.messages = nlohmann::ordered_json::array();
    if (!e.data.system_prompt.empty()) inputs.messages.push_back({{"role", "system"}, {"content", e.data.system_prompt}});
    inputs.messages.push_back({{"role", "user"}, {"content", prompt.get<std::string>()}});
  }
  inputs.add_generation_prompt = e.data.add_generation_prompt;
  inputs.special_tokens = e.chat_template->special_tokens;
  try {
    return python::render_chat_template(e.chat_template->source, inputs);
  } catch (const Error& error) {
    throw UsageError(fmt::format("{}: rendering the prompt with the chat template ({}) failed: {}", where,
                                 e.chat_template->origin, error.what()));
  }
}

// Fisher-Yates with our own draws: std::shuffle's algorithm is not specified, and the same
// seed must give the same pairs and split with any standard library (a resume elsewhere).
template <class T> void shuffle_in_place(std::vector<T>& items, std::mt19937_64& rng) {
  for (size_t i = items.size(); i > 1; --i) std::swap(items[i - 1], items[rng() % i]);
}

// builtin:addition1_pairs: for every single-digit sum "a+b=" (100 prompts), the right sum
// chosen over each of the 18 other numbers 0..18, over four numbers 19..99, over the sum
// with 1 to 3 stray characters after it (twice), over 1 to 4 stray characters, and over
// the empty answer: 2,600 pairs,
// shuffled, strays drawn with a fixed seed. A preference a checker can verify, so a
// reward model's accuracy and a policy trained on its scores can both be measured against
// the truth (math_answer on builtin:addition1). Every wrong number appears because the
// policy's own mistakes are near misses a sampled set may never show the model; the
// malformed answers are what a policy drifts to first against a reward model that never
// saw any (it learns to emit junk the model happens to score high).
std::string addition1_pair_lines() {
  std::mt19937_64 rng(20261128);
  auto stray = [&](uint64_t count) {
    std::string text;
    for (uint64_t i = 0; i < count; ++i) text += static_cast<char>(33 + rng() % 94);  // printable ASCII, no space
    return text;
  };
  std::vector<std::string> lines;
  for (int a = 0; a <= 9; ++a) {
    for (int b = 0; b <= 9; ++b) {
      const std::string prompt = fmt::format("{}+{}=", a, b), sum = std::to_string(a + b);
      std::vector<std::string> rejected;
      for (int n = 0; n <= 18; ++n) {
        if (n != a + b) rejected.push_back(std::to_string(n));
      }
      for (int k = 0; k < 4; ++k) rejected.push_back(std::to_string(19 + rng() % 81));  // two digits, beyond any sum
      rejected.push_back(sum + stray(1 + rng() % 3));
      rejected.push_back(sum + stray(1 + rng() % 3));
      std::string junk = stray(1 + rng() % 4);
      while (junk == sum) junk = stray(1 + rng() % 4);  // a stray digit may spell the sum itself
      rejected.push_back(junk);
      rejected.push_back("");
      for (const std::string& wrong : rejected) {
        lines.push_back(nlohmann::json{{"prompt", prompt}, {"chosen", sum}, {"rejected", wrong}}.dump());
      }
    }
  }
  shuffle_in_place(lines, rng);
  std::string text;
  for (const std::string& line : lines) text += line + "\n";
  return text;
}

// The JSONL text of a built-in preference set, or an Error listing the built-in ones.
std::string builtin_pair_lines(const std::string& spec) {
  if (spec == "builtin:addition1_pairs") return addition1_pair_lines();
  throw UsageError(fmt::format("unknown built-in preference set \"{}\"; built-in: builtin:addition1_pairs", spec));
}

// An answer's text: a string, or a list of exactly one assistant message.
// Empty only where an end-of-sequence token follows it: the sample of a policy that ended at
// once (a reward model should learn to rank it); without one the sequence would be the
// prompt alone.
std::string answer_text(const nlohmann::ordered_json& row, const char* field, const std::string& where,
                        bool empty_allowed) {
  if (!row.contains(field)) throw UsageError(fmt::format("{}: no \"{}\" field", where, field));
  const nlohmann::ordered_json& answer = row.at(field);
  std::string text;
  if (answer.is_string()) {
    text = answer.get<std::string>();
  } else if (answer.is_array() && answer.size() == 1 && answer[0].is_object() &&
             answer[0].value("role", "") == "assistant" && answer[0].contains("content") &&
             answer[0]["content"].is_string()) {
    text = answer[0]["content"].get<std::string>();
  } else {
    throw UsageError(fmt::format("{}: \"{}\" must be a string or a list of one assistant message "
                                 "([{{\"role\": \"assistant\", \"content\": \"...\"}}]), got {}",
                                 where, field, answer.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                                                   .substr(0, 120)));
  }
  if (text.empty() && !empty_allowed) {
    throw UsageError(fmt::format("{}: \"{}\" is empty (and the model has no end-of-sequence token to stand for an "
                                 "empty answer)",
                                 where, field));
  }
  return text;
}

}  // namespace

PreferenceSet load_preference_pairs(const std::string& path, const PreferenceEncoding& e) {
  TANDEM_CHECK(e.tokenizer != nullptr, "load_preference_pairs: no tokenizer");
  std::string text;
  if (path.rfind("builtin:", 0) == 0) {
    text = builtin_pair_lines(path);
  } else {
    try {
      text = read_input_file(path, kMaxPreferenceBytes);
    } catch (const Error& error) {
      throw UsageError(fmt::format("{}: cannot read the preference pairs: {}", path, error.what()));
    }
  }
  PreferenceSet set;
  set.source = path;
  std::istringstream lines(text);
  int64_t number = 0;
  for (std::string line; std::getline(lines, line);) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{}:{}", path, number);
    const nlohmann::ordered_json row = nlohmann::ordered_json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (row.is_discarded()) throw UsageError(fmt::format("{}: not valid JSON", where));
    if (!row.is_object()) throw UsageError(fmt::format("{}: a row must be a JSON object, got {}", where, row.type_name()));
    if (!row.contains("prompt")) throw UsageError(fmt::format("{}: no \"prompt\" field", where));
    const std::vector<int32_t> prompt = e.tokenizer->encode(prompt_text(row.at("prompt"), e, where));
    if (prompt.empty()) throw UsageError(fmt::format("{}: the prompt is empty", where));
    PreferencePair pair;
    pair.prompt_tokens = static_cast<int64_t>(prompt.size());
    pair.where = where;
    for (auto [field, out] : {std::pair{"chosen", &pair.chosen}, std::pair{"rejected", &pair.rejected}}) {
      const std::vector<int32_t> answer = e.tokenizer->encode(answer_text(row, field, where, e.end_of_sequence >= 0));
      *out = prompt;
      out->insert(out->end(), answer.begin(), answer.end());
      if (e.end_of_sequence >= 0) out->push_back(e.end_of_sequence);
    }
    const int64_t longest = static_cast<int64_t>(std::max(pair.chosen.size(), pair.rejected.size()));
    if (e.max_length > 0 && longest > e.max_length) {
      ++set.skipped_long;
      continue;
    }
    set.pairs.push_back(std::move(pair));
  }
  if (set.pairs.empty()) {
    throw UsageError(set.skipped_long > 0
                         ? fmt::format("{}: every one of its {} pairs is over reward_model.max_length ({} tokens)", path,
                                       set.skipped_long, e.max_length)
                         : fmt::format("{}: no preference pair in it", path));
  }
  return set;
}

PreferenceSet split_validation(PreferenceSet& set, double fraction, uint64_t seed) {
  TANDEM_CHECK(set.pairs.size() >= 2, "{}: {} pair(s) cannot be split into training and validation pairs", set.source,
               set.pairs.size());
  std::mt19937_64 gen(seed);
  shuffle_in_place(set.pairs, gen);
  const size_t held = std::clamp<size_t>(static_cast<size_t>(fraction * static_cast<double>(set.pairs.size())), 1,
                                         set.pairs.size() - 1);
  PreferenceSet val;
  val.source = set.source + " (held out)";
  val.pairs.assign(std::make_move_iterator(set.pairs.end() - static_cast<std::ptrdiff_t>(held)),
                   std::make_move_iterator(set.pairs.end()));
  set.pairs.resize(set.pairs.size() - held);
  return val;
}

}  // namespace tandem
