// One instruction set's build of gemm_nt's tiles (rollout/cpu_gemm_variants.h). Meson
// compiles this file once per variant, each with its own -march and TANDEM_GEMM_VARIANT
// (avx512bf16, avx512, avx2 or generic); rollout/cpu_gemm.cpp picks one at run time from
// the CPU's features. The vector type follows from the variant's -march through the
// macros below.
//
// The avx512bf16 variant is avx512's with one difference: on bfloat16 weights it rounds
// the rows to bfloat16 too (once per call, round_rows) and multiplies pairs of bfloat16
// values with vdpbf16ps, two multiply-adds per lane per instruction into float32 lanes.
//
// Code here is compiled for instructions the CPU may lack, so it keeps to intrinsics and
// functions of its own (an anonymous namespace, nothing inline shared with other files):
// a shared inline function compiled here could be the copy the linker keeps for every
// caller, and run AVX-512 on a CPU without it.
#include "rollout/cpu_gemm_variants.h"

#include <cstdint>
#include <cstring>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

#ifndef TANDEM_GEMM_VARIANT
#error "TANDEM_GEMM_VARIANT names the variant this build of the file is (rollout/meson.build)"
#endif
#define TANDEM_GEMM_PASTE_(a, b) a##b
#define TANDEM_GEMM_PASTE(a, b) TANDEM_GEMM_PASTE_(a, b)

namespace tandem::cpu {

namespace {

// One accumulator's operations, per instruction set: fixed at compile time by this
// variant's -march (rollout/meson.build).
#if defined(__AVX512F__)
#if defined(__AVX512BF16__)
constexpr const char* kIsa = "avx512bf16";
#else
constexpr const char* kIsa = "avx512f";
#endif
// 32 vector registers: 4 x 6 accumulators, 4 row vectors and one weight vector.
constexpr int kTileRows = 4;
constexpr int kTileColumns = 6;
struct Lanes {
  using Vec = __m512;
  static constexpr int kWidth = 16;
  static constexpr bool kPrefetchNextPanel = false;
  static Vec zero() { return _mm512_setzero_ps(); }
  static Vec load(const float* p) { return _mm512_loadu_ps(p); }
  // p[0..n) and zeros, n < kWidth; reads nothing past p + n.
  static Vec load_first(const float* p, int64_t n) {
    return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), p);
  }
  // bfloat16 weights widened to float32 exactly (the upper 16 bits of a float).
  static Vec load(const uint16_t* p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
  }
  static Vec load_first(const uint16_t* p, int64_t n) {
    const __m256i bits = _mm256_maskz_loadu_epi16(static_cast<__mmask16>((1u << n) - 1), p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
  }
  static Vec multiply_add(Vec a, Vec b, Vec acc) { return _mm512_fmadd_ps(a, b, acc); }
  // Lanes 0-7 + 8-15, then 0-3 + 4-7, then 0-1 + 2-3, then 0 + 1.
  static float sum(Vec v) {
    // The zero-masked extracts: GCC 12 warns of an uninitialised operand inside the plain
    // ones (and inside _mm512_castps512_ps256).
    const __m512d d = _mm512_castps_pd(v);
    return sum8(_mm256_add_ps(_mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xF, d, 0)),
                              _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xF, d, 1))));
  }
  static float sum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }
  // sums[i] = sum(v[i]) for 16 accumulators at once: each level adds the same two values
  // of the same accumulator as sum() does (in the same operand order), only several
  // accumulators share a register, so it is ~3x fewer instructions and bit-identical.
  static constexpr int kSumGroup = 16;
  // Two 128-bit quarters of a, then two of b, picked by `order` (as vshuff32x4); the
  // zero-masked form because GCC 12 warns of an uninitialised operand inside the plain one.
  template <int order>
  static Vec quarters(Vec a, Vec b) { return _mm512_maskz_shuffle_f32x4(0xFFFF, a, b, order); }
  static void sum_group(const Vec (&v)[16], float (&sums)[16]) {
    Vec s8[8], s4[4], s2[2];
    // Lanes i + 8 onto i: [v[2a] 0-3 + 8-11, v[2a] 4-7 + 12-15, the same for v[2a + 1]].
    for (int a = 0; a < 8; ++a) {
      s8[a] = _mm512_add_ps(quarters<0x44>(v[2 * a], v[2 * a + 1]),
                            quarters<0xEE>(v[2 * a], v[2 * a + 1]));
    }
    // Lanes i + 4 onto i: quarter j of s4[b] is accumulator 4b + j.
    for (int b = 0; b < 4; ++b) {
      s4[b] = _mm512_add_ps(quarters<0x88>(s8[2 * b], s8[2 * b + 1]),
                            quarters<0xDD>(s8[2 * b], s8[2 * b + 1]));
    }
    // Lanes i + 2 onto i, within each quarter: quarter j of s2[c] holds accumulators
    // 8c + j (lanes 0-1) and 8c + 4 + j (lanes 2-3).
    for (int c = 0; c < 2; ++c) {
      s2[c] = _mm512_add_ps(_mm512_shuffle_ps(s4[2 * c], s4[2 * c + 1], 0x44),
                            _mm512_shuffle_ps(s4[2 * c], s4[2 * c + 1], 0xEE));
    }
    // Lane 1 onto lane 0: lane 4j + p is accumulator 4p + j.
    const Vec s1 = _mm512_add_ps(_mm512_shuffle_ps(s2[0], s2[1], 0x88), _mm512_shuffle_ps(s2[0], s2[1], 0xDD));
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, s1);
    for (int j = 0; j < 4; ++j) {
      for (int p = 0; p < 4; ++p) sums[4 * p + j] = lanes[4 * j + p];
    }
  }
};

