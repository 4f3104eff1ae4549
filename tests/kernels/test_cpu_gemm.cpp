// The CPU backend's matrix product (rollout/cpu_gemm.h): against a float64 reference on
// odd shapes (rows not a multiple of the tile, in not a multiple of the vector width, out
// not a multiple of the panel), and its batch invariance: every row's outputs from a
// many-row call are bit-identical to those of the row alone, to those of any sub-batch
// holding it, and to those of the same call on another number of threads. Each case runs
// every instruction-set build of the tiles this CPU supports (rollout/cpu_gemm_variants.h),
// so a machine with AVX-512 checks the AVX2 and generic builds as well, each on float32
// and on bfloat16 weights (gemm_nt_bf16); where the build rounds the rows to bfloat16
// (avx512bf16), the reference multiplies the rounded rows.
#include "rollout/cpu_gemm.h"
#include "rollout/cpu_gemm_variants.h"
#include "rollout/thread_pool.h"
#include "tests/support/kernel_checks.h"
#include "core/half.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace tandem;
using namespace tandem::testing;

namespace {

// Normal draws, never all zeros.
std::vector<float> random_floats(std::mt19937_64& rng, size_t n) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> out(n);
  for (float& v : out) v = normal(rng);
  return out;
}

struct Shape {
  int64_t rows, in, out;
};

// One build of the tiles, on float32 or bfloat16 weights.
struct Kernel {
  const cpu::GemmVariant* variant;
  bool bf16;
  // Whether it rounds the rows to bfloat16 as well (avx512bf16 on bfloat16 weights).
  bool rounds_rows() const { return bf16 && variant->round_rows; }
};

// What round_rows makes of finite float32 values outside the subnormal range: bfloat16,
// nearest even (core/half.h's rounding, written independently of the kernels).
std::vector<float> rounded_to_bf16(std::vector<float> x) {
  for (float& v : x) v = bf16_to_float(float_to_bf16(v));
  return x;
}

std::vector<Kernel> kernels_supported() {
  std::vector<Kernel> out;
  for (const cpu::GemmVariant* v : cpu::gemm_variants_supported()) {
    out.push_back({v, false});
    out.push_back({v, true});
  }
  return out;
}

// bfloat16 kernels get weights bfloat16 holds exactly, so the float64 reference sees what they multiply.
std::vector<float> weights_for(const Kernel& kernel, std::vector<float> w) {
  if (kernel.bf16) {
    for (float& v : w) v = bf16_to_float(float_to_bf16(v));
  }
  return w;
}

std::vector<float> gemm(const Kernel& kernel, ThreadPool& pool, const std::vector<float>& x, int64_t row_begin,
                        int64_t row_end, int64_t in, const std::vector<float>& w, const float* bias, int64_t out) {
  std::vector<float> y((row_end - row_begin) * out, NAN);
  std::vector<uint16_t> bits;
  if (kernel.bf16) {
    for (float v : w) bits.push_back(float_to_bf16(v));
  }
  const cpu::GemmProblem p{x.data() + row_begin * in, row_end - row_begin, in, kernel.bf16 ? nullptr : w.data(),
                           kernel.bf16 ? bits.data() : nullptr, bias, out, y.data()};
  cpu::gemm_nt_with(*kernel.variant, pool, p);
  return y;
}

std::string name_of(const Kernel& k) { return std::string(k.variant->isa) + (k.bf16 ? " bf16 weights" : " fp32 weights"); }

bool same_bits(const float* a, const float* b, int64_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

}  // namespace

