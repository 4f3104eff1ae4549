#include "nccl_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

namespace cudasim::nccl {
namespace {

constexpr uint64_t kReady = 0x63756461'6e63636cull;  // "cudanccl": rank 0 finished initialising

struct alignas(64) Header {
  std::atomic<uint64_t> magic;  // kReady, stored last
  int32_t nranks;
  uint64_t slot_bytes;
  uint64_t total_bytes;
};

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
size_t ranks_offset() { return round_up(sizeof(Header), 64); }
size_t slots_offset(int nranks) { return round_up(ranks_offset() + sizeof(RankState) * static_cast<size_t>(nranks), 4096); }
size_t total_bytes(int nranks, size_t slot_bytes) { return slots_offset(nranks) + slot_bytes * static_cast<size_t>(nranks); }

std::string system_error(const char* call, const std::string& name) {
  return std::string(call) + "(" + name + "): " + std::strerror(errno);
}

}  // namespace

Segment::Segment(std::string name, void* base, size_t bytes, bool owner)
    : name_(std::move(name)), base_(base), bytes_(bytes), linked_(owner) {
  const auto* h = static_cast<const Header*>(base_);
  nranks_ = h->nranks;
  slot_bytes_ = h->slot_bytes;
}

Segment::~Segment() {
  unlink();
  ::munmap(base_, bytes_);
}

void Segment::unlink() {
  if (linked_) ::shm_unlink(name_.c_str());
  linked_ = false;
}

RankState& Segment::rank(int r) const {
  return reinterpret_cast<RankState*>(static_cast<char*>(base_) + ranks_offset())[r];
}

unsigned char* Segment::slot(int r) const {
  return static_cast<unsigned char*>(base_) + slots_offset(nranks_) + slot_bytes_ * static_cast<size_t>(r);
}

std::unique_ptr<Segment> Segment::create(const std::string& name, int nranks, size_t slot_bytes, std::string* error) {
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    *error = errno == EEXIST ? "the unique id " + name + " is already in use by another communicator that is joining"
                             : system_error("shm_open", name);
    return nullptr;
  }
  const size_t bytes = total_bytes(nranks, slot_bytes);
  void* base = MAP_FAILED;
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    *error = system_error("ftruncate", name);
  } else {
    base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) *error = system_error("mmap", name);
  }
  ::close(fd);
  if (base == MAP_FAILED) {
    ::shm_unlink(name.c_str());
    return nullptr;
  }
  auto* h = new (base) Header;  // the pages are zero: every counter starts at 0
  h->nranks = nranks;
  h->slot_bytes = slot_bytes;
  h->total_bytes = bytes;
  auto* ranks = reinterpret_cast<RankState*>(static_cast<char*>(base) + ranks_offset());
  for (int r = 0; r < nranks; ++r) new (&ranks[r]) RankState{};
  h->magic.store(kReady, std::memory_order_release);
  return std::unique_ptr<Segment>(new Segment(name, base, bytes, true));
}

std::unique_ptr<Segment> Segment::attach(const std::string& name, int nranks, std::string* error) {
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) {
    if (errno != ENOENT) *error = system_error("shm_open", name);
    return nullptr;
  }
  struct stat st {};
  void* base = MAP_FAILED;
  if (::fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) >= sizeof(Header)) {
    base = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  ::close(fd);
  if (base == MAP_FAILED) return nullptr;  // rank 0 is between creating and sizing it: later
  const auto* h = static_cast<const Header*>(base);
  const size_t bytes = static_cast<size_t>(st.st_size);
  if (h->magic.load(std::memory_order_acquire) != kReady) {
    ::munmap(base, bytes);
    return nullptr;
  }
  if (h->nranks != nranks || h->total_bytes != bytes) {
    *error = "rank 0 made the communicator for " + std::to_string(h->nranks) + " ranks, this rank says " +
             std::to_string(nranks);
    ::munmap(base, bytes);
    return nullptr;
  }
  return std::unique_ptr<Segment>(new Segment(name, base, bytes, false));
}

}  // namespace cudasim::nccl
