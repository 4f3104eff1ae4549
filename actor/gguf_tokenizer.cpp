#include "actor/gguf_tokenizer.h"

#include "actor/bpe_tokenizer_gguf.h"

#include "core/error.h"
#include "core/files.h"
#include "core/text.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>

namespace tandem {

namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;

namespace {

// llama.cpp's token types (enum llama_token_type).
constexpr int64_t token_type_normal = 1, token_type_unknown = 2, token_type_control = 3, token_type_user_defined = 4,
                  token_type_unused = 5, token_type_byte = 6;

// The pre-tokenizer regexes llama.cpp implements under a `tokenizer.ggml.pre` name, as
// Hugging Face's tokenizer.json spells them.
constexpr char qwen2_regex[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr char llama3_regex[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct PreTokenizerShape {
  std::vector<std::string> split_regexes;
  bool byte_level = false;
  bool byte_level_regex = false;  // ByteLevel's own GPT-2 regex (use_regex, default true)
};

void collect_pre_tokenizer(const json& step, PreTokenizerShape& shape, const std::string& where) {
  if (!step.is_object()) throw Error(fmt::format("{}: pre_tokenizer is not an object", where));
  const std::string type = step.value("type", "");
  if (type == "Sequence") {
    for (const json& s : step.value("pretokenizers", json::array())) collect_pre_tokenizer(s, shape, where);
  } else if (type == "ByteLevel") {
    shape.byte_level = true;
    shape.byte_level_regex = step.value("use_regex", true);
  } else if (type == "Split" && step.contains("pattern") && step["pattern"].contains("Regex")) {
    shape.split_regexes.push_back(step["pattern"]["Regex"].get<std::string>());
  } else {
    throw Error(fmt::format("{}: pre-tokenizer step {} has no llama.cpp equivalent known here", where, step.dump()));
  }
}

// The `tokenizer.ggml.pre` llama.cpp needs to split text as this tokenizer.json does.
std::string pre_tokenizer_name(const json& root, bool has_merges, const std::string& where) {
  PreTokenizerShape shape;
  if (!root.contains("pre_tokenizer") || root["pre_tokenizer"].is_null()) {
    throw Error(fmt::format("{}: no pre_tokenizer (a byte-level BPE tokenizer has one)", where));
  }
  collect_pre_tokenizer(root["pre_tokenizer"], shape, where);
  if (!shape.byte_level) throw Error(fmt::format("{}: the pre_tokenizer has no ByteLevel step: not a byte-level BPE", where));
  if (shape.split_regexes.empty() && (shape.byte_level_regex || !has_merges)) return "gpt-2";
  if (shape.split_regexes.size() == 1 && !shape.byte_level_regex) {
    if (shape.split_regexes[0] == qwen2_regex) return "qwen2";
    if (shape.split_regexes[0] == llama3_regex) return "llama-bpe";
  }
  throw Error(fmt::format("{}: its pre-tokenizer (split regexes {}) matches none llama.cpp is told of here "
                          "(Qwen2's, Llama-3's, GPT-2's): llama.cpp would split text differently",
                          where, json(shape.split_regexes).dump()));
}

json read_json_file(const fs::path& path) {
  const std::optional<std::string> text = read_file(path.string());
  if (!text) throw Error(fmt::format("{}: cannot read: {}", path.string(), std::strerror(errno)));
  try {
    return json::parse(*text);
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: not valid JSON: {}", path.string(), e.what()));
  }
}

// llama.cpp's SentencePiece vocabulary for a byte_fallback BPE tokenizer.json: llama.cpp
// merges the adjacent pair whose merged piece has the highest score, so a piece made by
// merge rank r scores -r (the BPE order exactly; a piece several merges make takes its
// best rank) and pieces no merge makes score below every merge. (llama.cpp's own
// converter gives every piece -1000 for such files, which leaves only its leftmost
// tie-break.) Byte pieces <0xNN> are BYTE, the unk_token UNKNOWN. A leading "▁" comes
// from a Prepend normaliser or a Metaspace prepend_scheme first/always: add_space_prefix.
std::vector<std::pair<std::string, GgufValue>> sentencepiece_metadata(const json& root, const json& model,
                                                                      const std::vector<std::string>& merges,
                                                                      std::vector<std::string>& tokens,
                                                                      std::vector<int64_t>& types, const std::string& where) {
  std::map<std::string, size_t> rank_of_piece;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const size_t space = merges[rank].find(' ', 1);
    if (space == std::string::npos) throw Error(fmt::format("{}: merge {} has no space", where, quoted(merges[rank])));
    rank_of_piece.emplace(merges[rank].substr(0, space) + merges[rank].substr(space + 1), rank);  // keeps the first
  }
  const std::string unk = model.value("unk_token", json()).is_string() ? model["unk_token"].get<std::string>() : "";
  std::vector<double> scores(tokens.size());
  for (size_t id = 0; id < tokens.size(); ++id) {
    const auto it = rank_of_piece.find(tokens[id]);
    scores[id] = it != rank_of_piece.end() ? -static_cast<double>(it->second) : -static_cast<double>(merges.size()) - 1.0;
    if (!unk.empty() && tokens[id] == unk) types[id] = token_type_unknown;  // an added token too, in Llama-2's file
    if (types[id] != token_type_normal) continue;
    if (tokens[id].size() == 6 && tokens[id].rfind("<0x", 0) == 0 && tokens[id][5] == '>') types[id] = token_type_byte;
  }
  const std::string dump = root.value("normalizer", json()).dump() + root.value("pre_tokenizer", json()).dump();
  const bool prepends = dump.find("\"Prepend\"") != std::string::npos || dump.find("\"prepend_scheme\":\"first\"") != std::string::npos ||
                        dump.find("\"prepend_scheme\":\"always\"") != std::string::npos ||
                        dump.find("\"add_prefix_space\":true") != std::string::npos;
  return {
      {"tokenizer.ggml.model", GgufValue::of_string("llama")},
      {"tokenizer.ggml.tokens", GgufValue::of_strings(std::move(tokens))},
      {"tokenizer.ggml.scores", GgufValue::of_float32s(std::move(scores))},
      {"tokenizer.ggml.token_type", GgufValue::of_int32s(std::move(types))},
      {"tokenizer.ggml.add_space_prefix", GgufValue::of_bool(prepends)},
  };
}

void write_json(const fs::path& path, const ordered_json& value) { write_file_atomic(path.string(), value.dump(2) + "\n"); }

}  // namespace

std::vector<std::pair<std::string, GgufValue>> gguf_tokenizer_metadata(const std::string& model_dir,
                                                                       const ModelConfig& config) {
  const fs::path path = fs::path(model_dir) / "tokenizer.json";
  if (model_dir.empty() || !fs::exists(path)) return {{"tokenizer.ggml.model", GgufValue::of_string("no_vocab")}};
  const std::string where = path.string();
  const std::optional<std::string> text = read_file(where);
  if (!text) throw Error(fmt::format("{}: cannot read: {}", where, std::strerror(errno)));
  json root;
  try {
    root = json::parse(*text);
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: not valid JSON: {}", where, e.what()));
  }
  const json model = root.value("model", json::object());
  if (model.value("type", std::string("BPE")) != "BPE") {
    throw Error(fmt::format("{}: model type {}: only BPE tokenizers are written to GGUF", where, model.value("type", std::string())));
  }
  // SentencePiece-style BPE (byte_fallback, "▁" for spaces) is llama.cpp's `llama` vocabulary.
  const bool sentencepiece = model.value("byte_fallback", false);
  std::vector<std::string> merges;
  for (const json& m : model.value("merges", json::array())) {
    merges.push_back(m.is_string() ? m.get<std::string>() : m.at(0).get<std::string>() + " " + m.at(1).get<std::string>());
  }
  const std::string pre = sentencepiece ? "" : pre_tokenizer_name(root, !merges.empty(), where);

  const int64_t n = config.vocab_size;
  std::vector<std::string> tokens(static_cast<size_t>(n));
  std::vector<int64_t> types(static_cast<size_t>(n), token_type_unused);
  for (int64_t i = 0; i < n; ++i) tokens[static_cast<size_t>(i)] = fmt::format("[PAD{}]", i);
  auto place = [&](int64_t id, const std::string& token, int64_t type) {
    if (id < 0 || id >= n) {
      throw Error(fmt::format("{}: token {} has id {}, outside the model's vocabulary of {}", where, quoted(token), id, n));
    }
    tokens[static_cast<size_t>(id)] = token;
    types[static_cast<size_t>(id)] = type;
  };
  const json vocab = model.value("vocab", json::object());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) place(it.value().get<int64_t>(), it.key(), token_type_normal);
  for (const json& added : root.value("added_tokens", json::array())) {
    place(added.at("id").get<int64_t>(), added.at("content").get<std::string>(),
          added.value("special", false) ? token_type_control : token_type_user_defined);
  }

