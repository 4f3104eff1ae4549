#include "learner/collectives.h"
#include "core/trace.h"

#include "core/error.h"
#include "learner/collectives_nccl.h"
#include "learner/rendezvous_store.h"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <chrono>

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
  void broadcast(at::Tensor&, int) override {}
  void barrier() override {}
  std::unique_ptr<Collectives> subgroup(const std::string&, const std::vector<int>& ranks) override {
    TANDEM_CHECK(ranks == std::vector<int>{0}, "a subgroup of a one-rank group holds rank 0 only");
    return std::make_unique<SingleRank>();
  }
};

class GlooCollectives final : public Collectives {
 public:
  explicit GlooCollectives(const CollectivesOptions& o) : GlooCollectives(o, c10::intrusive_ptr<c10d::Store>()) {}

  // `store`: the parent group's (a subgroup meets there, under its name); null: open o.rendezvous.
  GlooCollectives(const CollectivesOptions& o, c10::intrusive_ptr<c10d::Store> store) : options_(o) {
    TANDEM_CHECK(o.rank >= 0 && o.rank < o.world_size, "rank {} outside world size {}", o.rank, o.world_size);
    try {
      store_ = store;
      if (!store_) store_ = c10::make_intrusive<c10d::PrefixStore>("tandem/", open_rendezvous_store(o));
      auto gloo_options =
          c10d::ProcessGroupGloo::Options::create(std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000)));
      gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(o.host));
      group_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store_, o.rank, o.world_size, gloo_options);
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
    check_collective_shards("reduce_scatter", full.numel(), n, world_size());
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
    check_collective_shards("all_gather", full.numel(), n, world_size());
    run("all_gather", [&] {
      std::vector<std::vector<at::Tensor>> outputs(1);
      for (int r = 0; r < world_size(); ++r) outputs[0].push_back(full.narrow(0, r * n, n));
      std::vector<at::Tensor> inputs{shard.contiguous()};
      group_->allgather(outputs, inputs)->wait();
    });
  }

  void broadcast(at::Tensor& tensor, int root) override {
    TANDEM_CHECK(root >= 0 && root < world_size(), "broadcast: root {} outside world size {}", root, world_size());
    run("broadcast", [&] {
      std::vector<at::Tensor> tensors{tensor};
      c10d::BroadcastOptions options;
      options.rootRank = root;
      group_->broadcast(tensors, options)->wait();
    });
  }

  void barrier() override {
    run("barrier", [&] { group_->barrier()->wait(); });
  }

  std::unique_ptr<Collectives> subgroup(const std::string& name, const std::vector<int>& ranks) override {
    const CollectivesOptions o = subgroup_options(options_, name, ranks);
    if (o.world_size == 1) return std::make_unique<SingleRank>();
    return std::make_unique<GlooCollectives>(o, c10::make_intrusive<c10d::PrefixStore>(name + "/", store_));
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
    trace::Span span(what, "collective");
    try {
      fn();
    } catch (const std::exception& e) {
      throw Error(fmt::format("learner rank {}/{}: {} failed (a peer is gone or slower than {} s): {}",
                              options_.rank, options_.world_size, what, options_.timeout_s, first_line(e.what())));
    }
  }

  CollectivesOptions options_;
  c10::intrusive_ptr<c10d::Store> store_;  // kept: a subgroup meets on it
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group_;
};

}  // namespace

CollectivesOptions subgroup_options(const CollectivesOptions& options, const std::string& name,
                                    const std::vector<int>& ranks) {
  TANDEM_CHECK(!name.empty() && name.find('/') == std::string::npos, "subgroup name \"{}\": non-empty, no '/'", name);
  CollectivesOptions o = options;
  o.world_size = static_cast<int>(ranks.size());
  o.rank = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    TANDEM_CHECK(ranks[i] >= 0 && ranks[i] < options.world_size && (i == 0 || ranks[i] > ranks[i - 1]),
                 "subgroup {}: ranks must be ascending and inside the group of {}", name, options.world_size);
    if (ranks[i] == options.rank) o.rank = static_cast<int>(i);
  }
  TANDEM_CHECK(o.rank >= 0, "subgroup {}: rank {} is not one of its members", name, options.rank);
  o.rendezvous = options.rendezvous + " (subgroup " + name + ")";  // for messages only: the store is shared
  return o;
}

std::unique_ptr<Collectives> Collectives::create(const CollectivesOptions& options) {
  if (options.world_size == 1) return std::make_unique<SingleRank>();
  if (options.device == "cuda") return make_nccl_collectives(options);
  TANDEM_CHECK(options.device == "cpu", "collectives: device \"{}\" (cpu: Gloo, cuda: NCCL)", options.device);
  return std::make_unique<GlooCollectives>(options);
}

}  // namespace tandem
