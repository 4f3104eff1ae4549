// Weight sync between tensor-parallel layouts (actor/tensor_parallel_slices.h,
// weight_sync/reshard.h): the plan's geometry, canonical checksums that do not depend on
// the layout, and real transfers over the shm transport (one segment per source and
// destination pair) and the collective one (a Gloo group per pair, on loopback) that must
// equal loading the destination's shards directly, bit for bit, moving exactly the
// destination's values. Then the faults: a slice dropped from a stream, slices swapped, a
// corrupted bucket, a stale version.
#include "actor/model_weights.h"
#include "actor/tensor_parallel_slices.h"
#include "core/error.h"
#include "weight_sync/reshard.h"
#include "weight_sync/shm.h"
#include "weight_sync/transport.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <thread>

using namespace tandem;

namespace {

// Splits over 1, 2 and 4 ranks: GQA (2 KV heads, replicated at 4), q/k norms, biases, an
// untied head, and a vocabulary of 101 ids (padded to 102 and 104).
ModelConfig split_model() {
  ModelConfig c;
  c.model_type = "qwen3";
  c.vocab_size = 101;
  c.hidden_size = 32;
  c.intermediate_size = 96;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.attention_bias = true;
  c.qk_norm = true;
  c.max_position_embeddings = 64;
  return c;
}

uint64_t seed() {
  static const uint64_t s = [] {
    const uint64_t v = std::random_device()();
    MESSAGE("seed " << v);
    return v;
  }();
  return s;
}

// Each rank's local weights of `canonical` under a T-way split.
std::vector<ModelWeights> shards_of(const ModelConfig& c, const ModelWeights& canonical, int size) {
  std::vector<ModelWeights> out;
  for (int r = 0; r < size; ++r) out.push_back(shard_model_weights(c, canonical, {size, r}));
  return out;
}

LocalTensor local_of(const ModelWeights& shard) {
  return [&shard](const ParameterShard& p) { return shard.get(p.name).data.data(); };
}

void check_equal(const ModelWeights& got, const ModelWeights& want) {
  REQUIRE(got.tensors().size() == want.tensors().size());
  for (const WeightTensor& w : want.tensors()) {
    INFO(w.name);
    const WeightTensor& g = got.get(w.name);
    CHECK(g.shape == w.shape);
    CHECK(std::memcmp(g.data.data(), w.data.data(), w.data.size() * sizeof(float)) == 0);
  }
}

// Every source's stream for `destination` over its own shm segment, received in turn.
struct ShmTransfer {
  std::string prefix = "/tandem-reshard-test-" + std::to_string(::getpid()) + "-";
  std::map<std::pair<int, int>, std::unique_ptr<WeightSender>> senders;

  ~ShmTransfer() {  // a mailbox outlives its sender: the segments go with the test
    for (const auto& entry : senders) remove_weights_shm(options(entry.first.first, entry.first.second).address);
  }

