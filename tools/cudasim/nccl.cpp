// NCCL for cudasim builds (linked instead of libnccl), against the real nccl.h: the
// communicator calls and the collectives tandem makes, between ranks that are processes or
// threads of one process, through a shared-memory segment the unique id names
// (nccl_segment.h).
//
// Like NCCL, a collective is queued on the caller's stream and runs when the stream gets
// to it (runtime.h, enqueue_polled: polled without the runtime's lock, so other ranks of
// the process keep calling the runtime). It passes its data a round (a chunk of at most
// one slot) at a time: a rank puts its chunk in its slot once every rank has read the
// previous round, then reads every rank's slot once all of them are in. A non-blocking
// communicator (config.blocking = 0) joins the same way: ncclCommGetAsyncError answers
// ncclInProgress until every rank is in. Nothing blocks in here; the runtime polls.
//
// Beyond NCCL: a rank missing for CUDASIM_NCCL_TIMEOUT_S seconds (default 30) turns into
// the communicator's asynchronous error (ncclRemoteError) instead of a hang; collectives
// called differently on different ranks (kind, type, count, op, root) are ncclInvalidUsage;
// buffers must be device memory of the communicator's device. CUDASIM_NCCL_SLOT_KB (default
// 1024) sets the slot, so that tests can make collectives take many rounds.
#include "nccl_reduce.h"
#include "nccl_segment.h"
#include "runtime.h"

#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>

namespace cudasim::nccl {
namespace {

using Clock = std::chrono::steady_clock;
constexpr char kIdMagic[] = "cudasim-nccl:";

std::string seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", s);
  return text;
}

double env_double(const char* name, double fallback) {
  const char* text = std::getenv(name);
  return text && *text ? std::strtod(text, nullptr) : fallback;
}

thread_local std::string last_error_anywhere;  // ncclGetLastError(nullptr)

ncclResult_t report(ncclResult_t status, const std::string& why, std::string* last_error = nullptr) {
  std::fprintf(stderr, "cudasim nccl: %s\n", why.c_str());
  last_error_anywhere = why;
  if (last_error) *last_error = why;
  return status;
}

enum class CollectiveKind : int32_t { all_reduce, broadcast, all_gather, reduce_scatter };
const char* kind_name(int32_t kind) {
  static const char* const names[] = {"ncclAllReduce", "ncclBroadcast", "ncclAllGather", "ncclReduceScatter"};
  return kind >= 0 && kind < 4 ? names[kind] : "an unknown collective";
}

struct Communicator {
  std::mutex mutex;  // the fields below; collectives advance under it too
  int nranks = 0, rank = 0, device = 0;
  std::string name;  // of the segment
  double timeout_s = 30;
  size_t slot_bytes = 0;
  std::unique_ptr<Segment> segment;
  bool claimed = false;  // this rank's place in the segment is taken
  ncclResult_t async_error = ncclInProgress;  // ncclInProgress while joining
  std::string last_error;
  bool aborted = false;
  Clock::time_point joining_since = Clock::now();
  uint64_t collectives = 0;      // queued on this rank, numbered from 0
  uint64_t rounds_queued = 0;    // rounds of the queued collectives
  uint64_t rounds_done = 0;      // rounds this rank has finished

