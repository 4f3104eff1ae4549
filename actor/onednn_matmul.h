// Matrix products through oneDNN (Debian's libdnnl, the library libtorch 1.13 itself links)
// for the CPU learner's linear layers.
//
// Why not at::mm: at the learner's shapes (hundreds to thousands of rows, hundreds of
// columns) libtorch 1.13 sends float32 products to OpenBLAS, which reached 103-209 GFLOP/s
// forward and 122-159 backward on a 2-core AVX-512 EPYC where oneDNN reached 187-219; and a
// bfloat16 product in libtorch returns bfloat16, so every product casts its result (and
// backward its gradients) back to float32 in separate passes. oneDNN multiplies bfloat16
// operands accumulating in float32 and writes the float32 result directly. oneDNN picks
// its kernels by the CPU it runs on (AVX-512 BF16, AMX, or plain AVX2), not by the build.
#pragma once

#include <ATen/core/Tensor.h>

namespace tandem {

// out[M, N] = a[M, K] · b[K, N] (accumulate: out += a · b). a and b: both float32 or both
// bfloat16, 2-D, on the CPU, any strides (a transposed view is read in place); out: float32
// [M, N], rows contiguous (a row slice of a larger matrix is fine). The products accumulate
// in float32. Without accumulate, out is written, never read.
void onednn_matmul(const at::Tensor& a, const at::Tensor& b, const at::Tensor& out, bool accumulate = false);

// Whether this build has oneDNN (not with another libtorch: actor/meson.build). Without it
// onednn_matmul throws, and callers use libtorch's products.
bool onednn_available();

}  // namespace tandem
