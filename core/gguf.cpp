// GGUF reading: the header parse with bounds checks everywhere, typed metadata lookups,
// dequantization. Writing is in gguf_write.cpp.
#include "core/gguf.h"

#include "core/error.h"
#include "core/half.h"
#include "core/text.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace tandem {

namespace {

// Counts beyond these are damage, not a model: they bound allocations before any read.
constexpr uint64_t max_tensors = 1u << 20;
constexpr uint64_t max_string_bytes = 1u << 30;
constexpr uint32_t max_dims = 4;  // GGML_MAX_DIMS

// A cursor over the mapped bytes; every read checks that the bytes are there.
class Cursor {
 public:
  Cursor(const uint8_t* bytes, size_t size, const std::string& path) : bytes_(bytes), size_(size), path_(path) {}

  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T value;
    std::memcpy(&value, bytes_ + offset_, sizeof(T));
    offset_ += sizeof(T);
    return value;
  }
  std::string read_string(const char* what) {
    const uint64_t length = read<uint64_t>(what);
    if (length > max_string_bytes) throw fail(fmt::format("{} at byte {}: length {} is not plausible", what, offset_ - 8, length));
    need(length, what);
    std::string text(reinterpret_cast<const char*>(bytes_ + offset_), length);
    offset_ += length;
    return text;
  }
  void need(uint64_t bytes, const char* what) const {
    if (bytes > size_ - offset_) {
      throw fail(fmt::format("truncated: {} at byte {} needs {} bytes, the file has {}", what, offset_, bytes, size_));
    }
  }
  Error fail(const std::string& what) const { return Error(fmt::format("{}: not a valid GGUF file: {}", path_, what)); }
  size_t offset() const { return offset_; }

 private:
  const uint8_t* bytes_;
  size_t size_;
  size_t offset_ = 0;
  const std::string& path_;
};

bool is_integer_type(GgufValueType t) {
  switch (t) {
    case GgufValueType::gguf_uint8: case GgufValueType::gguf_int8: case GgufValueType::gguf_uint16:
    case GgufValueType::gguf_int16: case GgufValueType::gguf_uint32: case GgufValueType::gguf_int32:
    case GgufValueType::gguf_bool: case GgufValueType::gguf_uint64: case GgufValueType::gguf_int64:
      return true;
    default:
      return false;
  }
}

bool is_float_type(GgufValueType t) { return t == GgufValueType::gguf_float32 || t == GgufValueType::gguf_float64; }

// Reads one scalar of type `t` into value.integer / value.number / value.text.
void read_scalar(Cursor& in, GgufValueType t, GgufValue& value, const char* what) {
  switch (t) {
    case GgufValueType::gguf_uint8: value.integer = in.read<uint8_t>(what); break;
    case GgufValueType::gguf_int8: value.integer = in.read<int8_t>(what); break;
    case GgufValueType::gguf_uint16: value.integer = in.read<uint16_t>(what); break;
    case GgufValueType::gguf_int16: value.integer = in.read<int16_t>(what); break;
    case GgufValueType::gguf_uint32: value.integer = in.read<uint32_t>(what); break;
    case GgufValueType::gguf_int32: value.integer = in.read<int32_t>(what); break;
    case GgufValueType::gguf_bool: {
      const uint8_t b = in.read<uint8_t>(what);
      if (b > 1) throw in.fail(fmt::format("{}: bool value {}", what, b));
      value.integer = b;
      break;
    }
    case GgufValueType::gguf_uint64: {
      const uint64_t v = in.read<uint64_t>(what);
      if (v > static_cast<uint64_t>(INT64_MAX)) throw in.fail(fmt::format("{}: uint64 value {} above INT64_MAX", what, v));
      value.integer = static_cast<int64_t>(v);
      break;
    }
    case GgufValueType::gguf_int64: value.integer = in.read<int64_t>(what); break;
    case GgufValueType::gguf_float32: value.number = in.read<float>(what); break;
    case GgufValueType::gguf_float64: value.number = in.read<double>(what); break;
    case GgufValueType::gguf_string: value.text = in.read_string(what); break;
    default: throw in.fail(fmt::format("{}: unknown value type {}", what, static_cast<uint32_t>(t)));
  }
}

