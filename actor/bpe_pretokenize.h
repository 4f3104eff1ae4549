// Pre-tokenization: cutting normalised text into the words BPE runs on (private to actor/).
//
// Supports what byte-level tokenizers use: Split by a regex (Qwen2/3 and Llama-3 put
// their own pattern here) with the "Isolated" or "Removed" behaviour, and ByteLevel's
// own GPT-2 regex and add_prefix_space. Regexes run on PCRE2 in UTF + UCP mode, which
// reads the Unicode classes and the `\s+(?!\S)` look-ahead as Hugging Face's
// Oniguruma does; JIT-compiled where the platform has it.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tandem {

// GPT-2's pattern, used by ByteLevel(use_regex=true).
extern const char* const kGpt2SplitPattern;

enum class SplitBehavior { isolated, removed };

class RegexSplit {
 public:
  // `where` names the file and field for the error a bad pattern raises.
  RegexSplit(const std::string& pattern, bool literal, SplitBehavior behavior, const std::string& where);
  // Appends the pieces of `text` (well-formed UTF-8) to `pieces`, as views into it:
  // matches and the text between them (isolated), or only the text between (removed).
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;

 private:
  struct Compiled;
  std::shared_ptr<const Compiled> compiled_;
  SplitBehavior behavior_;
};

// The steps of a pre-tokenizer, applied in order to every piece the previous made.
class PreTokenizer {
 public:
  void add_split(RegexSplit split);
  // ByteLevel(add_prefix_space=true): a piece not starting with a space gets one.
  void add_prefix_space();

  // Cuts `text` into words. Views point into `text` or, for pieces a step rewrote, into
  // `storage`. No step: the whole text is one word.
  void split(std::string_view text, std::vector<std::string_view>& words, std::deque<std::string>& storage) const;

 private:
  struct Step {
    std::shared_ptr<RegexSplit> split;  // null: the prefix-space step
  };
  std::vector<Step> steps_;
};

}  // namespace tandem
