#include "core/safetensors.h"

#include "core/error.h"
#include "core/files.h"
#include "core/half.h"
#include "core/text.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace tandem {

namespace {

using json = nlohmann::json;

// Headers of real checkpoints are well under 10 MB; a bigger one is damage or an attack.
constexpr uint64_t max_header_bytes = 100u << 20;

struct DTypeInfo {
  DType dtype;
  const char* name;
  size_t size;
};

constexpr DTypeInfo dtype_table[] = {
    {DType::f64, "F64", 8}, {DType::f32, "F32", 4}, {DType::f16, "F16", 2},     {DType::bf16, "BF16", 2},
    {DType::i64, "I64", 8}, {DType::i32, "I32", 4}, {DType::i16, "I16", 2},     {DType::i8, "I8", 1},
    {DType::u8, "U8", 1},   {DType::boolean, "BOOL", 1},
};

}  // namespace

size_t dtype_size(DType dtype) {
  for (const auto& d : dtype_table)
    if (d.dtype == dtype) return d.size;
  return 0;
}

const char* dtype_name(DType dtype) {
  for (const auto& d : dtype_table)
    if (d.dtype == dtype) return d.name;
  return "?";
}

DType dtype_from_name(const std::string& name) {
  std::vector<std::string> known;
  for (const auto& d : dtype_table) {
    if (name == d.name) return d.dtype;
    known.push_back(d.name);
  }
  throw Error(fmt::format("unsupported dtype \"{}\" (supported: {})", name, join_choices(known)));
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<float> tensor_to_float(const TensorView& t) {
  size_t n = static_cast<size_t>(t.numel());
  std::vector<float> out(n);
  switch (t.dtype) {
    case DType::f32:
      std::memcpy(out.data(), t.data, n * 4);
      break;
    case DType::f64:
      for (size_t i = 0; i < n; ++i) {
        double v;
        std::memcpy(&v, t.data + 8 * i, 8);
        out[i] = static_cast<float>(v);
      }
      break;
    case DType::bf16:
    case DType::f16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        out[i] = t.dtype == DType::bf16 ? bf16_to_float(h) : fp16_to_float(h);
      }
      break;
    default:
      throw Error(fmt::format("tensor {}: dtype {} is not a floating-point type", t.name, dtype_name(t.dtype)));
  }
  return out;
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  auto fail = [&](const std::string& what) -> Error { return Error(fmt::format("{}: not a valid safetensors file: {}", path, what)); };

  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    throw Error(fmt::format("{}: cannot stat: {}", path, std::strerror(errno)));
  }
  size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    throw fail(fmt::format("{} bytes is too short for the 8-byte header length", size));
  }
  void* mapping = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (mapping == MAP_FAILED) throw Error(fmt::format("{}: cannot mmap: {}", path, std::strerror(errno)));
  file->mapping_ = mapping;
  file->mapping_size_ = size;
  const uint8_t* bytes = static_cast<const uint8_t*>(mapping);

  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | bytes[i];
  if (header_bytes > max_header_bytes || header_bytes > size - 8) {
    throw fail(fmt::format("header length {} does not fit the file of {} bytes", header_bytes, size));
  }
  const char* header_text = reinterpret_cast<const char*>(bytes + 8);
  if (header_bytes < 2 || header_text[0] != '{') throw fail("the header is not a JSON object");
  json header;
  try {
    header = json::parse(header_text, header_text + header_bytes);
  } catch (const json::exception& e) {
    throw fail(fmt::format("header JSON: {}", e.what()));
  }
  if (!header.is_object()) throw fail("the header is not a JSON object");

  const uint8_t* buffer = bytes + 8 + header_bytes;
  const uint64_t buffer_bytes = size - 8 - header_bytes;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") {
      if (!it.value().is_object()) throw fail("__metadata__ is not an object");
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        if (!m.value().is_string()) throw fail(fmt::format("__metadata__.{} is not a string", m.key()));
        file->metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const json& entry = it.value();
    auto bad = [&](const std::string& what) { return fail(fmt::format("tensor {}: {}", name, what)); };
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") || !entry.contains("data_offsets")) {
      throw bad("needs dtype, shape and data_offsets");
    }
    TensorView view;
    view.name = name;
    if (!entry["dtype"].is_string()) throw bad("dtype is not a string");
    try {
      view.dtype = dtype_from_name(entry["dtype"].get<std::string>());
    } catch (const Error& e) {
      throw bad(e.what());
    }
    if (!entry["shape"].is_array()) throw bad("shape is not a list");
    uint64_t numel = 1;
    for (const json& d : entry["shape"]) {
      if (!d.is_number_unsigned()) throw bad("shape holds something other than non-negative integers");
      uint64_t dim = d.get<uint64_t>();
      if (dim != 0 && numel > UINT64_MAX / dim / 8) throw bad("shape overflows");
      numel *= dim;
      view.shape.push_back(static_cast<int64_t>(dim));
    }
    const json& offsets = entry["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned()) {
      throw bad("data_offsets must be [begin, end]");
    }
    uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    if (begin > end || end > buffer_bytes) {
      throw bad(fmt::format("data_offsets [{}, {}] fall outside the {}-byte data buffer (truncated file?)", begin, end,
                            buffer_bytes));
    }
    uint64_t expected = numel * dtype_size(view.dtype);
    if (end - begin != expected) {
      throw bad(fmt::format("{} bytes for shape of {} {} elements ({} bytes)", end - begin, numel,
                            entry["dtype"].get<std::string>(), expected));
    }
    view.data = buffer + begin;
    view.bytes = static_cast<size_t>(end - begin);
    ranges.emplace_back(begin, end);
    file->index_[name] = file->tensors_.size();
    file->tensors_.push_back(std::move(view));
  }
  // The buffer must be covered exactly: no overlaps, no holes, nothing after the end.
  std::sort(ranges.begin(), ranges.end());
  uint64_t covered = 0;
  for (const auto& [begin, end] : ranges) {
    if (begin != covered) {
      throw fail(begin < covered ? fmt::format("tensors overlap at byte {}", begin)
                                 : fmt::format("bytes {} to {} of the data belong to no tensor", covered, begin));
    }
    covered = end;
  }
  if (covered != buffer_bytes) {
    throw fail(fmt::format("{} bytes after the last tensor belong to no tensor", buffer_bytes - covered));
  }
  return file;
}