GgufValue read_value(Cursor& in, const std::string& key) {
  GgufValue value;
  const uint32_t type = in.read<uint32_t>("a value type");
  if (type > static_cast<uint32_t>(GgufValueType::gguf_float64)) {
    throw in.fail(fmt::format("metadata {}: unknown value type {} (known: 0 to 12)", key, type));
  }
  value.type = static_cast<GgufValueType>(type);
  if (value.type != GgufValueType::gguf_array) {
    read_scalar(in, value.type, value, key.c_str());
    return value;
  }
  const uint32_t element = in.read<uint32_t>("an array's element type");
  if (element > static_cast<uint32_t>(GgufValueType::gguf_float64)) {
    throw in.fail(fmt::format("metadata {}: unknown array element type {}", key, element));
  }
  value.element_type = static_cast<GgufValueType>(element);
  if (value.element_type == GgufValueType::gguf_array) throw in.fail(fmt::format("metadata {}: arrays of arrays are not supported", key));
  const uint64_t count = in.read<uint64_t>("an array's length");
  // Every element takes at least one byte: a count beyond the bytes left is damage.
  in.need(count, key.c_str());
  GgufValue element_value;
  for (uint64_t i = 0; i < count; ++i) {
    read_scalar(in, value.element_type, element_value, key.c_str());
    if (value.element_type == GgufValueType::gguf_string) value.strings.push_back(std::move(element_value.text));
    else if (is_float_type(value.element_type)) value.numbers.push_back(element_value.number);
    else value.integers.push_back(element_value.integer);
  }
  return value;
}

}  // namespace

const char* gguf_value_type_name(GgufValueType type) {
  static const char* names[] = {"uint8", "int8",   "uint16", "int16",  "uint32", "int32",  "float32",
                                "bool",  "string", "array",  "uint64", "int64",  "float64"};
  const auto i = static_cast<uint32_t>(type);
  return i < std::size(names) ? names[i] : "?";
}

GgufValue GgufValue::of_string(std::string value) {
  GgufValue v;
  v.type = GgufValueType::gguf_string;
  v.text = std::move(value);
  return v;
}
GgufValue GgufValue::of_uint32(uint32_t value) {
  GgufValue v;
  v.type = GgufValueType::gguf_uint32;
  v.integer = value;
  return v;
}
GgufValue GgufValue::of_int32(int32_t value) {
  GgufValue v;
  v.type = GgufValueType::gguf_int32;
  v.integer = value;
  return v;
}
GgufValue GgufValue::of_uint64(uint64_t value) {
  GgufValue v;
  v.type = GgufValueType::gguf_uint64;
  v.integer = static_cast<int64_t>(value);
  return v;
}
GgufValue GgufValue::of_float32(float value) {
  GgufValue v;
  v.type = GgufValueType::gguf_float32;
  v.number = value;
  return v;
}
GgufValue GgufValue::of_bool(bool value) {
  GgufValue v;
  v.type = GgufValueType::gguf_bool;
  v.integer = value ? 1 : 0;
  return v;
}
GgufValue GgufValue::of_strings(std::vector<std::string> values) {
  GgufValue v;
  v.type = GgufValueType::gguf_array;
  v.element_type = GgufValueType::gguf_string;
  v.strings = std::move(values);
  return v;
}
GgufValue GgufValue::of_int32s(std::vector<int64_t> values) {
  GgufValue v;
  v.type = GgufValueType::gguf_array;
  v.element_type = GgufValueType::gguf_int32;
  v.integers = std::move(values);
  return v;
}
GgufValue GgufValue::of_float32s(std::vector<double> values) {
  GgufValue v;
  v.type = GgufValueType::gguf_array;
  v.element_type = GgufValueType::gguf_float32;
  v.numbers = std::move(values);
  return v;
}

