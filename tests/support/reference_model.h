// Test-only: an independent float64 forward of the Llama/Qwen architecture, written as
// plainly as possible (no shared code with actor/ or rollout/ beyond the weight names),
// and small random model configs covering each architecture feature.
#pragma once

#include "actor/model_config.h"
#include "actor/model_weights.h"
#include "core/half.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace tandem::testing {

using Matrix = std::vector<std::vector<double>>;  // [rows][cols]

// `length` token ids drawn uniformly from [0, limit).
inline std::vector<int32_t> random_tokens(std::mt19937_64& rng, int64_t length, int64_t limit) {
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(limit) - 1);
  std::vector<int32_t> tokens(static_cast<size_t>(length));
  for (int32_t& t : tokens) t = pick(rng);
  return tokens;
}

inline std::vector<double> ref_linear(const WeightTensor& w, const std::vector<double>& x, const WeightTensor* bias) {
  const int64_t out = w.shape[0], in = w.shape[1];
  std::vector<double> y(out, 0.0);
  for (int64_t o = 0; o < out; ++o) {
    double sum = bias ? bias->data[o] : 0.0;
    for (int64_t i = 0; i < in; ++i) sum += static_cast<double>(w.data[o * in + i]) * x[i];
    y[o] = sum;
  }
  return y;
}

inline void ref_rms_norm(double* x, int64_t n, const WeightTensor& w, int64_t w_offset, double eps) {
  double mean_sq = 0;
  for (int64_t i = 0; i < n; ++i) mean_sq += x[i] * x[i];
  mean_sq /= static_cast<double>(n);
  const double r = 1.0 / std::sqrt(mean_sq + eps);
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] * r * w.data[w_offset + i];
}

// Rotation of one head by angle pos * f_i, pairing element i with i + head_dim/2.
inline void ref_rope(double* head, int64_t head_dim, int64_t pos, const ModelConfig& c) {
  const int64_t half = head_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    double f = 1.0 / std::pow(c.rope_theta, 2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
    if (c.rope_scaling.type == "llama3") {
      const auto& s = c.rope_scaling;
      const double wavelength = 2 * M_PI / f;
      const double low = s.original_max_position_embeddings / s.low_freq_factor;
      const double high = s.original_max_position_embeddings / s.high_freq_factor;
      if (wavelength > low) {
        f /= s.factor;
      } else if (wavelength >= high) {
        const double smooth = (s.original_max_position_embeddings / wavelength - s.low_freq_factor) /
                              (s.high_freq_factor - s.low_freq_factor);
        f = (1 - smooth) * f / s.factor + smooth * f;
      }
    }
    const double a = static_cast<double>(pos) * f;
    const double x1 = head[i], x2 = head[i + half];
    head[i] = x1 * std::cos(a) - x2 * std::sin(a);
    head[i + half] = x2 * std::cos(a) + x1 * std::sin(a);
  }
}

// Which values the forward rounds to bfloat16 on the way (as a backend does that
// multiplies bf16 pairs): none by default, the exact float64 forward.
struct ReferenceRounding {
  // Every matrix product's input row (the q/k/v input, the attention output, the gate/up
  // input, the down input, the head's input) rounded to the nearest bfloat16 first.
  bool bf16_product_inputs = false;
};

// Rounds `x` to the nearest bfloat16 when `on` (through float32, as a float32 backend would).
inline void ref_round_bf16(std::vector<double>& x, bool on) {
  if (!on) return;
  for (double& v : x) v = bf16_to_float(float_to_bf16(static_cast<float>(v)));
}

