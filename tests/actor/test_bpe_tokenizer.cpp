// The HF tokenizer.json BPE tokenizer on small files made here: the byte-level file
// tandem writes (must encode as ByteTokenizer does), hand-made merges and added-token
// flags with answers worked out by hand, and malformed files whose errors must name the
// file and the field. The comparison with Hugging Face's own implementation on Qwen3's
// real file is in test_bpe_tokenizer_reference.cpp.
#include "actor/bpe_tokenizer.h"
#include "actor/byte_tokenizer.h"
#include "actor/unicode_text.h"
#include "core/error.h"
#include "core/files.h"
#include "core/text.h"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <random>

using namespace tandem;
using nlohmann::json;

namespace {

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  REQUIRE(out.good());
}

// The byte-level tokenizer.json tandem writes, as JSON to modify.
json byte_level_json(const std::vector<std::string>& special_tokens = {}) {
  TempDir dir;
  write_byte_level_tokenizer(dir.path(), special_tokens);
  return json::parse(*read_file(dir.path() + "/tokenizer.json"));
}

std::unique_ptr<Tokenizer> load_json(const TempDir& dir, const json& tokenizer) {
  write_text(dir.path() + "/tokenizer.json", tokenizer.dump());
  return load_tokenizer(dir.path());
}

using Ids = std::vector<int32_t>;

std::string random_special_token(std::mt19937_64& rng) {
  static const char* const kParts[] = {"<", ">", "|", "im_", "end", "a", "<a>", "\n", "\xE4\xBD\xA0", "x"};
  std::string token;
  size_t parts = 1 + rng() % 4;
  for (size_t i = 0; i < parts; ++i) token += kParts[rng() % std::size(kParts)];
  return token;
}

}  // namespace

TEST_CASE("the byte-level tokenizer file encodes exactly as ByteTokenizer") {
  std::mt19937_64 rng(std::random_device{}());
  for (int config = 0; config < 20; ++config) {
    std::vector<std::string> specials = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    if (config > 0) {  // random special tokens, overlapping ones included ("<a>" and "<a><a>")
      specials.clear();
      for (size_t n = rng() % 6; specials.size() < n;) {
        std::string token = random_special_token(rng);
        if (std::find(specials.begin(), specials.end(), token) == specials.end()) specials.push_back(token);
      }
    }
    TempDir dir;
    write_byte_level_tokenizer(dir.path(), specials);
    std::unique_ptr<Tokenizer> bpe = load_tokenizer(dir.path());
    ByteTokenizer bytes(specials);
    REQUIRE(bpe->vocab_size() == bytes.vocab_size());
    for (size_t i = 0; i < specials.size(); ++i) CHECK(bpe->token_to_id(specials[i]) == 256 + static_cast<int32_t>(i));

    for (int round = 0; round < 100; ++round) {
      // Random bytes (NUL and ill-formed UTF-8 included), valid UTF-8 and special tokens.
      std::string text;
      for (size_t pieces = rng() % 12; pieces > 0; --pieces) {
        switch (rng() % 4) {
          case 0: text += static_cast<char>(rng() & 0xff); break;
          case 1: text += "h\xC3\xA9llo w\xF0\x9F\x98\x80rld \n\t "; break;
          case 2: if (!specials.empty()) text += specials[rng() % specials.size()]; break;
          default: if (!specials.empty()) text += specials[rng() % specials.size()].substr(0, 2); break;
        }
      }
      Ids ids = bpe->encode(text);
      REQUIRE_MESSAGE(ids == bytes.encode(text), "text ", tandem::quoted(text));
      // decode gives the text back, with ill-formed UTF-8 replaced as HF replaces it.
      CHECK(bpe->decode(ids) == unicode::utf8_lossy(text));
    }
  }
}

TEST_CASE("the byte-level tokenizer decodes every id") {
  TempDir dir;
  write_byte_level_tokenizer(dir.path(), {"<|im_end|>", "<think>"});
  std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(dir.path());
  for (int32_t id = 0; id < 256; ++id) {
    std::string byte(1, static_cast<char>(id));
    CHECK(tokenizer->decode({id}) == (id < 0x80 ? byte : "\xEF\xBF\xBD"));  // a lone byte >= 0x80 is ill-formed
  }
  CHECK(tokenizer->decode({256}) == "<|im_end|>");
  CHECK(tokenizer->decode({257}) == "<think>");
  CHECK(tokenizer->decode({0xE4, 0xBD, 0xA0, 257}) == "\xE4\xBD\xA0<think>");
  CHECK(tokenizer->decode({0xE4, 0xBD, 257, 0xA0}) == "\xEF\xBF\xBD<think>\xEF\xBF\xBD");  // one U+FFFD per maximal subpart
  CHECK_THROWS_WITH_AS(tokenizer->decode({'a', 258}), doctest::Contains("token 258 at position 1 is outside the vocabulary [0, 258)"),
                       Error);
  CHECK_THROWS_WITH_AS(tokenizer->decode({-1}), doctest::Contains("token -1 at position 0"), Error);
  CHECK(tokenizer->token_to_id("\xC4\xA0") == 32);  // "Ġ", the byte-level spelling of " "
  CHECK(tokenizer->token_to_id("a") == 'a');
  CHECK(!tokenizer->token_to_id("ab"));

  // What transformers needs to load it as a fast tokenizer.
  json config = json::parse(*read_file(dir.path() + "/tokenizer_config.json"));
  CHECK(config["tokenizer_class"] == "PreTrainedTokenizerFast");
  CHECK(config["added_tokens_decoder"]["257"]["content"] == "<think>");
}

