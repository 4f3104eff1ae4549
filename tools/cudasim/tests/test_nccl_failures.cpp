// cudasim's NCCL: the failures a test must see instead of a hang or garbage: a rank that
// never joins or never calls, ncclCommAbort, mismatched calls, host or wrong-device
// buffers, two ranks on one device. Part of test_nccl_cudasim (main is in test_nccl.cpp).
#include "tools/cudasim/tests/nccl_test_ranks.h"

#include <cuda_runtime.h>
#include <doctest/doctest.h>
#include <nccl.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

using namespace nccl_test;

TEST_CASE("a rank that never joins is a timeout error, not a hang") {
  ScopedEnv timeout("CUDASIM_NCCL_TIMEOUT_S", "1");
  const ncclUniqueId id = new_id();
  SUBCASE("rank 0 never comes: the others' blocking join fails") {
    cuda(cudaSetDevice(1), "cudaSetDevice");
    ncclComm_t comm = nullptr;
    const auto start = Clock::now();
    CHECK(ncclCommInitRank(&comm, 2, id, 1) == ncclRemoteError);
    CHECK(comm == nullptr);
    CHECK(std::string(ncclGetLastError(nullptr)).find("rank 0 did not create") != std::string::npos);
    CHECK(Clock::now() - start < std::chrono::seconds(10));
  }
  SUBCASE("a non-root rank never comes: rank 0's join fails, and its segment is gone") {
    cuda(cudaSetDevice(0), "cudaSetDevice");
    ncclComm_t comm = nullptr;
    CHECK(ncclCommInitRank(&comm, 3, id, 0) == ncclRemoteError);
    CHECK(std::string(ncclGetLastError(nullptr)).find("ranks 1, 2 did not join") != std::string::npos);
    const std::string shm = std::string("/dev/shm/") + (std::strchr(id.internal, '/') + 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    CHECK_MESSAGE(std::ifstream(shm).fail(), shm, " is left behind");
  }
}

TEST_CASE("a rank that never calls the collective: the stream polls not-ready, then the comm's error") {
  ScopedEnv timeout("CUDASIM_NCCL_TIMEOUT_S", "1");
  const ncclUniqueId id = new_id();
  const auto results = run_ranks(2, false, [&](int r) -> RankResult {
    RankResult out;
    try {
      cuda(cudaSetDevice(r), "cudaSetDevice");
      ncclComm_t comm = nullptr;
      nccl(ncclCommInitRank(&comm, 2, id, r), "ncclCommInitRank");
      if (r == 0) {
        cudaStream_t stream;
        cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
        float* buffer = nullptr;
        cuda(cudaMalloc(&buffer, 64), "cudaMalloc");
        cuda(cudaMemset(buffer, 0, 64), "cudaMemset");
        nccl(ncclAllReduce(buffer, buffer, 16, ncclFloat32, ncclSum, comm, stream), "ncclAllReduce");
        if (cudaStreamQuery(stream) != cudaErrorNotReady) out.error += "the query did not answer not-ready; ";
        const auto start = Clock::now();
        cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");  // the collective gives up
        if (Clock::now() - start > std::chrono::seconds(10)) out.error += "the synchronisation took too long; ";
        ncclResult_t state = ncclSuccess;
        ncclCommGetAsyncError(comm, &state);
        if (state != ncclRemoteError) out.error += std::string("async error ") + ncclGetErrorString(state) + "; ";
        if (std::string(ncclGetLastError(comm)).find("ncclAllReduce #0") == std::string::npos) {
          out.error += std::string("last error: ") + ncclGetLastError(comm);
        }
        cudaFree(buffer);
        cudaStreamDestroy(stream);
      }
      ncclCommAbort(comm);
    } catch (const std::exception& e) {
      out.error = e.what();
    }
    return out;
  });
  CHECK_MESSAGE(results[0].error.empty(), results[0].error);
  CHECK_MESSAGE(results[1].error.empty(), results[1].error);
}

TEST_CASE("ncclCommAbort ends a collective waiting for a peer") {
  ScopedEnv timeout("CUDASIM_NCCL_TIMEOUT_S", "60");
  const ncclUniqueId id = new_id();
  const auto results = run_ranks(2, false, [&](int r) -> RankResult {
    RankResult out;
    try {
      cuda(cudaSetDevice(r), "cudaSetDevice");
      ncclComm_t comm = nullptr;
      nccl(ncclCommInitRank(&comm, 2, id, r), "ncclCommInitRank");
      if (r == 0) {
        float* buffer = nullptr;
        cuda(cudaMalloc(&buffer, 64), "cudaMalloc");
        nccl(ncclAllReduce(buffer, buffer, 16, ncclFloat32, ncclSum, comm, nullptr), "ncclAllReduce");
        if (cudaStreamQuery(nullptr) != cudaErrorNotReady) out.error = "the query did not answer not-ready";
        const auto start = Clock::now();
        ncclCommAbort(comm);
        cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
        if (Clock::now() - start > std::chrono::seconds(5)) out.error = "the aborted collective still waited";
        cudaFree(buffer);
      } else {
        ncclCommAbort(comm);
      }
    } catch (const std::exception& e) {
      out.error = e.what();
    }
    return out;
  });
  CHECK_MESSAGE(results[0].error.empty(), results[0].error);
}

TEST_CASE("misuse is an error naming it: mismatched calls, host or wrong-device buffers, one device twice") {
  SUBCASE("ranks calling different counts") {
    const ncclUniqueId id = new_id();
    const auto results = run_ranks(2, false, [&](int r) {
      return rank_body(r, 2, id, {{Kind::all_reduce, ncclFloat32, ncclSum, r == 0 ? size_t{8} : size_t{9}}}, true);
    });
    for (int r = 0; r < 2; ++r) {
      CHECK_MESSAGE(results[r].error.find("invalid usage") != std::string::npos, results[r].error);
      CHECK_MESSAGE(results[r].error.find("must call the same collectives") != std::string::npos, results[r].error);
    }
  }
  SUBCASE("a host buffer, and a buffer of another device") {
    const ncclUniqueId id = new_id();
    const auto results = run_ranks(2, false, [&](int r) -> RankResult {
      RankResult out;
      cudaSetDevice(r);
      ncclComm_t comm = nullptr;
      if (ncclCommInitRank(&comm, 2, id, r) != ncclSuccess) return {"join failed", {}};
      if (r == 0) {
        std::vector<float> host(4);
        if (ncclAllReduce(host.data(), host.data(), 4, ncclFloat32, ncclSum, comm, nullptr) != ncclInvalidArgument ||
            std::string(ncclGetLastError(comm)).find("not inside one device allocation") == std::string::npos) {
          out.error += "a host buffer was accepted; ";
        }
        float* other = nullptr;
        cudaSetDevice(1);
        cudaMalloc(&other, 16);
        cudaSetDevice(0);
        if (ncclAllReduce(other, other, 4, ncclFloat32, ncclSum, comm, nullptr) != ncclInvalidArgument ||
            std::string(ncclGetLastError(comm)).find("is on device 1, the communicator's is device 0") == std::string::npos) {
          out.error += std::string("a device-1 buffer was accepted: ") + ncclGetLastError(comm);
        }
        cudaFree(other);
      }
      ncclCommDestroy(comm);
      return out;
    });
    CHECK_MESSAGE(results[0].error.empty(), results[0].error);
  }
  SUBCASE("two ranks on one device") {
    const ncclUniqueId id = new_id();
    const auto results = run_ranks(2, false, [&](int r) -> RankResult {
      cudaSetDevice(0);
      ncclComm_t comm = nullptr;
      const ncclResult_t e = ncclCommInitRank(&comm, 2, id, r);
      return {e == ncclInvalidUsage ? "" : std::string("join: ") + ncclGetErrorString(e), {}};
    });
    CHECK_MESSAGE(results[0].error.empty(), results[0].error);
    CHECK_MESSAGE(results[1].error.empty(), results[1].error);
    CHECK(std::string(ncclGetLastError(nullptr)).find("Duplicate GPU") == std::string::npos);  // thread-local: not this one's
  }
}

