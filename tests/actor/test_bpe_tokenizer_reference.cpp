// The byte-level BPE tokenizer against an independent implementation: Qwen3's real
// tokenizer.json, and two variants of it shaped like Llama-3's and GPT-2's files, encoded
// and decoded by both tandem and Hugging Face's JS tokenizers (tests/support/tokenizer_reference.h)
// over a fixed corpus plus a few hundred fresh random texts, id by id.
#include "actor/bpe_tokenizer.h"
#include "actor/unicode_text.h"
#include "tests/support/tokenizer_reference.h"

#include <algorithm>
#include <thread>

using namespace tandem;
using namespace tandem::testing;
using nlohmann::json;

namespace {

std::string qwen3_dir() { return assets_dir() + "/qwen3"; }

const std::vector<std::string> kQwenSpecials = {"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>",
                                                "<tool_call>", "<|im_", "|>"};

std::optional<std::string> same_text(const std::string& text) { return text; }
std::optional<std::string> nfc_text(const std::string& text) { return unicode::nfc(text); }
bool always(const Ids&, const std::string&) { return true; }

// A variant of Qwen3's file, written to `dir`.
void write_variant(const json& qwen3, const std::string& dir, const std::function<void(json&)>& change) {
  json file = qwen3;
  change(file);
  std::ofstream(dir + "/tokenizer.json", std::ios::binary) << file.dump();
}

}  // namespace

TEST_CASE("Qwen3's tokenizer.json encodes and decodes as Hugging Face's reference does") {
  if (!reference_ready(qwen3_dir())) return;
  uint64_t seed = std::random_device{}();
  std::vector<std::string> texts = corpus(seed, kQwenSpecials);
  std::unique_ptr<Tokenizer> qwen3 = load_tokenizer(qwen3_dir());
  CHECK(qwen3->vocab_size() == 151669);
  CHECK(qwen3->token_to_id("<|im_end|>") == 151645);
  CHECK(qwen3->token_to_id("\xC4\xA0the") == 279);  // "Ġthe"
  compare_encode(*qwen3, qwen3_dir(), texts, nfc_text, "qwen3", seed);
  compare_decode(*qwen3, qwen3_dir(), seed, {0, 256}, always);

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
  if (!reference_ready(qwen3_dir())) return;
  uint64_t seed = std::random_device{}();
  std::vector<std::string> texts = corpus(seed, kQwenSpecials);
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
  compare_encode(*load_tokenizer(dir.path()), dir.path(), texts, same_text, "llama3-shaped", seed);

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
