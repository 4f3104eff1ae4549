// The ranks of cudasim's NCCL tests (nccl_test_ranks.h): their inputs, their bodies, and
// running them as threads or as forked processes that send their results back in a file.
#include "tools/cudasim/tests/nccl_test_ranks.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <doctest/doctest.h>
#include <nccl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace nccl_test {
namespace {

void store(Bytes& b, ncclDataType_t t, size_t i, double x) {
  unsigned char* p = b.data() + i * element_bytes(t);
  switch (t) {
    case ncclUint8: *p = static_cast<unsigned char>(x); break;
    case ncclBfloat16: { const __nv_bfloat16 h = __float2bfloat16_rn(static_cast<float>(x)); std::memcpy(p, &h, 2); break; }
    case ncclInt32: { const auto v = static_cast<int32_t>(x); std::memcpy(p, &v, 4); break; }
    case ncclFloat32: { const auto v = static_cast<float>(x); std::memcpy(p, &v, 4); break; }
    case ncclInt64: { const auto v = static_cast<int64_t>(x); std::memcpy(p, &v, 8); break; }
    default: std::memcpy(p, &x, 8);
  }
}

}  // namespace

uint32_t run_seed() {
  static const uint32_t seed = [] {
    const char* fixed = std::getenv("TANDEM_TEST_SEED");
    return fixed ? static_cast<uint32_t>(std::strtoull(fixed, nullptr, 10)) : std::random_device()();
  }();
  return seed;
}

void cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(e));
}
void nccl(ncclResult_t e, const char* what) {
  if (e != ncclSuccess) throw std::runtime_error(std::string(what) + ": " + ncclGetErrorString(e) + " (" + ncclGetLastError(nullptr) + ")");
}

size_t element_bytes(ncclDataType_t t) {
  switch (t) {
    case ncclUint8: return 1;
    case ncclBfloat16: return 2;
    case ncclInt32: case ncclFloat32: return 4;
    default: return 8;  // int64, float64
  }
}
size_t send_elements(const Call& c, int nranks) { return c.kind == Kind::reduce_scatter ? c.count * nranks : c.count; }
size_t recv_elements(const Call& c, int nranks) { return c.kind == Kind::all_gather ? c.count * nranks : c.count; }

double load(const Bytes& b, ncclDataType_t t, size_t i) {
  const unsigned char* p = b.data() + i * element_bytes(t);
  switch (t) {
    case ncclUint8: return *p;
    case ncclBfloat16: { __nv_bfloat16 h; std::memcpy(&h, p, 2); return __bfloat162float(h); }
    case ncclInt32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case ncclFloat32: { float v; std::memcpy(&v, p, 4); return v; }
    case ncclInt64: { int64_t v; std::memcpy(&v, p, 8); return static_cast<double>(v); }
    default: { double v; std::memcpy(&v, p, 8); return v; }
  }
}
Bytes input(const Call& c, int index, int rank, int nranks) {
  std::mt19937_64 rng(run_seed() * 1000003ull + static_cast<uint64_t>(index) * 131 + static_cast<uint64_t>(rank));
  std::normal_distribution<double> normal;
  std::uniform_int_distribution<int> small(-1000, 1000), byte(0, 255);
  const size_t n = send_elements(c, nranks);
  Bytes b(n * element_bytes(c.type));
  for (size_t i = 0; i < n; ++i) {
    double x = normal(rng);
    if (c.type == ncclInt32) x = small(rng);
    if (c.type == ncclInt64) x = small(rng) * 8589934592.0 + small(rng);
    if (c.type == ncclUint8) x = byte(rng);
    store(b, c.type, i, x);
  }
  return b;
}

