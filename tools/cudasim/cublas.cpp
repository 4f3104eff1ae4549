// cuBLAS for cudasim builds (linked instead of libcublas): the handle calls and
// cublasGemmEx, following its contract: column-major operands, op(A) is m x k, op(B) is
// k x n, C = alpha op(A) op(B) + beta C with C not read when beta is 0, leading dimensions
// checked as cuBLAS checks them, host-side alpha and beta read at the call, and the product
// run in stream order on the handle's stream. Products accumulate in double and round once
// to the output type: a tight CPU reference of what cuBLAS computes in fp32.
#include "runtime.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Handle {
  cudaStream_t stream = nullptr;
};

cublasStatus_t invalid(const std::string& why) {
  std::fprintf(stderr, "cudasim cublas: CUBLAS_STATUS_INVALID_VALUE: %s\n", why.c_str());
  return CUBLAS_STATUS_INVALID_VALUE;
}

size_t element_bytes(cudaDataType t) {
  switch (t) {
    case CUDA_R_32F: return 4;
    case CUDA_R_16BF: return 2;
    default: return 0;
  }
}

double load(const void* base, cudaDataType t, size_t i) {
  if (t == CUDA_R_32F) return static_cast<const float*>(base)[i];
  __nv_bfloat16 h;
  std::memcpy(&h, static_cast<const char*>(base) + 2 * i, 2);
  return __bfloat162float(h);
}

void store(void* base, cudaDataType t, size_t i, double v) {
  if (t == CUDA_R_32F) {
    static_cast<float*>(base)[i] = static_cast<float>(v);
  } else {
    const __nv_bfloat16 h = __float2bfloat16_rn(static_cast<float>(v));
    std::memcpy(static_cast<char*>(base) + 2 * i, &h, 2);
  }
}

// Elements a column-major matrix of `rows` x `cols` with leading dimension `ld` spans.
size_t extent(int rows, int cols, int ld) {
  return rows == 0 || cols == 0 ? 0 : static_cast<size_t>(cols - 1) * ld + rows;
}

}  // namespace

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  *handle = reinterpret_cast<cublasHandle_t>(new Handle);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  delete reinterpret_cast<Handle*>(handle);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  reinterpret_cast<Handle*>(handle)->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  *stream = reinterpret_cast<Handle*>(handle)->stream;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t) {
  return handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

const char* cublasGetStatusName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    default: return "CUBLAS_STATUS_UNKNOWN";
  }
}
const char* cublasGetStatusString(cublasStatus_t s) {
  return s == CUBLAS_STATUS_SUCCESS ? "success" : "cudasim cublas error (the reason is on stderr)";
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  const bool float_compute = compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_FAST_16BF ||
                             compute == CUBLAS_COMPUTE_32F_FAST_TF32 || compute == CUBLAS_COMPUTE_32F_PEDANTIC;
  // The fp32-compute combinations tandem uses: (32F, 32F, 32F), (16BF, 16BF, 16BF or 32F).
  const bool types_ok = Atype == Btype && (Atype == CUDA_R_32F ? Ctype == CUDA_R_32F
                                                               : Atype == CUDA_R_16BF &&
                                                                     (Ctype == CUDA_R_16BF || Ctype == CUDA_R_32F));
  if (!float_compute || !types_ok) {
    std::fprintf(stderr, "cudasim cublas: CUBLAS_STATUS_NOT_SUPPORTED: cublasGemmEx types A %d B %d C %d compute %d\n",
                 Atype, Btype, Ctype, compute);
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  const bool a_n = transa == CUBLAS_OP_N, b_n = transb == CUBLAS_OP_N;
  if ((transa != CUBLAS_OP_N && transa != CUBLAS_OP_T) || (transb != CUBLAS_OP_N && transb != CUBLAS_OP_T)) {
    return invalid("cublasGemmEx: only CUBLAS_OP_N and CUBLAS_OP_T are simulated");
  }
  if (m < 0 || n < 0 || k < 0) return invalid("cublasGemmEx: negative m, n or k");
  const int a_rows = a_n ? m : k, a_cols = a_n ? k : m, b_rows = b_n ? k : n, b_cols = b_n ? n : k;
  if (lda < std::max(1, a_rows)) return invalid("cublasGemmEx: lda " + std::to_string(lda) + " < " + std::to_string(a_rows));
  if (ldb < std::max(1, b_rows)) return invalid("cublasGemmEx: ldb " + std::to_string(ldb) + " < " + std::to_string(b_rows));
  if (ldc < std::max(1, m)) return invalid("cublasGemmEx: ldc " + std::to_string(ldc) + " < " + std::to_string(m));
  const size_t a_bytes = extent(a_rows, a_cols, lda) * element_bytes(Atype);
  const size_t b_bytes = extent(b_rows, b_cols, ldb) * element_bytes(Btype);
  const size_t c_bytes = extent(m, n, ldc) * element_bytes(Ctype);
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  if (!cudasim::runtime::is_device_range(A, a_bytes) || !cudasim::runtime::is_device_range(B, b_bytes) ||
      !cudasim::runtime::is_device_range(C, c_bytes)) {
    return invalid("cublasGemmEx: A, B or C (" + std::to_string(a_bytes) + ", " + std::to_string(b_bytes) + ", " +
                   std::to_string(c_bytes) + " bytes) is not inside one device allocation");
  }
  const double a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);  // host pointer mode
  cudasim::runtime::enqueue(reinterpret_cast<Handle*>(handle)->stream, "cublasGemmEx", [=] {
    std::vector<double> column(static_cast<size_t>(k));
    for (int j = 0; j < n; ++j) {
      for (int p = 0; p < k; ++p) column[p] = load(B, Btype, b_n ? p + static_cast<size_t>(j) * ldb : j + static_cast<size_t>(p) * ldb);
      for (int i = 0; i < m; ++i) {
        double sum = 0.0;
        for (int p = 0; p < k; ++p) {
          sum += load(A, Atype, a_n ? i + static_cast<size_t>(p) * lda : p + static_cast<size_t>(i) * lda) * column[p];
        }
        const size_t at = i + static_cast<size_t>(j) * ldc;
        // beta == 0: C is output only (it may hold NaN from before).
        store(C, Ctype, at, b == 0.0 ? a * sum : a * sum + b * load(C, Ctype, at));
      }
    }
  });
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
