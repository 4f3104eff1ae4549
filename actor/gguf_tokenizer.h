// Tokenizers inside GGUF files: our tokenizer.json as llama.cpp's `tokenizer.ggml.*`
// metadata, and back.
//
// Writing (byte-level BPE tokenizer.json, the kind BpeTokenizer reads): `tokenizer.ggml.model`
// gpt2 with the token list (ids without a token up to vocab_size become "[PAD<id>]",
// UNUSED, as llama.cpp's converter pads them), token types (NORMAL; added tokens CONTROL
// when special, else USER_DEFINED), merges "a b", bos/eos (eos = the first eos id, eot =
// the second), and `tokenizer.ggml.pre` named after the pre-tokenizer's regex: qwen2
// (Qwen2/Qwen3's), llama-bpe (Llama-3's), gpt-2 (ByteLevel's own regex, or no regex with
// no merges, where every split gives the same ids). The exact tokenizer.json travels
// too, as `tokenizer.huggingface.json`, and tokenizer_config.json's chat template as
// `tokenizer.chat_template`.
//
// A SentencePiece-style tokenizer.json (BPE with byte_fallback, "▁" for spaces) becomes
// `tokenizer.ggml.model` llama: tokens, scores that make llama.cpp merge in the file's
// merge order, token types (BYTE for <0xNN>, UNKNOWN for the unk_token), add_space_prefix.
//
// Reading, in order: `tokenizer.huggingface.json` when present; else the tokenizer.json
// actor/bpe_tokenizer_gguf.h rebuilds from a gpt2 or llama token list; `no_vocab` means
// no tokenizer.
#pragma once

#include "actor/model_config.h"
#include "core/gguf.h"

#include <string>
#include <utility>
#include <vector>

namespace tandem {

// The tokenizer.* entries for the tokenizer in `model_dir` (tokenizer.json and, when
// present, tokenizer_config.json); {tokenizer.ggml.model: no_vocab} when it has none.
// A tokenizer.json of another kind is an Error naming what is not supported.
std::vector<std::pair<std::string, GgufValue>> gguf_tokenizer_metadata(const std::string& model_dir,
                                                                       const ModelConfig& config);

// Writes tokenizer.json and tokenizer_config.json into `out_dir` from the file's embedded
// tokenizer. False (nothing written) when the file has no vocabulary.
bool write_gguf_tokenizer_files(const GgufFile& file, const std::string& out_dir);

}  // namespace tandem
