#include "actor/policy_torch.h"

#include "actor/fused_attention.h"
#include "actor/fused_layer_ops.h"
#include "actor/fused_linear.h"

#include "core/error.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>

#include <cmath>
#include <limits>

namespace tandem {

namespace {

at::Tensor int64_tensor(const std::vector<int64_t>& values, int64_t rows, int64_t cols) {
  return at::tensor(values, at::kLong).view({rows, cols});
}

// RMSNorm over the last dimension, computed in float32 (as Hugging Face does for bf16).
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  if (fused_layer_ops_apply(x, weight)) return fused_rms_norm(x, weight, eps);  // actor/fused_layer_ops.h
  at::Tensor x32 = x.to(at::kFloat);
  at::Tensor normed = x32 * at::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return normed.to(x.scalar_type()) * weight;
}

// Hugging Face's rotate_half convention: the head is split into two halves (x1, x2)
// and rotated as (x1 cos - x2 sin, x2 cos + x1 sin).
at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  if (fused_layer_ops_apply(x, cos) && cos.dim() == 4 && cos.size(0) == x.size(0)) return fused_rope(x, cos, sin);
  int64_t half = x.size(-1) / 2;
  at::Tensor x1 = x.narrow(-1, 0, half);
  at::Tensor x2 = x.narrow(-1, half, half);
  at::Tensor rotated = at::cat({-x2, x1}, -1);
  return x * cos + rotated * sin;
}

// Whether every row is segment 1 then padding (segment 0), never anything after padding.
bool one_sequence_per_row(const at::Tensor& segments) {
  at::Tensor later = segments.narrow(1, 1, segments.size(1) - 1);
  at::Tensor earlier = segments.narrow(1, 0, segments.size(1) - 1);
  return segments.le(1).all().item<bool>() && later.le(earlier).all().item<bool>();
}

}  // namespace

TokenLayout padded_layout(const std::vector<std::vector<int32_t>>& sequences, int32_t pad_id) {
  TANDEM_CHECK(!sequences.empty(), "a batch needs at least one sequence");
  int64_t rows = static_cast<int64_t>(sequences.size());
  int64_t cols = 1;
  for (const auto& s : sequences) cols = std::max<int64_t>(cols, static_cast<int64_t>(s.size()));
  std::vector<int64_t> ids(rows * cols, pad_id), positions(rows * cols, 0), segments(rows * cols, 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (size_t t = 0; t < sequences[r].size(); ++t) {
      ids[r * cols + t] = sequences[r][t];
      positions[r * cols + t] = static_cast<int64_t>(t);
      segments[r * cols + t] = 1;
    }
  }
  return {int64_tensor(ids, rows, cols), int64_tensor(positions, rows, cols), int64_tensor(segments, rows, cols)};
}

TokenLayout packed_layout(const std::vector<std::vector<int32_t>>& sequences, int64_t row_length,
                          std::vector<std::pair<int64_t, int64_t>>* placement) {
  TANDEM_CHECK(!sequences.empty(), "a batch needs at least one sequence");
  TANDEM_CHECK(row_length > 0, "row_length must be positive, got {}", row_length);
  std::vector<std::vector<int64_t>> ids(1), positions(1), segments(1);
  for (size_t i = 0; i < sequences.size(); ++i) {
    int64_t length = static_cast<int64_t>(sequences[i].size());
    TANDEM_CHECK(length > 0 && length <= row_length, "sequence {} has {} tokens; a packed row holds 1..{}", i, length,
                 row_length);
    if (static_cast<int64_t>(ids.back().size()) + length > row_length) {
      ids.emplace_back();
      positions.emplace_back();
      segments.emplace_back();
    }
    int64_t segment = segments.back().empty() ? 1 : segments.back().back() + 1;
    if (placement) placement->emplace_back(static_cast<int64_t>(ids.size()) - 1, static_cast<int64_t>(ids.back().size()));
    for (int64_t t = 0; t < length; ++t) {
      ids.back().push_back(sequences[i][t]);
      positions.back().push_back(t);
      segments.back().push_back(segment);
    }
  }
  int64_t rows = static_cast<int64_t>(ids.size());
  std::vector<int64_t> flat_ids(rows * row_length, 0), flat_positions(rows * row_length, 0),
      flat_segments(rows * row_length, 0);
  for (int64_t r = 0; r < rows; ++r) {
    std::copy(ids[r].begin(), ids[r].end(), flat_ids.begin() + r * row_length);
    std::copy(positions[r].begin(), positions[r].end(), flat_positions.begin() + r * row_length);
    std::copy(segments[r].begin(), segments[r].end(), flat_segments.begin() + r * row_length);
  }
  return {int64_tensor(flat_ids, rows, row_length), int64_tensor(flat_positions, rows, row_length),
          int64_tensor(flat_segments, rows, row_length)};
}

