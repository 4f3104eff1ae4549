// GGUF writing: metadata and tensor infos, then each tensor encoded (F32, F16, BF16 or
// Q8_0) at its aligned offset; streamed to `path`.tmp, fsynced and renamed.
#include "core/error.h"
#include "core/gguf.h"
#include "core/half.h"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

namespace tandem {

namespace {

class Output {
 public:
  explicit Output(std::ofstream& out) : out_(out) {}
  template <typename T>
  void put(T value) {
    out_.write(reinterpret_cast<const char*>(&value), sizeof value);
    written_ += sizeof value;
  }
  void put_bytes(const void* data, size_t bytes) {
    out_.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
    written_ += bytes;
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    put_bytes(s.data(), s.size());
  }
  void pad_to(uint64_t alignment) {
    static const char zeros[64] = {};
    while (written_ % alignment != 0) put_bytes(zeros, std::min<uint64_t>(alignment - written_ % alignment, sizeof zeros));
  }
  uint64_t written() const { return written_; }

 private:
  std::ofstream& out_;
  uint64_t written_ = 0;
};

void put_scalar(Output& out, GgufValueType type, int64_t integer, double number, const std::string& text) {
  switch (type) {
    case GgufValueType::gguf_uint8: out.put(static_cast<uint8_t>(integer)); break;
    case GgufValueType::gguf_int8: out.put(static_cast<int8_t>(integer)); break;
    case GgufValueType::gguf_uint16: out.put(static_cast<uint16_t>(integer)); break;
    case GgufValueType::gguf_int16: out.put(static_cast<int16_t>(integer)); break;
    case GgufValueType::gguf_uint32: out.put(static_cast<uint32_t>(integer)); break;
    case GgufValueType::gguf_int32: out.put(static_cast<int32_t>(integer)); break;
    case GgufValueType::gguf_bool: out.put(static_cast<uint8_t>(integer != 0)); break;
    case GgufValueType::gguf_uint64: out.put(static_cast<uint64_t>(integer)); break;
    case GgufValueType::gguf_int64: out.put(integer); break;
    case GgufValueType::gguf_float32: out.put(static_cast<float>(number)); break;
    case GgufValueType::gguf_float64: out.put(number); break;
    case GgufValueType::gguf_string: out.put_string(text); break;
    case GgufValueType::gguf_array: TANDEM_CHECK(false, "arrays of arrays are not written");
  }
}

void put_value(Output& out, const GgufValue& v) {
  out.put(static_cast<uint32_t>(v.type));
  if (v.type != GgufValueType::gguf_array) {
    put_scalar(out, v.type, v.integer, v.number, v.text);
    return;
  }
  out.put(static_cast<uint32_t>(v.element_type));
  if (v.element_type == GgufValueType::gguf_string) {
    out.put<uint64_t>(v.strings.size());
    for (const std::string& s : v.strings) out.put_string(s);
  } else if (v.element_type == GgufValueType::gguf_float32 || v.element_type == GgufValueType::gguf_float64) {
    out.put<uint64_t>(v.numbers.size());
    for (double x : v.numbers) put_scalar(out, v.element_type, 0, x, "");
  } else {
    out.put<uint64_t>(v.integers.size());
    for (int64_t x : v.integers) put_scalar(out, v.element_type, x, 0.0, "");
  }
}

// ggml's quantize_row_q8_0_ref: d = amax / 127, q = round(x / d).
void encode_q8_0(const float* x, int64_t count, std::string& bytes) {
  for (int64_t b = 0; b < count / 32; ++b) {
    const float* block = x + 32 * b;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(block[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t dh = float_to_fp16(d);
    bytes.append(reinterpret_cast<const char*>(&dh), 2);
    for (int j = 0; j < 32; ++j) bytes.push_back(static_cast<char>(static_cast<int8_t>(std::lround(block[j] * id))));
  }
}

// One tensor's bytes, encoded in pieces so that a large tensor needs no second full copy.
void put_tensor(Output& out, const GgufTensorToWrite& t, int64_t numel) {
  constexpr int64_t chunk = 1 << 16;  // values per piece, a multiple of 32
  std::string bytes;
  for (int64_t begin = 0; begin < numel; begin += chunk) {
    const int64_t n = std::min(chunk, numel - begin);
    const float* x = t.values + begin;
    bytes.clear();
    switch (t.type) {
      case GgufTensorType::gguf_f32: bytes.assign(reinterpret_cast<const char*>(x), static_cast<size_t>(n) * 4); break;
      case GgufTensorType::gguf_f16:
      case GgufTensorType::gguf_bf16:
        bytes.resize(static_cast<size_t>(n) * 2);
        for (int64_t i = 0; i < n; ++i) {
          const uint16_t h = t.type == GgufTensorType::gguf_f16 ? float_to_fp16(x[i]) : float_to_bf16(x[i]);
          std::memcpy(&bytes[static_cast<size_t>(2 * i)], &h, 2);
        }
        break;
      case GgufTensorType::gguf_q8_0: encode_q8_0(x, n, bytes); break;
    }
    out.put_bytes(bytes.data(), bytes.size());
  }
}

}  // namespace

void write_gguf(const std::string& path, const std::vector<std::pair<std::string, GgufValue>>& metadata,
                const std::vector<GgufTensorToWrite>& tensors) {
  uint64_t alignment = 32;
  std::set<std::string> keys;
  for (const auto& [key, value] : metadata) {
    TANDEM_CHECK(keys.insert(key).second, "{}: metadata key {} given twice", path, key);
    TANDEM_CHECK(value.type != GgufValueType::gguf_array || value.element_type != GgufValueType::gguf_array,
                 "{}: metadata {}: arrays of arrays are not written", path, key);
    if (key == "general.alignment") {
      TANDEM_CHECK(value.integer > 0 && (value.integer & (value.integer - 1)) == 0,
                   "{}: general.alignment must be a positive power of two", path);
      alignment = static_cast<uint64_t>(value.integer);
    }
  }
  std::vector<int64_t> numels;
  std::vector<uint64_t> offsets;
  uint64_t offset = 0;
  std::set<std::string> names;
  for (const GgufTensorToWrite& t : tensors) {
    TANDEM_CHECK(names.insert(t.name).second, "{}: tensor {} given twice", path, t.name);
    TANDEM_CHECK(!t.shape.empty() && t.shape.size() <= 4, "{}: tensor {}: {} dimensions (1 to 4)", path, t.name, t.shape.size());
    int64_t numel = 1;
    for (int64_t d : t.shape) {
      TANDEM_CHECK(d >= 0, "{}: tensor {}: negative dimension", path, t.name);
      numel *= d;
    }
    TANDEM_CHECK(t.type != GgufTensorType::gguf_q8_0 || t.shape.back() % 32 == 0,
                 "{}: tensor {}: Q8_0 needs rows of a multiple of 32 values, got {}", path, t.name, t.shape.back());
    TANDEM_CHECK(t.values != nullptr || numel == 0, "{}: tensor {}: no values", path, t.name);
    numels.push_back(numel);
    offsets.push_back(offset);
    offset += (gguf_tensor_bytes(t.type, numel) + alignment - 1) / alignment * alignment;
  }

  const std::string temporary = path + ".tmp";
  {
    std::ofstream file(temporary, std::ios::binary | std::ios::trunc);
    if (!file) throw Error(fmt::format("{}: cannot write: {}", temporary, std::strerror(errno)));
    Output out(file);
    out.put_bytes("GGUF", 4);
    out.put<uint32_t>(3);
    out.put<uint64_t>(tensors.size());
    out.put<uint64_t>(metadata.size());
    for (const auto& [key, value] : metadata) {
      out.put_string(key);
      put_value(out, value);
    }
    for (size_t i = 0; i < tensors.size(); ++i) {
      const GgufTensorToWrite& t = tensors[i];
      out.put_string(t.name);
      out.put<uint32_t>(static_cast<uint32_t>(t.shape.size()));
      for (auto d = t.shape.rbegin(); d != t.shape.rend(); ++d) out.put<uint64_t>(static_cast<uint64_t>(*d));
      out.put(static_cast<uint32_t>(t.type));
      out.put<uint64_t>(offsets[i]);
    }
    out.pad_to(alignment);
    for (size_t i = 0; i < tensors.size(); ++i) {
      put_tensor(out, tensors[i], numels[i]);
      out.pad_to(alignment);
    }
    file.flush();
    if (!file) {
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
    const int err = errno;
    std::filesystem::remove(temporary);
    throw Error(fmt::format("cannot rename {} to {}: {}", temporary, path, std::strerror(err)));
  }
}

}  // namespace tandem
