#include "actor/bpe_pretokenize.h"

#include "actor/unicode_text.h"
#include "core/error.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace tandem {

const char* const kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

// HF compiles patterns with Oniguruma. Where PCRE2 reads a shorthand differently, the
// pattern is rewritten: Oniguruma's \s is the White_Space property, while PCRE2's also
// takes U+180E. Shorthands with no exact PCRE2 spelling are refused, not approximated.
std::string oniguruma_to_pcre2(const std::string& pattern, const std::string& where) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '\\' || i + 1 == pattern.size()) {
      out += pattern[i];
      continue;
    }
    char escaped = pattern[++i];
    switch (escaped) {
      case 's': out += "\\p{White_Space}"; break;
      case 'S': out += "\\P{White_Space}"; break;
      case 'w': case 'W': case 'b': case 'B': case 'h': case 'H':
        throw Error(fmt::format("{}: the split pattern uses \\{}, which Oniguruma (Hugging Face's regex engine) and PCRE2 "
                                "read differently; tandem does not support it: {}",
                                where, escaped, pattern));
      default: out += '\\'; out += escaped;  // \p{..}, \x{..}, \r, \\ ...: the same in both
    }
  }
  return out;
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
};

}  // namespace

struct RegexSplit::Compiled {
  pcre2_code* code = nullptr;
  bool jit = false;
  std::string pattern;
  ~Compiled() { pcre2_code_free(code); }
};

RegexSplit::RegexSplit(const std::string& pattern, bool literal, SplitBehavior behavior, const std::string& where)
    : behavior_(behavior) {
  auto compiled = std::make_shared<Compiled>();
  compiled->pattern = pattern;
  std::string source = literal ? pattern : oniguruma_to_pcre2(pattern, where);
  int error = 0;
  PCRE2_SIZE offset = 0;
  uint32_t options = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0);
  compiled->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(source.data()), source.size(), options, &error, &offset, nullptr);
  if (!compiled->code) {
    throw Error(fmt::format("{}: the split pattern does not compile (PCRE2: {} at offset {}): {}", where,
                            pcre2_message(error), offset, source));
  }
  // JIT is several times faster; without it (an unsupported CPU) the interpreter is used.
  compiled->jit = pcre2_jit_compile(compiled->code, PCRE2_JIT_COMPLETE) == 0;
  compiled_ = std::move(compiled);
}

void RegexSplit::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  if (text.empty()) return;
  pcre2_code* code = compiled_->code;
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> match(pcre2_match_data_create_from_pattern(code, nullptr));
  TANDEM_CHECK(match != nullptr, "out of memory for PCRE2 match data");
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t search = 0;  // where the next match may start
  size_t kept = 0;    // end of the text already handed out
  while (search < text.size()) {
    // The text was validated as UTF-8 once; re-checking it per match would be quadratic.
    int rc = compiled_->jit ? pcre2_jit_match(code, subject, text.size(), search, 0, match.get(), nullptr)
                            : pcre2_match(code, subject, text.size(), search, PCRE2_NO_UTF_CHECK, match.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      throw Error(fmt::format("splitting text with the pattern {} failed: {}", compiled_->pattern, pcre2_message(rc)));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
    size_t start = ovector[0], end = ovector[1];
    if (start == end) {  // an empty match splits nothing; step over one character
      size_t bad = 0;
      size_t length = unicode::utf8_sequence_length(text, start, &bad);
      search = start + (length ? length : bad);
      continue;
    }
    if (start > kept) pieces.push_back(text.substr(kept, start - kept));
    if (behavior_ == SplitBehavior::isolated) pieces.push_back(text.substr(start, end - start));
    kept = search = end;
  }
  if (kept < text.size()) pieces.push_back(text.substr(kept));
}

void PreTokenizer::add_split(RegexSplit split) { steps_.push_back({std::make_shared<RegexSplit>(std::move(split))}); }

void PreTokenizer::add_prefix_space() { steps_.push_back({nullptr}); }

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& words, std::deque<std::string>& storage) const {
  if (text.empty()) return;
  if (steps_.size() == 1 && steps_[0].split) {  // the usual shape: one regex, straight into `words`
    steps_[0].split->split(text, words);
    return;
  }
  std::vector<std::string_view> current{text}, next;
  for (const Step& step : steps_) {
    next.clear();
    for (std::string_view piece : current) {
      if (step.split) {
        step.split->split(piece, next);
      } else if (!piece.empty() && piece[0] != ' ') {
        storage.push_back(" " + std::string(piece));
        next.push_back(storage.back());
      } else {
        next.push_back(piece);
      }
    }
    current.swap(next);
  }
  words.insert(words.end(), current.begin(), current.end());
}

}  // namespace tandem
