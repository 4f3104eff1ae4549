#include "actor/tensor_parallel_slices.h"

#include "core/error.h"

#include <algorithm>
#include <cstring>

namespace tandem {

namespace {

// Values per canonical row of the axis-0 view: the product of the other dimensions.
int64_t row_width(const ParameterShard& shard) {
  int64_t width = 1;
  for (size_t i = 1; i < shard.canonical_shape.size(); ++i) width *= shard.canonical_shape[i];
  return width;
}

// Where canonical index `index` along `axis` sits in the rank's local tensor.
int64_t local_index(const ParameterShard& shard, int axis, int64_t index) {
  return shard.dim == axis ? index - shard.begin : index;
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t mix(uint64_t canonical_index, float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return splitmix64(canonical_index * 0x9E3779B97F4A7C15ull + bits);
}

void check_covers(const ParameterShard& shard, const CanonicalBlock& block, const char* role) {
  const CanonicalBlock held = shard_block(shard, block.axis);
  TANDEM_CHECK(held.begin <= block.begin && block.end <= held.end,
               "{}: the {} shard [{}, {}) does not cover block [{}, {}) along axis {}", shard.name, role, held.begin,
               held.end, block.begin, block.end, block.axis);
}

}  // namespace

CanonicalBlock shard_block(const ParameterShard& shard, int axis) {
  TANDEM_CHECK(axis >= 0 && axis < static_cast<int>(shard.canonical_shape.size()), "{}: no axis {}", shard.name,
               axis);
  if (shard.dim == axis) return {axis, shard.begin, shard.begin + shard.length};
  TANDEM_CHECK(shard.dim < 0, "{} splits along axis {}, not {}", shard.name, shard.dim, axis);
  return {axis, 0, shard.canonical_shape[axis]};
}

int split_axis(const ParameterShard& a, const ParameterShard& b) {
  if (a.dim >= 0 && b.dim >= 0) TANDEM_CHECK(a.dim == b.dim, "{} splits along axis {} and {}", a.name, a.dim, b.dim);
  return a.dim >= 0 ? a.dim : b.dim >= 0 ? b.dim : 0;
}

std::vector<int64_t> block_shape(const ParameterShard& shard, const CanonicalBlock& block) {
  std::vector<int64_t> shape = shard.canonical_shape;
  shape[block.axis] = block.length();
  return shape;
}

int64_t block_numel(const ParameterShard& shard, const CanonicalBlock& block) {
  int64_t n = 1;
  for (int64_t d : block_shape(shard, block)) n *= d;
  return n;
}

ParameterShard block_view(const ParameterShard& shard, const CanonicalBlock& block) {
  ParameterShard view = shard;
  view.dim = block.axis;
  view.begin = block.begin;
  view.length = block.length();
  view.local_shape = block_shape(shard, block);
  return view;
}

void copy_block(const ParameterShard& from_shard, const float* from, const ParameterShard& to_shard, float* to,
                const CanonicalBlock& block) {
  check_covers(from_shard, block, "source");
  check_covers(to_shard, block, "destination");
  if (block.length() == 0) return;
  if (block.axis == 0) {
    const int64_t width = row_width(from_shard);
    std::memcpy(to + local_index(to_shard, 0, block.begin) * width, from + local_index(from_shard, 0, block.begin) * width,
                static_cast<size_t>(block.length() * width) * sizeof(float));
    return;
  }
  TANDEM_CHECK(from_shard.canonical_shape.size() == 2, "{}: columns of a tensor that is not a matrix", from_shard.name);
  const int64_t rows = from_shard.canonical_shape[0];
  const int64_t from_width = from_shard.local_shape[1], to_width = to_shard.local_shape[1];
  const int64_t from_column = local_index(from_shard, 1, block.begin), to_column = local_index(to_shard, 1, block.begin);
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(to + r * to_width + to_column, from + r * from_width + from_column,
                static_cast<size_t>(block.length()) * sizeof(float));
  }
}

uint64_t canonical_checksum(const ParameterShard& shard, const float* local, const CanonicalBlock& block) {
  check_covers(shard, block, "checksummed");
  uint64_t sum = 0;
  if (block.axis == 0) {
    const int64_t width = row_width(shard);
    const float* values = local + local_index(shard, 0, block.begin) * width;
    const uint64_t first = static_cast<uint64_t>(block.begin * width);
    const int64_t n = block.length() * width;
    for (int64_t i = 0; i < n; ++i) sum += mix(first + static_cast<uint64_t>(i), values[i]);
    return sum;
  }
  const int64_t rows = shard.canonical_shape[0], columns = shard.canonical_shape[1];
  const int64_t width = shard.local_shape[1], column = local_index(shard, 1, block.begin);
  for (int64_t r = 0; r < rows; ++r) {
    const float* values = local + r * width + column;
    const uint64_t first = static_cast<uint64_t>(r * columns + block.begin);
    for (int64_t c = 0; c < block.length(); ++c) sum += mix(first + static_cast<uint64_t>(c), values[c]);
  }
  return sum;
}

std::vector<SliceTransfer> ReshardPlan::between(int source, int destination) const {
  std::vector<SliceTransfer> out;
  for (const SliceTransfer& s : slices) {
    if (s.source == source && s.destination == destination) out.push_back(s);
  }
  return out;
}

int64_t ReshardPlan::values_to(int destination) const {
  int64_t n = 0;
  for (const SliceTransfer& s : slices) {
    if (s.destination == destination) n += block_numel(destination_layouts[destination][s.parameter], s.block);
  }
  return n;
}

std::string ReshardPlan::slice_name(const SliceTransfer& slice) const {
  return fmt::format("{}[{} {}:{}]", destination_layouts[slice.destination][slice.parameter].name,
                     slice.block.axis == 0 ? "rows" : "columns", slice.block.begin, slice.block.end);
}

ReshardPlan plan_reshard(const ModelConfig& config, int source_size, int destination_size) {
  check_tensor_parallel(config, source_size, "weight sync source tensor_parallel");
  check_tensor_parallel(config, destination_size, "weight sync destination tensor_parallel");
  ReshardPlan plan;
  plan.source_size = source_size;
  plan.destination_size = destination_size;
  for (int r = 0; r < source_size; ++r) plan.source_layouts.push_back(tensor_parallel_layout(config, {source_size, r}));
  for (int r = 0; r < destination_size; ++r) {
    plan.destination_layouts.push_back(tensor_parallel_layout(config, {destination_size, r}));
  }
  const size_t parameters = plan.destination_layouts[0].size();
  for (int d = 0; d < destination_size; ++d) {
    for (size_t p = 0; p < parameters; ++p) {
      const ParameterShard& want = plan.destination_layouts[d][p];
      const int axis = split_axis(want, plan.source_layouts[0][p]);
      // Intervals of the destination's block not yet assigned to a source.
      std::vector<CanonicalBlock> missing = {shard_block(want, axis)};
      std::vector<SliceTransfer> found;
      for (int k = 0; k < source_size && !missing.empty(); ++k) {
        const int s = (d % source_size + k) % source_size;
        const CanonicalBlock held = shard_block(plan.source_layouts[s][p], axis);
        std::vector<CanonicalBlock> still_missing;
        for (const CanonicalBlock& m : missing) {
          const int64_t begin = std::max(m.begin, held.begin), end = std::min(m.end, held.end);
          if (begin >= end) {
            still_missing.push_back(m);
            continue;
          }
          found.push_back({p, s, d, {axis, begin, end}});
          if (m.begin < begin) still_missing.push_back({axis, m.begin, begin});
          if (end < m.end) still_missing.push_back({axis, end, m.end});
        }
        missing = std::move(still_missing);
      }
      for (const CanonicalBlock& m : missing) {
        TANDEM_CHECK(m.length() == 0, "reshard {} -> {}: no source rank holds {} [{}, {})", source_size,
                     destination_size, want.name, m.begin, m.end);
      }
      std::sort(found.begin(), found.end(),
                [](const SliceTransfer& a, const SliceTransfer& b) { return a.block.begin < b.block.begin; });
      plan.slices.insert(plan.slices.end(), found.begin(), found.end());
    }
  }
  return plan;
}

void copy_from_canonical(const ParameterShard& shard, const float* canonical, float* local) {
  ParameterShard whole = shard;
  whole.dim = -1;
  whole.local_shape = whole.canonical_shape;
  copy_block(whole, canonical, shard, local, shard_block(shard, split_axis(shard, whole)));
}

ModelWeights shard_model_weights(const ModelConfig& config, const ModelWeights& canonical,
                                 const TensorParallelSpec& spec) {
  std::vector<WeightTensor> local;
  for (const ParameterShard& shard : tensor_parallel_layout(config, spec)) {
    WeightTensor t{shard.name, shard.local_shape, {}};
    t.data.assign(static_cast<size_t>(t.numel()), 0.0f);
    copy_from_canonical(shard, canonical.get(shard.name).data.data(), t.data.data());
    local.push_back(std::move(t));
  }
  return ModelWeights(std::move(local));
}

}  // namespace tandem
