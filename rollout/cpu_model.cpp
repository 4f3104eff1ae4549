#include "rollout/cpu_model.h"

#include "actor/tensor_parallel_slices.h"
#include "core/error.h"
#include "core/half.h"
#include "rollout/cpu_ops.h"
#include "rollout/thread_pool.h"

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace tandem {

CpuModel::CpuModel(const ModelConfig& config, const ModelWeights& weights, int threads, int tensor_parallel,
                   bool bf16_weights)
    : config_(config), bf16_weights_(bf16_weights), pool_(std::make_unique<ThreadPool>(threads)) {
  check_weights(config_, weights, "rollout engine");
  check_tensor_parallel(config_, tensor_parallel, "rollout.tensor_parallel");
  inverse_frequencies_ = rope_inverse_frequencies(config_);
  ranks_.resize(static_cast<size_t>(tensor_parallel));
  for (int r = 0; r < tensor_parallel; ++r) {
    Rank& rank = ranks_[r];
    const TensorParallelSpec spec{tensor_parallel, r};
    rank.sizes = local_sizes(config_, spec);
    rank.layout = tensor_parallel_layout(config_, spec);
    rank.weights = tensor_parallel == 1 ? weights : shard_model_weights(config_, weights, spec);
    bind_weights(rank);
  }
  final_norm_ = ranks_[0].weights.get("model.norm.weight").data.data();
}

CpuModel::~CpuModel() = default;

KvCacheShape CpuModel::rank_cache_shape(int64_t block_size, int64_t num_blocks) const {
  return {config_.num_hidden_layers, ranks_[0].sizes.kv_heads, config_.head_dim, block_size, num_blocks};
}

void CpuModel::round_matrix(Rank& rank, const std::string& name) {
  auto it = rank.rounded.find(name);
  if (it == rank.rounded.end()) return;
  const std::vector<float>& values = rank.weights.get(name).data;
  it->second.resize(values.size());
  for (size_t i = 0; i < values.size(); ++i) it->second[i] = float_to_bf16(values[i]);
}

void CpuModel::bind_weights(Rank& rank) {
  const ModelConfig& c = config_;
  auto w = [&](const std::string& name) { return rank.weights.get(name).data.data(); };
  // A matrix the products read: float32, and its bfloat16 copy under bf16_weights.
  auto matrix = [&](const std::string& name) {
    cpu::LinearWeight m{w(name), nullptr};
    if (bf16_weights_) {
      // The tied embedding is also the LM head: rounded once.
      if (rank.rounded.emplace(name, std::vector<uint16_t>()).second) round_matrix(rank, name);
      m.bf16 = rank.rounded.at(name).data();
    }
    return m;
  };
  rank.layers.clear();
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    const std::string p = "model.layers." + std::to_string(layer) + ".";
    LayerWeights l{};
    l.input_norm = w(p + "input_layernorm.weight");
    l.q = matrix(p + "self_attn.q_proj.weight");
    l.k = matrix(p + "self_attn.k_proj.weight");
    l.v = matrix(p + "self_attn.v_proj.weight");
    if (c.attention_bias) {
      l.q_bias = w(p + "self_attn.q_proj.bias");
      l.k_bias = w(p + "self_attn.k_proj.bias");
      l.v_bias = w(p + "self_attn.v_proj.bias");
    }
    if (c.qk_norm) {
      l.q_norm = w(p + "self_attn.q_norm.weight");
      l.k_norm = w(p + "self_attn.k_norm.weight");
    }
    l.o = matrix(p + "self_attn.o_proj.weight");
    if (c.o_proj_bias()) l.o_bias = w(p + "self_attn.o_proj.bias");
    l.post_norm = w(p + "post_attention_layernorm.weight");
    l.gate = matrix(p + "mlp.gate_proj.weight");
    l.up = matrix(p + "mlp.up_proj.weight");
    l.down = matrix(p + "mlp.down_proj.weight");
    rank.layers.push_back(l);
  }
  // The embedding table is rounded too (one tensor with the tied LM head: both read the same values).
  rank.embed = matrix("model.embed_tokens.weight");
  rank.lm_head = matrix(c.num_labels > 0 ? "score.weight" : c.tie_word_embeddings ? "model.embed_tokens.weight"
                                                                                 : "lm_head.weight");
  // Without a split the head is whole (num_labels rows for a classifier); split, the
  // rank's real vocabulary rows (its padding rows get no logit).
  rank.head_rows = ranks_.size() == 1 ? c.head_rows()
                                      : std::clamp<int64_t>(c.vocab_size - rank.sizes.vocab_begin, 0, rank.sizes.vocab_rows);
}

