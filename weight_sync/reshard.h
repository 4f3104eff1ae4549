// Weight sync between tensor-parallel layouts (actor/tensor_parallel_slices.h): each source
// rank sends each destination rank exactly the slices the plan assigns it, over one stream
// per (source, destination) pair on any transport (transport.h). No rank assembles a whole
// tensor it does not hold, and a destination receives its own shard's values, once.
//
// A stream carries the pair's slices, named "<tensor>[rows a:b]" / "[columns a:b]", and
// one more tensor, kChecksumTensor: each slice's canonical checksum as its source computed
// it from its own shard (not from the packed bytes). The destination recomputes every
// slice's checksum where it landed in its shard. So besides the transports' own bucket
// checks, a slice placed in the wrong rows, swapped with another, dropped from a stream
// or delivered to the wrong destination fails naming the tensor and ranks, and a stream of
// another weight version fails naming its first tensor.
#pragma once

#include "actor/model_weights.h"
#include "actor/tensor_parallel_slices.h"
#include "weight_sync/tensor.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tandem {

inline constexpr const char* kChecksumTensor = "reshard.canonical_checksums";

// What a source rank sends one destination: tensors point into `storage`.
struct ReshardStream {
  std::vector<std::vector<float>> storage;
  std::vector<uint64_t> checksums;
  std::vector<OutgoingTensor> tensors;  // the slices, then kChecksumTensor ([slices] i64)
  int64_t slice_bytes = 0;              // the slices' bytes (the checksums not counted)
};

// The source rank's local tensor of a parameter (canonical name, local shape).
using LocalTensor = std::function<const float*(const ParameterShard& shard)>;

// `source`'s stream for `destination` (empty tensors when the plan moves nothing between them).
ReshardStream pack_reshard_stream(const ReshardPlan& plan, int source, int destination, const LocalTensor& local);

// What destination `destination` expects from `source` (the same names and shapes).
std::vector<ExpectedTensor> expected_reshard_stream(const ReshardPlan& plan, int source, int destination);

// Receives one stream: takes exactly `expected`, hands each tensor to the sink, returns the
// stream's weight version (a WeightReceiver::receive, or a test's own).
using ReceiveStream =
    std::function<int64_t(int source, const std::vector<ExpectedTensor>& expected, const WeightSink& sink)>;

// Assembles `destination`'s local weights (canonical names, its shard's shapes, padding
// zero) from every source that sends it anything, in source order, then checks every
// slice's canonical checksum and every stream's version. Throws Error naming the tensor,
// the source rank and what was wrong; nothing is returned half-assembled.
// `version` < 0: whatever version the first stream has, every other stream the same.
ModelWeights receive_reshard(const ReshardPlan& plan, int destination, int64_t version, const ReceiveStream& receive);

// The address of one pair's stream: "<base>.s<source>.d<destination>" (shm: the segment;
// collective: the pair group's rendezvous directory, a group of that source and every receiver).
std::string reshard_segment_name(const std::string& base, int source, int destination);
// Whether `address` is a pair address of `base`: kept transports of other bases (an
// earlier, failed collective group) are stale and let go.
bool is_reshard_pair_of(const std::string& address, const std::string& base);
// Removes every pair's segment of `base` (a run's end; absent ones are fine).
void remove_reshard_segments(const std::string& base, int sources, int destinations);

// Plans by (model, sizes), made once per process: every sync after the first reuses it.
const ReshardPlan& cached_reshard_plan(const ModelConfig& config, int sources, int destinations);

}  // namespace tandem