const char* gguf_tensor_type_name(GgufTensorType type) {
  switch (type) {
    case GgufTensorType::gguf_f32: return "F32";
    case GgufTensorType::gguf_f16: return "F16";
    case GgufTensorType::gguf_q8_0: return "Q8_0";
    case GgufTensorType::gguf_bf16: return "BF16";
  }
  return "?";
}

GgufTensorType gguf_tensor_type_from_name(const std::string& name) {
  std::string upper = name;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (auto t : {GgufTensorType::gguf_f32, GgufTensorType::gguf_f16, GgufTensorType::gguf_bf16, GgufTensorType::gguf_q8_0}) {
    if (upper == gguf_tensor_type_name(t)) return t;
  }
  throw Error(fmt::format("unknown GGUF tensor type \"{}\" (known: f32, f16, bf16 or q8_0)", name));
}

int64_t GgufTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

size_t gguf_tensor_bytes(GgufTensorType type, int64_t count) {
  switch (type) {
    case GgufTensorType::gguf_f32: return static_cast<size_t>(count) * 4;
    case GgufTensorType::gguf_f16:
    case GgufTensorType::gguf_bf16: return static_cast<size_t>(count) * 2;
    case GgufTensorType::gguf_q8_0:
      if (count % 32 != 0) throw Error(fmt::format("Q8_0 needs a multiple of 32 values, got {}", count));
      return static_cast<size_t>(count / 32) * 34;
  }
  throw Error(fmt::format("unknown GGUF tensor type {}", static_cast<uint32_t>(type)));
}