// Logits [tokens][vocab] of one sequence starting at position 0 (a classifier's, config
// num_labels > 0: [tokens][labels] through score.weight).
// `rounding`: which values it rounds to bfloat16 on the way.
inline Matrix reference_logits(const ModelConfig& c, const ModelWeights& w, const std::vector<int32_t>& tokens,
                               ReferenceRounding rounding = {}) {
  const bool round_inputs = rounding.bf16_product_inputs;
  const int64_t n = static_cast<int64_t>(tokens.size()), hd = c.head_dim, hidden = c.hidden_size;
  const int64_t heads = c.num_attention_heads, kv_heads = c.num_key_value_heads;
  const WeightTensor& embed = w.get("model.embed_tokens.weight");
  Matrix x(n, std::vector<double>(hidden));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < hidden; ++i) x[t][i] = embed.data[tokens[t] * hidden + i];
  auto opt = [&](const std::string& name) { return w.contains(name) ? &w.get(name) : nullptr; };

  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    const std::string p = "model.layers." + std::to_string(layer) + ".";
    Matrix q(n), k(n), v(n);
    for (int64_t t = 0; t < n; ++t) {
      std::vector<double> h = x[t];
      ref_rms_norm(h.data(), hidden, w.get(p + "input_layernorm.weight"), 0, c.rms_norm_eps);
      ref_round_bf16(h, round_inputs);
      q[t] = ref_linear(w.get(p + "self_attn.q_proj.weight"), h, opt(p + "self_attn.q_proj.bias"));
      k[t] = ref_linear(w.get(p + "self_attn.k_proj.weight"), h, opt(p + "self_attn.k_proj.bias"));
      v[t] = ref_linear(w.get(p + "self_attn.v_proj.weight"), h, opt(p + "self_attn.v_proj.bias"));
      for (int64_t hh = 0; hh < heads; ++hh) {
        if (c.qk_norm) ref_rms_norm(&q[t][hh * hd], hd, w.get(p + "self_attn.q_norm.weight"), 0, c.rms_norm_eps);
        ref_rope(&q[t][hh * hd], hd, t, c);
      }
      for (int64_t hh = 0; hh < kv_heads; ++hh) {
        if (c.qk_norm) ref_rms_norm(&k[t][hh * hd], hd, w.get(p + "self_attn.k_norm.weight"), 0, c.rms_norm_eps);
        ref_rope(&k[t][hh * hd], hd, t, c);
      }
    }
    for (int64_t t = 0; t < n; ++t) {
      std::vector<double> attn(heads * hd, 0.0);
      for (int64_t hh = 0; hh < heads; ++hh) {
        const int64_t g = hh / (heads / kv_heads);
        std::vector<double> score(t + 1);
        double max_score = -1e300;
        for (int64_t j = 0; j <= t; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < hd; ++d) dot += q[t][hh * hd + d] * k[j][g * hd + d];
          score[j] = dot / std::sqrt(static_cast<double>(hd));
          max_score = std::max(max_score, score[j]);
        }
        double total = 0;
        for (double& s : score) total += (s = std::exp(s - max_score));
        for (int64_t j = 0; j <= t; ++j)
          for (int64_t d = 0; d < hd; ++d) attn[hh * hd + d] += score[j] / total * v[j][g * hd + d];
      }
      ref_round_bf16(attn, round_inputs);
      std::vector<double> o = ref_linear(w.get(p + "self_attn.o_proj.weight"), attn, opt(p + "self_attn.o_proj.bias"));
      for (int64_t i = 0; i < hidden; ++i) x[t][i] += o[i];
      std::vector<double> h = x[t];
      ref_rms_norm(h.data(), hidden, w.get(p + "post_attention_layernorm.weight"), 0, c.rms_norm_eps);
      ref_round_bf16(h, round_inputs);
      std::vector<double> gate = ref_linear(w.get(p + "mlp.gate_proj.weight"), h, nullptr);
      std::vector<double> up = ref_linear(w.get(p + "mlp.up_proj.weight"), h, nullptr);
      for (size_t i = 0; i < gate.size(); ++i) gate[i] = gate[i] / (1 + std::exp(-gate[i])) * up[i];
      ref_round_bf16(gate, round_inputs);
      std::vector<double> down = ref_linear(w.get(p + "mlp.down_proj.weight"), gate, nullptr);
      for (int64_t i = 0; i < hidden; ++i) x[t][i] += down[i];
    }
  }
  const WeightTensor& head = c.num_labels > 0          ? w.get("score.weight")
                            : c.tie_word_embeddings ? embed
                                                    : w.get("lm_head.weight");
  Matrix logits(n);
  for (int64_t t = 0; t < n; ++t) {
    ref_rms_norm(x[t].data(), hidden, w.get("model.norm.weight"), 0, c.rms_norm_eps);
    ref_round_bf16(x[t], round_inputs);
    logits[t] = ref_linear(head, x[t], nullptr);
  }
  return logits;
}

// log softmax(logits / temperature) in float64.
inline std::vector<double> reference_log_softmax(const std::vector<double>& logits, double temperature) {
  double max_z = -1e300;
  for (double l : logits) max_z = std::max(max_z, l / temperature);
  double total = 0;
  for (double l : logits) total += std::exp(l / temperature - max_z);
  std::vector<double> out;
  for (double l : logits) out.push_back(l / temperature - max_z - std::log(total));
  return out;
}

// A small model of each family, one per architecture feature worth testing.
struct TestModel {
  std::string name;
  ModelConfig config;
};

inline std::vector<TestModel> test_models() {
  auto base = [](const std::string& type) {
    ModelConfig c;
    c.model_type = type;
    c.vocab_size = 97;
    c.hidden_size = 48;
    c.intermediate_size = 80;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 6;
    c.num_key_value_heads = 2;  // grouped-query attention: 3 query heads per kv head
    c.head_dim = 8;
    c.max_position_embeddings = 512;
    c.rms_norm_eps = 1e-6;
    c.rope_theta = 10000.0;
    c.eos_token_ids = {96};
    return c;
  };
  std::vector<TestModel> models;
  ModelConfig llama = base("llama");
  llama.rope_scaling.type = "llama3";  // rope scaling, untied head, no biases
  llama.rope_scaling.factor = 8.0;
  llama.rope_scaling.original_max_position_embeddings = 64;
  llama.rope_theta = 500000.0;
  models.push_back({"llama (GQA, llama3 rope scaling, untied)", llama});
  ModelConfig llama_bias = base("llama");
  llama_bias.attention_bias = true;  // q/k/v and o biases
  llama_bias.num_key_value_heads = 6;  // plain multi-head attention
  llama_bias.head_dim = 16;  // head_dim * heads != hidden
  models.push_back({"llama (MHA, attention_bias, head_dim 16)", llama_bias});
  ModelConfig qwen2 = base("qwen2");
  qwen2.attention_bias = true;  // q/k/v biases, none on o
  qwen2.tie_word_embeddings = true;
  models.push_back({"qwen2 (q/k/v biases, tied embeddings)", qwen2});
  ModelConfig qwen3 = base("qwen3");
  qwen3.qk_norm = true;
  qwen3.num_key_value_heads = 1;  // multi-query
  qwen3.rope_theta = 1000000.0;
  models.push_back({"qwen3 (q/k norm, MQA)", qwen3});
  return models;
}

}  // namespace tandem::testing
