#include "core/checksum.h"

#include "core/error.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

namespace tandem {

uint64_t fnv1a64(const void* data, size_t bytes, uint64_t hash) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    hash ^= p[i];
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

uint64_t file_fnv1a64(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (!file) throw Error(fmt::format("cannot read {}: {}", path, std::strerror(errno)));
  std::vector<char> chunk(1 << 20);
  uint64_t hash = kFnv1aSeed;
  size_t got = 0;
  while ((got = std::fread(chunk.data(), 1, chunk.size(), file)) > 0) hash = fnv1a64(chunk.data(), got, hash);
  const bool failed = std::ferror(file) != 0;
  std::fclose(file);
  if (failed) throw Error(fmt::format("error while reading {}", path));
  return hash;
}

}  // namespace tandem