TokenLayout pad_length_to(const TokenLayout& layout, int64_t multiple) {
  TANDEM_CHECK(multiple > 0, "pad_length_to: multiple {} must be positive", multiple);
  const int64_t length = layout.input_ids.size(1), extra = (multiple - length % multiple) % multiple;
  if (extra == 0) return layout;
  const at::Tensor zeros = at::zeros({layout.input_ids.size(0), extra}, layout.input_ids.options());
  return {at::cat({layout.input_ids, zeros}, 1), at::cat({layout.position_ids, zeros}, 1),
          at::cat({layout.segment_ids, zeros}, 1)};
}

TokenLayout TokenLayout::to(at::Device device) const {
  return {input_ids.to(device), position_ids.to(device), segment_ids.to(device)};
}

PolicyModel::PolicyModel(const ModelConfig& config, const ModelWeights& weights, at::ScalarType dtype,
                         std::optional<at::ScalarType> compute, at::Device device,
                         std::shared_ptr<TensorParallelOps> tensor_parallel)
    : config_(config), compute_(compute.value_or(dtype)), device_(device), tensor_parallel_(std::move(tensor_parallel)) {
  check_weights(config, weights, "PolicyModel");
  const TensorParallelSpec spec = tensor_parallel_ ? tensor_parallel_->spec() : TensorParallelSpec{};
  if (tensor_parallel_) check_tensor_parallel(config, spec.size, "tensor parallel size");
  shards_ = tensor_parallel_layout(config, spec);
  local_ = local_sizes(config, spec);
  for (const ParameterShard& shard : shards_) {
    const WeightTensor& w = weights.get(shard.name);
    const at::Tensor full = at::from_blob(const_cast<float*>(w.data.data()), w.shape, at::kFloat);
    at::Tensor t = shard_of(full, shard).to(device, dtype, /*non_blocking=*/false, /*copy=*/true);
    t.set_requires_grad(true);
    index_[shard.name] = parameters_.size();
    parameters_.emplace_back(shard.name, t);
  }
}

const at::Tensor& PolicyModel::param(const std::string& name) const {
  auto it = index_.find(name);
  TANDEM_CHECK(it != index_.end(), "PolicyModel has no parameter {}", name);
  return parameters_[it->second].second;
}

at::Tensor PolicyModel::linear(const at::Tensor& x, const std::string& name, const std::string& bias_name) const {
  return linears(x, {name}, {bias_name})[0];
}

std::vector<at::Tensor> PolicyModel::linears(const at::Tensor& x, const std::vector<std::string>& names,
                                             const std::vector<std::string>& bias_names) const {
  std::vector<at::Tensor> weights;
  for (const std::string& name : names) weights.push_back(param(name));
  std::vector<at::Tensor> out = products(x, weights);
  for (size_t i = 0; i < names.size(); ++i) {
    if (!bias_names[i].empty()) out[i] = out[i] + param(bias_names[i]).to(out[i].scalar_type());
    const at::Tensor adapted = adapter_term(x, names[i]);
    if (adapted.defined()) out[i] = out[i] + adapted;
  }
  return out;
}

at::Tensor PolicyModel::product(const at::Tensor& x, const at::Tensor& weight) const { return products(x, {weight})[0]; }

