// The CPU backend's matrix product: a register- and cache-blocked kernel whose every
// output element is computed by one fixed sequence of float operations, so the rollout
// engine stays batch-invariant (a token's logits do not depend on what else is in the step).
//
// Why not Eigen's or a BLAS GEMM: their blocking, and with it the rounding of each output,
// changes with the number of rows, so a sequence sampled alone and the same sequence
// sampled in a batch drew different tokens now and then. Why not one matrix-vector
// product per row (what cpu::linear did before): at batch 32 that reads the whole weight
// matrix 32 times per step, and decode stopped scaling with the batch.
#pragma once

#include <cstdint>

namespace tandem {
class ThreadPool;
}

namespace tandem::cpu {

// y[rows, out] = x[rows, in] · w[out, in]^T (+ bias[out]).
//
// The invariant: y[r, o] is the same float, bit for bit, whatever `rows` is, which other
// rows are in the call, where row r falls in the call, and how many threads the pool has.
// Each (r, o) owns one vector accumulator of gemm_nt_lanes() lanes; lane l accumulates
// x[r, k] * w[o, k] for k = l, l + lanes, ... in increasing k (the last partial vector is
// zero-padded), then the lanes are summed in one fixed tree, then the bias is added. The
// kernel computes tiles of several rows by several outputs so that each loaded weight
// vector serves several rows, but the tile shape only decides which accumulators live in
// registers together, never the operations on one of them; the threads split the outputs,
// never k.
void gemm_nt(ThreadPool& pool,
             const float* x,     // [rows, in], row-major
             int64_t rows,
             int64_t in,
             const float* w,     // [out, in], row-major
             const float* bias,  // [out], or null
             int64_t out,
             float* y);          // [rows, out], row-major; must not overlap x, w or bias

// gemm_nt with bfloat16 weights (w: their bits, [out, in] row-major). Half the bytes per
// weight: decode at small batches, bound by reading the weights from memory, runs up to
// twice as fast. Two ways, by CPU (gemm_nt_bf16_rounds_rows()):
//   - widening: each weight is widened to float32 exactly as it is loaded and every
//     output's chain is gemm_nt's, so the result is gemm_nt's on float32 weights holding
//     the same values, bit for bit;
//   - bfloat16 products (CPUs with AVX512_BF16): x is rounded to bfloat16 too (nearest
//     even, subnormals to zero), and lane l of (r, o)'s 16-lane accumulator adds
//     x[r, k] w[o, k] + x[r, k + 1] w[o, k + 1] for k = 2l, 2l + 32, ... (vdpbf16ps; each
//     product exact in float32), then the lanes are summed in gemm_nt's tree. The learner's
//     bf16 precision rounds a product's operands the same way.
// Either way batch-invariant as gemm_nt is: the rounding of a row does not depend on the others.
void gemm_nt_bf16(ThreadPool& pool,
                  const float* x,     // [rows, in], row-major
                  int64_t rows,
                  int64_t in,
                  const uint16_t* w,  // [out, in], row-major bfloat16 bits
                  const float* bias,  // [out], or null
                  int64_t out,
                  float* y);          // [rows, out], row-major

// The instruction set gemm_nt runs ("avx512bf16", "avx512f", "avx2+fma" or "generic": the widest build
// of its tiles this CPU supports, rollout/cpu_gemm_variants.h, chosen once per process so
// every call rounds the same way) and its accumulator width in floats.
const char* gemm_nt_isa();
int gemm_nt_lanes();
// Whether gemm_nt_bf16 rounds x to bfloat16 and multiplies bfloat16 pairs on this CPU.
bool gemm_nt_bf16_rounds_rows();

}  // namespace tandem::cpu
