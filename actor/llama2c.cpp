#include "actor/llama2c.h"

#include "core/error.h"
#include "core/files.h"

#include <fmt/format.h>

#include <cstring>
#include <filesystem>

namespace tandem {

namespace {

// Reads consecutive float32 tensors out of the file's bytes.
class TensorReader {
 public:
  TensorReader(const std::string& bytes, size_t offset, const std::string& path)
      : bytes_(bytes), offset_(offset), path_(path) {}

  std::vector<float> take(int64_t count, const std::string& what) {
    const size_t size = static_cast<size_t>(count) * sizeof(float);
    if (offset_ + size > bytes_.size()) {
      throw Error(fmt::format("{}: ends inside {} (at byte {}, {} bytes needed, file has {})", path_, what, offset_,
                              size, bytes_.size()));
    }
    std::vector<float> values(static_cast<size_t>(count));
    std::memcpy(values.data(), bytes_.data() + offset_, size);
    offset_ += size;
    return values;
  }
  size_t offset() const { return offset_; }

 private:
  const std::string& bytes_;
  size_t offset_;
  std::string path_;
};

// Rows [rows, columns] of one layer's wq or wk, reordered per head from interleaved-pair
// to rotate-half RoPE (llama2c.h).
std::vector<float> permute_for_rotate_half(const std::vector<float>& w, int64_t heads, int64_t head_dim,
                                           int64_t columns) {
  std::vector<float> out(w.size());
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t j = 0; j < head_dim; ++j) {
      const int64_t from = j < half ? 2 * j : 2 * (j - half) + 1;
      std::memcpy(&out[static_cast<size_t>((h * head_dim + j) * columns)],
                  &w[static_cast<size_t>((h * head_dim + from) * columns)], static_cast<size_t>(columns) * sizeof(float));
    }
  }
  return out;
}

}  // namespace

bool is_llama2c_path(const std::string& path) {
  return path.size() > 4 && path.compare(path.size() - 4, 4, ".bin") == 0 && std::filesystem::is_regular_file(path);
}

Llama2cModel read_llama2c(const std::string& path) {
  const std::optional<std::string> bytes = read_file(path);
  if (!bytes) throw Error(fmt::format("{}: cannot read: {}", path, std::strerror(errno)));
  if (bytes->size() < 7 * sizeof(int32_t)) {
    throw Error(fmt::format("{}: {} bytes, shorter than a llama2.c header (7 int32)", path, bytes->size()));
  }
  int32_t h[7];
  std::memcpy(h, bytes->data(), sizeof h);
  const int64_t dim = h[0], hidden = h[1], layers = h[2], heads = h[3], kv_heads = h[4], seq_len = h[6];
  const bool shared_classifier = h[5] > 0;
  const int64_t vocab = shared_classifier ? h[5] : -static_cast<int64_t>(h[5]);
  auto require = [&](bool ok, const std::string& what) {
    if (!ok) {
      throw Error(fmt::format("{}: not a llama2.c checkpoint: {} (header dim {}, hidden_dim {}, n_layers {}, n_heads {}, "
                              "n_kv_heads {}, vocab_size {}, seq_len {})",
                              path, what, h[0], h[1], h[2], h[3], h[4], h[5], h[6]));
    }
  };
  require(dim > 0 && hidden > 0 && layers > 0 && heads > 0 && kv_heads > 0 && vocab > 0 && seq_len > 0,
          "every header field must be positive");
  require(dim % heads == 0 && heads % kv_heads == 0 && (dim / heads) % 2 == 0,
          "dim must split into n_heads heads of even size, n_heads into n_kv_heads groups");
  const int64_t head_dim = dim / heads, kv_dim = kv_heads * head_dim;
  const int64_t floats = vocab * dim + layers * (2 * dim + 2 * dim * dim + 2 * kv_dim * dim + 3 * hidden * dim) + dim +
                         seq_len * head_dim + (shared_classifier ? 0 : vocab * dim);
  const size_t expected = 7 * sizeof(int32_t) + static_cast<size_t>(floats) * sizeof(float);
  require(bytes->size() == expected,
          fmt::format("{} bytes, and the header implies {} (7 int32 + {} float32)", bytes->size(), expected, floats));

  Llama2cModel m;
  ModelConfig& c = m.config;
  c.model_type = "llama";
  c.vocab_size = vocab;
  c.hidden_size = dim;
  c.intermediate_size = hidden;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.head_dim = head_dim;
  c.max_position_embeddings = seq_len;
  c.rms_norm_eps = 1e-5;  // llama2.c's rmsnorm
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = shared_classifier;
  c.bos_token_id = 1;  // the Llama-2 SentencePiece ids llama2.c uses
  c.eos_token_ids = {2};

  TensorReader in(*bytes, 7 * sizeof(int32_t), path);
  std::vector<WeightTensor> tensors;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, std::vector<float> data) {
    tensors.push_back({name, std::move(shape), std::move(data)});
  };
  // Per-layer tensors are stored layer-major for each kind: read each kind whole, then split.
  auto per_layer = [&](int64_t rows, int64_t columns, const std::string& what) {
    std::vector<std::vector<float>> out;
    const std::vector<float> all = in.take(layers * rows * columns, what);
    for (int64_t l = 0; l < layers; ++l) {
      out.emplace_back(all.begin() + l * rows * columns, all.begin() + (l + 1) * rows * columns);
    }
    return out;
  };
  std::vector<float> embedding = in.take(vocab * dim, "the token embedding");
  const auto rms_att = per_layer(1, dim, "the attention RMS weights");
  const auto wq = per_layer(dim, dim, "wq");
  const auto wk = per_layer(kv_dim, dim, "wk");
  const auto wv = per_layer(kv_dim, dim, "wv");
  const auto wo = per_layer(dim, dim, "wo");
  const auto rms_ffn = per_layer(1, dim, "the FFN RMS weights");
  const auto w1 = per_layer(hidden, dim, "w1");
  const auto w2 = per_layer(dim, hidden, "w2");
  const auto w3 = per_layer(hidden, dim, "w3");
  std::vector<float> rms_final = in.take(dim, "the final RMS weight");
  in.take(seq_len * head_dim, "the legacy RoPE tables");  // recomputed from rope_theta
  add("model.embed_tokens.weight", {vocab, dim}, embedding);
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    const size_t i = static_cast<size_t>(l);
    add(p + "input_layernorm.weight", {dim}, rms_att[i]);
    add(p + "self_attn.q_proj.weight", {dim, dim}, permute_for_rotate_half(wq[i], heads, head_dim, dim));
    add(p + "self_attn.k_proj.weight", {kv_dim, dim}, permute_for_rotate_half(wk[i], kv_heads, head_dim, dim));
    add(p + "self_attn.v_proj.weight", {kv_dim, dim}, wv[i]);
    add(p + "self_attn.o_proj.weight", {dim, dim}, wo[i]);
    add(p + "post_attention_layernorm.weight", {dim}, rms_ffn[i]);
    add(p + "mlp.gate_proj.weight", {hidden, dim}, w1[i]);
    add(p + "mlp.up_proj.weight", {hidden, dim}, w3[i]);
    add(p + "mlp.down_proj.weight", {dim, hidden}, w2[i]);
  }
  add("model.norm.weight", {dim}, rms_final);
  if (!shared_classifier) add("lm_head.weight", {vocab, dim}, in.take(vocab * dim, "the classifier"));
  m.weights = ModelWeights(std::move(tensors));
  check_weights(c, m.weights, path);
  return m;
}

}  // namespace tandem
