// The instruction-set builds of gemm_nt's tiles (rollout/cpu_gemm.h), and which one this
// CPU runs. Each variant is the same source (rollout/cpu_gemm_variant.cpp) compiled with
// its own -march; gemm_nt picks the widest the CPU supports once per process, so the
// binary runs on any x86-64 CPU whatever machine built it (meson -Dcpu_arch=portable
// builds the rest of the CPU code for x86-64-v2: README.md, For contributors).
//
// Results differ between variants (their accumulators have different widths), never
// between calls of one variant: batch invariance is a property of each.
#pragma once

#include <cstdint>
#include <vector>

namespace tandem {
class ThreadPool;
}

namespace tandem::cpu {

struct GemmProblem {
  const float* x;     // [rows, in], row-major
  int64_t rows;
  int64_t in;
  const float* w;           // [out, in], row-major; null when w_bf16 is set
  const uint16_t* w_bf16;   // [out, in] bfloat16 bits, or null
  const float* bias;        // [out], or null
  int64_t out;
  float* y;           // [rows, out], row-major
  // x rounded to bfloat16 ([rows, in]), or null: gemm_nt_with sets it for bfloat16
  // weights when the variant multiplies bfloat16 pairs (GemmVariant::round_rows).
  const uint16_t* x_bf16 = nullptr;
};

struct GemmVariant {
  const char* isa;    // "avx512bf16", "avx512f", "avx2+fma" or "generic"
  int lanes;          // floats per accumulator
  int tile_rows;      // rows that share each loaded weight vector
  int tile_columns;   // outputs per panel (threads split the outputs in whole panels)
  // Outputs [begin, end) (panel-aligned begin) of every row, block_rows rows at a time.
  void (*run_columns)(const GemmProblem& p, int64_t block_rows, int64_t begin, int64_t end);
  // Null, or how this variant rounds rows to bfloat16 (out[i] = x[i], nearest even) before
  // multiplying them with bfloat16 weights: set, gemm_nt_bf16 multiplies bfloat16 by
  // bfloat16 instead of widening the weights (avx512bf16).
  void (*round_rows)(const float* x, int64_t n, uint16_t* out);
};

// The variants, each compiled for its instruction set (call only those the CPU supports).
const GemmVariant& gemm_variant_avx512bf16();  // x86-64-v4 and AVX512_BF16
const GemmVariant& gemm_variant_avx512();   // x86-64-v4: AVX-512 F, BW, CD, DQ, VL
const GemmVariant& gemm_variant_avx2();     // x86-64-v3: AVX2, FMA
const GemmVariant& gemm_variant_generic();  // x86-64: SSE2

// The variants this CPU runs, widest first; the first is what gemm_nt uses.
std::vector<const GemmVariant*> gemm_variants_supported();

// gemm_nt (w set) or gemm_nt_bf16 (w_bf16 set) with a given variant (tests run each one
// the CPU supports). p.y is written.
void gemm_nt_with(const GemmVariant& variant, ThreadPool& pool, const GemmProblem& p);

}  // namespace tandem::cpu
