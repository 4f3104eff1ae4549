// learner.snapshot: each rank's own state, copied to host memory after every step and read
// back by the rank's successor when a learner dies (trainer.h). Unlike a checkpoint it is
// never gathered or re-sharded: a rank writes exactly what it holds, with no collectives.
//
// The file (SLOT/rank-<r>.snapshot, on a tmpfs) is a fixed header and the raw float32
// arrays, written with pwrite: after the first use of a slot its pages stay allocated, so
// a snapshot costs one copy of the rank's state. (Through a fresh shared mapping every
// page faulted on each write: 110 ms for a 3.2M-parameter model's 38 MB on a 2-core VM,
// taken from the rollout it overlaps, against 7-10 ms with pwrite.) Its space is reserved
// with fallocate first, so that a full tmpfs is an error here. The header's step is
// written last; a file cut short never claims a step.
#include "actor/model_weights.h"
#include "learner/trainer_impl.h"

#include <c10/core/GradMode.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <optional>
#include <cstring>
#include <filesystem>
#include <memory>

namespace tandem {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'T', 'N', 'D', 'M', 'S', 'N', 'A', 'P'};
constexpr int64_t kNoStep = -1;  // while the arrays are being written

struct SnapshotHeader {
  char magic[8];
  int64_t step;             // the run step the state is after; kNoStep while being written
  int64_t rank, world_size;
  int64_t strategy;         // Strategy
  int64_t adamw;            // 1: the moments follow the values
  int64_t warmed_up_reference;
  int64_t optimizer_steps, adam_steps;
  int64_t values;           // floats of parameter values
  int64_t moments;          // floats of each AdamW moment (zero2, fsdp: this rank's shard); 0 without
};

std::string rank_file(const std::string& slot, int rank) { return fmt::format("{}/rank-{}.snapshot", slot, rank); }

std::string errno_text(const std::string& what, const std::string& path) {
  return fmt::format("{} {}: {}", what, path, std::strerror(errno));
}

// An open file descriptor, closed when it goes.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// A whole-file mapping, unmapped when it goes.
struct Mapping {
  void* data = MAP_FAILED;
  size_t size = 0;
  ~Mapping() {
    if (data != MAP_FAILED) ::munmap(data, size);
  }
};

// `bytes` from `data` at `offset` of the file, whatever pwrite's partial writes.
void write_at(const Fd& file, const void* data, size_t bytes, off_t offset, const std::string& path) {
  const char* from = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t wrote = ::pwrite(file.fd, from, bytes, offset);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) throw Error(errno_text("cannot write the learner snapshot", path));
    from += wrote;
    bytes -= static_cast<size_t>(wrote);
    offset += wrote;
  }
}

// The host floats of `t` at `offset` of the file (a CPU tensor is read in place); returns
// the offset after them.
off_t write_floats(const Fd& file, const at::Tensor& t, off_t offset, const std::string& path) {
  const at::Tensor host = t.detach().to(at::kCPU, at::kFloat).contiguous();
  const size_t bytes = static_cast<size_t>(host.numel()) * sizeof(float);
  write_at(file, host.data_ptr<float>(), bytes, offset, path);
  return offset + static_cast<off_t>(bytes);
}

void copy_in(at::Tensor target, const float* source) {
  fill_through_host(target, [&](float* values) {
    std::memcpy(values, source, static_cast<size_t>(target.numel()) * sizeof(float));
  });
}

}  // namespace

at::Tensor Trainer::Impl::held_values() { return strategy == Strategy::fsdp ? local_values() : flat->values(); }