  std::string where() const { return "rank " + std::to_string(rank) + " of " + std::to_string(nranks); }
  void fail(ncclResult_t status, const std::string& why) {
    async_error = report(status, where() + ": " + why, &last_error);
  }
  std::string missing(const std::function<bool(const RankState&)>& in) const {
    std::string who;
    for (int q = 0; q < nranks; ++q) {
      if (!in(segment->rank(q))) who += (who.empty() ? "" : ", ") + std::to_string(q);
    }
    return who;
  }
};

// One step of joining, under the communicator's mutex.
void advance_join(Communicator& c) {
  if (c.async_error != ncclInProgress || c.aborted) return;
  const bool late = Clock::now() - c.joining_since > std::chrono::duration<double>(c.timeout_s);
  if (!c.segment) {
    std::string error;
    c.segment = c.rank == 0 ? Segment::create(c.name, c.nranks, c.slot_bytes, &error)
                            : Segment::attach(c.name, c.nranks, &error);
    if (!error.empty()) return c.fail(c.rank == 0 ? ncclSystemError : ncclInvalidUsage, error);
    if (!c.segment) {
      if (late) {
        c.fail(ncclRemoteError, "rank 0 did not create the communicator of this unique id within " +
                                    seconds(c.timeout_s) + " (CUDASIM_NCCL_TIMEOUT_S)");
      }
      return;
    }
  }
  RankState& me = c.segment->rank(c.rank);
  if (!c.claimed) {
    uint32_t expected = static_cast<uint32_t>(JoinState::join_state_free);
    if (!me.join.compare_exchange_strong(expected, static_cast<uint32_t>(JoinState::join_state_claimed))) {
      return c.fail(ncclInvalidUsage, "another rank already joined as rank " + std::to_string(c.rank) +
                                          " with this unique id");
    }
    me.device = c.device;
    me.pid = static_cast<int32_t>(::getpid());
    me.join.store(static_cast<uint32_t>(JoinState::join_state_joined), std::memory_order_release);
    c.claimed = true;
  }
  const std::string absent = c.missing([](const RankState& s) {
    return s.join.load(std::memory_order_acquire) == static_cast<uint32_t>(JoinState::join_state_joined);
  });
  if (!absent.empty()) {
    if (late) {
      c.fail(ncclRemoteError, "ranks " + absent + " did not join within " + seconds(c.timeout_s) +
                                  " (CUDASIM_NCCL_TIMEOUT_S)");
    }
    return;
  }
  for (int q = 0; q < c.nranks; ++q) {
    if (q != c.rank && c.segment->rank(q).device == c.device) {
      // As NCCL: two ranks of one communicator on one GPU is an error.
      return c.fail(ncclInvalidUsage, "Duplicate GPU detected: rank " + std::to_string(c.rank) + " and rank " +
                                          std::to_string(q) + " both on CUDA device " + std::to_string(c.device));
    }
  }
  if (c.rank == 0) c.segment->unlink();  // everyone has it mapped
  c.async_error = ncclSuccess;
}

struct Collective {
  std::shared_ptr<Communicator> comm;
  RoundHeader call;
  const unsigned char* send;
  unsigned char* recv;
  size_t unit;          // elements per rank: see rounds_of
  size_t per_round;     // elements of `unit` per round
  uint64_t first_round, rounds;
  uint64_t round = 0;   // of this collective's, next to finish
  bool deposited = false;
  Clock::time_point last_progress;
  bool started = false;

