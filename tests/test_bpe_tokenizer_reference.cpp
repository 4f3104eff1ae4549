// The BPE tokenizer against an independent implementation: Qwen3's real tokenizer.json,
// and two variants of it shaped like Llama-3's and GPT-2's files, encoded and decoded
// by both tandem and Hugging Face's JS tokenizers (tests/tokenizer_reference.mjs, run
// with node) over a fixed corpus plus a few hundred fresh random texts, id by id.
//
// The assets live in $TANDEM_TOKENIZER_ASSETS, by default <source>/build/test-assets,
// where scripts/fetch_tokenizer_assets.sh puts them (scripts/test.sh runs it). Missing
// assets fail the test with the command that fetches them; TANDEM_OFFLINE=1 skips instead.
#include "actor/bpe_tokenizer.h"
#include "actor/unicode_text.h"
#include "core/error.h"
#include "core/files.h"
#include "core/text.h"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <thread>

using namespace tandem;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

using Ids = std::vector<int32_t>;

std::string assets_dir() {
  const char* env = std::getenv("TANDEM_TOKENIZER_ASSETS");
  return env && *env ? env : std::string(TANDEM_SOURCE_DIR) + "/build/test-assets";
}
std::string qwen3_dir() { return assets_dir() + "/qwen3"; }
std::string node_modules() { return assets_dir() + "/node/node_modules"; }

