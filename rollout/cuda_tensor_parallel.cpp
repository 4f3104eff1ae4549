#include "rollout/cuda_tensor_parallel.h"

#include "actor/tensor_parallel_layout.h"
#include "actor/tensor_parallel_slices.h"
#include "core/error.h"
#include "rollout/cuda_backend_impl.h"
#include "rollout/engine.h"
#include "rollout/thread_pool.h"

#include <cuda_runtime.h>
#if TANDEM_WITH_NCCL
#include <nccl.h>
#endif

#include <algorithm>
#include <atomic>
#include <mutex>
#include <type_traits>

namespace tandem {

#if TANDEM_WITH_NCCL
namespace {

using cuda_backend::CudaBackend;
using cuda_backend::cuda_check;

void nccl_check(ncclResult_t status, const std::string& where, const char* call) {
  if (status != ncclSuccess) {
    throw Error(fmt::format("rollout cuda backend, tensor parallel: {}: {}: {}", where, call,
                            ncclGetErrorString(status)));
  }
}

// One rank's communicator, as the collectives its CudaBackend calls.
class NcclRank final : public cuda_backend::RankCollectives {
 public:
  ncclComm_t comm = nullptr;

  void all_reduce_sum(void* data, int64_t count, bool bf16, cudaStream_t stream) override {
    nccl_check(ncclAllReduce(data, data, static_cast<size_t>(count), bf16 ? ncclBfloat16 : ncclFloat32, ncclSum, comm,
                             stream),
               "summing partial outputs", "ncclAllReduce");
  }
  void all_gather(const float* sent, int64_t count, float* received, cudaStream_t stream) override {
    nccl_check(ncclAllGather(sent, received, static_cast<size_t>(count), ncclFloat32, comm, stream),
               "gathering vocabulary columns", "ncclAllGather");
  }
};

template <typename T>
class CudaTensorParallelBackend final : public ModelBackend {
 public:
  CudaTensorParallelBackend(const ModelConfig& config, const ModelWeights& weights, const EngineOptions& options)
      : config_(config), size_(options.tensor_parallel), first_device_(options.cuda_device), pool_(size_) {
    check_tensor_parallel(config_, size_, "rollout.tensor_parallel");
    check_weights(config_, weights, "rollout engine");
    int devices = 0;
    cuda_check(cudaGetDeviceCount(&devices), "setup", "cudaGetDeviceCount");
    if (first_device_ < 0 || first_device_ + size_ > devices) {
      throw Error(fmt::format("rollout.tensor_parallel {}: the engine needs CUDA devices {}..{}; there are {}", size_,
                              first_device_, first_device_ + size_ - 1, devices));
    }
    ncclUniqueId id;
    nccl_check(ncclGetUniqueId(&id), "setup", "ncclGetUniqueId");
    collectives_.resize(size_);
    // Every rank joins at once (ncclCommInitRank waits for the group), each on its device.
    pool_.run(size_, [&](int64_t r) {
      cuda_check(cudaSetDevice(first_device_ + static_cast<int>(r)), "setup", "cudaSetDevice");
      nccl_check(ncclCommInitRank(&collectives_[r].comm, size_, id, static_cast<int>(r)), "setup", "ncclCommInitRank");
    });
    for (int r = 0; r < size_; ++r) {
      const TensorParallelSpec spec{size_, r};
      layouts_.push_back(tensor_parallel_layout(config_, spec));
      const cuda_backend::RankSetup setup{spec, first_device_ + r, &collectives_[r]};
      ranks_.push_back(std::make_unique<CudaBackend<T>>(config_, shard_model_weights(config_, weights, spec), options,
                                                         setup));
    }
    kv_blocks_ = ranks_[0]->kv_blocks();
    for (const auto& rank : ranks_) kv_blocks_ = std::min(kv_blocks_, rank->kv_blocks());
  }

  ~CudaTensorParallelBackend() override {
    ranks_.clear();
    if (broken_) return;  // abort_group freed the communicators
    // ncclCommDestroy may wait for the group: every rank at once.
    try {
      pool_.run(size_, [&](int64_t r) {
        if (!collectives_[r].comm) return;  // setup failed before this rank joined
        cudaSetDevice(first_device_ + static_cast<int>(r));
        ncclCommDestroy(collectives_[r].comm);
      });
    } catch (...) {  // nothing to do about a failed teardown
    }
  }

  const ModelConfig& config() const override { return config_; }
  int tensor_parallel() const override { return size_; }
  int64_t kv_blocks() const override { return kv_blocks_; }
  std::string name() const override {
    return fmt::format("cuda {}, tensor_parallel {} (devices {}..{}: {})", cuda_backend::dtype_name<T>(), size_,
                       first_device_, first_device_ + size_ - 1, ranks_[0]->device_name());
  }

