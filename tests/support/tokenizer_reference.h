// Test-only: comparing a tandem Tokenizer with Hugging Face's JS tokenizers
// (tests/support/tokenizer_reference.mjs, run with node) id by id, over a fixed corpus plus fresh
// random texts. Used by test_bpe_tokenizer_reference.cpp (byte-level files) and
// test_spm_tokenizer_reference.cpp (SentencePiece-style files).
//
// The assets live in $TANDEM_TOKENIZER_ASSETS, by default <source>/build/test-assets,
// where scripts/fetch_tokenizer_assets.sh puts them (scripts/test.sh runs it). Missing
// assets fail the test with the command that fetches them; TANDEM_OFFLINE=1 skips instead.
#pragma once

#include "actor/tokenizer.h"
#include "core/files.h"
#include "core/text.h"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace tandem::testing {

using Ids = std::vector<int32_t>;

inline std::string assets_dir() {
  const char* env = std::getenv("TANDEM_TOKENIZER_ASSETS");
  return env && *env ? env : std::string(TANDEM_SOURCE_DIR) + "/build/test-assets";
}
inline std::string node_modules() { return assets_dir() + "/node/node_modules"; }

// True when the reference can run on `tokenizer_dir`. Otherwise fails the test saying how
// to fetch the assets, or with TANDEM_OFFLINE=1 reports the skip; never passes silently.
inline bool reference_ready(const std::string& tokenizer_dir) {
  namespace fs = std::filesystem;
  std::string missing;
  if (!fs::exists(tokenizer_dir + "/tokenizer.json")) missing = tokenizer_dir + "/tokenizer.json is missing";
  else if (!fs::exists(node_modules() + "/@huggingface/tokenizers/package.json")) missing = node_modules() + "/@huggingface/tokenizers is missing";
  else if (std::system("node --version > /dev/null 2>&1") != 0) missing = "node is not on PATH (scripts/install_deps.sh installs it)";
  if (missing.empty()) return true;
  std::string message = missing +
                        ": run scripts/fetch_tokenizer_assets.sh (needs npm and the network) or point TANDEM_TOKENIZER_ASSETS "
                        "at a copy; TANDEM_OFFLINE=1 skips this comparison";
  const char* offline = std::getenv("TANDEM_OFFLINE");
  if (offline && std::string(offline) == "1") {
    std::fprintf(stderr, "%s: skipped (TANDEM_OFFLINE=1): %s\n", doctest::getContextOptions()->currentTest->m_name, message.c_str());
    return false;
  }
  FAIL(message);
  return false;
}

// Runs the JS reference on `requests` (see tests/support/tokenizer_reference.mjs) and returns its answers.
inline std::vector<nlohmann::json> run_reference(const std::string& tokenizer_dir, const std::vector<nlohmann::json>& requests) {
  TempDir tmp("tandem-tokref-");
  std::string in = tmp.path() + "/requests.jsonl", out = tmp.path() + "/answers.jsonl";
  {
    std::ofstream file(in, std::ios::binary);
    for (const nlohmann::json& request : requests) file << request.dump() << "\n";
  }
  std::string command = fmt::format("node '{}/tests/support/tokenizer_reference.mjs' '{}' '{}' < '{}' > '{}'", TANDEM_SOURCE_DIR,
                                    node_modules(), tokenizer_dir, in, out);
  REQUIRE_MESSAGE(std::system(command.c_str()) == 0, "the JS reference failed: " << command);
  std::vector<nlohmann::json> answers;
  std::istringstream lines(*read_file(out));
  for (std::string line; std::getline(lines, line);) answers.push_back(nlohmann::json::parse(line));
  REQUIRE(answers.size() == requests.size());
  return answers;
}

inline std::string utf8(char32_t c) {
  std::string out;
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
  return out;
}

// Texts chosen for the cases where tokenizers differ: whitespace runs before words
// (`\s+(?!\S)`), leading spaces, digits, contractions, NFC, scripts without spaces,
// characters few vocabularies have (byte fallback), added tokens of Qwen and Llama.
inline const std::vector<std::string>& fixed_texts() {
  static const std::vector<std::string> texts = {
      "",
      "Hello world",
      " Hello world",
      "  Hello  world  ",
      "The quick brown fox jumps over the lazy dog.",
      "It's, don't, they're, we've, I'm, you'll, he'd",
      "IT'S DON'T THEY'RE WE'VE I'M YOU'LL HE'D 'S",
      "''s 's' a's  'll",
      "1234567890 3.14159 1,000,000 -42 0x1F 2024-01-01 ١٢٣ १२३",
      "def f(x):\n\treturn x  + 1\n\n\n    # comment   \n",
      "int main() {\n    return 0;   \n}\n",
      "  \t  \n\n   x",
      "a   ",
      "   ",
      " ",
      "\n",
      "\n\n x",
      "\r\n\r\n  \r\n",
      "x\u00a0\u00a0y \u3000z",
      "a\u180eb \u0085c\u2028d\u2029 \u1680e\u200b f",  // White_Space or not: U+180E and U+200B are not
      "if (a && b) { c->d[i] = \"e\"; } // f\n\t\t}\n",
      "你好，世界！这是一个测试。",
      "こんにちは、世界。カタカナ",
      "안녕하세요 세계",
      "👋🌍 🇺🇸 👨‍👩‍👧‍👦 👍🏽 ❤️",
      "e\u0301 cafe\u0301 A\u030A \u212B \u2126",
      "\u1100\u1161\u11A8 \u0958 \uFB01",
      "مرحبا بالعالم",
      "नमस्ते दुनिया",
      "สวัสดีชาวโลก",
      "Привет, мир! Γειά σου κόσμε",
      "\U0001F999 \U0001D11E \u2F00 \uA9C1 \U00010348 \u0F3A",  // rare characters: byte fallback in SentencePiece vocabularies
      "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
      "<|im_start|><|im_end|><|endoftext|><|endoftext|>",
      "<|im_end <|im_start|x <|",
      "<think>\n\n</think>\n\nThe answer is 42.",
      "<s>[INST] Hi [/INST] Hello</s><s>[INST]  again</s>",
      "<s> <s>  x</s>\n</s><unk>",
      "x<s", "<0x0A> <0x41>",
      "x = 5 # 计算 😀\n",
  };
  return texts;
}

