// Normalisation and activation kernels of the CUDA rollout backend: RMSNorm (plain, and
// fused with the residual add), SiLU-and-multiply, embedding gather.
//
// T is float or bf16 (instantiated for both in norm_act.cu); arithmetic is fp32 and each
// output is rounded once. Pointers are device pointers. Every launcher checks its
// arguments (throws tandem::Error), launches on `stream` and checks the launch; none
// allocates or synchronises, so all can be captured in a CUDA graph. When every pointer
// is 16-byte aligned and the row length a multiple of 16 / sizeof(T), rows move in
// 128-bit accesses; otherwise a scalar path runs (same results).
// Float64 references: kernels/reference/norm_act_reference.h.
#pragma once

#include "kernels/kernel_types.h"

#include <cstdint>

namespace tandem::kernels {

// out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight. One block per row; `out` may be `x`.
template <typename T>
void rms_norm(const T* x,       // [rows, dim]
              const T* weight,  // [dim]
              int64_t rows,
              int64_t dim,
              float eps,
              T* out,           // [rows, dim]
              CudaStream stream);

// The pre-norm residual step (vLLM's fused_add_rms_norm):
//   residual[r] += x[r];  out[r] = rms_norm(residual[r]) * weight.
// The sum is rounded to T when stored, and the norm is taken of the stored value, so
// `out` equals rms_norm(residual) computed afterwards. `out` may be `x`, not `residual`.
template <typename T>
void fused_add_rms_norm(const T* x,       // [rows, dim]
                        T* residual,      // [rows, dim], updated in place
                        const T* weight,  // [dim]
                        int64_t rows,
                        int64_t dim,
                        float eps,
                        T* out,           // [rows, dim]
                        CudaStream stream);

// out[r, i] = silu(gate_up[r, i]) * gate_up[r, dim + i], silu(g) = g / (1 + exp(-g)).
// The input is the output of one fused gate|up projection (gate in the first half of
// each row, up in the second), which is how the backend runs the MLP: one GEMM, not two.
template <typename T>
void silu_mul(const T* gate_up,  // [rows, 2 * dim]
              int64_t rows,
              int64_t dim,
              T* out,            // [rows, dim]
              CudaStream stream);

// out[t] = table[ids[t]]. An id outside [0, vocab) writes a row of NaN: the kernel never
// reads outside the table, and the bad id cannot pass unnoticed (the engine checks ids
// before a step; this is the last line).
template <typename T>
void embedding(const int32_t* ids,  // [tokens]
               const T* table,      // [vocab, dim]
               int64_t tokens,
               int64_t vocab,
               int64_t dim,
               T* out,              // [tokens, dim]
               CudaStream stream);

}  // namespace tandem::kernels