std::vector<at::Tensor> PolicyModel::products(const at::Tensor& x, const std::vector<at::Tensor>& weights) const {
  bool fused = true;
  for (const at::Tensor& w : weights) fused = fused && fused_linear_applies(x, w, compute_);
  std::vector<at::Tensor> out;
  if (!fused) {  // CUDA learners, float64 reference models: libtorch's products, one each
    for (const at::Tensor& w : weights) out.push_back(at::linear(x.to(compute_), w.to(compute_)).to(x.scalar_type()));
    return out;
  }
  // The CPU's float32 activations: one node over the shared input, oneDNN products
  // (actor/fused_linear.h), reading kept casts and adding into gradient buffers where there are.
  std::vector<at::Tensor> casts, gradient_buffers;
  for (const at::Tensor& w : weights) {
    casts.push_back(kept_cast_weight(w));
    gradient_buffers.push_back(gradient_buffer_of(w));
  }
  return fused_linears(x, weights, compute_, casts, gradient_buffers);
}

void PolicyModel::set_keep_cast_weights(bool keep) const {
  keep_cast_weights_ = keep;
  if (!keep) cast_weights_.clear();
}

at::Tensor PolicyModel::kept_cast_weight(const at::Tensor& weight) const {
  if (!keep_cast_weights_ || weight.scalar_type() == compute_) return at::Tensor();
  at::Tensor& cast = cast_weights_[{weight.data_ptr(), weight.numel()}];
  if (!cast.defined()) {
    // A normal tensor even when first asked for under inference mode (the KL reference's
    // forward): a later product that autograd records saves it for backward.
    c10::InferenceMode normal_tensors(false);
    at::NoGradGuard no_grad;
    cast = weight.detach().to(compute_).contiguous();
  }
  return cast;
}

at::Tensor PolicyModel::adapter_term(const at::Tensor& x, const std::string& weight_name) const {
  if (!adapters_enabled_ || adapters_.empty()) return at::Tensor();
  auto it = adapter_of_.find(weight_name);
  if (it == adapter_of_.end()) return at::Tensor();
  const at::Tensor& a = adapters_[2 * it->second].second;
  const at::Tensor& b = adapters_[2 * it->second + 1].second;
  at::Tensor input = x;
  if (lora_.dropout > 0 && at::GradMode::is_enabled()) {
    // The mask comes from this model's own generator: the ranks of a tensor-parallel group
    // make the same calls in the same order, so they draw the same masks where their inputs
    // are the same (a column-parallel projection's whole input).
    const at::Tensor keep = at::bernoulli(at::full(x.sizes(), 1.0 - lora_.dropout, at::kFloat), dropout_generator_);
    input = input * keep.to(input.device(), input.scalar_type()) * (1.0 / (1.0 - lora_.dropout));
  }
  return product(product(input, a), b).mul(lora_.scale());
}