// One random piece of text; `specials` are the added tokens (and parts of them) to mix in.
inline std::string random_piece(std::mt19937_64& rng, const std::vector<std::string>& specials) {
  static const char* const kWords[] = {"the", "The", "of", "and", "tokenizer", "Hello", "WORLD", "running", "isn't",
                                       "we'll", "you'RE", "x", "a", "I", "GPU", "foo_bar", "camelCase", "naïve", "résumé"};
  // Not U+FEFF, nor 'ſ' or 'K' (Kelvin) after an apostrophe: there the JS reference departs
  // from Hugging Face's Oniguruma (it counts U+FEFF as \s, and folds case ASCII-only).
  static const char* const kSpaces[] = {" ", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\t\t", " \t ",
                                        "\u00a0", "\u3000", "\u0085", "\u180e", "\u2028", "\u1680", "\u2009", "\u200b"};
  static const char* const kPunct[] = {".", ",", "!?", "...", "(", ")", "{", "}", "==", "->", "\"", "'", "'s", "'LL",
                                       "'re", "#", "//", "/*", "$", "%", "&&", ";", ":", "-", "_", "@"};
  static const char* const kEmoji[] = {"👋", "🌍", "🇺🇸", "👨‍👩‍👧", "👍🏽", "❤️", "🤖", "✅"};
  auto pick = [&](auto& list) { return std::string(list[rng() % std::size(list)]); };
  auto in = [&](char32_t low, char32_t high) { return static_cast<char32_t>(low + rng() % (high - low + 1)); };
  std::string out;
  switch (rng() % 13) {
    case 0: case 1: return pick(kWords);
    case 2: return pick(kSpaces);
    case 3: return pick(kPunct);
    case 4: for (size_t n = 1 + rng() % 7; n > 0; --n) out += static_cast<char>('0' + rng() % 10); return out;
    case 5: for (size_t n = 1 + rng() % 5; n > 0; --n) out += utf8(in(0x4E00, 0x9FA5)); return out;  // CJK ideographs
    case 6: for (size_t n = 1 + rng() % 4; n > 0; --n) out += utf8(rng() % 2 ? in(0x3041, 0x3096) : in(0xAC00, 0xD7A3)); return out;
    case 7: return rng() % 2 ? pick(kEmoji) : utf8(in(0x1F600, 0x1F64F));
    case 8: return utf8(in('a', 'z')) + utf8(in(0x0300, 0x036F));  // a base and a combining mark: NFC composes some
    case 9:  // Arabic letters with diacritics, or Devanagari with vowel signs and virama
      for (size_t n = 1 + rng() % 4; n > 0; --n) {
        out += rng() % 2 ? utf8(in(0x0621, 0x064A)) + (rng() % 3 ? "" : utf8(in(0x064B, 0x0652)))
                         : utf8(in(0x0915, 0x0939)) + (rng() % 2 ? utf8(in(0x093E, 0x094D)) : "");
      }
      return out;
    case 10: return specials.empty() ? std::string("<") : specials[rng() % specials.size()];
    case 11: return utf8(in(0x0410, 0x044F)) + utf8(in(0x03B1, 0x03C9));  // Cyrillic, Greek
    default: {  // letters of old, stable blocks that few vocabularies have (byte fallback in SentencePiece ones)
      static const std::pair<char32_t, char32_t> kBlocks[] = {{0x05D0, 0x05EA}, {0x10D0, 0x10FA}, {0x1200, 0x1248}, {0x13A0, 0x13F4},
                                                              {0x16A0, 0x16EA}, {0x10330, 0x10349}, {0x1D400, 0x1D454}, {0x20000, 0x2A6D6}};
      const auto& block = kBlocks[rng() % std::size(kBlocks)];
      for (size_t n = 1 + rng() % 3; n > 0; --n) out += utf8(in(block.first, block.second));
      return out;
    }
  }
}

