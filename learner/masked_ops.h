// Masked reductions over the learner's [B, T] token tensors, shared by the objectives.
//
// Convention for every objective in learner/: a batch of B responses padded to T tokens;
// `mask` [B, T] (bool, or any number type read as "!= 0") marks the response tokens
// that count. Values at masked-out positions are never read: every function selects with
// at::where before computing, so padding may hold anything (even inf or NaN) without
// leaking into results or gradients.
#pragma once

#include <ATen/core/Tensor.h>

namespace tandem {

// `mask` [B, T] of any dtype → [B, T] bool. Checks that it is 2-D.
at::Tensor mask_to_bool(const at::Tensor& mask);

// Checks that `tensor` is defined and has `mask`'s shape [B, T]; `name` is for the message.
void check_token_tensor(const at::Tensor& tensor, const at::Tensor& mask, const char* name);

// x [B, T] → [B, T] with 0 at masked positions (at::where, so NaN/inf padding stays out).
at::Tensor zero_invalid(const at::Tensor& x, const at::Tensor& valid);

// Sum of x [B, T] over valid tokens → scalar (x's dtype).
at::Tensor masked_sum(const at::Tensor& x, const at::Tensor& valid);

// Mean of x [B, T] over valid tokens → scalar; 0 when no token is valid (never NaN).
at::Tensor masked_mean(const at::Tensor& x, const at::Tensor& valid);

// x [B, T] → (x - mean) / (std + eps) over the valid tokens, computed in float64 and
// returned in x's dtype, 0 at masked positions. std is the population std (divide by N).
// When every valid value is equal the result is exactly 0 (not rounding noise / eps).
at::Tensor masked_whiten(const at::Tensor& x, const at::Tensor& valid, double eps);

}  // namespace tandem
