#include "rollout/kv_cache.h"

#include "core/error.h"

#include <algorithm>

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

KvCache::Buffer KvCache::zeroed_buffer(size_t floats) {
  float* memory = static_cast<float*>(std::calloc(std::max<size_t>(floats, 1), sizeof(float)));
  if (!memory) {
    throw Error(fmt::format("cannot allocate the KV cache ({} MiB per layer's keys); lower rollout.kv_cache_mb",
                            (floats * sizeof(float)) >> 20));
  }
  return Buffer(memory);
}

KvCache::KvCache(const KvCacheShape& shape) : shape_(shape) {
  const size_t per_layer = static_cast<size_t>(shape.num_blocks * shape.block_size * shape.num_kv_heads * shape.head_dim);
  for (int64_t layer = 0; layer < shape.num_layers; ++layer) {
    keys_.push_back(zeroed_buffer(per_layer));
    values_.push_back(zeroed_buffer(per_layer));
  }
}

void KvCache::copy_block(int32_t from, int32_t to) {
  TANDEM_CHECK(from >= 0 && from < shape_.num_blocks && to >= 0 && to < shape_.num_blocks,
               "KV block copy {} -> {} outside the cache's {} blocks", from, to, shape_.num_blocks);
  const int64_t count = shape_.block_size * shape_.num_kv_heads * shape_.head_dim;
  for (int64_t layer = 0; layer < shape_.num_layers; ++layer) {
    std::copy_n(key(layer, from, 0), count, key(layer, to, 0));
    std::copy_n(value(layer, from, 0), count, value(layer, to, 0));
  }
}

BlockAllocator::BlockAllocator(int64_t num_blocks)
    : total_(num_blocks), references_(static_cast<size_t>(num_blocks)) {
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

int32_t BlockAllocator::allocate() {
  if (free_.empty()) return -1;
  int32_t block = free_.back();
  free_.pop_back();
  references_[block] = 1;
  return block;
}

void BlockAllocator::share(int32_t block) {
  TANDEM_CHECK(block >= 0 && block < total_ && references_[block] > 0, "sharing block {} that is not allocated", block);
  ++references_[block];
}

void BlockAllocator::release(int32_t block) {
  TANDEM_CHECK(block >= 0 && block < total_ && references_[block] > 0, "releasing block {} that is not allocated", block);
  if (--references_[block] == 0) free_.push_back(block);
}

}  // namespace tandem
