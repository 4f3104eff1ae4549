#include "actor/model_weights.h"

#include "core/error.h"
#include "core/half.h"
#include "core/text.h"

#include <fmt/format.h>

#include <cstring>
#include <map>
#include <random>
#include <set>

namespace tandem {

namespace {

std::string shape_string(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

}  // namespace

std::vector<WeightSpec> expected_weights(const ModelConfig& c) {
  const int64_t h = c.hidden_size;
  std::vector<WeightSpec> specs;
  specs.push_back({"model.embed_tokens.weight", {c.vocab_size, h}});
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    const std::string p = fmt::format("model.layers.{}.", layer);
    specs.push_back({p + "input_layernorm.weight", {h}, true});
    specs.push_back({p + "self_attn.q_proj.weight", {c.q_size(), h}});
    specs.push_back({p + "self_attn.k_proj.weight", {c.kv_size(), h}});
    specs.push_back({p + "self_attn.v_proj.weight", {c.kv_size(), h}});
    if (c.attention_bias) {
      specs.push_back({p + "self_attn.q_proj.bias", {c.q_size()}});
      specs.push_back({p + "self_attn.k_proj.bias", {c.kv_size()}});
      specs.push_back({p + "self_attn.v_proj.bias", {c.kv_size()}});
    }
    if (c.qk_norm) {
      specs.push_back({p + "self_attn.q_norm.weight", {c.head_dim}, true});
      specs.push_back({p + "self_attn.k_norm.weight", {c.head_dim}, true});
    }
    specs.push_back({p + "self_attn.o_proj.weight", {h, c.q_size()}});
    if (c.o_proj_bias()) specs.push_back({p + "self_attn.o_proj.bias", {h}});
    specs.push_back({p + "post_attention_layernorm.weight", {h}, true});
    specs.push_back({p + "mlp.gate_proj.weight", {c.intermediate_size, h}});
    specs.push_back({p + "mlp.up_proj.weight", {c.intermediate_size, h}});
    specs.push_back({p + "mlp.down_proj.weight", {h, c.intermediate_size}});
  }
  specs.push_back({"model.norm.weight", {h}, true});
  if (c.num_labels > 0) {
    specs.push_back({"score.weight", {c.num_labels, h}});  // a classifier: no LM head, tied or not
  } else if (!c.tie_word_embeddings) {
    specs.push_back({"lm_head.weight", {c.vocab_size, h}});
  }
  return specs;
}

namespace {

int64_t product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

int64_t parameter_count(const ModelConfig& config) {
  int64_t n = 0;
  for (const WeightSpec& spec : expected_weights(config)) n += product(spec.shape);
  return n;
}

int64_t WeightTensor::numel() const { return product(shape); }

ModelWeights::ModelWeights(std::vector<WeightTensor> tensors) : tensors_(std::move(tensors)) {
  for (size_t i = 0; i < tensors_.size(); ++i) {
    TANDEM_CHECK(index_.emplace(tensors_[i].name, i).second, "tensor {} listed twice", tensors_[i].name);
    TANDEM_CHECK(static_cast<int64_t>(tensors_[i].data.size()) == tensors_[i].numel(),
                 "tensor {}: {} values for shape {}", tensors_[i].name, tensors_[i].data.size(),
                 shape_string(tensors_[i].shape));
  }
}

const WeightTensor& ModelWeights::get(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    std::vector<std::string> names;
    for (const WeightTensor& t : tensors_) names.push_back(t.name);
    std::string hint = closest_match(name, names);
    throw Error(fmt::format("model weights have no tensor {}{}", quoted(name),
                            hint.empty() ? "" : fmt::format(" (did you mean {}?)", quoted(hint))));
  }
  return tensors_[it->second];
}

WeightTensor& ModelWeights::get_mutable(const std::string& name) {
  return const_cast<WeightTensor&>(static_cast<const ModelWeights*>(this)->get(name));
}

int64_t ModelWeights::parameter_count() const {
  int64_t n = 0;
  for (const WeightTensor& t : tensors_) n += t.numel();
  return n;
}

namespace {

// Names and shapes (name -> shape) against expected_weights(config).
void check_weight_shapes(const ModelConfig& config, const std::map<std::string, std::vector<int64_t>>& shapes,
                         const std::string& source) {
  std::set<std::string> expected_names;
  for (const WeightSpec& spec : expected_weights(config)) {
    expected_names.insert(spec.name);
    auto found = shapes.find(spec.name);
    if (found == shapes.end()) {
      throw Error(fmt::format("{}: tensor {} is missing ({} expects shape {})", source, spec.name,
                              config.model_type, shape_string(spec.shape)));
    }
    if (found->second != spec.shape) {
      throw Error(fmt::format("{}: tensor {} has shape {}, config.json implies {}", source, spec.name,
                              shape_string(found->second), shape_string(spec.shape)));
    }
  }
  for (const auto& [name, shape] : shapes) {
    if (!expected_names.count(name)) {
      throw Error(fmt::format("{}: unexpected tensor {} (not part of a {} model with this config.json)", source,
                              name, config.model_type));
    }
  }
}

// A stored lm_head.weight the model does not read: a tied model's head is its embedding,
// a classifier's is score.weight.
bool skips_lm_head(const ModelConfig& config) { return config.tie_word_embeddings || config.num_labels > 0; }

}  // namespace

void check_weights(const ModelConfig& config, const ModelWeights& weights, const std::string& source) {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const WeightTensor& t : weights.tensors()) shapes[t.name] = t.shape;
  check_weight_shapes(config, shapes, source);
}

