// cudasim's collectives (see nccl.cpp for the whole design): all-reduce, broadcast,
// all-gather and reduce-scatter, queued on the caller's stream as polled work and passed
// between the ranks a round (a slot's worth) at a time through the segment. Every round's
// header is compared between the ranks, so that collectives called differently on
// different ranks are ncclInvalidUsage; buffers must be device memory of the
// communicator's device; a rank missing for the timeout is ncclRemoteError.
#include "nccl_communicator.h"
#include "nccl_reduce.h"
#include "nccl_segment.h"
#include "runtime.h"

#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

namespace cudasim::nccl {
namespace {

enum class CollectiveKind : int32_t { all_reduce, broadcast, all_gather, reduce_scatter };
const char* kind_name(int32_t kind) {
  static const char* const names[] = {"ncclAllReduce", "ncclBroadcast", "ncclAllGather", "ncclReduceScatter"};
  return kind >= 0 && kind < 4 ? names[kind] : "an unknown collective";
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
