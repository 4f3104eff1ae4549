// Moving weights between tensor-parallel layouts (actor/tensor_parallel_layout.h) without
// assembling whole tensors: which canonical slice of which parameter each destination rank
// takes from which source rank, and the copies that put a slice in place.
//
// A parameter splits along one axis whatever T is (rows for q/k/v, gate/up and the
// vocabulary; columns for o/down; nothing for norms), so a rank's shard is one interval
// of canonical rows or columns and a transfer between two layouts is a list of interval
// intersections. Every rank derives the same plan from the two sizes alone: no messages
// agree on it.
//
// Checksums are taken in canonical coordinates (each value mixed with its index in the
// unsplit tensor), so the sum over any partition of a tensor is the same: the checksum of a
// slice does not depend on which rank, or which layout, held it.
#pragma once

#include "actor/model_config.h"
#include "actor/model_weights.h"
#include "actor/tensor_parallel_layout.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

// Rows (axis 0) or columns (axis 1) [begin, end) of a canonical tensor, every index of the
// other axis included.
struct CanonicalBlock {
  int axis = 0;
  int64_t begin = 0;
  int64_t end = 0;
  int64_t length() const { return end - begin; }
};

// The canonical rows or columns a rank's shard covers along `axis` (padding excluded).
CanonicalBlock shard_block(const ParameterShard& shard, int axis);
// The axis a parameter splits along in either layout (0 for a tensor replicated in both).
int split_axis(const ParameterShard& a, const ParameterShard& b);

// Values of `block` in canonical order ([length, columns] for rows, [rows, length] for columns).
std::vector<int64_t> block_shape(const ParameterShard& shard, const CanonicalBlock& block);
int64_t block_numel(const ParameterShard& shard, const CanonicalBlock& block);

// Copies `block` from one rank's local tensor to another's (either may be a packed block:
// block_view below). Both must cover the block.
void copy_block(const ParameterShard& from_shard, const float* from, const ParameterShard& to_shard, float* to,
                const CanonicalBlock& block);
// A "shard" that is exactly `block`, packed: what a transfer moves for one slice.
ParameterShard block_view(const ParameterShard& shard, const CanonicalBlock& block);

// Sum over the block's values of mix(canonical flat index, value bits), modulo 2^64.
uint64_t canonical_checksum(const ParameterShard& shard, const float* local, const CanonicalBlock& block);

// One slice a destination rank takes.
struct SliceTransfer {
  size_t parameter = 0;  // index into expected_weights(config)
  int source = 0;        // rank in the source layout
  int destination = 0;   // rank in the destination layout
  CanonicalBlock block;
};

struct ReshardPlan {
  int source_size = 1;
  int destination_size = 1;
  std::vector<std::vector<ParameterShard>> source_layouts;       // per source rank
  std::vector<std::vector<ParameterShard>> destination_layouts;  // per destination rank
  // Every value of every destination shard exactly once, ordered by destination,
  // parameter and block. A value several source ranks hold comes from source
  // (destination mod source_size) when it holds it, else the next one up: replicated
  // tensors spread over the sources.
  std::vector<SliceTransfer> slices;

  std::vector<SliceTransfer> between(int source, int destination) const;
  int64_t values_to(int destination) const;  // floats moved to one destination rank
  // "model.layers.0.self_attn.q_proj.weight[rows 0:64]": how a slice is named on the wire.
  std::string slice_name(const SliceTransfer& slice) const;
};

// Throws Error (check_tensor_parallel's) when either size does not split `config`.
ReshardPlan plan_reshard(const ModelConfig& config, int source_size, int destination_size);

// Copies a rank's part of canonical tensor `canonical` into its local tensor `local`
// (padding rows untouched).
void copy_from_canonical(const ParameterShard& shard, const float* canonical, float* local);

// A rank's local weights from canonical ones, padding rows zero.
ModelWeights shard_model_weights(const ModelConfig& config, const ModelWeights& canonical,
                                 const TensorParallelSpec& spec);

}  // namespace tandem
