// cudasim's NCCL (nccl.cpp): collectives' values against ones computed here from the
// inputs (fresh random inputs every run; the seed is printed), with ranks as threads of
// this process and as forked processes; non-blocking joining; and the failures a test
// must see instead of a hang or garbage: a rank that never joins or never calls, abort,
// mismatched calls, host or wrong-device buffers, two ranks on one device.
#define DOCTEST_CONFIG_IMPLEMENT
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <doctest/doctest.h>
#include <nccl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
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

namespace {

using Bytes = std::vector<unsigned char>;
using Clock = std::chrono::steady_clock;

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

enum class Kind { all_reduce, reduce_scatter, all_gather, broadcast };

struct Call {
  Kind kind;
  ncclDataType_t type;
  ncclRedOp_t op;
  size_t count;  // NCCL's count argument
  int root = 0;
};

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

// Rank `rank`'s input to call number `index`: normal draws for floats (never all zeros),
// integers in [-1000, 1000] (int64 ones beyond 2^32), bytes in [0, 255].
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

// The device's answer, checked element by element against a float64 reference.
void check_output(const Call& c, int index, int rank, int nranks, const Bytes& got) {
  INFO("call ", index, " on rank ", rank);
  std::vector<Bytes> in;
  for (int q = 0; q < nranks; ++q) in.push_back(input(c, index, q, nranks));
  REQUIRE(got.size() == recv_elements(c, nranks) * element_bytes(c.type));
  const bool is_float = c.type == ncclFloat32 || c.type == ncclFloat64 || c.type == ncclBfloat16;
  // Rank-order folding in the element type: float32 and bfloat16 round at every step.
  const double rtol = c.type == ncclBfloat16 ? 1.0 / 64 : c.type == ncclFloat32 ? 1e-6 : c.type == ncclFloat64 ? 1e-14 : 0;
  size_t bad = 0;
  for (size_t i = 0; i < recv_elements(c, nranks) && bad < 5; ++i) {
    double want = 0, scale = 0;
    switch (c.kind) {
      case Kind::broadcast: want = load(in[c.root], c.type, i); break;
      case Kind::all_gather: want = load(in[i / c.count], c.type, i % c.count); break;
      case Kind::all_reduce:
      case Kind::reduce_scatter: {
        const size_t at = c.kind == Kind::reduce_scatter ? rank * c.count + i : i;
        want = load(in[0], c.type, at);
        scale = std::fabs(want);
        for (int q = 1; q < nranks; ++q) {
          const double x = load(in[q], c.type, at);
          want = c.op == ncclMax ? std::max(want, x) : want + x;
          scale += std::fabs(x);
        }
        if (c.op == ncclAvg) want /= nranks, scale /= nranks;
        break;
      }
    }
    const double have = load(got, c.type, i);
    const bool ok = is_float && c.op != ncclMax ? std::fabs(have - want) <= 1e-30 + rtol * scale : have == want;
    if (!ok) {
      ++bad;
      FAIL_CHECK("element ", i, ": got ", have, ", want ", want);
    }
  }
}

struct RankResult {
  std::string error;  // empty: ran
  std::vector<Bytes> outputs;
};

// One rank: its own device and stream, joins (`blocking` or polling), runs `calls`.
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

// Every rank's body, as threads of this process or as forked processes (which send back
// their results through a file).
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

// Sets an environment variable for one test (read when a communicator joins).
struct ScopedEnv {
  std::string name;
  ScopedEnv(const char* n, const char* value) : name(n) { setenv(n, value, 1); }
  ~ScopedEnv() { unsetenv(name.c_str()); }
};

void check_collectives(int nranks, bool processes, bool blocking) {
  // 4 KiB slots: most calls take several rounds (1,024 float32 per round; a third of that
  // per destination in a reduce-scatter over three ranks).
  ScopedEnv slot("CUDASIM_NCCL_SLOT_KB", "4");
  const std::vector<Call> calls = {
      {Kind::all_reduce, ncclFloat32, ncclSum, 3000},     {Kind::all_reduce, ncclFloat32, ncclMax, 2500},
      {Kind::all_reduce, ncclBfloat16, ncclSum, 777},     {Kind::all_reduce, ncclFloat64, ncclAvg, 300},
      {Kind::all_reduce, ncclInt32, ncclSum, 5},          {Kind::all_reduce, ncclInt64, ncclMax, 1},
      {Kind::reduce_scatter, ncclFloat32, ncclSum, 1000}, {Kind::reduce_scatter, ncclBfloat16, ncclSum, 64},
      {Kind::all_gather, ncclFloat32, ncclSum, 1500},     {Kind::all_gather, ncclUint8, ncclSum, 10000},
      {Kind::broadcast, ncclUint8, ncclSum, 9000, 0},     {Kind::broadcast, ncclFloat32, ncclSum, 100, nranks - 1},
      {Kind::all_reduce, ncclFloat32, ncclSum, 0},
  };
  const ncclUniqueId id = new_id();
  const auto results = run_ranks(nranks, processes, [&](int r) { return rank_body(r, nranks, id, calls, blocking); });
  for (int r = 0; r < nranks; ++r) {
    REQUIRE_MESSAGE(results[r].error.empty(), "rank ", r, ": ", results[r].error);
    REQUIRE(results[r].outputs.size() == calls.size());
    for (size_t k = 0; k < calls.size(); ++k) {
      check_output(calls[k], static_cast<int>(k), r, nranks, results[r].outputs[k]);
      if (calls[k].kind == Kind::all_reduce) CHECK(results[r].outputs[k] == results[0].outputs[k]);  // bit-identical on every rank
    }
  }
}

}  // namespace

