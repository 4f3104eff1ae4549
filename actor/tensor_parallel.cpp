#include "actor/tensor_parallel.h"

#include "core/error.h"

#include <ATen/ATen.h>

namespace tandem {

at::Tensor shard_of(const at::Tensor& full, const ParameterShard& shard) {
  TANDEM_CHECK(full.sizes().vec() == shard.canonical_shape, "shard_of {}: got shape {}, its canonical shape is {}",
               shard.name, c10::str(full.sizes()), c10::str(at::IntArrayRef(shard.canonical_shape)));
  if (shard.dim < 0) return full;
  at::Tensor part = full.narrow(shard.dim, shard.begin, shard.length);
  const int64_t padding = shard.local_shape[shard.dim] - shard.length;
  if (padding == 0) return part;
  std::vector<int64_t> pad_shape = shard.local_shape;
  pad_shape[shard.dim] = padding;
  return at::cat({part, at::zeros(pad_shape, full.options())}, shard.dim);
}

}  // namespace tandem