  WeightSyncOptions options(int source, int destination) const {
    WeightSyncOptions o;
    o.method = "shm";
    o.address = prefix + std::to_string(source) + "-" + std::to_string(destination);
    o.bucket_bytes = 1024;  // many buckets: tensors span them
    o.timeout_s = 10;
    return o;
  }
  void publish(int source, int destination, int64_t version, const std::vector<OutgoingTensor>& tensors,
               const BucketTamper& tamper = {}) {
    WeightSyncOptions o = options(source, destination);
    o.tamper_bucket_for_test = tamper;
    auto& sender = senders[{source, destination}];
    sender = make_weight_sender(o);
    sender->publish(version, tensors);
  }
  ReceiveStream receiver(int destination) const {
    return [this, destination](int source, const std::vector<ExpectedTensor>& expected, const WeightSink& sink) {
      return make_weight_receiver(options(source, destination))->receive(expected, sink);
    };
  }
};

// Publishes every (source, destination) stream of `plan` from `sources` as `version`.
int64_t publish_all(ShmTransfer& shm, const ReshardPlan& plan, const std::vector<ModelWeights>& sources,
                    int64_t version) {
  int64_t slice_bytes = 0;
  for (int s = 0; s < plan.source_size; ++s) {
    for (int d = 0; d < plan.destination_size; ++d) {
      ReshardStream stream = pack_reshard_stream(plan, s, d, local_of(sources[s]));
      if (stream.tensors.empty()) continue;
      shm.publish(s, d, version, stream.tensors);
      slice_bytes += stream.slice_bytes;
    }
  }
  return slice_bytes;
}

// The Error a reshard receive throws ("" when it does not).
std::string error_of(const ReshardPlan& plan, int64_t version, const ShmTransfer& shm) {
  try {
    receive_reshard(plan, 0, version, shm.receiver(0));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("a reshard plan covers every destination value once, and moving its slices is a direct shard") {
  const ModelConfig c = split_model();
  const ModelWeights canonical = random_model_weights(c, seed(), 0.5, true);
  for (const auto& [from, to] : std::vector<std::pair<int, int>>{{1, 2}, {2, 1}, {2, 4}, {4, 2}, {1, 4}, {4, 1}, {2, 2}}) {
    INFO("tensor_parallel " << from << " -> " << to);
    const ReshardPlan plan = plan_reshard(c, from, to);
    const std::vector<ModelWeights> sources = shards_of(c, canonical, from);
    const std::vector<ModelWeights> direct = shards_of(c, canonical, to);
    for (int d = 0; d < to; ++d) {
      // Coverage: each canonical index of the destination's block exactly once.
      int64_t shard_values = 0;
      for (size_t parameter = 0; parameter < plan.destination_layouts[d].size(); ++parameter) {
        const ParameterShard& p = plan.destination_layouts[d][parameter];
        const int axis = split_axis(p, plan.source_layouts[0][parameter]);
        const CanonicalBlock block = shard_block(p, axis);
        std::vector<int> hits(static_cast<size_t>(block.length()), 0);
        for (const SliceTransfer& s : plan.slices) {
          if (s.destination != d || s.parameter != parameter) continue;
          CHECK(s.block.axis == axis);
          for (int64_t i = s.block.begin; i < s.block.end; ++i) ++hits[static_cast<size_t>(i - block.begin)];
        }
        for (int h : hits) REQUIRE(h == 1);
        shard_values += block_numel(p, block);
      }
      CHECK(plan.values_to(d) == shard_values);
      // The slices copied in place make exactly the direct shard (padding rows zero).
      std::vector<WeightTensor> assembled;
      for (const ParameterShard& p : plan.destination_layouts[d]) {
        assembled.push_back({p.name, p.local_shape, std::vector<float>(static_cast<size_t>(tensor_numel(p.local_shape)), 0.0f)});
      }
      for (const SliceTransfer& s : plan.slices) {
        if (s.destination != d) continue;
        const ParameterShard& held = plan.source_layouts[s.source][s.parameter];
        copy_block(held, sources[s.source].get(held.name).data.data(), plan.destination_layouts[d][s.parameter],
                   assembled[s.parameter].data.data(), s.block);
      }
      check_equal(ModelWeights(std::move(assembled)), direct[d]);
    }
  }
}

TEST_CASE("canonical checksums do not depend on the layout") {
  const ModelConfig c = split_model();
  const ModelWeights canonical = random_model_weights(c, seed() + 1, 0.5, true);
  const std::vector<ParameterShard> whole = tensor_parallel_layout(c, {1, 0});
  for (int size : {2, 4}) {
    INFO("tensor_parallel " << size);
    // Sum each tensor's checksum over the blocks a plan from the split layout assigns to
    // one whole destination: every canonical value exactly once, from whichever rank.
    const ReshardPlan plan = plan_reshard(c, size, 1);
    const std::vector<ModelWeights> sources = shards_of(c, canonical, size);
    std::vector<uint64_t> split_sums(whole.size(), 0);
    for (const SliceTransfer& s : plan.slices) {
      const ParameterShard& held = plan.source_layouts[s.source][s.parameter];
      split_sums[s.parameter] += canonical_checksum(held, sources[s.source].get(held.name).data.data(), s.block);
    }
    for (size_t p = 0; p < whole.size(); ++p) {
      INFO(whole[p].name);
      const int axis = split_axis(whole[p], plan.source_layouts[0][p]);
      CHECK(split_sums[p] == canonical_checksum(whole[p], canonical.get(whole[p].name).data.data(),
                                                shard_block(whole[p], axis)));
    }
  }
  // A value changed anywhere changes its tensor's checksum; the same bits elsewhere too.
  const ParameterShard& q = whole[3];
  const std::vector<float>& values = canonical.get(q.name).data;
  std::vector<float> moved = values;
  std::swap(moved[0], moved[1]);
  const CanonicalBlock all = shard_block(q, 0);
  CHECK(values[0] != values[1]);
  CHECK(canonical_checksum(q, moved.data(), all) != canonical_checksum(q, values.data(), all));
}

TEST_CASE("learner tensor_parallel 2 -> engine 1 and 1 -> 2 over shm: bitwise a direct load, the destination's bytes") {
  const ModelConfig c = split_model();
  const ModelWeights canonical = random_model_weights(c, seed() + 2, 0.5, true);
  for (const auto& [from, to] : std::vector<std::pair<int, int>>{{2, 1}, {1, 2}, {4, 2}}) {
    INFO("tensor_parallel " << from << " -> " << to);
    const ReshardPlan plan = plan_reshard(c, from, to);
    ShmTransfer shm;
    const int64_t slice_bytes = publish_all(shm, plan, shards_of(c, canonical, from), 7);
    int64_t destination_bytes = 0;
    const std::vector<ModelWeights> direct = shards_of(c, canonical, to);
    for (int d = 0; d < to; ++d) {
      check_equal(receive_reshard(plan, d, 7, shm.receiver(d)), direct[d]);
      destination_bytes += plan.values_to(d) * static_cast<int64_t>(sizeof(float));
    }
    // Bytes moved: the destinations' shards, padding excluded; nothing twice.
    CHECK(slice_bytes == destination_bytes);
  }
}

TEST_CASE("learner tensor_parallel 2 -> two engines of 2 and of 1 over collective: a Gloo group per pair, kept across versions") {
  // As in a run: each learner shard (a thread here) publishes its pairs' streams in
  // destination order, each rollout worker (a thread) receives every engine rank's streams
  // in that order; the groups made for the first version carry the second.
  const ModelConfig c = split_model();
  for (const int to : {2, 1}) {
    INFO("tensor_parallel 2 -> " << to);
    const ReshardPlan plan = plan_reshard(c, 2, to);
    char pattern[] = "/tmp/tandem-reshard-collective-XXXXXX";
    REQUIRE(::mkdtemp(pattern) != nullptr);
    const std::string base = std::string(pattern) + "/group";
    constexpr int kReceivers = 2;
    auto options = [&](int source, int destination, int rank) {
      WeightSyncOptions o;
      o.method = "collective";
      o.address = reshard_segment_name(base, source, destination);
      o.rank = rank;
      o.world_size = kReceivers + 1;
      o.bucket_bytes = 1024;
      o.timeout_s = 30;
      return o;
    };
    std::map<std::pair<int, int>, std::unique_ptr<WeightSender>> senders;
    std::vector<std::map<std::pair<int, int>, std::unique_ptr<WeightReceiver>>> receivers(kReceivers);
    for (const int64_t version : {3, 4}) {
      const ModelWeights canonical = random_model_weights(c, seed() + 10 + version, 0.5, true);
      const std::vector<ModelWeights> sources = shards_of(c, canonical, 2);
      std::vector<std::string> errors(2 + kReceivers);
      std::vector<int64_t> sent_bytes(2, 0);
      std::vector<std::vector<ModelWeights>> got(kReceivers);
      std::vector<std::thread> threads;
      for (int s = 0; s < 2; ++s) {
        threads.emplace_back([&, s] {
          try {
            for (int d = 0; d < to; ++d) {
              ReshardStream stream = pack_reshard_stream(plan, s, d, local_of(sources[s]));
              if (stream.tensors.empty()) continue;
              auto& sender = senders[{s, d}];
              if (!sender) sender = make_weight_sender(options(s, d, 0));
              sender->publish(version, stream.tensors);
              sent_bytes[s] += stream.slice_bytes;
            }
          } catch (const std::exception& e) {
            errors[s] = e.what();
          }
        });
      }
      for (int w = 0; w < kReceivers; ++w) {
        threads.emplace_back([&, w] {
          try {
            for (int d = 0; d < to; ++d) {
              got[w].push_back(receive_reshard(plan, d, version, [&](int source, const std::vector<ExpectedTensor>& want,
                                                                     const WeightSink& sink) {
                auto& receiver = receivers[w][{source, d}];
                if (!receiver) receiver = make_weight_receiver(options(source, d, w + 1));
                return receiver->receive(want, sink);
              }));
            }
          } catch (const std::exception& e) {
            errors[2 + w] = e.what();
          }
        });
      }
      for (std::thread& t : threads) t.join();
      for (const std::string& e : errors) CHECK(e == "");
      const std::vector<ModelWeights> direct = shards_of(c, canonical, to);
      int64_t destination_bytes = 0;
      for (int d = 0; d < to; ++d) destination_bytes += plan.values_to(d) * static_cast<int64_t>(sizeof(float));
      CHECK(sent_bytes[0] + sent_bytes[1] == destination_bytes);
      for (int w = 0; w < kReceivers; ++w) {
        INFO("receiver " << w + 1 << ", version " << version);
        REQUIRE(got[w].size() == static_cast<size_t>(to));
        for (int d = 0; d < to; ++d) check_equal(got[w][d], direct[d]);
      }
    }
    senders.clear();
    receivers.clear();
    std::filesystem::remove_all(pattern);
  }
}

TEST_CASE("reshard faults fail naming the tensor: a dropped slice, swapped slices, a corrupted bucket, a stale version") {
  const ModelConfig c = split_model();
  const ModelWeights canonical = random_model_weights(c, seed() + 3, 0.5, true);
  const ReshardPlan plan = plan_reshard(c, 2, 1);
  const std::vector<ModelWeights> sources = shards_of(c, canonical, 2);

  SUBCASE("a slice dropped from a stream") {
    ShmTransfer shm;
    publish_all(shm, plan, sources, 5);
    ReshardStream stream = pack_reshard_stream(plan, 1, 0, local_of(sources[1]));
    const std::string dropped = stream.tensors[2].name;
    stream.tensors.erase(stream.tensors.begin() + 2);
    shm.publish(1, 0, 5, stream.tensors);
    const std::string error = error_of(plan, 5, shm);
    INFO(error);
    CHECK(has(error, dropped));
  }
  SUBCASE("two slices of one shape swapped in the stream") {
    ShmTransfer shm;
    publish_all(shm, plan, sources, 5);
    ReshardStream stream = pack_reshard_stream(plan, 0, 0, local_of(sources[0]));
    // The two layers' q_proj rows: the same shape, so the stream's own checks pass.
    size_t a = 0, b = 0;
    for (size_t i = 0; i < stream.tensors.size(); ++i) {
      if (stream.tensors[i].name.rfind("model.layers.0.self_attn.q_proj.weight", 0) == 0) a = i;
      if (stream.tensors[i].name.rfind("model.layers.1.self_attn.q_proj.weight", 0) == 0) b = i;
    }
    REQUIRE(a != b);
    std::swap(stream.tensors[a].data, stream.tensors[b].data);
    shm.publish(0, 0, 5, stream.tensors);
    const std::string error = error_of(plan, 5, shm);
    INFO(error);
    CHECK(has(error, "model.layers.0.self_attn.q_proj.weight[rows"));
    CHECK(has(error, "canonical checksum"));
  }
  SUBCASE("a bucket corrupted on the way") {
    ShmTransfer shm;
    publish_all(shm, plan, sources, 5);
    const ReshardStream stream = pack_reshard_stream(plan, 1, 0, local_of(sources[1]));
    shm.publish(1, 0, 5, stream.tensors, [](size_t bucket, uint8_t* data, size_t) {
      if (bucket == 3) data[17] ^= 0x40;
    });
    const std::string error = error_of(plan, 5, shm);
    INFO(error);
    CHECK(has(error, "bucket 3"));
    CHECK(has(error, "model.embed_tokens.weight[rows"));  // the tensor the bucket holds
  }
  SUBCASE("a source still on the last version") {
    ShmTransfer shm;
    publish_all(shm, plan, sources, 5);
    const ReshardStream stream = pack_reshard_stream(plan, 1, 0, local_of(sources[1]));
    shm.publish(1, 0, 4, stream.tensors);
    const std::string error = error_of(plan, 5, shm);
    INFO(error);
    CHECK(has(error, "source rank 1 sent weight version 4"));
    CHECK(has(error, stream.tensors.front().name));
  }
}
