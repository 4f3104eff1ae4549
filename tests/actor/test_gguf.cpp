// GGUF files (core/gguf.h) and GGUF models (actor/gguf_model.h, actor/gguf_tokenizer.h),
// within tandem: tensors of every type against float64 references, metadata of every
// type, damaged files, model and tokenizer round trips, and model.path pointing at a
// .gguf. llama.cpp reading our files is tests/actor/test_gguf_llama_cpp.cpp.
#include "actor/gguf_model.h"
#include "actor/gguf_tokenizer.h"
#include "actor/presets.h"
#include "actor/tokenizer.h"
#include "core/error.h"
#include "core/files.h"
#include "core/gguf.h"
#include "core/half.h"
#include "tests/support/gguf_test_models.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>

using namespace tandem;
using namespace tandem::testing;
namespace fs = std::filesystem;

namespace {

// Fresh values each run, never zero, spread over several binades (and signs).
std::vector<float> random_values(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_int_distribution<int> exponent(-6, 3);
  std::vector<float> v(n);
  for (float& x : v) {
    do x = static_cast<float>(normal(rng) * std::ldexp(1.0, exponent(rng)));
    while (x == 0.0f);
  }
  return v;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Where the tensor info of `name` starts (its name's length field) in a file's bytes.
size_t tensor_info_at(const std::string& bytes, const std::string& name) {
  const size_t at = bytes.find(name);
  REQUIRE(at != std::string::npos);
  return at - 8;
}

}  // namespace

TEST_CASE("GGUF tensors: F32 exact, F16 and BF16 rounded to nearest, Q8_0 within its block scale, against float64") {
  const uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  const std::vector<float> values = random_values(3 * 64, seed);
  TempDir dir("tandem-gguf-");
  const std::string path = dir.path() + "/t.gguf";
  std::vector<GgufTensorToWrite> tensors;
  for (GgufTensorType type : {GgufTensorType::gguf_f32, GgufTensorType::gguf_f16, GgufTensorType::gguf_bf16,
                              GgufTensorType::gguf_q8_0}) {
    tensors.push_back({std::string("t_") + gguf_tensor_type_name(type), type, {3, 64}, values.data()});
  }
  tensors.push_back({"vector", GgufTensorType::gguf_f32, {5}, values.data()});
  write_gguf(path, {{"general.alignment", GgufValue::of_uint32(64)}}, tensors);
  const auto file = GgufFile::open(path);
  CHECK(file->version() == 3);
  CHECK(file->alignment() == 64);
  for (const GgufTensorInfo& t : file->tensors()) CHECK(t.offset % 64 == 0);
  CHECK(file->tensor("t_Q8_0").shape == std::vector<int64_t>{3, 64});
  CHECK(file->tensor("vector").shape == std::vector<int64_t>{5});

  const std::vector<float> f32 = file->tensor_to_float("t_F32"), f16 = file->tensor_to_float("t_F16"),
                           bf16 = file->tensor_to_float("t_BF16"), q8 = file->tensor_to_float("t_Q8_0");
  CHECK(f32 == values);
  CHECK(file->tensor_to_float("vector") == std::vector<float>(values.begin(), values.begin() + 5));
  for (size_t i = 0; i < values.size(); ++i) {
    const double x = values[i];
    // Round to nearest: within half a unit in the last place (fp16: 10 mantissa bits, bf16: 7).
    CHECK(std::abs(f16[i] - x) <= std::ldexp(std::abs(x), -11) + 3e-8);  // + half the fp16 subnormal step
    CHECK(std::abs(bf16[i] - x) <= std::ldexp(std::abs(x), -8));
  }
  for (size_t b = 0; b < values.size() / 32; ++b) {
    double amax = 0;
    for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::abs(static_cast<double>(values[32 * b + j])));
    const double d = fp16_to_float(float_to_fp16(static_cast<float>(amax / 127.0)));
    for (size_t j = 0; j < 32; ++j) {
      const size_t i = 32 * b + j;
      // A multiple of the stored scale: the float32 product q·d rounds once (u·|q|,
      // u = 2^-24), the float64 division back adds nothing at this size: any CPU.
      const double q = q8[i] / d;
      CHECK(std::abs(q - std::round(q)) <= 2 * 0x1p-24 * std::abs(q));
      CHECK(std::abs(std::round(q)) <= 127);
      CHECK(std::abs(q8[i] - static_cast<double>(values[i])) <= 0.5 * d + 127 * std::ldexp(d, -11));
    }
  }

  // A Q8_0 block written by hand: the dequantized values are d * q exactly.
  std::vector<uint8_t> block(34);
  const uint16_t d = float_to_fp16(0.375f);
  std::memcpy(block.data(), &d, 2);
  for (int j = 0; j < 32; ++j) block[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j * 8 - 128));
  const std::vector<float> decoded = gguf_dequantize(GgufTensorType::gguf_q8_0, block.data(), 32);
  for (int j = 0; j < 32; ++j) CHECK(static_cast<double>(decoded[j]) == 0.375 * (j * 8 - 128));
}

