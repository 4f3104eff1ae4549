// safetensors read/write, sharded directories, hostile files; fp16/bf16 conversions
// against a float64 reference built from the formats' definitions.
#include "core/error.h"
#include "core/files.h"
#include "core/half.h"
#include "core/safetensors.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

using namespace tandem;
namespace fs = std::filesystem;

namespace {

std::mt19937_64& rng() {
  static std::mt19937_64 r(std::random_device{}());
  return r;
}

// Value of a half-precision bit pattern from the definition: sign, biased exponent, fraction.
double reference_decode(uint16_t h, int exponent_bits, int mantissa_bits) {
  int bias = (1 << (exponent_bits - 1)) - 1;
  int sign = h >> 15;
  int exponent = (h >> mantissa_bits) & ((1 << exponent_bits) - 1);
  int mantissa = h & ((1 << mantissa_bits) - 1);
  double s = sign ? -1.0 : 1.0;
  if (exponent == (1 << exponent_bits) - 1) return mantissa ? NAN : s * INFINITY;
  if (exponent == 0) return s * std::ldexp(mantissa, 1 - bias - mantissa_bits);
  return s * std::ldexp(1.0 + std::ldexp(mantissa, -mantissa_bits), exponent - bias);
}

// Round-to-nearest-even by search over every finite value of the format.
uint16_t reference_encode(float f, int exponent_bits, int mantissa_bits) {
  double x = f;
  uint16_t best = 0;
  double best_error = INFINITY;
  for (uint32_t h = 0; h < 0x8000; ++h) {
    double v = reference_decode(static_cast<uint16_t>(h), exponent_bits, mantissa_bits);
    if (!std::isfinite(v)) continue;
    double error = std::fabs(std::fabs(x) - v);
    if (error < best_error || (error == best_error && (h & 1) == 0)) {
      best_error = error;
      best = static_cast<uint16_t>(h);
    }
  }
  // Past the largest finite value by half a unit or more: infinity.
  uint16_t largest = static_cast<uint16_t>(((1 << exponent_bits) - 2) << mantissa_bits | ((1 << mantissa_bits) - 1));
  double max_value = reference_decode(largest, exponent_bits, mantissa_bits);
  double half_ulp = std::ldexp(1.0, (1 << (exponent_bits - 1)) - 1 - mantissa_bits - 1);
  if (std::fabs(x) >= max_value + half_ulp) best = static_cast<uint16_t>(((1 << exponent_bits) - 1) << mantissa_bits);
  return static_cast<uint16_t>(best | (std::signbit(f) ? 0x8000 : 0));
}

float random_float_in_range(double max_magnitude) {
  std::uniform_real_distribution<double> exponent(-30, std::log2(max_magnitude));
  double v = std::exp2(exponent(rng())) * (rng()() & 1 ? -1 : 1);
  return static_cast<float>(v);
}

TensorToWrite random_tensor(const std::string& name, DType dtype) {
  TensorToWrite t{name, dtype, {}, {}};
  int dims = static_cast<int>(rng()() % 4);
  int64_t numel = 1;
  for (int d = 0; d < dims; ++d) {
    t.shape.push_back(static_cast<int64_t>(1 + rng()() % 7));
    numel *= t.shape.back();
  }
  t.bytes.resize(static_cast<size_t>(numel) * dtype_size(dtype));
  for (auto& c : t.bytes) c = static_cast<char>(rng()() & 0xff);
  return t;
}

void write_raw(const std::string& path, const std::string& header, const std::string& data) {
  std::ofstream out(path, std::ios::binary);
  uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header << data;
}

std::string open_error(const std::string& path) {
  try {
    SafetensorsFile::open(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("fp16 and bf16 decode every bit pattern as the format defines") {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    double f16 = reference_decode(static_cast<uint16_t>(h), 5, 10);
    double b16 = reference_decode(static_cast<uint16_t>(h), 8, 7);
    float ours16 = fp16_to_float(static_cast<uint16_t>(h));
    float oursb = bf16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f16)) CHECK(std::isnan(ours16)); else CHECK(static_cast<double>(ours16) == f16);
    if (std::isnan(b16)) CHECK(std::isnan(oursb)); else CHECK(static_cast<double>(oursb) == b16);
  }
}

TEST_CASE("float -> fp16/bf16 rounds to nearest even, including subnormals and overflow") {
  std::vector<float> inputs = {0.0f, -0.0f, 65504.0f, 65519.0f, 65520.0f, 1e-8f, 2.98e-8f, 6.1e-5f, 1.0f + 1.0f / 2048,
                               3.4e38f, -3.4e38f};
  for (int i = 0; i < 300; ++i) inputs.push_back(random_float_in_range(70000));
  for (float f : inputs) {
    CHECK_MESSAGE(float_to_fp16(f) == reference_encode(f, 5, 10), "fp16 of ", f);
  }
  std::vector<float> bf_inputs = {0.0f, 1.0f + 1.0f / 256, 3.39e38f, -1e-40f};
  for (int i = 0; i < 300; ++i) bf_inputs.push_back(random_float_in_range(1e38));
  for (float f : bf_inputs) CHECK_MESSAGE(float_to_bf16(f) == reference_encode(f, 8, 7), "bf16 of ", f);
  CHECK(std::isnan(fp16_to_float(float_to_fp16(NAN))));
  CHECK(std::isnan(bf16_to_float(float_to_bf16(NAN))));
  CHECK(std::isinf(fp16_to_float(float_to_fp16(INFINITY))));
}

TEST_CASE("safetensors round-trip every dtype with random shapes and bytes") {
  TempDir dir;
  std::vector<TensorToWrite> tensors;
  const DType dtypes[] = {DType::f64, DType::f32, DType::f16, DType::bf16, DType::i64,
                          DType::i32, DType::i16, DType::i8,  DType::u8,   DType::boolean};
  int k = 0;
  for (DType d : dtypes) tensors.push_back(random_tensor(fmt::format("layer.{}.weight", k++), d));
  std::string path = dir.path() + "/a.safetensors";
  write_safetensors(path, tensors, {{"format", "pt"}});
  auto file = SafetensorsFile::open(path);
  CHECK(file->metadata().at("format") == "pt");
  REQUIRE(file->tensors().size() == tensors.size());
  for (const auto& t : tensors) {
    const TensorView& v = file->get(t.name);
    CHECK(v.dtype == t.dtype);
    CHECK(v.shape == t.shape);
    REQUIRE(v.bytes == t.bytes.size());
    CHECK(std::memcmp(v.data, t.bytes.data(), v.bytes) == 0);
  }
  CHECK_THROWS_WITH_AS(file->get("layer.0.weigth"), doctest::Contains("did you mean layer.0.weight?"), Error);
}

TEST_CASE("tensor_to_float converts every floating dtype") {
  TempDir dir;
  std::vector<float> values(37);
  for (auto& v : values) v = random_float_in_range(1000);
  std::string f32(values.size() * 4, '\0'), f16(values.size() * 2, '\0'), b16(values.size() * 2, '\0'),
      f64(values.size() * 8, '\0');
  for (size_t i = 0; i < values.size(); ++i) {
    std::memcpy(&f32[4 * i], &values[i], 4);
    uint16_t h = float_to_fp16(values[i]), b = float_to_bf16(values[i]);
    std::memcpy(&f16[2 * i], &h, 2);
    std::memcpy(&b16[2 * i], &b, 2);
    double d = values[i];
    std::memcpy(&f64[8 * i], &d, 8);
  }
  int64_t n = static_cast<int64_t>(values.size());
  write_safetensors(dir.path() + "/f.safetensors", {{"a", DType::f32, {n}, f32}, {"b", DType::f16, {n}, f16},
                                                  {"c", DType::bf16, {n}, b16}, {"d", DType::f64, {n}, f64}});
  auto file = SafetensorsFile::open(dir.path() + "/f.safetensors");
  auto a = tensor_to_float(file->get("a")), b = tensor_to_float(file->get("b")), c = tensor_to_float(file->get("c")),
       d = tensor_to_float(file->get("d"));
  for (size_t i = 0; i < values.size(); ++i) {
    CHECK(a[i] == values[i]);
    CHECK(d[i] == values[i]);
    CHECK(std::fabs(b[i] - values[i]) <= std::fabs(values[i]) * 1e-3f + 6e-8f);  // fp16: 11-bit significand
    CHECK(std::fabs(c[i] - values[i]) <= std::fabs(values[i]) * 4e-3f);          // bf16: 8-bit significand
  }
}

TEST_CASE("malformed files are rejected with the reason, never read out of bounds") {
  TempDir dir;
  std::string p = dir.path() + "/bad.safetensors";
  std::ofstream(p) << "abc";
  CHECK(open_error(p).find("too short for the 8-byte header length") != std::string::npos);
  write_raw(p, "", "");
  CHECK(open_error(p).find("not a JSON object") != std::string::npos);
  {
    std::ofstream out(p, std::ios::binary);
    uint64_t n = 1ull << 40;
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << "{}";
  }
  CHECK(open_error(p).find("header length 1099511627776 does not fit") != std::string::npos);
  write_raw(p, "{\"a\": {\"dtype\": \"F32\"", "");
  CHECK(open_error(p).find("header JSON") != std::string::npos);
  write_raw(p, R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", "1234");
  CHECK(open_error(p).find("fall outside the 4-byte data buffer (truncated file?)") != std::string::npos);
  write_raw(p, R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", "12345678");
  CHECK(open_error(p).find("8 bytes for shape of 3 F32 elements (12 bytes)") != std::string::npos);
  write_raw(p, R"({"a": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 8]}})", "12345678");
  CHECK(open_error(p).find("unsupported dtype \"Q4\"") != std::string::npos);
  write_raw(p, R"({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", "12345678");
  CHECK(open_error(p).find("non-negative integers") != std::string::npos);
  write_raw(p, R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
            "12345678");
  CHECK(open_error(p).find("tensors overlap at byte 4") != std::string::npos);
  write_raw(p, R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", "12345678");
  CHECK(open_error(p).find("bytes 0 to 4 of the data belong to no tensor") != std::string::npos);
  write_raw(p, R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", "12345678");
  CHECK(open_error(p).find("4 bytes after the last tensor belong to no tensor") != std::string::npos);
  write_raw(p, R"({"a": {"dtype": "F32", "shape": [4294967296, 4294967296, 4294967296], "data_offsets": [0, 8]}})", "12345678");
  CHECK(open_error(p).find("shape overflows") != std::string::npos);
  CHECK(open_error(dir.path() + "/missing.safetensors").find("cannot open") != std::string::npos);
}

TEST_CASE("random damage to a valid file never crashes the reader") {
  TempDir dir;
  std::string good = dir.path() + "/good.safetensors";
  write_safetensors(good, {random_tensor("x", DType::f32), random_tensor("y", DType::bf16), random_tensor("z", DType::i64)});
  std::ifstream in(good, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string damaged_path = dir.path() + "/damaged.safetensors";
  for (int round = 0; round < 2000; ++round) {
    std::string damaged = bytes;
    if (round % 3 == 0) {
      damaged.resize(rng()() % bytes.size());  // truncation
    } else {
      for (int k = 0; k < 1 + static_cast<int>(rng()() % 4); ++k) damaged[rng()() % damaged.size()] = static_cast<char>(rng()());
    }
    std::ofstream(damaged_path, std::ios::binary | std::ios::trunc) << damaged;
    try {
      auto file = SafetensorsFile::open(damaged_path);
      for (const auto& t : file->tensors()) {  // whatever opened must be readable in bounds
        volatile uint8_t sum = 0;
        for (size_t i = 0; i < t.bytes; ++i) sum = static_cast<uint8_t>(sum + t.data[i]);
      }
    } catch (const Error&) {
    }
  }
}

TEST_CASE("sharded model directories load through the index; problems are named") {
  TempDir dir;
  std::vector<TensorToWrite> tensors;
  for (int i = 0; i < 12; ++i) tensors.push_back(random_tensor(fmt::format("model.layers.{}.w", i), DType::f32));
  // Shards of a third of the total (or the largest tensor, which never splits): random
  // shapes can be small, and a fixed size could then fit everything into one file.
  size_t total = 0, largest = 0;
  for (const auto& t : tensors) {
    total += t.bytes.size();
    largest = std::max(largest, t.bytes.size());
  }
  write_safetensors_sharded(dir.path(), tensors, std::max(largest, total / 3));
  CHECK(fs::exists(dir.path() + "/model.safetensors.index.json"));
  CHECK_FALSE(fs::exists(dir.path() + "/model.safetensors"));
  SafetensorsModel model = SafetensorsModel::open_directory(dir.path());
  CHECK(model.names().size() == tensors.size());
  for (const auto& t : tensors) {
    const TensorView& v = model.get(t.name);
    REQUIRE(v.bytes == t.bytes.size());
    CHECK(std::memcmp(v.data, t.bytes.data(), v.bytes) == 0);
  }
  CHECK_THROWS_WITH_AS(model.get("model.layers.0.v"), doctest::Contains("did you mean model.layers.0.w?"), Error);

  // One shard file goes missing.
  std::string shard;
  for (const auto& e : fs::directory_iterator(dir.path()))
    if (e.path().filename().string().rfind("model-00002", 0) == 0) shard = e.path().string();
  REQUIRE_FALSE(shard.empty());
  fs::remove(shard);
  CHECK_THROWS_WITH_AS(SafetensorsModel::open_directory(dir.path()), doctest::Contains("does not exist"), Error);

  TempDir single;
  write_safetensors_sharded(single.path(), tensors, 1u << 30);
  CHECK(fs::exists(single.path() + "/model.safetensors"));
  CHECK(SafetensorsModel::open_directory(single.path()).names().size() == tensors.size());
  TempDir empty;
  CHECK_THROWS_WITH_AS(SafetensorsModel::open_directory(empty.path()), doctest::Contains("no model.safetensors"), Error);
}
