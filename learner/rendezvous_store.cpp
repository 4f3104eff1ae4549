#include "learner/rendezvous_store.h"

#include "core/error.h"

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <map>
#include <mutex>

namespace tandem {

namespace {

c10::intrusive_ptr<c10d::Store> memory_store(const std::string& name) {
  static std::mutex mutex;
  static std::map<std::string, c10::intrusive_ptr<c10d::Store>> stores;
  std::lock_guard<std::mutex> lock(mutex);
  auto& store = stores[name];
  if (!store) store = c10::make_intrusive<c10d::HashStore>();
  return store;
}

}  // namespace

c10::intrusive_ptr<c10d::Store> open_rendezvous_store(const CollectivesOptions& o) {
  const std::string& address = o.rendezvous;
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
  if (address.rfind("memory://", 0) == 0) return memory_store(address.substr(9));
  if (address.rfind("file://", 0) == 0) return c10::make_intrusive<c10d::FileStore>(address.substr(7), o.world_size);
  if (address.rfind("tcp://", 0) == 0) {
    const std::string host_port = address.substr(6);
    const size_t colon = host_port.rfind(':');
    if (colon == std::string::npos) throw Error(fmt::format("rendezvous {}: expected tcp://HOST:PORT", address));
    c10d::TCPStoreOptions options;
    options.port = static_cast<uint16_t>(std::stoi(host_port.substr(colon + 1)));
    options.isServer = o.rank == 0;
    options.numWorkers = static_cast<size_t>(o.world_size);
    options.waitWorkers = true;
    options.timeout = timeout;
    return c10::make_intrusive<c10d::TCPStore>(host_port.substr(0, colon), options);
  }
  throw Error(fmt::format("rendezvous {}: expected tcp://HOST:PORT, file:///PATH or memory://NAME", address));
}

}  // namespace tandem