void PolicyModel::add_adapters(const LoraSpec& spec) {
  TANDEM_CHECK(adapters_.empty(), "PolicyModel::add_adapters: the model has adapters already");
  TANDEM_CHECK(spec.rank > 0 && !spec.modules.empty(), "LoRA needs a rank > 0 and target modules");
  lora_ = spec;
  dropout_generator_ = at::make_generator<at::CPUGeneratorImpl>(spec.seed ^ 0x5DEECE66Dull);
  for (auto& [name, p] : parameters_) {
    p.set_requires_grad(false);  // the base model is frozen
    // bf16 storage: linear() computes in the compute dtype whatever the storage.
    if (spec.base_bf16 && is_layer_projection_weight(name)) p = p.detach().to(at::kBFloat16);
  }
  const TensorParallelSpec split = tensor_parallel_ ? tensor_parallel_->spec() : TensorParallelSpec{};
  const std::vector<ParameterShard> layout = lora_adapter_layout(config_, spec, split);
  for (int64_t layer = 0; layer < config_.num_hidden_layers; ++layer) {
    for (size_t m = 0; m < spec.modules.size(); ++m) {
      const std::string module = lora_module_path(layer, spec.modules[m]);
      const ParameterShard& a_shard = layout[adapters_.size()];
      const ParameterShard& b_shard = layout[adapters_.size() + 1];
      const int64_t out = b_shard.canonical_shape[0], in = a_shard.canonical_shape[1];
      // Every rank draws the same canonical A: Kaiming-uniform with a = √5 (PEFT's default),
      // bound 1/√in, from a generator of its own per module.
      at::Generator init = at::make_generator<at::CPUGeneratorImpl>(spec.seed + 1000003ull * layer + 7919ull * m);
      const double bound = 1.0 / std::sqrt(static_cast<double>(in));
      const at::Tensor a_full = at::rand({spec.rank, in}, init, at::kFloat).mul_(2 * bound).sub_(bound);
      const at::Tensor b_full = at::zeros({out, spec.rank}, at::kFloat);
      adapter_of_[module + ".weight"] = adapters_.size() / 2;
      for (const auto& [shard, full] : {std::pair<const ParameterShard&, const at::Tensor&>{a_shard, a_full},
                                        {b_shard, b_full}}) {
        at::Tensor t = shard_of(full, shard).to(device_, at::kFloat, /*non_blocking=*/false, /*copy=*/true);
        t.set_requires_grad(true);
        adapters_.emplace_back(shard.name, t);
        adapter_shards_.push_back(shard);
      }
    }
  }
}

std::vector<std::pair<std::string, at::Tensor>> PolicyModel::adapter_tensors() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (size_t i = 0; i < adapters_.size(); ++i) {
    at::Tensor t = adapters_[i].second.detach().to(at::kFloat).contiguous();
    if (tensor_parallel_) t = tensor_parallel_->gather_parameter(t, adapter_shards_[i]);
    out.emplace_back(adapters_[i].first, std::move(t));
  }
  return out;
}

at::Tensor PolicyModel::matmul(const at::Tensor& a, const at::Tensor& b) const {
  return at::matmul(a.to(compute_), b.to(compute_)).to(a.scalar_type());
}

std::vector<at::Tensor> PolicyModel::parameters() const {
  std::vector<at::Tensor> out;
  for (const auto& p : parameters_) out.push_back(p.second);
  return out;
}

ModelWeights PolicyModel::to_weights() const {
  std::vector<WeightTensor> tensors;
  for (const auto& [name, t] : weight_tensors()) {
    at::Tensor f = t.to(at::kCPU, at::kFloat).contiguous();
    WeightTensor w{name, f.sizes().vec(), {}};
    w.data.assign(f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
    tensors.push_back(std::move(w));
  }
  return ModelWeights(std::move(tensors));
}

std::vector<std::pair<std::string, at::Tensor>> PolicyModel::weight_tensors(bool gather_tensor_parallel) const {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    at::Tensor t = parameters_[i].second.detach().to(at::kFloat).contiguous();
    auto adapter = adapter_of_.find(parameters_[i].first);
    if (adapter != adapter_of_.end()) {  // merged: this rank's part of W + (alpha / r)·B·A
      const at::Tensor& a = adapters_[2 * adapter->second].second;
      const at::Tensor& b = adapters_[2 * adapter->second + 1].second;
      t = t + at::mm(b.detach().to(at::kFloat), a.detach().to(at::kFloat)).mul(lora_.scale());
    }
    if (tensor_parallel_ && gather_tensor_parallel) t = tensor_parallel_->gather_parameter(t, shards_[i]);
    tensors.emplace_back(parameters_[i].first, std::move(t));
  }
  return tensors;
}

