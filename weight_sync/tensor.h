// What a weight transfer moves: named tensors with a shape and a dtype. The sender hands
// OutgoingTensor; the receiver says what it expects with ExpectedTensor and gets each
// tensor's bytes through a sink. Every transport (transport.h) uses these.
#pragma once

#include "core/safetensors.h"  // DType, dtype_size, dtype_name

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tandem {

struct OutgoingTensor {
  std::string name;
  std::vector<int64_t> shape;
  // numel(shape) * dtype_size(dtype) bytes. Host memory; the GPU transports also take
  // device memory (they copy with cudaMemcpyDefault).
  const void* data = nullptr;
  DType dtype = DType::f32;
};

struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::f32;
};

// Called once per tensor after its bytes arrived and every bucket holding them passed its
// checksum. `data` is host memory, numel * dtype_size bytes, valid during the call only.
// The order is the transport's (arrival order for the streaming ones). A receive that
// ends in an error may already have called the sink for some tensors: use what the sink
// collected only when receive returned.
using WeightSink = std::function<void(const ExpectedTensor& tensor, const void* data)>;

// The float32 sink of the older shm functions (shm.h), kept for their callers.
using TensorSink = std::function<void(const ExpectedTensor& tensor, const float* data)>;

int64_t tensor_numel(const std::vector<int64_t>& shape);
// numel * dtype_size; throws Error for negative dimensions.
int64_t tensor_bytes(const std::vector<int64_t>& shape, DType dtype);
// "[10,100]"
std::string shape_text(const std::vector<int64_t>& shape);

}  // namespace tandem
