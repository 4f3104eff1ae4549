// Reading tokenizer.json into a BpeTokenizer::State. Every field that changes what
// encode() or decode() produce is either implemented or rejected with an Error that
// names the file, the field and the value.
#include "actor/bpe_tokenizer_json.h"

#include "actor/bpe_tokenizer_state.h"
#include "actor/byte_level.h"
#include "actor/unicode_text.h"
#include "core/error.h"
#include "core/files.h"
#include "core/text.h"

#include <cerrno>
#include <cstring>

namespace tandem {

using nlohmann::json;

void JsonReader::fail(const std::string& what) const { throw Error(fmt::format("{}: {}", where_, what)); }

void JsonReader::unsupported(const std::string& field, const std::string& what) const {
  fail(fmt::format("{} {}: tandem reads BPE tokenizers, byte-level (Qwen2/3, Llama-3, GPT-2) or SentencePiece-style "
                   "(Llama-2, Mistral), and does not support this",
                   field, what));
}

const json& JsonReader::field(const json& object, const char* key, const std::string& name) const {
  auto it = object.find(key);
  if (it == object.end()) fail(fmt::format("{} is missing", name));
  return *it;
}

bool JsonReader::flag(const json& object, const char* key, bool fallback, const std::string& name) const {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) fail(fmt::format("{}.{} is not true or false", name, key));
  return it->get<bool>();
}

std::string JsonReader::string_field(const json& object, const char* key, const std::string& name) const {
  const json& value = field(object, key, name + "." + key);
  if (!value.is_string()) fail(fmt::format("{}.{} is not a string", name, key));
  return value.get<std::string>();
}

std::string JsonReader::type_of(const json& object, const std::string& name) const {
  if (!object.is_object()) fail(fmt::format("{} is not a JSON object", name));
  return string_field(object, "type", name);
}

std::string JsonReader::string_pattern(const json& step, const std::string& name) const {
  const json& pattern = field(step, "pattern", name + ".pattern");
  if (pattern.is_object() && pattern.contains("Regex")) unsupported(name + ".pattern", "is a regex (a literal String is supported)");
  if (!pattern.is_object() || !pattern.contains("String") || !pattern["String"].is_string() ||
      pattern["String"].get_ref<const std::string&>().empty()) {
    fail(fmt::format("{}.pattern is {}, not {{\"String\": \"...\"}}", name, pattern.dump()));
  }
  return pattern["String"].get<std::string>();
}

namespace {

// Ids beyond this are a corrupt file, not a vocabulary (the largest real ones are ~256k).
constexpr int64_t kMaxTokenId = 1 << 24;

const std::string kMeta = "\xE2\x96\x81";  // "▁", SentencePiece's space

// Whether a step (or a Sequence of them) is ByteLevel: then the file is byte-level BPE.
bool has_byte_level(const json& step) {
  if (!step.is_object()) return false;
  auto type = step.find("type");
  if (type == step.end() || !type->is_string()) return false;
  if (*type == "ByteLevel") return true;
  for (const char* list : {"pretokenizers", "decoders"}) {
    auto it = step.find(list);
    if (*type == "Sequence" && it != step.end() && it->is_array()) {
      for (const json& inner : *it) {
        if (has_byte_level(inner)) return true;
      }
    }
  }
  return false;
}

class Loader {
 public:
  Loader(const std::string& where, BpeTokenizer::State& state, const std::vector<float>* scores)
      : in_(where), state_(state), scores_(scores) {}

  void load(const json& root) {
    if (!root.is_object()) in_.fail("the top level is not a JSON object");
    state_.path = in_.where();
    if (root.contains("truncation") && !root["truncation"].is_null()) {
      in_.unsupported("truncation", "is set; encode() returns every token (truncate at the call site)");
    }
    auto part = [&](const char* key) { return root.contains(key) ? root[key] : json(); };
    // Byte-level BPE has a ByteLevel pre-tokenizer or decoder; every other BPE file is read
    // as SentencePiece-style (characters as symbols, byte fallback or an unknown token).
    state_.char_level = !has_byte_level(part("pre_tokenizer")) && !has_byte_level(part("decoder"));
    // post_processor is not read on purpose: encode() is HF's add_special_tokens=False.
    load_model(in_.field(root, "model", "model"));
    load_added_tokens(root);
    if (state_.char_level) {
      state_.spm_normalizer = read_spm_normalizer(in_, part("normalizer"));
      state_.has_metaspace = read_spm_pre_tokenizer(in_, part("pre_tokenizer"), state_.metaspace);
      state_.spm_decoder = read_spm_decoder(in_, part("decoder"));
      for (AddedToken& token : normalized_tokens_) token.content = spm_normalize(state_.spm_normalizer, token.content);
      state_.normalized_added = AddedTokenMatcher(std::move(normalized_tokens_));
      return;
    }
    load_normalizer(part("normalizer"));
    load_pre_tokenizer(part("pre_tokenizer"));
    load_decoder(part("decoder"));
  }

