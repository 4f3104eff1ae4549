#include "controller/cli_model.h"

#include "actor/llama2c.h"
#include "actor/presets.h"
#include "core/error.h"
#include "core/text.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>

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
  m.tokenizer = load_tokenizer(m.source);
  limit_to_tokenizer(m.config, m.tokenizer->vocab_size(), m.source);  // padded ids are never drawn
  m.weights = load_model_weights(m.source, m.config);
  return m;
}

std::vector<int32_t> parse_id_list(const std::string& text, int64_t vocab, const std::string& flag) {
  std::string list = text;
  for (char& ch : list) {
    if (ch == '[' || ch == ']') ch = ' ';
  }
  std::vector<int32_t> ids;
  for (const std::string& part : split(list, ',')) {
    const size_t first = part.find_first_not_of(" \t\n"), last = part.find_last_not_of(" \t\n");
    const std::string item = first == std::string::npos ? "" : part.substr(first, last - first + 1);
    char* end = nullptr;
    errno = 0;
    const long long id = item.empty() ? -1 : std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || errno == ERANGE) {
      throw UsageError(fmt::format("{}: {} is not a token id", flag, quoted(item)));
    }
    if (id < 0 || id >= vocab) {
      throw UsageError(fmt::format("{}: token {} at position {} is outside the vocabulary [0, {})", flag, id, ids.size(),
                                   vocab));
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  if (ids.empty()) throw UsageError(fmt::format("{}: no token ids", flag));
  return ids;
}

}  // namespace tandem