TEST_CASE("gemm_nt runs the widest build of its tiles this CPU supports") {
  const std::vector<const cpu::GemmVariant*> variants = cpu::gemm_variants_supported();
  REQUIRE(!variants.empty());
  CHECK(std::string(variants.back()->isa) == "generic");  // every x86-64 CPU runs it
  CHECK(std::string(cpu::gemm_nt_isa()) == variants.front()->isa);
  CHECK(cpu::gemm_nt_lanes() == variants.front()->lanes);
  std::string names;
  for (const cpu::GemmVariant* v : variants) names += std::string(names.empty() ? "" : ", ") + v->isa;
  MESSAGE("gemm_nt: " << std::string(cpu::gemm_nt_isa()) << ", " << cpu::gemm_nt_lanes() << " lanes; this CPU runs " << names);
  // gemm_nt itself is the first variant, bit for bit.
  auto rng = kernel_test_rng(40);
  ThreadPool pool(2);
  const std::vector<float> x = random_floats(rng, 9 * 70), w = random_floats(rng, 31 * 70);
  std::vector<float> direct(9 * 31, NAN);
  cpu::gemm_nt(pool, x.data(), 9, 70, w.data(), nullptr, 31, direct.data());
  CHECK(same_bits(direct.data(), gemm({variants.front(), false}, pool, x, 0, 9, 70, w, nullptr, 31).data(), 9 * 31));
  const std::vector<float> exact = weights_for({variants.front(), true}, w);
  std::vector<uint16_t> bits;
  for (float v : exact) bits.push_back(float_to_bf16(v));
  CHECK(cpu::gemm_nt_bf16_rounds_rows() == (variants.front()->round_rows != nullptr));
  std::vector<float> from_f32(9 * 31, NAN), from_bf16(9 * 31, NAN), from_rounded_rows(9 * 31, NAN);
  cpu::gemm_nt(pool, x.data(), 9, 70, exact.data(), nullptr, 31, from_f32.data());
  cpu::gemm_nt_bf16(pool, x.data(), 9, 70, bits.data(), nullptr, 31, from_bf16.data());
  if (!cpu::gemm_nt_bf16_rounds_rows()) {
    // gemm_nt_bf16 on bfloat16 weights is gemm_nt on float32 weights of the same values, bit for bit.
    CHECK(same_bits(from_f32.data(), from_bf16.data(), 9 * 31));
  } else {
    // It rounds the rows: the same rows rounded beforehand give the same bits (rounding
    // twice is rounding once), and the unrounded float32 product differs.
    const std::vector<float> rounded_x = rounded_to_bf16(x);
    cpu::gemm_nt_bf16(pool, rounded_x.data(), 9, 70, bits.data(), nullptr, 31, from_rounded_rows.data());
    CHECK(same_bits(from_rounded_rows.data(), from_bf16.data(), 9 * 31));
    CHECK(!same_bits(from_f32.data(), from_bf16.data(), 9 * 31));
  }
}

TEST_CASE("round_rows rounds to the nearest bfloat16, ties to even, and flushes subnormals") {
  bool any = false;
  for (const cpu::GemmVariant* v : cpu::gemm_variants_supported()) {
    if (!v->round_rows) continue;
    any = true;
    CAPTURE(std::string(v->isa));
    auto rng = kernel_test_rng(43);
    std::uniform_int_distribution<uint32_t> any_bits;
    std::vector<float> x;
    // Random bit patterns of normal floats, exact ties (low half 0x8000, both parities of
    // the kept bit), values that round up into the next binade and to infinity; 37 of them
    // past the last full vector.
    for (int i = 0; i < 1000; ++i) {
      uint32_t b = any_bits(rng);
      const uint32_t exponent = (b >> 23) & 0xFFu;
      if (exponent == 0 || exponent == 0xFFu) b ^= 0x40000000u;  // keep it normal
      if (i % 5 == 1) b = (b & 0xFFFF0000u) | 0x8000u;
      float f;
      std::memcpy(&f, &b, sizeof f);
      x.push_back(f);
    }
    x.push_back(3.4e38f);
    x.push_back(-1.0f + 0x1p-24f);
    x.push_back(0x1.ffffep0f);
    std::vector<uint16_t> got(x.size(), 0xFFFF);
    v->round_rows(x.data(), static_cast<int64_t>(x.size()), got.data());
    int64_t bad = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      if (got[i] != float_to_bf16(x[i]) && bad++ == 0) {
        FAIL_CHECK("x[" << i << "] = " << x[i] << ": got bits " << got[i] << ", want " << float_to_bf16(x[i]));
      }
    }
    CHECK(bad == 0);
    // Subnormals become zeros of their sign; a short call writes nothing past its end.
    const std::vector<float> tiny = {0x1p-130f, -0x1p-140f, 0x1p-126f, 5.0f};
    std::vector<uint16_t> small(5, 0xABCD);
    v->round_rows(tiny.data(), 4, small.data());
    CHECK(small[0] == 0x0000);
    CHECK(small[1] == 0x8000);
    CHECK(small[2] == float_to_bf16(0x1p-126f));
    CHECK(small[3] == float_to_bf16(5.0f));
    CHECK(small[4] == 0xABCD);
  }
  if (!any) MESSAGE("no build of the tiles this CPU runs rounds rows (no AVX512_BF16): nothing to check");
}

