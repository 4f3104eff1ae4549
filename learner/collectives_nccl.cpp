// The NCCL collectives (collectives_nccl.h): compiled whenever nvcc and NCCL are found, so
// they cannot rot on machines without a GPU; run only on GPUs.
#include "core/error.h"
#include "core/trace.h"
#include "learner/collectives_nccl.h"
#include "learner/rendezvous_store.h"
#include "weight_sync/cuda_util.h"
#include "weight_sync/nccl_id.h"

#include <ATen/ATen.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <cstring>
#include <thread>
#include <vector>

namespace tandem {

namespace {

static_assert(sizeof(ncclUniqueId) == kNcclUniqueIdBytes, "ncclUniqueId changed size");
static_assert(static_cast<int>(NcclType::nccl_type_int8) == ncclInt8 &&
                  static_cast<int>(NcclType::nccl_type_uint8) == ncclUint8 &&
                  static_cast<int>(NcclType::nccl_type_int32) == ncclInt32 &&
                  static_cast<int>(NcclType::nccl_type_uint32) == ncclUint32 &&
                  static_cast<int>(NcclType::nccl_type_int64) == ncclInt64 &&
                  static_cast<int>(NcclType::nccl_type_uint64) == ncclUint64 &&
                  static_cast<int>(NcclType::nccl_type_float16) == ncclFloat16 &&
                  static_cast<int>(NcclType::nccl_type_float32) == ncclFloat32 &&
                  static_cast<int>(NcclType::nccl_type_float64) == ncclFloat64 &&
                  static_cast<int>(NcclType::nccl_type_bfloat16) == ncclBfloat16,
              "NcclType must carry ncclDataType_t's values");

ncclDataType_t nccl_type(const at::Tensor& tensor, const char* collective) {
  return static_cast<ncclDataType_t>(nccl_type_of(tensor.scalar_type(), collective));
}

size_t tensor_bytes(const at::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

std::string nccl_error(ncclResult_t status, ncclComm_t comm) {
  return fmt::format("{} ({})", ncclGetErrorString(status), comm ? ncclGetLastError(comm) : "");
}

// The communicator: finalized and destroyed when healthy; aborted (needs no peer, unblocks
// stuck kernels) once anything failed or finalizing does not settle in 10 s.
struct NcclCommunicator {
  ncclComm_t comm = nullptr;
  bool broken = false;
  NcclCommunicator() = default;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;
  void abort() {
    if (comm) ncclCommAbort(comm);
    comm = nullptr;
    broken = true;
  }
  ~NcclCommunicator() {
    if (!comm) return;
    if (!broken && ncclCommFinalize(comm) != ncclInternalError) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      ncclResult_t state = ncclInProgress;
      while (ncclCommGetAsyncError(comm, &state) == ncclSuccess && state == ncclInProgress &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      if (state == ncclSuccess) {
        ncclCommDestroy(comm);
        return;
      }
    }
    ncclCommAbort(comm);
  }
};

struct BlockingStream {
  cudaStream_t stream = nullptr;
  BlockingStream() = default;
  BlockingStream(const BlockingStream&) = delete;
  BlockingStream& operator=(const BlockingStream&) = delete;
  ~BlockingStream() {
    if (stream) cudaStreamDestroy(stream);
  }
};

class NcclCollectives final : public Collectives {
 public:
  explicit NcclCollectives(const CollectivesOptions& o) : NcclCollectives(o, c10::intrusive_ptr<c10d::Store>()) {}

  // `store`: the parent group's, prefixed with a subgroup's name; null: open o.rendezvous.
  NcclCollectives(const CollectivesOptions& o, c10::intrusive_ptr<c10d::Store> store)
      : options_(o), where_(nccl_collectives_where(o)) {
    TANDEM_CHECK(o.rank >= 0 && o.rank < o.world_size, "rank {} outside world size {}", o.rank, o.world_size);
    cuda_require_device(o.cuda_device, where_);  // "no GPU: ..." before anything waits on peers
    // Default flags: a blocking stream, ordered with the legacy default stream libtorch queues on.
    TANDEM_CUDA_CHECK(where_, cudaStreamCreate(&stream_.stream));
    std::string id;
    try {
      store_ = store;
      if (!store_) store_ = c10::make_intrusive<c10d::PrefixStore>("tandem/", open_rendezvous_store(o));
    } catch (const std::exception& e) {
      throw Error(fmt::format("{}: cannot open the rendezvous {} within {} s: {}", where_, o.rendezvous, o.timeout_s,
                              std::string(e.what()).substr(0, std::string(e.what()).find('\n'))));
    }
    // The store stays open with the communicator: rank 0 of tcp:// serves it to the others.
    id = exchange_nccl_unique_id(*store_, kNcclUniqueIdKey, o.rank, [this] { return new_unique_id(); }, o.timeout_s,
                                 where_);
    ncclUniqueId unique_id;
    std::memcpy(&unique_id, id.data(), sizeof unique_id);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // a rank that never joins is a timeout, not a hang
    const ncclResult_t started = ncclCommInitRankConfig(&comm_.comm, o.world_size, unique_id, o.rank, &config);
    if (started != ncclSuccess && started != ncclInProgress) {
      comm_.broken = true;
      throw Error(fmt::format("{}: ncclCommInitRankConfig: {}", where_, nccl_error(started, comm_.comm)));
    }
    wait_or_abort([this] { return communicator_state(); }, [this] { comm_.abort(); }, o.timeout_s,
                  where_ + ": joining the communicator of " + std::to_string(o.world_size) + " ranks");
  }

  int rank() const override { return options_.rank; }
  int world_size() const override { return options_.world_size; }

  void all_reduce_sum(at::Tensor& tensor) override { all_reduce(tensor, ncclSum, "all_reduce"); }
  void all_reduce_max(at::Tensor& tensor) override { all_reduce(tensor, ncclMax, "all_reduce_max"); }

  void reduce_scatter_sum(const at::Tensor& full, at::Tensor& shard) override {
    check_collective_shards("reduce_scatter", full.numel(), shard.numel(), world_size());
    check_same_type("reduce_scatter", full, shard);
    const std::vector<void*> p = device_pointers({full, shard}, {true, false});
    run("reduce_scatter", [&] {
      return ncclReduceScatter(p[0], p[1], static_cast<size_t>(shard.numel()), nccl_type(full, "reduce_scatter"),
                               ncclSum, comm_.comm, stream_.stream);
    });
    copy_back(shard, p[1]);
  }

  void all_gather(const at::Tensor& shard, at::Tensor& full) override {
    check_collective_shards("all_gather", full.numel(), shard.numel(), world_size());
    check_same_type("all_gather", full, shard);
    const std::vector<void*> p = device_pointers({shard, full}, {true, false});
    run("all_gather", [&] {
      return ncclAllGather(p[0], p[1], static_cast<size_t>(shard.numel()), nccl_type(shard, "all_gather"), comm_.comm,
                           stream_.stream);
    });
    copy_back(full, p[1]);
  }

  void broadcast(at::Tensor& tensor, int root) override {
    TANDEM_CHECK(root >= 0 && root < world_size(), "broadcast: root {} outside world size {}", root, world_size());
    const std::vector<void*> p = device_pointers({tensor}, {rank() == root});
    run("broadcast", [&] {
      return ncclBroadcast(p[0], p[0], static_cast<size_t>(tensor.numel()), nccl_type(tensor, "broadcast"), root,
                           comm_.comm, stream_.stream);
    });
    copy_back(tensor, p[0]);
  }

  std::unique_ptr<Collectives> subgroup(const std::string& name, const std::vector<int>& ranks) override {
    const CollectivesOptions o = subgroup_options(options_, name, ranks);
    if (o.world_size == 1) return Collectives::create(o);
    return std::make_unique<NcclCollectives>(o, c10::make_intrusive<c10d::PrefixStore>(name + "/", store_));
  }

  void barrier() override {
    at::Tensor token = at::zeros({1}, at::kInt);  // staged: NCCL has no barrier, a one-element sum is one
    all_reduce(token, ncclSum, "barrier");
  }

 private:
  static std::string new_unique_id() {
    ncclUniqueId id;
    const ncclResult_t status = ncclGetUniqueId(&id);
    if (status != ncclSuccess) throw Error(fmt::format("ncclGetUniqueId: {}", nccl_error(status, nullptr)));
    return std::string(reinterpret_cast<const char*>(&id), sizeof id);
  }

  void all_reduce(at::Tensor& tensor, ncclRedOp_t op, const char* what) {
    const std::vector<void*> p = device_pointers({tensor}, {true});
    run(what, [&] {
      return ncclAllReduce(p[0], p[0], static_cast<size_t>(tensor.numel()), nccl_type(tensor, what), op, comm_.comm,
                           stream_.stream);
    });
    copy_back(tensor, p[0]);
  }

  static void check_same_type(const char* what, const at::Tensor& a, const at::Tensor& b) {
    TANDEM_CHECK(a.scalar_type() == b.scalar_type(), "{}: {} and {} tensors", what, c10::toString(a.scalar_type()),
                 c10::toString(b.scalar_type()));
  }

  // Where NCCL reads and writes each tensor: a GPU tensor's own memory (it must be on this
  // rank's GPU), or for a host tensor a copy in scratch device memory (copied in when
  // `copy_in`; copy_back brings it home).
  std::vector<void*> device_pointers(const std::vector<at::Tensor>& tensors, const std::vector<bool>& copy_in) {
    constexpr size_t kAlign = 256;
    size_t total = 0;
    for (const at::Tensor& t : tensors) {
      TANDEM_CHECK(t.is_contiguous(), "{}: collectives take contiguous tensors", where_);
      if (!t.is_cuda()) total += (tensor_bytes(t) + kAlign - 1) / kAlign * kAlign;
    }
    scratch_.reserve(total, where_);
    TANDEM_CUDA_CHECK(where_, cudaSetDevice(options_.cuda_device));
    std::vector<void*> pointers;
    size_t offset = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const at::Tensor& t = tensors[i];
      if (t.is_cuda()) {
        TANDEM_CHECK(t.device().index() == options_.cuda_device, "{}: a tensor on {}, the communicator on GPU {}",
                     where_, t.device().str(), options_.cuda_device);
        pointers.push_back(t.data_ptr());
        continue;
      }
      uint8_t* staged = scratch_.data() + offset;
      offset += (tensor_bytes(t) + kAlign - 1) / kAlign * kAlign;
      if (copy_in[i]) {
        TANDEM_CUDA_CHECK(where_, cudaMemcpyAsync(staged, t.data_ptr(), tensor_bytes(t), cudaMemcpyHostToDevice,
                                                  stream_.stream));
      }
      pointers.push_back(staged);
    }
    return pointers;
  }

  void copy_back(const at::Tensor& tensor, void* device) {
    if (tensor.is_cuda()) return;
    TANDEM_CUDA_CHECK(where_, cudaMemcpy(tensor.data_ptr(), device, tensor_bytes(tensor), cudaMemcpyDeviceToHost));
  }

  // Queues one NCCL call and waits for it (see collectives_nccl.h).
  template <class Enqueue>
  void run(const char* what, Enqueue enqueue) {
    trace::Span span(what, "collective");
    const std::string label = fmt::format("{}: {}", where_, what);
    if (comm_.broken) throw Error(label + ": the communicator was aborted after an earlier failure");
    const ncclResult_t queued = enqueue();  // ncclInProgress: still being queued (non-blocking communicator)
    if (queued != ncclSuccess && queued != ncclInProgress) {
      const std::string error = nccl_error(queued, comm_.comm);
      comm_.abort();
      throw Error(fmt::format("{}: {}; the communicator was aborted", label, error));
    }
    wait_or_abort([this] { return collective_state(); }, [this] { comm_.abort(); }, options_.timeout_s, label);
  }

  CollectivePoll communicator_state() {
    ncclResult_t state = ncclInProgress;
    const ncclResult_t asked = ncclCommGetAsyncError(comm_.comm, &state);
    if (asked != ncclSuccess) return {false, "ncclCommGetAsyncError: " + nccl_error(asked, comm_.comm)};
    if (state == ncclInProgress) return {};
    if (state != ncclSuccess) return {false, nccl_error(state, comm_.comm)};
    return {true, ""};
  }

  // Done when NCCL has queued the call and the stream has run it.
  CollectivePoll collective_state() {
    CollectivePoll queued = communicator_state();
    if (!queued.done) return queued;
    const cudaError_t status = cudaStreamQuery(stream_.stream);
    if (status == cudaSuccess) return {true, ""};
    if (status == cudaErrorNotReady) return {};
    return {false, fmt::format("cudaStreamQuery: {}: {}", cudaGetErrorName(status), cudaGetErrorString(status))};
  }

  CollectivesOptions options_;
  std::string where_;
  c10::intrusive_ptr<c10d::Store> store_;
  BlockingStream stream_;
  DeviceBuffer scratch_;    // host tensors' staged copies
  NcclCommunicator comm_;   // last: ended first, before the buffers its kernels may use
};

}  // namespace

std::unique_ptr<Collectives> make_nccl_collectives(const CollectivesOptions& options) {
  return std::make_unique<NcclCollectives>(options);
}

}  // namespace tandem
