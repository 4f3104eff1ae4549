// The CPU backend's building blocks: float32 in and out, split over a ThreadPool when
// the work is large enough to pay for it.
// Each is the CPU counterpart of a kernel family the CUDA backend implements.
#pragma once

#include <cstdint>

namespace tandem {
class ThreadPool;
}

namespace tandem::cpu {

// y[rows, out] = x[rows, in] * w[out, in]^T (+ bias[out]), batch-invariant: a row's
// outputs are bit-identical whatever other rows share the call (rollout/cpu_gemm.h).
// Output features are split across threads, so a single-row product (decode at batch 1)
// uses every core too.
void linear(ThreadPool& pool, const float* x, int64_t rows, int64_t in, const float* w, const float* bias, int64_t out, float* y);

// A weight matrix [out, in] as the engine holds it: float32, or bfloat16 bits as well
// (rollout.cpu_weights: bf16), which linear() then reads instead.
struct LinearWeight {
  const float* f32 = nullptr;
  const uint16_t* bf16 = nullptr;
};
void linear(ThreadPool& pool, const float* x, int64_t rows, int64_t in, const LinearWeight& w, const float* bias,
            int64_t out, float* y);

// y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight, for `rows` rows of `dim` (in place allowed).
void rms_norm(ThreadPool& pool, const float* x, int64_t rows, int64_t dim, const float* weight, double eps, float* y);

// Rotates each head of x[tokens, heads, head_dim] in place by its token's angles
// (Hugging Face's rotate_half layout); cos/sin are [tokens, head_dim / 2].
void rope(ThreadPool& pool, float* x, int64_t tokens, int64_t heads, int64_t head_dim, const float* cos, const float* sin);

// out[r, i] = silu(gate[r, i]) * up[r, i].
void silu_mul(ThreadPool& pool, const float* gate, const float* up, int64_t count, float* out);

// y[i] = e^(x[i] + shift) for i < count (in place allowed), 16 values at a time
// (core/vector_exp.h), each by the same chain wherever it sits.
void exp_shifted(const float* x, int64_t count, float shift, float* y);

}  // namespace tandem::cpu
