// `tandem tokenize --tokenizer DIR [--text T | --file F] [--decode]`: the token ids of a
// text as one JSON array line, or with --decode the text of a JSON array of ids. Input
// comes from --text, --file or else stdin. The decoded text is printed exactly, with no
// newline added, so that encode -> decode round-trips can be compared byte for byte.
#include "actor/presets.h"
#include "actor/tokenizer.h"
#include "controller/cli.h"
#include "core/error.h"
#include "core/files.h"
#include "core/text.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <iterator>

namespace tandem {

namespace {

std::unique_ptr<Tokenizer> open_tokenizer(const std::string& path) {
  std::string dir = path;
  if (path.rfind("builtin:", 0) == 0) {
    dir = resolve_model_path(path);  // writes the preset into the model cache on first use
  } else {
    std::error_code ec;
    if (!std::filesystem::is_directory(path, ec)) {
      throw UsageError(fmt::format("--tokenizer {} is not a directory (expected a model directory with tokenizer.json, "
                                   "or builtin:<preset>)",
                                   tandem::quoted(path)));
    }
  }
  try {
    return load_tokenizer(dir);
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {  // a missing or malformed tokenizer.json is the user's input too
    throw UsageError(fmt::format("--tokenizer: {}", e.what()));
  }
}

std::string read_input(const TokenizeArgs& args) {
  if (!args.file.empty()) {
    std::optional<std::string> text = read_file(args.file);
    if (!text) throw UsageError(fmt::format("cannot read --file {}: {}", tandem::quoted(args.file), std::strerror(errno)));
    return *text;
  }
  if (!args.text.empty()) return args.text;
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

std::vector<int32_t> parse_ids(const std::string& input, int32_t vocab_size) {
  nlohmann::json value;
  try {
    value = nlohmann::json::parse(input);
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(fmt::format("--decode expects a JSON array of token ids; the input is not JSON: {}", e.what()));
  }
  if (!value.is_array()) throw UsageError(fmt::format("--decode expects a JSON array of token ids, not {}", tandem::quoted(value.dump())));
  std::vector<int32_t> ids;
  for (size_t i = 0; i < value.size(); ++i) {
    const nlohmann::json& id = value[i];
    if (!id.is_number_integer()) {
      throw UsageError(fmt::format("--decode: element {} is {}, not an integer token id", i, tandem::quoted(id.dump())));
    }
    // Range-checked here (not only by decode) so that huge numbers are not truncated first.
    bool in_range = id.is_number_unsigned() ? id.get<uint64_t>() < static_cast<uint64_t>(vocab_size)
                                            : id.get<int64_t>() >= 0 && id.get<int64_t>() < vocab_size;
    if (!in_range) {
      throw UsageError(fmt::format("--decode: token {} at position {} is outside the vocabulary [0, {})", id.dump(), i, vocab_size));
    }
    ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return ids;
}

}  // namespace

int cli_tokenize(const TokenizeArgs& args) {
  std::unique_ptr<Tokenizer> tokenizer = open_tokenizer(args.tokenizer_dir);
  std::string input = read_input(args);
  if (args.decode) {
    std::string text;
    try {
      text = tokenizer->decode(parse_ids(input, tokenizer->vocab_size()));
    } catch (const UsageError&) {
      throw;
    } catch (const Error& e) {  // an id inside the range that names no token (a gap in the vocabulary)
      throw UsageError(fmt::format("--decode: {}", e.what()));
    }
    std::fwrite(text.data(), 1, text.size(), stdout);
  } else {
    std::string line = nlohmann::json(tokenizer->encode(input)).dump();
    std::printf("%s\n", line.c_str());
  }
  return 0;
}

}  // namespace tandem
