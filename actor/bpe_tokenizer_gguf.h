// Tokenizers embedded in GGUF files (llama.cpp's `tokenizer.ggml.*` metadata), read as
// tandem tokenizers that encode as Hugging Face does with the model's own tokenizer.json
// (and so as llama.cpp does; tests/actor/test_tokenizer_vectors.cpp holds both to llama.cpp's
// tokenizer test vectors).
//
// `tokenizer.ggml.model`:
// - gpt2: byte-level BPE from `tokens`, `token_type` and `merges` ("a b", byte-level
//   spelled). `tokenizer.ggml.pre` names the pre-tokenizer: qwen2 (NFC and Qwen2's split
//   regex), llama-bpe / llama3 / llama-v3 (Llama-3's regex, ignore_merges), gpt-2
//   (ByteLevel's own regex); any other is an Error naming it.
// - llama: SentencePiece-style BPE from `tokens`, `scores` and `token_type`, merged as
//   llama.cpp merges: the adjacent pair whose merged piece is a token with the highest
//   score first, the leftmost on equal scores (BpeModel::add_merges_from_scores). With
//   `add_space_prefix` (llama.cpp's default: true) the text gets a leading "▁", as the
//   Llama-2 tokenizer.json's Prepend normaliser gives it; spaces become "▁"; a character
//   with no token becomes its <0xNN> byte tokens.
// Token types: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte. Control
// and unknown tokens are special added tokens, user-defined ones plain added tokens: all
// are matched in the text before anything else, as tandem's Tokenizer contract says (llama.cpp
// matches control tokens only when asked to parse special tokens). Unused tokens (llama.cpp's
// padding) are left out of the vocabulary.
//
// Like BpeTokenizer::encode, encode() never adds BOS/EOS (`add_bos_token` is not read).
// Errors name the file and the key: a missing or mistyped key, another tokenizer model,
// `no_vocab`, an unknown pre-tokenizer.
#pragma once

#include "actor/tokenizer.h"
#include "core/gguf.h"

#include <memory>
#include <string>

namespace tandem {

std::unique_ptr<Tokenizer> tokenizer_from_gguf(const GgufFile& file);

// The same vocabulary as a Hugging Face tokenizer.json (the text of the file), for writing
// beside weights converted from GGUF. gpt2: exactly the tokenizer tokenizer_from_gguf builds.
// llama: merges as transformers' SentencePiece converter orders them (by the merged piece's
// score, then the pieces' ids); where two different pairs that make the same piece compete,
// HF takes that order and llama.cpp the leftmost, so the two may differ there (on the
// Llama vocabulary of llama.cpp's ggml-vocab-llama-spm.gguf they agree on every text
// tests/actor/test_tokenizer_vectors.cpp tries).
std::string tokenizer_json_from_gguf(const GgufFile& file);

}  // namespace tandem
