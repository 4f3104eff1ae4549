// cudasim's own tests: the simulated semantics (warp collectives, counting barriers, stream
// order, events, launch checks, cuBLAS's GEMM contract) against values worked out here,
// and one planted GPU bug per check that the simulator must report.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "tools/cudasim/runtime.h"
#include "tools/cudasim/tests/self_test_kernels.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

template <typename T>
struct Device {
  explicit Device(size_t n) : n(n) { REQUIRE(cudaMalloc(&p, n * sizeof(T)) == cudaSuccess); }
  ~Device() { cudaFree(p); }
  std::vector<T> download() {
    std::vector<T> h(n);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    REQUIRE(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    return h;
  }
  T* p = nullptr;
  size_t n;
};

// Runs a launcher that must fault; returns the report.
template <typename Launch>
std::string fault_of(Launch launch) {
  Device<float> out(64);
  launch(out.p, nullptr);
  const cudaError_t status = cudaDeviceSynchronize();
  CHECK(status == cudaErrorLaunchFailure);
  CHECK(cudaGetLastError() == cudaErrorLaunchFailure);  // sticky, as after a real fault
  return cudasim::runtime::take_fault();
}

bool is_poison(float x, unsigned char poison) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  return bits == poison * 0x01010101u;
}

}  // namespace

TEST_CASE("warp shuffles move values as CUDA defines, within the width's segments") {
  Device<float> out(8 * 32);
  cudasim_test::shuffles(out.p, nullptr);
  const std::vector<float> got = out.download();
  for (int lane = 0; lane < 32; ++lane) {
    CAPTURE(lane);
    const int base = lane & ~7, in8 = lane - base;
    CHECK(got[lane + 0 * 32] == 105.0f);
    CHECK(got[lane + 1 * 32] == 100.0f + (lane >= 3 ? lane - 3 : lane));
    CHECK(got[lane + 2 * 32] == 100.0f + (lane + 3 < 32 ? lane + 3 : lane));
    CHECK(got[lane + 3 * 32] == 100.0f + (lane ^ 6));
    CHECK(got[lane + 4 * 32] == 100.0f + base + 5);
    CHECK(got[lane + 5 * 32] == 100.0f + (in8 >= 3 ? lane - 3 : lane));
    CHECK(got[lane + 6 * 32] == 100.0f + (in8 + 3 < 8 ? lane + 3 : lane));
    CHECK(got[lane + 7 * 32] == 100.0f + (lane ^ 6));
  }
}

TEST_CASE("votes and counting barriers") {
  Device<unsigned> out(6);
  cudasim_test::votes(out.p, nullptr);
  const std::vector<unsigned> got = out.download();
  unsigned ballot = 0;
  for (int lane = 0; lane < 32; lane += 3) ballot |= 1u << lane;
  CHECK(got[0] == ballot);
  CHECK(got[1] == 1u);
  CHECK(got[2] == 0u);
  CHECK(got[3] == 40u);
  CHECK(got[4] == 1u);
  CHECK(got[5] == 0u);
}

TEST_CASE("shared memory nothing wrote reads as the poison byte") {
  Device<float> out(64);
  cudasim_test::read_unwritten_shared(out.p, nullptr);
  const unsigned char poison = static_cast<unsigned char>(
      std::getenv("CUDASIM_POISON") ? std::strtoul(std::getenv("CUDASIM_POISON"), nullptr, 0) : 0xFF);
  for (float x : out.download()) CHECK(is_poison(x, poison));
}

