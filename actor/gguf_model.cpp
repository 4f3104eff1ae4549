#include "actor/gguf_model.h"

#include "actor/gguf_tokenizer.h"
#include "core/error.h"
#include "core/files.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

namespace tandem {

namespace fs = std::filesystem;

namespace {

// HF tensor name suffixes within a layer and their GGUF names.
struct LayerTensorName {
  const char* hf;
  const char* gguf;
};
constexpr LayerTensorName layer_tensor_names[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.o_proj.bias", "attn_output.bias"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
};

// The GGUF name of an HF tensor name (expected_weights' names only).
std::string gguf_tensor_name(const std::string& hf) {
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  if (hf == "lm_head.weight") return "output.weight";
  const std::string prefix = "model.layers.";
  TANDEM_CHECK(hf.rfind(prefix, 0) == 0, "no GGUF name for tensor {}", hf);
  const size_t dot = hf.find('.', prefix.size());
  const std::string layer = hf.substr(prefix.size(), dot - prefix.size());
  const std::string rest = hf.substr(dot + 1);
  for (const auto& n : layer_tensor_names) {
    if (rest == n.hf) return "blk." + layer + "." + n.gguf;
  }
  TANDEM_CHECK(false, "no GGUF name for tensor {}", hf);
}

bool is_q_or_k(const std::string& hf) {
  return hf.find("self_attn.q_proj.") != std::string::npos || hf.find("self_attn.k_proj.") != std::string::npos;
}

// llama's q/k rows between HF's rotate-half layout and llama.cpp's interleaved pairs:
// interleaved row 2i + s of a head is HF row s * head_dim/2 + i (LlamaModel.permute).
std::vector<float> permute_rows(const std::vector<float>& w, int64_t rows, int64_t columns, int64_t head_dim,
                                bool to_interleaved) {
  std::vector<float> out(w.size());
  const int64_t half = head_dim / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t head = r / head_dim, j = r % head_dim;
    const int64_t hf_row = head * head_dim + (j % 2) * half + j / 2;  // j is the interleaved index
    const int64_t il_row = r;
    const int64_t from = to_interleaved ? hf_row : il_row, to = to_interleaved ? il_row : hf_row;
    std::memcpy(&out[static_cast<size_t>(to * columns)], &w[static_cast<size_t>(from * columns)],
                static_cast<size_t>(columns) * sizeof(float));
  }
  return out;
}

// A float32 metadata value as the decimal it was written from (1e-6f reads as 1e-06, not
// 9.99999997e-07), so a round trip gives config.json its own numbers back.
double shortest_decimal(double value) { return std::stod(fmt::format("{}", static_cast<float>(value))); }

// Llama 3 RoPE scaling from llama.cpp's rope_freqs factors: the converter's formula
// (LlamaModel.generate_extra_tensors) with factor = the largest factor, tried with the
// published Llama 3.x band settings; anything else is an Error.
RopeScaling llama3_scaling_from_factors(const std::vector<float>& factors, const ModelConfig& c, const std::string& path) {
  RopeScaling s;
  s.type = "llama3";
  s.factor = *std::max_element(factors.begin(), factors.end());
  for (const int64_t original : {8192, 16384, 32768}) {
    s.original_max_position_embeddings = original;
    ModelConfig scaled = c;
    scaled.rope_scaling = s;
    ModelConfig plain = c;
    plain.rope_scaling = RopeScaling{};
    const std::vector<double> with = rope_inverse_frequencies(scaled), without = rope_inverse_frequencies(plain);
    bool match = true;
    for (size_t i = 0; i < factors.size() && match; ++i) {
      match = std::fabs(without[i] / with[i] - factors[i]) <= 1e-4 * factors[i];
    }
    if (match) return s;
  }
  throw Error(fmt::format("{}: rope_freqs.weight holds RoPE factors that are not Llama 3 scaling with factor {}, "
                          "low_freq_factor 1, high_freq_factor 4 (the settings read)",
                          path, s.factor));
}

std::vector<float> rope_freqs_factors(const ModelConfig& c) {
  ModelConfig plain = c;
  plain.rope_scaling = RopeScaling{};
  const std::vector<double> with = rope_inverse_frequencies(c), without = rope_inverse_frequencies(plain);
  std::vector<float> factors;
  for (size_t i = 0; i < with.size(); ++i) factors.push_back(static_cast<float>(without[i] / with[i]));
  return factors;
}

}  // namespace

bool is_gguf_path(const std::string& path) {
  return path.size() > 5 && path.compare(path.size() - 5, 5, ".gguf") == 0 && fs::is_regular_file(path);
}

GgufModel read_gguf_model(const std::string& path) { return read_gguf_model(*GgufFile::open(path)); }

