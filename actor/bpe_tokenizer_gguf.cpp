// GGUF tokenizer metadata -> the tokenizer.json Hugging Face would have for the model,
// then the tokenizer.json loader (with llama.cpp's scores for SentencePiece merges).
#include "actor/bpe_tokenizer_gguf.h"

#include "actor/bpe_tokenizer.h"
#include "actor/bpe_tokenizer_state.h"
#include "core/error.h"
#include "core/text.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>

namespace tandem {

namespace {

// nlohmann::json keeps keys sorted, so a written file lists the vocabulary alphabetically;
// Hugging Face reads it all the same.
using Json = nlohmann::json;

// llama.cpp's token types (llama_token_type).
enum GgufTokenType : int64_t {
  gguf_token_normal = 1,
  gguf_token_unknown = 2,
  gguf_token_control = 3,
  gguf_token_user_defined = 4,
  gguf_token_unused = 5,
  gguf_token_byte = 6,
};

const std::string kMeta = "\xE2\x96\x81";  // "▁", SentencePiece's space

// The split regexes of the models' own tokenizer.json files (llama.cpp runs adapted copies).
const char* const kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct GgufVocab {
  std::string model;  // tokenizer.ggml.model
  std::vector<std::string> tokens;
  std::vector<int64_t> types;
  std::vector<float> scores;  // llama only; zeros when the file has none (llama.cpp's default)
};

GgufVocab read_vocab(const GgufFile& file) {
  GgufVocab vocab;
  vocab.model = file.get_string("tokenizer.ggml.model");
  if (vocab.model == "no_vocab") {
    throw Error(fmt::format("{}: tokenizer.ggml.model is \"no_vocab\": the file has no tokenizer (token ids only)", file.path()));
  }
  if (vocab.model != "gpt2" && vocab.model != "llama") {
    throw Error(fmt::format("{}: tokenizer.ggml.model is {}: tandem reads \"gpt2\" (byte-level BPE) and \"llama\" "
                            "(SentencePiece BPE) tokenizers",
                            file.path(), tandem::quoted(vocab.model)));
  }
  vocab.tokens = file.get_string_array("tokenizer.ggml.tokens");
  size_t n = vocab.tokens.size();
  vocab.types = file.find_int_array("tokenizer.ggml.token_type").value_or(std::vector<int64_t>(n, gguf_token_normal));
  if (vocab.types.size() != n) {
    throw Error(fmt::format("{}: tokenizer.ggml.token_type has {} entries for {} tokens", file.path(), vocab.types.size(), n));
  }
  if (vocab.model == "llama") {
    vocab.scores = file.find_float_array("tokenizer.ggml.scores").value_or(std::vector<float>(n, 0.0f));
    if (vocab.scores.size() != n) {
      throw Error(fmt::format("{}: tokenizer.ggml.scores has {} entries for {} tokens", file.path(), vocab.scores.size(), n));
    }
  }
  return vocab;
}

Json added_token(int64_t id, const std::string& content, bool special) {
  return {{"id", id},          {"content", content}, {"single_word", false}, {"lstrip", false},
          {"rstrip", false},   {"normalized", false}, {"special", special}};
}

Json byte_level_step(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
}

Json gpt2_json(const GgufFile& file, const GgufVocab& vocab) {
  std::string pre = file.find_string("tokenizer.ggml.pre").value_or("(none)");
  Json normalizer = nullptr, pre_tokenizer;
  bool ignore_merges = false;
  auto split = [](const char* pattern) {
    return Json{{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}, {"invert", false}};
  };
  if (pre == "qwen2") {
    normalizer = {{"type", "NFC"}};
    pre_tokenizer = {{"type", "Sequence"}, {"pretokenizers", {split(kQwen2Pattern), byte_level_step(false)}}};
  } else if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") {
    pre_tokenizer = {{"type", "Sequence"}, {"pretokenizers", {split(kLlama3Pattern), byte_level_step(false)}}};
    ignore_merges = true;
  } else if (pre == "gpt-2") {
    pre_tokenizer = byte_level_step(true);
  } else {
    throw Error(fmt::format("{}: tokenizer.ggml.pre is {}: tandem knows the gpt2 pre-tokenizers \"qwen2\", \"llama-bpe\" "
                            "(Llama-3) and \"gpt-2\"",
                            file.path(), tandem::quoted(pre)));
  }
  Json vocab_json = Json::object(), added = Json::array();
  for (size_t id = 0; id < vocab.tokens.size(); ++id) {
    int64_t type = vocab.types[id];
    if (type == gguf_token_control || type == gguf_token_unknown || type == gguf_token_user_defined) {
      added.push_back(added_token(static_cast<int64_t>(id), vocab.tokens[id], type != gguf_token_user_defined));
    } else if (type != gguf_token_unused) {
      vocab_json[vocab.tokens[id]] = id;
    }
  }
  std::vector<std::string> merges = file.get_string_array("tokenizer.ggml.merges");
  return {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", normalizer},
      {"pre_tokenizer", pre_tokenizer},
      {"post_processor", nullptr},
      {"decoder", byte_level_step(true)},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", ignore_merges},
        {"vocab", vocab_json},
        {"merges", merges}}},
  };
}

