#include "actor/lora.h"

#include "core/error.h"
#include "core/half.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace tandem {

const std::vector<std::string>& lora_projections() {
  static const std::vector<std::string> names = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                 "down_proj"};
  return names;
}

std::vector<std::string> lora_modules(const std::vector<std::string>& target_modules) {
  if (target_modules.size() == 1 && target_modules[0] == "all-linear") return lora_projections();
  std::vector<std::string> out;
  for (const std::string& name : lora_projections()) {  // in layer order, each once
    if (std::find(target_modules.begin(), target_modules.end(), name) != target_modules.end()) out.push_back(name);
  }
  for (const std::string& name : target_modules) {
    if (std::find(out.begin(), out.end(), name) == out.end()) {
      throw Error(fmt::format("learner.lora.target_modules: \"{}\" is not a projection (all-linear alone, or among "
                              "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)",
                              name));
    }
  }
  return out;
}

std::vector<ParameterShard> lora_adapter_layout(const ModelConfig& config, const LoraSpec& spec,
                                                const TensorParallelSpec& split) {
  const std::vector<ParameterShard> base_layout = tensor_parallel_layout(config, split);
  std::vector<ParameterShard> layout;
  for (int64_t layer = 0; layer < config.num_hidden_layers; ++layer) {
    for (const std::string& projection : spec.modules) {
      const std::string module = lora_module_path(layer, projection);
      const auto found = std::find_if(base_layout.begin(), base_layout.end(),
                                      [&](const ParameterShard& s) { return s.name == module + ".weight"; });
      TANDEM_CHECK(found != base_layout.end(), "LoRA: the model has no {}.weight", module);
      const ParameterShard& base = *found;
      const int64_t out = base.canonical_shape[0], in = base.canonical_shape[1];
      ParameterShard a, b;
      a.name = module + ".lora_A.weight";
      a.canonical_shape = a.local_shape = {spec.rank, in};
      a.length = spec.rank;
      b.name = module + ".lora_B.weight";
      b.canonical_shape = b.local_shape = {out, spec.rank};
      b.length = out;
      if (base.dim == 0) {  // column-parallel: B's rows follow W's, A is whole (its gradient a part per rank)
        b.dim = 0;
        b.begin = base.begin;
        b.length = base.length;
        b.local_shape[0] = base.local_shape[0];
        b.partial_gradient = base.partial_gradient;  // rows of a KV head several ranks hold
        a.partial_gradient = split.size > 1;
      } else if (base.dim == 1) {  // row-parallel: A's columns follow W's, B is whole
        a.dim = 1;
        a.begin = base.begin;
        a.length = base.length;
        a.local_shape[1] = base.local_shape[1];
        b.partial_gradient = split.size > 1;
      }
      layout.push_back(std::move(a));
      layout.push_back(std::move(b));
    }
  }
  return layout;
}

bool is_layer_projection_weight(const std::string& name) {
  if (name.rfind("model.layers.", 0) != 0) return false;
  for (const std::string& projection : lora_projections()) {
    const std::string suffix = "." + projection + ".weight";
    if (name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) return true;
  }
  return false;
}

void round_projections_to_bf16(ModelWeights& weights) {
  std::vector<WeightTensor> tensors = weights.tensors();
  for (WeightTensor& t : tensors) {
    if (!is_layer_projection_weight(t.name)) continue;
    for (float& x : t.data) x = bf16_to_float(float_to_bf16(x));
  }
  weights = ModelWeights(std::move(tensors));
}

bool is_lora_tensor(const std::string& name) {
  return name.find(".lora_A.") != std::string::npos || name.find(".lora_B.") != std::string::npos;
}

std::string lora_module_path(int64_t layer, const std::string& projection) {
  const bool attention = projection == "q_proj" || projection == "k_proj" || projection == "v_proj" ||
                         projection == "o_proj";
  return fmt::format("model.layers.{}.{}.{}", layer, attention ? "self_attn" : "mlp", projection);
}

std::string peft_adapter_config(const LoraSpec& spec, const std::string& base_model) {
  nlohmann::ordered_json config = {{"peft_type", "LORA"},
                                   {"task_type", "CAUSAL_LM"},
                                   {"base_model_name_or_path", base_model},
                                   {"r", spec.rank},
                                   {"lora_alpha", spec.alpha},
                                   {"lora_dropout", spec.dropout},
                                   {"target_modules", spec.modules},
                                   {"bias", "none"},
                                   {"fan_in_fan_out", false},
                                   {"use_rslora", false},
                                   {"inference_mode", true}};
  return config.dump(2) + "\n";
}

}  // namespace tandem