TEST_CASE("merges apply lowest rank first, leftmost on ties, in both spellings") {
  json file = byte_level_json();
  file["model"]["vocab"]["ab"] = 256;
  file["model"]["vocab"]["bc"] = 257;
  file["model"]["vocab"]["abc"] = 258;
  file["model"]["vocab"]["aa"] = 259;
  file["model"]["vocab"]["abd"] = 260;
  file["model"]["merges"] = json::array({json::array({"a", "b"}), "b c", json::array({"ab", "c"}), "a a"});
  TempDir dir;
  std::unique_ptr<Tokenizer> tokenizer = load_json(dir, file);
  CHECK(tokenizer->encode("abc") == Ids{258});  // ab (rank 0) before bc (rank 1), then ab+c
  CHECK(tokenizer->encode("bc") == Ids{257});
  CHECK(tokenizer->encode("aaa") == Ids{259, 'a'});
  CHECK(tokenizer->encode("aaaa") == Ids{259, 259});
  CHECK(tokenizer->encode("xabcx") == Ids{'x', 258, 'x'});  // use_regex=false: the whole text is one word
  CHECK(tokenizer->encode("abd") == Ids{256, 'd'});
  CHECK(tokenizer->decode({258, 259}) == "abcaa");

  file["model"]["ignore_merges"] = true;  // Llama-3: a word in the vocabulary is one token
  tokenizer = load_json(dir, file);
  CHECK(tokenizer->encode("abd") == Ids{260});
  CHECK(tokenizer->encode("abdx") == Ids{256, 'd', 'x'});
}

