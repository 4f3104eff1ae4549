// What the collective transports (Gloo's `collective`, `nccl`) provide to the one
// protocol they share (broadcast_protocol.h): a fixed group where rank 0 sends, a
// broadcast of host bytes, an all-gather of short status messages, and a bucket data
// path (buckets may live in GPU memory, so the group owns that part).
//
// Every operation is bounded by the group's timeout and throws Error on failure; after
// one has thrown, the group's connections are in an unknown state and it is not used
// again.
#pragma once

#include "weight_sync/layout.h"
#include "weight_sync/transport.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

class BroadcastGroup {
 public:
  virtual ~BroadcastGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Rank 0's `bytes` bytes at `data` (host memory) arrive in every other rank's `data`.
  virtual void broadcast(void* data, size_t bytes) = 0;
  // Every rank's `mine` (cut to kStatusBytes - 1) reaches every rank; index = rank.
  virtual std::vector<std::string> allgather(const std::string& mine) = 0;

  // Rank 0, before the header leaves: takes in `tensors` and fills every bucket's checksum.
  virtual void stage(WeightLayout& layout, const std::vector<OutgoingTensor>& tensors) = 0;
  // Rank 0: sends bucket `bucket` of what stage() took in. `tamper`: tests only.
  virtual void send_bucket(const WeightLayout& layout, const std::vector<OutgoingTensor>& tensors, size_t bucket,
                           const BucketTamper& tamper) = 0;
  // Other ranks: receives bucket `bucket`; its bytes in host memory, valid until the next call.
  virtual const uint8_t* receive_bucket(const WeightLayout& layout, size_t bucket) = 0;
};

constexpr size_t kStatusBytes = 1024;

// Packs statuses for an all-gather: `mine` cut and zero-padded to kStatusBytes; and back.
std::vector<char> status_pack(const std::string& mine);
std::vector<std::string> status_unpack(const std::vector<char>& all, int size);

}  // namespace tandem
