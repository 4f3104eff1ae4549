// Weight sync between tensor-parallel layouts (weight_sync/reshard.h) against the
// whole-tensor path it replaces, over shm in this process, on a llama-shaped model of random
// weights (default 87M parameters: hidden 768, 6 layers, 12 heads / 4 KV heads,
// intermediate 2048, vocabulary 32000). One JSON line per (learner T, engine T):
//   {"bench":"reshard_sync","learner_tp":2,"engine_tp":1,
//    "reshard":{"seconds":..,"bytes_sent":..,"bytes_per_engine_rank":[..],"gathered_bytes":0},
//    "whole":{"seconds":..,"bytes_sent":..,"bytes_per_engine_rank":[..],"gathered_bytes":..},
//    "bytes_ratio":..,"seconds_ratio":..}
// reshard: every learner shard packs and publishes its slices for each engine rank; each
//   engine rank receives its slices from every learner shard, checks the canonical
//   checksums and assembles its shard.
// whole: the learner shards are gathered into the canonical model (gathered_bytes: what the
//   tensor-parallel all-gather moves between learner ranks, (T-1)/T of the model per rank),
//   rank 0 publishes it whole, and each engine rank receives the whole model and cuts its
//   shard (shard_model_weights), as the non-shm transports do.
// `seconds` is the median of --reps syncs after a first one (segments created, plans made).
// Ratios are whole / reshard: above 1, resharding moves fewer bytes or is faster.
#include "actor/model_weights.h"
#include "actor/tensor_parallel_slices.h"
#include "core/error.h"
#include "weight_sync/reshard.h"
#include "weight_sync/shm.h"
#include "weight_sync/transport.h"

#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

using namespace tandem;
using Clock = std::chrono::steady_clock;