void CpuModel::update_weights(const ModelWeights& update) {
  // Check everything before touching anything. Adapters (LoRA) are named like the
  // projections they belong to; every layout lists canonical shapes.
  struct Target {
    bool adapter;
    size_t index;  // into the rank's layout or adapter_layout
  };
  std::vector<Target> targets;
  for (const WeightTensor& t : update.tensors()) {
    const bool adapter = is_lora_tensor(t.name);
    const std::vector<ParameterShard>& layout = adapter ? ranks_[0].adapter_layout : ranks_[0].layout;
    const auto found = std::find_if(layout.begin(), layout.end(), [&](const ParameterShard& s) { return s.name == t.name; });
    if (found == layout.end()) {
      throw Error(fmt::format("weight update: unexpected tensor {} (not part of this {} model{})", t.name,
                              config_.model_type, adapter && !has_adapters() ? ", which has no LoRA adapters" : ""));
    }
    if (found->canonical_shape != t.shape) {
      throw Error(fmt::format("weight update: tensor {} has shape [{}], the engine's is [{}]", t.name,
                              fmt::join(t.shape, ", "), fmt::join(found->canonical_shape, ", ")));
    }
    targets.push_back({adapter, static_cast<size_t>(found - layout.begin())});
  }
  for (Rank& rank : ranks_) {
    for (size_t i = 0; i < targets.size(); ++i) {
      const WeightTensor& t = update.tensors()[i];
      const ParameterShard& local = (targets[i].adapter ? rank.adapter_layout : rank.layout)[targets[i].index];
      ModelWeights& held = targets[i].adapter ? rank.adapters : rank.weights;
      copy_from_canonical(local, t.data.data(), held.get_mutable(t.name).data.data());
      if (!targets[i].adapter) round_matrix(rank, t.name);
    }
  }
}

void CpuModel::add_adapters(const LoraSpec& spec) {
  TANDEM_CHECK(!has_adapters(), "CpuModel::add_adapters: the model has adapters already");
  TANDEM_CHECK(spec.rank > 0 && !spec.modules.empty(), "LoRA needs a rank > 0 and target modules");
  lora_ = spec;
  const std::vector<std::string>& projections = lora_projections();
  for (size_t r = 0; r < ranks_.size(); ++r) {
    Rank& rank = ranks_[r];
    rank.adapter_layout = lora_adapter_layout(config_, spec, {static_cast<int>(ranks_.size()), static_cast<int>(r)});
    std::vector<WeightTensor> zeros;
    for (const ParameterShard& s : rank.adapter_layout) {
      WeightTensor t{s.name, s.local_shape, {}};
      t.data.assign(static_cast<size_t>(t.numel()), 0.0f);
      zeros.push_back(std::move(t));
    }
    rank.adapters = ModelWeights(std::move(zeros));
    // The layout lists lora_A, lora_B per targeted module, layer by layer.
    rank.layer_adapters.assign(static_cast<size_t>(config_.num_hidden_layers), {});
    size_t k = 0;
    for (int64_t layer = 0; layer < config_.num_hidden_layers; ++layer) {
      for (const std::string& module : spec.modules) {
        const size_t projection = static_cast<size_t>(
            std::find(projections.begin(), projections.end(), module) - projections.begin());
        TANDEM_CHECK(projection < kProjections, "LoRA: unknown projection {}", module);
        Adapter& a = rank.layer_adapters[layer][projection];
        a.a = rank.adapters.get(rank.adapter_layout[k++].name).data.data();
        a.b = rank.adapters.get(rank.adapter_layout[k++].name).data.data();
      }
    }
  }
}

void CpuModel::add_adapter_term(const Rank& rank, int64_t layer, size_t projection, const float* x, int64_t tokens,
                                int64_t in, int64_t out, float* y) {
  if (!has_adapters()) return;
  const Adapter& adapter = rank.layer_adapters[layer][projection];
  if (!adapter.a) return;
  // As the learner's adapter_term: (x·Aᵀ)·Bᵀ, then scaled, then added to W·x.
  const int64_t r = lora_.rank;
  low_.resize(tokens * r);
  adapter_out_.resize(tokens * out);
  cpu::linear(*pool_, x, tokens, in, adapter.a, nullptr, r, low_.data());
  cpu::linear(*pool_, low_.data(), tokens, r, adapter.b, nullptr, out, adapter_out_.data());
  const float scale = static_cast<float>(lora_.scale());
  for (int64_t i = 0; i < tokens * out; ++i) y[i] += adapter_out_[i] * scale;
}

