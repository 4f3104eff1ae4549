// Shared by cudasim's NCCL tests (test_nccl.cpp, test_nccl_failures.cpp): ranks as threads
// of this process or as forked processes, each on its own simulated device, running a list
// of collectives on fresh random inputs (the seed is printed; TANDEM_TEST_SEED=<seed>
// replays a run) and bringing their outputs or errors back.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace nccl_test {

using Bytes = std::vector<unsigned char>;
using Clock = std::chrono::steady_clock;

// The run's seed: TANDEM_TEST_SEED, else a random one (read once; forked ranks inherit it).
uint32_t run_seed();

// Throw std::runtime_error naming the call when it did not succeed.
void cuda(cudaError_t e, const char* what);
void nccl(ncclResult_t e, const char* what);

enum class Kind { all_reduce, reduce_scatter, all_gather, broadcast };

struct Call {
  Kind kind;
  ncclDataType_t type;
  ncclRedOp_t op;
  size_t count;  // NCCL's count argument
  int root = 0;
};

size_t element_bytes(ncclDataType_t t);
size_t send_elements(const Call& c, int nranks);
size_t recv_elements(const Call& c, int nranks);

// Element `i` of `b`, of type `t`, as a double.
double load(const Bytes& b, ncclDataType_t t, size_t i);

// Rank `rank`'s input to call number `index`: normal draws for floats (never all zeros),
// integers in [-1000, 1000] (int64 ones beyond 2^32), bytes in [0, 255].
Bytes input(const Call& c, int index, int rank, int nranks);

struct RankResult {
  std::string error;  // empty: ran
  std::vector<Bytes> outputs;
};

// One rank: its own device and stream, joins (`blocking` or polling), runs `calls`.
RankResult rank_body(int rank, int nranks, const ncclUniqueId& id, const std::vector<Call>& calls, bool blocking);

// Every rank's body, as threads of this process or as forked processes (which send back
// their results through a file).
std::vector<RankResult> run_ranks(int nranks, bool processes, const std::function<RankResult(int)>& body);

// A fresh unique id (REQUIREd to succeed).
ncclUniqueId new_id();

// Sets an environment variable for one test (read when a communicator joins).
struct ScopedEnv {
  std::string name;
  ScopedEnv(const char* n, const char* value) : name(n) { setenv(n, value, 1); }
  ~ScopedEnv() { unsetenv(name.c_str()); }
};

}  // namespace nccl_test
