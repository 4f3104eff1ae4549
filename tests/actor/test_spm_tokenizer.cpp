// SentencePiece-style BPE on small files made here, with answers worked out by hand:
// the normaliser and Metaspace shapes, byte fallback, unknown tokens (fused or not),
// HF's Rust decoders where the JS reference departs from them (ByteFallback of ill-formed
// bytes, the Metaspace decoder's first token), llama.cpp's score-ranked merges from GGUF
// metadata (ties go to the leftmost pair), long inputs, and errors naming the field.
// The comparison with Hugging Face's implementation on a real file is in
// test_spm_tokenizer_reference.cpp; llama.cpp's own vectors in test_tokenizer_vectors.cpp.
#include "actor/bpe_tokenizer.h"
#include "actor/bpe_tokenizer_gguf.h"
#include "core/error.h"
#include "core/files.h"
#include "core/gguf.h"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <random>

using namespace tandem;
using nlohmann::json;

namespace {

using Ids = std::vector<int32_t>;

const std::string kMeta = "\xE2\x96\x81";  // "▁"

std::string byte_token(int b) { return fmt::format("<0x{:02X}>", b); }

// <unk> <s> </s>, the 256 byte tokens (ids 3..258), then ▁ a b ▁a ab ▁ab ▁▁ (259..265).
json tiny_spm(bool legacy = true) {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) vocab[byte_token(b)] = 3 + b;
  int id = 259;
  for (const std::string& piece : {kMeta, std::string("a"), std::string("b"), kMeta + "a", std::string("ab"), kMeta + "ab", kMeta + kMeta}) {
    vocab[piece] = id++;
  }
  json added = json::array();
  for (int i = 0; i < 3; ++i) {
    added.push_back({{"id", i}, {"content", i == 0 ? "<unk>" : i == 1 ? "<s>" : "</s>"}, {"single_word", false},
                     {"lstrip", false}, {"rstrip", false}, {"normalized", false}, {"special", true}});
  }
  json file = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", {{"type", "Sequence"},
                      {"normalizers", {{{"type", "Prepend"}, {"prepend", kMeta}},
                                       {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMeta}}}}}},
      {"pre_tokenizer", nullptr},
      {"decoder", {{"type", "Sequence"},
                   {"decoders", {{{"type", "Replace"}, {"pattern", {{"String", kMeta}}}, {"content", " "}},
                                 {{"type", "ByteFallback"}},
                                 {{"type", "Fuse"}},
                                 {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
      {"model", {{"type", "BPE"}, {"unk_token", "<unk>"}, {"fuse_unk", true}, {"byte_fallback", true}, {"vocab", vocab},
                 {"merges", {kMeta + " a", kMeta + " " + kMeta, "a b", kMeta + "a b"}}}},
  };
  if (!legacy) {
    file["normalizer"] = nullptr;
    file["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", kMeta}, {"prepend_scheme", "always"}, {"split", true}};
    file["decoder"] = file["pre_tokenizer"];
  }
  return file;
}

std::unique_ptr<Tokenizer> load(const json& file) {
  TempDir dir;
  std::ofstream(dir.path() + "/tokenizer.json", std::ios::binary) << file.dump();
  return load_tokenizer(dir.path());
}

std::string error_of(const json& file) {
  try {
    load(file);
  } catch (const Error& e) {
    std::string message = e.what();
    return message.substr(message.find("tokenizer.json: ") + 16);
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("the legacy shape: Prepend and Replace normalise, merges run over characters, bytes fall back") {
  auto spm = load(tiny_spm());
  CHECK(spm->vocab_size() == 266);
  CHECK(spm->token_to_id(kMeta + "a") == 262);
  CHECK(spm->token_to_id("<0x41>") == 3 + 0x41);
  CHECK(spm->token_to_id("<s>") == 1);
  // "▁ab▁a": (▁,a) has rank 0 at both places, leftmost first; then (▁a,b).
  CHECK(spm->encode("ab a") == Ids{264, 262});
  CHECK(spm->encode("") == Ids{});
  CHECK(spm->encode(" ") == Ids{265});  // "▁▁"
  // "é" has no token: its two UTF-8 bytes; an ill-formed byte is an unknown character too.
  CHECK(spm->encode("\xC3\xA9") == Ids{259, 3 + 0xC3, 3 + 0xA9});
  CHECK(spm->encode("a\xFF") == Ids{262, 3 + 0xFF});
  // Each piece between special tokens is normalised on its own: another "▁" after </s>,
  // and in "▁▁a" the pair (▁,a) ranks above (▁,▁).
  CHECK(spm->encode("<s>a</s> a") == Ids{1, 262, 2, 259, 262});
  CHECK(spm->decode({1, 262, 2, 259, 262}) == "<s> a</s>  a");
  CHECK(spm->decode(spm->encode("ab a b")) == "ab a b");
  CHECK(spm->decode({259, 260}) == "a");  // Strip takes the one leading space
  CHECK(spm->decode({265}) == " ");
}

TEST_CASE("ByteFallback decodes as HF's Rust decoder: well-formed runs whole, one U+FFFD per byte of an ill-formed run") {
  auto spm = load(tiny_spm());
  const std::string fffd = "\xEF\xBF\xBD";
  CHECK(spm->decode({260, 3 + 0xC3, 3 + 0xA9, 261}) == "a\xC3\xA9" "b");
  CHECK(spm->decode({260, 3 + 0xE4, 3 + 0xB8}) == "a" + fffd + fffd);  // the JS port (TextDecoder) gives one U+FFFD
  CHECK(spm->decode({3 + 0xC3, 260, 3 + 0xA9}) == fffd + "a" + fffd);
  CHECK(spm->decode({3 + 0x20, 260}) == "a");  // the byte token's space is stripped too: Strip runs after Fuse
}

TEST_CASE("unknown characters without byte fallback: the unknown token, fused or not, or dropped") {
  json file = tiny_spm();
  file["model"]["byte_fallback"] = false;
  CHECK(load(file)->encode("\xC3\xA9\xC3\xA9 a") == Ids{259, 0, 262});
  file["model"]["fuse_unk"] = false;
  CHECK(load(file)->encode("\xC3\xA9\xC3\xA9 a") == Ids{259, 0, 0, 262});
  file["model"]["unk_token"] = nullptr;
  CHECK(load(file)->encode("\xC3\xA9\xC3\xA9 a") == Ids{259, 262});
  file["model"]["unk_token"] = "<nope>";
  CHECK(error_of(file) == "model.unk_token \"<nope>\" is not in model.vocab");
}

TEST_CASE("the Metaspace shape: prepend schemes, split, and the decoder's first token") {
  json file = tiny_spm(/*legacy=*/false);
  auto always_split = load(file);
  // split: words "▁a", "▁", "▁b"; without split "▁▁" merges across them.
  CHECK(always_split->encode("a  b") == Ids{262, 259, 259, 261});
  CHECK(always_split->encode(" a") == Ids{262});  // already starts with "▁": no second one
  CHECK(always_split->encode("<s>a") == Ids{1, 262});
  file["pre_tokenizer"]["split"] = false;
  CHECK(load(file)->encode("a  b") == Ids{262, 265, 261});
  file["pre_tokenizer"]["prepend_scheme"] = "first";
  auto first = load(file);
  CHECK(first->encode("<s>a") == Ids{1, 260});
  CHECK(first->encode("a<s>a") == Ids{262, 1, 260});
  file["pre_tokenizer"]["prepend_scheme"] = "never";
  CHECK(load(file)->encode("a") == Ids{260});
  file["pre_tokenizer"].erase("prepend_scheme");
  file["pre_tokenizer"]["add_prefix_space"] = false;  // the older spelling
  CHECK(load(file)->encode("a") == Ids{260});

  // The decoder drops every "▁" of the first token (HF's Rust; the JS port only a leading one).
  CHECK(always_split->decode({265, 260}) == "a");
  CHECK(always_split->decode({260, 265}) == "a  ");
  CHECK(always_split->decode({1, 262}) == "<s> a");
  file = tiny_spm(false);
  file["decoder"]["prepend_scheme"] = "never";
  CHECK(load(file)->decode({265, 260}) == "  a");
}

TEST_CASE("a long word merges in n log n, and words cut before each \"▁\" encode as the whole") {
  auto spm = load(tiny_spm());
  std::string text;
  for (int i = 0; i < 200000; ++i) text += i % 3 ? "ab" : "a";
  auto start = std::chrono::steady_clock::now();
  Ids ids = spm->encode(text);  // one word of 500k characters: nowhere to cut it
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(spm->decode(ids) == text);
  CHECK(seconds < 2.0);  // ~0.1 s; a quadratic merge would take minutes

  // No token has "▁" after another character, so the encoder cuts words there; a vocabulary
  // with such a token ("a▁") is merged whole, and both agree where "a▁" is never made.
  json with_cross = tiny_spm();
  with_cross["model"]["vocab"]["a" + kMeta] = 266;
  auto whole = load(with_cross);
  std::mt19937_64 rng(std::random_device{}());
  for (int round = 0; round < 200; ++round) {
    std::string random_text;
    for (size_t n = rng() % 40; n > 0; --n) random_text += "ab \xC3\xA9"[rng() % 5];
    CHECK(spm->encode(random_text) == whole->encode(random_text));
  }
  with_cross["model"]["merges"].insert(with_cross["model"]["merges"].begin(), "a " + kMeta);  // ranked first
  CHECK(load(with_cross)->encode("a a") == Ids{259, 266, 260});
}

TEST_CASE("SentencePiece-style files with unsupported steps are errors naming the field") {
  json file = tiny_spm();
  file["pre_tokenizer"] = {{"type", "Whitespace"}};
  CHECK(error_of(file).find("pre_tokenizer.type \"Whitespace\" with a SentencePiece-style model: tandem reads BPE tokenizers") == 0);
  file = tiny_spm();
  file["normalizer"]["normalizers"][1]["pattern"] = {{"Regex", " +"}};
  CHECK(error_of(file).find("normalizer.normalizers[1].pattern is a regex") == 0);
  file = tiny_spm();
  file["normalizer"]["normalizers"][0] = {{"type", "NFKC"}};
  CHECK(error_of(file).find("normalizer.normalizers[0].type \"NFKC\"") == 0);
  file = tiny_spm();
  file["decoder"]["decoders"][3]["content"] = "ab";
  CHECK(error_of(file) == "decoder.decoders[3].content is \"ab\", not one character");
  file = tiny_spm();
  file["decoder"] = nullptr;
  CHECK(error_of(file).find("decoder is null") == 0);
  file = tiny_spm(false);
  file["pre_tokenizer"]["prepend_scheme"] = "sometimes";
  CHECK(error_of(file) == "pre_tokenizer.prepend_scheme is \"sometimes\", not \"always\", \"first\" or \"never\"");
}

namespace {

// A GGUF llama (SentencePiece) vocabulary: `pieces` with `scores`, after <unk> <s> </s>
// and the 256 byte tokens.
std::string write_llama_gguf(const TempDir& dir, const std::vector<std::string>& pieces, const std::vector<double>& scores,
                             bool add_space_prefix = true) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int64_t> types = {2, 3, 3};
  std::vector<double> all_scores = {0, 0, 0};
  for (int b = 0; b < 256; ++b) tokens.push_back(byte_token(b)), types.push_back(6), all_scores.push_back(0);
  for (size_t i = 0; i < pieces.size(); ++i) tokens.push_back(pieces[i]), types.push_back(1), all_scores.push_back(scores[i]);
  std::string path = dir.path() + "/vocab.gguf";
  write_gguf(path,
             {{"general.architecture", GgufValue::of_string("llama")},
              {"tokenizer.ggml.model", GgufValue::of_string("llama")},
              {"tokenizer.ggml.tokens", GgufValue::of_strings(tokens)},
              {"tokenizer.ggml.token_type", GgufValue::of_int32s(types)},
              {"tokenizer.ggml.scores", GgufValue::of_float32s(all_scores)},
              {"tokenizer.ggml.add_space_prefix", GgufValue::of_bool(add_space_prefix)}},
             {});
  return path;
}

}  // namespace

TEST_CASE("GGUF llama vocabularies merge by score, leftmost first on equal scores, as llama.cpp does") {
  TempDir dir;
  // "aaa" can be made from ("a","aa") and from ("aa","a"): llama.cpp gives both the score of
  // "aaa" and takes the leftmost; merges from a list would rank one pair above the other.
  std::vector<std::string> pieces = {kMeta, "a", "b", "aa", "aaa", kMeta + "b", "ba", kMeta + "aa"};
  std::vector<double> scores = {-1, -2, -3, -10, -5, -4, -6, -20};
  auto file = GgufFile::open(write_llama_gguf(dir, pieces, scores));
  auto spm = tokenizer_from_gguf(*file);
  auto id = [&](const std::string& piece) { return *spm->token_to_id(piece); };
  CHECK(spm->vocab_size() == 259 + static_cast<int32_t>(pieces.size()));
  // "▁baaa": ▁b (-4) first, then ba (-6) can't (b is gone), aa (-10) leftmost: "aa","a"; aaa (-5) next.
  CHECK(spm->encode("baaa") == Ids{id(kMeta + "b"), id("aaa")});
  // "▁aaaa": aa (-10) at the leftmost place, then aaa (-5) above ▁aa (-20); no "aaaa" token.
  CHECK(spm->encode("aaaa") == Ids{id(kMeta), id("aaa"), id("a")});
  // Equal scores: the leftmost pair merges first whatever the pieces: in "▁aa a" both
  // (▁,aa) and (aa,a) can merge; a merges list would put one of them first everywhere.
  std::vector<double> flat(pieces.size(), -1.0);
  auto flat_file = GgufFile::open(write_llama_gguf(dir, pieces, flat));
  auto flat_spm = tokenizer_from_gguf(*flat_file);
  CHECK(flat_spm->encode("aaa") == Ids{id(kMeta + "aa"), id("a")});
  CHECK(flat_spm->encode("\xC3\xA9") == Ids{id(kMeta), 3 + 0xC3, 3 + 0xA9});
  CHECK(flat_spm->decode({1, id(kMeta + "aa"), id("a"), 2}) == "<s> aaa</s>");
  // Without add_space_prefix, no "▁" in front and none stripped when decoding.
  auto bare_file = GgufFile::open(write_llama_gguf(dir, pieces, scores, false));
  auto bare = tokenizer_from_gguf(*bare_file);
  CHECK(bare->encode("b a") == Ids{id("b"), id(kMeta), id("a")});
  CHECK(bare->decode({id(kMeta), id("a")}) == " a");
}

TEST_CASE("GGUF tokenizers that are not gpt2 or llama, or have no vocabulary, are errors naming the file and key") {
  TempDir dir;
  std::string path = dir.path() + "/x.gguf";
  write_gguf(path, {{"tokenizer.ggml.model", GgufValue::of_string("bert")}}, {});
  CHECK_THROWS_WITH_AS(tokenizer_from_gguf(*GgufFile::open(path)),
                       (path + ": tokenizer.ggml.model is \"bert\": tandem reads \"gpt2\" (byte-level BPE) and \"llama\" "
                               "(SentencePiece BPE) tokenizers").c_str(),
                       Error);
  write_gguf(path, {{"tokenizer.ggml.model", GgufValue::of_string("no_vocab")}}, {});
  CHECK_THROWS_WITH_AS(tokenizer_from_gguf(*GgufFile::open(path)), doctest::Contains("the file has no tokenizer"), Error);
  write_gguf(path,
             {{"tokenizer.ggml.model", GgufValue::of_string("gpt2")},
              {"tokenizer.ggml.tokens", GgufValue::of_strings({"a"})},
              {"tokenizer.ggml.merges", GgufValue::of_strings({})},
              {"tokenizer.ggml.pre", GgufValue::of_string("falcon")}},
             {});
  CHECK_THROWS_WITH_AS(tokenizer_from_gguf(*GgufFile::open(path)), doctest::Contains("tokenizer.ggml.pre is \"falcon\""), Error);
}