TEST_CASE("streams defer their work: without synchronisation the host sees stale data") {
  const int n = 300;
  Device<float> out(n);
  REQUIRE(cudaMemset(out.p, 0, n * sizeof(float)) == cudaSuccess);
  cudaStream_t side;
  REQUIRE(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking) == cudaSuccess);
  std::vector<float> host(n, -1.0f);
  cudasim_test::fill_ones(out.p, n, side);
  // The legacy stream does not wait for a non-blocking stream: the copy sees the memset only.
  REQUIRE(cudaMemcpy(host.data(), out.p, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(host[0] == 0.0f);
  CHECK(cudasim::runtime::pending_operations() == 1);
  // An async copy on the same stream: ordered after the kernel, but done only at the sync.
  REQUIRE(cudaMemcpyAsync(host.data(), out.p, n * sizeof(float), cudaMemcpyDeviceToHost, side) == cudaSuccess);
  CHECK(host[n - 1] == 0.0f);
  REQUIRE(cudaStreamSynchronize(side) == cudaSuccess);
  CHECK(host[0] == 1.0f);
  CHECK(host[n - 1] == 1.0f);
  CHECK(cudasim::runtime::pending_operations() == 0);
  cudaStreamDestroy(side);
}

TEST_CASE("pageable host sources are staged at the call; an event orders one stream after another") {
  const int n = 128;
  Device<float> a(n), b(n);
  cudaStream_t s1, s2;
  REQUIRE(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking) == cudaSuccess);
  std::vector<float> source(n, 7.0f);
  REQUIRE(cudaMemcpyAsync(a.p, source.data(), n * sizeof(float), cudaMemcpyHostToDevice, s1) == cudaSuccess);
  std::fill(source.begin(), source.end(), -1.0f);  // allowed right away, as with CUDA
  cudaEvent_t copied;
  REQUIRE(cudaEventCreate(&copied) == cudaSuccess);
  REQUIRE(cudaEventRecord(copied, s1) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(s2, copied, 0) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(b.p, a.p, n * sizeof(float), cudaMemcpyDeviceToDevice, s2) == cudaSuccess);
  std::vector<float> host(n);
  REQUIRE(cudaMemcpyAsync(host.data(), b.p, n * sizeof(float), cudaMemcpyDeviceToHost, s2) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s2) == cudaSuccess);  // runs s1's copy first: s2 waits on it
  CHECK(host[0] == 7.0f);
  CHECK(host[n - 1] == 7.0f);
  cudaEventDestroy(copied);
  cudaStreamDestroy(s1);
  cudaStreamDestroy(s2);
}

