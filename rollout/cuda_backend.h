// The rollout engine's CUDA backend (EngineOptions::device "cuda"; CUDA builds only).
//
// What lives on the GPU, in EngineOptions::dtype (bf16, or fp32 for conformance checks):
// the weights, uploaded once and replaced in place by update_weights (q|k|v and gate|up
// concatenated at upload so each is one GEMM; tied embeddings share one buffer, as in
// CpuModel), the activations of one step (sized for max_batch_tokens), and the paged KV
// cache with rollout/kv_cache.h's block plan: the scheduler's block tables are copied to
// the device each step. The KV cache takes gpu_memory_fraction of the memory still free
// once weights and workspace are allocated (capped at what max_running sequences of
// max_position_embeddings tokens can use, and at max_kv_blocks when set).
//
// One step: embedding -> per layer: (fused add +) rms_norm, QKV GEMM (+ bias), per-head
// q/k rms_norm (Qwen3), rope, kv_cache_append, attention (paged_decode_attention for the
// sequences with one new token, paged_prefill_attention for the others), o-proj GEMM
// (+ bias), fused add + rms_norm, gate|up GEMM, silu_mul, down GEMM -> final norm of the
// logit rows only -> lm_head GEMM in fp32 -> logits copied to the host. GEMMs are
// cuBLAS with fp32 accumulation (CUBLAS_COMPUTE_32F; bf16 in and out for bf16).
//
// Sampling stays on the host with rollout/sampler.h, exactly as for the CPU backend, so
// token choice and log-probs follow the CPU semantics given the logits (the GPU sampler,
// kernels/sampling.h, is not wired in yet).
//
// Not yet: CUDA graphs for decode steps. Every launch already runs over buffers sized in
// advance (no allocation inside a step), so capturing decode steps for fixed padded
// batch sizes is the next step; the launchers' host-side shape arguments (the decode
// partition count depends on the longest context) must then be fixed at capture time.
//
// Errors from CUDA and cuBLAS throw tandem::Error naming the call and the step part.
// Not thread-safe (one engine thread), like the engine.
#pragma once

#include "rollout/model_backend.h"

#include <memory>

namespace tandem {

// Throws Error when dtype is not bf16|fp32, the model needs something the kernels do not
// support (head_dim), the device cannot be used, or memory runs out. make_model_backend
// probes the device first.
std::unique_ptr<ModelBackend> make_cuda_backend(const ModelConfig& config, ModelWeights weights,
                                                const EngineOptions& options);

}  // namespace tandem
