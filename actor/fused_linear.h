// The CPU learner's linear layer as one autograd node whose products run through oneDNN
// (actor/onednn_matmul.h): y = x · weightᵀ in float32 or bfloat16 products, the result and
// the gradients written in float32 directly.
//
// As libtorch composites under learner.precision bf16, a linear cast its input and weight
// to bfloat16, its bfloat16 result back to float32, and backward cast the incoming gradient
// down and both gradients up: six passes of casts around three products (aten::copy_ was
// 20% of the small preset's bf16 step in bench/learner_cpu --profile). Here two remain: the
// input and the incoming gradient go to bfloat16 once each, and the weight once per call.
// Nothing else changes numerically except that results are no longer rounded to bfloat16
// before they return to float32 (closer to float64, never further).
#pragma once

#include <ATen/ATen.h>

namespace tandem {

// x [..., K] float32, weight [N, K] float32 or bfloat16 (a frozen LoRA base), both on the
// CPU; compute: at::kFloat or at::kBFloat16, the dtype both operands of every product are
// rounded to. Returns float32 [..., N]. Backward (G the incoming gradient rounded to
// `compute`, X and W the rounded operands): dx = G · W, dweight = Gᵀ · X in float32;
// dweight only when weight requires a gradient.
at::Tensor fused_linear(const at::Tensor& x, const at::Tensor& weight, at::ScalarType compute);

// Whether fused_linear takes these tensors; callers use at::linear otherwise (CUDA
// learners, float64 reference models).
bool fused_linear_applies(const at::Tensor& x, const at::Tensor& weight, at::ScalarType compute);

}  // namespace tandem