  CollectiveKind kind() const { return static_cast<CollectiveKind>(call.kind); }
  ncclDataType_t type() const { return static_cast<ncclDataType_t>(call.datatype); }
  ncclRedOp_t op() const { return static_cast<ncclRedOp_t>(call.op); }
  std::string describe() const {
    return std::string(kind_name(call.kind)) + " #" + std::to_string(call.collective) + " (" +
           std::to_string(call.count) + " " + type_name(type()) + ")";
  }
};

// Puts this rank's part of round `j` in its slot.
void deposit(Collective& k, const Segment& s, int me, uint64_t j) {
  const size_t es = element_bytes(k.type());
  const size_t begin = j * k.per_round, n = std::min(k.unit - std::min(k.unit, begin), k.per_round);
  unsigned char* slot = s.slot(me);
  switch (k.kind()) {
    case CollectiveKind::broadcast:
      if (me != k.call.root) break;
      [[fallthrough]];
    case CollectiveKind::all_reduce:
    case CollectiveKind::all_gather:
      std::memcpy(slot, k.send + begin * es, n * es);
      break;
    case CollectiveKind::reduce_scatter:  // every destination's chunk, `per_round` apart
      for (int p = 0; p < s.nranks(); ++p) {
        std::memcpy(slot + static_cast<size_t>(p) * k.per_round * es, k.send + (p * k.unit + begin) * es, n * es);
      }
      break;
  }
}

// Computes this rank's output of round `j` from every rank's slot.
void collect(Collective& k, const Segment& s, int me, uint64_t j) {
  const size_t es = element_bytes(k.type());
  const size_t begin = j * k.per_round, n = std::min(k.unit - std::min(k.unit, begin), k.per_round);
  const int nranks = s.nranks();
  switch (k.kind()) {
    case CollectiveKind::broadcast:
      std::memcpy(k.recv + begin * es, s.slot(k.call.root), n * es);
      break;
    case CollectiveKind::all_gather:
      for (int q = 0; q < nranks; ++q) std::memcpy(k.recv + (q * k.unit + begin) * es, s.slot(q), n * es);
      break;
    case CollectiveKind::all_reduce:
    case CollectiveKind::reduce_scatter: {
      const size_t offset = k.kind() == CollectiveKind::reduce_scatter ? static_cast<size_t>(me) * k.per_round * es : 0;
      unsigned char* out = k.recv + begin * es;
      std::memcpy(out, s.slot(0) + offset, n * es);
      for (int q = 1; q < nranks; ++q) reduce_into(out, s.slot(q) + offset, n, k.type(), k.op());
      reduce_finish(out, n, k.type(), k.op(), nranks);
      break;
    }
  }
}

// The collective's polled work (runtime.h): true once finished, failed or abandoned.
bool advance(Collective& k) {
  Communicator& c = *k.comm;
  std::lock_guard<std::mutex> lock(c.mutex);
  if (c.aborted || c.async_error != ncclSuccess) return true;  // an aborted or failed communicator runs nothing
  const auto now = Clock::now();
  if (!k.started) {
    k.started = true;
    k.last_progress = now;
  }
  auto waiting_for = [&](const char* what, const std::string& ranks) {
    if (now - k.last_progress <= std::chrono::duration<double>(c.timeout_s)) return false;
    c.fail(ncclRemoteError, k.describe() + ": waited " + seconds(c.timeout_s) + " (CUDASIM_NCCL_TIMEOUT_S) for " +
                                what + " of ranks " + ranks + ": did every rank call it?");
    return true;
  };
  if (c.rounds_done != k.first_round + k.round) {
    return waiting_for("this rank's earlier collectives (queued on another stream?) and those", "any");
  }
  const Segment& s = *c.segment;
  RankState& mine = s.rank(c.rank);
  while (k.round < k.rounds) {
    const uint64_t n = k.first_round + k.round;
    if (!k.deposited) {
      const std::string busy = c.missing([n](const RankState& r) { return r.departed.load(std::memory_order_acquire) >= n; });
      if (!busy.empty()) return waiting_for("the previous round", busy);
      deposit(k, s, c.rank, k.round);
      mine.header = k.call;
      mine.arrived.store(n + 1, std::memory_order_release);
      k.deposited = true;
      k.last_progress = now;
    }
    const std::string absent = c.missing([n](const RankState& r) { return r.arrived.load(std::memory_order_acquire) > n; });
    if (!absent.empty()) return waiting_for("the arrival", absent);
    for (int q = 0; q < c.nranks; ++q) {
      const RoundHeader& h = s.rank(q).header;
      if (h.collective != k.call.collective || h.kind != k.call.kind || h.datatype != k.call.datatype ||
          h.count != k.call.count || (k.kind() == CollectiveKind::broadcast && h.root != k.call.root) ||
          ((k.kind() == CollectiveKind::all_reduce || k.kind() == CollectiveKind::reduce_scatter) && h.op != k.call.op)) {
        c.fail(ncclInvalidUsage,
               k.describe() + " met rank " + std::to_string(q) + "'s " + kind_name(h.kind) + " #" +
                   std::to_string(h.collective) + " (" + std::to_string(h.count) + " " +
                   type_name(static_cast<ncclDataType_t>(h.datatype)) + ", op " +
                   op_name(static_cast<ncclRedOp_t>(h.op)) + ", root " + std::to_string(h.root) +
                   "): the ranks must call the same collectives in the same order with the same arguments");
        return true;
      }
    }
    collect(k, s, c.rank, k.round);
    mine.departed.store(n + 1, std::memory_order_release);
    k.deposited = false;
    ++k.round;
    ++c.rounds_done;
    k.last_progress = now;
  }
  return true;
}

// Checks that `bytes` at `p` are device memory of the communicator's device.
ncclResult_t check_buffer(Communicator& c, const char* call, const char* which, const void* p, size_t bytes) {
  if (bytes == 0) return ncclSuccess;
  const int device = runtime::device_of_range(p, bytes);
  char range[96];
  std::snprintf(range, sizeof range, "[%p, +%zu bytes)", p, bytes);
  if (device < 0) {
    return report(ncclInvalidArgument,
                  std::string(call) + ": " + which + " " + range + " is not inside one device allocation (cudaMalloc)",
                  &c.last_error);
  }
  if (device != c.device) {
    return report(ncclInvalidArgument, std::string(call) + ": " + which + " " + range + " is on device " +
                                           std::to_string(device) + ", the communicator's is device " +
                                           std::to_string(c.device),
                  &c.last_error);
  }
  return ncclSuccess;
}

thread_local int thread_group_depth = 0;  // ncclGroupStart/End

}  // namespace
}  // namespace cudasim::nccl

