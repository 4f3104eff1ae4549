// The CPU learner's linear layers as one autograd node whose products run through oneDNN
// (actor/onednn_matmul.h): y_i = x · weight_iᵀ in float32 or bfloat16 products, the results
// and the gradients written in float32 directly.
//
// As libtorch composites under learner.precision bf16, a linear cast its input and weight
// to bfloat16, its bfloat16 result back to float32, and backward cast the incoming gradient
// down and both gradients up: six passes of casts around three products (aten::copy_ was
// 20% of the small preset's bf16 step in bench/learner_cpu --profile). Here two remain: the
// input and the incoming gradient go to bfloat16 once each, and the weight once per call
// (or once per optimizer step, from a copy the caller keeps). Nothing else changes
// numerically except that results are no longer rounded to bfloat16 before they return to
// float32 (closer to float64, never further).
//
// Several weights over one input (attention's q, k and v; the MLP's gate and up) share one
// node: the input is cast once, and backward sums the input's gradient in place in its
// products (oneDNN's accumulate) instead of autograd adding one gradient per projection.
#pragma once

#include <ATen/ATen.h>

#include <vector>

namespace tandem {

// x [..., K] float32, weight [N, K] float32 or bfloat16 (a frozen LoRA base), both on the
// CPU; compute: at::kFloat or at::kBFloat16, the dtype both operands of every product are
// rounded to. Returns float32 [..., N]. Backward (G the incoming gradient rounded to
// `compute`, X and W the rounded operands): dx = G · W, dweight = Gᵀ · X in float32;
// dweight only when weight requires a gradient.
//
// `weight_in_compute`, when defined, is `weight` already cast to `compute` (a copy the
// caller keeps across micro-batches, PolicyModel::set_keep_cast_weights): the products read
// it instead of casting `weight` again; the gradient still goes to `weight`.
at::Tensor fused_linear(const at::Tensor& x, const at::Tensor& weight, at::ScalarType compute,
                        const at::Tensor& weight_in_compute = {});

// fused_linear of one x with each of `weights` ([N_i, K] each), as one node: returns
// [..., N_i] per weight; dx = Σ_i G_i · W_i summed in float32 in weight order.
// `weights_in_compute`: empty, or one entry per weight (each undefined or that weight's cast).
// `gradient_buffers`: empty, or one entry per weight: undefined, or a float32 tensor of the
// weight's shape (gradient_buffer_of) into which backward adds that weight's gradient in
// place, in its product, instead of returning it for autograd to add (a pass over the
// gradient, per weight and micro-batch).
std::vector<at::Tensor> fused_linears(const at::Tensor& x, const std::vector<at::Tensor>& weights,
                                      at::ScalarType compute, const std::vector<at::Tensor>& weights_in_compute = {},
                                      const std::vector<at::Tensor>& gradient_buffers = {});

// The dense float32 gradient a parameter already has on the CPU (the trainer's flat
// gradient buffer, a view per parameter), which a backward may add into in place; undefined
// for anything else (no gradient yet, a sparse one, a tensor that takes no gradient).
at::Tensor gradient_buffer_of(const at::Tensor& parameter);

// Checks what a caller hands over with a weight, each part possibly undefined: its kept
// cast (`compute`, the weight's shape) and its gradient buffer (float32, the weight's shape
// and device, contiguous rows). `what` names the caller in the error.
void check_kept_cast_and_buffer(const char* what, const at::Tensor& weight, at::ScalarType compute,
                                const at::Tensor& cast, const at::Tensor& buffer);

// Whether fused_linear takes these tensors; callers use at::linear otherwise (CUDA
// learners, float64 reference models).
bool fused_linear_applies(const at::Tensor& x, const at::Tensor& weight, at::ScalarType compute);

}  // namespace tandem
