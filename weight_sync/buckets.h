// Cutting tensors into buckets and putting them back together (see layout.h for the
// stream the buckets are cut from).
#pragma once

#include "weight_sync/layout.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tandem {

// The part of one tensor that lies in one bucket.
struct BucketPiece {
  size_t tensor = 0;          // index into WeightLayout::tensors
  int64_t tensor_offset = 0;  // first byte of the piece within the tensor
  int64_t bucket_offset = 0;  // where the piece starts within the bucket
  int64_t bytes = 0;
};

std::vector<BucketPiece> bucket_pieces(const WeightLayout& layout, size_t bucket);

// Copies a bucket's bytes out of the tensors into `dst` (end - begin bytes), zeroing the
// padding. `copy` moves the bytes (memcpy; a GPU transport passes a cudaMemcpyDefault).
using CopyBytes = void (*)(void* dst, const void* src, size_t bytes);
void pack_bucket(const WeightLayout& layout, const std::vector<OutgoingTensor>& tensors, size_t bucket, uint8_t* dst,
                 CopyBytes copy);
// The same for host memory, returning the bucket's checksum: it is taken from `dst` a
// cache-sized chunk after each copy, so the bytes are read from memory once, not twice.
uint64_t pack_bucket_checksummed(const WeightLayout& layout, const std::vector<OutgoingTensor>& tensors,
                                 size_t bucket, uint8_t* dst);

// A bucket's checksum straight from the tensors (host memory), without packing it.
uint64_t bucket_checksum_from_tensors(const WeightLayout& layout, const std::vector<OutgoingTensor>& tensors,
                                      size_t bucket);

// The receiving side: takes verified buckets in order and hands each tensor to the sink
// once all of its bytes are in. A tensor inside one bucket goes to the sink straight from
// the bucket; one that spans buckets is assembled in a buffer of its own size first.
class BucketUnpacker {
 public:
  BucketUnpacker(const WeightLayout& layout, const WeightSink& sink);
  void add(size_t bucket, const uint8_t* data);  // data: the bucket's end - begin bytes
  void finish();                                 // tensors of zero bytes

 private:
  const WeightLayout& layout_;
  const WeightSink& sink_;
  std::map<size_t, std::vector<uint8_t>> partial_;  // spanning tensors being assembled
};

ExpectedTensor expected_from_layout(const LayoutTensor& tensor);

}  // namespace tandem
