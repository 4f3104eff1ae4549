#include "weight_sync/reshard.h"

#include "core/error.h"
#include "weight_sync/shm.h"

#include <cstring>
#include <map>
#include <memory>
#include <mutex>

namespace tandem {

ReshardStream pack_reshard_stream(const ReshardPlan& plan, int source, int destination, const LocalTensor& local) {
  ReshardStream stream;
  const std::vector<SliceTransfer> slices = plan.between(source, destination);
  if (slices.empty()) return stream;
  stream.storage.reserve(slices.size());
  for (const SliceTransfer& s : slices) {
    const ParameterShard& held = plan.source_layouts[source][s.parameter];
    const float* data = local(held);
    TANDEM_CHECK(data != nullptr, "weight sync: source rank {} has no tensor {}", source, held.name);
    const ParameterShard packed = block_view(held, s.block);
    std::vector<float>& out = stream.storage.emplace_back(static_cast<size_t>(block_numel(held, s.block)));
    copy_block(held, data, packed, out.data(), s.block);
    // From the shard itself, not from `out`: a packing that misplaces values shows.
    stream.checksums.push_back(canonical_checksum(held, data, s.block));
    stream.tensors.push_back({plan.slice_name(s), packed.local_shape, out.data(), DType::f32});
    stream.slice_bytes += static_cast<int64_t>(out.size() * sizeof(float));
  }
  stream.tensors.push_back(
      {kChecksumTensor, {static_cast<int64_t>(slices.size())}, stream.checksums.data(), DType::i64});
  return stream;
}

std::vector<ExpectedTensor> expected_reshard_stream(const ReshardPlan& plan, int source, int destination) {
  std::vector<ExpectedTensor> expected;
  const std::vector<SliceTransfer> slices = plan.between(source, destination);
  if (slices.empty()) return expected;
  for (const SliceTransfer& s : slices) {
    expected.push_back(
        {plan.slice_name(s), block_shape(plan.destination_layouts[destination][s.parameter], s.block), DType::f32});
  }
  expected.push_back({kChecksumTensor, {static_cast<int64_t>(slices.size())}, DType::i64});
  return expected;
}

ModelWeights receive_reshard(const ReshardPlan& plan, int destination, int64_t version, const ReceiveStream& receive) {
  const std::vector<ParameterShard>& layout = plan.destination_layouts[destination];
  std::vector<WeightTensor> shard;
  for (const ParameterShard& p : layout) {
    WeightTensor t{p.name, p.local_shape, {}};
    t.data.assign(static_cast<size_t>(t.numel()), 0.0f);
    shard.push_back(std::move(t));
  }
  struct Received {
    SliceTransfer slice;
    int source;
    uint64_t checksum;  // the source's
    std::string name;
  };
  std::vector<Received> received;
  for (int source = 0; source < plan.source_size; ++source) {
    const std::vector<SliceTransfer> slices = plan.between(source, destination);
    if (slices.empty()) continue;
    const std::vector<ExpectedTensor> expected = expected_reshard_stream(plan, source, destination);
    std::map<std::string, size_t> slice_of;
    for (size_t i = 0; i < slices.size(); ++i) slice_of[expected[i].name] = i;
    std::vector<uint64_t> claimed;
    std::vector<bool> arrived(slices.size(), false);
    const int64_t got = receive(source, expected, [&](const ExpectedTensor& t, const void* data) {
      if (t.name == kChecksumTensor) {
        claimed.resize(slices.size());
        std::memcpy(claimed.data(), data, slices.size() * sizeof(uint64_t));
        return;
      }
      const size_t i = slice_of.at(t.name);  // the receiver checked names against `expected`
      const SliceTransfer& s = slices[i];
      const ParameterShard& mine = layout[s.parameter];
      copy_block(block_view(mine, s.block), static_cast<const float*>(data), mine, shard[s.parameter].data.data(),
                 s.block);
      arrived[i] = true;
    });
    if (version < 0) version = got;  // the first stream's; the others must agree
    if (got != version) {
      throw Error(fmt::format("weight sync: source rank {} sent weight version {} (first tensor {}), this destination "
                              "rank {} expected version {}: a stale or early publish",
                              source, got, expected.front().name, destination, version));
    }
    TANDEM_CHECK(claimed.size() == slices.size(), "weight sync: source rank {} sent no {}", source, kChecksumTensor);
    for (size_t i = 0; i < slices.size(); ++i) {
      TANDEM_CHECK(arrived[i], "weight sync: {} never arrived from source rank {}", expected[i].name, source);
      received.push_back({slices[i], source, claimed[i], expected[i].name});
    }
  }
  // Once everything is in place: a later slice written over an earlier one shows too.
  for (const Received& r : received) {
    const uint64_t here = canonical_checksum(layout[r.slice.parameter], shard[r.slice.parameter].data.data(), r.slice.block);
    if (here != r.checksum) {
      throw Error(fmt::format("weight sync: {} from source rank {} to destination rank {} does not hold what the "
                              "source holds there (canonical checksum {:016x}, the source's {:016x}): a slice "
                              "misplaced, swapped or corrupted on the way",
                              r.name, r.source, destination, here, r.checksum));
    }
  }
  return ModelWeights(std::move(shard));
}

std::string reshard_segment_name(const std::string& base, int source, int destination) {
  return fmt::format("{}.s{}.d{}", base, source, destination);
}

bool is_reshard_pair_of(const std::string& address, const std::string& base) {
  const std::string prefix = base + ".s";
  return address.compare(0, prefix.size(), prefix) == 0;
}

void remove_reshard_segments(const std::string& base, int sources, int destinations) {
  for (int s = 0; s < sources; ++s) {
    for (int d = 0; d < destinations; ++d) remove_weights_shm(reshard_segment_name(base, s, d));
  }
}

const ReshardPlan& cached_reshard_plan(const ModelConfig& config, int sources, int destinations) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<ReshardPlan>> plans;
  // The layout depends on these sizes only (model_config.h's fields that shape weights).
  const std::string key = fmt::format("{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}", sources, destinations, config.vocab_size,
                                      config.hidden_size, config.intermediate_size, config.num_hidden_layers,
                                      config.num_attention_heads, config.num_key_value_heads, config.head_dim,
                                      config.attention_bias, config.qk_norm) +
                          fmt::format("|{}|{}", config.tie_word_embeddings, config.o_proj_bias());
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<ReshardPlan>& plan = plans[key];
  if (!plan) plan = std::make_unique<ReshardPlan>(plan_reshard(config, sources, destinations));
  return *plan;
}

}  // namespace tandem