void CpuModel::update_shards(const std::vector<ModelWeights>& shards) {
  TANDEM_CHECK(shards.size() == ranks_.size(), "weight update: {} shards for {} tensor-parallel ranks", shards.size(),
               ranks_.size());
  for (size_t r = 0; r < ranks_.size(); ++r) {
    for (const WeightTensor& t : shards[r].tensors()) {
      if (!ranks_[r].weights.contains(t.name)) {
        throw Error(fmt::format("weight update: unexpected tensor {} for tensor-parallel rank {} (not part of this {} "
                                "model)",
                                t.name, r, config_.model_type));
      }
      const WeightTensor& current = ranks_[r].weights.get(t.name);
      if (current.shape != t.shape) {
        throw Error(fmt::format("weight update: tensor {} of tensor-parallel rank {} has shape [{}], the engine's is [{}]",
                                t.name, r, fmt::join(t.shape, ", "), fmt::join(current.shape, ", ")));
      }
    }
  }
  for (size_t r = 0; r < ranks_.size(); ++r) {
    for (const WeightTensor& t : shards[r].tensors()) {
      WeightTensor& current = ranks_[r].weights.get_mutable(t.name);
      std::memcpy(current.data.data(), t.data.data(), t.data.size() * sizeof(float));
      round_matrix(ranks_[r], t.name);
    }
  }
}

void CpuModel::accumulate_partial(int rank, int64_t count) {
  if (rank == 0) return;  // rank 0 wrote h_ itself
  for (int64_t i = 0; i < count; ++i) h_[i] += part_[i];
}

void CpuModel::attention_block(const ForwardBatch& batch, int64_t layer, const Rank& rank, KvCache& cache) {
  const ModelConfig& c = config_;
  const LayerWeights& l = rank.layers[layer];
  const int64_t tokens = static_cast<int64_t>(batch.tokens.size());
  const int64_t hidden = c.hidden_size;
  const int64_t heads = rank.sizes.heads, kv_heads = rank.sizes.kv_heads;
  const int64_t qs = heads * c.head_dim, kvs = kv_heads * c.head_dim;
  cpu::linear(*pool_, normed_.data(), tokens, hidden, l.q, l.q_bias, qs, q_.data());
  cpu::linear(*pool_, normed_.data(), tokens, hidden, l.k, l.k_bias, kvs, k_.data());
  cpu::linear(*pool_, normed_.data(), tokens, hidden, l.v, l.v_bias, kvs, v_.data());
  add_adapter_term(rank, layer, 0, normed_.data(), tokens, hidden, qs, q_.data());
  add_adapter_term(rank, layer, 1, normed_.data(), tokens, hidden, kvs, k_.data());
  add_adapter_term(rank, layer, 2, normed_.data(), tokens, hidden, kvs, v_.data());
  if (c.qk_norm) {
    cpu::rms_norm(*pool_, q_.data(), tokens * heads, c.head_dim, l.q_norm, c.rms_norm_eps, q_.data());
    cpu::rms_norm(*pool_, k_.data(), tokens * kv_heads, c.head_dim, l.k_norm, c.rms_norm_eps, k_.data());
  }
  cpu::rope(*pool_, q_.data(), tokens, heads, c.head_dim, cos_.data(), sin_.data());
  cpu::rope(*pool_, k_.data(), tokens, kv_heads, c.head_dim, cos_.data(), sin_.data());
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
  attention(batch, layer, rank, cache);
  float* out = &rank == &ranks_[0] ? h_.data() : part_.data();
  cpu::linear(*pool_, attn_.data(), tokens, qs, l.o, nullptr, hidden, out);
  add_adapter_term(rank, layer, 3, attn_.data(), tokens, qs, hidden, out);
}

