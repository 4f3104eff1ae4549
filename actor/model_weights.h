// A model's weights under their Hugging Face tensor names, held as float32.
//
// The set of names and shapes is a function of the ModelConfig (expected_weights);
// loading checks a directory against it, so a checkpoint for another architecture or
// size is an Error naming the tensor, never a model that computes garbage. Both the
// rollout engine (plain float math) and the learner (libtorch) start from this.
#pragma once

#include "actor/model_config.h"
#include "core/safetensors.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tandem {

struct WeightSpec {
  std::string name;
  std::vector<int64_t> shape;
  bool is_norm = false;  // RMSNorm scale: initialised to 1, not random
};

// Every tensor the architecture needs, in a fixed order (embeddings, layers, norm, head).
std::vector<WeightSpec> expected_weights(const ModelConfig& config);
// The number of values in expected_weights(config).
int64_t parameter_count(const ModelConfig& config);

struct WeightTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;  // row-major; Linear weights are [out_features, in_features]
  int64_t numel() const;
};

class ModelWeights {
 public:
  ModelWeights() = default;
  explicit ModelWeights(std::vector<WeightTensor> tensors);

  const std::vector<WeightTensor>& tensors() const { return tensors_; }
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  // Throws Error (with a did-you-mean) when absent.
  const WeightTensor& get(const std::string& name) const;
  WeightTensor& get_mutable(const std::string& name);
  int64_t parameter_count() const;

 private:
  std::vector<WeightTensor> tensors_;
  std::map<std::string, size_t> index_;
};

// Checks names and shapes against expected_weights(config): a missing, unexpected or
// misshapen tensor is an Error naming it and `source`.
void check_weights(const ModelConfig& config, const ModelWeights& weights, const std::string& source);

// The check above on DIR's safetensors headers, without reading the tensors: what
// `tandem validate` and `run` do before anything starts.
void check_model_weights_file(const std::string& model_dir, const ModelConfig& config);

// Reads DIR's safetensors (single file or sharded) as float32, checked. A tied
// checkpoint that also stores lm_head.weight is accepted (Hugging Face sometimes saves it),
// and so is a classifier's (config.num_labels > 0) that keeps its causal LM's head.
ModelWeights load_model_weights(const std::string& model_dir, const ModelConfig& config);

// A sequence classifier's directory (a reward model, tandem train-rm's export or a Hugging
// Face *ForSequenceClassification checkpoint): config.json's architecture with num_labels
// the rows of its score.weight. An Error names DIR when it has no score.weight (not a
// classifier) or one that is not [labels, hidden_size].
ModelConfig read_sequence_classifier_config(const std::string& model_dir);

// Seeded random weights: Linear and embedding entries ~ N(0, init_std^2); norm scales 1,
// or 1 + N(0, 0.1^2) when `random_norms` (tests want every weight to matter).
ModelWeights random_model_weights(const ModelConfig& config, uint64_t seed, double init_std = 0.02,
                                  bool random_norms = false);

// Writes model.safetensors (sharded above max_shard_bytes) in `dtype` (f32, bf16 or f16).
void save_model_weights(const std::string& model_dir, const ModelWeights& weights, DType dtype,
                        size_t max_shard_bytes = size_t{4} << 30);

}  // namespace tandem