namespace {

ModelConfig bench_model() {
  ModelConfig c;
  c.model_type = "llama";
  c.vocab_size = 32000;
  c.hidden_size = 768;
  c.intermediate_size = 2048;
  c.num_hidden_layers = 6;
  c.num_attention_heads = 12;
  c.num_key_value_heads = 4;
  c.head_dim = 64;
  c.max_position_embeddings = 2048;
  return c;
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string segment_base() { return "/tandem-bench-reshard-" + std::to_string(::getpid()); }

WeightSyncOptions shm_options(const std::string& address) {
  WeightSyncOptions o;
  o.method = "shm";
  o.address = address;
  return o;
}

struct PathResult {
  double seconds = 0;
  int64_t bytes_sent = 0;
  std::vector<int64_t> per_engine_rank;
  int64_t gathered_bytes = 0;
};

// Kept senders and receivers per segment, as the learner and rollout roles keep theirs.
struct Endpoints {
  std::map<std::string, std::unique_ptr<WeightSender>> senders;
  std::map<std::string, std::unique_ptr<WeightReceiver>> receivers;
  WeightSender& sender(const std::string& address) {
    auto& s = senders[address];
    if (!s) s = make_weight_sender(shm_options(address));
    return *s;
  }
  WeightReceiver& receiver(const std::string& address) {
    auto& r = receivers[address];
    if (!r) r = make_weight_receiver(shm_options(address));
    return *r;
  }
  ~Endpoints() {
    for (const auto& entry : senders) remove_weights_shm(entry.first);
  }
};

PathResult reshard_once(const ReshardPlan& plan, const std::vector<ModelWeights>& sources, Endpoints& ends,
                        int64_t version) {
  PathResult r;
  r.per_engine_rank.assign(static_cast<size_t>(plan.destination_size), 0);
  const auto start = Clock::now();
  for (int s = 0; s < plan.source_size; ++s) {
    for (int d = 0; d < plan.destination_size; ++d) {
      const ReshardStream stream = pack_reshard_stream(
          plan, s, d, [&](const ParameterShard& p) { return sources[s].get(p.name).data.data(); });
      if (stream.tensors.empty()) continue;
      r.bytes_sent += ends.sender(reshard_segment_name(segment_base(), s, d)).publish(version, stream.tensors).bytes;
      r.per_engine_rank[d] += stream.slice_bytes;
    }
  }
  for (int d = 0; d < plan.destination_size; ++d) {
    const ModelWeights shard = receive_reshard(plan, d, version, [&](int s, const std::vector<ExpectedTensor>& want,
                                                                      const WeightSink& sink) {
      return ends.receiver(reshard_segment_name(segment_base(), s, d)).receive(want, sink);
    });
    TANDEM_CHECK(!shard.tensors().empty(), "reshard bench: an empty shard");
  }
  r.seconds = seconds_since(start);
  return r;
}

PathResult whole_once(const ModelConfig& c, const ReshardPlan& plan, const std::vector<ModelWeights>& sources,
                      Endpoints& ends, int64_t version) {
  PathResult r;
  const auto start = Clock::now();
  // The gather: each canonical tensor from every source's block (what all-gather assembles).
  const std::vector<ParameterShard> whole = tensor_parallel_layout(c, {1, 0});
  std::vector<WeightTensor> canonical;
  for (size_t p = 0; p < whole.size(); ++p) {
    WeightTensor t{whole[p].name, whole[p].canonical_shape, {}};
    t.data.resize(static_cast<size_t>(t.numel()));
    for (int s = 0; s < plan.source_size; ++s) {
      const ParameterShard& held = plan.source_layouts[s][p];
      const int axis = split_axis(held, whole[p]);
      copy_block(held, sources[s].get(held.name).data.data(), whole[p], t.data.data(), shard_block(held, axis));
    }
    canonical.push_back(std::move(t));
  }
  const int64_t model_bytes = parameter_count(c) * 4;
  r.gathered_bytes = plan.source_size > 1 ? model_bytes * (plan.source_size - 1) : 0;  // each rank receives (T-1)/T, T ranks
  std::vector<OutgoingTensor> outgoing;
  std::vector<ExpectedTensor> expected;
  for (const WeightTensor& t : canonical) {
    outgoing.push_back({t.name, t.shape, t.data.data()});
    expected.push_back({t.name, t.shape});
  }
  r.bytes_sent = ends.sender(segment_base() + ".whole").publish(version, outgoing).bytes;
  for (int d = 0; d < plan.destination_size; ++d) {
    std::vector<WeightTensor> received;
    ends.receiver(segment_base() + ".whole").receive(expected, [&](const ExpectedTensor& t, const void* data) {
      const float* values = static_cast<const float*>(data);
      received.push_back({t.name, t.shape, std::vector<float>(values, values + tensor_numel(t.shape))});
    });
    r.per_engine_rank.push_back(model_bytes);
    const ModelWeights shard = shard_model_weights(c, ModelWeights(std::move(received)), {plan.destination_size, d});
    TANDEM_CHECK(!shard.tensors().empty(), "reshard bench: an empty shard");
  }
  r.seconds = seconds_since(start);
  return r;
}

nlohmann::json as_json(const PathResult& r) {
  return {{"seconds", r.seconds},
          {"bytes_sent", r.bytes_sent},
          {"bytes_per_engine_rank", r.per_engine_rank},
          {"gathered_bytes", r.gathered_bytes}};
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: reshard_sync [--reps N]\n");
      return 2;
    }
  }
  try {
    const ModelConfig c = bench_model();
    const ModelWeights canonical = random_model_weights(c, 1, 0.02);
    for (const auto& [from, to] : std::vector<std::pair<int, int>>{{2, 1}, {1, 2}, {2, 2}, {4, 2}, {2, 4}}) {
      const ReshardPlan plan = plan_reshard(c, from, to);
      std::vector<ModelWeights> sources;
      for (int s = 0; s < from; ++s) sources.push_back(shard_model_weights(c, canonical, {from, s}));
      Endpoints ends;
      PathResult reshard = reshard_once(plan, sources, ends, 0), whole = whole_once(c, plan, sources, ends, 0);
      std::vector<double> reshard_times, whole_times;
      for (int r = 1; r <= reps; ++r) {
        reshard = reshard_once(plan, sources, ends, r);
        whole = whole_once(c, plan, sources, ends, r);
        reshard_times.push_back(reshard.seconds);
        whole_times.push_back(whole.seconds);
      }
      reshard.seconds = median(reshard_times);
      whole.seconds = median(whole_times);
      int64_t reshard_received = 0, whole_received = 0;
      for (int64_t b : reshard.per_engine_rank) reshard_received += b;
      for (int64_t b : whole.per_engine_rank) whole_received += b;
      const nlohmann::json line = {{"bench", "reshard_sync"},
                                   {"learner_tp", from},
                                   {"engine_tp", to},
                                   {"parameters", parameter_count(c)},
                                   {"reshard", as_json(reshard)},
                                   {"whole", as_json(whole)},
                                   {"received_bytes_ratio", static_cast<double>(whole_received) / reshard_received},
                                   {"seconds_ratio", whole.seconds / reshard.seconds}};
      std::printf("%s\n", line.dump().c_str());
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "reshard_sync: %s\n", e.what());
    return 1;
  }
  return 0;
}