  std::vector<std::pair<std::string, GgufValue>> meta;
  if (sentencepiece) {
    meta = sentencepiece_metadata(root, model, merges, tokens, types, where);
  } else {
    meta = {
        {"tokenizer.ggml.model", GgufValue::of_string("gpt2")},
        {"tokenizer.ggml.pre", GgufValue::of_string(pre)},
        {"tokenizer.ggml.tokens", GgufValue::of_strings(std::move(tokens))},
        {"tokenizer.ggml.token_type", GgufValue::of_int32s(std::move(types))},
        {"tokenizer.ggml.merges", GgufValue::of_strings(std::move(merges))},
    };
  }
  if (config.bos_token_id >= 0) meta.emplace_back("tokenizer.ggml.bos_token_id", GgufValue::of_uint32(static_cast<uint32_t>(config.bos_token_id)));
  if (!config.eos_token_ids.empty()) {
    meta.emplace_back("tokenizer.ggml.eos_token_id", GgufValue::of_uint32(static_cast<uint32_t>(config.eos_token_ids[0])));
  }
  if (config.eos_token_ids.size() > 1) {
    meta.emplace_back("tokenizer.ggml.eot_token_id", GgufValue::of_uint32(static_cast<uint32_t>(config.eos_token_ids[1])));
  }
  // Our BPE tokenizer adds no BOS; llama.cpp's llama-bpe pre-tokenizer would.
  meta.emplace_back("tokenizer.ggml.add_bos_token", GgufValue::of_bool(false));
  const fs::path config_path = fs::path(model_dir) / "tokenizer_config.json";
  if (fs::exists(config_path)) {
    const json tokenizer_config = read_json_file(config_path);
    if (tokenizer_config.contains("chat_template") && tokenizer_config["chat_template"].is_string()) {
      meta.emplace_back("tokenizer.chat_template", GgufValue::of_string(tokenizer_config["chat_template"].get<std::string>()));
    }
  }
  meta.emplace_back("tokenizer.huggingface.json", GgufValue::of_string(*text));
  return meta;
}

bool write_gguf_tokenizer_files(const GgufFile& file, const std::string& out_dir) {
  const std::string model = file.find_string("tokenizer.ggml.model").value_or("no_vocab");
  if (model == "no_vocab" || model == "none") return false;
  std::string tokenizer_json;
  if (const auto embedded = file.find_string("tokenizer.huggingface.json")) {
    tokenizer_json = *embedded;
  } else {
    tokenizer_json = tokenizer_json_from_gguf(file);  // gpt2 or llama (SentencePiece); others are an Error
  }
  write_file_atomic(out_dir + "/tokenizer.json", tokenizer_json);

  ordered_json config = {{"tokenizer_class", "PreTrainedTokenizerFast"}, {"clean_up_tokenization_spaces", false}};
  const std::vector<std::string> tokens = file.get_string_array("tokenizer.ggml.tokens");
  for (const auto& [key, field] : {std::pair{"tokenizer.ggml.bos_token_id", "bos_token"}, {"tokenizer.ggml.eos_token_id", "eos_token"}}) {
    const auto id = file.find_int(key);
    if (id && *id >= 0 && static_cast<size_t>(*id) < tokens.size()) config[field] = tokens[static_cast<size_t>(*id)];
  }
  if (const auto chat_template = file.find_string("tokenizer.chat_template")) config["chat_template"] = *chat_template;
  write_json(fs::path(out_dir) / "tokenizer_config.json", config);
  return true;
}

}  // namespace tandem