std::vector<float> gguf_dequantize(GgufTensorType type, const uint8_t* data, int64_t count) {
  std::vector<float> out(static_cast<size_t>(count));
  const size_t n = out.size();
  switch (type) {
    case GgufTensorType::gguf_f32:
      std::memcpy(out.data(), data, n * 4);
      break;
    case GgufTensorType::gguf_f16:
    case GgufTensorType::gguf_bf16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, data + 2 * i, 2);
        out[i] = type == GgufTensorType::gguf_f16 ? fp16_to_float(h) : bf16_to_float(h);
      }
      break;
    case GgufTensorType::gguf_q8_0:
      TANDEM_CHECK(n % 32 == 0, "Q8_0 needs a multiple of 32 values, got {}", n);
      for (size_t b = 0; b < n / 32; ++b) {
        const uint8_t* block = data + 34 * b;
        uint16_t d;
        std::memcpy(&d, block, 2);
        const float scale = fp16_to_float(d);
        for (size_t j = 0; j < 32; ++j) out[32 * b + j] = scale * static_cast<float>(static_cast<int8_t>(block[2 + j]));
      }
      break;
  }
  return out;
}

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(fmt::format("{}: cannot stat: {}", path, std::strerror(err)));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 4) {
    ::close(fd);
    throw Error(fmt::format("{}: not a GGUF file: {} bytes, shorter than the magic", path, size));
  }
  void* mapping = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (mapping == MAP_FAILED) throw Error(fmt::format("{}: cannot mmap: {}", path, std::strerror(errno)));
  file->mapping_ = mapping;
  file->mapping_size_ = size;
  const uint8_t* bytes = static_cast<const uint8_t*>(mapping);

  if (std::memcmp(bytes, "GGUF", 4) != 0) {
    throw Error(fmt::format("{}: not a GGUF file: bad magic {} (expected \"GGUF\")", path,
                            quoted(std::string(reinterpret_cast<const char*>(bytes), 4))));
  }
  Cursor in(bytes, size, path);
  in.read<uint32_t>("the magic");
  file->version_ = in.read<uint32_t>("the version");
  if (file->version_ != 3 && file->version_ != 2) {
    throw in.fail(fmt::format("version {} (this reader knows 2 and 3)", file->version_));
  }
  const uint64_t tensor_count = in.read<uint64_t>("the tensor count");
  const uint64_t kv_count = in.read<uint64_t>("the metadata count");
  if (tensor_count > max_tensors) throw in.fail(fmt::format("tensor count {} is not plausible", tensor_count));
  in.need(kv_count, "the metadata");  // each entry takes more than a byte

  for (uint64_t i = 0; i < kv_count; ++i) {
    std::string key = in.read_string("a metadata key");
    GgufValue value = read_value(in, key);
    if (file->key_index_.count(key)) throw in.fail(fmt::format("metadata key {} appears twice", key));
    file->key_index_[key] = file->metadata_.size();
    file->metadata_.emplace_back(std::move(key), std::move(value));
  }
  if (const GgufValue* a = file->find("general.alignment")) {
    if (!is_integer_type(a->type) || a->integer <= 0 || (a->integer & (a->integer - 1)) != 0) {
      throw in.fail("general.alignment must be a positive power of two");
    }
    file->alignment_ = static_cast<uint64_t>(a->integer);
  }

  for (uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensorInfo t;
    t.name = in.read_string("a tensor name");
    auto bad = [&](const std::string& what) { return in.fail(fmt::format("tensor {}: {}", t.name, what)); };
    const uint32_t n_dims = in.read<uint32_t>("a tensor's dimension count");
    if (n_dims == 0 || n_dims > max_dims) throw bad(fmt::format("{} dimensions (1 to {} allowed)", n_dims, max_dims));
    std::vector<int64_t> ne;
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim = in.read<uint64_t>("a tensor dimension");
      if (dim != 0 && numel > (uint64_t{1} << 48) / dim) throw bad("shape overflows");
      numel *= dim;
      ne.push_back(static_cast<int64_t>(dim));
    }
    t.shape.assign(ne.rbegin(), ne.rend());
    const uint32_t type = in.read<uint32_t>("a tensor type");
    if (type != 0 && type != 1 && type != 8 && type != 30) {
      throw bad(fmt::format("tensor type {} is not supported (F32 = 0, F16 = 1, Q8_0 = 8, BF16 = 30)", type));
    }
    t.type = static_cast<GgufTensorType>(type);
    if (t.type == GgufTensorType::gguf_q8_0 && ne[0] % 32 != 0) throw bad(fmt::format("Q8_0 row length {} is not a multiple of 32", ne[0]));
    t.offset = in.read<uint64_t>("a tensor offset");
    if (t.offset % file->alignment_ != 0) throw bad(fmt::format("offset {} is not a multiple of the alignment {}", t.offset, file->alignment_));
    t.bytes = gguf_tensor_bytes(t.type, static_cast<int64_t>(numel));
    if (file->tensor_index_.count(t.name)) throw bad("appears twice");
    file->tensor_index_[t.name] = file->tensors_.size();
    file->tensors_.push_back(std::move(t));
  }
  const uint64_t data_start = (in.offset() + file->alignment_ - 1) / file->alignment_ * file->alignment_;
  const uint64_t data_bytes = data_start <= size ? size - data_start : 0;
  for (GgufTensorInfo& t : file->tensors_) {
    if (t.offset > data_bytes || t.bytes > data_bytes - t.offset) {
      throw in.fail(fmt::format("tensor {}: offset {} + {} bytes runs past the end of the data ({} bytes; truncated file?)",
                                t.name, t.offset, t.bytes, data_bytes));
    }
    t.data = bytes + data_start + t.offset;
  }
  return file;
}

GgufFile::~GgufFile() {
  if (mapping_) ::munmap(mapping_, mapping_size_);
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = key_index_.find(key);
  return it == key_index_.end() ? nullptr : &metadata_[it->second].second;
}

