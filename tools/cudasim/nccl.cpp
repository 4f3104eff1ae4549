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
//
// This file: joining (the unique id, blocking and non-blocking init, timeouts) and the
// communicator calls. The collectives are in nccl_collectives.cpp; the communicator both
// use is in nccl_communicator.h.
#include "nccl_communicator.h"
#include "nccl_segment.h"

#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>

namespace cudasim::nccl {
namespace {

constexpr char kIdMagic[] = "cudasim-nccl:";

double env_double(const char* name, double fallback) {
  const char* text = std::getenv(name);
  return text && *text ? std::strtod(text, nullptr) : fallback;
}

thread_local std::string last_error_anywhere;  // ncclGetLastError(nullptr)

}  // namespace

std::string seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", s);
  return text;
}

ncclResult_t report(ncclResult_t status, const std::string& why, std::string* last_error) {
  std::fprintf(stderr, "cudasim nccl: %s\n", why.c_str());
  last_error_anywhere = why;
  if (last_error) *last_error = why;
  return status;
}

namespace {

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

}  // namespace
}  // namespace cudasim::nccl

using namespace cudasim::nccl;

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

}  // extern "C"
