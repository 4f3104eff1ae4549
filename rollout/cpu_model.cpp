#include "rollout/cpu_model.h"

#include "core/error.h"
#include "rollout/cpu_ops.h"
#include "rollout/thread_pool.h"

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace tandem {

CpuModel::CpuModel(const ModelConfig& config, ModelWeights weights, int threads)
    : config_(config), weights_(std::move(weights)), pool_(std::make_unique<ThreadPool>(threads)) {
  check_weights(config_, weights_, "rollout engine");
  inverse_frequencies_ = rope_inverse_frequencies(config_);
  bind_weights();
}

CpuModel::~CpuModel() = default;

void CpuModel::bind_weights() {
  const ModelConfig& c = config_;
  auto w = [&](const std::string& name) { return weights_.get(name).data.data(); };
  layers_.clear();
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    const std::string p = "model.layers." + std::to_string(layer) + ".";
    LayerWeights l{};
    l.input_norm = w(p + "input_layernorm.weight");
    l.q = w(p + "self_attn.q_proj.weight");
    l.k = w(p + "self_attn.k_proj.weight");
    l.v = w(p + "self_attn.v_proj.weight");
    if (c.attention_bias) {
      l.q_bias = w(p + "self_attn.q_proj.bias");
      l.k_bias = w(p + "self_attn.k_proj.bias");
      l.v_bias = w(p + "self_attn.v_proj.bias");
    }
    if (c.qk_norm) {
      l.q_norm = w(p + "self_attn.q_norm.weight");
      l.k_norm = w(p + "self_attn.k_norm.weight");
    }
    l.o = w(p + "self_attn.o_proj.weight");
    if (c.o_proj_bias()) l.o_bias = w(p + "self_attn.o_proj.bias");
    l.post_norm = w(p + "post_attention_layernorm.weight");
    l.gate = w(p + "mlp.gate_proj.weight");
    l.up = w(p + "mlp.up_proj.weight");
    l.down = w(p + "mlp.down_proj.weight");
    layers_.push_back(l);
  }
  embed_ = w("model.embed_tokens.weight");
  final_norm_ = w("model.norm.weight");
  lm_head_ = c.num_labels > 0 ? w("score.weight") : c.tie_word_embeddings ? embed_ : w("lm_head.weight");
}

void CpuModel::update_weights(const ModelWeights& update) {
  // Check everything before touching anything.
  for (const WeightTensor& t : update.tensors()) {
    if (!weights_.contains(t.name)) {
      throw Error(fmt::format("weight update: unexpected tensor {} (not part of this {} model)", t.name,
                              config_.model_type));
    }
    const WeightTensor& current = weights_.get(t.name);
    if (current.shape != t.shape) {
      throw Error(fmt::format("weight update: tensor {} has shape [{}], the engine's is [{}]", t.name,
                              fmt::join(t.shape, ", "), fmt::join(current.shape, ", ")));
    }
  }
  for (const WeightTensor& t : update.tensors()) {
    WeightTensor& current = weights_.get_mutable(t.name);
    std::memcpy(current.data.data(), t.data.data(), t.data.size() * sizeof(float));
  }
}

