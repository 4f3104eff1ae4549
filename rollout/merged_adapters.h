// LoRA on a backend that cannot apply adapters unmerged (the CUDA backend): the engine keeps
// the base weights of the targeted projections on the host and turns each adapter update
// into merged projections, W + (alpha / r)·B·A, which the backend loads as plain weights.
// The weight sync still moves only the adapters; the merge costs what a merge costs (one
// rounding of W + ΔW per value, and in bf16 storage the backend's own rounding).
#pragma once

#include "actor/lora.h"
#include "actor/model_config.h"
#include "actor/model_weights.h"

#include <map>
#include <string>
#include <vector>

namespace tandem {

class MergedAdapters {
 public:
  MergedAdapters(const ModelConfig& config, const LoraSpec& spec, const ModelWeights& base);
  // `update` with its adapter tensors (a subset is fine) taken in and replaced by the merged
  // projections they touch; other tensors pass through. An unknown adapter name or shape is
  // an Error naming it, before anything is kept.
  ModelWeights merge(const ModelWeights& update);

 private:
  LoraSpec spec_;
  std::map<std::string, WeightTensor> base_;      // "<module>.weight" of every targeted projection
  std::map<std::string, WeightTensor> adapters_;  // "<module>.lora_A.weight" / ".lora_B.weight", canonical
};

}  // namespace tandem