// True when the reference can run. Otherwise fails the test saying how to fetch the
// assets, or with TANDEM_OFFLINE=1 reports the skip; never passes silently.
bool reference_ready() {
  std::string missing;
  if (!fs::exists(qwen3_dir() + "/tokenizer.json")) missing = qwen3_dir() + "/tokenizer.json is missing";
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

// Runs the JS reference on `requests` (see tests/tokenizer_reference.mjs) and returns its answers.
std::vector<json> run_reference(const std::string& tokenizer_dir, const std::vector<json>& requests) {
  TempDir tmp("tandem-tokref-");
  std::string in = tmp.path() + "/requests.jsonl", out = tmp.path() + "/answers.jsonl";
  {
    std::ofstream file(in, std::ios::binary);
    for (const json& request : requests) file << request.dump() << "\n";
  }
  std::string command = fmt::format("node '{}/tests/tokenizer_reference.mjs' '{}' '{}' < '{}' > '{}'", TANDEM_SOURCE_DIR,
                                    node_modules(), tokenizer_dir, in, out);
  REQUIRE_MESSAGE(std::system(command.c_str()) == 0, "the JS reference failed: " << command);
  std::vector<json> answers;
  std::istringstream lines(*read_file(out));
  for (std::string line; std::getline(lines, line);) answers.push_back(json::parse(line));
  REQUIRE(answers.size() == requests.size());
  return answers;
}

std::string utf8(char32_t c) {
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
// (`\s+(?!\S)`), digits, contractions, NFC, scripts without spaces, added tokens.
const std::vector<std::string> kFixedTexts = {
    "",
    "Hello world",
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
    "\n",
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
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|><|im_end|><|endoftext|><|endoftext|>",
    "<|im_end <|im_start|x <|",
    "<think>\n\n</think>\n\nThe answer is 42.",
    "x = 5 # 计算 😀\n",
};

// One random piece of text from one of the families above.
std::string random_piece(std::mt19937_64& rng) {
  static const char* const kWords[] = {"the", "The", "of", "and", "tokenizer", "Hello", "WORLD", "running", "isn't",
                                       "we'll", "you'RE", "x", "a", "I", "GPU", "foo_bar", "camelCase", "naïve", "résumé"};
  // Not U+FEFF, nor 'ſ' or 'K' (Kelvin) after an apostrophe: there the JS reference departs
  // from Hugging Face's Oniguruma (it counts U+FEFF as \s, and folds case ASCII-only).
  static const char* const kSpaces[] = {" ", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\t\t", " \t ",
                                        "\u00a0", "\u3000", "\u0085", "\u180e", "\u2028", "\u1680", "\u2009", "\u200b"};
  static const char* const kPunct[] = {".", ",", "!?", "...", "(", ")", "{", "}", "==", "->", "\"", "'", "'s", "'LL",
                                       "'re", "#", "//", "/*", "$", "%", "&&", ";", ":", "-", "_", "@"};
  static const char* const kSpecial[] = {"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>",
                                         "<tool_call>", "<|im_", "|>"};
  static const char* const kEmoji[] = {"👋", "🌍", "🇺🇸", "👨‍👩‍👧", "👍🏽", "❤️", "🤖", "✅"};
  auto pick = [&](auto& list) { return std::string(list[rng() % std::size(list)]); };
  auto in = [&](char32_t low, char32_t high) { return static_cast<char32_t>(low + rng() % (high - low + 1)); };
  std::string out;
  switch (rng() % 12) {
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
    case 10: return pick(kSpecial);
    default: return utf8(in(0x0410, 0x044F)) + utf8(in(0x03B1, 0x03C9));  // Cyrillic, Greek
  }
}

std::vector<std::string> corpus(uint64_t seed) {
  std::vector<std::string> texts = kFixedTexts;
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 400; ++i) {
    std::string text;
    for (size_t pieces = 1 + rng() % 16; pieces > 0; --pieces) text += random_piece(rng);
    texts.push_back(text);
  }
  std::string long_text;  // one long text: the cache and long-input paths
  while (long_text.size() < 50000) long_text += random_piece(rng);
  texts.push_back(long_text);
  return texts;
}

std::string describe_ids(const Tokenizer& tokenizer, const Ids& ids, size_t from) {
  std::string out;
  for (size_t i = from; i < ids.size() && i < from + 4; ++i) out += fmt::format("{}={} ", ids[i], tandem::quoted(tokenizer.decode({ids[i]})));
  return out.empty() ? "(end)" : out;
}

// Encodes every text with both and compares id by id; also decode against the reference
// decoder and against the (normalised) text.
void compare_encode(const Tokenizer& ours, const std::string& dir, const std::vector<std::string>& texts, bool nfc,
                    const std::string& label, uint64_t seed) {
  std::vector<json> requests;
  for (const std::string& text : texts) requests.push_back({{"encode", text}});
  std::vector<json> answers = run_reference(dir, requests);
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
    std::string decoded = ours.decode(ids);
    CHECK_MESSAGE(decoded == answers[t]["text"].get<std::string>(), label << ": decode differs for " << tandem::quoted(texts[t]));
    CHECK_MESSAGE(decoded == (nfc ? unicode::nfc(texts[t]) : texts[t]), label << ": decode(encode(text)) != text for "
                                                                              << tandem::quoted(texts[t]));
  }
  CHECK_MESSAGE(mismatches == 0, label << ": " << mismatches << " of " << texts.size() << " texts encode differently");
}

// Decodes every id alone, and random id sequences (which split UTF-8 characters), with both.
void compare_decode(const Tokenizer& ours, const std::string& dir, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Ids> sequences;
  for (int32_t id = 0; id < ours.vocab_size(); ++id) sequences.push_back({id});
  for (int i = 0; i < 500; ++i) {
    Ids ids(1 + rng() % 12);
    for (int32_t& id : ids) id = static_cast<int32_t>(rng() % 3 ? rng() % 256 : rng() % static_cast<uint64_t>(ours.vocab_size()));
    sequences.push_back(ids);
  }
  std::vector<json> requests;
  for (const Ids& ids : sequences) requests.push_back({{"decode", ids}});
  std::vector<json> answers = run_reference(dir, requests);
  size_t mismatches = 0;
  for (size_t i = 0; i < sequences.size(); ++i) {
    std::string ours_text = ours.decode(sequences[i]), expected = answers[i]["text"].get<std::string>();
    if (ours_text != expected && ++mismatches <= 3) {
      FAIL_CHECK("decode of " << json(sequences[i]).dump() << ": ours " << tandem::quoted(ours_text) << ", reference "
                              << tandem::quoted(expected));
    }
  }
  CHECK_MESSAGE(mismatches == 0, mismatches << " of " << sequences.size() << " id sequences decode differently");
}

