#include "weight_sync/buckets.h"

#include "core/checksum.h"
#include "core/trace.h"

#include <algorithm>
#include <cstring>

namespace tandem {

std::vector<BucketPiece> bucket_pieces(const WeightLayout& layout, size_t bucket) {
  const LayoutBucket& b = layout.buckets.at(bucket);
  std::vector<BucketPiece> pieces;
  // Tensors are in stream order: start at the first one that ends after the bucket begins.
  auto first = std::upper_bound(layout.tensors.begin(), layout.tensors.end(), b.begin,
                                [](int64_t at, const LayoutTensor& t) { return at < t.offset + t.bytes; });
  for (auto it = first; it != layout.tensors.end() && it->offset < b.end; ++it) {
    const int64_t begin = std::max(b.begin, it->offset), end = std::min(b.end, it->offset + it->bytes);
    if (end <= begin) continue;
    pieces.push_back({static_cast<size_t>(it - layout.tensors.begin()), begin - it->offset, begin - b.begin, end - begin});
  }
  return pieces;
}

void pack_bucket(const WeightLayout& layout, const std::vector<OutgoingTensor>& tensors, size_t bucket, uint8_t* dst,
                 CopyBytes copy) {
  const LayoutBucket& b = layout.buckets.at(bucket);
  trace::Span span("pack_bucket", "sync");
  span.set_count(b.end - b.begin);
  int64_t filled = 0;
  for (const BucketPiece& p : bucket_pieces(layout, bucket)) {
    if (p.bucket_offset > filled) std::memset(dst + filled, 0, static_cast<size_t>(p.bucket_offset - filled));
    copy(dst + p.bucket_offset, static_cast<const uint8_t*>(tensors[p.tensor].data) + p.tensor_offset,
         static_cast<size_t>(p.bytes));
    filled = p.bucket_offset + p.bytes;
  }
  if (b.end - b.begin > filled) std::memset(dst + filled, 0, static_cast<size_t>(b.end - b.begin - filled));
}

uint64_t pack_bucket_checksummed(const WeightLayout& layout, const std::vector<OutgoingTensor>& tensors,
                                 size_t bucket, uint8_t* dst) {
  constexpr int64_t kChunk = 128 << 10;  // stays in L2 between the copy and the checksum
  const LayoutBucket& b = layout.buckets.at(bucket);
  trace::Span span("pack_bucket", "sync");
  span.set_count(b.end - b.begin);
  Checksum64 checksum;
  int64_t filled = 0;
  auto pad_to = [&](int64_t at) {
    std::memset(dst + filled, 0, static_cast<size_t>(at - filled));
    checksum.update_zeros(static_cast<size_t>(at - filled));
    filled = at;
  };
  for (const BucketPiece& p : bucket_pieces(layout, bucket)) {
    pad_to(p.bucket_offset);
    const uint8_t* src = static_cast<const uint8_t*>(tensors[p.tensor].data) + p.tensor_offset;
    for (int64_t done = 0; done < p.bytes; done += kChunk) {
      const auto n = static_cast<size_t>(std::min(kChunk, p.bytes - done));
      std::memcpy(dst + filled, src + done, n);
      checksum.update(dst + filled, n);
      filled += static_cast<int64_t>(n);
    }
  }
  pad_to(b.end - b.begin);
  return checksum.digest();
}

uint64_t bucket_checksum_from_tensors(const WeightLayout& layout, const std::vector<OutgoingTensor>& tensors,
                                      size_t bucket) {
  const LayoutBucket& b = layout.buckets.at(bucket);
  Checksum64 checksum;
  int64_t filled = 0;
  for (const BucketPiece& p : bucket_pieces(layout, bucket)) {
    checksum.update_zeros(static_cast<size_t>(p.bucket_offset - filled));
    checksum.update(static_cast<const uint8_t*>(tensors[p.tensor].data) + p.tensor_offset, static_cast<size_t>(p.bytes));
    filled = p.bucket_offset + p.bytes;
  }
  checksum.update_zeros(static_cast<size_t>(b.end - b.begin - filled));
  return checksum.digest();
}

ExpectedTensor expected_from_layout(const LayoutTensor& tensor) { return {tensor.name, tensor.shape, tensor.dtype}; }

BucketUnpacker::BucketUnpacker(const WeightLayout& layout, const WeightSink& sink) : layout_(layout), sink_(sink) {}

void BucketUnpacker::add(size_t bucket, const uint8_t* data) {
  trace::Span span("unpack_bucket", "sync");
  span.set_count(layout_.buckets.at(bucket).end - layout_.buckets.at(bucket).begin);
  for (const BucketPiece& p : bucket_pieces(layout_, bucket)) {
    const LayoutTensor& t = layout_.tensors[p.tensor];
    if (p.bytes == t.bytes) {  // wholly inside this bucket
      sink_(expected_from_layout(t), data + p.bucket_offset);
      continue;
    }
    std::vector<uint8_t>& whole = partial_[p.tensor];
    if (whole.empty()) whole.resize(static_cast<size_t>(t.bytes));
    std::memcpy(whole.data() + p.tensor_offset, data + p.bucket_offset, static_cast<size_t>(p.bytes));
    if (p.tensor_offset + p.bytes == t.bytes) {  // the last piece: buckets arrive in order
      sink_(expected_from_layout(t), whole.data());
      partial_.erase(p.tensor);
    }
  }
}

void BucketUnpacker::finish() {
  static const uint8_t nothing[kWeightAlign] = {};
  for (const LayoutTensor& t : layout_.tensors) {
    if (t.bytes == 0) sink_(expected_from_layout(t), nothing);
  }
}

}  // namespace tandem
