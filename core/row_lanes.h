// GCC vector types for the row kernels built once per instruction set and picked at load
// time (rollout/sampler_rows.cpp, learner/head_rows.cpp). Each such file is compiled with
// -ffp-contract=off: GCC lowers these types to AVX-512, AVX2 or SSE registers per copy, and
// without fused multiply-adds every copy does the same IEEE operations in the same order.
#pragma once

#include <cstdint>

// On a function: compile it for AVX-512, AVX2 and the build's baseline; the loader picks one.
#define TANDEM_ROW_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

namespace tandem::row_lanes {

typedef double Doubles8 __attribute__((vector_size(64)));
typedef int64_t Int64s8 __attribute__((vector_size(64)));
typedef float Floats8 __attribute__((vector_size(32)));
typedef float Floats16 __attribute__((vector_size(64)));
typedef int32_t Int32s16 __attribute__((vector_size(64)));
typedef uint32_t Uint32s16 __attribute__((vector_size(64)));
typedef uint16_t Uint16s16 __attribute__((vector_size(32)));

// The 8 lanes' sum in one fixed order: pairs, then pairs of pairs.
inline __attribute__((always_inline)) double sum_lanes(Doubles8 s) {
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

}  // namespace tandem::row_lanes
