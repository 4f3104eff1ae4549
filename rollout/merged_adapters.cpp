#include "rollout/merged_adapters.h"

#include "core/error.h"

#include <set>

namespace tandem {

namespace {

// "model.layers.0.self_attn.q_proj.lora_A.weight" -> "model.layers.0.self_attn.q_proj"
std::string module_of(const std::string& adapter_name) {
  const size_t at = adapter_name.rfind(".lora_");
  return adapter_name.substr(0, at);
}

}  // namespace

MergedAdapters::MergedAdapters(const ModelConfig& config, const LoraSpec& spec, const ModelWeights& base)
    : spec_(spec) {
  for (const ParameterShard& s : lora_adapter_layout(config, spec, {})) {
    WeightTensor zero{s.name, s.canonical_shape, {}};
    zero.data.assign(static_cast<size_t>(zero.numel()), 0.0f);
    adapters_[s.name] = std::move(zero);
    const std::string weight = module_of(s.name) + ".weight";
    if (!base_.count(weight)) base_[weight] = base.get(weight);
  }
}

ModelWeights MergedAdapters::merge(const ModelWeights& update) {
  for (const WeightTensor& t : update.tensors()) {
    if (!is_lora_tensor(t.name)) continue;
    const auto found = adapters_.find(t.name);
    if (found == adapters_.end()) throw Error(fmt::format("weight update: unexpected adapter {} (not targeted)", t.name));
    if (found->second.shape != t.shape) {
      throw Error(fmt::format("weight update: adapter {} has shape [{}], the engine's is [{}]", t.name,
                              fmt::join(t.shape, ", "), fmt::join(found->second.shape, ", ")));
    }
  }
  std::vector<WeightTensor> out;
  std::set<std::string> touched;
  for (const WeightTensor& t : update.tensors()) {
    if (!is_lora_tensor(t.name)) {
      out.push_back(t);
      continue;
    }
    adapters_[t.name].data = t.data;
    touched.insert(module_of(t.name));
  }
  const float scale = static_cast<float>(spec_.scale());
  for (const std::string& module : touched) {
    const WeightTensor& a = adapters_.at(module + ".lora_A.weight");  // [r, in]
    const WeightTensor& b = adapters_.at(module + ".lora_B.weight");  // [out, r]
    WeightTensor merged = base_.at(module + ".weight");               // [out, in]
    const int64_t rows = merged.shape[0], columns = merged.shape[1], r = a.shape[0];
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < columns; ++j) {
        float delta = 0;
        for (int64_t k = 0; k < r; ++k) delta += b.data[i * r + k] * a.data[k * columns + j];
        merged.data[i * columns + j] += delta * scale;
      }
    }
    out.push_back(std::move(merged));
  }
  return ModelWeights(std::move(out));
}

}  // namespace tandem
