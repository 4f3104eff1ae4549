// What a large rollout.kv_cache_mb costs at start on the CPU backend: constructing the
// KV cache (rollout/kv_cache.h, calloc'd: pages are mapped zero until written) against
// zero-filling the same bytes as a std::vector does (what the cache did before issue 26),
// in the same run. Then the cost of writing one block, which is where the pages appear.
// Prints JSON lines. `kv_cache_start [MiB]` (default 4096, configs/gsm8k.yaml's budget).
#include "rollout/kv_cache.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace tandem;

namespace {

double seconds_of(const std::chrono::steady_clock::time_point& start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t mib = argc > 1 ? std::atoll(argv[1]) : 4096;
  KvCacheShape shape;  // Qwen2.5-0.5B's: 24 layers, 2 KV heads of 64
  shape.num_layers = 24;
  shape.num_kv_heads = 2;
  shape.head_dim = 64;
  shape.block_size = 16;
  shape.num_blocks = kv_cache_blocks_for_budget(mib << 20, shape);

  auto start = std::chrono::steady_clock::now();
  double construct_s = 0, first_block_s = 0;
  {
    KvCache cache(shape);
    construct_s = seconds_of(start);
    start = std::chrono::steady_clock::now();
    for (int64_t layer = 0; layer < shape.num_layers; ++layer) {
      for (int64_t slot = 0; slot < shape.block_size; ++slot) {
        cache.key(layer, 0, slot)[0] = 1.0f;
        cache.value(layer, 0, slot)[0] = 1.0f;
      }
    }
    first_block_s = seconds_of(start);
  }
  // The baseline: the same floats zero-filled up front, per layer, keys and values.
  const size_t per_layer = static_cast<size_t>(shape.num_blocks * shape.block_size * shape.num_kv_heads * shape.head_dim);
  start = std::chrono::steady_clock::now();
  double baseline_s = 0;
  {
    std::vector<std::vector<float>> keys(static_cast<size_t>(shape.num_layers), std::vector<float>(per_layer));
    std::vector<std::vector<float>> values(static_cast<size_t>(shape.num_layers), std::vector<float>(per_layer));
    baseline_s = seconds_of(start);
    if (keys[0][per_layer / 2] != 0.0f || values[0][0] != 0.0f) return 1;  // keep the fill
  }
  std::printf("%s\n", nlohmann::json{{"bench", "kv_cache_start"},
                                      {"kv_cache_mb", mib},
                                      {"blocks", shape.num_blocks},
                                      {"construct_s", construct_s},
                                      {"first_block_write_s", first_block_s},
                                      {"zero_filled_vector_s", baseline_s},
                                      {"ratio_to_zero_filled", construct_s / baseline_s}}
                          .dump()
                          .c_str());
  return 0;
}
