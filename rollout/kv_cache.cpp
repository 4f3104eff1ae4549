#include "rollout/kv_cache.h"

#include "core/error.h"

namespace tandem {

int64_t kv_cache_blocks_for_budget(int64_t budget_bytes, const KvCacheShape& shape) {
  const int64_t per_block = shape.bytes_per_block();
  TANDEM_CHECK(per_block > 0, "KV cache shape has a zero dimension");
  int64_t blocks = budget_bytes / per_block;
  if (blocks < 1) {
    throw Error(fmt::format("KV cache budget of {} bytes holds no block ({} bytes each: {} layers x {} slots x {} "
                            "kv heads x {} head_dim x 2 x 4 B); raise rollout.kv_cache_mb",
                            budget_bytes, per_block, shape.num_layers, shape.block_size, shape.num_kv_heads,
                            shape.head_dim));
  }
  return blocks;
}

KvCache::KvCache(const KvCacheShape& shape) : shape_(shape) {
  const size_t per_layer = static_cast<size_t>(shape.num_blocks * shape.block_size * shape.num_kv_heads * shape.head_dim);
  keys_.assign(static_cast<size_t>(shape.num_layers), std::vector<float>(per_layer));
  values_.assign(static_cast<size_t>(shape.num_layers), std::vector<float>(per_layer));
}

BlockAllocator::BlockAllocator(int64_t num_blocks) : total_(num_blocks), in_use_(static_cast<size_t>(num_blocks)) {
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

int32_t BlockAllocator::allocate() {
  if (free_.empty()) return -1;
  int32_t block = free_.back();
  free_.pop_back();
  in_use_[block] = true;
  return block;
}

void BlockAllocator::release(int32_t block) {
  TANDEM_CHECK(block >= 0 && block < total_ && in_use_[block], "releasing block {} that is not allocated", block);
  in_use_[block] = false;
  free_.push_back(block);
}

}  // namespace tandem
