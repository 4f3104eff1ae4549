// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011;
// the Random123 constants), callable from host and device code alike, so the CPU
// references draw exactly the numbers the sampling kernel draws.
//
// Counter-based: the uniform for a sampled token is a pure function of (seed, position),
// so no RNG state is carried between steps and a sequence gets the same draw alone, in a
// batch, or recomputed after preemption (rollout/sampler.h's contract).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TANDEM_HOST_DEVICE __host__ __device__
#else
#define TANDEM_HOST_DEVICE
#endif

namespace tandem::kernels {

struct PhiloxBlock {
  uint32_t v[4];
};

TANDEM_HOST_DEVICE inline PhiloxBlock philox4x32_10(PhiloxBlock counter, uint32_t key0, uint32_t key1) {
  constexpr uint32_t kMultiplier0 = 0xD2511F53u, kMultiplier1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t* c = counter.v;
  for (int round = 0; round < 10; ++round) {
    const uint64_t product0 = static_cast<uint64_t>(kMultiplier0) * c[0];
    const uint64_t product1 = static_cast<uint64_t>(kMultiplier1) * c[2];
    const uint32_t hi0 = static_cast<uint32_t>(product0 >> 32), lo0 = static_cast<uint32_t>(product0);
    const uint32_t hi1 = static_cast<uint32_t>(product1 >> 32), lo1 = static_cast<uint32_t>(product1);
    const uint32_t next[4] = {hi1 ^ c[1] ^ key0, lo1, hi0 ^ c[3] ^ key1, lo0};
    for (int i = 0; i < 4; ++i) c[i] = next[i];
    key0 += kWeyl0;
    key1 += kWeyl1;
  }
  return counter;
}

// Uniform in [0, 1) with 53 random bits: key = seed, counter = (position, 0).
TANDEM_HOST_DEVICE inline double philox_uniform(uint64_t seed, uint64_t position) {
  const PhiloxBlock block = philox4x32_10(
      PhiloxBlock{{static_cast<uint32_t>(position), static_cast<uint32_t>(position >> 32), 0u, 0u}},
      static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  const uint64_t high27 = block.v[0] >> 5, low26 = block.v[1] >> 6;
  return static_cast<double>((high27 << 26) | low26) * (1.0 / 9007199254740992.0);  // / 2^53
}

}  // namespace tandem::kernels