void CpuModel::forward(const ForwardBatch& batch, std::vector<KvCache>& caches, std::vector<float>& logits) {
  const ModelConfig& c = config_;
  TANDEM_CHECK(caches.size() == ranks_.size(), "{} KV caches for {} tensor-parallel ranks", caches.size(),
               ranks_.size());
  const int64_t tokens = static_cast<int64_t>(batch.tokens.size());
  const int64_t hidden = c.hidden_size;
  const LocalSizes& local = ranks_[0].sizes;
  const int64_t qs = local.heads * c.head_dim, kvs = local.kv_heads * c.head_dim, inter = local.intermediate;
  const int64_t half = c.head_dim / 2;
  TANDEM_CHECK(tokens > 0, "forward with no tokens");
  x_.resize(tokens * hidden);
  h_.resize(tokens * hidden);
  normed_.resize(tokens * hidden);
  if (ranks_.size() > 1) part_.resize(tokens * hidden);
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
      attention_multiply_adds_ += 2 * (positions_[t] + 1) * qs;  // q.k and p.v over the context
    }
  }
  for (int64_t t = 0; t < tokens; ++t) {
    const int32_t id = batch.tokens[t];
    TANDEM_CHECK(id >= 0 && id < c.vocab_size, "token id {} outside the vocabulary (0..{})", id, c.vocab_size - 1);
    // The row lives on the rank whose vocabulary block holds the id (the others add zeros).
    const Rank& holder = ranks_[id / local.vocab_rows];
    const int64_t row = (id - holder.sizes.vocab_begin) * hidden;
    if (holder.embed.bf16) {
      for (int64_t i = 0; i < hidden; ++i) x_[t * hidden + i] = bf16_to_float(holder.embed.bf16[row + i]);
    } else {
      std::memcpy(&x_[t * hidden], holder.embed.f32 + row, hidden * sizeof(float));
    }
    // Angles in float64 (as the learner computes them), then rounded once.
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(positions_[t]) * inverse_frequencies_[i];
      cos_[t * half + i] = static_cast<float>(std::cos(angle));
      sin_[t * half + i] = static_cast<float>(std::sin(angle));
    }
  }

  const int64_t values = tokens * hidden;
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    const LayerWeights& replicated = ranks_[0].layers[layer];  // norms and o_proj's bias are on every rank
    cpu::rms_norm(*pool_, x_.data(), tokens, hidden, replicated.input_norm, c.rms_norm_eps, normed_.data());
    for (size_t r = 0; r < ranks_.size(); ++r) {
      attention_block(batch, layer, ranks_[r], caches[r]);
      accumulate_partial(static_cast<int>(r), values);
    }
    if (replicated.o_bias) {
      for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t i = 0; i < hidden; ++i) h_[t * hidden + i] += replicated.o_bias[i];
      }
    }
    for (int64_t i = 0; i < values; ++i) x_[i] += h_[i];

    cpu::rms_norm(*pool_, x_.data(), tokens, hidden, replicated.post_norm, c.rms_norm_eps, normed_.data());
    for (size_t r = 0; r < ranks_.size(); ++r) {
      const Rank& rank = ranks_[r];
      const LayerWeights& l = rank.layers[layer];
      cpu::linear(*pool_, normed_.data(), tokens, hidden, l.gate, nullptr, inter, gate_.data());
      cpu::linear(*pool_, normed_.data(), tokens, hidden, l.up, nullptr, inter, up_.data());
      add_adapter_term(rank, layer, 4, normed_.data(), tokens, hidden, inter, gate_.data());
      add_adapter_term(rank, layer, 5, normed_.data(), tokens, hidden, inter, up_.data());
      cpu::silu_mul(*pool_, gate_.data(), up_.data(), tokens * inter, gate_.data());
      float* out = r == 0 ? h_.data() : part_.data();
      cpu::linear(*pool_, gate_.data(), tokens, inter, l.down, nullptr, hidden, out);
      add_adapter_term(rank, layer, 6, gate_.data(), tokens, inter, hidden, out);
      accumulate_partial(static_cast<int>(r), values);
    }
    for (int64_t i = 0; i < values; ++i) x_[i] += h_[i];
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
  const int64_t width = c.head_rows();
  logits.resize(rows * width);
  if (rows == 0) return;
  if (ranks_.size() == 1) {
    cpu::linear(*pool_, rows_.data(), rows, hidden, ranks_[0].lm_head, nullptr, width, logits.data());
    return;
  }
  // Each rank's vocabulary columns (the all-gather of the logits).
  for (const Rank& rank : ranks_) {
    head_out_.resize(rows * rank.head_rows);
    cpu::linear(*pool_, rows_.data(), rows, hidden, rank.lm_head, nullptr, rank.head_rows, head_out_.data());
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(&logits[r * width + rank.sizes.vocab_begin], &head_out_[r * rank.head_rows],
                  rank.head_rows * sizeof(float));
    }
  }
}

void CpuModel::attention(const ForwardBatch& batch, int64_t layer, const Rank& rank, const KvCache& cache) {
  const ModelConfig& c = config_;
  const int64_t heads = rank.sizes.heads, head_dim = c.head_dim;
  const int64_t group = rank.sizes.heads / rank.sizes.kv_heads;
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
    cpu::exp_shifted(scores.data(), context, -max_score, scores.data());
    float sum = 0;
    for (int64_t j = 0; j < context; ++j) sum += scores[j];
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
