#include "actor/lora.h"

#include "core/error.h"

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