void release_pages(const TensorView& view) {
  if (!view.data || view.bytes == 0) return;
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(view.data) / page * page;
  const uintptr_t end = reinterpret_cast<uintptr_t>(view.data) + view.bytes;
  // A read-only private file mapping: dropped pages come back from the file, so pages
  // shared with a neighbouring tensor may be dropped too. Advice only: failure is harmless.
  ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_) ::munmap(mapping_, mapping_size_);
}

bool SafetensorsFile::contains(const std::string& name) const { return index_.count(name) != 0; }

const TensorView& SafetensorsFile::get(const std::string& name) const {
  auto it = index_.find(name);
  if (it != index_.end()) return tensors_[it->second];
  std::vector<std::string> names;
  for (const auto& t : tensors_) names.push_back(t.name);
  std::string guess = closest_match(name, names);
  throw Error(fmt::format("{}: no tensor named {}{}", path_, name, guess.empty() ? "" : " (did you mean " + guess + "?)"));
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& input,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<const TensorToWrite*> tensors;
  for (const auto& t : input) tensors.push_back(&t);
  std::sort(tensors.begin(), tensors.end(), [](auto* a, auto* b) { return a->name < b->name; });
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const TensorToWrite* t : tensors) {
    int64_t numel = 1;
    for (int64_t d : t->shape) {
      TANDEM_CHECK(d >= 0, "tensor {}: negative dimension", t->name);
      numel *= d;
    }
    TANDEM_CHECK(t->bytes.size() == static_cast<size_t>(numel) * dtype_size(t->dtype),
                 "tensor {}: {} bytes for {} elements of {}", t->name, t->bytes.size(), numel, dtype_name(t->dtype));
    TANDEM_CHECK(t->name != "__metadata__" && !header.contains(t->name), "tensor name {} used twice", t->name);
    header[t->name] = {{"dtype", dtype_name(t->dtype)}, {"shape", t->shape}, {"data_offsets", {offset, offset + t->bytes.size()}}};
    offset += t->bytes.size();
  }
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');  // align the data buffer to 8 bytes
  std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(fmt::format("{}: cannot write: {}", temporary, std::strerror(errno)));
    uint64_t n = header_text.size();
    char length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<char>((n >> (8 * i)) & 0xff);
    out.write(length, 8);
    out.write(header_text.data(), static_cast<std::streamsize>(header_text.size()));
    for (const TensorToWrite* t : tensors) out.write(t->bytes.data(), static_cast<std::streamsize>(t->bytes.size()));
    out.flush();
    if (!out) {
      std::filesystem::remove(temporary);
      throw Error(fmt::format("{}: write failed (disk full?)", temporary));
    }
  }
  int fd = ::open(temporary.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::filesystem::remove(temporary);
    throw Error(fmt::format("cannot rename {} to {}: {}", temporary, path, std::strerror(err)));
  }
}

