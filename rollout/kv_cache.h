// The paged KV cache: keys and values live in fixed-size blocks of `block_size` token
// slots; a sequence's block table lists its blocks in order, so its token at position p
// sits in block table[p / block_size], slot p % block_size. Blocks of any sequence can be
// anywhere, so memory is never fragmented and a finished or preempted sequence frees
// whole blocks for the next one. The CUDA backend uses the same plan with device memory.
//
// Blocks are reference-counted so that sequences with the same prompt (the samples of a
// group) can list the same prompt blocks: a block is written only by a sequence that holds
// the one reference to it, so a shared block is copied first (copy-on-write, KvBlockCopy).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

namespace tandem {

struct KvCacheShape {
  int64_t num_layers = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t block_size = 16;  // token slots per block
  int64_t num_blocks = 0;

  // Bytes one block takes across all layers, keys and values (float32).
  int64_t bytes_per_block() const { return 2 * num_layers * block_size * num_kv_heads * head_dim * 4; }
};

// The number of blocks a memory budget holds. Throws Error when not even one fits.
int64_t kv_cache_blocks_for_budget(int64_t budget_bytes, const KvCacheShape& shape);

class KvCache {
 public:
  explicit KvCache(const KvCacheShape& shape);

  const KvCacheShape& shape() const { return shape_; }
  // [num_kv_heads, head_dim] of one slot.
  float* key(int64_t layer, int64_t block, int64_t slot) { return keys_[layer].get() + offset(block, slot); }
  float* value(int64_t layer, int64_t block, int64_t slot) { return values_[layer].get() + offset(block, slot); }
  const float* key(int64_t layer, int64_t block, int64_t slot) const { return keys_[layer].get() + offset(block, slot); }
  const float* value(int64_t layer, int64_t block, int64_t slot) const {
    return values_[layer].get() + offset(block, slot);
  }
  // Keys and values of every slot of block `from`, all layers, into block `to`.
  void copy_block(int32_t from, int32_t to);

 private:
  int64_t offset(int64_t block, int64_t slot) const {
    return (block * shape_.block_size + slot) * shape_.num_kv_heads * shape_.head_dim;
  }
  // calloc'd: a large budget is mapped zero pages that cost nothing until a block is
  // written (a std::vector would write all of it at start: seconds for a few GiB).
  struct FreeMemory {
    void operator()(float* p) const { std::free(p); }
  };
  using Buffer = std::unique_ptr<float[], FreeMemory>;
  static Buffer zeroed_buffer(size_t floats);

  KvCacheShape shape_;
  std::vector<Buffer> keys_;    // per layer: [num_blocks, block_size, num_kv_heads, head_dim]
  std::vector<Buffer> values_;  // same layout
};

// A copy-on-write the scheduler plans: block `to` (fresh) gets all of block `from`'s keys
// and values before the step's forward writes into it.
struct KvBlockCopy {
  int32_t from = 0;
  int32_t to = 0;
};

// Free-list of block ids with a reference count per block. Allocation order is
// deterministic (lowest id first).
class BlockAllocator {
 public:
  explicit BlockAllocator(int64_t num_blocks);
  int64_t total() const { return total_; }
  int64_t free_count() const { return static_cast<int64_t>(free_.size()); }
  // A block with one reference; -1 when none is free.
  int32_t allocate();
  // One more sequence lists this allocated block.
  void share(int32_t block);
  // Drops one reference; the block is free again when none is left.
  void release(int32_t block);
  int32_t references(int32_t block) const { return references_[block]; }

 private:
  int64_t total_;
  std::vector<int32_t> free_;  // a stack: the next block to hand out is at the back
  std::vector<int32_t> references_;  // per block; 0: free
};

}  // namespace tandem
