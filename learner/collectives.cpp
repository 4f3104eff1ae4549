#include "learner/collectives.h"

#include "core/error.h"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <map>
#include <mutex>

namespace tandem {

namespace {

class SingleRank final : public Collectives {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  void all_reduce_sum(at::Tensor&) override {}
  void all_reduce_max(at::Tensor&) override {}
  void reduce_scatter_sum(const at::Tensor& full, at::Tensor& shard) override { shard.copy_(full); }
  void all_gather(const at::Tensor& shard, at::Tensor& full) override { full.copy_(shard); }
  void barrier() override {}
};

// memory:// stores, shared by the ranks (threads) of one process.
c10::intrusive_ptr<c10d::Store> memory_store(const std::string& name) {
  static std::mutex mutex;
  static std::map<std::string, c10::intrusive_ptr<c10d::Store>> stores;
  std::lock_guard<std::mutex> lock(mutex);
  auto& store = stores[name];
  if (!store) store = c10::make_intrusive<c10d::HashStore>();
  return store;
}

c10::intrusive_ptr<c10d::Store> open_store(const CollectivesOptions& o) {
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

class GlooCollectives final : public Collectives {
 public:
  explicit GlooCollectives(const CollectivesOptions& o) : options_(o) {
    TANDEM_CHECK(o.rank >= 0 && o.rank < o.world_size, "rank {} outside world size {}", o.rank, o.world_size);
    try {
      auto store = c10::make_intrusive<c10d::PrefixStore>("tandem/", open_store(o));
      auto gloo_options =
          c10d::ProcessGroupGloo::Options::create(std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000)));
      gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(o.host));
      group_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store, o.rank, o.world_size, gloo_options);
    } catch (const std::exception& e) {
      throw Error(fmt::format("learner rank {}/{}: cannot join the process group at {} within {} s: {}", o.rank,
                              o.world_size, o.rendezvous, o.timeout_s, first_line(e.what())));
    }
  }

  int rank() const override { return options_.rank; }
  int world_size() const override { return options_.world_size; }

  void all_reduce_sum(at::Tensor& tensor) override { all_reduce(tensor, c10d::ReduceOp::SUM); }
  void all_reduce_max(at::Tensor& tensor) override { all_reduce(tensor, c10d::ReduceOp::MAX); }

  // Gloo in libtorch 1.13 has no reduce_scatter: one reduce per shard to its owner moves
  // the same bytes per rank as a ring reduce-scatter.
  void reduce_scatter_sum(const at::Tensor& full, at::Tensor& shard) override {
    const int64_t n = shard.numel();
    TANDEM_CHECK(full.numel() == n * world_size(), "reduce_scatter: {} elements do not split into {} shards of {}",
                 full.numel(), world_size(), n);
    run("reduce_scatter", [&] {
      at::Tensor work_buffer = full.clone();  // reduce writes partial sums into non-root inputs too
      std::vector<c10::intrusive_ptr<c10d::Work>> pending;
      for (int owner = 0; owner < world_size(); ++owner) {
        std::vector<at::Tensor> piece{work_buffer.narrow(0, owner * n, n)};
        c10d::ReduceOptions options;
        options.rootRank = owner;
        options.reduceOp = c10d::ReduceOp::SUM;
        pending.push_back(group_->reduce(piece, options));
      }
      for (auto& w : pending) w->wait();
      shard.copy_(work_buffer.narrow(0, rank() * n, n));
    });
  }

  void all_gather(const at::Tensor& shard, at::Tensor& full) override {
    const int64_t n = shard.numel();
    TANDEM_CHECK(full.numel() == n * world_size(), "all_gather: {} elements are not {} shards of {}", full.numel(),
                 world_size(), n);
    run("all_gather", [&] {
      std::vector<std::vector<at::Tensor>> outputs(1);
      for (int r = 0; r < world_size(); ++r) outputs[0].push_back(full.narrow(0, r * n, n));
      std::vector<at::Tensor> inputs{shard.contiguous()};
      group_->allgather(outputs, inputs)->wait();
    });
  }

  void barrier() override {
    run("barrier", [&] { group_->barrier()->wait(); });
  }

 private:
  void all_reduce(at::Tensor& tensor, c10d::ReduceOp op) {
    run("all_reduce", [&] {
      std::vector<at::Tensor> tensors{tensor};
      c10d::AllreduceOptions options;
      options.reduceOp = op;
      group_->allreduce(tensors, options)->wait();
    });
  }

  static std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

  template <class Fn>
  void run(const char* what, Fn fn) {
    try {
      fn();
    } catch (const std::exception& e) {
      throw Error(fmt::format("learner rank {}/{}: {} failed (a peer is gone or slower than {} s): {}",
                              options_.rank, options_.world_size, what, options_.timeout_s, first_line(e.what())));
    }
  }

  CollectivesOptions options_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group_;
};

}  // namespace

std::unique_ptr<Collectives> Collectives::create(const CollectivesOptions& options) {
  if (options.world_size == 1) return std::make_unique<SingleRank>();
  return std::make_unique<GlooCollectives>(options);
}

}  // namespace tandem
