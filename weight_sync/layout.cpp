#include "weight_sync/layout.h"

#include <algorithm>

#include "core/error.h"
#include "core/checksum.h"

#include <nlohmann/json.hpp>

#include <limits>
#include <map>
#include <set>

namespace tandem {

namespace {

int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw Error(fmt::format("{}: {}", where, what));
}

}  // namespace

WeightLayout plan_weight_layout(const std::vector<OutgoingTensor>& tensors, int64_t version, int64_t bucket_bytes,
                                const std::string& where) {
  if (bucket_bytes <= 0) fail(where, fmt::format("bucket size must be positive, got {}", bucket_bytes));
  WeightLayout layout;
  layout.version = version;
  std::set<std::string> names;
  int64_t end = 0;
  for (const OutgoingTensor& t : tensors) {
    if (!names.insert(t.name).second) fail(where, fmt::format("tensor {} is given twice", t.name));
    for (int64_t d : t.shape) {
      if (d < 0) fail(where, fmt::format("tensor {} has a negative dimension in shape {}", t.name, shape_text(t.shape)));
    }
    const int64_t bytes = tensor_bytes(t.shape, t.dtype);
    if (bytes > 0 && t.data == nullptr) fail(where, fmt::format("tensor {} has no data (null pointer)", t.name));
    const int64_t offset = round_up(end, kWeightAlign);
    layout.tensors.push_back({t.name, t.shape, t.dtype, offset, bytes});
    end = offset + bytes;
  }
  layout.total_bytes = end;
  const int64_t step = round_up(bucket_bytes, kWeightAlign);
  for (int64_t begin = 0; begin < end; begin += step) layout.buckets.push_back({begin, std::min(begin + step, end), 0});
  if (layout.buckets.empty()) layout.buckets.push_back({0, 0, 0});
  return layout;
}

std::string encode_weight_layout(const WeightLayout& layout) {
  nlohmann::json tensors = nlohmann::json::array(), buckets = nlohmann::json::array();
  for (const LayoutTensor& t : layout.tensors) {
    tensors.push_back(
        {{"name", t.name}, {"shape", t.shape}, {"dtype", dtype_name(t.dtype)}, {"offset", t.offset}, {"bytes", t.bytes}});
  }
  for (const LayoutBucket& b : layout.buckets) {
    buckets.push_back({{"begin", b.begin}, {"end", b.end}, {"checksum", checksum_hex(b.checksum)}});
  }
  return nlohmann::json{{"version", layout.version}, {"total_bytes", layout.total_bytes}, {"tensors", tensors},
                        {"buckets", buckets}}
      .dump();
}

