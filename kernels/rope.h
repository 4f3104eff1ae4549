// Rotary position embedding of the CUDA rollout backend, in place on q and k.
//
// Layout: Hugging Face's rotate_half (element i of a head pairs with i + head_dim/2), the
// same as rollout/cpu_ops.h `cpu::rope`. Angles come from a cos/sin table built once on the
// host in float64 (rope_cos_sin_table), not from position * inv_freq in fp32 on the device:
// an fp32 angle at position 32768 is off by up to 2e-3 rad, while the table's values are
// the learner's float64 angles rounded once, exactly what the CPU backend uses. The table
// also carries any rope scaling (llama3) through the inverse frequencies.
//
// T is float or bf16, P (position ids) int32_t or int64_t; all four are instantiated.
// Float64 reference: kernels/reference/rope_reference.h.
#pragma once

#include "kernels/kernel_types.h"

#include <cstdint>
#include <vector>

namespace tandem::kernels {

// cos[p, i] = cos(p * inverse_frequencies[i]), sin likewise, for p in [0, max_positions):
// angles in float64, rounded once to float. Each table is [max_positions, head_dim / 2]
// with head_dim / 2 = inverse_frequencies.size() (actor/model_config.h rope_inverse_frequencies).
void rope_cos_sin_table(const std::vector<double>& inverse_frequencies,
                        int64_t max_positions,
                        std::vector<float>& cos,
                        std::vector<float>& sin);

// Rotates every head of q and k by its token's position. q and k may be views into one
// fused qkv row (q_stride / k_stride: elements between consecutive tokens). A position
// outside [0, max_positions) writes NaN into that token's heads (loud, never out of bounds).
// One block per token.
template <typename T, typename P>
void rope(T* q,                  // [tokens, num_q_heads, head_dim], rows q_stride apart
          int64_t q_stride,
          T* k,                  // [tokens, num_kv_heads, head_dim], rows k_stride apart
          int64_t k_stride,
          const P* positions,    // [tokens]
          const float* cos,      // [max_positions, head_dim / 2]
          const float* sin,      // [max_positions, head_dim / 2]
          int64_t tokens,
          int64_t num_q_heads,
          int64_t num_kv_heads,
          int64_t head_dim,
          int64_t max_positions,
          CudaStream stream);

}  // namespace tandem::kernels
