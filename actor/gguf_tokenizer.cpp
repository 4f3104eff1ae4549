#include "actor/gguf_tokenizer.h"

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
  if (model.value("type", std::string("BPE")) != "BPE" || model.value("byte_fallback", false)) {
    throw Error(fmt::format("{}: model type {}{}: only byte-level BPE tokenizers are written to GGUF so far", where,
                            model.value("type", std::string("BPE")), model.value("byte_fallback", false) ? " with byte_fallback" : ""));
  }
  std::vector<std::string> merges;
  for (const json& m : model.value("merges", json::array())) {
    merges.push_back(m.is_string() ? m.get<std::string>() : m.at(0).get<std::string>() + " " + m.at(1).get<std::string>());
  }
  const std::string pre = pre_tokenizer_name(root, !merges.empty(), where);

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

  std::vector<std::pair<std::string, GgufValue>> meta = {
      {"tokenizer.ggml.model", GgufValue::of_string("gpt2")},
      {"tokenizer.ggml.pre", GgufValue::of_string(pre)},
      {"tokenizer.ggml.tokens", GgufValue::of_strings(std::move(tokens))},
      {"tokenizer.ggml.token_type", GgufValue::of_int32s(std::move(types))},
      {"tokenizer.ggml.merges", GgufValue::of_strings(std::move(merges))},
  };
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

// Built as a sorted json, not an ordered_json: inserting 150k vocabulary entries into
// ordered_json's linear map would take quadratic time (~30 s for Qwen's vocabulary).
std::string gguf_gpt2_tokenizer_json(const GgufFile& file) {
  const std::string pre = file.find_string("tokenizer.ggml.pre").value_or("");
  json normalizer = nullptr;
  json pre_tokenizer;
  bool ignore_merges = false;
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  auto split = [&](const char* regex) {
    return json{{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}},
                          byte_level}}};
  };
  if (pre == "qwen2" || pre == "deepseek-r1-qwen") {
    normalizer = {{"type", "NFC"}};
    pre_tokenizer = split(qwen2_regex);
  } else if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") {
    pre_tokenizer = split(llama3_regex);
    ignore_merges = true;  // as Llama-3's tokenizer.json, and llama.cpp for this pre-tokenizer
  } else if (pre == "gpt-2") {
    pre_tokenizer = byte_level;
    pre_tokenizer["use_regex"] = true;
  } else {
    throw Error(fmt::format("{}: tokenizer.ggml.pre {} has no Hugging Face pre-tokenizer known here (known: qwen2, "
                            "llama-bpe, gpt-2); put the model's tokenizer.json beside the .gguf",
                            file.path(), quoted(pre)));
  }
  const std::vector<std::string> tokens = file.get_string_array("tokenizer.ggml.tokens");
  std::vector<int64_t> types = file.find_int_array("tokenizer.ggml.token_type").value_or(std::vector<int64_t>{});
  if (types.empty()) types.assign(tokens.size(), token_type_normal);
  if (types.size() != tokens.size()) {
    throw Error(fmt::format("{}: {} token types for {} tokens", file.path(), types.size(), tokens.size()));
  }
  json vocab = json::object();
  json added = json::array();
  for (size_t id = 0; id < tokens.size(); ++id) {
    const int64_t type = types[id];
    if (type == token_type_normal || type == token_type_byte || type == token_type_unknown) {
      vocab[tokens[id]] = id;
    } else if (type == token_type_control || type == token_type_user_defined) {
      added.push_back({{"id", id},          {"content", tokens[id]}, {"single_word", false}, {"lstrip", false},
                       {"rstrip", false},   {"normalized", false},   {"special", type == token_type_control}});
    }  // UNUSED: padding rows, no token
  }
  json merges = json::array();
  for (const std::string& m : file.find_string_array("tokenizer.ggml.merges").value_or(std::vector<std::string>{})) {
    const size_t space = m.find(' ', 1);  // as llama.cpp splits them
    if (space == std::string::npos) throw Error(fmt::format("{}: merge {} has no space", file.path(), quoted(m)));
    merges.push_back({m.substr(0, space), m.substr(space + 1)});
  }
  json decoder = byte_level;
  const json root = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", normalizer},
      {"pre_tokenizer", pre_tokenizer},
      {"post_processor", nullptr},
      {"decoder", decoder},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", ignore_merges},
        {"vocab", vocab},
        {"merges", merges}}},
  };
  return root.dump(2) + "\n";
}

bool write_gguf_tokenizer_files(const GgufFile& file, const std::string& out_dir) {
  const std::string model = file.find_string("tokenizer.ggml.model").value_or("no_vocab");
  if (model == "no_vocab" || model == "none") return false;
  std::string tokenizer_json;
  if (const auto embedded = file.find_string("tokenizer.huggingface.json")) {
    tokenizer_json = *embedded;
  } else if (model == "gpt2") {
    tokenizer_json = gguf_gpt2_tokenizer_json(file);
  } else if (model == "llama") {
    throw Error(fmt::format("{}: its SentencePiece (tokenizer.ggml.model \"llama\") vocabulary is not read yet; put the "
                            "model's tokenizer.json beside the .gguf",
                            file.path()));
  } else {
    throw Error(fmt::format("{}: tokenizer.ggml.model {} is not supported (supported: gpt2, no_vocab)", file.path(),
                            quoted(model)));
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
