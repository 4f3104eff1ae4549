// The POSIX shared-memory segment through which the ranks of one simulated NCCL
// communicator meet (nccl.cpp). The unique id names it; rank 0 creates it when it joins,
// the others attach once it exists, and rank 0 unlinks it as soon as every rank is in (so
// that nothing is left in /dev/shm; a process killed while joining can leave it behind).
// Ranks may be processes or threads of one process: everything they exchange is in the
// segment, the counters as lock-free atomics, and nobody ever blocks on it: the runtime
// polls (runtime.h, enqueue_polled).
//
// Layout: a header, one RankState per rank, then one data slot of `slot_bytes` per rank
// through which collectives pass, a round (a chunk) at a time.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace cudasim::nccl {

constexpr int kMaxRanks = 1024;

// What a rank put in its slot for one round, compared between the ranks: a collective
// called differently on different ranks is an error instead of garbage (or a hang).
struct RoundHeader {
  uint64_t collective;  // the collective's number on the communicator
  int32_t kind;         // CollectiveKind (nccl.cpp)
  int32_t datatype;     // ncclDataType_t
  int32_t op;           // ncclRedOp_t (reductions)
  int32_t root;         // broadcast
  uint64_t count;       // elements, as the call gave them
};

enum class JoinState : uint32_t { join_state_free = 0, join_state_claimed = 1, join_state_joined = 2 };

struct alignas(64) RankState {
  std::atomic<uint32_t> join;  // JoinState; device and pid are valid once joined
  int32_t device;
  int32_t pid;
  std::atomic<uint64_t> arrived;   // rounds this rank has put in its slot
  std::atomic<uint64_t> departed;  // rounds this rank has read (its slot may be reused after)
  RoundHeader header;              // of the round it put there last
};
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "atomics shared between processes must be lock-free");

class Segment {
 public:
  // Rank 0: creates `name` for `nranks` ranks. nullptr with `error` set when it cannot.
  static std::unique_ptr<Segment> create(const std::string& name, int nranks, size_t slot_bytes, std::string* error);
  // The other ranks: nullptr with `error` empty while rank 0 has not created it yet.
  static std::unique_ptr<Segment> attach(const std::string& name, int nranks, std::string* error);
  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  // Removes the name (rank 0, once every rank has attached); the mappings stay.
  void unlink();
  int nranks() const { return nranks_; }
  size_t slot_bytes() const { return slot_bytes_; }
  RankState& rank(int r) const;
  unsigned char* slot(int r) const;

 private:
  Segment(std::string name, void* base, size_t bytes, bool owner);
  std::string name_;
  void* base_;
  size_t bytes_;
  bool linked_;  // rank 0's name still exists
  int nranks_ = 0;
  size_t slot_bytes_ = 0;
};

}  // namespace cudasim::nccl