void check_model_weights_file(const std::string& model_dir, const ModelConfig& config) {
  SafetensorsModel model = SafetensorsModel::open_directory(model_dir);  // headers; the data stays mapped
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const std::string& name : model.names()) {
    if (skips_lm_head(config) && name == "lm_head.weight") continue;
    const TensorView& view = model.get(name);
    TANDEM_CHECK(view.dtype == DType::f32 || view.dtype == DType::bf16 || view.dtype == DType::f16 ||
                     view.dtype == DType::f64,
                 "{}: tensor {} is {}, not a floating dtype", model_dir, name, dtype_name(view.dtype));
    shapes[name] = view.shape;
  }
  check_weight_shapes(config, shapes, model_dir);
}

ModelWeights load_model_weights(const std::string& model_dir, const ModelConfig& config) {
  SafetensorsModel model = SafetensorsModel::open_directory(model_dir);
  std::vector<WeightTensor> tensors;
  for (const std::string& name : model.names()) {
    if (skips_lm_head(config) && name == "lm_head.weight") continue;
    const TensorView& view = model.get(name);
    tensors.push_back({name, view.shape, tensor_to_float(view)});
    release_pages(view);  // the file's copy need not stay resident beside the converted one
  }
  ModelWeights weights(std::move(tensors));
  check_weights(config, weights, model_dir);
  return weights;
}

ModelConfig read_sequence_classifier_config(const std::string& model_dir) {
  ModelConfig config = read_model_config(model_dir + "/config.json");
  SafetensorsModel model = SafetensorsModel::open_directory(model_dir);
  if (!model.contains("score.weight")) {
    throw Error(fmt::format("{}: no score.weight: not a sequence classifier (a reward model: tandem train-rm exports "
                            "one to RUN_DIR/reward_model)",
                            model_dir));
  }
  const std::vector<int64_t>& shape = model.get("score.weight").shape;
  if (shape.size() != 2 || shape[0] < 1 || shape[1] != config.hidden_size) {
    throw Error(fmt::format("{}: score.weight is [{}]; a classifier's is [labels, {}] (hidden_size)", model_dir,
                            fmt::join(shape, ", "), config.hidden_size));
  }
  config.num_labels = shape[0];
  return config;
}

ModelWeights random_model_weights(const ModelConfig& config, uint64_t seed, double init_std, bool random_norms) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, static_cast<float>(init_std));
  std::normal_distribution<float> norm_noise(0.0f, 0.1f);
  std::vector<WeightTensor> tensors;
  for (const WeightSpec& spec : expected_weights(config)) {
    WeightTensor t{spec.name, spec.shape, {}};
    t.data.resize(static_cast<size_t>(t.numel()));
    for (float& v : t.data) v = spec.is_norm ? (random_norms ? 1.0f + norm_noise(rng) : 1.0f) : normal(rng);
    tensors.push_back(std::move(t));
  }
  return ModelWeights(std::move(tensors));
}

void save_model_weights(const std::string& model_dir, const ModelWeights& weights, DType dtype,
                        size_t max_shard_bytes) {
  TANDEM_CHECK(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16,
               "weights are saved as F32, BF16 or F16, not {}", dtype_name(dtype));
  std::vector<TensorToWrite> out;
  for (const WeightTensor& t : weights.tensors()) {
    TensorToWrite w{t.name, dtype, t.shape, {}};
    w.bytes.resize(t.data.size() * dtype_size(dtype));
    if (dtype == DType::f32) {
      std::memcpy(w.bytes.data(), t.data.data(), w.bytes.size());
    } else {
      auto* dst = reinterpret_cast<uint16_t*>(w.bytes.data());
      for (size_t i = 0; i < t.data.size(); ++i)
        dst[i] = dtype == DType::bf16 ? float_to_bf16(t.data[i]) : float_to_fp16(t.data[i]);
    }
    out.push_back(std::move(w));
  }
  write_safetensors_sharded(model_dir, out, max_shard_bytes);
}

}  // namespace tandem