void CpuModel::forward(const ForwardBatch& batch, KvCache& cache, std::vector<float>& logits) {
  const ModelConfig& c = config_;
  const int64_t tokens = static_cast<int64_t>(batch.tokens.size());
  const int64_t hidden = c.hidden_size, qs = c.q_size(), kvs = c.kv_size(), inter = c.intermediate_size;
  const int64_t half = c.head_dim / 2;
  TANDEM_CHECK(tokens > 0, "forward with no tokens");
  x_.resize(tokens * hidden);
  h_.resize(tokens * hidden);
  q_.resize(tokens * qs);
  k_.resize(tokens * kvs);
  v_.resize(tokens * kvs);
  attn_.resize(tokens * qs);
  gate_.resize(tokens * inter);
  up_.resize(tokens * inter);
  cos_.resize(tokens * half);
  sin_.resize(tokens * half);
  positions_.resize(tokens);

  token_block_table_.resize(tokens);
  attention_multiply_adds_ = 0;
  for (const ForwardSequence& s : batch.sequences) {
    for (int64_t t = s.token_begin; t < s.token_end; ++t) {
      positions_[t] = s.start_position + (t - s.token_begin);
      token_block_table_[t] = s.block_table;
      attention_multiply_adds_ += 2 * (positions_[t] + 1) * c.q_size();  // q.k and p.v over the context
    }
  }
  for (int64_t t = 0; t < tokens; ++t) {
    const int32_t id = batch.tokens[t];
    TANDEM_CHECK(id >= 0 && id < c.vocab_size, "token id {} outside the vocabulary (0..{})", id, c.vocab_size - 1);
    std::memcpy(&x_[t * hidden], embed_ + static_cast<int64_t>(id) * hidden, hidden * sizeof(float));
    // Angles in float64 (as the learner computes them), then rounded once.
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(positions_[t]) * inverse_frequencies_[i];
      cos_[t * half + i] = static_cast<float>(std::cos(angle));
      sin_[t * half + i] = static_cast<float>(std::sin(angle));
    }
  }

  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    const LayerWeights& l = layers_[layer];
    cpu::rms_norm(*pool_, x_.data(), tokens, hidden, l.input_norm, c.rms_norm_eps, h_.data());
    cpu::linear(*pool_, h_.data(), tokens, hidden, l.q, l.q_bias, qs, q_.data());
    cpu::linear(*pool_, h_.data(), tokens, hidden, l.k, l.k_bias, kvs, k_.data());
    cpu::linear(*pool_, h_.data(), tokens, hidden, l.v, l.v_bias, kvs, v_.data());
    if (c.qk_norm) {
      cpu::rms_norm(*pool_, q_.data(), tokens * c.num_attention_heads, c.head_dim, l.q_norm, c.rms_norm_eps, q_.data());
      cpu::rms_norm(*pool_, k_.data(), tokens * c.num_key_value_heads, c.head_dim, l.k_norm, c.rms_norm_eps, k_.data());
    }
    cpu::rope(*pool_, q_.data(), tokens, c.num_attention_heads, c.head_dim, cos_.data(), sin_.data());
    cpu::rope(*pool_, k_.data(), tokens, c.num_key_value_heads, c.head_dim, cos_.data(), sin_.data());
    // Append this step's keys and values at their positions, then attend over the cache.
    const int64_t block_size = cache.shape().block_size;
    for (const ForwardSequence& s : batch.sequences) {
      for (int64_t t = s.token_begin; t < s.token_end; ++t) {
        const int64_t block = s.block_table[positions_[t] / block_size];
        const int64_t slot = positions_[t] % block_size;
        std::memcpy(cache.key(layer, block, slot), &k_[t * kvs], kvs * sizeof(float));
        std::memcpy(cache.value(layer, block, slot), &v_[t * kvs], kvs * sizeof(float));
      }
    }
    attention(batch, layer, cache);
    cpu::linear(*pool_, attn_.data(), tokens, qs, l.o, l.o_bias, hidden, h_.data());
    for (int64_t i = 0; i < tokens * hidden; ++i) x_[i] += h_[i];

    cpu::rms_norm(*pool_, x_.data(), tokens, hidden, l.post_norm, c.rms_norm_eps, h_.data());
    cpu::linear(*pool_, h_.data(), tokens, hidden, l.gate, nullptr, inter, gate_.data());
    cpu::linear(*pool_, h_.data(), tokens, hidden, l.up, nullptr, inter, up_.data());
    cpu::silu_mul(*pool_, gate_.data(), up_.data(), tokens * inter, gate_.data());
    cpu::linear(*pool_, gate_.data(), tokens, inter, l.down, nullptr, hidden, h_.data());
    for (int64_t i = 0; i < tokens * hidden; ++i) x_[i] += h_[i];
  }

  // Only the rows whose logits are wanted go through the final norm and the head.
  const int64_t rows = static_cast<int64_t>(batch.logit_rows.size());
  rows_.resize(rows * hidden);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = batch.logit_rows[r];
    TANDEM_CHECK(t >= 0 && t < tokens, "logit row {} outside the step's {} tokens", t, tokens);
    std::memcpy(&rows_[r * hidden], &x_[t * hidden], hidden * sizeof(float));
  }
  cpu::rms_norm(*pool_, rows_.data(), rows, hidden, final_norm_, c.rms_norm_eps, rows_.data());
  logits.resize(rows * c.head_rows());
  if (rows > 0) cpu::linear(*pool_, rows_.data(), rows, hidden, lm_head_, nullptr, c.head_rows(), logits.data());
}

void CpuModel::attention(const ForwardBatch& batch, int64_t layer, const KvCache& cache) {
  const ModelConfig& c = config_;
  const int64_t heads = c.num_attention_heads, head_dim = c.head_dim;
  const int64_t group = c.num_attention_heads / c.num_key_value_heads;
  const int64_t block_size = cache.shape().block_size;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  // Work items: (token, head) pairs, each independent.
  const int64_t work = static_cast<int64_t>(batch.tokens.size()) * heads;
  auto attend = [&](int64_t w, std::vector<float>& scores) {
    const int64_t token = w / heads;
    const int32_t* block_table = token_block_table_[token];
    const int64_t head = w % heads;
    const int64_t kv_head = head / group;
    const int64_t context = positions_[token] + 1;  // causal: positions 0..p
    const float* q = &q_[(token * heads + head) * head_dim];
    scores.resize(context);
    float max_score = -INFINITY;
    for (int64_t j = 0; j < context; ++j) {
      const float* k = cache.key(layer, block_table[j / block_size], j % block_size) + kv_head * head_dim;
      // Eigen's dot is vectorised (a plain loop is not: float sums cannot be reordered).
      scores[j] = Eigen::Map<const Eigen::VectorXf>(q, head_dim).dot(Eigen::Map<const Eigen::VectorXf>(k, head_dim)) * scale;
      max_score = std::max(max_score, scores[j]);
    }
    float sum = 0;
    for (int64_t j = 0; j < context; ++j) {
      scores[j] = std::exp(scores[j] - max_score);
      sum += scores[j];
    }
    float* out = &attn_[(token * heads + head) * head_dim];
    std::fill(out, out + head_dim, 0.0f);
    for (int64_t j = 0; j < context; ++j) {
      const float* v = cache.value(layer, block_table[j / block_size], j % block_size) + kv_head * head_dim;
      const float p = scores[j] / sum;
      for (int64_t d = 0; d < head_dim; ++d) out[d] += p * v[d];
    }
  };
  // Below ~2^18 multiply-adds one thread is faster than handing out chunks.
  const int64_t chunks = attention_multiply_adds_ >= (int64_t{1} << 18) ? std::min<int64_t>(work, 8 * pool_->threads()) : 1;
  pool_->run(chunks, [&](int64_t chunk) {
    std::vector<float> scores;
    for (int64_t w = chunk * work / chunks; w < (chunk + 1) * work / chunks; ++w) attend(w, scores);
  });
}

}  // namespace tandem
