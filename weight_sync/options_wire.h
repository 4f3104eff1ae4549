// WeightSyncOptions in a command body: the controller tells each worker its part of a
// sync (weight_sync.capnp's WeightSyncTransport), and workers keep one sender or
// receiver per distinct group (options_key).
#pragma once

#include "weight_sync/transport.h"
#include "weight_sync/weight_sync.capnp.h"

#include <memory>
#include <string>

namespace tandem {

void write_weight_sync_transport(wire::WeightSyncTransport::Builder out, const WeightSyncOptions& options);
// Throws Error naming `where` when the method is missing.
WeightSyncOptions read_weight_sync_transport(wire::WeightSyncTransport::Reader in, const std::string& where);

// Equal keys: the same segment or group, so a kept sender or receiver can serve it.
std::string weight_sync_options_key(const WeightSyncOptions& options);

// A worker's one sender (or receiver), kept between syncs and replaced when the options
// change: a kept shm one keeps its mapping, a kept collective one its group.
template <typename Endpoint>
class KeptEndpoint {
 public:
  using Make = std::unique_ptr<Endpoint> (*)(const WeightSyncOptions&);
  explicit KeptEndpoint(Make make) : make_(make) {}

  Endpoint& for_options(const WeightSyncOptions& options) {
    const std::string key = weight_sync_options_key(options);
    if (!endpoint_ || key_ != key) {
      endpoint_.reset();  // leave the old group before joining the new one
      endpoint_ = make_(options);
      key_ = key;
    }
    return *endpoint_;
  }

 private:
  Make make_;
  std::unique_ptr<Endpoint> endpoint_;
  std::string key_;
};

}  // namespace tandem