RankResult rank_body(int rank, int nranks, const ncclUniqueId& id, const std::vector<Call>& calls, bool blocking) {
  RankResult result;
  try {
    cuda(cudaSetDevice(rank), "cudaSetDevice");
    cudaStream_t stream;
    cuda(cudaStreamCreate(&stream), "cudaStreamCreate");  // blocking, as the learner's
    ncclComm_t comm = nullptr;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = blocking ? 1 : 0;
    const ncclResult_t started = ncclCommInitRankConfig(&comm, nranks, id, rank, &config);
    if (!blocking && started != ncclInProgress && started != ncclSuccess) nccl(started, "ncclCommInitRankConfig");
    if (blocking) nccl(started, "ncclCommInitRankConfig");
    ncclResult_t state = ncclInProgress;
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (ncclCommGetAsyncError(comm, &state) == ncclSuccess && state == ncclInProgress && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    nccl(state, "joining");
    for (size_t k = 0; k < calls.size(); ++k) {
      const Call& c = calls[k];
      const size_t es = element_bytes(c.type);
      const Bytes in = input(c, static_cast<int>(k), rank, nranks);
      Bytes out(recv_elements(c, nranks) * es);
      void *send = nullptr, *recv = nullptr;
      cuda(cudaMalloc(&send, in.size()), "cudaMalloc");
      cuda(cudaMalloc(&recv, out.size()), "cudaMalloc");
      cuda(cudaMemcpy(send, in.data(), in.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
      switch (c.kind) {
        case Kind::all_reduce: nccl(ncclAllReduce(send, recv, c.count, c.type, c.op, comm, stream), "ncclAllReduce"); break;
        case Kind::reduce_scatter:
          nccl(ncclReduceScatter(send, recv, c.count, c.type, c.op, comm, stream), "ncclReduceScatter");
          break;
        case Kind::all_gather: nccl(ncclAllGather(send, recv, c.count, c.type, comm, stream), "ncclAllGather"); break;
        case Kind::broadcast: nccl(ncclBroadcast(send, recv, c.count, c.type, c.root, comm, stream), "ncclBroadcast"); break;
      }
      cuda(cudaMemcpyAsync(out.data(), recv, out.size(), cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync");
      cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      nccl(ncclCommGetAsyncError(comm, &state), "ncclCommGetAsyncError");
      nccl(state, "the collective");
      cuda(cudaFree(send), "cudaFree");
      cuda(cudaFree(recv), "cudaFree");
      result.outputs.push_back(std::move(out));
    }
    nccl(ncclCommFinalize(comm), "ncclCommFinalize");
    nccl(ncclCommDestroy(comm), "ncclCommDestroy");
    cuda(cudaStreamDestroy(stream), "cudaStreamDestroy");
  } catch (const std::exception& e) {
    result.error = e.what();
  }
  return result;
}

std::vector<RankResult> run_ranks(int nranks, bool processes, const std::function<RankResult(int)>& body) {
  std::vector<RankResult> results(static_cast<size_t>(nranks));
  if (!processes) {
    std::vector<std::thread> threads;
    for (int r = 0; r < nranks; ++r) threads.emplace_back([&, r] { results[r] = body(r); });
    for (auto& t : threads) t.join();
    return results;
  }
  std::vector<pid_t> children;
  const std::string base = "/tmp/cudasim-nccl-test-" + std::to_string(::getpid()) + "-";  // the parent's pid
  auto path = [&](int r) { return base + std::to_string(r); };
  for (int r = 0; r < nranks; ++r) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      const RankResult mine = body(r);
      std::ofstream f(path(r), std::ios::binary);
      const uint64_t error_bytes = mine.error.size(), n = mine.outputs.size();
      f.write(reinterpret_cast<const char*>(&error_bytes), 8).write(mine.error.data(), static_cast<std::streamsize>(error_bytes));
      f.write(reinterpret_cast<const char*>(&n), 8);
      for (const Bytes& b : mine.outputs) {
        const uint64_t size = b.size();
        f.write(reinterpret_cast<const char*>(&size), 8).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(size));
      }
      f.close();
      ::_exit(0);
    }
    children.push_back(pid);
  }
  for (int r = 0; r < nranks; ++r) {
    int status = 0;
    ::waitpid(children[r], &status, 0);
    std::ifstream f(path(r), std::ios::binary);
    uint64_t error_bytes = 0, n = 0;
    if (!f.read(reinterpret_cast<char*>(&error_bytes), 8)) {
      results[r].error = "the rank's process left no result (exit status " + std::to_string(status) + ")";
      continue;
    }
    results[r].error.resize(error_bytes);
    f.read(results[r].error.data(), static_cast<std::streamsize>(error_bytes));
    f.read(reinterpret_cast<char*>(&n), 8);
    for (uint64_t k = 0; k < n; ++k) {
      uint64_t size = 0;
      f.read(reinterpret_cast<char*>(&size), 8);
      Bytes b(size);
      f.read(reinterpret_cast<char*>(b.data()), static_cast<std::streamsize>(size));
      results[r].outputs.push_back(std::move(b));
    }
    std::remove(path(r).c_str());
  }
  return results;
}

ncclUniqueId new_id() {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  return id;
}

}  // namespace nccl_test