GgufModel read_gguf_model(const GgufFile& file) {
  const std::string& path = file.path();
  GgufModel m;
  ModelConfig& c = m.config;
  c.model_type = file.get_string("general.architecture");
  const std::vector<std::string> supported = {"llama", "qwen2", "qwen3"};
  if (std::find(supported.begin(), supported.end(), c.model_type) == supported.end()) {
    throw Error(fmt::format("{}: general.architecture \"{}\" is not supported (supported: llama, qwen2, qwen3)", path,
                            c.model_type));
  }
  const std::string a = c.model_type + ".";
  auto positive = [&](const std::string& key) {
    const int64_t v = file.get_int(a + key);
    if (v <= 0) throw Error(fmt::format("{}: {}{} is {}, expected a positive integer", path, a, key, v));
    return v;
  };
  c.hidden_size = positive("embedding_length");
  c.num_hidden_layers = positive("block_count");
  c.intermediate_size = positive("feed_forward_length");
  c.num_attention_heads = positive("attention.head_count");
  c.num_key_value_heads = file.contains_key(a + "attention.head_count_kv") ? positive("attention.head_count_kv")
                                                                          : c.num_attention_heads;
  c.head_dim = file.contains_key(a + "attention.key_length") ? positive("attention.key_length")
                                                              : c.hidden_size / c.num_attention_heads;
  if (file.contains_key(a + "attention.value_length") && file.get_int(a + "attention.value_length") != c.head_dim) {
    throw Error(fmt::format("{}: attention.value_length {} differs from key_length {} (not supported)", path,
                            file.get_int(a + "attention.value_length"), c.head_dim));
  }
  if (file.contains_key(a + "rope.dimension_count") && file.get_int(a + "rope.dimension_count") != c.head_dim) {
    throw Error(fmt::format("{}: rope.dimension_count {} is not the head size {} (partial RoPE is not supported)", path,
                            file.get_int(a + "rope.dimension_count"), c.head_dim));
  }
  if (c.num_attention_heads % c.num_key_value_heads != 0 || c.head_dim % 2 != 0) {
    throw Error(fmt::format("{}: {} heads, {} key/value heads, head size {}: heads must split into groups and the head "
                            "size be even", path, c.num_attention_heads, c.num_key_value_heads, c.head_dim));
  }
  c.max_position_embeddings = file.find_int(a + "context_length").value_or(4096);
  c.rms_norm_eps = shortest_decimal(file.get_float(a + "attention.layer_norm_rms_epsilon"));
  c.rope_theta = shortest_decimal(file.find_float(a + "rope.freq_base").value_or(10000.0));
  if (const auto type = file.find_string(a + "rope.scaling.type"); type && *type != "none") {
    throw Error(fmt::format("{}: rope.scaling.type \"{}\" is not supported", path, *type));
  }
  c.qk_norm = c.model_type == "qwen3";
  c.attention_bias = c.model_type == "qwen2" || file.contains_tensor("blk.0.attn_q.bias");
  c.tie_word_embeddings = !file.contains_tensor("output.weight");
  const GgufTensorInfo& embedding = file.tensor("token_embd.weight");
  if (embedding.shape.size() != 2 || embedding.shape[1] != c.hidden_size) {
    throw Error(fmt::format("{}: token_embd.weight has shape [{}], expected [vocab, {}]", path,
                            fmt::join(embedding.shape, ", "), c.hidden_size));
  }
  c.vocab_size = embedding.shape[0];
  if (file.contains_tensor("rope_freqs.weight")) {
    c.rope_scaling = llama3_scaling_from_factors(file.tensor_to_float("rope_freqs.weight"), c, path);
  }
  if (const auto bos = file.find_int("tokenizer.ggml.bos_token_id")) c.bos_token_id = *bos;
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"}) {
    const auto id = file.find_int(key);
    if (id && std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), *id) == c.eos_token_ids.end()) {
      c.eos_token_ids.push_back(*id);
    }
  }

  std::vector<WeightTensor> tensors;
  for (const WeightSpec& spec : expected_weights(c)) {
    const std::string name = gguf_tensor_name(spec.name);
    const GgufTensorInfo& t = file.tensor(name);
    if (t.shape != spec.shape) {
      throw Error(fmt::format("{}: tensor {} has shape [{}], expected [{}] (for {})", path, name, fmt::join(t.shape, ", "),
                              fmt::join(spec.shape, ", "), spec.name));
    }
    std::vector<float> data = gguf_dequantize(t.type, t.data, t.numel());
    if (c.model_type == "llama" && is_q_or_k(spec.name)) {
      const int64_t columns = spec.shape.size() == 2 ? spec.shape[1] : 1;
      data = permute_rows(data, spec.shape[0], columns, c.head_dim, /*to_interleaved=*/false);
    }
    tensors.push_back({spec.name, spec.shape, std::move(data)});
  }
  m.weights = ModelWeights(std::move(tensors));
  return m;
}