  void update_weights(const ModelWeights& update) override {
    // Canonical tensors: checked, then cut into each rank's part (padding rows stay zero).
    std::vector<const ParameterShard*> found;
    for (const WeightTensor& t : update.tensors()) {
      const auto it = std::find_if(layouts_[0].begin(), layouts_[0].end(),
                                   [&](const ParameterShard& s) { return s.name == t.name; });
      if (it == layouts_[0].end()) {
        throw Error(fmt::format("weight update: unexpected tensor {} (not part of this {} model)", t.name,
                                config_.model_type));
      }
      if (it->canonical_shape != t.shape) {
        throw Error(fmt::format("weight update: tensor {} has shape [{}], the engine's is [{}]", t.name,
                                fmt::join(t.shape, ", "), fmt::join(it->canonical_shape, ", ")));
      }
      found.push_back(&*it);
    }
    std::vector<ModelWeights> shards(size_);
    for (int r = 0; r < size_; ++r) {
      std::vector<WeightTensor> local;
      for (size_t i = 0; i < found.size(); ++i) {
        const size_t index = static_cast<size_t>(found[i] - layouts_[0].data());
        const ParameterShard& shard = layouts_[r][index];
        WeightTensor t{shard.name, shard.local_shape, {}};
        t.data.resize(static_cast<size_t>(t.numel()));
        copy_from_canonical(shard, update.tensors()[i].data.data(), t.data.data());
        local.push_back(std::move(t));
      }
      shards[r] = ModelWeights(std::move(local));
    }
    update_weight_shards(shards);
  }

  void update_weight_shards(const std::vector<ModelWeights>& shards) override {
    TANDEM_CHECK(static_cast<int>(shards.size()) == size_, "{}: {} weight shards for {} ranks", name(), shards.size(),
                 size_);
    for (int r = 0; r < size_; ++r) ranks_[r]->check_update(shards[r]);  // all before any upload
    for (int r = 0; r < size_; ++r) ranks_[r]->update_weights(shards[r]);
  }

  void copy_kv_blocks(const std::vector<KvBlockCopy>& copies) override {
    for (const auto& rank : ranks_) rank->copy_kv_blocks(copies);
  }

  void forward(const ForwardBatch& batch, std::vector<float>& logits) override {
    if (broken_) {
      throw Error(fmt::format("{}: a step failed earlier and the tensor-parallel group was aborted: {}", name(),
                              first_error_));
    }
    // A bad batch is an Error here, before any rank can wait for a peer.
    StepPlanLimits limits = ranks_[0]->step_limits();
    limits.num_blocks = kv_blocks_;
    plan_step(batch, limits, scratch_plan_);
    logits.resize(batch.logit_rows.size() * static_cast<size_t>(config_.head_rows()));
    pool_.run(size_, [&](int64_t r) {
      try {
        ranks_[r]->forward_rank(batch, r == 0 ? logits.data() : nullptr);
      } catch (const std::exception& e) {
        abort_group(e.what());
        throw;
      }
    });
  }

 private:
  // Ends every collective a peer may wait in (ncclCommAbort is safe from any thread).
  void abort_group(const std::string& error) {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    if (broken_) return;
    first_error_ = error;
    broken_ = true;
    for (NcclRank& rank : collectives_) ncclCommAbort(rank.comm);  // the handles are gone after this
  }

  ModelConfig config_;
  int size_;
  int first_device_;
  ThreadPool pool_;  // one host thread per rank (the caller included)
  std::vector<NcclRank> collectives_;
  std::vector<std::vector<ParameterShard>> layouts_;  // per rank
  std::vector<std::unique_ptr<CudaBackend<T>>> ranks_;
  int64_t kv_blocks_ = 0;  // the smallest rank's: the scheduler's blocks exist on every rank
  StepPlan scratch_plan_;
  std::mutex abort_mutex_;
  std::atomic<bool> broken_{false};
  std::string first_error_;
};

}  // namespace

std::unique_ptr<ModelBackend> make_cuda_tensor_parallel_backend(const ModelConfig& config, const ModelWeights& weights,
                                                                const EngineOptions& options) {
  if (options.dtype == "bf16") {
    return std::make_unique<CudaTensorParallelBackend<kernels::bf16>>(config, weights, options);
  }
  return std::make_unique<CudaTensorParallelBackend<float>>(config, weights, options);
}

#else

std::unique_ptr<ModelBackend> make_cuda_tensor_parallel_backend(const ModelConfig&, const ModelWeights&,
                                                                const EngineOptions& options) {
  throw Error(fmt::format("rollout.tensor_parallel {} on cuda splits the engine over GPUs with NCCL; this tandem was "
                          "built without NCCL (meson -Dnccl_dir=...)",
                          options.tensor_parallel));
}

#endif

}  // namespace tandem