#if defined(__AVX512BF16__)
// bfloat16 rows times bfloat16 weights, 32 values of each per vector: vdpbf16ps adds
// x[k + 2l] * w[k + 2l] and x[k + 2l + 1] * w[k + 2l + 1] to lane l (each product exact in
// float32; the instruction flushes subnormals, whatever MXCSR says).
struct PairLanes {
  using Pairs = __m512bh;
  static constexpr int kWidth = 32;
  // A prefetch of the next panel as each weight vector is loaded, in every row tile: with
  // twice the products per instruction the tiles wait on memory, and the hardware
  // prefetcher sees each panel as C short streams. In the panel's last row tile only, it
  // measured +15-20% decode at batch 8-32; in every row tile (the first one is the one
  // that streams the panel from memory, so the next panel's requests overlap it) another
  // +10% at batch 8 (80-92 against 74-78 tokens/s, Qwen3-0.6B shape) and +5-15% at 32
  // (151-185 against 135-158), alternating runs. Batch 1 has one row tile either way. The
  // float32 tiles measured slower with it at batch 32.
  static constexpr bool kPrefetchNextPanel = true;
  static Pairs load(const uint16_t* p) { return reinterpret_cast<Pairs>(_mm512_loadu_si512(p)); }
  // p[0..n) and zeros, n < kWidth; reads nothing past p + n.
  static Pairs load_first(const uint16_t* p, int64_t n) {
    return reinterpret_cast<Pairs>(_mm512_maskz_loadu_epi16(static_cast<__mmask32>((uint32_t{1} << n) - 1), p));
  }
  static Lanes::Vec multiply_add(Pairs x, Pairs w, Lanes::Vec acc) { return _mm512_dpbf16_ps(acc, x, w); }
};