at::Tensor PolicyModel::attention(const at::Tensor& x, int64_t layer, const at::Tensor& cos, const at::Tensor& sin,
                                  const at::Tensor& bias) const {
  const ModelConfig& c = config_;
  const std::string p = "model.layers." + std::to_string(layer) + ".self_attn.";
  const int64_t batch = x.size(0), length = x.size(1);
  std::vector<std::string> weights, biases;
  for (const char* name : {"q_proj", "k_proj", "v_proj"}) {
    weights.push_back(p + name + ".weight");
    biases.push_back(c.attention_bias ? p + name + ".bias" : "");
  }
  const std::vector<at::Tensor> qkv = linears(x, weights, biases);
  const int64_t heads = local_.heads, kv_heads = local_.kv_heads;  // this rank's (all of them on one rank)
  at::Tensor q = qkv[0].view({batch, length, heads, c.head_dim});
  at::Tensor k = qkv[1].view({batch, length, kv_heads, c.head_dim});
  at::Tensor v = qkv[2].view({batch, length, kv_heads, c.head_dim});
  if (c.qk_norm) {
    q = rms_norm(q, param(p + "q_norm.weight"), c.rms_norm_eps);
    k = rms_norm(k, param(p + "k_norm.weight"), c.rms_norm_eps);
  }
  // [B, L, heads, head_dim] -> [B, heads, L, head_dim]; cos/sin are [B, 1, L, head_dim].
  q = apply_rope(q.transpose(1, 2), cos, sin);
  k = apply_rope(k.transpose(1, 2), cos, sin);
  v = v.transpose(1, 2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  at::Tensor out;
  if (fused_attention_applies(q, k, v, bias)) {
    out = fused_attention(q, k, v, bias, scale);  // the CPU's float32 learner (actor/fused_attention.h)
  } else {  // CUDA learners, float64 reference models: the composite ops
    const int64_t group = heads / kv_heads;
    if (group > 1) {  // query head h reads key/value head h / group
      k = k.repeat_interleave(group, 1);
      v = v.repeat_interleave(group, 1);
    }
    at::Tensor scores = matmul(q, k.transpose(-2, -1)).to(at::kFloat).mul_(scale).add_(bias);
    at::Tensor probs = at::softmax(scores, -1).to(v.scalar_type());
    out = matmul(probs, v).transpose(1, 2).reshape({batch, length, heads * c.head_dim});
  }
  // Split, o_proj's bias is added once, after the ranks' partial sums meet (layer()).
  const bool bias_here = c.o_proj_bias() && !tensor_parallel_;
  return linear(out, p + "o_proj.weight", bias_here ? p + "o_proj.bias" : "");
}

at::Tensor PolicyModel::enter_split(const at::Tensor& x) const {
  if (!tensor_parallel_) return x;
  return tensor_parallel_->spec().sequence_parallel ? tensor_parallel_->gather_sequence(x)
                                                    : tensor_parallel_->copy_to_region(x);
}

at::Tensor PolicyModel::leave_split(const at::Tensor& x) const {
  if (!tensor_parallel_) return x;
  return tensor_parallel_->spec().sequence_parallel ? tensor_parallel_->reduce_scatter_sequence(x)
                                                    : tensor_parallel_->reduce_from_region(x);
}

at::Tensor PolicyModel::forward(const TokenLayout& layout) const { return head(trunk(layout)); }

at::Tensor PolicyModel::trunk(const TokenLayout& layout) const {
  at::Tensor x = embed(layout);
  const LayerContext context = layer_context(layout, x.scalar_type());
  for (int64_t layer = 0; layer < config_.num_hidden_layers; ++layer) x = this->layer(layer, x, context);
  return x;
}

at::Tensor PolicyModel::embed(const TokenLayout& layout) const {
  TANDEM_CHECK(layout.input_ids.dim() == 2, "input_ids must be [batch, length], got {} dims", layout.input_ids.dim());
  TANDEM_CHECK(layout.position_ids.sizes() == layout.input_ids.sizes() &&
                   layout.segment_ids.sizes() == layout.input_ids.sizes(),
               "input_ids, position_ids and segment_ids must have the same shape");
  TANDEM_CHECK(layout.input_ids.device() == device_, "the layout is on {}, the model on {}: move it with TokenLayout::to",
               layout.input_ids.device().str(), device_.str());
  if (!tensor_parallel_) {
    const at::Tensor& table = param("model.embed_tokens.weight");
    // A sparse gradient (the looked-up rows only) where a dense gradient buffer already
    // exists to add it into in place (the trainer's flat gradients): otherwise each
    // micro-batch's backward fills and adds a whole [vocab, hidden] gradient (155 MB on a
    // 151k vocabulary; zero fills and adds were 20% of a Qwen3-shape step). Without a
    // buffer the first backward would leave a sparse .grad, so the dense gradient is kept.
    const bool sparse = table.device().is_cpu() && table.grad().defined() && !table.grad().is_sparse();
    return at::embedding(table, layout.input_ids, /*padding_idx=*/-1, /*scale_grad_by_freq=*/false, sparse);
  }
  // Vocabulary-parallel: each rank looks up the ids in its rows, zeros for the others, and
  // the ranks' rows are summed (each id's row is on exactly one rank).
  const TensorParallelSpec& spec = tensor_parallel_->spec();
  TANDEM_CHECK(!spec.sequence_parallel || layout.input_ids.size(1) % spec.size == 0,
               "sequence parallelism splits the length over {} ranks; this layout's length is {} (pad it: "
               "pad_length_to)",
               spec.size, layout.input_ids.size(1));
  const at::Tensor local_ids = layout.input_ids - local_.vocab_begin;
  const at::Tensor mine = local_ids.ge(0).logical_and(local_ids.lt(local_.vocab_rows));
  at::Tensor rows = at::embedding(param("model.embed_tokens.weight"), local_ids.clamp(0, local_.vocab_rows - 1));
  rows = rows * mine.unsqueeze(-1).to(rows.scalar_type());
  return leave_split(rows);
}

PolicyModel::LayerContext PolicyModel::layer_context(const TokenLayout& layout, at::ScalarType dtype) const {
  const int64_t length = layout.input_ids.size(1);
  const at::TensorOptions on_device = layout.input_ids.options();
  // Rotary angles in float64, so the learner and the rollout engine agree at long positions.
  at::Tensor inv_freq = at::tensor(rope_inverse_frequencies(config_), on_device.dtype(at::kDouble));
  at::Tensor angles = layout.position_ids.to(at::kDouble).unsqueeze(-1) * inv_freq;  // [B, L, head_dim/2]
  angles = at::cat({angles, angles}, -1).unsqueeze(1);                                 // [B, 1, L, head_dim]
  LayerContext context;
  context.cos = angles.cos().to(dtype);
  context.sin = angles.sin().to(dtype);
  const float blocked = -std::numeric_limits<float>::infinity();
  at::Tensor causal = at::ones({length, length}, on_device.dtype(at::kBool)).tril();
  if (one_sequence_per_row(layout.segment_ids)) {
    // Padding only follows a row's sequence, so causality alone keeps every real token off
    // it; a padding query reads real tokens before it, which is harmless (nothing reads
    // padding outputs) and keeps its softmax finite.
    context.bias = at::zeros({length, length}, on_device.dtype(at::kFloat)).masked_fill_(causal.logical_not(), blocked);
    return context;
  }
  // allowed[b, i, j]: token i may attend to token j (a padding token only to itself).
  at::Tensor seg_i = layout.segment_ids.unsqueeze(2);
  at::Tensor seg_j = layout.segment_ids.unsqueeze(1);
  at::Tensor diagonal = at::eye(length, on_device.dtype(at::kBool));
  at::Tensor allowed = (seg_i.eq(seg_j).logical_and(seg_j.ne(0)).logical_and(causal)).logical_or(diagonal);
  context.bias =
      at::zeros(allowed.sizes(), on_device.dtype(at::kFloat)).masked_fill_(allowed.logical_not(), blocked).unsqueeze(1);
  return context;
}

at::Tensor PolicyModel::layer(int64_t layer, const at::Tensor& x, const LayerContext& context) const {
  const ModelConfig& c = config_;
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  const at::Tensor normed = enter_split(rms_norm(x, param(p + "input_layernorm.weight"), c.rms_norm_eps));
  at::Tensor attended = leave_split(attention(normed, layer, context.cos, context.sin, context.bias));
  if (tensor_parallel_ && c.o_proj_bias()) attended = attended + param(p + "self_attn.o_proj.bias");
  at::Tensor y = x + attended;
  at::Tensor h = enter_split(rms_norm(y, param(p + "post_attention_layernorm.weight"), c.rms_norm_eps));
  const std::vector<at::Tensor> gate_up = linears(h, {p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"}, {"", ""});
  const at::Tensor &gate = gate_up[0], &up = gate_up[1];
  const at::Tensor gated = fused_layer_ops_apply(gate, up) ? fused_swiglu(gate, up) : at::silu(gate) * up;
  return y + leave_split(linear(gated, p + "mlp.down_proj.weight"));
}

at::Tensor PolicyModel::head(const at::Tensor& x) const { return lm_head(final_norm(x)); }

at::Tensor PolicyModel::final_norm(const at::Tensor& x) const {
  return rms_norm(x, param("model.norm.weight"), config_.rms_norm_eps);
}

at::Tensor PolicyModel::head_input(const at::Tensor& normed) const { return enter_split(normed); }

at::Tensor PolicyModel::head_weight() const {
  const at::Tensor& weight =
      config_.tie_word_embeddings ? param("model.embed_tokens.weight") : param("lm_head.weight");
  if (tensor_parallel_) return local_.head_rows == weight.size(0) ? weight : weight.narrow(0, 0, local_.head_rows);
  // Padded ids (model_config.h, sampled_vocab) get no logit: softmax runs over the ids the
  // rollout engine can draw, so both compute the same distribution.
  if (config_.sampled_vocab() == config_.vocab_size) return weight;
  return weight.narrow(0, 0, config_.sampled_vocab());
}

at::Tensor PolicyModel::head_gradient_buffer() const {
  const at::Tensor& weight =
      config_.tie_word_embeddings ? param("model.embed_tokens.weight") : param("lm_head.weight");
  const at::Tensor buffer = gradient_buffer_of(weight);
  // head_weight() is the parameter's first rows (all of them, or the sampled / local ones).
  return buffer.defined() ? buffer.narrow(0, 0, head_weight().size(0)) : buffer;
}

at::Tensor PolicyModel::lm_head(const at::Tensor& normed) const {
  if (!tensor_parallel_) return product(normed, head_weight()).to(at::kFloat);
  // Every rank's padded rows (equal counts), gathered in rank order: canonical id order,
  // then cut to the sampled ids.
  const at::Tensor& weight =
      config_.tie_word_embeddings ? param("model.embed_tokens.weight") : param("lm_head.weight");
  const at::Tensor local = at::linear(head_input(normed).to(compute_), weight.to(compute_)).to(at::kFloat);
  return tensor_parallel_->gather_last_dim(local).narrow(-1, 0, config_.sampled_vocab());
}

TokenLogProbs token_logprobs(const at::Tensor& logits, const TokenLayout& layout, double temperature) {
  TANDEM_CHECK(temperature > 0, "temperature must be positive, got {}", temperature);
  const int64_t length = logits.size(1);
  // Logits at t-1 predict token t.
  at::Tensor log_p = at::log_softmax(logits.narrow(1, 0, length - 1) / temperature, -1);
  at::Tensor targets = layout.input_ids.narrow(1, 1, length - 1);
  at::Tensor picked = log_p.gather(-1, targets.unsqueeze(-1)).squeeze(-1);
  at::Tensor entropy = -(log_p.exp() * log_p).sum(-1);
  at::Tensor segments = layout.segment_ids;
  at::Tensor valid_tail = segments.narrow(1, 1, length - 1).ne(0).logical_and(
      segments.narrow(1, 1, length - 1).eq(segments.narrow(1, 0, length - 1)));
  at::Tensor zero_column = at::zeros({logits.size(0), 1}, logits.options());
  at::Tensor false_column = at::zeros({logits.size(0), 1}, logits.options().dtype(at::kBool));
  TokenLogProbs out;
  out.valid = at::cat({false_column, valid_tail}, 1);
  out.logprobs = at::cat({zero_column, picked}, 1).masked_fill(out.valid.logical_not(), 0.0);
  out.entropy = at::cat({zero_column, entropy}, 1).masked_fill(out.valid.logical_not(), 0.0);
  return out;
}

}  // namespace tandem
