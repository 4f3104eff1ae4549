#include "rollout/cpu_gemm.h"

#include "rollout/cpu_gemm_variants.h"
#include "rollout/thread_pool.h"

#include <algorithm>
#include <vector>

namespace tandem::cpu {

namespace {

// Rows per pass over the weights: a block of x up to this many bytes stays in L2 while
// every weight panel streams past it once.
constexpr int64_t kRowBlockBytes = int64_t{1} << 20;
// Below this many multiply-adds one thread is faster than handing out chunks.
constexpr int64_t kParallelMultiplyAdds = int64_t{1} << 19;

// Chosen once, so every call in a process rounds the same way.
const GemmVariant& this_cpu_variant() {
  static const GemmVariant& variant = *gemm_variants_supported().front();
  return variant;
}

}  // namespace

std::vector<const GemmVariant*> gemm_variants_supported() {
  __builtin_cpu_init();
  std::vector<const GemmVariant*> out;
  if (__builtin_cpu_supports("x86-64-v4") && __builtin_cpu_supports("avx512bf16")) {
    out.push_back(&gemm_variant_avx512bf16());
  }
  if (__builtin_cpu_supports("x86-64-v4")) out.push_back(&gemm_variant_avx512());
  if (__builtin_cpu_supports("x86-64-v3")) out.push_back(&gemm_variant_avx2());
  out.push_back(&gemm_variant_generic());
  return out;
}

void gemm_nt_with(const GemmVariant& v, ThreadPool& pool, const GemmProblem& problem) {
  const int64_t rows = problem.rows, in = problem.in, out = problem.out;
  if (rows <= 0 || out <= 0) return;
  GemmProblem p = problem;
  if (p.w_bf16 && v.round_rows && !p.x_bf16) {
    // The rows in bfloat16 once per call, not once per weight panel; each call's own
    // buffer (one per thread: a tensor-parallel rank's calls run on its own thread).
    thread_local std::vector<uint16_t> rounded;
    rounded.resize(static_cast<size_t>(rows * in));
    v.round_rows(p.x, rows * in, rounded.data());
    p.x_bf16 = rounded.data();
  }
  const int64_t tile_rows = v.tile_rows, tile_columns = v.tile_columns;
  const int64_t block_rows = std::max<int64_t>(
      tile_rows, kRowBlockBytes / (std::max<int64_t>(in, 1) * int64_t{sizeof(float)}) / tile_rows * tile_rows);
  // Threads split the outputs in whole panels (several chunks per thread, for balance when
  // a core is busy elsewhere); a chunk's results do not depend on who runs it.
  const int64_t panels = (out + tile_columns - 1) / tile_columns;
  const int64_t threads = rows * in * out >= kParallelMultiplyAdds ? pool.threads() : 1;
  const int64_t chunks = threads == 1 ? 1 : std::min<int64_t>(panels, 4 * threads);
  if (chunks <= 1) {
    v.run_columns(p, block_rows, 0, out);
    return;
  }
  const int64_t chunk_columns = (panels + chunks - 1) / chunks * tile_columns;
  pool.run((out + chunk_columns - 1) / chunk_columns, [&](int64_t chunk) {
    v.run_columns(p, block_rows, chunk * chunk_columns, std::min(out, (chunk + 1) * chunk_columns));
  });
}

void gemm_nt(ThreadPool& pool, const float* x, int64_t rows, int64_t in, const float* w, const float* bias, int64_t out,
             float* y) {
  gemm_nt_with(this_cpu_variant(), pool, GemmProblem{x, rows, in, w, nullptr, bias, out, y});
}

void gemm_nt_bf16(ThreadPool& pool, const float* x, int64_t rows, int64_t in, const uint16_t* w, const float* bias,
                  int64_t out, float* y) {
  gemm_nt_with(this_cpu_variant(), pool, GemmProblem{x, rows, in, nullptr, w, bias, out, y});
}

const char* gemm_nt_isa() { return this_cpu_variant().isa; }

bool gemm_nt_bf16_rounds_rows() { return this_cpu_variant().round_rows != nullptr; }

int gemm_nt_lanes() { return this_cpu_variant().lanes; }

}  // namespace tandem::cpu