void Trainer::save_snapshot(const std::string& slot, const std::string& reference_dir, int64_t step,
                            int source_rank) {
  Impl& m = *impl_;
  const int rank = m.collectives.rank();
  if (source_rank != rank) {
    TANDEM_CHECK(m.strategy == Strategy::ddp, "rank {}: only ddp ranks share a snapshot (source rank {})", rank,
                 source_rank);
    return;  // the same state as source_rank's, which that rank writes on this host
  }
  const bool adamw = m.options.learner.optimizer.name == "adamw";
  const at::Tensor values = m.held_values();
  const int64_t count = values.numel();
  const int64_t moments = adamw ? m.adam->exp_avg().numel() : 0;
  const size_t size = sizeof(SnapshotHeader) + static_cast<size_t>(count + 2 * moments) * sizeof(float);
  fs::create_directories(slot);
  const std::string path = rank_file(slot, rank);
  Fd file{::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600)};
  if (file.fd < 0) throw Error(errno_text("cannot open the learner snapshot", path));
  struct stat st {};
  if (::fstat(file.fd, &st) != 0) throw Error(errno_text("cannot stat", path));
  if (static_cast<size_t>(st.st_size) != size) {
    if (::ftruncate(file.fd, static_cast<off_t>(size)) != 0) throw Error(errno_text("cannot size", path));
    // The space, reserved now: a full tmpfs fails here instead of faulting during the copy.
    if (const int error = ::posix_fallocate(file.fd, 0, static_cast<off_t>(size)); error != 0) {
      errno = error;
      throw Error(errno_text(fmt::format("no room for the learner snapshot ({} bytes) in", size), path));
    }
  }
  const int64_t no_step = kNoStep;
  write_at(file, &no_step, sizeof(no_step), offsetof(SnapshotHeader, step), path);
  off_t offset = write_floats(file, values, sizeof(SnapshotHeader), path);
  if (adamw) {
    offset = write_floats(file, m.adam->exp_avg(), offset, path);
    write_floats(file, m.adam->exp_avg_sq(), offset, path);
  }
  SnapshotHeader done{};
  std::memcpy(done.magic, kMagic, sizeof(kMagic));
  done.step = step;
  done.rank = rank;
  done.world_size = m.collectives.world_size();
  done.strategy = static_cast<int64_t>(m.strategy);
  done.adamw = adamw ? 1 : 0;
  done.warmed_up_reference = m.reference_from_warmup ? 1 : 0;
  done.optimizer_steps = m.steps;
  done.adam_steps = m.adam->steps();
  done.values = count;
  done.moments = moments;
  write_at(file, &done, sizeof(done), 0, path);
  // The warmed-up reference never changes after the warm-up: written once, by whichever
  // rank of the host gets there first (a staging directory of its own, then a rename).
  // Split over a tensor-parallel group, gathering it is a collective: every rank of the
  // group gathers it once (each process the same calls), then writes it if still missing.
  std::optional<ModelWeights> gathered;
  if (m.reference_from_warmup && m.tensor_ops && !m.reference_snapshot_gathered) {
    gathered = m.reference->to_weights();
    m.reference_snapshot_gathered = true;
  }
  if (m.reference_from_warmup && !fs::exists(reference_dir + "/model.safetensors") && (gathered || !m.tensor_ops)) {
    const std::string staging = fmt::format("{}.tmp-{}", reference_dir, ::getpid());
    fs::remove_all(staging);
    fs::create_directories(staging);
    save_model_weights(staging, gathered ? *gathered : m.reference->to_weights(), DType::f32);
    std::error_code lost_race;  // another rank renamed its copy first: the same weights
    fs::rename(staging, reference_dir, lost_race);
    fs::remove_all(staging, lost_race);
  }
}

void Trainer::load_snapshot(const std::string& slot, const std::string& reference_dir, int64_t step,
                            int source_rank) {
  Impl& m = *impl_;
  const int rank = m.collectives.rank();
  if (source_rank != rank && m.strategy != Strategy::ddp) {
    throw Error(fmt::format("rank {}: only ddp ranks share a snapshot (source rank {})", rank, source_rank));
  }
  const std::string path = rank_file(slot, source_rank);
  Fd file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) throw Error(errno_text("no snapshot on this host:", path));
  struct stat st {};
  if (::fstat(file.fd, &st) != 0) throw Error(errno_text("cannot stat", path));
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < sizeof(SnapshotHeader)) throw Error(fmt::format("{}: {} bytes, shorter than its header", path, size));
  Mapping map{::mmap(nullptr, size, PROT_READ, MAP_SHARED, file.fd, 0), size};
  if (map.data == MAP_FAILED) throw Error(errno_text("cannot map", path));
  const SnapshotHeader h = *static_cast<const SnapshotHeader*>(map.data);
  // Everything is checked before anything changes.
  const bool adamw = m.options.learner.optimizer.name == "adamw";
  at::Tensor values = m.held_values();
  const auto expect = [&](const char* what, int64_t found, int64_t wanted) {
    if (found != wanted) throw Error(fmt::format("{}: {} is {}, this rank's is {}", path, what, found, wanted));
  };
  if (std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0) throw Error(fmt::format("{}: not a learner snapshot", path));
  expect("the step", h.step, step);
  expect("the rank", h.rank, source_rank);
  expect("the group size", h.world_size, m.collectives.world_size());
  expect("the sharding", h.strategy, static_cast<int64_t>(m.strategy));
  expect("adamw", h.adamw, adamw ? 1 : 0);
  expect("the parameter count", h.values, values.numel());
  expect("the moments' count", h.moments, adamw ? m.adam->exp_avg().numel() : 0);
  const size_t wanted = sizeof(SnapshotHeader) + static_cast<size_t>(h.values + 2 * h.moments) * sizeof(float);
  if (size != wanted) throw Error(fmt::format("{}: {} bytes, expected {}", path, size, wanted));
  std::unique_ptr<PolicyModel> reference;
  if (h.warmed_up_reference != 0) {
    if (!fs::exists(reference_dir + "/model.safetensors")) {
      throw Error(fmt::format("{}: the warmed-up reference policy is not in {}", path, reference_dir));
    }
    reference = m.reference_from(reference_dir);
  }
  const auto* floats = reinterpret_cast<const float*>(static_cast<const char*>(map.data) + sizeof(SnapshotHeader));
  {
    c10::NoGradGuard no_grad;
    copy_in(values, floats);
  }
  if (adamw) {
    copy_in(m.adam->exp_avg(), floats + h.values);
    copy_in(m.adam->exp_avg_sq(), floats + h.values + h.moments);
  }
  m.adam->set_steps(h.adam_steps);
  m.steps = h.optimizer_steps;
  if (reference) {
    m.reference = std::move(reference);
    m.reference_from_warmup = true;
  }
}

}  // namespace tandem
