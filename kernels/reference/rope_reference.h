// Float64 reference of kernels/rope.h: rotate_half rotation of every q and k head by its
// token's cos/sin row (the kernel's float table, converted exactly, or exact angles).
#pragma once

#include <cstdint>

namespace tandem::kernels::reference {

// NaN heads for a position outside [0, max_positions), as the kernel.
void rope(double* q,                // [tokens, num_q_heads, head_dim], rows q_stride apart
          int64_t q_stride,
          double* k,                // [tokens, num_kv_heads, head_dim], rows k_stride apart
          int64_t k_stride,
          const int64_t* positions, // [tokens]
          const double* cos,        // [max_positions, head_dim / 2]
          const double* sin,        // [max_positions, head_dim / 2]
          int64_t tokens,
          int64_t num_q_heads,
          int64_t num_kv_heads,
          int64_t head_dim,
          int64_t max_positions);

}  // namespace tandem::kernels::reference
