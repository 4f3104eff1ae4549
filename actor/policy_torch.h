// The policy as a libtorch module, for training: forward with autograd, per-token
// log-probs and entropy. Only the learner and tests include this header; it pulls in
// ATen's Tensor type but not <torch/torch.h>.
//
// Attention layout: every row of a batch holds tokens tagged with a segment id. A token
// attends to the tokens before it (and itself) in the same row with the same segment id;
// segment 0 is padding. One sequence per row with 0s after it is a padded batch; several
// sequences per row with ids 1, 2, ... and positions restarting at 0 is a packed batch.
// Both compute exactly what each sequence alone computes.
#pragma once

#include "actor/lora.h"
#include "actor/model_config.h"
#include "actor/model_weights.h"
#include "actor/tensor_parallel.h"

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tandem {

struct TokenLayout {
  at::Tensor input_ids;     // [B, L] int64
  at::Tensor position_ids;  // [B, L] int64: rotary positions, 0 at each sequence's start
  at::Tensor segment_ids;   // [B, L] int64: 0 padding, else the sequence's tag within the row
  TokenLayout to(at::Device device) const;
};

// Layouts are made in host memory; TokenLayout::to moves one to a model's device.
// One sequence per row, right-padded to the longest.
TokenLayout padded_layout(const std::vector<std::vector<int32_t>>& sequences, int32_t pad_id = 0);
// Sequences packed greedily, in order, into rows of `row_length` tokens (a longer
// sequence is an Error). `placement` receives (row, offset) of each sequence.
TokenLayout packed_layout(const std::vector<std::vector<int32_t>>& sequences, int64_t row_length,
                          std::vector<std::pair<int64_t, int64_t>>* placement = nullptr);
// `layout` with padding columns (segment 0) appended until its length is a multiple of
// `multiple` (sequence parallelism splits the length over the tensor-parallel ranks).
TokenLayout pad_length_to(const TokenLayout& layout, int64_t multiple);

class PolicyModel {
 public:
  // Copies `weights` (checked against `config`) into leaf tensors of `dtype` that require
  // grad; activations are of `dtype` too. `compute` (default: `dtype`): the dtype of the
  // matrix products. Each product casts its operands to it and its result back (autograd
  // carries the gradients back the same way), so float32 parameters with bf16 compute are
  // mixed-precision training with float32 master weights (learner.precision: bf16), as
  // torch.autocast does it: the residual stream, norms, rotary embedding, softmax and
  // logits statistics stay float32. Parameters live on `device`; a layout passed in must
  // be there too (every tensor this makes is created where its inputs are).
  //
  // `tensor_parallel` (actor/tensor_parallel.h): this model is one rank's part of the
  // model, split over the ops' group. Parameters are then the rank's shards (from the
  // canonical `weights` every rank passes), every rank runs every call together, and:
  // embed and each layer return the rank's L/T positions under sequence parallelism
  // (the layout's length a multiple of T), whole ones otherwise; head_weight() is the
  // rank's vocabulary rows (vocab_offset() the first one's id); forward()/head()/lm_head()
  // still return whole logits (gathered); to_weights() and weight_tensors() gather the
  // canonical tensors.
  PolicyModel(const ModelConfig& config, const ModelWeights& weights, at::ScalarType dtype,
              std::optional<at::ScalarType> compute = std::nullopt, at::Device device = at::kCPU,
              std::shared_ptr<TensorParallelOps> tensor_parallel = nullptr);

  // Logits [B, L, vocab] in float32, whatever the parameter dtype.
  at::Tensor forward(const TokenLayout& layout) const;

  // forward() in pieces, for layer-by-layer execution (FSDP gathers one layer at a time):
  // head(layer(L-1, ... layer(0, embed(layout), context) ...)).
  struct LayerContext {
    at::Tensor cos, sin;  // [B, 1, L, head_dim] rotary tables
    // Added to the attention scores: 0 where query i may attend to key j, -inf elsewhere.
    // [L, L] (causal, shared by every row) when each row holds one sequence followed by
    // padding; [B, 1, L, L] for packed rows.
    at::Tensor bias;
  };
  at::Tensor embed(const TokenLayout& layout) const;  // [B, L, hidden]
  LayerContext layer_context(const TokenLayout& layout, at::ScalarType dtype) const;
  at::Tensor layer(int64_t layer, const at::Tensor& x, const LayerContext& context) const;  // [B, L, hidden]
  at::Tensor head(const at::Tensor& x) const;  // lm_head(final_norm(x)): logits [B, L, vocab] float32
  at::Tensor final_norm(const at::Tensor& x) const;  // the last hidden state a head reads [B, L, hidden]
  // What a vocabulary-parallel head reads: final_norm's output made whole and replicated
  // over the tensor-parallel group (all-gathered along L under sequence parallelism; its
  // gradient summed over the group). `normed` itself without tensor parallelism.
  at::Tensor head_input(const at::Tensor& normed) const;
  // Logits [B, L, config.sampled_vocab()] float32: padded ids (model_config.h) are left out.
  at::Tensor lm_head(const at::Tensor& normed) const;
  // The weight lm_head multiplies by, [config.sampled_vocab(), hidden] (tied: a view of the
  // embeddings); under tensor parallelism this rank's rows of it, the first being id vocab_offset().
  at::Tensor head_weight() const;
  int64_t vocab_offset() const { return local_.vocab_begin; }
  // The gradient buffer (actor/fused_linear.h, gradient_buffer_of) of head_weight()'s rows:
  // where a backward may add the head's gradient in place; undefined where there is none.
  at::Tensor head_gradient_buffer() const;
  // The tensor-parallel ops (null without) and how each parameter is split (one rank: whole).
  TensorParallelOps* tensor_parallel() const { return tensor_parallel_.get(); }
  const std::vector<ParameterShard>& shards() const { return shards_; }
  // The last layer's output, before the final norm: embed and every layer.
  at::Tensor trunk(const TokenLayout& layout) const;

  // LoRA (actor/lora.h): adapters on `spec.modules` of every layer, and the base
  // parameters frozen (requires_grad false). Split like their projections under tensor
  // parallelism: a column-parallel projection's A whole and B by rows, a row-parallel
  // one's A by columns and B whole. Every rank draws the same canonical A (from
  // spec.seed) and takes its part. Adapters join each targeted projection's product
  // while enabled (forward is then the adapted model, and with them off the base model:
  // the KL reference without a second copy); dropout applies while autograd records.
  void add_adapters(const LoraSpec& spec);
  bool has_adapters() const { return !adapters_.empty(); }
  const LoraSpec& lora() const { return lora_; }
  void set_adapters_enabled(bool enabled) { adapters_enabled_ = enabled; }
  bool adapters_enabled() const { return adapters_enabled_; }
  // The adapters' tensors (lora_A then lora_B of each module, layer by layer) and how each is split.
  const std::vector<std::pair<std::string, at::Tensor>>& adapter_parameters() const { return adapters_; }
  const std::vector<ParameterShard>& adapter_shards() const { return adapter_shards_; }
  // The adapters as canonical float32 tensors on the model's device (gathered under tensor
  // parallelism: every rank calls it).
  std::vector<std::pair<std::string, at::Tensor>> adapter_tensors() const;

  const ModelConfig& config() const { return config_; }
  at::ScalarType compute_dtype() const { return compute_; }
  // Casts of the weights to the compute dtype kept for reuse (learner.precision bf16 over
  // float32 weights): while on, each weight a product reads is cast once and every later
  // product of it, in any micro-batch, reads that copy, instead of casting it again each
  // time (a pass over every weight per micro-batch: 48M parameters on the Qwen3-shaped
  // model of bench/learner_cpu). The caller turns it on only around work that does not
  // change the weights (the micro-batches of one optimizer step) and off again before they
  // change: turning it off drops the copies. Nothing is kept while off.
  void set_keep_cast_weights(bool keep) const;
  // `weight` (a parameter or a view of one) in the compute dtype from those kept copies,
  // cast now if it has none yet; undefined while off or when it is in that dtype already.
  at::Tensor kept_cast_weight(const at::Tensor& weight) const;
  at::Device device() const { return device_; }
  void set_compute_dtype(at::ScalarType compute) { compute_ = compute; }
  // HF names, in expected_weights order (no lm_head when tied); this rank's shards under
  // tensor parallelism.
  const std::vector<std::pair<std::string, at::Tensor>>& named_parameters() const { return parameters_; }
  std::vector<at::Tensor> parameters() const;
  // The current weights as float32 in host memory (for saving or for a rollout engine);
  // with adapters, each targeted projection merged: W + (alpha / r)·B·A.
  ModelWeights to_weights() const;
  // The same tensors as to_weights(), detached and contiguous float32 where they live (the
  // model's device): no copy (but merged ones), for weight sync straight from the parameters.
  // `gather_tensor_parallel` false: this rank's shards as they are (the layout's local shapes).
  std::vector<std::pair<std::string, at::Tensor>> weight_tensors(bool gather_tensor_parallel = true) const;

 private:
  const at::Tensor& param(const std::string& name) const;
  // x · weight(name)ᵀ (+ bias(bias_name)): products in the compute dtype, returned in x's
  // dtype, the bias added there.
  at::Tensor linear(const at::Tensor& x, const std::string& name, const std::string& bias_name = "") const;
  // linear() of one x with each of several weights (q, k, v; gate, up): one autograd node
  // over the shared input where the products go through oneDNN (actor/fused_linear.h).
  // bias_names: one per weight, "" for none.
  std::vector<at::Tensor> linears(const at::Tensor& x, const std::vector<std::string>& names,
                                  const std::vector<std::string>& bias_names) const;
  // x · weightᵀ, the product in the compute dtype, returned in x's dtype.
  at::Tensor product(const at::Tensor& x, const at::Tensor& weight) const;
  // product() of one x with each of `weights`, as one node where oneDNN's products apply.
  std::vector<at::Tensor> products(const at::Tensor& x, const std::vector<at::Tensor>& weights) const;
  // a · b (batched) in the compute dtype, returned in a's dtype.
  at::Tensor matmul(const at::Tensor& a, const at::Tensor& b) const;
  // Self-attention over the heads this rank holds, o_proj applied: under tensor
  // parallelism a partial sum over the group, without o_proj's bias.
  at::Tensor attention(const at::Tensor& x, int64_t layer, const at::Tensor& cos, const at::Tensor& sin,
                       const at::Tensor& bias) const;
  // The adapters' term (alpha / r)·B·(A·dropout(x)) of projection `weight_name`, in x's
  // dtype; undefined when it has none or they are off.
  at::Tensor adapter_term(const at::Tensor& x, const std::string& weight_name) const;
  // Where activations enter and leave the split region (identity without tensor parallelism).
  at::Tensor enter_split(const at::Tensor& x) const;
  at::Tensor leave_split(const at::Tensor& x) const;

  ModelConfig config_;
  at::ScalarType compute_;
  at::Device device_;
  std::vector<std::pair<std::string, at::Tensor>> parameters_;
  std::map<std::string, size_t> index_;
  std::shared_ptr<TensorParallelOps> tensor_parallel_;
  std::vector<ParameterShard> shards_;
  LocalSizes local_;  // heads, KV heads, MLP columns and vocabulary rows of this rank
  // LoRA: adapters_[2k], adapters_[2k + 1] are lora_A, lora_B of the projection whose weight
  // name maps to k in adapter_of_.
  LoraSpec lora_;
  std::vector<std::pair<std::string, at::Tensor>> adapters_;
  std::vector<ParameterShard> adapter_shards_;
  std::map<std::string, size_t> adapter_of_;
  bool adapters_enabled_ = true;
  mutable at::Generator dropout_generator_;
  // set_keep_cast_weights: the copies by the weight's first element's address and size
  // (the head's view of a tied embedding shares its address, not its size).
  mutable bool keep_cast_weights_ = false;
  mutable std::map<std::pair<const void*, int64_t>, at::Tensor> cast_weights_;
};

// PolicyModel::set_keep_cast_weights(true) for the guard's life when `keep` (off again at its
// end, an exception's included). Models whose parameters are regathered between products
// (FSDP's units) pass keep = false: an address could then hold other values.
class KeepCastWeights {
 public:
  KeepCastWeights(const PolicyModel* model, bool keep) : model_(keep ? model : nullptr) {
    if (model_) model_->set_keep_cast_weights(true);
  }
  ~KeepCastWeights() {
    if (model_) model_->set_keep_cast_weights(false);
  }
  KeepCastWeights(const KeepCastWeights&) = delete;
  KeepCastWeights& operator=(const KeepCastWeights&) = delete;

 private:
  const PolicyModel* model_;
};

struct TokenLogProbs {
  at::Tensor logprobs;  // [B, L] float32: log p(token t | tokens before it), 0 where `valid` is false
  at::Tensor entropy;   // [B, L] float32: entropy of the distribution that predicted token t
  at::Tensor valid;     // [B, L] bool: t is not the first token of its segment and not padding
};

// Per-token log-probs and entropies under softmax(logits / temperature), the
// distribution the rollout engine samples from, for the layout's own tokens.
TokenLogProbs token_logprobs(const at::Tensor& logits, const TokenLayout& layout, double temperature = 1.0);

}  // namespace tandem