TEST_CASE("copies are checked against the allocations: a host pointer where device memory is due fails") {
  Device<float> d(16);
  std::vector<float> host(16), other(16);
  CHECK(cudaMemcpy(other.data(), host.data(), 64, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  CHECK(cudaMemcpy(host.data(), d.p, 68, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);  // past the end
  cudaGetLastError();
  CHECK(cudaMemcpy(host.data(), d.p, 64, cudaMemcpyDeviceToHost) == cudaSuccess);
}

TEST_CASE("launch configurations are checked as CUDA checks them") {
  Device<float> out(1024);
  cudasim_test::use_dynamic_shared(out.p, 2048, 0, nullptr);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  cudasim_test::use_dynamic_shared(out.p, 64, 64 * 1024, nullptr);  // over 48 KiB without the opt-in
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  REQUIRE(cudasim_test::allow_dynamic_shared(64 * 1024) == cudaSuccess);
  cudasim_test::use_dynamic_shared(out.p, 64, 64 * 1024, nullptr);
  CHECK(cudaGetLastError() == cudaSuccess);
  const std::vector<float> got = out.download();
  CHECK(got[0] == 63.0f);
  CHECK(got[63] == 0.0f);
}

TEST_CASE("planted bugs are reported, naming the construct and the place") {
  std::string report = fault_of(cudasim_test::divergent_barrier);
  CHECK(report.find("divergent barrier") != std::string::npos);
  CHECK(report.find("self_test_kernels.cu:") != std::string::npos);
  report = fault_of(cudasim_test::barrier_after_exit);
  CHECK(report.find("exited") != std::string::npos);
  report = fault_of(cudasim_test::divergent_shuffle);
  CHECK(report.find("__shfl_xor_sync") != std::string::npos);
  report = fault_of(cudasim_test::shuffle_outside_mask);
  CHECK(report.find("not in the mask") != std::string::npos);
  report = fault_of(cudasim_test::misaligned_pack);
  CHECK(report.find("misaligned") != std::string::npos);
  // The device works again after take_fault().
  Device<float> out(4);
  cudasim_test::fill_ones(out.p, 4, nullptr);
  CHECK(out.download()[3] == 1.0f);
}

TEST_CASE("cublasGemmEx follows the column-major contract (transposes, leading dimensions, beta 0, bf16)") {
  std::mt19937_64 rng(std::random_device{}());
  std::normal_distribution<float> normal;
  const int m = 5, n = 4, k = 7, lda = 9, ldb = 8, ldc = 6;
  cublasHandle_t handle;
  REQUIRE(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS);
  for (cublasOperation_t ta : {CUBLAS_OP_N, CUBLAS_OP_T}) {
    for (cublasOperation_t tb : {CUBLAS_OP_N, CUBLAS_OP_T}) {
      CAPTURE(ta);
      CAPTURE(tb);
      const int a_cols = ta == CUBLAS_OP_N ? k : m, b_cols = tb == CUBLAS_OP_N ? n : k;
      std::vector<float> A(lda * a_cols), B(ldb * b_cols), C(ldc * n, NAN);
      for (float& x : A) x = normal(rng);
      for (float& x : B) x = normal(rng);
      Device<float> dA(A.size()), dB(B.size()), dC(C.size());
      cudaMemcpy(dA.p, A.data(), A.size() * 4, cudaMemcpyHostToDevice);
      cudaMemcpy(dB.p, B.data(), B.size() * 4, cudaMemcpyHostToDevice);
      cudaMemcpy(dC.p, C.data(), C.size() * 4, cudaMemcpyHostToDevice);  // NaN: beta 0 must not read it
      const float alpha = 1.5f, beta = 0.0f;
      REQUIRE(cublasGemmEx(handle, ta, tb, m, n, k, &alpha, dA.p, CUDA_R_32F, lda, dB.p, CUDA_R_32F, ldb, &beta, dC.p,
                           CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
      const std::vector<float> got = dC.download();
      for (int i = 0; i < m; ++i) {
        for (int j = 0; j < n; ++j) {
          double want = 0;
          for (int p = 0; p < k; ++p) {
            const double a = ta == CUBLAS_OP_N ? A[i + p * lda] : A[p + i * lda];
            const double b = tb == CUBLAS_OP_N ? B[p + j * ldb] : B[j + p * ldb];
            want += a * b;
          }
          CHECK(std::abs(got[i + j * ldc] - 1.5 * want) <= 1e-5 * (1 + std::abs(want)));
        }
      }
      CHECK(std::isnan(got[m]));  // rows m..ldc-1 of each column are not C's: untouched
    }
  }
  Device<float> small(4);
  const float one = 1.0f;
  CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, small.p, CUDA_R_32F, 1, small.p, CUDA_R_32F, 2,
                     &one, small.p, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, small.p, CUDA_R_32F, 4, small.p, CUDA_R_32F, 4,
                     &one, small.p, CUDA_R_32F, 4, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_INVALID_VALUE);
  // bf16 in and out: the double-accumulated product rounded once.
  std::vector<__nv_bfloat16> a16 = {__float2bfloat16_rn(1.5f), __float2bfloat16_rn(-2.0f)};
  std::vector<__nv_bfloat16> b16 = {__float2bfloat16_rn(0.25f), __float2bfloat16_rn(3.0f)};
  Device<__nv_bfloat16> dA(2), dB(2), dC(1);
  cudaMemcpy(dA.p, a16.data(), 4, cudaMemcpyHostToDevice);
  cudaMemcpy(dB.p, b16.data(), 4, cudaMemcpyHostToDevice);
  const float zero = 0.0f;
  REQUIRE(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, 1, 1, 2, &one, dA.p, CUDA_R_16BF, 2, dB.p, CUDA_R_16BF, 2, &zero,
                       dC.p, CUDA_R_16BF, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
  CHECK(__bfloat162float(dC.download()[0]) == -5.625f);
  cublasDestroy(handle);
}
