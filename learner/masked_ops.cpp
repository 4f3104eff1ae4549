#include "learner/masked_ops.h"

#include "core/error.h"

#include <ATen/ATen.h>

#include <limits>
#include <string>

namespace tandem {

namespace {

std::string shape_text(at::IntArrayRef sizes) {
  std::string out = "[";
  for (size_t i = 0; i < sizes.size(); ++i) out += (i ? ", " : "") + std::to_string(sizes[i]);
  return out + "]";
}

}  // namespace

at::Tensor mask_to_bool(const at::Tensor& mask) {
  TANDEM_CHECK(mask.defined() && mask.dim() == 2, "mask must be a [B, T] tensor, got {} dimensions",
               mask.defined() ? mask.dim() : 0);
  return mask.scalar_type() == at::kBool ? mask : mask.ne(0);
}

void check_token_tensor(const at::Tensor& tensor, const at::Tensor& mask, const char* name) {
  TANDEM_CHECK(tensor.defined(), "{} is missing: expected a [B, T] tensor like the mask", name);
  TANDEM_CHECK(tensor.sizes() == mask.sizes(), "{} has shape {}, expected the mask's [B, T] = {}", name,
               shape_text(tensor.sizes()), shape_text(mask.sizes()));
}

at::Tensor zero_invalid(const at::Tensor& x, const at::Tensor& valid) {
  return at::where(valid, x, at::zeros({}, x.options()));
}

at::Tensor masked_sum(const at::Tensor& x, const at::Tensor& valid) { return zero_invalid(x, valid).sum(); }

at::Tensor masked_mean(const at::Tensor& x, const at::Tensor& valid) {
  // clamp_min(1): with no valid token the sum is 0 and so is the mean.
  at::Tensor count = valid.sum().clamp_min(1).to(x.scalar_type());
  return masked_sum(x, valid) / count;
}

at::Tensor masked_whiten(const at::Tensor& x, const at::Tensor& valid, double eps) {
  if (x.numel() == 0) return x.clone();
  at::Tensor x64 = zero_invalid(x.to(at::kDouble), valid);
  at::Tensor mean = masked_mean(x64, valid);
  at::Tensor centred = zero_invalid(x64 - mean, valid);
  at::Tensor std = (centred.pow(2).sum() / valid.sum().clamp_min(1).to(at::kDouble)).sqrt();
  // A float64 mean of equal values can still be one ulp off them; compare the extremes
  // instead so that "all equal" gives exactly 0 rather than (ulp / eps).
  const double inf = std::numeric_limits<double>::infinity();
  at::Tensor high = at::where(valid, x64, at::full({}, -inf, x64.options())).max();
  at::Tensor low = at::where(valid, x64, at::full({}, inf, x64.options())).min();
  at::Tensor whitened = at::where(high.eq(low), at::zeros_like(x64), centred / (std + eps));
  return zero_invalid(whitened, valid).to(x.scalar_type());
}

}  // namespace tandem
