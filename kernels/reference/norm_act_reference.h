// Float64 references of kernels/norm_act.h: each kernel's definition written plainly in
// double. Inputs are what the kernels read, converted exactly (float and bf16 both are).
#pragma once

#include <cstdint>

namespace tandem::kernels::reference {

// out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight.
void rms_norm(const double* x,       // [rows, dim]
              const double* weight,  // [dim]
              int64_t rows,
              int64_t dim,
              double eps,
              double* out);          // [rows, dim]

// residual[r] += x[r]; out[r] = rms_norm(residual[r]) * weight. (Unrounded: the kernel
// rounds the stored residual to its storage type; the tolerance covers that.)
void fused_add_rms_norm(const double* x,       // [rows, dim]
                        double* residual,      // [rows, dim]
                        const double* weight,  // [dim]
                        int64_t rows,
                        int64_t dim,
                        double eps,
                        double* out);          // [rows, dim]

// out[r, i] = silu(gate_up[r, i]) * gate_up[r, dim + i].
void silu_mul(const double* gate_up,  // [rows, 2 * dim]
              int64_t rows,
              int64_t dim,
              double* out);           // [rows, dim]

// out[t] = table[ids[t]]; NaN rows for ids outside [0, vocab).
void embedding(const int32_t* ids,    // [tokens]
               const double* table,   // [vocab, dim]
               int64_t tokens,
               int64_t vocab,
               int64_t dim,
               double* out);          // [tokens, dim]

}  // namespace tandem::kernels::reference
