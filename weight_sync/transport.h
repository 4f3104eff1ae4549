// Learner -> rollout weight transfer: one interface, several transports.
//
//   shm         POSIX shared memory on one host. publish() writes the segment and
//               returns; receive() maps it (waiting up to timeout_s for it to appear).
//               Keep the sender and receiver between versions: a kept sender rewrites
//               its segment in place and a kept receiver keeps its mapping, which on a
//               VM is ~9x faster than fresh pages per version (bench/RESULTS.md).
//   collective  a broadcast from rank 0 over Gloo's TCP transport, any hosts. Ranks meet
//               through a rendezvous directory (address) that every rank can see.
//   cuda_ipc    one GPU shared by sender and receivers: the sender keeps the weights in a
//               device buffer and publishes its cudaIpcMemHandle and a cudaIpcEventHandle
//               through a small shm segment (address); receivers map the buffer.
//   nccl        ncclBroadcast from rank 0 over a communicator bootstrapped from an
//               ncclUniqueId that the caller carries to every rank (nccl_id.h).
//
// Every transport moves the same stream (layout.h): a header with the weight version and
// each tensor's name, shape, dtype and place, then the data in buckets of bucket_bytes,
// each with a checksum (checksum.h). The receiver checks the header against the tensors
// it expects before any data moves and every bucket's checksum on arrival. Errors name
// the transport ("weight_sync collective rank 1 of 3: ..."), the tensor or bucket, and
// what was wrong.
//
// Rendezvous. shm and cuda_ipc are mailboxes: publish() returns once the weights are in
// place and receivers take them afterwards; the sender must not publish again before they
// have (the controller's step order guarantees it). A shm receive that a publish overlaps
// fails ("wrote a new version while this receiver read") rather than return a mix.
// collective and nccl are collectives: publish() and every receiver's receive() must run
// at the same time, and publish() returns once every receiver has checked every bucket (a
// receiver that rejects the header or a bucket makes publish() fail too, naming its rank
// and reason; the group stays usable for the next version).
//
// Threading: a sender or receiver serves one call at a time. The collective ones connect on
// their first call (so creating one never blocks); after a transport failure (timeout, peer
// gone) they stay failed and a new group must be made with a fresh rendezvous.
#pragma once

#include "weight_sync/tensor.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tandem {

// Tests only: called on the sender after bucket `bucket`'s checksum is taken and before
// its bytes leave (host memory, `bytes` long), so a test can corrupt data in flight.
using BucketTamper = std::function<void(size_t bucket, uint8_t* data, size_t bytes)>;

struct WeightSyncOptions {
  std::string method;  // shm | collective | cuda_ipc | nccl (weight_sync_methods())
  // shm, cuda_ipc: the POSIX shm name, "/tandem-..."; collective: the rendezvous
  // directory (created if absent; one per group; left empty once the group connects);
  // nccl: a label for errors.
  std::string address;
  int rank = 0;        // collective, nccl: 0 sends, 1 .. world_size-1 receive
  int world_size = 2;  // collective, nccl: the sender plus every receiver
  int64_t bucket_bytes = int64_t{256} << 20;  // bytes per bucket, rounded up to 64
  double timeout_s = 60;  // longest wait for a peer to join, publish, or finish a bucket, s
  std::string host = "127.0.0.1";  // collective: the address this rank listens on
  std::string nccl_unique_id;      // nccl: raw bytes of nccl_new_unique_id() (nccl_id.h)
  int cuda_device = 0;             // cuda_ipc, nccl: the GPU this rank uses
  // shm or collective between tensor-parallel layouts (reshard.h): the learner's and each
  // engine's sizes; each pair's stream at reshard_segment_name(address, source, destination)
  // (collective: a group of that learner rank, as rank 0, and every receiver).
  // 0: one stream of whole tensors from learner rank 0.
  int reshard_sources = 0;
  int reshard_destinations = 0;
  BucketTamper tamper_bucket_for_test;
};

struct PublishStats {
  int64_t bytes = 0;    // stream bytes (data plus alignment padding)
  int64_t buckets = 0;
};

class WeightSender {
 public:
  virtual ~WeightSender() = default;
  // Sends `tensors` (names unique) as weight version `version`.
  virtual PublishStats publish(int64_t version, const std::vector<OutgoingTensor>& tensors) = 0;
};

class WeightReceiver {
 public:
  virtual ~WeightReceiver() = default;
  // Takes the next published weights, which must be exactly `expected` (names, in any
  // order; shapes; dtypes), hands each tensor to `sink`, and returns their version.
  virtual int64_t receive(const std::vector<ExpectedTensor>& expected, const WeightSink& sink) = 0;
};

// Both throw Error for an unknown method, bad options, or a method this build or machine
// cannot run ("built without CUDA", "no GPU: ...").
std::unique_ptr<WeightSender> make_weight_sender(const WeightSyncOptions& options);
std::unique_ptr<WeightReceiver> make_weight_receiver(const WeightSyncOptions& options);

const std::vector<std::string>& weight_sync_methods();

}  // namespace tandem
