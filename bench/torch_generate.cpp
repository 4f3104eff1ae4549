#include "torch_generate.h"

#include "core/error.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <cmath>
#include <map>
#include <string>

namespace tandem::bench {

namespace {

at::Tensor sample_rows(const at::Tensor& last_logits, at::Generator& generator) {
  return at::multinomial(at::softmax(last_logits, -1), 1, false, generator).squeeze(-1);
}

std::vector<std::vector<int32_t>> to_vectors(const std::vector<at::Tensor>& columns) {
  at::Tensor all = at::stack(columns, 1).to(at::kInt).contiguous();
  std::vector<std::vector<int32_t>> out(all.size(0));
  for (int64_t b = 0; b < all.size(0); ++b) out[b].assign(all[b].data_ptr<int32_t>(), all[b].data_ptr<int32_t>() + all.size(1));
  return out;
}

at::Tensor prompt_tensor(const std::vector<std::vector<int32_t>>& prompts) {
  const int64_t length = static_cast<int64_t>(prompts[0].size());
  std::vector<int64_t> flat;
  for (const auto& p : prompts) {
    TANDEM_CHECK(static_cast<int64_t>(p.size()) == length, "baseline loops take prompts of one length");
    flat.insert(flat.end(), p.begin(), p.end());
  }
  return at::tensor(flat, at::kLong).view({static_cast<int64_t>(prompts.size()), length});
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  return x * at::rsqrt(x.pow(2).mean(-1, true) + eps) * w;
}

at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  return x * cos + at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1) * sin;
}

}  // namespace

std::vector<std::vector<int32_t>> torch_generate_no_cache(const PolicyModel& model,
                                                          const std::vector<std::vector<int32_t>>& prompts,
                                                          int64_t new_tokens, uint64_t seed) {
  c10::InferenceMode guard;
  at::Generator generator = at::detail::createCPUGenerator(seed);
  at::Tensor ids = prompt_tensor(prompts);
  std::vector<at::Tensor> generated;
  for (int64_t step = 0; step < new_tokens; ++step) {
    const int64_t length = ids.size(1);
    TokenLayout layout{ids, at::arange(length, at::kLong).expand({ids.size(0), length}),
                       at::ones({ids.size(0), length}, at::kLong)};
    at::Tensor next = sample_rows(model.forward(layout).select(1, length - 1), generator);
    generated.push_back(next);
    ids = at::cat({ids, next.unsqueeze(1)}, 1);
  }
  return to_vectors(generated);
}

std::vector<std::vector<int32_t>> torch_generate_kv_cache(const PolicyModel& model,
                                                          const std::vector<std::vector<int32_t>>& prompts,
                                                          int64_t new_tokens, uint64_t seed) {
  c10::InferenceMode guard;
  const ModelConfig& c = model.config();
  std::map<std::string, at::Tensor> p;
  for (const auto& [name, t] : model.named_parameters()) p[name] = t;
  at::Generator generator = at::detail::createCPUGenerator(seed);
  at::Tensor inv_freq = at::tensor(rope_inverse_frequencies(c), at::kDouble);
  std::vector<at::Tensor> keys(c.num_hidden_layers), values(c.num_hidden_layers);
  const int64_t batch = static_cast<int64_t>(prompts.size()), group = c.num_attention_heads / c.num_key_value_heads;

  at::Tensor ids = prompt_tensor(prompts);
  int64_t past = 0;
  std::vector<at::Tensor> generated;
  for (int64_t step = 0; step < new_tokens; ++step) {
    const int64_t length = ids.size(1);
    at::Tensor angles = at::arange(past, past + length, at::kDouble).unsqueeze(-1) * inv_freq;
    angles = at::cat({angles, angles}, -1);
    at::Tensor cos = angles.cos().to(at::kFloat), sin = angles.sin().to(at::kFloat);  // [L, head_dim]
    at::Tensor x = at::embedding(p.at("model.embed_tokens.weight"), ids);
    for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
      const std::string n = "model.layers." + std::to_string(layer) + ".";
      at::Tensor h = rms_norm(x, p.at(n + "input_layernorm.weight"), c.rms_norm_eps);
      auto bias = [&](const std::string& name) { return p.count(name) ? p.at(name) : at::Tensor(); };
      at::Tensor q = at::linear(h, p.at(n + "self_attn.q_proj.weight"), bias(n + "self_attn.q_proj.bias"))
                         .view({batch, length, c.num_attention_heads, c.head_dim});
      at::Tensor k = at::linear(h, p.at(n + "self_attn.k_proj.weight"), bias(n + "self_attn.k_proj.bias"))
                         .view({batch, length, c.num_key_value_heads, c.head_dim});
      at::Tensor v = at::linear(h, p.at(n + "self_attn.v_proj.weight"), bias(n + "self_attn.v_proj.bias"))
                         .view({batch, length, c.num_key_value_heads, c.head_dim});
      if (c.qk_norm) {
        q = rms_norm(q, p.at(n + "self_attn.q_norm.weight"), c.rms_norm_eps);
        k = rms_norm(k, p.at(n + "self_attn.k_norm.weight"), c.rms_norm_eps);
      }
      q = rope(q.transpose(1, 2), cos, sin);
      k = rope(k.transpose(1, 2), cos, sin);
      v = v.transpose(1, 2);
      keys[layer] = past == 0 ? k : at::cat({keys[layer], k}, 2);
      values[layer] = past == 0 ? v : at::cat({values[layer], v}, 2);
      at::Tensor kk = group > 1 ? keys[layer].repeat_interleave(group, 1) : keys[layer];
      at::Tensor vv = group > 1 ? values[layer].repeat_interleave(group, 1) : values[layer];
      at::Tensor scores = at::matmul(q, kk.transpose(-2, -1)) / std::sqrt(static_cast<double>(c.head_dim));
      if (length > 1) {  // the prompt: causal within itself
        at::Tensor causal = at::ones({length, past + length}, at::kBool).tril(past);
        scores = scores.masked_fill(causal.logical_not(), -INFINITY);
      }
      at::Tensor out = at::matmul(at::softmax(scores, -1), vv).transpose(1, 2).reshape({batch, length, c.q_size()});
      x = x + at::linear(out, p.at(n + "self_attn.o_proj.weight"), bias(n + "self_attn.o_proj.bias"));
      h = rms_norm(x, p.at(n + "post_attention_layernorm.weight"), c.rms_norm_eps);
      x = x + at::linear(at::silu(at::linear(h, p.at(n + "mlp.gate_proj.weight"))) *
                             at::linear(h, p.at(n + "mlp.up_proj.weight")),
                         p.at(n + "mlp.down_proj.weight"));
    }
    at::Tensor last = rms_norm(x.select(1, length - 1), p.at("model.norm.weight"), c.rms_norm_eps);
    const at::Tensor& head = c.tie_word_embeddings ? p.at("model.embed_tokens.weight") : p.at("lm_head.weight");
    at::Tensor next = sample_rows(at::linear(last, head), generator);
    generated.push_back(next);
    past += length;
    ids = next.unsqueeze(1);
  }
  return to_vectors(generated);
}

}  // namespace tandem::bench