TEST_CASE("GGUF metadata: every value type round trips; lookups name the file, the key and the type") {
  TempDir dir("tandem-gguf-");
  const std::string path = dir.path() + "/m.gguf";
  GgufValue u8, i64, f64;
  u8.type = GgufValueType::gguf_uint8;
  u8.integer = 200;
  i64.type = GgufValueType::gguf_int64;
  i64.integer = -(int64_t{1} << 40);
  f64.type = GgufValueType::gguf_float64;
  f64.number = 0.1;
  write_gguf(path,
             {{"s", GgufValue::of_string("héllo\n")},
              {"u32", GgufValue::of_uint32(4000000000u)},
              {"i32", GgufValue::of_int32(-7)},
              {"u64", GgufValue::of_uint64(1ull << 50)},
              {"f32", GgufValue::of_float32(1e-6f)},
              {"b", GgufValue::of_bool(true)},
              {"u8", u8},
              {"i64", i64},
              {"f64", f64},
              {"strings", GgufValue::of_strings({"a", "", "c d"})},
              {"ints", GgufValue::of_int32s({1, -2, 3})},
              {"floats", GgufValue::of_float32s({0.5, -1.25})},
              {"empty", GgufValue::of_strings({})}},
             {});
  const auto file = GgufFile::open(path);
  CHECK(file->tensors().empty());
  CHECK(file->get_string("s") == "héllo\n");
  CHECK(file->get_int("u32") == 4000000000);
  CHECK(file->get_int("i32") == -7);
  CHECK(file->get_int("u64") == (int64_t{1} << 50));
  CHECK(file->get_float("f32") == static_cast<double>(1e-6f));
  CHECK(file->get_bool("b"));
  CHECK(file->get_int("u8") == 200);
  CHECK(file->get_int("i64") == -(int64_t{1} << 40));
  CHECK(file->get_float("f64") == 0.1);
  CHECK(file->get_float("i32") == -7.0);  // integers read as numbers too
  CHECK(file->get_string_array("strings") == std::vector<std::string>{"a", "", "c d"});
  CHECK(file->get_int_array("ints") == std::vector<int64_t>{1, -2, 3});
  CHECK(file->get_float_array("floats") == std::vector<float>{0.5f, -1.25f});
  CHECK(file->get_string_array("empty").empty());
  CHECK(file->metadata().front().first == "s");  // file order
  CHECK_FALSE(file->find_string("absent").has_value());
  CHECK(error_of([&] { file->get_int("s"); }) == path + ": metadata s: expected an integer, found string");
  CHECK(error_of([&] { file->get_string_array("ints"); }) ==
        path + ": metadata ints: expected an array of strings, found an array of int32");
  CHECK(error_of([&] { file->get_string("u3"); }) == path + ": no metadata key u3 (did you mean u32?)");
  CHECK(error_of([&] { file->tensor("x"); }) == path + ": no tensor named x");
}

