// The learner's attention on the CPU as one autograd node: scores, mask, softmax and the
// value product in forward, and their gradients in backward, computed per (sequence, KV
// head) with Eigen products on the raw buffers.
//
// Why: libtorch 1.13's bmm on the CPU loops over the batch, building three tensor views
// (select) per matrix and dispatching a GEMM each; with a micro-batch of 32 sequences x 8
// heads that is ~74k view ops a step, and attention (about 1% of the small preset's FLOPs)
// took a third of the learner's step (bench/learner_cpu --profile). Here one parallel loop
// runs every head's products with no per-head dispatch, query heads of a group read their
// shared KV head in place (no repeat_interleave copies), and the backward accumulates the
// group's K and V gradients in one place (no race: a task owns a KV head).
//
// Arithmetic: float32 throughout (the products accumulate in float32, the softmax subtracts
// the row maximum), whatever learner.precision is: attention's products are a small share
// of the FLOPs, and float32 here is closer to the float64 forward than bf16 products.
// Memory: the probabilities [B, H, L, L] are kept for backward, as the composite
// (softmax's saved output) kept them.
#pragma once

#include <ATen/ATen.h>

namespace tandem {

// q [B, H, L, D], k and v [B, KV, L, D] float32 on the CPU (any strides), KV dividing H
// (query head h reads KV head h / (H / KV)); bias float32 [L, L] or [B, 1, L, L] holding 0
// or -inf (causality, segments; every row allows at least one key). Returns
// softmax(q kᵀ · scale + bias) v as [B, L, H · D], differentiable in q, k and v.
at::Tensor fused_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& bias,
                           double scale);

// Whether fused_attention takes these inputs (float32 CPU tensors of the shapes above);
// callers use the composite ops otherwise (CUDA learners, float64 reference models).
bool fused_attention_applies(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& bias);

}  // namespace tandem
