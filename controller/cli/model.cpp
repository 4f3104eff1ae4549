#include "controller/cli/model.h"

#include "actor/gguf_model.h"
#include "actor/llama2c.h"
#include "actor/presets.h"
#include "core/error.h"
#include "core/text.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>


namespace tandem {

CliModel load_cli_model(const std::string& model) {
  CliModel m;
  if (is_llama2c_path(model)) {
    Llama2cModel read = read_llama2c(model);
    m.source = model;
    m.config = read.config;
    m.weights = std::move(read.weights);
    return m;
  }
  m.source = resolve_model_path(model);
  m.config = read_model_config(m.source + "/config.json");
  // A directory without tokenizer.json (a llama2.c model converted to HF, a .gguf without a
  // vocabulary) takes ids only, as a .bin does.
  if (std::filesystem::exists(m.source + "/tokenizer.json")) {
    m.tokenizer = load_tokenizer(m.source);
    limit_to_tokenizer(m.config, m.tokenizer->vocab_size(), m.source);  // padded ids are never drawn
  }
  m.weights = load_model_weights(m.source, m.config);
  return m;
}

std::vector<int32_t> parse_token_ids(const std::string& input, int64_t vocab_size, const std::string& flag) {
  nlohmann::json value;
  try {
    value = nlohmann::json::parse(input);
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(fmt::format("{} expects a JSON array of token ids; the input is not JSON: {}", flag, e.what()));
  }
  if (!value.is_array()) {
    throw UsageError(fmt::format("{} expects a JSON array of token ids, not {}", flag, quoted(value.dump())));
  }
  std::vector<int32_t> ids;
  for (size_t i = 0; i < value.size(); ++i) {
    const nlohmann::json& id = value[i];
    if (!id.is_number_integer()) {
      throw UsageError(fmt::format("{}: element {} is {}, not an integer token id", flag, i, quoted(id.dump())));
    }
    // Range-checked here (not only by decode) so that huge numbers are not truncated first.
    const bool in_range = id.is_number_unsigned() ? id.get<uint64_t>() < static_cast<uint64_t>(vocab_size)
                                                  : id.get<int64_t>() >= 0 && id.get<int64_t>() < vocab_size;
    if (!in_range) {
      throw UsageError(fmt::format("{}: token {} at position {} is outside the vocabulary [0, {})", flag, id.dump(), i,
                                   vocab_size));
    }
    ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return ids;
}

std::vector<int32_t> parse_id_list(const std::string& text, int64_t vocab, const std::string& flag) {
  const size_t first = text.find_first_not_of(" \t\n");
  // "1,2,3" is the JSON array without its brackets.
  const bool bracketed = first != std::string::npos && text[first] == '[';
  std::vector<int32_t> ids = parse_token_ids(bracketed ? text : "[" + text + "]", vocab, flag);
  if (ids.empty()) throw UsageError(fmt::format("{}: no token ids", flag));
  return ids;
}

}  // namespace tandem