// out[i] = x[i] rounded to bfloat16, to nearest even (vcvtneps2bf16: subnormals to zero).
void round_rows(const float* x, int64_t n, uint16_t* out) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_loadu_ps(x + i))));
  }
  if (i < n) {
    const __mmask16 first = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m256i bits = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(first, x + i)));
    _mm256_mask_storeu_epi16(out + i, first, bits);
  }
}
constexpr void (*kRoundRows)(const float*, int64_t, uint16_t*) = round_rows;
#else
constexpr void (*kRoundRows)(const float*, int64_t, uint16_t*) = nullptr;
#endif
#elif defined(__AVX2__) && defined(__FMA__)
constexpr const char* kIsa = "avx2+fma";
constexpr void (*kRoundRows)(const float*, int64_t, uint16_t*) = nullptr;
// 16 vector registers: 3 x 4 accumulators, 3 row vectors and one weight vector.
constexpr int kTileRows = 3;
constexpr int kTileColumns = 4;
struct Lanes {
  using Vec = __m256;
  static constexpr int kWidth = 8;
  static constexpr bool kPrefetchNextPanel = false;
  static Vec zero() { return _mm256_setzero_ps(); }
  static Vec load(const float* p) { return _mm256_loadu_ps(p); }
  // p[0..n) and zeros, n < kWidth; masked lanes are not read.
  static Vec load_first(const float* p, int64_t n) {
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    return _mm256_maskload_ps(p, mask);
  }
  static Vec load(const uint16_t* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
  }
  static Vec load_first(const uint16_t* p, int64_t n) {
    uint16_t part[kWidth] = {};
    std::memcpy(part, p, static_cast<size_t>(n) * sizeof(uint16_t));
    return load(part);
  }
  static Vec multiply_add(Vec a, Vec b, Vec acc) { return _mm256_fmadd_ps(a, b, acc); }
  // Lanes 0-3 + 4-7, then 0-1 + 2-3, then 0 + 1.
  static float sum(Vec v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }
  static constexpr int kSumGroup = 1;
  static void sum_group(const Vec (&v)[1], float (&sums)[1]) { sums[0] = sum(v[0]); }
};
#else
constexpr const char* kIsa = "generic";
constexpr void (*kRoundRows)(const float*, int64_t, uint16_t*) = nullptr;
// SSE2's 16 registers on x86-64: 2 x 4 accumulators.
constexpr int kTileRows = 2;
constexpr int kTileColumns = 4;
struct Lanes {
  typedef float Vec __attribute__((vector_size(16)));
  static constexpr int kWidth = 4;
  static constexpr bool kPrefetchNextPanel = false;
  static Vec zero() { return Vec{0, 0, 0, 0}; }
  static Vec load(const float* p) {
    Vec v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static Vec load_first(const float* p, int64_t n) {
    Vec v = zero();
    std::memcpy(&v, p, static_cast<size_t>(n) * sizeof(float));
    return v;
  }
  static Vec load(const uint16_t* p) { return load_first(p, kWidth); }
  static Vec load_first(const uint16_t* p, int64_t n) {
    Vec v = zero();
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t bits = static_cast<uint32_t>(p[i]) << 16;
      float f;
      std::memcpy(&f, &bits, sizeof f);
      v[i] = f;
    }
    return v;
  }
  // Whether the compiler fuses this into one FMA depends only on the target and
  // -ffp-contract, both fixed for the build, so it is the same in every tile shape.
  static Vec multiply_add(Vec a, Vec b, Vec acc) { return acc + a * b; }
  static float sum(Vec v) { return (v[0] + v[2]) + (v[1] + v[3]); }
  static constexpr int kSumGroup = 1;
  static void sum_group(const Vec (&v)[1], float (&sums)[1]) { sums[0] = sum(v[0]); }
};
#endif

int64_t smaller(int64_t a, int64_t b) { return a < b ? a : b; }

// dots[r][c] = x_rows[r] · w_rows[c] over `in`, each by the fixed chain gemm_nt documents.
// P: Lanes (float rows; W float, or uint16_t for bfloat16 weights widened exactly, so the
// chain is the same as on float32 weights holding the same values), or PairLanes
// (bfloat16 rows and weights, X = W = uint16_t).
// kPrefetch: also prefetch the next panel (P::kPrefetchNextPanel).
template <int R, int C, class P, bool kPrefetch, class X, class W>
inline void tile_dots(const X* const* x_rows, const W* const* w_rows, int64_t in, float (&dots)[R][C]) {
  using Vec = Lanes::Vec;
  Vec acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[r][c] = Lanes::zero();
  }
  int64_t k = 0;
  for (; k + P::kWidth <= in; k += P::kWidth) {
    decltype(P::load(x_rows[0])) xv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) xv[r] = P::load(x_rows[r] + k);
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const auto wv = P::load(w_rows[c] + k);
      // The same place in the next panel's row c: weight rows are consecutive, so that is
      // C rows on.
      if constexpr (kPrefetch) __builtin_prefetch(w_rows[c] + k + C * in);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][c] = P::multiply_add(xv[r], wv, acc[r][c]);
    }
  }
  if (k < in) {
    const int64_t tail = in - k;
    decltype(P::load(x_rows[0])) xv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) xv[r] = P::load_first(x_rows[r] + k, tail);
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const auto wv = P::load_first(w_rows[c] + k, tail);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][c] = P::multiply_add(xv[r], wv, acc[r][c]);
    }
  }
  // The lane sums, Lanes::kSumGroup accumulators at a time (zeros fill the last group).
  constexpr int kCount = R * C, kGroup = Lanes::kSumGroup;