namespace {

// One variant against the float64 reference.
void check_against_reference(const Kernel& kernel) {
  CAPTURE(name_of(kernel));
  auto rng = kernel_test_rng(41);
  std::uniform_int_distribution<int64_t> pick_rows(1, 37);
  ThreadPool pool(2);
  for (int64_t in : {1, 3, 15, 17, 33, 100, 257, 1031}) {
    for (int64_t out : {1, 5, 7, 13, 67, 203}) {
      const int64_t rows = pick_rows(rng);
      const std::vector<float> x = random_floats(rng, rows * in);
      // What the kernel multiplies: the rows as they are, or rounded to bfloat16.
      const std::vector<float> x_used = kernel.rounds_rows() ? rounded_to_bf16(x) : x;
      const std::vector<float> w = weights_for(kernel, random_floats(rng, out * in));
      const std::vector<float> bias = random_floats(rng, out);
      for (const bool with_bias : {false, true}) {
        const std::vector<float> y = gemm(kernel, pool, x, 0, rows, in, w, with_bias ? bias.data() : nullptr, out);
        int64_t bad = 0;
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t o = 0; o < out; ++o) {
            double want = with_bias ? bias[o] : 0.0, magnitude = with_bias ? std::abs(bias[o]) : 0.0;
            for (int64_t k = 0; k < in; ++k) {
              const double term = static_cast<double>(x_used[r * in + k]) * w[o * in + k];
              want += term;
              magnitude += std::abs(term);
            }
            // Higham's worst-case bound for a float sum of in + 1 terms, gamma_n * sum |term|
            // with n = in + 8: no order of the additions can exceed it (vdpbf16ps's products
            // are exact, and it rounds at most twice per pair). Not atol + rtol * |want|:
            // a dot product's error scales with its terms, not its (possibly cancelled) result.
            const double limit = static_cast<double>(in + 8) * std::ldexp(1.0, -24) * magnitude;
            const double got = y[r * out + o];
            if (!(std::isfinite(got) && std::abs(got - want) <= limit)) {
              if (bad++ == 0) {
                FAIL_CHECK("rows " << rows << " in " << in << " out " << out << " bias " << with_bias << ": y[" << r
                                   << ", " << o << "] = " << got << ", want " << want << " within " << limit);
              }
            }
          }
        }
        CHECK_MESSAGE(bad == 0, bad << " bad outputs for rows " << rows << " in " << in << " out " << out);
      }
    }
  }
}

}  // namespace

TEST_CASE("gemm_nt agrees with a float64 reference on odd shapes") {
  for (const Kernel& kernel : kernels_supported()) check_against_reference(kernel);
}

namespace {

// One variant's outputs alone, in batches and sub-batches, on 1-3 threads.
void check_batch_invariance(const Kernel& kernel) {
  auto rng = kernel_test_rng(42);
  // Small ones run on one thread; the large ones split over the pool (at least 2^19
  // multiply-adds), so a row alone (inline) and in a batch (split) take both paths.
  const std::vector<Shape> shapes = {
      {1, 1, 1},     {2, 5, 3},      {3, 16, 6},     {4, 17, 7},      {5, 31, 12},     {7, 33, 13},
      {8, 64, 24},   {13, 100, 67},  {16, 255, 25},  {32, 129, 130},  {33, 257, 61},   {37, 515, 300},
      {9, 1000, 1100}, {32, 777, 131}, {37, 96, 2000}, {24, 2049, 37},
  };
  std::uniform_int_distribution<int> coin(0, 1);
  for (const Shape& s : shapes) {
    CAPTURE(name_of(kernel));
    const std::vector<float> x = random_floats(rng, s.rows * s.in);
    const std::vector<float> w = weights_for(kernel, random_floats(rng, s.out * s.in));
    const std::vector<float> bias_values = random_floats(rng, s.out);
    const float* bias = coin(rng) ? bias_values.data() : nullptr;
    ThreadPool solo(1);
    const std::vector<float> reference = gemm(kernel, solo, x, 0, s.rows, s.in, w, bias, s.out);
    for (float v : reference) REQUIRE_MESSAGE(std::isfinite(v), "non-finite output for rows " << s.rows);
    for (int threads : {1, 2, 3}) {
      CAPTURE(s.rows);
      CAPTURE(s.in);
      CAPTURE(s.out);
      CAPTURE(threads);
      ThreadPool pool(threads);
      const std::vector<float> all = gemm(kernel, pool, x, 0, s.rows, s.in, w, bias, s.out);
      CHECK(same_bits(all.data(), reference.data(), s.rows * s.out));
      int64_t mismatched_rows = 0;
      for (int64_t r = 0; r < s.rows; ++r) {
        const std::vector<float> alone = gemm(kernel, pool, x, r, r + 1, s.in, w, bias, s.out);
        if (!same_bits(alone.data(), &reference[r * s.out], s.out)) ++mismatched_rows;
      }
      CHECK_MESSAGE(mismatched_rows == 0, mismatched_rows << " rows differ alone and in the batch");
      // A sub-batch starting mid-tile: each row lands at another place in the tiles.
      const int64_t begin = s.rows / 3, end = std::max(begin + 1, s.rows - 1);
      const std::vector<float> middle = gemm(kernel, pool, x, begin, end, s.in, w, bias, s.out);
      CHECK(same_bits(middle.data(), &reference[begin * s.out], (end - begin) * s.out));
    }
  }
}

}  // namespace

TEST_CASE("gemm_nt is batch-invariant: a row's outputs never depend on the other rows or the threads") {
  for (const Kernel& kernel : kernels_supported()) check_batch_invariance(kernel);
}
