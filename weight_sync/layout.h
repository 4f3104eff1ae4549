// The header of a transfer: which tensors, where their bytes sit, how they are cut into
// buckets, each bucket's checksum, and the weight version.
//
// Every transport moves one logical byte stream: the tensors in the sender's order, each
// starting on a 64-byte boundary with zero padding between them, cut into buckets of
// `bucket_bytes` (rounded up to a multiple of 64). A tensor may span several buckets and a
// bucket may hold several tensors. The header travels first (as JSON); the receiver checks
// it against what it expects before it takes any data.
#pragma once

#include "weight_sync/tensor.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

constexpr int64_t kWeightAlign = 64;

struct LayoutTensor {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::f32;
  int64_t offset = 0;  // into the stream, a multiple of kWeightAlign
  int64_t bytes = 0;
};

struct LayoutBucket {
  int64_t begin = 0;  // [begin, end) of the stream
  int64_t end = 0;
  uint64_t checksum = 0;  // of the stream bytes in [begin, end), padding included
};

struct WeightLayout {
  int64_t version = 0;
  int64_t total_bytes = 0;
  std::vector<LayoutTensor> tensors;
  std::vector<LayoutBucket> buckets;  // contiguous, covering [0, total_bytes); at least one
};

// Places `tensors` and cuts the stream (checksums left 0). Throws Error naming `where` and
// the tensor for a null pointer, a negative dimension or a repeated name.
WeightLayout plan_weight_layout(const std::vector<OutgoingTensor>& tensors, int64_t version, int64_t bucket_bytes,
                                const std::string& where);

std::string encode_weight_layout(const WeightLayout& layout);
// Parses and validates the structure (tensor sizes match shape and dtype and lie inside
// the stream, buckets are contiguous); a malformed header is an Error naming `where`.
WeightLayout decode_weight_layout(const std::string& text, const std::string& where);

// Throws Error naming `where` and the first tensor that is missing, unexpected, or has
// another shape or dtype than `expected` says (matched by name; order does not matter).
void check_weight_layout(const WeightLayout& layout, const std::vector<ExpectedTensor>& expected,
                         const std::string& where);

// "bucket 2 (bytes [8192, 12288))", for errors.
std::string describe_bucket(const WeightLayout& layout, size_t bucket);

}  // namespace tandem
