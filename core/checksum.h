// 64-bit FNV-1a: the checksum of checkpoint files and weight-transfer buckets. Not a
// cryptographic hash: it finds torn writes and flipped bytes, not tampering.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tandem {

constexpr uint64_t kFnv1aSeed = 0xcbf29ce484222325ULL;

// Continues a checksum over `bytes` (start with kFnv1aSeed).
uint64_t fnv1a64(const void* data, size_t bytes, uint64_t hash = kFnv1aSeed);

// The checksum of a whole file, read in chunks; an Error naming the file when it cannot be read.
uint64_t file_fnv1a64(const std::string& path);

}  // namespace tandem
