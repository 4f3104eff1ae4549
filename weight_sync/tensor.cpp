#include "weight_sync/tensor.h"

#include "core/error.h"

namespace tandem {

int64_t tensor_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t tensor_bytes(const std::vector<int64_t>& shape, DType dtype) {
  for (int64_t d : shape) TANDEM_CHECK(d >= 0, "tensor shape {} has a negative dimension", shape_text(shape));
  return tensor_numel(shape) * static_cast<int64_t>(dtype_size(dtype));
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? "," : "") + std::to_string(shape[i]);
  return text + "]";
}

}  // namespace tandem
