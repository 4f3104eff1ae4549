// GGUF files (llama.cpp's model format, version 3): metadata and tensors, read by mmap
// and written atomically.
//
// Layout (all little-endian): "GGUF", u32 version (3), u64 tensor count, u64 metadata
// count; the metadata as (string key, u32 value type, value); the tensor infos as
// (string name, u32 n_dims, u64 ne[n_dims], u32 tensor type, u64 offset); padding to
// `general.alignment` (default 32); then the data, each tensor at its offset from the
// data section's start (a multiple of the alignment). A string is a u64 length and
// that many bytes (no terminator); an array is a u32 element type, a u64 count and the
// elements.
//
// ggml lists dimensions fastest-moving first: ne[0] is the row length. This API uses
// the row-major order of safetensors and torch instead (outermost first), so a Linear
// weight [out_features, in_features] is shape {out, in} here and ne = {in, out} in the
// file.
//
// Opening validates the whole header and every tensor's extent: a malformed or truncated
// file is an Error naming the file and what is wrong, never a crash or an out-of-bounds
// read. Tensor data is only touched when asked for (tokenizer-only files stay cheap).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tandem {

// The metadata value types, numbered as in the file.
enum class GgufValueType : uint32_t {
  gguf_uint8 = 0,
  gguf_int8 = 1,
  gguf_uint16 = 2,
  gguf_int16 = 3,
  gguf_uint32 = 4,
  gguf_int32 = 5,
  gguf_float32 = 6,
  gguf_bool = 7,
  gguf_string = 8,
  gguf_array = 9,
  gguf_uint64 = 10,
  gguf_int64 = 11,
  gguf_float64 = 12,
};
const char* gguf_value_type_name(GgufValueType type);  // "uint32", "string", "array", ...

// One metadata value. Scalars of every integer type (and bool) are held in `integer`,
// float32/float64 in `number`; an array keeps its element type and its elements in the
// vector that fits (strings, integers or numbers). Arrays of arrays are refused on read.
struct GgufValue {
  GgufValueType type = GgufValueType::gguf_uint32;
  GgufValueType element_type = GgufValueType::gguf_uint32;  // arrays only
  int64_t integer = 0;
  double number = 0.0;
  std::string text;
  std::vector<std::string> strings;
  std::vector<int64_t> integers;
  std::vector<double> numbers;

  static GgufValue of_string(std::string value);
  static GgufValue of_uint32(uint32_t value);
  static GgufValue of_int32(int32_t value);
  static GgufValue of_uint64(uint64_t value);
  static GgufValue of_float32(float value);
  static GgufValue of_bool(bool value);
  static GgufValue of_strings(std::vector<std::string> values);
  static GgufValue of_int32s(std::vector<int64_t> values);
  static GgufValue of_float32s(std::vector<double> values);
};

// The tensor types this reader dequantizes and this writer produces (numbered as ggml's
// enum ggml_type). Q8_0: blocks of 32 values, each a fp16 scale d and 32 int8 q, value = d*q.
enum class GgufTensorType : uint32_t { gguf_f32 = 0, gguf_f16 = 1, gguf_q8_0 = 8, gguf_bf16 = 30 };
const char* gguf_tensor_type_name(GgufTensorType type);  // "F32", "F16", "Q8_0", "BF16"
// Parses those names (case-insensitive); an Error listing them otherwise.
GgufTensorType gguf_tensor_type_from_name(const std::string& name);

struct GgufTensorInfo {
  std::string name;
  GgufTensorType type = GgufTensorType::gguf_f32;
  std::vector<int64_t> shape;  // row-major, outermost first (the file's ne reversed)
  uint64_t offset = 0;         // from the data section's start
  const uint8_t* data = nullptr;  // into the mapping; valid while the file is open
  size_t bytes = 0;
  int64_t numel() const;
};

class GgufFile {
 public:
  static std::unique_ptr<GgufFile> open(const std::string& path);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }

  // Metadata, in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  bool contains_key(const std::string& key) const { return key_index_.count(key) != 0; }
  const GgufValue* find(const std::string& key) const;  // nullptr when absent

  // Typed lookups. get_* throw an Error naming the file and the key when the key is absent
  // or holds another type; find_* return nullopt when absent (and throw on a wrong type).
  // Integers accept every integer type (and bool), floats every float and integer type;
  // a uint64 above INT64_MAX is an Error.
  std::string get_string(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  std::vector<std::string> get_string_array(const std::string& key) const;
  std::vector<int64_t> get_int_array(const std::string& key) const;
  std::vector<float> get_float_array(const std::string& key) const;
  std::optional<std::string> find_string(const std::string& key) const;
  std::optional<int64_t> find_int(const std::string& key) const;
  std::optional<double> find_float(const std::string& key) const;
  std::optional<bool> find_bool(const std::string& key) const;
  std::optional<std::vector<std::string>> find_string_array(const std::string& key) const;
  std::optional<std::vector<int64_t>> find_int_array(const std::string& key) const;
  std::optional<std::vector<float>> find_float_array(const std::string& key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  bool contains_tensor(const std::string& name) const { return tensor_index_.count(name) != 0; }
  // Throws Error naming the file and the tensor (with a did-you-mean) when absent.
  const GgufTensorInfo& tensor(const std::string& name) const;
  // The tensor's values as float32 (dequantized), row-major.
  std::vector<float> tensor_to_float(const std::string& name) const;

 private:
  GgufFile() = default;
  const GgufValue& get_typed(const std::string& key) const;
  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  void* mapping_ = nullptr;
  size_t mapping_size_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::map<std::string, size_t> key_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

// Dequantizes `count` values of `type` at `data` (count a multiple of 32 for Q8_0).
std::vector<float> gguf_dequantize(GgufTensorType type, const uint8_t* data, int64_t count);
// The bytes `count` values of `type` take; an Error when Q8_0 and count % 32 != 0.
size_t gguf_tensor_bytes(GgufTensorType type, int64_t count);

struct GgufTensorToWrite {
  std::string name;
  GgufTensorType type = GgufTensorType::gguf_f32;  // F32, F16, BF16 or Q8_0 (rows a multiple of 32)
  std::vector<int64_t> shape;                      // row-major, outermost first
  const float* values = nullptr;                   // numel values; the caller keeps them alive
};

// Writes a GGUF v3 file: to `path`.tmp, fsync, rename (readers see the old file or the new
// one). Tensors are laid out in the given order, each aligned to `general.alignment` (from
// `metadata` when set, else 32, which is then not written). Q8_0 rounds as ggml does
// (d = amax / 127, q = round(x / d)).
void write_gguf(const std::string& path, const std::vector<std::pair<std::string, GgufValue>>& metadata,
                const std::vector<GgufTensorToWrite>& tensors);

}  // namespace tandem
