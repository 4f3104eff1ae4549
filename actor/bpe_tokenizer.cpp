// BpeTokenizer's encode and decode over the tables bpe_tokenizer_json.cpp loads.
#include "actor/bpe_tokenizer.h"

#include "actor/bpe_tokenizer_state.h"
#include "actor/byte_level.h"
#include "actor/unicode_text.h"
#include "core/error.h"

#include <deque>
#include <filesystem>

namespace tandem {

namespace {

using State = BpeTokenizer::State;

// One encode() call: its scratch buffers and its hold (if it got one) on the word cache.
class Encoder {
 public:
  Encoder(const State& state, std::vector<int32_t>& ids)
      : state_(state), ids_(ids), cache_lock_(state.cache_mutex, std::try_to_lock) {}

  // Text between raw added tokens: any bytes. `starts_text`: it begins the whole text.
  void encode_segment(std::string_view text, bool starts_text) {
    if (state_.char_level) {
      encode_char_level(text, starts_text);
      return;
    }
    size_t run = 0;  // start of the current well-formed run
    size_t pos = 0;
    while (pos < text.size()) {
      if (static_cast<unsigned char>(text[pos]) < 0x80) {
        ++pos;
        continue;
      }
      size_t bad = 0;
      size_t length = unicode::utf8_sequence_length(text, pos, &bad);
      if (length > 0) {
        pos += length;
        continue;
      }
      // HF never sees ill-formed UTF-8; each such byte becomes a word of its own.
      encode_well_formed(text.substr(run, pos - run));
      for (size_t i = 0; i < bad; ++i) encode_word(text.substr(pos + i, 1));
      pos += bad;
      run = pos;
    }
    encode_well_formed(text.substr(run));
  }

 private:
  // SentencePiece-style: the normaliser and Metaspace take any bytes (an ill-formed byte is
  // an unknown character, which BPE turns into its <0xNN> token), so the text is not cut
  // at ill-formed bytes as the byte-level path does.
  void encode_char_level(std::string_view text, bool starts_text) {
    std::string normalized = spm_normalize(state_.spm_normalizer, text);
    if (state_.normalized_added.empty()) {
      encode_char_level_piece(normalized, starts_text);
      return;
    }
    std::vector<AddedTokenMatcher::Segment> segments;
    state_.normalized_added.split(normalized, segments);
    for (const auto& segment : segments) {
      if (segment.id >= 0) ids_.push_back(segment.id);
      else encode_char_level_piece(std::string_view(normalized).substr(segment.begin, segment.end - segment.begin),
                                   starts_text && segment.begin == 0);
    }
  }

  void encode_char_level_piece(std::string_view piece, bool starts_text) {
    if (piece.empty()) return;
    words_.clear();
    storage_.clear();
    if (state_.has_metaspace) state_.metaspace.pre_tokenize(piece, starts_text, words_, storage_);
    else words_.push_back(piece);
    for (std::string_view word : words_) {
      if (!state_.spm_cut_before_meta) {
        encode_word(word);
        continue;
      }
      // Cut before each "▁" that follows another character (see State::spm_cut_before_meta).
      static constexpr std::string_view kMeta = "\xE2\x96\x81";
      size_t begin = 0;
      for (size_t at = word.find(kMeta, 1); at != std::string_view::npos; at = word.find(kMeta, at + 1)) {
        if (at >= kMeta.size() && word.substr(at - kMeta.size(), kMeta.size()) == kMeta) continue;
        encode_word(word.substr(begin, at - begin));
        begin = at;
      }
      encode_word(word.substr(begin));
    }
  }

  void encode_well_formed(std::string_view text) {
    if (text.empty()) return;
    if (state_.nfc && unicode::nfc_normalize(text, normalized_)) text = normalized_;
    if (state_.normalized_added.empty()) {
      encode_normalized(text);
      return;
    }
    std::vector<AddedTokenMatcher::Segment> segments;
    state_.normalized_added.split(text, segments);
    for (const auto& segment : segments) {
      if (segment.id >= 0) ids_.push_back(segment.id);
      else encode_normalized(text.substr(segment.begin, segment.end - segment.begin));
    }
  }

