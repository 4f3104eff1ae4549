#include "weight_sync/options_wire.h"

#include "core/command_codec.h"
#include "core/error.h"

#include <fmt/format.h>

namespace tandem {

void write_weight_sync_transport(wire::WeightSyncTransport::Builder out, const WeightSyncOptions& o) {
  out.setMethod(o.method);
  out.setAddress(o.address);
  out.setRank(o.rank);
  out.setWorldSize(o.world_size);
  out.setBucketBytes(o.bucket_bytes);
  out.setTimeoutS(o.timeout_s);
  out.setHost(o.host);
  out.setNcclUniqueId(as_data(o.nccl_unique_id));
  out.setCudaDevice(o.cuda_device);
  out.setReshardSources(o.reshard_sources);
  out.setReshardDestinations(o.reshard_destinations);
}

WeightSyncOptions read_weight_sync_transport(wire::WeightSyncTransport::Reader in, const std::string& where) {
  WeightSyncOptions o;
  o.method = to_string(in.getMethod());
  if (o.method.empty()) throw Error(fmt::format("{}: the weight-sync transport names no method", where));
  o.address = to_string(in.getAddress());
  o.rank = in.getRank();
  o.world_size = in.getWorldSize();
  o.bucket_bytes = in.getBucketBytes();
  o.timeout_s = in.getTimeoutS();
  o.host = to_string(in.getHost());
  o.nccl_unique_id = to_string(in.getNcclUniqueId());
  o.cuda_device = in.getCudaDevice();
  o.reshard_sources = in.getReshardSources();
  o.reshard_destinations = in.getReshardDestinations();
  if ((o.reshard_sources > 0) != (o.reshard_destinations > 0) || o.reshard_sources < 0 || o.reshard_destinations < 0) {
    throw Error(fmt::format("{}: reshard sizes {} -> {} (both positive, or both 0)", where, o.reshard_sources,
                            o.reshard_destinations));
  }
  if (o.reshard_sources > 0 && o.method != "shm" && o.method != "collective") {
    throw Error(fmt::format("{}: resharding weight sync runs over shm or collective, not {}", where, o.method));
  }
  return o;
}

std::string weight_sync_options_key(const WeightSyncOptions& o) {
  // Every field that makes a different group or segment; the unique id as its bytes' hash
  // would do, but the bytes themselves are short (128) and exact.
  return fmt::format("{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}", o.method, o.address, o.rank, o.world_size, o.bucket_bytes,
                     o.timeout_s, o.host, o.cuda_device, o.reshard_sources, o.reshard_destinations, o.nccl_unique_id);
}

}  // namespace tandem
