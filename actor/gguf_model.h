// GGUF models (llama.cpp's format) to and from our ModelConfig + ModelWeights.
//
// Architectures: llama, qwen2, qwen3 (GGUF `general.architecture`, the same names as our
// model_type). Hyperparameters are `<arch>.embedding_length`, `.block_count`,
// `.feed_forward_length`, `.attention.head_count(_kv)`, `.attention.layer_norm_rms_epsilon`,
// `.rope.freq_base`, `.context_length`, `.attention.key_length`; the vocabulary size is
// token_embd's row count. Tensors: token_embd, output_norm, output (absent: tied),
// blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, attn_q_norm, attn_k_norm, ffn_norm,
// ffn_gate, ffn_up, ffn_down} with .weight / .bias.
//
// RoPE layout: llama.cpp's converter (convert_hf_to_gguf.py, LlamaModel.permute) reorders
// each head's q and k rows (weights and biases) for the `llama` architecture, which
// llama.cpp rotates as interleaved pairs (x[2i], x[2i+1]): GGUF row 2i is HF row i and
// GGUF row 2i+1 is HF row i + head_dim/2. qwen2 and qwen3 rotate halves in both (NEOX),
// so their rows are stored as they are. Llama-3 RoPE scaling travels as llama.cpp's
// `rope_freqs.weight` factors, recognised on reading when they match the usual settings.
#pragma once

#include "actor/model_config.h"
#include "actor/model_weights.h"
#include "core/gguf.h"
#include "core/safetensors.h"

#include <string>

namespace tandem {

struct GgufModel {
  ModelConfig config;   // bos/eos ids from tokenizer.ggml.*; torch_dtype float32
  ModelWeights weights;  // HF names and layout, dequantized to float32
};

// Errors name the file and what is wrong: another architecture, a missing key or tensor,
// a shape that is not the hyperparameters'.
GgufModel read_gguf_model(const GgufFile& file);
GgufModel read_gguf_model(const std::string& path);

// Writes `config` and `weights` as a GGUF file: matrices in `dtype` (F32, F16, BF16 or
// Q8_0; Q8_0 falls back to F16 for rows not a multiple of 32, as llama.cpp's quantizer
// does), norms and biases in F32. The tokenizer of `tokenizer_dir` (its tokenizer.json,
// when there is one) is embedded as llama.cpp reads it (actor/gguf_tokenizer.h); without
// one the file says `tokenizer.ggml.model = no_vocab` and takes token ids only.
void write_gguf_model(const std::string& path, const ModelConfig& config, const ModelWeights& weights,
                      const std::string& tokenizer_dir, GgufTensorType dtype);

// Whether `path` names a regular file ending in ".gguf".
bool is_gguf_path(const std::string& path);

// Writes a Hugging Face model directory for the GGUF file at `gguf_path` into `out_dir`
// (an existing empty directory, or a new one): config.json, model.safetensors in `dtype`,
// and the tokenizer: tokenizer.json (+ tokenizer_config.json) beside the .gguf when there,
// else the embedded one. A file with no vocabulary gives a directory without a tokenizer.
void convert_gguf_to_hf(const std::string& gguf_path, const std::string& out_dir, DType dtype);

}  // namespace tandem