// The handle: the communicator lives on while queued collectives still hold it.
struct ncclComm {
  std::shared_ptr<cudasim::nccl::Communicator> state;
};

using namespace cudasim::nccl;

namespace {

ncclResult_t enqueue_collective(const char* call, CollectiveKind kind, const void* send, void* recv, size_t count,
                                ncclDataType_t type, ncclRedOp_t op, int root, ncclComm_t handle, cudaStream_t stream) {
  if (!handle) return report(ncclInvalidArgument, std::string(call) + ": comm is NULL");
  const std::shared_ptr<Communicator>& c = handle->state;
  std::lock_guard<std::mutex> lock(c->mutex);
  if (c->async_error == ncclInProgress) {
    return report(ncclInvalidArgument, std::string(call) + ": the communicator has not finished joining "
                                                           "(ncclCommGetAsyncError says ncclInProgress)", &c->last_error);
  }
  if (c->async_error != ncclSuccess) return c->async_error;
  const size_t es = element_bytes(type);
  const bool reduces = kind == CollectiveKind::all_reduce || kind == CollectiveKind::reduce_scatter;
  if (es == 0 || (reduces && !reduction_supported(type, op))) {
    return report(ncclInvalidArgument, std::string(call) + ": " + type_name(type) + " with op " + op_name(op) +
                                           " is not simulated", &c->last_error);
  }
  if (kind == CollectiveKind::broadcast && (root < 0 || root >= c->nranks)) {
    return report(ncclInvalidArgument, std::string(call) + ": root " + std::to_string(root) + " outside " +
                                           std::to_string(c->nranks) + " ranks", &c->last_error);
  }
  const size_t n = static_cast<size_t>(c->nranks);
  const size_t send_elements = kind == CollectiveKind::reduce_scatter ? n * count : count;
  const size_t recv_elements = kind == CollectiveKind::all_gather ? n * count : count;
  const bool reads_send = kind != CollectiveKind::broadcast || root == c->rank;
  if (reads_send) {
    if (const ncclResult_t e = check_buffer(*c, call, "sendbuff", send, send_elements * es)) return e;
  }
  if (const ncclResult_t e = check_buffer(*c, call, "recvbuff", recv, recv_elements * es)) return e;

  auto k = std::make_shared<Collective>();
  k->comm = c;
  k->call = RoundHeader{c->collectives++, static_cast<int32_t>(kind), type, op, root, count};
  k->send = static_cast<const unsigned char*>(send);
  k->recv = static_cast<unsigned char*>(recv);
  k->unit = count;
  k->per_round = std::max<size_t>(1, c->segment->slot_bytes() / (es * (kind == CollectiveKind::reduce_scatter ? n : 1)));
  k->rounds = std::max<uint64_t>(1, (count + k->per_round - 1) / k->per_round);  // one at least: it is still checked
  k->first_round = c->rounds_queued;
  c->rounds_queued += k->rounds;
  cudasim::runtime::enqueue_polled(stream, call, [k] { return advance(*k); });
  return ncclSuccess;
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  if (!version) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t comm) {
  if (comm && !comm->state->last_error.empty()) return comm->state->last_error.c_str();
  return last_error_anywhere.c_str();
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (!id) return report(ncclInvalidArgument, "ncclGetUniqueId: id is NULL");
  std::random_device random;
  char name[96];
  std::snprintf(name, sizeof name, "/cudasim-nccl-%d-%08x%08x%08x", static_cast<int>(::getpid()), random(), random(),
                random());
  std::memset(id->internal, 0, sizeof id->internal);
  std::snprintf(id->internal, sizeof id->internal, "%s%s", kIdMagic, name);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config) {
  if (!comm) return report(ncclInvalidArgument, "ncclCommInitRank: comm is NULL");
  *comm = nullptr;
  if (nranks < 1 || nranks > kMaxRanks || rank < 0 || rank >= nranks) {
    return report(ncclInvalidArgument, "ncclCommInitRank: rank " + std::to_string(rank) + " of " +
                                           std::to_string(nranks) + " ranks");
  }
  if (std::strncmp(id.internal, kIdMagic, sizeof kIdMagic - 1) != 0 || id.internal[sizeof id.internal - 1] != '\0') {
    return report(ncclInvalidArgument, "ncclCommInitRank: the unique id is not one of cudasim's ncclGetUniqueId");
  }
  if (config && config->magic != 0xcafebeef) {
    return report(ncclInvalidArgument, "ncclCommInitRankConfig: the config was not set from NCCL_CONFIG_INITIALIZER");
  }
  const bool blocking = !config || config->blocking == NCCL_CONFIG_UNDEF_INT || config->blocking != 0;
  auto c = std::make_shared<Communicator>();
  c->nranks = nranks;
  c->rank = rank;
  cudaGetDevice(&c->device);  // as NCCL: the rank's GPU is the current device
  c->name = id.internal + sizeof kIdMagic - 1;
  c->timeout_s = env_double("CUDASIM_NCCL_TIMEOUT_S", 30);
  c->slot_bytes = static_cast<size_t>(std::max(1.0, env_double("CUDASIM_NCCL_SLOT_KB", 1024)) * 1024);
  ncclResult_t state;
  {
    std::lock_guard<std::mutex> lock(c->mutex);
    advance_join(*c);
    state = c->async_error;
  }
  auto pause = std::chrono::microseconds(10);
  while (blocking && state == ncclInProgress) {
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
    std::lock_guard<std::mutex> lock(c->mutex);
    advance_join(*c);
    state = c->async_error;
  }
  if (blocking && state != ncclSuccess) return state;  // no communicator; ncclGetLastError(NULL) says why
  if (state != ncclSuccess && state != ncclInProgress) return state;
  *comm = new ncclComm{std::move(c)};
  return state;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  return ncclCommInitRankConfig(comm, nranks, id, rank, nullptr);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (!comm || !async_error) return report(ncclInvalidArgument, "ncclCommGetAsyncError: comm or asyncError is NULL");
  Communicator& c = *comm->state;
  std::lock_guard<std::mutex> lock(c.mutex);
  advance_join(c);  // a poll is where a joining communicator progresses
  *async_error = c.async_error;
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (!comm) return report(ncclInvalidArgument, "ncclCommFinalize: comm is NULL");
  Communicator& c = *comm->state;
  std::lock_guard<std::mutex> lock(c.mutex);
  // Queued collectives still complete when their streams run (they hold the communicator).
  return c.async_error == ncclInProgress ? report(ncclInvalidUsage, "ncclCommFinalize while joining", &c.last_error)
                                         : c.async_error;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  delete comm;  // the segment goes with the last queued collective that holds it
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  {
    std::lock_guard<std::mutex> lock(comm->state->mutex);
    comm->state->aborted = true;  // its queued and running collectives end at their next poll
  }
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (!comm || !count) return report(ncclInvalidArgument, "ncclCommCount: comm or count is NULL");
  *count = comm->state->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (!comm || !device) return report(ncclInvalidArgument, "ncclCommCuDevice: comm or device is NULL");
  *device = comm->state->device;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (!comm || !rank) return report(ncclInvalidArgument, "ncclCommUserRank: comm or rank is NULL");
  *rank = comm->state->rank;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  return enqueue_collective("ncclAllReduce", CollectiveKind::all_reduce, sendbuff, recvbuff, count, datatype, op, 0,
                            comm, stream);
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  return enqueue_collective("ncclBroadcast", CollectiveKind::broadcast, sendbuff, recvbuff, count, datatype, ncclSum,
                            root, comm, stream);
}

ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream) {
  return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  return enqueue_collective("ncclAllGather", CollectiveKind::all_gather, sendbuff, recvbuff, sendcount, datatype,
                            ncclSum, 0, comm, stream);
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return enqueue_collective("ncclReduceScatter", CollectiveKind::reduce_scatter, sendbuff, recvbuff, recvcount,
                            datatype, op, 0, comm, stream);
}

// Groups: the calls inside run in the order made, which is what a group of collectives on
// one communicator does. (Point-to-point calls, which need a group's concurrency, are not
// simulated.)
ncclResult_t ncclGroupStart() {
  ++thread_group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (thread_group_depth == 0) return report(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  --thread_group_depth;
  return ncclSuccess;
}

}  // extern "C"
