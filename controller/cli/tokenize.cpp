// `tandem tokenize --tokenizer DIR [--text T | --file F] [--decode]`: the token ids of a
// text as one JSON array line, or with --decode the text of a JSON array of ids. Input
// comes from --text, --file or else stdin. The decoded text is printed exactly, with no
// newline added, so that encode -> decode round-trips can be compared byte for byte.
#include "actor/presets.h"
#include "actor/tokenizer.h"
#include "controller/cli/cli.h"
#include "controller/cli/model.h"
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

}  // namespace

int cli_tokenize(const TokenizeArgs& args) {
  std::unique_ptr<Tokenizer> tokenizer = open_tokenizer(args.tokenizer_dir);
  std::string input = read_input(args);
  if (args.decode) {
    std::string text;
    try {
      text = tokenizer->decode(parse_token_ids(input, tokenizer->vocab_size(), "--decode"));
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
