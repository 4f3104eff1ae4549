// The rollout backends under test and the conformance suite's helpers, shared by the
// suite (test_rollout_backends.cpp) and the cases that run in only one of its builds
// (test_rollout_backends_cpu_build.cpp, test_rollout_backends_gpu_build.cpp). With
// TANDEM_ROLLOUT_BACKENDS_GPU the backends are the CUDA ones, else the CPU ones.
#pragma once

#include "core/error.h"
#include "actor/tensor_parallel_layout.h"
#include "core/half.h"
#include "tests/support/backend_prefill.h"
#include "tests/support/forward_tolerance.h"
#include "tests/support/kernel_checks.h"
#include "kernels/device_probe.h"
#include "tests/support/reference_model.h"
#include "rollout/cpu_gemm.h"
#include "rollout/cuda_step_plan.h"
#include "rollout/engine.h"
#include "rollout/kv_cache.h"
#include "rollout/model_backend.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

namespace tandem::testing {


struct BackendUnderTest {
  const char* name;
  std::string device;
  std::string dtype;  // cuda only
  // Where activations are stored narrower than float32: the tolerances against the float64
  // reference and between steps of different shapes follow (tests/support/forward_tolerance.h).
  ActivationStorage storage;
  // Bit-identical results whatever else shares a step: batched, chunked and preempted
  // samples then draw exactly their solo tokens, sampled or greedy. Otherwise greedy
  // tokens must agree up to a near-tie (where both choices have nearly equal log-probs).
  bool batch_invariant;
  int tensor_parallel = 1;  // ranks the model is split over (the CPU backend's rollout.tensor_parallel)
};

// CPU: fp32 with row-wise products (batch-invariant by design, rollout/cpu_ops.h).
inline const BackendUnderTest kCpu{"cpu", "cpu", "", {}, true};
// The same split over 2 ranks (rollout/cpu_model.h): every test model divides by 2 (GQA and
// MHA heads split, MQA's one KV head replicated, the 97-id vocabulary padded to 98). Only
// the order of the row-parallel sums differs from "cpu" (two partial sums of K/2 terms
// added): a float32 sum in another order, inside the same bounds. Still row-wise, so still
// batch-invariant.
inline const BackendUnderTest kCpuSplit{"cpu tensor_parallel 2", "cpu", "", {}, true, 2};
// CPU with bfloat16 weights (rollout.cpu_weights: bf16), on bf16-exact weights. Where
// gemm_nt_bf16 widens them, that is exact and every chain is fp32's, so the fp32 bounds
// hold (the outputs are fp32's bit for bit: "bf16 weights compute what fp32 computes on
// the rounded values"). Where it multiplies bfloat16 pairs (AVX512_BF16), each product's
// input row is rounded to bf16 (relative error <= 2^-9): 4 per layer (the q/k/v input, the
// attention output, the gate/up input, the down input), the LM head's input among the 2
// the bound adds.
inline ActivationStorage cpu_bf16_weights_storage() {
  return cpu::gemm_nt_bf16_rounds_rows() ? ActivationStorage{0x1p-9, 4} : ActivationStorage{};
}
inline const BackendUnderTest kCpuBf16Weights{"cpu bf16 weights", "cpu", "bf16", cpu_bf16_weights_storage(), true};
inline const BackendUnderTest kCpuSplitBf16Weights{"cpu bf16 weights tensor_parallel 2", "cpu", "bf16",
                                                   cpu_bf16_weights_storage(), true, 2};
// CUDA fp32: the same math; cuBLAS picks kernels by problem size, so a token's logits may
// differ in the last bits with the step's shape.
inline const BackendUnderTest kCudaFp32{"cuda fp32", "cuda", "fp32", {}, false};
// CUDA bf16, on weights made bf16-exact (the float64 reference uses the same weights), so
// only activation storage rounds: every stored activation, the residual stream included,
// is rounded to bf16 (relative error <= 2^-9) about 15 times per layer (the bound takes
// 16). An emulation of the pipeline on these models measured logit errors up to 0.08 and
// log-prob errors up to 0.07 (mean 0.008) against float64, inside the derived bounds.
inline const BackendUnderTest kCudaBf16{"cuda bf16", "cuda", "bf16", {0x1p-9, 16}, false};
// Both split over 2 GPUs (rollout/cuda_tensor_parallel.h): NCCL sums the o/down partials,
// so fp32 differs from "cuda fp32" only in the order of two float32 sums. In bf16 each of
// the 2 row-parallel products per layer is rounded twice more (each rank's partial, then
// their sum): 4 roundings per layer on top of the 16.
inline const BackendUnderTest kCudaSplitFp32{"cuda fp32 tensor_parallel 2", "cuda", "fp32", {}, false, 2};
inline const BackendUnderTest kCudaSplitBf16{"cuda bf16 tensor_parallel 2", "cuda", "bf16", {0x1p-9, 20}, false, 2};

// Logits from two forwards of backend `b` (or one and the exact ones, `forwards` 1).
inline double logit_bound(const BackendUnderTest& b, const ModelConfig& c, const ModelWeights& w, int64_t max_tokens,
                   int forwards = 2) {
  return forwards * logit_tolerance(c, w, max_tokens, b.storage);
}

inline double logprob_bound(const BackendUnderTest& b, const ModelConfig& c, const ModelWeights& w, int64_t max_tokens,
                     double temperature, int forwards = 2) {
  return forwards * logprob_tolerance(c, w, max_tokens, temperature, b.storage);
}

// The backends this machine runs: split CUDA engines need a device per rank.
inline const std::vector<BackendUnderTest>& backends_under_test() {
#ifdef TANDEM_ROLLOUT_BACKENDS_GPU
  static const std::vector<BackendUnderTest> here = [] {
    const int devices = probe_cuda().device_count;
    std::vector<BackendUnderTest> backends;
    for (const BackendUnderTest& b : {kCudaFp32, kCudaBf16, kCudaSplitFp32, kCudaSplitBf16}) {
      if (b.tensor_parallel <= devices) backends.push_back(b);
      else std::printf("skipping %s: %d CUDA device(s) here\n", b.name, devices);
    }
    return backends;
  }();
#else
  static const std::vector<BackendUnderTest> here = {kCpu, kCpuSplit, kCpuBf16Weights, kCpuSplitBf16Weights};
#endif
  return here;
}

inline EngineOptions options_for(const BackendUnderTest& b, int64_t block_size = 4) {
  EngineOptions o;
  o.device = b.device;
  o.dtype = b.dtype.empty() ? "bf16" : b.dtype;
  if (b.device == "cpu" && b.dtype == "bf16") o.cpu_weights = "bf16";
  o.kv_cache_bytes = 8 << 20;  // cpu
  o.block_size = block_size;   // small blocks: sequences cross many block boundaries
  o.tensor_parallel = b.tensor_parallel;
  return o;
}

// bf16 backends get weights that bf16 holds exactly: the reference then sees what they see.
inline ModelWeights weights_for(const BackendUnderTest& b, const ModelConfig& config, uint64_t seed, double init_std) {
  ModelWeights w = random_model_weights(config, seed, init_std, true);
  if (b.dtype == "bf16") {
    std::vector<WeightTensor> tensors = w.tensors();
    for (WeightTensor& t : tensors) {
      for (float& x : t.data) x = bf16_to_float(float_to_bf16(x));
    }
    w = ModelWeights(std::move(tensors));
  }
  return w;
}

// Prompt tokens: never the test models' eos id (vocab - 1).
inline std::vector<int32_t> prompt_tokens(std::mt19937_64& rng, int64_t length, int64_t vocab) {
  return random_tokens(rng, length, vocab - 1);
}

inline std::vector<double> to_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

inline std::vector<double> flatten(const Matrix& m) {
  std::vector<double> out;
  for (const std::vector<double>& row : m) out.insert(out.end(), row.begin(), row.end());
  return out;
}

// Blocks [first, first + count) in scattered order.
inline std::vector<int32_t> scattered_blocks(int32_t first, int32_t count) {
  std::vector<int32_t> table;
  for (int32_t i = 0; i < count; ++i) table.push_back(first + (i * 7) % count);  // count is never a multiple of 7
  return table;
}

// Samples of the same requests from two runs: equal tokens (batch-invariant backends), or
// greedy tokens equal up to a near-tie after which the runs may go their own ways.
inline void check_same_samples(const BackendUnderTest& b, const std::vector<GeneratedSample>& got,
                        const std::vector<GeneratedSample>& want, double logprob_agreement, const std::string& how) {
  INFO(b.name << ": " << how);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("request " << got[i].request_id << " sample " << got[i].sample_index);
    CHECK(got[i].request_id == want[i].request_id);
    CHECK(got[i].sample_index == want[i].sample_index);
    if (b.batch_invariant) {
      CHECK(got[i].tokens == want[i].tokens);
      CHECK(got[i].finish_reason == want[i].finish_reason);
    }
    const size_t common = std::min(got[i].tokens.size(), want[i].tokens.size());
    for (size_t t = 0; t < common; ++t) {
      INFO("token " << t);
      CHECK(std::abs(got[i].logprobs[t] - want[i].logprobs[t]) <= logprob_agreement);
      if (got[i].tokens[t] != want[i].tokens[t]) break;  // a near-tie (just checked): the runs part here
    }
  }
}


}  // namespace tandem::testing