 private:
  int32_t token_id(const json& value, const std::string& where) const {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > kMaxTokenId) {
      in_.fail(fmt::format("{} is {}, not a token id (an integer in [0, {}])", where, value.dump(), kMaxTokenId));
    }
    return static_cast<int32_t>(value.get<int64_t>());
  }

  // Records what `id` decodes from. `key` is the token as the file spells it.
  void set_id_bytes(int32_t id, const std::string& key) {
    if (static_cast<size_t>(id) >= state_.id_bytes.size()) {
      state_.id_bytes.resize(static_cast<size_t>(id) + 1);
      state_.id_known.resize(static_cast<size_t>(id) + 1, 0);
    }
    std::optional<std::string> bytes = state_.char_level ? std::nullopt : byte_level::decode(key);
    state_.id_bytes[id] = bytes ? std::move(*bytes) : key;
    state_.id_known[id] = 1;
    state_.vocab_size = std::max(state_.vocab_size, id + 1);
  }

  int32_t vocab_id(const std::string& key) const {
    if (state_.char_level) return state_.model.id_of(key);
    std::optional<std::string> bytes = byte_level::decode(key);
    if (bytes) return state_.model.id_of(*bytes);
    auto it = state_.unmapped_vocab_ids.find(key);
    return it == state_.unmapped_vocab_ids.end() ? -1 : it->second;
  }

  void load_model(const json& model) {
    if (!model.is_object()) in_.fail("model is not a JSON object");
    // Old files (GPT-2's) leave out the type; HF then recognises BPE by its fields.
    if (model.contains("type")) {
      std::string type = in_.string_field(model, "type", "model");
      if (type != "BPE") in_.unsupported("model.type", tandem::quoted(type));
    }
    if (model.contains("dropout") && !model["dropout"].is_null() &&
        !(model["dropout"].is_number() && model["dropout"].get<double>() == 0.0)) {
      in_.unsupported("model.dropout", fmt::format("is {} (BPE dropout merges at random)", model["dropout"].dump()));
    }
    for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      if (model.contains(affix) && !model[affix].is_null() && model[affix] != "") {
        in_.unsupported(fmt::format("model.{}", affix), fmt::format("is {}", model[affix].dump()));
      }
    }
    bool byte_fallback = in_.flag(model, "byte_fallback", false, "model");
    if (byte_fallback && !state_.char_level) {
      in_.unsupported("model.byte_fallback", "is true with a ByteLevel pre-tokenizer or decoder");
    }
    state_.model.set_ignore_merges(in_.flag(model, "ignore_merges", false, "model"));