TEST_CASE("collectives compute what NCCL defines: ranks as threads") {
  INFO("seed ", run_seed());
  SUBCASE("three ranks, blocking join") { check_collectives(3, false, true); }
  SUBCASE("two ranks, non-blocking join") { check_collectives(2, false, false); }
}

TEST_CASE("collectives compute what NCCL defines: ranks as processes") {
  INFO("seed ", run_seed());
  check_collectives(3, true, false);
}

TEST_CASE("a non-blocking join is in progress until every rank is in") {
  cuda(cudaSetDevice(0), "cudaSetDevice");
  const ncclUniqueId id = new_id();
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  REQUIRE(ncclCommInitRankConfig(&comm, 2, id, 0, &config) == ncclInProgress);
  ncclResult_t state = ncclSuccess;
  REQUIRE(ncclCommGetAsyncError(comm, &state) == ncclSuccess);
  CHECK(state == ncclInProgress);
  float* buffer = nullptr;
  REQUIRE(cudaMalloc(&buffer, 16) == cudaSuccess);
  CHECK(ncclAllReduce(buffer, buffer, 4, ncclFloat32, ncclSum, comm, nullptr) == ncclInvalidArgument);  // not joined yet
  std::thread other([&] {
    cudaSetDevice(1);
    ncclComm_t c1 = nullptr;
    ncclConfig_t blocking = NCCL_CONFIG_INITIALIZER;
    CHECK(ncclCommInitRankConfig(&c1, 2, id, 1, &blocking) == ncclSuccess);
    ncclCommDestroy(c1);
  });
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (ncclCommGetAsyncError(comm, &state) == ncclSuccess && state == ncclInProgress && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  other.join();
  CHECK(state == ncclSuccess);
  int count = 0, rank = -1;
  CHECK((ncclCommCount(comm, &count) == ncclSuccess && count == 2));
  CHECK((ncclCommUserRank(comm, &rank) == ncclSuccess && rank == 0));
  ncclCommDestroy(comm);
  cudaFree(buffer);
}

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

TEST_CASE("the version and error strings are NCCL's") {
  int version = 0;
  CHECK(ncclGetVersion(&version) == ncclSuccess);
  CHECK(version == NCCL_VERSION_CODE);
  CHECK(std::string(ncclGetErrorString(ncclInProgress)) == "NCCL operation in progress");
  CHECK(ncclGroupStart() == ncclSuccess);
  CHECK(ncclGroupEnd() == ncclSuccess);
  CHECK(ncclGroupEnd() == ncclInvalidUsage);
}

int main(int argc, char** argv) {
  setenv("CUDASIM_DEVICE_COUNT", "4", 0);  // each rank its own device, as NCCL wants
  std::printf("test_nccl: TANDEM_TEST_SEED=%u\n", run_seed());
  doctest::Context context(argc, argv);
  return context.run();
}
