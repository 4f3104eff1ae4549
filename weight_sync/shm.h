// The `shm` weight transport: a learner publishes float32 weights into a POSIX
// shared-memory segment; rollout workers on the same host map it and copy them out.
//
// Segment layout: 8-byte little-endian header length, a JSON header (version, tensors
// with name / shape / byte offset, buckets with byte range and checksum), then the data,
// each tensor 64-byte aligned. Tensors are grouped into buckets of about `bucket_bytes`;
// each bucket's FNV-1a checksum is computed when written and verified when read, so a
// torn or corrupted segment is an error, never silently wrong weights. A new version
// goes into a fresh segment: the writer unlinks the old name first, and a reader that
// still maps the old one keeps reading it whole.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tandem {

struct OutgoingTensor {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;  // numel(shape) floats
};

struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> shape;
};

// Called once per tensor on arrival, in the expected order; `data` is valid during the call.
using TensorSink = std::function<void(const ExpectedTensor& tensor, const float* data)>;

struct ShmStats {
  int64_t bytes = 0;
  int64_t buckets = 0;
};

// Writes `tensors` under POSIX shm name `name` ("/tandem-..."), replacing an older segment.
ShmStats publish_weights_shm(const std::string& name, const std::vector<OutgoingTensor>& tensors, int64_t version,
                             int64_t bucket_bytes);

// Maps segment `name`, checks every bucket's checksum and that the tensors are exactly
// `expected` (names, order-independent; shapes), hands each to `sink`; returns the version.
// Errors name the segment and the tensor or bucket at fault.
int64_t receive_weights_shm(const std::string& name, const std::vector<ExpectedTensor>& expected,
                            const TensorSink& sink);

// Removes the segment (no error if absent).
void remove_weights_shm(const std::string& name);

}  // namespace tandem