    const json& vocab = in_.field(model, "vocab", "model.vocab");
    if (!vocab.is_object()) in_.fail("model.vocab is not a JSON object of token -> id");
    std::vector<const std::string*> key_of_id;
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      int32_t id = token_id(it.value(), fmt::format("model.vocab[{}]", tandem::quoted(it.key())));
      if (static_cast<size_t>(id) >= key_of_id.size()) key_of_id.resize(static_cast<size_t>(id) + 1, nullptr);
      if (key_of_id[id]) in_.fail(fmt::format("model.vocab gives id {} to both {} and {}", id, tandem::quoted(*key_of_id[id]), tandem::quoted(it.key())));
      key_of_id[id] = &it.key();
      std::optional<std::string> bytes = state_.char_level ? std::optional<std::string>(it.key()) : byte_level::decode(it.key());
      if (bytes) state_.model.add_token(std::move(*bytes), id);
      else state_.unmapped_vocab_ids.emplace(it.key(), id);
      set_id_bytes(id, it.key());
    }
    if (state_.char_level) {
      load_char_alphabet(model, byte_fallback);
      state_.spm_cut_before_meta = state_.model.id_of(kMeta) >= 0;
      for (auto it = vocab.begin(); it != vocab.end() && state_.spm_cut_before_meta; ++it) {
        const std::string& key = it.key();
        for (size_t at = key.find(kMeta, 1); at != std::string::npos; at = key.find(kMeta, at + 1)) {
          if (at < kMeta.size() || key.compare(at - kMeta.size(), kMeta.size(), kMeta) != 0) {
            state_.spm_cut_before_meta = false;
            break;
          }
        }
      }
    } else {
      int missing = state_.model.find_missing_byte();
      if (missing >= 0) {
        in_.fail(fmt::format("model.vocab has no token for byte 0x{:02X} (spelled {}); a byte-level vocabulary needs all 256", missing,
                             tandem::quoted(byte_level::encode(std::string(1, static_cast<char>(missing))))));
      }
    }
    if (scores_) {
      if (scores_->size() < state_.id_bytes.size()) in_.fail(fmt::format("{} scores for {} tokens", scores_->size(), state_.id_bytes.size()));
      std::vector<std::string> spellings(state_.id_bytes.size());
      for (size_t id = 0; id < spellings.size(); ++id) {
        if (key_of_id.size() > id && key_of_id[id]) spellings[id] = *key_of_id[id];
      }
      state_.model.add_merges_from_scores(spellings, *scores_);
    } else {
      load_merges(in_.field(model, "merges", "model.merges"));
    }
    state_.model.finish_merges();
  }

  void load_char_alphabet(const json& model, bool byte_fallback) {
    int32_t unk_id = -1;
    if (model.contains("unk_token") && !model["unk_token"].is_null()) {
      std::string unk = in_.string_field(model, "unk_token", "model");
      unk_id = state_.model.id_of(unk);
      // HF's BPE errors out too (UnkTokenOutOfVocabulary) when it needs it.
      if (unk_id < 0) in_.fail(fmt::format("model.unk_token {} is not in model.vocab", tandem::quoted(unk)));
    }
    state_.model.set_char_alphabet(byte_fallback, unk_id, in_.flag(model, "fuse_unk", false, "model"));
  }

  void load_merges(const json& merges) {
    if (!merges.is_array()) in_.fail("model.merges is not a JSON array");
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      const json& merge = merges[rank];
      std::string where = fmt::format("model.merges[{}]", rank);
      std::string left, right;
      if (merge.is_string()) {  // the older "a b" spelling
        const std::string& line = merge.get_ref<const std::string&>();
        size_t space = line.find(' ');
        if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
          in_.fail(fmt::format("{} is {}, not two tokens separated by one space", where, tandem::quoted(line)));
        }
        left = line.substr(0, space);
        right = line.substr(space + 1);
      } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
        left = merge[0].get<std::string>();
        right = merge[1].get<std::string>();
      } else {
        in_.fail(fmt::format("{} is {}, neither \"a b\" nor [\"a\", \"b\"]", where, merge.dump()));
      }
      int32_t left_id = vocab_id(left), right_id = vocab_id(right), merged_id = vocab_id(left + right);
      for (auto [id, token] : {std::pair{left_id, &left}, {right_id, &right}}) {
        if (id < 0) in_.fail(fmt::format("{} merges {} and {}, but {} is not in model.vocab", where, tandem::quoted(left), tandem::quoted(right), tandem::quoted(*token)));
      }
      if (merged_id < 0) {
        in_.fail(fmt::format("{} merges {} and {}, but the result {} is not in model.vocab", where, tandem::quoted(left), tandem::quoted(right),
                             tandem::quoted(left + right)));
      }
      state_.model.add_merge(left_id, right_id, static_cast<int32_t>(rank), merged_id);
    }
  }

  void load_added_tokens(const json& root) {
    if (!root.contains("added_tokens") || root["added_tokens"].is_null()) return;
    const json& list = root["added_tokens"];
    if (!list.is_array()) in_.fail("added_tokens is not a JSON array");
    std::vector<AddedToken> raw, normalized;
    for (size_t i = 0; i < list.size(); ++i) {
      std::string where = fmt::format("added_tokens[{}]", i);
      const json& entry = list[i];
      if (!entry.is_object()) in_.fail(fmt::format("{} is not a JSON object", where));
      AddedToken token;
      token.id = token_id(in_.field(entry, "id", where + ".id"), where + ".id");
      token.content = in_.string_field(entry, "content", where);
      if (token.content.empty()) in_.fail(fmt::format("{}.content is empty", where));
      token.special = in_.flag(entry, "special", false, where);
      token.single_word = in_.flag(entry, "single_word", false, where);
      token.lstrip = in_.flag(entry, "lstrip", false, where);
      token.rstrip = in_.flag(entry, "rstrip", false, where);
      token.normalized = in_.flag(entry, "normalized", !token.special, where);  // HF's default
      set_id_bytes(token.id, token.content);
      state_.added_ids[token.content] = token.id;
      (token.normalized ? normalized : raw).push_back(std::move(token));
    }
    state_.raw_added = AddedTokenMatcher(std::move(raw));
    normalized_tokens_ = std::move(normalized);  // their contents are normalised once the normaliser is known
  }

  void load_normalizer(const json& normalizer) {
    if (!normalizer.is_null()) {
      std::string type = in_.type_of(normalizer, "normalizer");
      if (type == "NFC") {
        state_.nfc = true;
      } else if (type == "Sequence") {
        const json& list = in_.field(normalizer, "normalizers", "normalizer.normalizers");
        if (!list.is_array()) in_.fail("normalizer.normalizers is not a JSON array");
        for (size_t i = 0; i < list.size(); ++i) {
          std::string where = fmt::format("normalizer.normalizers[{}]", i);
          std::string inner = in_.type_of(list[i], where);
          if (inner != "NFC") in_.unsupported(where + ".type", tandem::quoted(inner));
          state_.nfc = true;
        }
      } else {
        in_.unsupported("normalizer.type", tandem::quoted(type));
      }
    }
    if (state_.nfc) {
      for (AddedToken& token : normalized_tokens_) token.content = unicode::nfc(token.content);
    }
    state_.normalized_added = AddedTokenMatcher(std::move(normalized_tokens_));
  }

  // Adds the steps of one pre-tokenizer; the ByteLevel one must come last, since any
  // step after it would see the byte alphabet instead of the text.
  void add_pre_tokenizer(const json& step, const std::string& where) {
    if (saw_byte_level_) in_.fail(fmt::format("{} comes after the ByteLevel pre-tokenizer, which must be the last step", where));
    std::string type = in_.type_of(step, where);
    if (type == "Sequence") {
      const json& list = in_.field(step, "pretokenizers", where + ".pretokenizers");
      if (!list.is_array()) in_.fail(fmt::format("{}.pretokenizers is not a JSON array", where));
      for (size_t i = 0; i < list.size(); ++i) add_pre_tokenizer(list[i], fmt::format("{}.pretokenizers[{}]", where, i));
    } else if (type == "ByteLevel") {
      in_.field(step, "add_prefix_space", where + ".add_prefix_space");  // HF has no default for it either
      if (in_.flag(step, "add_prefix_space", false, where)) state_.pre_tokenizer.add_prefix_space();
      if (in_.flag(step, "use_regex", true, where)) {
        state_.pre_tokenizer.add_split(RegexSplit(kGpt2SplitPattern, false, SplitBehavior::isolated, in_.where() + ": " + where));
      }
      saw_byte_level_ = true;
    } else if (type == "Split") {
      const json& pattern = in_.field(step, "pattern", where + ".pattern");
      bool literal = pattern.is_object() && pattern.contains("String");
      const char* kind = literal ? "String" : "Regex";
      if (!pattern.is_object() || !pattern.contains(kind) || !pattern[kind].is_string()) {
        in_.fail(fmt::format("{}.pattern is {}, neither {{\"Regex\": ...}} nor {{\"String\": ...}}", where, pattern.dump()));
      }
      std::string behavior = in_.string_field(step, "behavior", where);
      if (behavior != "Isolated" && behavior != "Removed") in_.unsupported(where + ".behavior", tandem::quoted(behavior));
      if (in_.flag(step, "invert", false, where)) in_.unsupported(where + ".invert", "is true");
      state_.pre_tokenizer.add_split(RegexSplit(pattern[kind].get<std::string>(), literal,
                                                behavior == "Isolated" ? SplitBehavior::isolated : SplitBehavior::removed,
                                                in_.where() + ": " + where + ".pattern"));
    } else {
      in_.unsupported(where + ".type", tandem::quoted(type));
    }
  }

  void load_pre_tokenizer(const json& pre_tokenizer) {
    if (pre_tokenizer.is_null()) in_.unsupported("pre_tokenizer", "is null (byte-level BPE has a ByteLevel pre-tokenizer)");
    add_pre_tokenizer(pre_tokenizer, "pre_tokenizer");
    if (!saw_byte_level_) in_.unsupported("pre_tokenizer", "has no ByteLevel step (byte-level BPE has one)");
  }

  void load_decoder(const json& decoder) {
    if (decoder.is_null()) in_.unsupported("decoder", "is null (byte-level BPE decodes with ByteLevel)");
    std::string type = in_.type_of(decoder, "decoder");
    if (type != "ByteLevel") in_.unsupported("decoder.type", tandem::quoted(type));
  }

  JsonReader in_;
  BpeTokenizer::State& state_;
  const std::vector<float>* scores_;
  std::vector<AddedToken> normalized_tokens_;
  bool saw_byte_level_ = false;
};

}  // namespace

std::unique_ptr<BpeTokenizer::State> load_bpe_tokenizer_state(const json& root, const std::string& where,
                                                              const std::vector<float>* scores) {
  auto state = std::make_unique<BpeTokenizer::State>();
  Loader(where, *state, scores).load(root);
  return state;
}

std::unique_ptr<BpeTokenizer::State> load_bpe_tokenizer_state(const std::string& path) {
  JsonReader in(path);
  std::optional<std::string> text = read_file(path);
  if (!text) in.fail(fmt::format("cannot read the file: {}", std::strerror(errno)));
  json root;
  try {
    root = json::parse(*text);
  } catch (const json::exception& e) {
    in.fail(fmt::format("not valid JSON: {}", e.what()));
  }
  return load_bpe_tokenizer_state(root, path);
}

}  // namespace tandem
