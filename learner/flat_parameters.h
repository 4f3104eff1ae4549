// A model's trainable tensors as views into one contiguous float32 buffer, and their
// gradients as views into a second one (like DDP's gradient buckets and FSDP's flat
// parameters). Collectives and the optimizer then work on whole buffers or on equal
// shards of them: the buffer is zero-padded to a multiple of the world size. Both buffers
// are on the parameters' device (they must share one).
//
// The layout is the parameters in order, back to back, then padding: it does not
// depend on the world size, so a shard is a global [offset, offset + n) range and a
// checkpoint written by N ranks can be read back by M.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

namespace tandem {

class FlatParameters {
 public:
  struct Entry {
    std::string name;
    int64_t offset = 0;
    std::vector<int64_t> shape;
    int64_t numel = 0;
  };

  // Copies the parameters (float32 leaves that require grad) into the buffer and makes
  // each one a view of it (same autograd identity), its .grad a view of the gradients.
  FlatParameters(const std::vector<std::pair<std::string, at::Tensor>>& parameters, int world_size);

  const std::vector<Entry>& entries() const { return entries_; }
  int64_t numel() const { return numel_; }  // without padding
  int world_size() const { return world_size_; }
  int64_t shard_numel() const { return values_.numel() / world_size_; }

  at::Tensor& values() { return values_; }  // [shard_numel * world_size]
  at::Tensor& grads() { return grads_; }    // same shape
  at::Tensor value_shard(int rank) { return values_.narrow(0, rank * shard_numel(), shard_numel()); }
  at::Tensor grad_shard(int rank) { return grads_.narrow(0, rank * shard_numel(), shard_numel()); }
  void zero_grads();

 private:
  std::vector<Entry> entries_;
  int64_t numel_ = 0;
  int world_size_ = 1;
  at::Tensor values_;
  at::Tensor grads_;
};

}  // namespace tandem
