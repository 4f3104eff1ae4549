// cudasim's NCCL (nccl.cpp, nccl_collectives.cpp): collectives' values against ones
// computed here from the inputs (fresh random inputs every run; the seed is printed), with
// ranks as threads of this process and as forked processes; non-blocking joining; NCCL's
// version and error strings. The failures a test must see instead of a hang or garbage (a
// rank that never joins or never calls, abort, mismatched calls, host or wrong-device
// buffers, two ranks on one device) are in test_nccl_failures.cpp, the same executable.
#define DOCTEST_CONFIG_IMPLEMENT
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

namespace {

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
