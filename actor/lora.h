// LoRA (low-rank adapters): a projection W [out, in] of the frozen base model gets
// trained matrices A [r, in] and B [out, r], and computes W·x + (alpha / r)·B·(A·x). A starts
// random (Kaiming-uniform, as PEFT's default), B at zero, so training starts from the base
// model exactly. PolicyModel::add_adapters attaches them; the learner trains only them.
//
// Names follow PEFT's: the adapters of model.layers.L.self_attn.q_proj are
// model.layers.L.self_attn.q_proj.lora_A.weight and .lora_B.weight, saved in a PEFT
// adapter directory (adapter_config.json, adapter_model.safetensors) under
// "base_model.model." + that name.
#pragma once

#include "actor/model_config.h"
#include "actor/model_weights.h"
#include "actor/tensor_parallel_layout.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

struct LoraSpec {
  int64_t rank = 0;
  double alpha = 16.0;
  std::vector<std::string> modules;  // projection names, all-linear expanded (lora_modules)
  double dropout = 0.0;
  uint64_t seed = 0;  // A's initialisation and the dropout masks
  bool base_bf16 = false;  // the frozen base's layer projections stored in bf16 (learner.lora.base_dtype)
  double scale() const { return alpha / static_cast<double>(rank); }
};

// The projections LoRA can target, in layer order.
const std::vector<std::string>& lora_projections();
// `target_modules` (learner.lora.target_modules) as projection names: "all-linear" is all
// of lora_projections(); anything else must be one of them (Error naming it otherwise).
std::vector<std::string> lora_modules(const std::vector<std::string>& target_modules);
// "model.layers.L.self_attn.q_proj" or "...mlp.gate_proj": the module of projection
// `projection` in layer `layer`.
std::string lora_module_path(int64_t layer, const std::string& projection);

// How each adapter splits over a tensor-parallel group, with its projection: column-parallel
// W (rows split): B's rows follow W's and A is whole; row-parallel W (columns split): A's
// columns follow W's and B is whole. lora_A then lora_B of each targeted module, layer by
// layer (the order PolicyModel::add_adapters keeps them in).
std::vector<ParameterShard> lora_adapter_layout(const ModelConfig& config, const LoraSpec& spec,
                                                const TensorParallelSpec& split);
// The same canonical names and shapes, unsplit: what an adapter-only weight sync moves.
bool is_lora_tensor(const std::string& name);

// Whether `name` is a layer projection's weight (q/k/v/o, gate/up/down): what
// learner.lora.base_dtype bf16 stores in bf16.
bool is_layer_projection_weight(const std::string& name);
// Rounds every layer projection weight of `weights` to the nearest bf16 value (kept in
// float32, ties to even, as a conversion to bf16 rounds): the base a bf16-stored learner
// computes with.
void round_projections_to_bf16(ModelWeights& weights);

// A PEFT adapter directory's adapter_config.json for `spec` on the model at `base_model`.
std::string peft_adapter_config(const LoraSpec& spec, const std::string& base_model);
constexpr const char* kPeftKeyPrefix = "base_model.model.";

}  // namespace tandem
