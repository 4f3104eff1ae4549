#include "core/checksum.h"

#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

namespace tandem {

namespace {

constexpr uint64_t kMultiplier = 0x9e3779b97f4a7c15ULL;  // odd: multiplying is a bijection

inline uint64_t rotate_left(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

inline uint64_t load_word(const uint8_t* p) {
  uint64_t w;
  std::memcpy(&w, p, 8);
  return w;
}

// A strong final mix (the avalanche step of MurmurHash3's 64-bit finaliser).
inline uint64_t finish_mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

}  // namespace

Checksum64::Checksum64()
    : lanes_{0x243f6a8885a308d3ULL, 0x13198a2e03707344ULL, 0xa4093822299f31d0ULL, 0x082efa98ec4e6c89ULL} {}

void Checksum64::block(const uint8_t* p) {
  for (int i = 0; i < 4; ++i) lanes_[i] = rotate_left((lanes_[i] ^ load_word(p + 8 * i)) * kMultiplier, 29);
}

void Checksum64::update(const void* data, size_t bytes) {
  const auto* p = static_cast<const uint8_t*>(data);
  total_bytes_ += bytes;
  if (pending_bytes_ > 0) {
    const size_t take = std::min(bytes, sizeof pending_ - pending_bytes_);
    std::memcpy(pending_ + pending_bytes_, p, take);
    pending_bytes_ += take;
    p += take;
    bytes -= take;
    if (pending_bytes_ < sizeof pending_) return;
    block(pending_);
    pending_bytes_ = 0;
  }
  for (; bytes >= 32; p += 32, bytes -= 32) block(p);
  std::memcpy(pending_, p, bytes);
  pending_bytes_ = bytes;
}

void Checksum64::update_zeros(size_t bytes) {
  static const uint8_t zeros[4096] = {};
  while (bytes > 0) {
    const size_t n = std::min(bytes, sizeof zeros);
    update(zeros, n);
    bytes -= n;
  }
}

uint64_t Checksum64::digest() const {
  Checksum64 tail = *this;
  if (tail.pending_bytes_ > 0) {  // zero-pad the last block; the length below tells padding from data
    std::memset(tail.pending_ + tail.pending_bytes_, 0, sizeof pending_ - tail.pending_bytes_);
    tail.block(tail.pending_);
  }
  uint64_t h = finish_mix(total_bytes_ ^ kMultiplier);
  for (int i = 0; i < 4; ++i) h = finish_mix(h ^ rotate_left(tail.lanes_[i], 16 * i));
  return h;
}

uint64_t checksum64(const void* data, size_t bytes) {
  Checksum64 c;
  c.update(data, bytes);
  return c.digest();
}

std::string checksum_hex(uint64_t checksum) { return fmt::format("{:016x}", checksum); }

uint64_t file_checksum64(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (!file) throw Error(fmt::format("cannot read {}: {}", path, std::strerror(errno)));
  std::vector<char> chunk(1 << 20);
  Checksum64 sum;
  size_t got = 0;
  while ((got = std::fread(chunk.data(), 1, chunk.size(), file)) > 0) sum.update(chunk.data(), got);
  const bool failed = std::ferror(file) != 0;
  std::fclose(file);
  if (failed) throw Error(fmt::format("error while reading {}", path));
  return sum.digest();
}

}  // namespace tandem
