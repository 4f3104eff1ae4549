// Tensor parallelism in a libtorch model: a parameter's shard, and the collectives a
// split forward takes (actor/tensor_parallel_layout.h has the layout itself).
#pragma once

#include "actor/tensor_parallel_layout.h"

#include <ATen/core/Tensor.h>

namespace tandem {

// This rank's part of canonical tensor `full` (any device), padding rows zero.
at::Tensor shard_of(const at::Tensor& full, const ParameterShard& shard);

// The collectives a tensor-parallel forward takes, differentiable (learner/tensor_parallel_ops.h
// implements them over the group's Collectives). Tensors are [B, L, ...]; "sequence" is dim 1.
class TensorParallelOps {
 public:
  virtual ~TensorParallelOps() = default;
  virtual const TensorParallelSpec& spec() const = 0;
  // Forward identity, backward all-reduce: where a replicated activation enters the split region.
  virtual at::Tensor copy_to_region(const at::Tensor& x) = 0;
  // Forward all-reduce, backward identity: partial sums leave the split region.
  virtual at::Tensor reduce_from_region(const at::Tensor& x) = 0;
  // Forward all-gather along the sequence, backward reduce-scatter (enter with SP).
  virtual at::Tensor gather_sequence(const at::Tensor& x) = 0;
  // Forward reduce-scatter along the sequence, backward all-gather (leave with SP).
  virtual at::Tensor reduce_scatter_sequence(const at::Tensor& x) = 0;
  // Forward all-gather along the last dimension, backward this rank's slice (whole logits
  // for PolicyModel::forward; the training path never calls it).
  virtual at::Tensor gather_last_dim(const at::Tensor& x) = 0;
  // The canonical tensor of a parameter from every rank's shard (no gradient): checkpoints,
  // exports and weight sync.
  virtual at::Tensor gather_parameter(const at::Tensor& local, const ParameterShard& shard) = 0;
};

}  // namespace tandem
