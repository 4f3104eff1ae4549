// The CUDA backend's own small kernels, beside the kernels/ library: bias add after a
// cuBLAS GEMM, the gather of the rows whose logits are wanted, and a tensor-parallel
// rank's part of the embedding. T is float or bf16
// (kernels::bf16); arithmetic in fp32, one rounding per stored value. Pointers are device
// pointers; launchers check arguments (Error), launch on `stream`, check the launch, and
// neither allocate nor synchronise.
#pragma once

#include "kernels/kernel_types.h"

#include <cstdint>

namespace tandem::cuda_ops {

// x[r, i] += bias[i]. (cuBLAS has already rounded x to T once: a bf16 biased projection
// is rounded twice, within the backend's bf16 tolerance.)
template <typename T>
void add_bias(T* x,           // [rows, dim], updated in place
              const T* bias,  // [dim]
              int64_t rows,
              int64_t dim,
              kernels::CudaStream stream);

// out[i] = x[rows[i]] for i < count. Every rows[i] must be in [0, x_rows); the host checks
// the indices before uploading them.
template <typename T>
void gather_rows(const T* x,            // [x_rows, dim]
                 const int32_t* rows,   // [count]
                 int64_t count,
                 int64_t dim,
                 T* out,                // [count, dim]
                 kernels::CudaStream stream);

// out[t] = table[ids[t] - first] when first <= ids[t] < first + rows, else zeros: a
// tensor-parallel rank's share of the embedding (its vocabulary rows), summed over the group.
template <typename T>
void embedding_rows(const int32_t* ids,  // [tokens]
                    const T* table,      // [rows, dim]: ids [first, first + rows)
                    int64_t tokens,
                    int64_t first,
                    int64_t rows,
                    int64_t dim,
                    T* out,              // [tokens, dim]
                    kernels::CudaStream stream);

}  // namespace tandem::cuda_ops
