// The learner's per-token layer ops on the CPU, each one autograd node with a hand-written
// backward: RMSNorm, SwiGLU and the rotary embedding. As libtorch composites they were ~10 elementwise kernels
// each way (pow, mean, rsqrt, mul, and the backward's muls and sums), each a pass over the
// activations: with bench/learner_cpu --profile, aten::mul alone was 14-16% of the small
// preset's step. Here each is one pass forward and one backward, parallel over rows, in
// float32 (the formulas below), whatever learner.precision is (these ops never ran in bf16).
#pragma once

#include <ATen/ATen.h>

namespace tandem {

// y = x · rsqrt(mean(x²) + eps) · weight over the last dimension. x float32 [..., H] on
// the CPU, weight float32 [H]. Backward, with r = rsqrt(mean(x²) + eps) and g = dy · weight:
// dx = r · (g - x · r² · mean(g · x)), dweight = Σ_rows dy · x · r.
at::Tensor fused_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

// silu(gate) · up, elementwise. gate and up float32 of one shape on the CPU. Backward,
// with s = sigmoid(gate): dgate = dy · up · s · (1 + gate · (1 - s)), dup = dy · gate · s.
at::Tensor fused_swiglu(const at::Tensor& gate, const at::Tensor& up);

// Rotary embedding, rotate-half convention: with x = (x1, x2) halves of the last dimension,
// y = (x1·cos1 - x2·sin1, x2·cos2 + x1·sin2), cos and sin's halves in the same places. x
// float32 [B, H, L, D] on the CPU (any strides: a transposed [B, L, H, D] view is read in
// place), cos and sin float32 [B, 1, L, D]. Returns y contiguous [B, H, L, D] (what
// fused_attention reads). Backward, the rotation the other way:
// dx1 = dy1·cos1 + dy2·sin2, dx2 = dy2·cos2 - dy1·sin1.
at::Tensor fused_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// Σ a[i]·b[i] over n floats, in float64 (exact products, float64 sums in 8 vectorised
// lanes): RMSNorm's sums, and the trainer's gradient norm.
double float64_dot(const float* a, const float* b, int64_t n);

// Whether the fused ops take these tensors (float32 on the CPU); callers use the composite
// ops otherwise (CUDA learners, float64 reference models).
bool fused_layer_ops_apply(const at::Tensor& a, const at::Tensor& b);

}  // namespace tandem