WeightLayout decode_weight_layout(const std::string& text, const std::string& where) {
  WeightLayout layout;
  std::string context = "header";
  try {
    const nlohmann::json header = nlohmann::json::parse(text);
    layout.version = header.at("version").get<int64_t>();
    layout.total_bytes = header.at("total_bytes").get<int64_t>();
    if (layout.total_bytes < 0) fail(where, "header: negative total_bytes");
    std::set<std::string> names;
    int64_t end = 0;
    for (const auto& entry : header.at("tensors")) {
      LayoutTensor t;
      t.name = entry.at("name").get<std::string>();
      context = "header: tensor " + t.name;
      if (!names.insert(t.name).second) fail(where, context + " appears twice");
      int64_t numel = 1;
      for (const auto& d : entry.at("shape")) {
        const int64_t dim = d.get<int64_t>();
        if (dim < 0 || (dim > 0 && numel > std::numeric_limits<int64_t>::max() / 16 / dim)) {
          fail(where, context + " has an invalid shape " + entry.at("shape").dump());
        }
        numel *= dim;
        t.shape.push_back(dim);
      }
      try {
        t.dtype = dtype_from_name(entry.at("dtype").get<std::string>());
      } catch (const Error& e) {
        fail(where, fmt::format("{}: {}", context, e.what()));
      }
      t.offset = entry.at("offset").get<int64_t>();
      t.bytes = entry.at("bytes").get<int64_t>();
      if (t.bytes != tensor_bytes(t.shape, t.dtype)) {
        fail(where, fmt::format("{}: {} bytes do not fit shape {} of {}", context, t.bytes, shape_text(t.shape),
                                dtype_name(t.dtype)));
      }
      if (t.offset < end || t.offset % kWeightAlign != 0 || t.offset + t.bytes > layout.total_bytes) {
        fail(where, fmt::format("{}: offset {} is misplaced (after byte {}, stream of {} bytes)", context, t.offset,
                                end, layout.total_bytes));
      }
      end = t.offset + t.bytes;
      layout.tensors.push_back(std::move(t));
    }
    context = "header: buckets";
    int64_t covered = 0;
    for (const auto& entry : header.at("buckets")) {
      LayoutBucket b;
      b.begin = entry.at("begin").get<int64_t>();
      b.end = entry.at("end").get<int64_t>();
      const std::string hex = entry.at("checksum").get<std::string>();
      if (hex.size() != 16 || hex.find_first_not_of("0123456789abcdef") != std::string::npos) {
        fail(where, fmt::format("header: bucket {} has a malformed checksum \"{}\"", layout.buckets.size(), hex));
      }
      if (b.begin != covered || b.end < b.begin) {
        fail(where, fmt::format("header: bucket {} [{}, {}) does not continue at byte {}", layout.buckets.size(),
                                b.begin, b.end, covered));
      }
      b.checksum = std::stoull(hex, nullptr, 16);
      covered = b.end;
      layout.buckets.push_back(b);
    }
    if (layout.buckets.empty() || covered != layout.total_bytes) {
      fail(where, fmt::format("header: buckets cover {} of {} bytes", covered, layout.total_bytes));
    }
  } catch (const nlohmann::json::exception& e) {
    fail(where, fmt::format("malformed {}: {}", context, e.what()));
  }
  return layout;
}

void check_weight_layout(const WeightLayout& layout, const std::vector<ExpectedTensor>& expected,
                         const std::string& where) {
  std::map<std::string, const LayoutTensor*> arrived;
  for (const LayoutTensor& t : layout.tensors) arrived[t.name] = &t;
  std::set<std::string> wanted;
  for (const ExpectedTensor& e : expected) {
    wanted.insert(e.name);
    auto it = arrived.find(e.name);
    if (it == arrived.end()) fail(where, fmt::format("tensor {} is missing", e.name));
    const LayoutTensor& t = *it->second;
    if (t.shape != e.shape) {
      fail(where, fmt::format("tensor {} has shape {}, expected {}", e.name, shape_text(t.shape), shape_text(e.shape)));
    }
    if (t.dtype != e.dtype) {
      fail(where, fmt::format("tensor {} has dtype {}, expected {}", e.name, dtype_name(t.dtype), dtype_name(e.dtype)));
    }
  }
  for (const LayoutTensor& t : layout.tensors) {
    if (!wanted.count(t.name)) fail(where, fmt::format("unexpected tensor {}", t.name));
  }
}

std::string describe_bucket(const WeightLayout& layout, size_t bucket) {
  const LayoutBucket& b = layout.buckets.at(bucket);
  // The tensors with bytes in it, so that an error names what it would have damaged.
  std::vector<std::string> names;
  for (const LayoutTensor& t : layout.tensors) {
    if (t.offset < b.end && t.offset + t.bytes > b.begin) names.push_back(t.name);
  }
  const size_t shown = std::min<size_t>(names.size(), 3);
  std::string holding = fmt::format("{}", fmt::join(names.begin(), names.begin() + static_cast<std::ptrdiff_t>(shown), ", "));
  if (names.size() > shown) holding += fmt::format(" and {} more", names.size() - shown);
  return fmt::format("bucket {} of {} (bytes [{}, {}){}{})", bucket, layout.buckets.size(), b.begin, b.end,
                     names.empty() ? "" : ": ", holding);
}

}  // namespace tandem