void write_gguf_model(const std::string& path, const ModelConfig& c, const ModelWeights& weights,
                      const std::string& tokenizer_dir, GgufTensorType dtype) {
  check_weights(c, weights, "the model to export");
  if (c.model_type == "qwen2" && c.q_size() != c.hidden_size) {
    throw Error(fmt::format("qwen2 with {} heads of {} (q size {}) is not hidden_size {}: llama.cpp's qwen2 cannot "
                            "load it", c.num_attention_heads, c.head_dim, c.q_size(), c.hidden_size));
  }
  const std::string a = c.model_type + ".";
  std::vector<std::pair<std::string, GgufValue>> meta = {
      {"general.architecture", GgufValue::of_string(c.model_type)},
      {"general.name", GgufValue::of_string(fs::path(path).stem().string())},
      {"general.file_type", GgufValue::of_uint32(dtype == GgufTensorType::gguf_f32    ? 0
                                                 : dtype == GgufTensorType::gguf_f16  ? 1
                                                 : dtype == GgufTensorType::gguf_q8_0 ? 7
                                                                                      : 32)},
      {a + "vocab_size", GgufValue::of_uint32(static_cast<uint32_t>(c.vocab_size))},
      {a + "context_length", GgufValue::of_uint32(static_cast<uint32_t>(c.max_position_embeddings))},
      {a + "embedding_length", GgufValue::of_uint32(static_cast<uint32_t>(c.hidden_size))},
      {a + "block_count", GgufValue::of_uint32(static_cast<uint32_t>(c.num_hidden_layers))},
      {a + "feed_forward_length", GgufValue::of_uint32(static_cast<uint32_t>(c.intermediate_size))},
      {a + "attention.head_count", GgufValue::of_uint32(static_cast<uint32_t>(c.num_attention_heads))},
      {a + "attention.head_count_kv", GgufValue::of_uint32(static_cast<uint32_t>(c.num_key_value_heads))},
      {a + "attention.key_length", GgufValue::of_uint32(static_cast<uint32_t>(c.head_dim))},
      {a + "attention.value_length", GgufValue::of_uint32(static_cast<uint32_t>(c.head_dim))},
      {a + "attention.layer_norm_rms_epsilon", GgufValue::of_float32(static_cast<float>(c.rms_norm_eps))},
      {a + "rope.freq_base", GgufValue::of_float32(static_cast<float>(c.rope_theta))},
      {a + "rope.dimension_count", GgufValue::of_uint32(static_cast<uint32_t>(c.head_dim))},
  };
  for (auto& entry : gguf_tokenizer_metadata(tokenizer_dir, c)) meta.push_back(std::move(entry));

  // Permuted copies must outlive write_gguf, which reads the values through pointers (a
  // moved std::vector keeps its buffer, so growing `permuted` leaves them valid).
  std::vector<std::vector<float>> permuted;
  std::vector<float> rope_factors;
  std::vector<GgufTensorToWrite> tensors;
  for (const WeightTensor& w : weights.tensors()) {
    if (c.tie_word_embeddings && w.name == "lm_head.weight") continue;
    GgufTensorToWrite t;
    t.name = gguf_tensor_name(w.name);
    t.shape = w.shape;
    t.values = w.data.data();
    t.type = w.shape.size() == 1 ? GgufTensorType::gguf_f32 : dtype;
    if (t.type == GgufTensorType::gguf_q8_0 && w.shape.back() % 32 != 0) t.type = GgufTensorType::gguf_f16;
    if (c.model_type == "llama" && is_q_or_k(w.name)) {
      const int64_t columns = w.shape.size() == 2 ? w.shape[1] : 1;
      permuted.push_back(permute_rows(w.data, w.shape[0], columns, c.head_dim, /*to_interleaved=*/true));
      t.values = permuted.back().data();
    }
    tensors.push_back(std::move(t));
  }
  if (c.rope_scaling.type == "llama3") {
    rope_factors = rope_freqs_factors(c);
    tensors.push_back({"rope_freqs.weight", GgufTensorType::gguf_f32, {static_cast<int64_t>(rope_factors.size())},
                       rope_factors.data()});
  }
  write_gguf(path, meta, tensors);
}

void convert_gguf_to_hf(const std::string& gguf_path, const std::string& out_dir, DType dtype) {
  const std::unique_ptr<GgufFile> file = GgufFile::open(gguf_path);
  GgufModel model = read_gguf_model(*file);
  model.config.torch_dtype = dtype == DType::bf16 ? "bfloat16" : dtype == DType::f16 ? "float16" : "float32";
  fs::create_directories(out_dir);
  write_file_atomic(out_dir + "/config.json", model_config_to_json(model.config));
  save_model_weights(out_dir, model.weights, dtype);
  const fs::path beside = fs::path(gguf_path).parent_path();
  if (fs::exists(beside / "tokenizer.json")) {
    fs::copy_file(beside / "tokenizer.json", fs::path(out_dir) / "tokenizer.json", fs::copy_options::overwrite_existing);
    if (fs::exists(beside / "tokenizer_config.json")) {
      fs::copy_file(beside / "tokenizer_config.json", fs::path(out_dir) / "tokenizer_config.json",
                    fs::copy_options::overwrite_existing);
    }
  } else {
    write_gguf_tokenizer_files(*file, out_dir);
  }
}

}  // namespace tandem