// The fixed texts, 400 random ones and one long one (the cache and long-input paths).
inline std::vector<std::string> corpus(uint64_t seed, const std::vector<std::string>& specials) {
  std::vector<std::string> texts = fixed_texts();
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 400; ++i) {
    std::string text;
    for (size_t pieces = 1 + rng() % 16; pieces > 0; --pieces) text += random_piece(rng, specials);
    texts.push_back(text);
  }
  std::string long_text;
  while (long_text.size() < 50000) long_text += random_piece(rng, specials);
  texts.push_back(long_text);
  return texts;
}

inline std::string describe_ids(const Tokenizer& tokenizer, const Ids& ids, size_t from) {
  std::string out;
  for (size_t i = from; i < ids.size() && i < from + 4; ++i) out += fmt::format("{}={} ", ids[i], tandem::quoted(tokenizer.decode({ids[i]})));
  return out.empty() ? "(end)" : out;
}

// Encodes every text with both and compares id by id; also decode against the reference
// decoder (where `decode_comparable(ids, reference_text)`, when given, says so), and
// against `roundtrip(text)` when that gives a text (the text as decode should give it back).
inline void compare_encode(const Tokenizer& ours, const std::string& dir, const std::vector<std::string>& texts,
                           const std::function<std::optional<std::string>(const std::string&)>& roundtrip,
                           const std::string& label, uint64_t seed,
                           const std::function<bool(const Ids&, const std::string&)>& decode_comparable = nullptr) {
  std::vector<nlohmann::json> requests;
  for (const std::string& text : texts) requests.push_back({{"encode", text}});
  std::vector<nlohmann::json> answers = run_reference(dir, requests);
  size_t mismatches = 0;
  for (size_t t = 0; t < texts.size(); ++t) {
    Ids expected = answers[t]["ids"].get<Ids>();
    Ids ids = ours.encode(texts[t]);
    if (ids != expected) {
      if (++mismatches <= 3) {
        size_t k = 0;
        while (k < ids.size() && k < expected.size() && ids[k] == expected[k]) ++k;
        FAIL_CHECK(label << " (seed " << seed << "): text " << t << " " << tandem::quoted(texts[t], 300)
                         << " differs from the reference at id " << k << ": ours " << describe_ids(ours, ids, k)
                         << "reference " << describe_ids(ours, expected, k));
      }
      continue;
    }
    std::string decoded = ours.decode(ids), expected_text = answers[t]["text"].get<std::string>();
    if (!decode_comparable || decode_comparable(ids, expected_text)) {
      CHECK_MESSAGE(decoded == expected_text, label << ": decode differs for " << tandem::quoted(texts[t]));
    }
    if (std::optional<std::string> back = roundtrip(texts[t])) {
      CHECK_MESSAGE(decoded == *back, label << ": decode(encode(text)) != text for " << tandem::quoted(texts[t]));
    }
  }
  CHECK_MESSAGE(mismatches == 0, label << ": " << mismatches << " of " << texts.size() << " texts encode differently");
}

// Decodes every id alone, and random id sequences (which split UTF-8 characters), with
// both. Ids are drawn from [low_ids.first, low_ids.second) two times in three (byte tokens),
// else from the whole vocabulary. `comparable(ids, reference_text)` false: not compared
// (where the JS reference is known to depart from HF's Rust one); returns how many were.
inline size_t compare_decode(const Tokenizer& ours, const std::string& dir, uint64_t seed, std::pair<int32_t, int32_t> low_ids,
                             const std::function<bool(const Ids&, const std::string&)>& comparable) {
  std::mt19937_64 rng(seed);
  std::vector<Ids> sequences;
  for (int32_t id = 0; id < ours.vocab_size(); ++id) sequences.push_back({id});
  for (int i = 0; i < 500; ++i) {
    Ids ids(1 + rng() % 12);
    for (int32_t& id : ids) {
      id = static_cast<int32_t>(rng() % 3 ? low_ids.first + static_cast<int32_t>(rng() % static_cast<uint64_t>(low_ids.second - low_ids.first))
                                          : rng() % static_cast<uint64_t>(ours.vocab_size()));
    }
    sequences.push_back(ids);
  }
  std::vector<nlohmann::json> requests;
  for (const Ids& ids : sequences) requests.push_back({{"decode", ids}});
  std::vector<nlohmann::json> answers = run_reference(dir, requests);
  size_t mismatches = 0, compared = 0;
  for (size_t i = 0; i < sequences.size(); ++i) {
    std::string expected = answers[i]["text"].get<std::string>();
    if (!comparable(sequences[i], expected)) continue;
    ++compared;
    std::string ours_text = ours.decode(sequences[i]);
    if (ours_text != expected && ++mismatches <= 3) {
      FAIL_CHECK("decode of " << nlohmann::json(sequences[i]).dump() << ": ours " << tandem::quoted(ours_text) << ", reference "
                              << tandem::quoted(expected));
    }
  }
  CHECK_MESSAGE(mismatches == 0, mismatches << " of " << compared << " id sequences decode differently");
  return compared;
}

}  // namespace tandem::testing