SafetensorsModel SafetensorsModel::open_directory(const std::string& directory) {
  namespace fs = std::filesystem;
  SafetensorsModel model;
  model.directory_ = directory;
  fs::path index_path = fs::path(directory) / "model.safetensors.index.json";
  fs::path single_path = fs::path(directory) / "model.safetensors";
  if (fs::exists(index_path)) {
    json index;
    try {
      std::optional<std::string> text = read_file(index_path.string());
      if (!text) throw Error(fmt::format("{}: cannot read: {}", index_path.string(), std::strerror(errno)));
      index = json::parse(*text);
    } catch (const json::exception& e) {
      throw Error(fmt::format("{}: not valid JSON: {}", index_path.string(), e.what()));
    }
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
      throw Error(fmt::format("{}: needs a \"weight_map\" object (tensor name -> shard file)", index_path.string()));
    }
    std::map<std::string, std::shared_ptr<SafetensorsFile>> shards;
    for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
      if (!it.value().is_string()) throw Error(fmt::format("{}: weight_map.{} is not a file name", index_path.string(), it.key()));
      std::string shard = it.value().get<std::string>();
      if (shard.find('/') != std::string::npos || shard.find("..") != std::string::npos) {
        throw Error(fmt::format("{}: shard file {} must be a plain file name in the directory", index_path.string(), shard));
      }
      auto& file = shards[shard];
      if (!file) {
        std::string shard_path = (fs::path(directory) / shard).string();
        if (!fs::exists(shard_path)) {
          throw Error(fmt::format("{}: shard {} listed for tensor {} does not exist", index_path.string(), shard, it.key()));
        }
        file = SafetensorsFile::open(shard_path);
        model.files_.push_back(file);
      }
      if (!file->contains(it.key())) {
        throw Error(fmt::format("{}: tensor {} is listed in shard {} but that shard does not hold it", index_path.string(),
                                it.key(), shard));
      }
      model.location_[it.key()] = &file->get(it.key());
    }
  } else if (fs::exists(single_path)) {
    auto file = std::shared_ptr<SafetensorsFile>(SafetensorsFile::open(single_path.string()));
    model.files_.push_back(file);
    for (const auto& t : file->tensors()) model.location_[t.name] = &t;
  } else {
    throw Error(fmt::format("{}: no model.safetensors or model.safetensors.index.json", directory));
  }
  return model;
}

std::vector<std::string> SafetensorsModel::names() const {
  std::vector<std::string> out;
  for (const auto& [name, view] : location_) out.push_back(name);
  return out;
}

const TensorView& SafetensorsModel::get(const std::string& name) const {
  auto it = location_.find(name);
  if (it != location_.end()) return *it->second;
  std::string guess = closest_match(name, names());
  throw Error(fmt::format("{}: the model has no tensor named {}{}", directory_, name,
                          guess.empty() ? "" : " (did you mean " + guess + "?)"));
}

void write_safetensors_sharded(const std::string& directory, const std::vector<TensorToWrite>& tensors,
                               size_t max_shard_bytes) {
  namespace fs = std::filesystem;
  fs::create_directories(directory);
  std::vector<const TensorToWrite*> sorted;
  for (const auto& t : tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->name < b->name; });
  std::vector<std::vector<TensorToWrite>> shards(1);
  size_t shard_bytes = 0, total = 0;
  for (const TensorToWrite* t : sorted) {
    if (shard_bytes > 0 && shard_bytes + t->bytes.size() > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(*t);
    shard_bytes += t->bytes.size();
    total += t->bytes.size();
  }
  if (shards.size() == 1) {
    write_safetensors((fs::path(directory) / "model.safetensors").string(), shards[0]);
    return;
  }
  json weight_map = json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    std::string name = fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards.size());
    write_safetensors((fs::path(directory) / name).string(), shards[i]);
    for (const auto& t : shards[i]) weight_map[t.name] = name;
  }
  json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  std::ofstream((fs::path(directory) / "model.safetensors.index.json").string()) << index.dump(2) << "\n";
}

}  // namespace tandem
