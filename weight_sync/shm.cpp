#include "weight_sync/shm.h"

#include "core/error.h"

#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <set>

namespace tandem {

namespace {

constexpr int64_t kAlign = 64;

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

uint64_t fnv1a(const uint8_t* data, size_t size) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < size; ++i) hash = (hash ^ data[i]) * 0x100000001b3ULL;
  return hash;
}

// A mapped segment, unmapped and closed on scope exit.
struct Mapping {
  int fd = -1;
  uint8_t* bytes = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (bytes) ::munmap(bytes, size);
    if (fd >= 0) ::close(fd);
  }
};

[[noreturn]] void fail(const std::string& name, const std::string& what) {
  throw Error(fmt::format("weight_sync shm {}: {}", name, what));
}

}  // namespace

ShmStats publish_weights_shm(const std::string& name, const std::vector<OutgoingTensor>& tensors, int64_t version,
                             int64_t bucket_bytes) {
  TANDEM_CHECK(bucket_bytes > 0, "weight_sync: bucket size must be positive, got {}", bucket_bytes);
  nlohmann::json entries = nlohmann::json::array(), buckets = nlohmann::json::array();
  int64_t offset = 0, bucket_begin = 0;
  for (const OutgoingTensor& t : tensors) {
    offset = (offset + kAlign - 1) / kAlign * kAlign;
    entries.push_back({{"name", t.name}, {"shape", t.shape}, {"offset", offset}});
    offset += numel(t.shape) * static_cast<int64_t>(sizeof(float));
    if (offset - bucket_begin >= bucket_bytes) {
      buckets.push_back({{"begin", bucket_begin}, {"end", offset}});
      bucket_begin = offset;
    }
  }
  if (offset > bucket_begin || buckets.empty()) buckets.push_back({{"begin", bucket_begin}, {"end", offset}});
  // Checksums are filled after the data is copied; reserve their width with a placeholder.
  for (auto& b : buckets) b["fnv1a"] = std::string(16, '0');
  nlohmann::json header = {{"version", version}, {"tensors", entries}, {"buckets", buckets}};
  const int64_t header_size = static_cast<int64_t>(header.dump().size());
  const int64_t data_start = (8 + header_size + kAlign - 1) / kAlign * kAlign;
  const size_t total = static_cast<size_t>(data_start + offset);

  ::shm_unlink(name.c_str());  // readers mapping the old version keep their copy
  Mapping m;
  m.fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (m.fd < 0) fail(name, fmt::format("cannot create: {}", std::strerror(errno)));
  if (::ftruncate(m.fd, static_cast<off_t>(total)) != 0) {
    const int e = errno;
    ::shm_unlink(name.c_str());
    fail(name, fmt::format("cannot size to {} bytes (is /dev/shm full?): {}", total, std::strerror(e)));
  }
  void* mapped = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, m.fd, 0);
  if (mapped == MAP_FAILED) fail(name, fmt::format("cannot map: {}", std::strerror(errno)));
  m.bytes = static_cast<uint8_t*>(mapped);
  m.size = total;
  uint8_t* data = m.bytes + data_start;
  for (size_t i = 0; i < tensors.size(); ++i) {
    std::memcpy(data + entries[i]["offset"].get<int64_t>(), tensors[i].data,
                static_cast<size_t>(numel(tensors[i].shape)) * sizeof(float));
  }
  for (auto& b : buckets) {
    const int64_t begin = b["begin"].get<int64_t>(), end = b["end"].get<int64_t>();
    b["fnv1a"] = fmt::format("{:016x}", fnv1a(data + begin, static_cast<size_t>(end - begin)));
  }
  header["buckets"] = buckets;
  const std::string text = header.dump();
  TANDEM_CHECK(static_cast<int64_t>(text.size()) == header_size, "weight_sync shm header changed size");
  const uint64_t length = text.size();
  std::memcpy(m.bytes, &length, 8);
  std::memcpy(m.bytes + 8, text.data(), text.size());
  return {offset, static_cast<int64_t>(buckets.size())};
}

int64_t receive_weights_shm(const std::string& name, const std::vector<ExpectedTensor>& expected,
                            const TensorSink& sink) {
  Mapping m;
  m.fd = ::shm_open(name.c_str(), O_RDONLY, 0);
  if (m.fd < 0) fail(name, fmt::format("cannot open: {}", std::strerror(errno)));
  struct stat info{};
  if (::fstat(m.fd, &info) != 0 || info.st_size < 8) fail(name, "segment too small to hold a header");
  m.size = static_cast<size_t>(info.st_size);
  void* mapped = ::mmap(nullptr, m.size, PROT_READ, MAP_SHARED, m.fd, 0);
  if (mapped == MAP_FAILED) fail(name, fmt::format("cannot map: {}", std::strerror(errno)));
  m.bytes = static_cast<uint8_t*>(mapped);
  uint64_t length = 0;
  std::memcpy(&length, m.bytes, 8);
  if (length > m.size - 8) fail(name, fmt::format("header length {} exceeds the segment ({} bytes)", length, m.size));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(std::string(reinterpret_cast<const char*>(m.bytes) + 8, length));
  } catch (const nlohmann::json::exception& e) {
    fail(name, fmt::format("header is not JSON: {}", e.what()));
  }
  const size_t data_start = (8 + length + kAlign - 1) / kAlign * kAlign;
  const uint8_t* data = m.bytes + data_start;
  const size_t data_size = m.size - data_start;
  for (const auto& b : header.at("buckets")) {
    const size_t begin = b.at("begin").get<size_t>(), end = b.at("end").get<size_t>();
    if (begin > end || end > data_size) fail(name, fmt::format("bucket [{}, {}) lies outside the data", begin, end));
    const std::string want = b.at("fnv1a").get<std::string>();
    const std::string got = fmt::format("{:016x}", fnv1a(data + begin, end - begin));
    if (got != want) fail(name, fmt::format("bucket [{}, {}) checksum {} != {}: corrupted", begin, end, got, want));
  }
  std::map<std::string, std::pair<std::vector<int64_t>, size_t>> arrived;
  for (const auto& t : header.at("tensors")) {
    arrived[t.at("name").get<std::string>()] = {t.at("shape").get<std::vector<int64_t>>(), t.at("offset").get<size_t>()};
  }
  for (const ExpectedTensor& e : expected) {
    auto it = arrived.find(e.name);
    if (it == arrived.end()) fail(name, fmt::format("tensor {} is missing", e.name));
    if (it->second.first != e.shape) {
      fail(name, fmt::format("tensor {} has shape {}, expected {}", e.name, nlohmann::json(it->second.first).dump(),
                             nlohmann::json(e.shape).dump()));
    }
    const size_t bytes = static_cast<size_t>(numel(e.shape)) * sizeof(float);
    if (it->second.second + bytes > data_size) fail(name, fmt::format("tensor {} runs past the data", e.name));
    sink(e, reinterpret_cast<const float*>(data + it->second.second));
  }
  if (arrived.size() != expected.size()) {  // every expected one arrived: the rest are extra
    std::set<std::string> wanted;
    for (const ExpectedTensor& e : expected) wanted.insert(e.name);
    for (const auto& entry : arrived) {
      if (!wanted.count(entry.first)) fail(name, fmt::format("unexpected tensor {}", entry.first));
    }
  }
  return header.at("version").get<int64_t>();
}

void remove_weights_shm(const std::string& name) { ::shm_unlink(name.c_str()); }

}  // namespace tandem
