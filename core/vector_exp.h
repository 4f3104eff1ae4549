// e^x on 16 floats at a time, for the elementwise passes of the CPU rollout backend and the
// CPU learner (SwiGLU's sigmoid; the engine's attention softmax). std::exp is a scalar
// library call the compiler cannot vectorise: SwiGLU's calls were ~11% of the engine's time in a small-preset
// decode (perf of bench/rollout_cpu); with this, that decode ran 7-10% faster and the
// Qwen3-0.6B shape's 6-9% at batch 8-32 (bench/RESULTS.md, issue 32 tenth part), and the
// learner's SwiGLU forward, one pass instead of libtorch's sigmoid and a product pass, took
// 0.40 ms instead of 0.68 a layer (small preset, fp32; eleventh part).
//
// Written with GCC's vector types, so the build's cpu_arch picks the instructions: one
// AVX-512 register per Floats16 with -march=native on an AVX-512 CPU, four SSE registers
// with cpu_arch=portable. Every lane computes the same chain, so a value's result never
// depends on which lane or which call it went through (the engine's batch invariance).
//
// Accuracy: e^x = 2^n * e^r with n = round(x / ln 2) and |r| <= ln 2 / 2 (plus a rounding),
// r from x by Cody and Waite's two-part ln 2 so that n * kLn2High is exact; e^r by its
// Taylor series to r^7 (the first dropped term is below 0.1 float ulp on that interval),
// evaluated by Horner's rule: ~8 roundings of at most half an ulp each. Results below the
// smallest normal float are computed too (gradual underflow), x > ~88.72 gives +inf,
// x < ~-103.97 gives 0, and NaN stays NaN. tests/kernels/test_kernel_references.cpp checks
// it against float64 exp.
#pragma once

#include <cstdint>
#include <cstring>

namespace tandem::cpu {

// Internal linkage: each file including this compiles its own copy for its own flags, and
// no call crosses files, so GCC's -Wpsabi note (a 64-byte vector is passed differently
// without AVX-512, as with cpu_arch=portable) concerns no caller; rollout/meson.build and
// actor/meson.build turn it off.
namespace {

typedef float Floats16 __attribute__((vector_size(64)));
typedef int32_t Ints16 __attribute__((vector_size(64)));

// p[0..n) and zeros after, n <= 16; reads nothing past p + n. A constant 16 is one register
// move; a variable n is a memcpy call, so loops go through for_each_block16.
inline Floats16 load_floats16(const float* p, int64_t n = 16) {
  Floats16 v = {};
  std::memcpy(&v, p, static_cast<size_t>(n) * sizeof(float));
  return v;
}

// Writes lanes [0, n) to p[0..n).
inline void store_floats16(float* p, Floats16 v, int64_t n = 16) {
  std::memcpy(p, &v, static_cast<size_t>(n) * sizeof(float));
}

inline Floats16 exp_floats16(Floats16 x) {
  constexpr float kLog2e = 1.44269504088896341f;
  // Adding 1.5 * 2^23 rounds a float of magnitude < 2^22 to an integer (the sum's ulp is
  // 1), and that integer is then the low bits of the sum's representation.
  constexpr float kRoundToInteger = 12582912.0f;
  // ln 2 = kLn2High + kLn2Low; kLn2High has 12 trailing zero bits, so n * kLn2High is exact
  // for |n| < 2^12.
  constexpr float kLn2High = 0.693145751953125f;
  constexpr float kLn2Low = 1.428606820309417232e-6f;
  // Beyond these e^x is 0 or +inf in float; clamping keeps n in [-150, 128], where the
  // two-factor scale below stays normal. (NaN fails both comparisons and stays NaN.)
  const Floats16 lowest = Floats16{} - 104.0f, highest = Floats16{} + 89.0f;
  x = x < lowest ? lowest : x;
  x = x > highest ? highest : x;

  const Floats16 shifted = x * kLog2e + kRoundToInteger;
  const Floats16 n = shifted - kRoundToInteger;
  Ints16 shifted_bits, round_bits;
  const Floats16 round_vector = Floats16{} + kRoundToInteger;
  std::memcpy(&shifted_bits, &shifted, sizeof(shifted));
  std::memcpy(&round_bits, &round_vector, sizeof(round_vector));
  const Ints16 exponent = shifted_bits - round_bits;  // n as an integer

  const Floats16 r = (x - n * kLn2High) - n * kLn2Low;
  Floats16 e = r * (1.0f / 5040) + (1.0f / 720);
  e = e * r + (1.0f / 120);
  e = e * r + (1.0f / 24);
  e = e * r + (1.0f / 6);
  e = e * r + 0.5f;
  e = e * r + 1.0f;
  e = e * r + 1.0f;

  // 2^n as 2^half * 2^(n - half): each factor's exponent stays within a normal float's,
  // and only the last multiplication rounds (to a subnormal where the result is one).
  const Ints16 half = exponent >> 1;
  const Ints16 first_bits = (half + 127) << 23, second_bits = (exponent - half + 127) << 23;
  Floats16 first, second;
  std::memcpy(&first, &first_bits, sizeof(first));
  std::memcpy(&second, &second_bits, sizeof(second));
  return e * first * second;
}

// block(i, n) for the 16-float blocks of [begin, end) and one shorter tail. The main loop's n
// is the constant 16, so the block's loads and stores are register moves once inlined: a
// loop that passed a variable n everywhere (a memcpy call per block) ran 2.6x slower than
// the libtorch passes it replaced.
template <class Block>
inline void for_each_block16(int64_t begin, int64_t end, Block&& block) {
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) block(i, int64_t{16});
  if (i < end) block(i, end - i);
}

}  // namespace

}  // namespace tandem::cpu