// A variant of Qwen3's file, written to `dir`.
void write_variant(const json& qwen3, const std::string& dir, const std::function<void(json&)>& change) {
  json file = qwen3;
  change(file);
  std::ofstream(dir + "/tokenizer.json", std::ios::binary) << file.dump();
}

}  // namespace

TEST_CASE("Qwen3's tokenizer.json encodes and decodes as Hugging Face's reference does") {
  if (!reference_ready()) return;
  uint64_t seed = std::random_device{}();
  std::vector<std::string> texts = corpus(seed);
  std::unique_ptr<Tokenizer> qwen3 = load_tokenizer(qwen3_dir());
  CHECK(qwen3->vocab_size() == 151669);
  CHECK(qwen3->token_to_id("<|im_end|>") == 151645);
  CHECK(qwen3->token_to_id("\xC4\xA0the") == 279);  // "Ġthe"
  compare_encode(*qwen3, qwen3_dir(), texts, /*nfc=*/true, "qwen3", seed);
  compare_decode(*qwen3, qwen3_dir(), seed);

  {  // concurrent encode() calls give the sequential results
    std::vector<Ids> sequential;
    for (const std::string& text : texts) sequential.push_back(qwen3->encode(text));
    std::vector<int> wrong(4, 0);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        for (size_t i = 0; i < texts.size(); ++i) wrong[t] += qwen3->encode(texts[(i + t * 97) % texts.size()]) != sequential[(i + t * 97) % texts.size()];
      });
    }
    for (auto& thread : threads) thread.join();
    for (int t = 0; t < 4; ++t) CHECK(wrong[t] == 0);
  }
}

TEST_CASE("Llama-3- and GPT-2-shaped tokenizer.json files encode as the reference does") {
  if (!reference_ready()) return;
  uint64_t seed = std::random_device{}();
  std::vector<std::string> texts = corpus(seed);
  json qwen3 = json::parse(*read_file(qwen3_dir() + "/tokenizer.json"));
  TempDir dir("tandem-tokvariant-");

  // Llama-3's shape: no normaliser, digits in groups of up to three, ignore_merges.
  write_variant(qwen3, dir.path(), [](json& file) {
    file["normalizer"] = nullptr;
    json& split = file["pre_tokenizer"]["pretokenizers"][0];
    std::string regex = split["pattern"]["Regex"];
    size_t digits = regex.find("|\\p{N}|");
    REQUIRE(digits != std::string::npos);
    split["pattern"]["Regex"] = regex.replace(digits, 7, "|\\p{N}{1,3}|");
    file["model"]["ignore_merges"] = true;
  });
  compare_encode(*load_tokenizer(dir.path()), dir.path(), texts, /*nfc=*/false, "llama3-shaped", seed);

  // GPT-2's shape: ByteLevel alone does the splitting, with its own regex and a prefix space.
  write_variant(qwen3, dir.path(), [](json& file) {
    file["normalizer"] = nullptr;
    file["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  });
  std::unique_ptr<Tokenizer> gpt2 = load_tokenizer(dir.path());
  // ByteLevel's own regex is a native JS RegExp in the reference, whose \s leaves out
  // U+0085 (Oniguruma's takes it), so texts with it are not compared here.
  texts.erase(std::remove_if(texts.begin(), texts.end(), [](const std::string& t) { return t.find("\u0085") != std::string::npos; }),
              texts.end());
  std::vector<json> requests;
  for (const std::string& text : texts) requests.push_back({{"encode", text}});
  // The prefix space makes decode(encode(text)) differ from the text, so only ids are compared.
  std::vector<json> answers = run_reference(dir.path(), requests);
  size_t mismatches = 0;
  for (size_t t = 0; t < texts.size(); ++t) {
    if (gpt2->encode(texts[t]) != answers[t]["ids"].get<Ids>() && ++mismatches <= 3) {
      FAIL_CHECK("gpt2-shaped (seed " << seed << "): " << tandem::quoted(texts[t], 300) << " differs from the reference");
    }
  }
  CHECK(mismatches == 0);
}
