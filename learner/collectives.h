// The collectives a learner rank needs: over c10d's ProcessGroupGloo on the CPU
// (collectives.cpp), over NCCL on GPUs (collectives_nccl.cpp, learner.device: cuda). No
// collective is hand-written over sockets: these only wrap the engines.
//
// Rendezvous addresses (the controller hands one to every rank of a run):
//   tcp://HOST:PORT   a c10d TCPStore; rank 0 serves it
//   file:///PATH      a c10d FileStore (one host, or a shared file system)
//   memory://NAME     an in-process store: ranks as threads of one process (tests)
// Every collective waits at most `timeout_s`; a lost peer is an Error naming the
// collective, the rank and the timeout, never a hang.
//
// Tensors are contiguous. On the NCCL path they are the rank's GPU tensors (host tensors
// work too, staged through device memory); every call returns when its result is in
// place, as on Gloo.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

namespace tandem {

struct CollectivesOptions {
  std::string rendezvous;          // see above; ignored when world_size == 1
  int rank = 0;
  int world_size = 1;
  double timeout_s = 300.0;
  std::string host = "127.0.0.1";  // this rank's address for Gloo's connections
  std::string device = "cpu";      // cpu: Gloo; cuda: NCCL (needs a build with NCCL and a GPU per rank)
  int cuda_device = 0;             // device cuda: this rank's GPU (its local rank)
};

class Collectives {
 public:
  // world_size 1 needs no rendezvous and every collective is the identity.
  static std::unique_ptr<Collectives> create(const CollectivesOptions& options);
  virtual ~Collectives() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // In place: every rank ends with the element-wise sum.
  virtual void all_reduce_sum(at::Tensor& tensor) = 0;
  virtual void all_reduce_max(at::Tensor& tensor) = 0;
  // `full` has world_size equal shards (1-D, contiguous); `shard` receives the sum over
  // ranks of shard number rank().
  virtual void reduce_scatter_sum(const at::Tensor& full, at::Tensor& shard) = 0;
  // Every rank's `shard` concatenated in rank order into `full`.
  virtual void all_gather(const at::Tensor& shard, at::Tensor& full) = 0;
  // In place: every rank ends with rank `root`'s `tensor`.
  virtual void broadcast(at::Tensor& tensor, int root) = 0;
  virtual void barrier() = 0;

  // A group of some of this group's ranks: `ranks` (ascending, this rank among them),
  // renumbered 0, 1, ... in that order. Every member calls it with the same `name` and
  // `ranks`; groups of different names never meet, and non-members do not call. It meets
  // on this group's rendezvous (under the name) and keeps its timeout, host and device.
  // Tensor parallelism splits the learner's ranks into tensor-parallel and data-parallel
  // groups this way (learner/parallel_groups.h).
  virtual std::unique_ptr<Collectives> subgroup(const std::string& name, const std::vector<int>& ranks) = 0;
};

// `options` for member `ranks` of a subgroup (rank renumbered, world_size its size), after
// checking that `ranks` is ascending, inside the world and holds `options.rank`.
CollectivesOptions subgroup_options(const CollectivesOptions& options, const std::string& name,
                                    const std::vector<int>& ranks);

}  // namespace tandem
