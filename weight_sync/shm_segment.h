// A published POSIX shared-memory segment: a 16-byte prefix (header length, generation),
// the header text, then (from the next 64-byte boundary) the data.
//
// The generation is a sequence lock: odd while the writer writes, even once a version is
// complete. A reader waits for an even generation, reads, and compares the generation
// afterwards; if it changed, a new version was written during the read and what it read
// must be discarded. A writer may rewrite its segment in place when the next version has
// the same layout size (new pages in a fresh tmpfs segment cost far more than the copy
// itself), otherwise it replaces the segment with a fresh one: the old name is unlinked
// first, so a reader still mapping the old version keeps reading it whole.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace tandem {

class ShmSegment {
 public:
  ShmSegment() = default;
  ~ShmSegment();
  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  // Writer: creates a fresh segment `name` with room for `header_bytes` of header and
  // `data_bytes` of data, mapped read-write, its generation odd (being written).
  static ShmSegment create(const std::string& name, size_t header_bytes, size_t data_bytes, const std::string& where);
  // Writer: whether this segment is still the one named `name` and has exactly the room
  // for a version of this size, so it can be rewritten in place.
  bool fits(const std::string& name, size_t header_bytes, size_t data_bytes) const;
  // Writer: marks a rewrite in progress (generation odd).
  void begin_write();
  // Writer: stores the header and completes the version (generation even).
  void publish(const std::string& header);

  // Reader: maps segment `name` read-only once it exists and holds a complete version,
  // waiting up to `timeout_s`. Errors name `where`.
  static ShmSegment open_published(const std::string& name, double timeout_s, const std::string& where);
  // Reader: whether `name` still refers to this mapping (so a cached mapping can be reused).
  bool is_named(const std::string& name) const;
  // Reader: waits up to `timeout_s` for a complete version; returns its generation.
  uint64_t stable_generation(double timeout_s, const std::string& where) const;
  uint64_t generation() const;
  std::string header(const std::string& where) const;

  uint8_t* data() { return bytes_ + data_start_; }
  const uint8_t* data() const { return bytes_ + data_start_; }
  size_t data_size() const { return size_ - data_start_; }

 private:
  uint64_t* word(int i) const { return reinterpret_cast<uint64_t*>(bytes_) + i; }

  int fd_ = -1;
  uint8_t* bytes_ = nullptr;
  size_t size_ = 0;
  size_t data_start_ = 0;
  dev_t device_ = 0;
  ino_t inode_ = 0;
};

constexpr size_t kShmPrefixBytes = 16;
size_t shm_data_start(size_t header_bytes);

// Removes segment `name` (no error if absent).
void shm_segment_remove(const std::string& name);

}  // namespace tandem