TEST_CASE("the GPT-2 regex and add_prefix_space of a ByteLevel pre-tokenizer") {
  json file = byte_level_json({"<|endoftext|>"});
  file["model"]["vocab"]["\xC4\xA0w"] = 300;  // "Ġw": " w"
  file["model"]["merges"] = json::array({"\xC4\xA0 w"});
  file["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  TempDir dir;
  std::unique_ptr<Tokenizer> tokenizer = load_json(dir, file);
  CHECK(tokenizer->encode("w") == Ids{300});  // " w" after the prefix space
  CHECK(tokenizer->encode("x w") == Ids{' ', 'x', 300});
  CHECK(tokenizer->encode("<|endoftext|>w") == Ids{256, 300});  // each stretch between added tokens gets one
  CHECK(tokenizer->encode(" w") == Ids{300});

  // Long runs are split without running out of regex stack.
  std::string spaces(1 << 20, ' ');
  std::string letters(1 << 20, 'q');
  CHECK(tokenizer->encode(spaces + "x").size() == spaces.size() + 1);
  CHECK(tokenizer->encode(letters).size() == letters.size() + 1);
}

TEST_CASE("added-token flags: single_word, lstrip, rstrip, normalized") {
  json file = byte_level_json();
  auto add = [&](int id, const std::string& content, const char* flag) {
    json token = {{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                  {"normalized", false}, {"special", false}};
    token[flag] = true;
    file["added_tokens"].push_back(token);
  };
  add(300, "cat", "single_word");
  add(301, "<L>", "lstrip");
  add(302, "<R>", "rstrip");
  add(303, "e\xCC\x81", "normalized");  // "e" + U+0301: matched in NFC text as U+00E9
  file["normalizer"] = {{"type", "NFC"}};
  TempDir dir;
  std::unique_ptr<Tokenizer> tokenizer = load_json(dir, file);
  CHECK(tokenizer->encode("a cat.") == Ids{'a', ' ', 300, '.'});
  CHECK(tokenizer->encode("(cat)") == Ids{'(', 300, ')'});
  CHECK(tokenizer->encode("concat") == Ids{'c', 'o', 'n', 'c', 'a', 't'});
  CHECK(tokenizer->encode("cat_") == Ids{'c', 'a', 't', '_'});
  CHECK(tokenizer->encode("\xC3\xA9" "cat") == Ids{303, 'c', 'a', 't'});  // "é" is a letter, so not single_word
  CHECK(tokenizer->encode("a \t<L>b") == Ids{'a', 301, 'b'});
  CHECK(tokenizer->encode("a<R> \n b") == Ids{'a', 302, 'b'});
  CHECK(tokenizer->encode("e\xCC\x81") == Ids{303});
  CHECK(tokenizer->encode("\xC3\xA9") == Ids{303});
  CHECK(tokenizer->decode({301, 303}) == "<L>e\xCC\x81");  // an added token decodes as the file spells it
  CHECK(tokenizer->token_to_id("<L>") == 301);
}

TEST_CASE("malformed or unsupported tokenizer.json files are errors naming the file and field") {
  TempDir dir;
  std::string path = dir.path() + "/tokenizer.json";
  auto error_of = [&](const json& file) -> std::string {
    try {
      load_json(dir, file);
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };

  CHECK_THROWS_WITH_AS(load_tokenizer(dir.path()), doctest::Contains((path + ": cannot read the file").c_str()), Error);
  write_text(path, "{\"model\": ");
  CHECK_THROWS_WITH_AS(load_tokenizer(dir.path()), doctest::Contains((path + ": not valid JSON").c_str()), Error);

  json good = byte_level_json({"<s>"});
  CHECK(error_of(good) == "(no error)");
  json file = good;
  file["model"]["type"] = "WordPiece";
  CHECK(error_of(file) == path + ": model.type \"WordPiece\": tandem reads BPE tokenizers, byte-level (Qwen2/3, Llama-3, "
                                 "GPT-2) or SentencePiece-style (Llama-2, Mistral), and does not support this");
  file = good;
  file["model"]["merges"] = json::array({json::array({"a", "zz"})});
  CHECK(error_of(file) == path + ": model.merges[0] merges \"a\" and \"zz\", but \"zz\" is not in model.vocab");
  file = good;
  file["model"]["merges"] = json::array({"a b"});
  CHECK(error_of(file) == path + ": model.merges[0] merges \"a\" and \"b\", but the result \"ab\" is not in model.vocab");
  file["model"]["merges"] = json::array({"a b c"});
  CHECK(error_of(file) == path + ": model.merges[0] is \"a b c\", not two tokens separated by one space");
  file = good;
  file["model"]["vocab"].erase("\xC4\x8A");  // "Ċ", the byte 0x0A
  CHECK(error_of(file).find(path + ": model.vocab has no token for byte 0x0A") == 0);
  file = good;
  file["model"]["dropout"] = 0.1;
  CHECK(error_of(file).find(path + ": model.dropout is 0.1") == 0);
  file = good;
  file["normalizer"] = {{"type", "Lowercase"}};
  CHECK(error_of(file).find(path + ": normalizer.type \"Lowercase\"") == 0);
  file = good;
  file["pre_tokenizer"] = {{"type", "Sequence"},
                           {"pretokenizers", json::array({{{"type", "Digits"}}, good["pre_tokenizer"]})}};
  CHECK(error_of(file).find(path + ": pre_tokenizer.pretokenizers[0].type \"Digits\"") == 0);
  file["pre_tokenizer"]["pretokenizers"] = json::array({good["pre_tokenizer"], {{"type", "Split"}}});
  CHECK(error_of(file).find(path + ": pre_tokenizer.pretokenizers[1] comes after the ByteLevel pre-tokenizer") == 0);
  file["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}, {"behavior", "Isolated"}, {"invert", false}};
  CHECK(error_of(file).find(path + ": pre_tokenizer has no ByteLevel step") == 0);
  file["pre_tokenizer"] = {{"type", "Sequence"},
                           {"pretokenizers", json::array({{{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}},
                                                           {"behavior", "Isolated"}},
                                                          good["pre_tokenizer"]})}};
  CHECK(error_of(file).find(path + ": pre_tokenizer.pretokenizers[0].pattern: the split pattern does not compile") == 0);
  file["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "\\w+|\\s+"}};
  CHECK(error_of(file).find(path + ": pre_tokenizer.pretokenizers[0].pattern: the split pattern uses \\w") == 0);
  file["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "x"}};
  file["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "MergedWithNext";
  CHECK(error_of(file).find(path + ": pre_tokenizer.pretokenizers[0].behavior \"MergedWithNext\"") == 0);
  file = good;
  file["decoder"] = {{"type", "Metaspace"}};
  CHECK(error_of(file).find(path + ": decoder.type \"Metaspace\"") == 0);
  file = good;
  file["added_tokens"][0]["id"] = "x";
  CHECK(error_of(file).find(path + ": added_tokens[0].id is \"x\", not a token id") == 0);
}