TEST_CASE("damaged GGUF files are errors naming the file and what is wrong") {
  TempDir dir("tandem-gguf-");
  const std::string good = dir.path() + "/good.gguf";
  const std::vector<float> values = random_values(64, std::random_device{}());
  write_gguf(good, {{"general.architecture", GgufValue::of_string("llama")}},
             {{"weights", GgufTensorType::gguf_f32, {2, 32}, values.data()}});
  const std::string bytes = read_file(good).value();
  auto damaged = [&](const std::string& name, const std::string& content) {
    const std::string path = dir.path() + "/" + name;
    write_file_atomic(path, content);
    return error_of([&] { GgufFile::open(path); });
  };
  auto patched = [&](size_t at, uint64_t value, size_t width) {
    std::string copy = bytes;
    std::memcpy(&copy[at], &value, width);
    return copy;
  };
  const size_t info = tensor_info_at(bytes, "weights");
  const size_t type_at = info + 8 + 7 + 4 + 2 * 8, offset_at = type_at + 4;

  CHECK(damaged("magic.gguf", "GGML" + bytes.substr(4)) ==
        dir.path() + "/magic.gguf: not a GGUF file: bad magic \"GGML\" (expected \"GGUF\")");
  CHECK(damaged("short.gguf", "GG") == dir.path() + "/short.gguf: not a GGUF file: 2 bytes, shorter than the magic");
  CHECK(damaged("version.gguf", patched(4, 4, 4)) ==
        dir.path() + "/version.gguf: not a valid GGUF file: version 4 (this reader knows 2 and 3)");
  CHECK(damaged("header.gguf", bytes.substr(0, info + 5)).find("header.gguf: not a valid GGUF file: truncated: a tensor "
                                                               "name at byte") != std::string::npos);
  CHECK(damaged("type.gguf", patched(type_at, 2, 4)) ==
        dir.path() + "/type.gguf: not a valid GGUF file: tensor weights: tensor type 2 is not supported (F32 = 0, F16 = 1, "
                     "Q8_0 = 8, BF16 = 30)");
  CHECK(damaged("offset.gguf", patched(offset_at, 1 << 20, 8)) ==
        dir.path() + "/offset.gguf: not a valid GGUF file: tensor weights: offset 1048576 + 256 bytes runs past the end "
                     "of the data (256 bytes; truncated file?)");
  CHECK(damaged("cut.gguf", bytes.substr(0, bytes.size() - 10)).find("tensor weights: offset 0 + 256 bytes runs past the "
                                                                     "end of the data (246 bytes; truncated file?)") !=
        std::string::npos);
  CHECK(damaged("kvtype.gguf", patched(24 + 8 + std::strlen("general.architecture"), 13, 4)) ==
        dir.path() + "/kvtype.gguf: not a valid GGUF file: metadata general.architecture: unknown value type 13 (known: 0 to 12)");
  CHECK(error_of([&] { GgufFile::open(dir.path() + "/absent.gguf"); }) ==
        dir.path() + "/absent.gguf: cannot open: No such file or directory");
}

