// Types shared by the kernel API headers (norm_act.h, rope.h, paged_attention.h,
// sampling.h). Declared without any CUDA header so that host code, and builds without
// CUDA, can include the APIs; only the .cu files see the CUDA definitions.
#pragma once

struct CUstream_st;
struct __nv_bfloat16;  // cuda_bf16.h forward-declares it the same way

namespace tandem::kernels {

// The same type as cudaStream_t (which is `CUstream_st*`); nullptr is the legacy default stream.
using CudaStream = CUstream_st*;

// Storage type of bf16 tensors. Kernels load bf16, compute in fp32 and round once on store.
using bf16 = __nv_bfloat16;

}  // namespace tandem::kernels
