#include "weight_sync/shm_segment.h"

#include "core/error.h"
#include "weight_sync/layout.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <utility>

namespace tandem {

namespace {

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw Error(fmt::format("{}: {}", where, what));
}

// The prefix words: the header's length, and the sequence-lock generation.
constexpr int kLengthWord = 0;
constexpr int kGenerationWord = 1;

bool same_file(const std::string& name, dev_t device, ino_t inode) {
  const int fd = ::shm_open(name.c_str(), O_RDONLY, 0);
  if (fd < 0) return false;
  struct stat info {};
  const bool same = ::fstat(fd, &info) == 0 && info.st_dev == device && info.st_ino == inode;
  ::close(fd);
  return same;
}

}  // namespace

size_t shm_data_start(size_t header_bytes) {
  return (kShmPrefixBytes + header_bytes + kWeightAlign - 1) / kWeightAlign * kWeightAlign;
}

ShmSegment::~ShmSegment() {
  if (bytes_) ::munmap(bytes_, size_);
  if (fd_ >= 0) ::close(fd_);
}

ShmSegment::ShmSegment(ShmSegment&& other) noexcept { *this = std::move(other); }

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    if (bytes_) ::munmap(bytes_, size_);
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    bytes_ = std::exchange(other.bytes_, nullptr);
    size_ = std::exchange(other.size_, 0);
    data_start_ = std::exchange(other.data_start_, 0);
    device_ = other.device_;
    inode_ = other.inode_;
  }
  return *this;
}

ShmSegment ShmSegment::create(const std::string& name, size_t header_bytes, size_t data_bytes,
                              const std::string& where) {
  ShmSegment s;
  s.data_start_ = shm_data_start(header_bytes);
  s.size_ = s.data_start_ + data_bytes;
  ::shm_unlink(name.c_str());  // readers mapping the old version keep their copy
  s.fd_ = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (s.fd_ < 0) fail(where, fmt::format("cannot create: {}", std::strerror(errno)));
  if (::ftruncate(s.fd_, static_cast<off_t>(s.size_)) != 0) {
    const int e = errno;
    ::shm_unlink(name.c_str());
    fail(where, fmt::format("cannot size to {} bytes (is /dev/shm full?): {}", s.size_, std::strerror(e)));
  }
  struct stat info {};
  if (::fstat(s.fd_, &info) != 0) fail(where, fmt::format("cannot stat: {}", std::strerror(errno)));
  s.device_ = info.st_dev;
  s.inode_ = info.st_ino;
  void* mapped = ::mmap(nullptr, s.size_, PROT_READ | PROT_WRITE, MAP_SHARED, s.fd_, 0);
  if (mapped == MAP_FAILED) fail(where, fmt::format("cannot map: {}", std::strerror(errno)));
  s.bytes_ = static_cast<uint8_t*>(mapped);
  s.begin_write();
  return s;
}

bool ShmSegment::fits(const std::string& name, size_t header_bytes, size_t data_bytes) const {
  return bytes_ && shm_data_start(header_bytes) == data_start_ && data_start_ + data_bytes == size_ &&
         same_file(name, device_, inode_);
}

void ShmSegment::begin_write() {
  const uint64_t g = __atomic_load_n(word(kGenerationWord), __ATOMIC_RELAXED);
  __atomic_store_n(word(kGenerationWord), g | 1, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_RELEASE);  // readers that see new data see the odd generation
}

void ShmSegment::publish(const std::string& header) {
  TANDEM_CHECK(shm_data_start(header.size()) == data_start_, "shm header does not fit the room it was created with");
  std::memcpy(bytes_ + kShmPrefixBytes, header.data(), header.size());
  __atomic_store_n(word(kLengthWord), static_cast<uint64_t>(header.size()), __ATOMIC_RELEASE);
  const uint64_t g = __atomic_load_n(word(kGenerationWord), __ATOMIC_RELAXED);
  __atomic_store_n(word(kGenerationWord), g + 1, __ATOMIC_RELEASE);  // odd -> even: complete
}

ShmSegment ShmSegment::open_published(const std::string& name, double timeout_s, const std::string& where) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  std::string why;
  while (true) {
    ShmSegment s;
    s.fd_ = ::shm_open(name.c_str(), O_RDONLY, 0);
    struct stat info {};
    if (s.fd_ < 0) {
      why = fmt::format("cannot open: {}", std::strerror(errno));
    } else if (::fstat(s.fd_, &info) != 0 || static_cast<size_t>(info.st_size) < kShmPrefixBytes) {
      why = "the segment is still being created";
    } else {
      s.size_ = static_cast<size_t>(info.st_size);
      s.device_ = info.st_dev;
      s.inode_ = info.st_ino;
      void* mapped = ::mmap(nullptr, s.size_, PROT_READ, MAP_SHARED, s.fd_, 0);
      if (mapped == MAP_FAILED) fail(where, fmt::format("cannot map: {}", std::strerror(errno)));
      s.bytes_ = static_cast<uint8_t*>(mapped);
      const uint64_t generation = s.generation();
      const uint64_t length = __atomic_load_n(s.word(kLengthWord), __ATOMIC_ACQUIRE);
      if (generation != 0 && generation % 2 == 0) {
        if (length > s.size_ - kShmPrefixBytes || shm_data_start(length) > s.size_) {
          fail(where, fmt::format("header length {} does not fit the segment ({} bytes)", length, s.size_));
        }
        s.data_start_ = shm_data_start(length);
        return s;
      }
      why = "the segment is still being written";
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      fail(where, timeout_s > 0 ? fmt::format("{} (waited {} s for a sender to publish)", why, timeout_s) : why);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

bool ShmSegment::is_named(const std::string& name) const { return bytes_ && same_file(name, device_, inode_); }

uint64_t ShmSegment::generation() const { return __atomic_load_n(word(kGenerationWord), __ATOMIC_ACQUIRE); }

uint64_t ShmSegment::stable_generation(double timeout_s, const std::string& where) const {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (true) {
    const uint64_t g = generation();
    if (g != 0 && g % 2 == 0) return g;
    if (std::chrono::steady_clock::now() >= deadline) {
      fail(where, fmt::format("the segment is still being written (waited {} s)", timeout_s));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

std::string ShmSegment::header(const std::string& where) const {
  const uint64_t length = __atomic_load_n(word(kLengthWord), __ATOMIC_ACQUIRE);
  if (shm_data_start(length) != data_start_) {
    fail(where, fmt::format("header length {} does not match the segment's layout", length));
  }
  return std::string(reinterpret_cast<const char*>(bytes_) + kShmPrefixBytes, length);
}

void shm_segment_remove(const std::string& name) { ::shm_unlink(name.c_str()); }

}  // namespace tandem