const GgufValue& GgufFile::get_typed(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) {
    std::vector<std::string> keys;
    for (const auto& [k, value] : metadata_) keys.push_back(k);
    const std::string guess = closest_match(key, keys);
    throw Error(fmt::format("{}: no metadata key {}{}", path_, key, guess.empty() ? "" : " (did you mean " + guess + "?)"));
  }
  return *v;
}

namespace {

Error wrong_type(const std::string& path, const std::string& key, const GgufValue& v, const char* wanted) {
  const std::string found = v.type == GgufValueType::gguf_array
                                ? fmt::format("an array of {}", gguf_value_type_name(v.element_type))
                                : std::string(gguf_value_type_name(v.type));
  return Error(fmt::format("{}: metadata {}: expected {}, found {}", path, key, wanted, found));
}

}  // namespace

std::optional<std::string> GgufFile::find_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufValueType::gguf_string) throw wrong_type(path_, key, *v, "a string");
  return v->text;
}

std::optional<int64_t> GgufFile::find_int(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (!is_integer_type(v->type)) throw wrong_type(path_, key, *v, "an integer");
  return v->integer;
}

std::optional<double> GgufFile::find_float(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (is_integer_type(v->type)) return static_cast<double>(v->integer);
  if (!is_float_type(v->type)) throw wrong_type(path_, key, *v, "a number");
  return v->number;
}

std::optional<bool> GgufFile::find_bool(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufValueType::gguf_bool) throw wrong_type(path_, key, *v, "a bool");
  return v->integer != 0;
}

std::optional<std::vector<std::string>> GgufFile::find_string_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufValueType::gguf_array || v->element_type != GgufValueType::gguf_string) {
    throw wrong_type(path_, key, *v, "an array of strings");
  }
  return v->strings;
}

std::optional<std::vector<int64_t>> GgufFile::find_int_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufValueType::gguf_array || !is_integer_type(v->element_type)) {
    throw wrong_type(path_, key, *v, "an array of integers");
  }
  return v->integers;
}

std::optional<std::vector<float>> GgufFile::find_float_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufValueType::gguf_array || !(is_float_type(v->element_type) || is_integer_type(v->element_type))) {
    throw wrong_type(path_, key, *v, "an array of numbers");
  }
  std::vector<float> out;
  if (is_float_type(v->element_type)) {
    for (double x : v->numbers) out.push_back(static_cast<float>(x));
  } else {
    for (int64_t x : v->integers) out.push_back(static_cast<float>(x));
  }
  return out;
}

// get_*: get_typed names a missing key; the find_* above check the type.
std::string GgufFile::get_string(const std::string& key) const {
  (void)get_typed(key);
  return *find_string(key);
}
int64_t GgufFile::get_int(const std::string& key) const {
  (void)get_typed(key);
  return *find_int(key);
}
double GgufFile::get_float(const std::string& key) const {
  (void)get_typed(key);
  return *find_float(key);
}
bool GgufFile::get_bool(const std::string& key) const {
  (void)get_typed(key);
  return *find_bool(key);
}
std::vector<std::string> GgufFile::get_string_array(const std::string& key) const {
  (void)get_typed(key);
  return *find_string_array(key);
}
std::vector<int64_t> GgufFile::get_int_array(const std::string& key) const {
  (void)get_typed(key);
  return *find_int_array(key);
}
std::vector<float> GgufFile::get_float_array(const std::string& key) const {
  (void)get_typed(key);
  return *find_float_array(key);
}

const GgufTensorInfo& GgufFile::tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  if (it != tensor_index_.end()) return tensors_[it->second];
  std::vector<std::string> names;
  for (const auto& t : tensors_) names.push_back(t.name);
  const std::string guess = closest_match(name, names);
  throw Error(fmt::format("{}: no tensor named {}{}", path_, name, guess.empty() ? "" : " (did you mean " + guess + "?)"));
}

std::vector<float> GgufFile::tensor_to_float(const std::string& name) const {
  const GgufTensorInfo& t = tensor(name);
  return gguf_dequantize(t.type, t.data, t.numel());
}

}  // namespace tandem
