// FSDP-style parameter sharding: at rest each rank holds 1/N of every unit's parameters
// (and of their gradients and optimizer state); a unit is gathered just before it
// computes and released right after.
//
// Units, in the global parameter order: the embeddings; one per transformer layer; the
// final norm with the LM head. Each unit is a contiguous range of the global flat layout
// (FlatParameters' order), padded to a multiple of the world size and split in equal
// shards, so a rank's state is a list of global ranges and checkpoints interoperate with
// ddp and zero2. The model's parameter tensors stay the same autograd leaves throughout:
// gathering points them at the gathered buffer, releasing at an empty tensor. Every buffer
// is on the parameters' device (they must share one).
#pragma once

#include "learner/checkpoint_ranges.h"

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

namespace tandem {

class Collectives;

class FsdpParameters {
 public:
  // `parameters`: the model's (name, leaf) list in global order; `unit_sizes`: how many
  // consecutive parameters each unit takes. Copies this rank's shards, releases the rest.
  FsdpParameters(const std::vector<std::pair<std::string, at::Tensor>>& parameters,
                 const std::vector<size_t>& unit_sizes, Collectives& collectives);

  size_t units() const { return units_.size(); }
  void gather(size_t unit);
  void release(size_t unit);
  // Adds the gathered unit's parameter gradients, summed over ranks, to this rank's
  // gradient shard (a reduce-scatter), and clears the parameters' .grad.
  void reduce_gradients(size_t unit);

  at::Tensor& local_values() { return local_values_; }  // this rank's shards of every unit, back to back
  at::Tensor& local_grads() { return local_grads_; }
  // Where local_values' elements sit in the global flat layout (padding excluded).
  const std::vector<OwnedRange>& owned_ranges() const { return owned_; }

 private:
  struct Unit {
    size_t first = 0, count = 0;  // parameters [first, first + count)
    int64_t global_offset = 0;    // unpadded global flat offset of the unit's first element
    int64_t numel = 0;            // unpadded
    int64_t shard_numel = 0;      // padded numel / world size
    int64_t local_offset = 0;     // of this rank's shard in local_values_
    at::Tensor full;              // gathered values while gathered
  };
  std::vector<std::pair<std::string, at::Tensor>> parameters_;
  std::vector<int64_t> offsets_in_unit_;          // per parameter
  std::vector<std::vector<int64_t>> shapes_;      // per parameter (released leaves are empty)
  std::vector<Unit> units_;
  Collectives& collectives_;
  at::TensorOptions f32_;  // float32 on the parameters' device
  at::Tensor local_values_;
  at::Tensor local_grads_;
  std::vector<OwnedRange> owned_;
};

}  // namespace tandem