TEST_CASE("Llama, Qwen2 and Qwen3 models round trip through GGUF; llama's q/k rows are stored interleaved") {
  for (const std::string& architecture : gguf_test_architectures()) {
    INFO(architecture);
    TempDir dir("tandem-gguf-");
    const ModelConfig config = write_gguf_test_model(architecture, dir.path() + "/hf", 3);
    const ModelWeights weights = load_model_weights(dir.path() + "/hf", config);
    write_gguf_model(dir.path() + "/m.gguf", config, weights, dir.path() + "/hf", GgufTensorType::gguf_f32);
    const auto file = GgufFile::open(dir.path() + "/m.gguf");
    CHECK(file->get_string("general.architecture") == architecture);
    CHECK(file->contains_tensor("output.weight") == !config.tie_word_embeddings);
    CHECK(file->contains_tensor("rope_freqs.weight") == (architecture == "llama"));
    CHECK(file->get_string("tokenizer.ggml.model") == "gpt2");
    CHECK(file->get_string("tokenizer.ggml.pre") == "gpt-2");
    CHECK(file->get_int("tokenizer.ggml.eos_token_id") == 256);
    CHECK(file->get_int("tokenizer.ggml.eot_token_id") == 258);

    // llama.cpp's interleaved layout for llama (LlamaModel.permute); qwen2/qwen3 as they are.
    const std::vector<float> q = file->tensor_to_float("blk.1.attn_q.weight");
    const WeightTensor& hf_q = weights.get("model.layers.1.self_attn.q_proj.weight");
    const int64_t columns = config.hidden_size, half = config.head_dim / 2;
    const int64_t hf_row = architecture == "llama" ? half : 1;  // file row 1 of head 0
    CHECK(std::equal(q.begin() + columns, q.begin() + 2 * columns, hf_q.data.begin() + hf_row * columns));

    const GgufModel back = read_gguf_model(*file);
    CHECK(model_config_to_json(back.config) == model_config_to_json(config));
    for (const WeightTensor& t : weights.tensors()) {
      INFO(t.name);
      if (config.tie_word_embeddings && t.name == "lm_head.weight") continue;
      CHECK(back.weights.get(t.name).data == t.data);  // float32 both ways: exact
    }

    // Smaller dtypes read back within their rounding.
    for (GgufTensorType type : {GgufTensorType::gguf_bf16, GgufTensorType::gguf_q8_0}) {
      const std::string path = dir.path() + "/" + gguf_tensor_type_name(type) + ".gguf";
      write_gguf_model(path, config, weights, "", type);
      const GgufModel small = read_gguf_model(path);
      const WeightTensor& down = small.weights.get("model.layers.0.mlp.down_proj.weight");
      const WeightTensor& original = weights.get("model.layers.0.mlp.down_proj.weight");
      double worst = 0, largest = 0;
      for (size_t i = 0; i < down.data.size(); ++i) {
        worst = std::max(worst, static_cast<double>(std::abs(down.data[i] - original.data[i])));
        largest = std::max(largest, static_cast<double>(std::abs(original.data[i])));
      }
      CHECK(worst <= largest / 127.0);  // a Q8_0 step of the largest value; bf16 is finer
      CHECK(small.weights.get("model.norm.weight").data == weights.get("model.norm.weight").data);  // norms stay F32
    }
  }
}

TEST_CASE("model.path may be a .gguf: converted once into the model cache, tokenizer included") {
  TempDir dir("tandem-gguf-");
  ::setenv("TANDEM_CACHE_DIR", (dir.path() + "/cache").c_str(), 1);
  const ModelConfig config = write_gguf_test_model("qwen3", dir.path() + "/hf", 5);
  const ModelWeights weights = load_model_weights(dir.path() + "/hf", config);
  fs::create_directories(dir.path() + "/g");
  const std::string gguf = dir.path() + "/g/model.gguf";
  write_gguf_model(gguf, config, weights, dir.path() + "/hf", GgufTensorType::gguf_f32);

  const std::string converted = resolve_model_path(gguf);
  CHECK(converted.rfind(dir.path() + "/cache/models/gguf-v1-", 0) == 0);
  CHECK(read_file(converted + "/tokenizer.json") == read_file(dir.path() + "/hf/tokenizer.json"));
  const auto first_write = fs::last_write_time(converted + "/config.json");
  CHECK(resolve_model_path(gguf) == converted);  // the second time: the same directory, not rewritten
  CHECK(fs::last_write_time(converted + "/config.json") == first_write);
  const ModelWeights loaded = load_model_weights(converted, read_model_config(converted + "/config.json"));
  CHECK(loaded.get("model.layers.1.self_attn.k_norm.weight").data ==
        weights.get("model.layers.1.self_attn.k_norm.weight").data);
  std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(converted);
  CHECK(tokenizer->encode("hi<|im_end|>") == std::vector<int32_t>{'h', 'i', 258});

  // A tokenizer.json beside the .gguf takes precedence over the embedded one, and is part of the key.
  write_byte_level_tokenizer(dir.path() + "/g", {"<|endoftext|>", "<|other|>", "<|im_end|>"});
  const std::string with_beside = resolve_model_path(gguf);
  CHECK(with_beside != converted);
  CHECK(load_tokenizer(with_beside)->token_to_id("<|other|>") == 257);

  // A damaged file is an error naming it; nothing is left in the cache.
  const std::string bytes = read_file(gguf).value();
  write_file_atomic(dir.path() + "/bad.gguf", bytes.substr(0, bytes.size() / 2));
  CHECK(error_of([&] { resolve_model_path(dir.path() + "/bad.gguf"); }).find(dir.path() + "/bad.gguf: not a valid GGUF "
                                                                           "file") != std::string::npos);
  size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path() + "/cache/models")) ++entries;
  CHECK(entries == 2);
  ::unsetenv("TANDEM_CACHE_DIR");
}

