// llama2.c checkpoints (Karpathy's `.bin` "v0" format), read into the Hugging Face Llama
// layout the rest of tandem uses.
//
// The file: 7 little-endian int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads,
// vocab_size, seq_len), then float32 tensors in this order: token embedding [vocab, dim],
// attention RMS weights [layers, dim], wq [layers, dim, dim], wk and wv [layers, kv_dim,
// dim], wo [layers, dim, dim], FFN RMS weights [layers, dim], w1 and w3 [layers, hidden,
// dim], w2 [layers, dim, hidden], the final RMS weight [dim], two legacy RoPE tables
// [seq_len, head_size / 2] each (skipped), and, when vocab_size is negative, a separate
// classifier [|vocab|, dim] (else the classifier is the embedding).
//
// llama2.c rotates interleaved pairs (x[2i], x[2i+1]); Hugging Face's Llama rotates halves
// (x[i], x[i + head_dim/2]). The same model in HF's layout has each head's q and k rows
// reordered: new row j is old row 2j for j < head_dim/2, old row 2(j - head_dim/2) + 1
// after (what HF's own conversion script does). Everything else maps one to one.
#pragma once

#include "actor/model_config.h"
#include "actor/model_weights.h"

#include <string>

namespace tandem {

struct Llama2cModel {
  ModelConfig config;   // llama, rms_norm_eps 1e-5, rope_theta 10000, bos 1, eos 2 (llama2.c's)
  ModelWeights weights;  // HF names and layout, q/k rows permuted
};

// Errors name the file and what is wrong: a short header, a header field out of range,
// a size that is not the header's.
Llama2cModel read_llama2c(const std::string& path);

// Whether `path` is a file whose name ends in ".bin" (a llama2.c checkpoint, by convention).
bool is_llama2c_path(const std::string& path);

}  // namespace tandem
