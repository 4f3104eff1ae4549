// write_byte_level_tokenizer: ByteTokenizer's vocabulary as a Hugging Face tokenizer.json.
//
// Why it encodes exactly as ByteTokenizer: with no merges, BPE leaves every byte its
// own token whatever the pre-tokenizer cuts, and the byte tokens are given ids 0..255 in
// byte order. The special tokens are added tokens (matched leftmost-longest in the raw
// text, as ByteTokenizer does). No normaliser, so no byte of the text is changed, and
// use_regex=false, so each stretch between special tokens is one word, which is fastest.
#include "actor/byte_level.h"
#include "actor/tokenizer.h"
#include "core/error.h"
#include "core/text.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace tandem {

namespace {

using nlohmann::ordered_json;

void write_json(const std::filesystem::path& path, const ordered_json& value) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (out) out << value.dump(2) << "\n";
  if (!out) throw Error(fmt::format("cannot write {}: {}", path.string(), std::strerror(errno)));
}

ordered_json byte_level_step() {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
}

}  // namespace

void write_byte_level_tokenizer(const std::string& model_dir, const std::vector<std::string>& special_tokens) {
  for (size_t i = 0; i < special_tokens.size(); ++i) {
    TANDEM_CHECK(!special_tokens[i].empty(), "special token {} is empty", i);
    for (size_t j = 0; j < i; ++j) {
      TANDEM_CHECK(special_tokens[i] != special_tokens[j], "special token {} listed twice", tandem::quoted(special_tokens[i]));
    }
  }
  std::error_code ec;
  std::filesystem::create_directories(model_dir, ec);
  if (ec) throw Error(fmt::format("cannot create {}: {}", model_dir, ec.message()));

  ordered_json vocab = ordered_json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level::encode(std::string(1, static_cast<char>(b)))] = b;

  ordered_json added = ordered_json::array();
  ordered_json added_decoder = ordered_json::object();
  for (size_t i = 0; i < special_tokens.size(); ++i) {
    ordered_json token = {{"id", 256 + i},          {"content", special_tokens[i]}, {"single_word", false},
                          {"lstrip", false},        {"rstrip", false},              {"normalized", false},
                          {"special", true}};
    added.push_back(token);
    token.erase("id");
    added_decoder[std::to_string(256 + i)] = token;
  }

  ordered_json tokenizer = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", byte_level_step()},
      {"post_processor", nullptr},
      {"decoder", byte_level_step()},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", ordered_json::array()}}},
  };
  // What transformers' AutoTokenizer needs besides tokenizer.json. Decoding must not
  // "clean up" spaces, or it would not give the original bytes back.
  ordered_json config = {
      {"tokenizer_class", "PreTrainedTokenizerFast"},
      {"added_tokens_decoder", added_decoder},
      {"additional_special_tokens", special_tokens},
      {"clean_up_tokenization_spaces", false},
      {"model_max_length", 1 << 30},
  };
  write_json(std::filesystem::path(model_dir) / "tokenizer.json", tokenizer);
  write_json(std::filesystem::path(model_dir) / "tokenizer_config.json", config);
}

}  // namespace tandem