  void encode_normalized(std::string_view text) {
    words_.clear();
    storage_.clear();
    state_.pre_tokenizer.split(text, words_, storage_);
    for (std::string_view word : words_) encode_word(word);
  }

  void encode_word(std::string_view word) {
    if (word.size() == 1 || !cache_lock_.owns_lock() || word.size() > State::kCacheMaxWordBytes) {
      state_.model.encode_word(word, ids_);
      return;
    }
    key_.assign(word.data(), word.size());  // reused, so lookups rarely allocate
    auto it = state_.cache.find(key_);
    if (it != state_.cache.end()) {
      ids_.insert(ids_.end(), it->second.begin(), it->second.end());
      return;
    }
    size_t first = ids_.size();
    state_.model.encode_word(word, ids_);
    if (state_.cache.size() >= State::kCacheMaxWords) state_.cache.clear();
    state_.cache.emplace(key_, std::vector<int32_t>(ids_.begin() + static_cast<std::ptrdiff_t>(first), ids_.end()));
  }

  const State& state_;
  std::vector<int32_t>& ids_;
  std::unique_lock<std::mutex> cache_lock_;
  std::string normalized_;
  std::string key_;
  std::vector<std::string_view> words_;
  std::deque<std::string> storage_;
};

}  // namespace

BpeTokenizer::BpeTokenizer(std::unique_ptr<State> state) : state_(std::move(state)) {}
BpeTokenizer::~BpeTokenizer() = default;

std::unique_ptr<BpeTokenizer> BpeTokenizer::from_file(const std::string& tokenizer_json_path) {
  return from_state(load_bpe_tokenizer_state(tokenizer_json_path));
}

std::unique_ptr<BpeTokenizer> BpeTokenizer::from_state(std::unique_ptr<State> state) {
  return std::unique_ptr<BpeTokenizer>(new BpeTokenizer(std::move(state)));
}

std::vector<int32_t> BpeTokenizer::encode(const std::string& text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3);
  Encoder encoder(*state_, ids);
  if (state_->raw_added.empty()) {
    encoder.encode_segment(text, true);
    return ids;
  }
  std::vector<AddedTokenMatcher::Segment> segments;
  state_->raw_added.split(text, segments);
  for (const auto& segment : segments) {
    if (segment.id >= 0) ids.push_back(segment.id);
    else encoder.encode_segment(std::string_view(text).substr(segment.begin, segment.end - segment.begin), segment.begin == 0);
  }
  return ids;
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids) const {
  for (size_t i = 0; i < ids.size(); ++i) {
    int32_t id = ids[i];
    if (id < 0 || id >= state_->vocab_size || !state_->id_known[id]) {
      throw Error(fmt::format("token {} at position {} is outside the vocabulary [0, {}) of {}", id, i, state_->vocab_size,
                              state_->path));
    }
  }
  if (state_->char_level) {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (int32_t id : ids) tokens.push_back(state_->id_bytes[id]);
    return spm_decode(state_->spm_decoder, std::move(tokens));
  }
  std::string bytes;
  for (int32_t id : ids) bytes += state_->id_bytes[id];
  return unicode::utf8_lossy(bytes);
}

int32_t BpeTokenizer::vocab_size() const { return state_->vocab_size; }

std::optional<int32_t> BpeTokenizer::token_to_id(const std::string& token) const {
  if (auto it = state_->added_ids.find(token); it != state_->added_ids.end()) return it->second;
  if (state_->char_level) {
    int32_t id = state_->model.id_of(token);
    if (id >= 0) return id;
    return std::nullopt;
  }
  if (std::optional<std::string> bytes = byte_level::decode(token)) {
    int32_t id = state_->model.id_of(*bytes);
    if (id >= 0) return id;
    return std::nullopt;
  }
  if (auto it = state_->unmapped_vocab_ids.find(token); it != state_->unmapped_vocab_ids.end()) return it->second;
  return std::nullopt;
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& model_dir) {
  return BpeTokenizer::from_file((std::filesystem::path(model_dir) / "tokenizer.json").string());
}

}  // namespace tandem