#pragma GCC unroll 4
  for (int first = 0; first < kCount; first += kGroup) {
    Vec group[kGroup];
    float sums[kGroup];
#pragma GCC unroll 16
    for (int i = 0; i < kGroup; ++i) group[i] = first + i < kCount ? acc[(first + i) / C][(first + i) % C] : Lanes::zero();
    Lanes::sum_group(group, sums);
#pragma GCC unroll 16
    for (int i = 0; i < kGroup; ++i) {
      if (first + i < kCount) dots[(first + i) / C][(first + i) % C] = sums[i];
    }
  }
}

// Rows [row, row + R) of x ([rows, in]: p.x, or its bfloat16 rounding) by the `valid`
// outputs from `first`, whose weight rows are w_rows.
template <int R, class P, class X, class W>
void run_tile(const GemmProblem& p, const X* x, int64_t row, int64_t first, int valid, const W* const* w_rows) {
  const X* x_rows[R];
  for (int r = 0; r < R; ++r) x_rows[r] = x + (row + r) * p.in;
  float dots[R][kTileColumns];
  tile_dots<R, kTileColumns, P, P::kPrefetchNextPanel>(x_rows, w_rows, p.in, dots);
  for (int r = 0; r < R; ++r) {
    float* y_row = p.y + (row + r) * p.out + first;
    for (int c = 0; c < valid; ++c) y_row[c] = p.bias ? dots[r][c] + p.bias[first + c] : dots[r][c];
  }
}

// The last rows % kTileRows rows, in a tile of exactly that many rows.
template <int R, class P, class X, class W>
void run_remainder_tile(const GemmProblem& p, const X* x, int64_t remainder, int64_t row, int64_t first, int valid,
                        const W* const* w_rows) {
  if constexpr (R > 0) {
    if (remainder == R) {
      run_tile<R, P>(p, x, row, first, valid, w_rows);
    } else {
      run_remainder_tile<R - 1, P>(p, x, remainder, row, first, valid, w_rows);
    }
  }
}

// Outputs [begin, end) of rows [row_begin, row_end).
template <class P, class X, class W>
void run_block(const GemmProblem& p, const X* x, const W* w, int64_t row_begin, int64_t row_end, int64_t begin,
               int64_t end) {
  for (int64_t first = begin; first < end; first += kTileColumns) {
    // A partial panel repeats its last weight row and drops those results: each output's
    // chain is the same as in a full panel.
    const int valid = static_cast<int>(smaller(kTileColumns, end - first));
    const W* w_rows[kTileColumns];
    for (int c = 0; c < kTileColumns; ++c) w_rows[c] = w + (first + (c < valid ? c : valid - 1)) * p.in;
    int64_t row = row_begin;
    for (; row + kTileRows <= row_end; row += kTileRows) {
      run_tile<kTileRows, P>(p, x, row, first, valid, w_rows);
    }
    run_remainder_tile<kTileRows - 1, P>(p, x, row_end - row, row, first, valid, w_rows);
  }
}

// Outputs [begin, end) of every row, a block of rows at a time, from whichever operands p has.
void run_columns(const GemmProblem& p, int64_t block_rows, int64_t begin, int64_t end) {
  for (int64_t row = 0; row < p.rows; row += block_rows) {
    const int64_t row_end = smaller(p.rows, row + block_rows);
#if defined(__AVX512BF16__)
    if (p.x_bf16) {
      run_block<PairLanes>(p, p.x_bf16, p.w_bf16, row, row_end, begin, end);
      continue;
    }
#endif
    if (p.w_bf16) run_block<Lanes>(p, p.x, p.w_bf16, row, row_end, begin, end);
    else run_block<Lanes>(p, p.x, p.w, row, row_end, begin, end);
  }
}

}  // namespace

const GemmVariant& TANDEM_GEMM_PASTE(gemm_variant_, TANDEM_GEMM_VARIANT)() {
  static const GemmVariant variant{kIsa, Lanes::kWidth, kTileRows, kTileColumns, run_columns, kRoundRows};
  return variant;
}

}  // namespace tandem::cpu