// transformers' SentencePiece converter's merges: every split of a piece into two pieces,
// ordered by the merged piece's score (higher first), then by the pieces' ids.
Json spm_merges(const GgufVocab& vocab) {
  std::map<std::string, int64_t> ids;
  for (size_t id = 0; id < vocab.tokens.size(); ++id) ids[vocab.tokens[id]] = static_cast<int64_t>(id);
  struct Merge {
    float score;
    int64_t left, right;
    size_t split;
    int64_t merged;
  };
  std::vector<Merge> merges;
  for (const auto& [text, id] : ids) {
    for (size_t split = 1; split < text.size(); ++split) {
      auto left = ids.find(text.substr(0, split)), right = ids.find(text.substr(split));
      if (left != ids.end() && right != ids.end()) merges.push_back({vocab.scores[id], left->second, right->second, split, id});
    }
  }
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) {
    if (a.score != b.score) return a.score > b.score;
    if (a.merged != b.merged) return a.merged < b.merged;
    return std::pair(a.left, a.right) < std::pair(b.left, b.right);
  });
  Json out = Json::array();
  for (const Merge& merge : merges) out.push_back({vocab.tokens[merge.left], vocab.tokens[merge.right]});
  return out;
}

Json llama_json(const GgufFile& file, const GgufVocab& vocab, bool with_merges) {
  bool add_space_prefix = file.find_bool("tokenizer.ggml.add_space_prefix").value_or(true);
  int64_t unk_id = file.find_int("tokenizer.ggml.unknown_token_id").value_or(0);
  Json vocab_json = Json::object(), added = Json::array();
  bool byte_tokens = false;
  for (size_t id = 0; id < vocab.tokens.size(); ++id) {
    int64_t type = vocab.types[id];
    if (type == gguf_token_unused) continue;
    vocab_json[vocab.tokens[id]] = id;  // a repeated spelling keeps its last id, as llama.cpp's token_to_id
    if (type == gguf_token_control || type == gguf_token_unknown || type == gguf_token_user_defined) {
      added.push_back(added_token(static_cast<int64_t>(id), vocab.tokens[id], type != gguf_token_user_defined));
    }
    byte_tokens |= type == gguf_token_byte;
  }
  Json normalizer = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMeta}};
  Json decoders = {{{"type", "Replace"}, {"pattern", {{"String", kMeta}}}, {"content", " "}},
                           {{"type", "ByteFallback"}},
                           {{"type", "Fuse"}}};
  if (add_space_prefix) {
    normalizer = {{"type", "Sequence"}, {"normalizers", {{{"type", "Prepend"}, {"prepend", kMeta}}, normalizer}}};
    decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  }
  bool has_unk = unk_id >= 0 && static_cast<size_t>(unk_id) < vocab.tokens.size() && vocab.types[unk_id] != gguf_token_unused;
  return {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", normalizer},
      {"pre_tokenizer", nullptr},
      {"post_processor", nullptr},
      {"decoder", {{"type", "Sequence"}, {"decoders", decoders}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", has_unk ? Json(vocab.tokens[unk_id]) : Json(nullptr)},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", true},
        {"byte_fallback", byte_tokens},
        {"vocab", vocab_json},
        {"merges", with_merges ? spm_merges(vocab) : Json::array()}}},
  };
}

}  // namespace

std::unique_ptr<Tokenizer> tokenizer_from_gguf(const GgufFile& file) {
  GgufVocab vocab = read_vocab(file);
  std::string where = file.path() + " (its tokenizer.ggml.* metadata as a tokenizer.json)";
  if (vocab.model == "gpt2") {
    return BpeTokenizer::from_state(load_bpe_tokenizer_state(gpt2_json(file, vocab), where));
  }
  return BpeTokenizer::from_state(load_bpe_tokenizer_state(llama_json(file, vocab, /*with_merges=*/false), where, &vocab.scores));
}

std::string tokenizer_json_from_gguf(const GgufFile& file) {
  GgufVocab vocab = read_vocab(file);
  return (vocab.model == "gpt2" ? gpt2_json(file, vocab) : llama_json(file, vocab, /*with_merges=*/true)).dump();
}

}  // namespace tandem