TEST_CASE("Qwen3's and Llama-2's tokenizers written as tokenizer.ggml.* (gpt2, llama) read back encoding as the originals") {
  // The real files when the tokenizer assets are there (scripts/fetch_tokenizer_assets.sh).
  struct Case {
    const char* name;
    int64_t rows;      // the model's embedding rows
    const char* model;  // the tokenizer.ggml.model expected
  };
  for (const Case& c : {Case{"qwen3", 151936, "gpt2"}, Case{"llama2", 32000, "llama"}}) {
    INFO(std::string(c.name));
    const std::string original_dir = std::string(TANDEM_SOURCE_DIR) + "/build/test-assets/" + c.name;
    if (!fs::exists(original_dir + "/tokenizer.json")) {
      MESSAGE("skipped: " << original_dir << "/tokenizer.json is absent (scripts/fetch_tokenizer_assets.sh)");
      continue;
    }
    std::unique_ptr<Tokenizer> original = load_tokenizer(original_dir);
    ModelConfig config = gguf_test_config("qwen3");
    config.vocab_size = c.rows;
    config.eos_token_ids = {original->token_to_id(c.rows == 32000 ? "</s>" : "<|im_end|>").value()};
    std::vector<std::pair<std::string, GgufValue>> meta;
    for (auto& [key, value] : gguf_tokenizer_metadata(original_dir, config)) {
      if (key != "tokenizer.huggingface.json") meta.emplace_back(key, value);  // rebuilt from the token list alone
    }
    TempDir dir("tandem-gguf-");
    write_gguf(dir.path() + "/vocab.gguf", meta, {});
    const auto file = GgufFile::open(dir.path() + "/vocab.gguf");
    CHECK(file->get_string("tokenizer.ggml.model") == c.model);
    if (c.rows == 151936) {
      CHECK(file->get_string("tokenizer.ggml.pre") == "qwen2");
      CHECK(file->get_string_array("tokenizer.ggml.tokens")[151935] == "[PAD151935]");
    } else {
      CHECK(file->get_bool("tokenizer.ggml.add_space_prefix"));
      CHECK(file->get_int_array("tokenizer.ggml.token_type")[3] == 6);  // <0x00>: BYTE
      CHECK(file->get_int_array("tokenizer.ggml.token_type")[0] == 2);  // <unk>: UNKNOWN
    }
    CHECK(write_gguf_tokenizer_files(*file, dir.path()));
    std::unique_ptr<Tokenizer> rebuilt = load_tokenizer(dir.path());
    CHECK(rebuilt->vocab_size() == original->vocab_size());
    for (const std::string& text : {std::string("Hello, world! 12345 don't"), std::string("  tabs\tand\n\nnewlines  "),
                                    std::string("中文 и русский <|im_start|>user\nhi<|im_end|></s>"),
                                    std::string("e\xCC\x81 (NFC) caf\xC3\xA9 🦙🦙 \x01")}) {
      INFO(text);
      CHECK(rebuilt->encode(text) == original->encode(text));
    }
  }
}
