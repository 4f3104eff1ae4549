#include "actor/tensor_parallel_layout.h"

#include "actor/model_weights.h"

#include "core/error.h"

#include <algorithm>

namespace tandem {

namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

void check_tensor_parallel(const ModelConfig& c, int size, const std::string& where) {
  if (size < 1) throw Error(fmt::format("{}: {} (at least 1)", where, size));
  if (size == 1) return;
  if (c.num_labels > 0) {
    throw Error(fmt::format("{}: {} splits a language model; this model is a sequence classifier", where, size));
  }
  if (c.num_attention_heads % size != 0) {
    throw Error(fmt::format("{}: {} does not divide the model's {} attention heads", where, size,
                            c.num_attention_heads));
  }
  const int64_t kv = c.num_key_value_heads;
  if (kv % size != 0 && size % kv != 0) {
    throw Error(fmt::format("{}: {} neither divides the model's {} key/value heads nor is a multiple of them (then "
                            "each is replicated over {} / {} ranks)",
                            where, size, kv, size, kv));
  }
  if (c.intermediate_size % size != 0) {
    throw Error(fmt::format("{}: {} does not divide the model's intermediate_size {}", where, size,
                            c.intermediate_size));
  }
  const int64_t rows = ceil_div(c.vocab_size, size);
  if (rows * (size - 1) >= c.sampled_vocab()) {
    throw Error(fmt::format("{}: {} leaves rank {} no vocabulary ids of the {} sampled ones ({} rows per rank)", where,
                            size, size - 1, c.sampled_vocab(), rows));
  }
}

LocalSizes local_sizes(const ModelConfig& c, const TensorParallelSpec& spec) {
  const int64_t t = spec.size;
  LocalSizes s;
  s.heads = c.num_attention_heads / t;
  s.kv_heads = c.num_key_value_heads % t == 0 ? c.num_key_value_heads / t : 1;
  s.intermediate = c.intermediate_size / t;
  s.vocab_rows = ceil_div(c.vocab_size, t);
  s.vocab_begin = spec.rank * s.vocab_rows;
  const int64_t real_rows = std::clamp<int64_t>(c.vocab_size - s.vocab_begin, 0, s.vocab_rows);
  s.head_rows = std::clamp<int64_t>(c.sampled_vocab() - s.vocab_begin, 0, real_rows);
  return s;
}

std::vector<ParameterShard> tensor_parallel_layout(const ModelConfig& c, const TensorParallelSpec& spec) {
  TANDEM_CHECK(spec.rank >= 0 && spec.rank < spec.size, "tensor-parallel rank {} outside size {}", spec.rank,
               spec.size);
  const LocalSizes local = local_sizes(c, spec);
  const bool split = spec.size > 1;
  const bool kv_replicated = split && c.num_key_value_heads % spec.size != 0;
  // The first KV head this rank holds.
  const int64_t kv_first = kv_replicated ? spec.rank / (spec.size / c.num_key_value_heads) : spec.rank * local.kv_heads;
  std::vector<ParameterShard> layout;
  for (const WeightSpec& w : expected_weights(c)) {
    ParameterShard s;
    s.name = w.name;
    s.canonical_shape = w.shape;
    s.local_shape = w.shape;
    auto rows = [&](int64_t begin, int64_t length, int64_t local_rows) {
      s.dim = 0;
      s.begin = begin;
      s.length = length;
      s.local_shape[0] = local_rows;
    };
    auto columns = [&](int64_t begin, int64_t length) {
      s.dim = 1;
      s.begin = begin;
      s.length = length;
      s.local_shape[1] = length;
    };
    const std::string& n = w.name;
    if (!split) {
      // replicated over one rank: the whole tensor
    } else if (n == "model.embed_tokens.weight" || n == "lm_head.weight") {
      rows(local.vocab_begin, std::clamp<int64_t>(c.vocab_size - local.vocab_begin, 0, local.vocab_rows),
           local.vocab_rows);
    } else if (ends_with(n, "q_proj.weight") || ends_with(n, "q_proj.bias")) {
      rows(spec.rank * local.heads * c.head_dim, local.heads * c.head_dim, local.heads * c.head_dim);
    } else if (ends_with(n, "k_proj.weight") || ends_with(n, "k_proj.bias") || ends_with(n, "v_proj.weight") ||
               ends_with(n, "v_proj.bias")) {
      rows(kv_first * c.head_dim, local.kv_heads * c.head_dim, local.kv_heads * c.head_dim);
      s.partial_gradient = kv_replicated;
    } else if (ends_with(n, "o_proj.weight")) {
      columns(spec.rank * local.heads * c.head_dim, local.heads * c.head_dim);
    } else if (ends_with(n, "gate_proj.weight") || ends_with(n, "up_proj.weight")) {
      rows(spec.rank * local.intermediate, local.intermediate, local.intermediate);
    } else if (ends_with(n, "down_proj.weight")) {
      columns(spec.rank * local.intermediate, local.intermediate);
    } else if (ends_with(n, "q_norm.weight") || ends_with(n, "k_norm.weight")) {
      s.partial_gradient = true;  // each rank norms its own heads with the shared weight
    } else {
      // norms and o_proj's bias: replicated; under SP each rank applies them to its own positions
      s.partial_gradient = spec.sequence_parallel;
    }
    if (s.dim < 0) s.length = s.canonical_shape.empty() ? 0 : s.canonical_shape[0];
    layout.push_back(std::move(s));
  }
  return layout;
}

}  // namespace tandem
