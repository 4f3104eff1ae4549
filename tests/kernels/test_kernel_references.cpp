// The kernels' float64 references (kernels/reference/) checked on the CPU: against the CPU
// backend's ops (rollout/cpu_ops.h), the KV cache plan (rollout/kv_cache.h) and the
// sampler (rollout/sampler.h), and against naive independent computations (dense
// attention over gathered K/V, per-sequence causal attention). The GPU test compares the
// kernels with these references, so together they tie the kernels to the CPU backend.
#include "actor/model_config.h"
#include "kernels/paged_attention.h"
#include "kernels/philox.h"
#include "kernels/reference/attention_reference.h"
#include "kernels/reference/norm_act_reference.h"
#include "kernels/reference/rope_reference.h"
#include "kernels/reference/sampling_reference.h"
#include "kernels/rope.h"
#include "rollout/cpu_ops.h"
#include "rollout/kv_cache.h"
#include "rollout/sampler.h"
#include "rollout/thread_pool.h"
#include "tests/support/kernel_checks.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>

using namespace tandem;
using namespace tandem::testing;
namespace ref = tandem::kernels::reference;
using tandem::kernels::PagedKvCache;
using tandem::kernels::PagedSequences;

namespace {

// Normal draws, never all zeros.
std::vector<float> random_floats(std::mt19937_64& rng, size_t n, float mean = 0.0f, float stddev = 1.0f) {
  std::normal_distribution<float> normal(mean, stddev);
  std::vector<float> out(n);
  for (float& x : out) x = normal(rng);
  return out;
}

std::vector<double> to_double(const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); }

// float vs float64: a few float roundings.
constexpr Tolerance kFloatOp{1e-6, 1e-5};
// Two float64 computations of the same thing in different orders.
constexpr Tolerance kDouble{1e-12, 1e-10};

}  // namespace

TEST_CASE("rms_norm, fused_add_rms_norm and silu_mul references agree with the CPU backend ops") {
  auto rng = kernel_test_rng(1);
  ThreadPool pool(2);
  for (int64_t dim : {1, 8, 100, 1027}) {
    const int64_t rows = 7;
    const std::vector<float> x = random_floats(rng, rows * dim, 0.0f, 1.5f);
    const std::vector<float> residual = random_floats(rng, rows * dim);
    const std::vector<float> weight = random_floats(rng, dim, 1.0f, 0.3f);
    const double eps = 1e-6;
    INFO("dim " << dim);

    std::vector<float> cpu(rows * dim);
    cpu::rms_norm(pool, x.data(), rows, dim, weight.data(), eps, cpu.data());
    std::vector<double> want(rows * dim);
    ref::rms_norm(to_double(x).data(), to_double(weight).data(), rows, dim, eps, want.data());
    check_close("rms_norm", to_double(cpu), want, kFloatOp);

    // fused: the residual becomes x + residual, the output its rms_norm.
    std::vector<double> fused_residual = to_double(residual), fused_out(rows * dim);
    ref::fused_add_rms_norm(to_double(x).data(), fused_residual.data(), to_double(weight).data(), rows, dim, eps,
                            fused_out.data());
    std::vector<float> sum(rows * dim);
    for (int64_t i = 0; i < rows * dim; ++i) sum[i] = x[i] + residual[i];
    cpu::rms_norm(pool, sum.data(), rows, dim, weight.data(), eps, cpu.data());
    check_close("fused_add_rms_norm residual", to_double(sum), fused_residual, kFloatOp);
    check_close("fused_add_rms_norm output", to_double(cpu), fused_out, kFloatOp);

    // silu_mul: the kernel's fused [gate | up] rows against the CPU op's separate arrays.
    const std::vector<float> gate = random_floats(rng, rows * dim, 0.0f, 3.0f), up = random_floats(rng, rows * dim);
    std::vector<double> gate_up(rows * 2 * dim), silu_want(rows * dim);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < dim; ++i) {
        gate_up[r * 2 * dim + i] = gate[r * dim + i];
        gate_up[r * 2 * dim + dim + i] = up[r * dim + i];
      }
    }
    ref::silu_mul(gate_up.data(), rows, dim, silu_want.data());
    cpu::silu_mul(pool, gate.data(), up.data(), rows * dim, cpu.data());
    check_close("silu_mul", to_double(cpu), silu_want, kFloatOp);
  }
}

TEST_CASE("the CPU backend's vector exp agrees with float64 exp, through underflow, overflow, infinities and NaN") {
  auto rng = kernel_test_rng(16);
  std::vector<float> x = {0.0f, -0.0f, 1.0f, -1.0f, 1e-30f, -1e-30f, 88.72f, 88.73f, 89.5f, 1e30f, -87.3f, -100.0f,
                          -103.9f, -104.5f, -1e30f, INFINITY, -INFINITY, std::nanf("")};
  std::uniform_real_distribution<float> wide(-110.0f, 95.0f);
  std::normal_distribution<float> narrow(0.0f, 2.0f);
  for (int i = 0; i < 4000; ++i) x.push_back(i % 2 ? wide(rng) : narrow(rng));
  // Shifted by zero and by -1.5 (attention's softmax subtracts its maximum the same way).
  for (const float shift : {0.0f, -1.5f}) {
    std::vector<float> got(x.size());
    cpu::exp_shifted(x.data(), static_cast<int64_t>(x.size()), shift, got.data());
    for (size_t i = 0; i < x.size(); ++i) {
      const float in = x[i] + shift, out = got[i];
      INFO("exp(" << in << ") = " << out);
      if (std::isnan(in)) {
        CHECK(std::isnan(out));
        continue;
      }
      const double want = std::exp(static_cast<double>(in));
      if (want > std::numeric_limits<float>::max()) {
        CHECK(out == INFINITY);
        continue;
      }
      // About 8 float roundings of half an ulp (core/vector_exp.h), plus half the smallest
      // subnormal where the result underflows.
      const double limit = 8 * 0.5 * std::numeric_limits<float>::epsilon() * want +
                           0.5 * std::numeric_limits<float>::denorm_min();
      CHECK(std::isfinite(out));
      CHECK(std::abs(out - want) <= limit);
    }
    // A value's result does not depend on its lane or on the call's length.
    std::vector<float> moved(x.size() - 3);
    cpu::exp_shifted(x.data() + 3, static_cast<int64_t>(moved.size()), shift, moved.data());
    CHECK(std::memcmp(moved.data(), got.data() + 3, moved.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("embedding reference gathers rows and poisons ids outside the vocabulary") {
  auto rng = kernel_test_rng(2);
  const int64_t vocab = 11, dim = 5;
  const std::vector<double> table = to_double(random_floats(rng, vocab * dim));
  const std::vector<int32_t> ids = {3, 0, 10, -1, 11, 3};
  std::vector<double> out(ids.size() * dim);
  ref::embedding(ids.data(), table.data(), static_cast<int64_t>(ids.size()), vocab, dim, out.data());
  for (size_t t = 0; t < ids.size(); ++t) {
    for (int64_t i = 0; i < dim; ++i) {
      const double got = out[t * dim + i];
      if (ids[t] < 0 || ids[t] >= vocab) {
        CHECK(std::isnan(got));
      } else {
        CHECK(got == table[ids[t] * dim + i]);
      }
    }
  }
}

TEST_CASE("rope table and reference agree with the CPU backend's rope, and rotate by relative position") {
  auto rng = kernel_test_rng(3);
  ThreadPool pool(2);
  ModelConfig config;
  config.head_dim = 16;
  config.rope_theta = 500000.0;
  config.rope_scaling.type = "llama3";
  config.rope_scaling.factor = 8.0;
  config.rope_scaling.original_max_position_embeddings = 64;
  const std::vector<double> inverse = rope_inverse_frequencies(config);
  const int64_t max_positions = 300, half = config.head_dim / 2;
  std::vector<float> cos, sin;
  kernels::rope_cos_sin_table(inverse, max_positions, cos, sin);
  REQUIRE(cos.size() == static_cast<size_t>(max_positions * half));
  for (int64_t p = 0; p < max_positions; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(p) * inverse[i];
      REQUIRE(cos[p * half + i] == static_cast<float>(std::cos(angle)));
      REQUIRE(sin[p * half + i] == static_cast<float>(std::sin(angle)));
    }
  }

  // Against cpu::rope, which takes per-token cos/sin rows; q and k interleaved in one row.
  const int64_t tokens = 9, q_heads = 4, kv_heads = 2, d = config.head_dim, stride = (q_heads + kv_heads) * d;
  std::vector<int64_t> positions(tokens);
  for (int64_t& p : positions) p = static_cast<int64_t>(rng() % max_positions);
  const std::vector<float> qk = random_floats(rng, tokens * stride);
  std::vector<float> q_cpu(tokens * q_heads * d), k_cpu(tokens * kv_heads * d), cos_rows, sin_rows;
  for (int64_t t = 0; t < tokens; ++t) {
    std::copy_n(&qk[t * stride], q_heads * d, &q_cpu[t * q_heads * d]);
    std::copy_n(&qk[t * stride + q_heads * d], kv_heads * d, &k_cpu[t * kv_heads * d]);
    cos_rows.insert(cos_rows.end(), &cos[positions[t] * half], &cos[positions[t] * half] + half);
    sin_rows.insert(sin_rows.end(), &sin[positions[t] * half], &sin[positions[t] * half] + half);
  }
  cpu::rope(pool, q_cpu.data(), tokens, q_heads, d, cos_rows.data(), sin_rows.data());
  cpu::rope(pool, k_cpu.data(), tokens, kv_heads, d, cos_rows.data(), sin_rows.data());
  std::vector<double> qk_ref = to_double(qk);
  ref::rope(qk_ref.data(), stride, qk_ref.data() + q_heads * d, stride, positions.data(), to_double(cos).data(),
            to_double(sin).data(), tokens, q_heads, kv_heads, d, max_positions);
  std::vector<double> q_ref, k_ref;
  for (int64_t t = 0; t < tokens; ++t) {
    q_ref.insert(q_ref.end(), &qk_ref[t * stride], &qk_ref[t * stride] + q_heads * d);
    k_ref.insert(k_ref.end(), &qk_ref[t * stride + q_heads * d], &qk_ref[t * stride] + stride);
  }
  check_close("rope q", to_double(q_cpu), q_ref, kFloatOp);
  check_close("rope k", to_double(k_cpu), k_ref, kFloatOp);

  // Independent property, with exact angles: q.k after rotation depends only on the
  // positions' difference, and rotation keeps norms.
  std::vector<double> exact_cos(max_positions * half), exact_sin(max_positions * half);
  for (int64_t p = 0; p < max_positions; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      exact_cos[p * half + i] = std::cos(static_cast<double>(p) * inverse[i]);
      exact_sin[p * half + i] = std::sin(static_cast<double>(p) * inverse[i]);
    }
  }
  const std::vector<double> q0 = to_double(random_floats(rng, d)), k0 = to_double(random_floats(rng, d));
  auto rotated_dot = [&](int64_t pq, int64_t pk) {
    std::vector<double> q = q0, k = k0;
    ref::rope(q.data(), d, k.data(), d, &pq, exact_cos.data(), exact_sin.data(), 1, 1, 0, d, max_positions);
    ref::rope(k.data(), d, q.data(), d, &pk, exact_cos.data(), exact_sin.data(), 1, 1, 0, d, max_positions);
    double dot = 0, norm_q = 0, norm_q0 = 0;
    for (int64_t i = 0; i < d; ++i) {
      dot += q[i] * k[i];
      norm_q += q[i] * q[i];
      norm_q0 += q0[i] * q0[i];
    }
    CHECK(norm_q == doctest::Approx(norm_q0).epsilon(1e-12));
    return dot;
  };
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t pq = static_cast<int64_t>(rng() % 100), pk = static_cast<int64_t>(rng() % 100);
    const int64_t shift = static_cast<int64_t>(rng() % 150);
    CHECK(rotated_dot(pq, pk) == doctest::Approx(rotated_dot(pq + shift, pk + shift)).epsilon(1e-9));
  }

  // A position outside the table poisons the token's heads.
  std::vector<double> poisoned = to_double(qk);
  const int64_t outside = max_positions;
  ref::rope(poisoned.data(), stride, poisoned.data() + q_heads * d, stride, &outside, exact_cos.data(),
            exact_sin.data(), 1, q_heads, kv_heads, d, max_positions);
  CHECK(std::all_of(poisoned.begin(), poisoned.begin() + stride, [](double v) { return std::isnan(v); }));
  CHECK(poisoned[stride] == static_cast<double>(qk[stride]));  // the next token untouched
}

namespace {

// A random paged layout: each sequence's blocks are drawn from a shuffled pool.
struct PagedLayout {
  int64_t block_size, num_blocks, max_blocks_per_seq;
  std::vector<int32_t> block_tables;  // [num_seqs, max_blocks_per_seq]
  std::vector<int32_t> seq_lens;
  std::vector<double> key, value;     // [num_blocks, block_size, kv_heads, head_dim]
  PagedKvCache<double> cache;
  PagedSequences seqs;
};

PagedLayout random_layout(std::mt19937_64& rng, const std::vector<int32_t>& seq_lens, int64_t block_size,
                          int64_t kv_heads, int64_t head_dim) {
  PagedLayout l;
  l.block_size = block_size;
  l.seq_lens = seq_lens;
  int64_t max_len = 0, needed = 0;
  for (int32_t len : seq_lens) {
    max_len = std::max<int64_t>(max_len, len);
    needed += (len + block_size - 1) / block_size;
  }
  l.max_blocks_per_seq = std::max<int64_t>(1, (max_len + block_size - 1) / block_size);
  l.num_blocks = needed + 3;  // a few blocks nobody uses
  std::vector<int32_t> pool(l.num_blocks);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  l.block_tables.assign(seq_lens.size() * l.max_blocks_per_seq, -1);
  size_t next = 0;
  for (size_t s = 0; s < seq_lens.size(); ++s) {
    for (int64_t b = 0; b < (seq_lens[s] + block_size - 1) / block_size; ++b) {
      l.block_tables[s * l.max_blocks_per_seq + b] = pool[next++];
    }
  }
  const size_t cache_elements = static_cast<size_t>(l.num_blocks * block_size * kv_heads * head_dim);
  l.key = to_double(random_floats(rng, cache_elements));
  l.value = to_double(random_floats(rng, cache_elements));
  l.cache = {l.key.data(), l.value.data(), l.num_blocks, block_size, kv_heads, head_dim};
  l.seqs = {l.block_tables.data(), l.seq_lens.data(), static_cast<int64_t>(seq_lens.size()), l.max_blocks_per_seq,
            max_len};
  return l;
}

// Dense softmax attention of one query over contiguous keys/values [context, head_dim].
std::vector<double> dense_attention(const double* q, const std::vector<double>& k, const std::vector<double>& v,
                                    int64_t context, int64_t d, double scale) {
  std::vector<double> out(d, 0.0), scores(context);
  if (context == 0) return out;
  for (int64_t j = 0; j < context; ++j) {
    scores[j] = 0;
    for (int64_t i = 0; i < d; ++i) scores[j] += q[i] * k[j * d + i] * scale;
  }
  const double m = *std::max_element(scores.begin(), scores.end());
  double sum = 0;
  for (double s : scores) sum += std::exp(s - m);
  for (int64_t j = 0; j < context; ++j) {
    for (int64_t i = 0; i < d; ++i) out[i] += std::exp(scores[j] - m) / sum * v[j * d + i];
  }
  return out;
}

// The contiguous keys (or values) of one sequence and kv head, gathered through its table.
std::vector<double> gather(const PagedLayout& l, const std::vector<double>& tensor, size_t s, int64_t kv_head,
                           int64_t kv_heads, int64_t d) {
  std::vector<double> out;
  for (int64_t p = 0; p < l.seq_lens[s]; ++p) {
    const int64_t block = l.block_tables[s * l.max_blocks_per_seq + p / l.block_size];
    const double* row = &tensor[((block * l.block_size + p % l.block_size) * kv_heads + kv_head) * d];
    out.insert(out.end(), row, row + d);
  }
  return out;
}

}  // namespace

TEST_CASE("kv_cache_append reference writes the slots of rollout/kv_cache.h's layout") {
  auto rng = kernel_test_rng(4);
  KvCacheShape shape;
  shape.num_layers = 1;
  shape.num_kv_heads = 3;
  shape.head_dim = 8;
  shape.block_size = 4;
  shape.num_blocks = 6;
  KvCache cpu_cache(shape);
  const int64_t row = shape.num_kv_heads * shape.head_dim, slots = shape.num_blocks * shape.block_size;
  std::vector<double> key(slots * row, -7.0), value(slots * row, -7.0);
  const PagedKvCache<double> cache{key.data(), value.data(), shape.num_blocks, shape.block_size, shape.num_kv_heads,
                                   shape.head_dim};
  // A sequence of 10 tokens in blocks {4, 1, 5}; then a padding slot and one past the cache.
  const std::vector<int32_t> table = {4, 1, 5};
  std::vector<int64_t> slot_mapping;
  const int64_t tokens = 12, stride = row + 5;  // k/v rows inside a wider (fused) row
  const std::vector<float> k = random_floats(rng, tokens * stride), v = random_floats(rng, tokens * stride);
  for (int64_t p = 0; p < 10; ++p) {
    const int64_t block = table[p / shape.block_size], slot = p % shape.block_size;
    slot_mapping.push_back(block * shape.block_size + slot);
    std::copy_n(&k[p * stride], row, cpu_cache.key(0, block, slot));
    std::copy_n(&v[p * stride], row, cpu_cache.value(0, block, slot));
  }
  slot_mapping.push_back(-1);
  slot_mapping.push_back(slots);
  ref::kv_cache_append(to_double(k).data(), stride, to_double(v).data(), stride, slot_mapping.data(), tokens, cache);
  int64_t written = 0;
  for (int64_t block = 0; block < shape.num_blocks; ++block) {
    for (int64_t slot = 0; slot < shape.block_size; ++slot) {
      const double* got_k = &key[(block * shape.block_size + slot) * row];
      const double* got_v = &value[(block * shape.block_size + slot) * row];
      const bool used = got_k[0] != -7.0;
      written += used;
      for (int64_t i = 0; used && i < row; ++i) {
        CHECK(got_k[i] == cpu_cache.key(0, block, slot)[i]);
        CHECK(got_v[i] == cpu_cache.value(0, block, slot)[i]);
      }
    }
  }
  CHECK(written == 10);
}

TEST_CASE("paged decode reference equals dense attention over the gathered K/V") {
  auto rng = kernel_test_rng(5);
  for (auto [q_heads, kv_heads, d, block_size] : std::vector<std::array<int64_t, 4>>{
           {6, 2, 8, 16}, {4, 4, 16, 4}, {8, 1, 32, 8}, {12, 4, 64, 16}}) {
    const std::vector<int32_t> lens = {1, 17, 0, 70, 33};
    PagedLayout l = random_layout(rng, lens, block_size, kv_heads, d);
    const std::vector<double> q = to_double(random_floats(rng, lens.size() * q_heads * d));
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    std::vector<double> out(q.size());
    ref::paged_decode_attention(q.data(), q_heads * d, q_heads, l.cache, l.seqs, scale, out.data());
    std::vector<double> want;
    for (size_t s = 0; s < lens.size(); ++s) {
      for (int64_t h = 0; h < q_heads; ++h) {
        const int64_t kv = h / (q_heads / kv_heads);
        const std::vector<double> o = dense_attention(&q[(s * q_heads + h) * d], gather(l, l.key, s, kv, kv_heads, d),
                                                      gather(l, l.value, s, kv, kv_heads, d), lens[s], d, scale);
        want.insert(want.end(), o.begin(), o.end());
      }
    }
    INFO("q_heads " << q_heads << " kv_heads " << kv_heads << " head_dim " << d);
    check_close("decode", out, want, kDouble);

    // A length past max_seq_len or a block id outside the cache: NaN, never a wild read.
    l.seq_lens[0] = static_cast<int32_t>(l.seqs.max_seq_len + 1);
    l.block_tables[1 * l.max_blocks_per_seq] = static_cast<int32_t>(l.num_blocks);
    ref::paged_decode_attention(q.data(), q_heads * d, q_heads, l.cache, l.seqs, scale, out.data());
    CHECK(std::all_of(out.begin(), out.begin() + 2 * q_heads * d, [](double x) { return std::isnan(x); }));
    CHECK(std::isfinite(out[2 * q_heads * d]));
  }
}

TEST_CASE("paged prefill reference equals per-sequence dense causal attention, and decode at q_len 1") {
  auto rng = kernel_test_rng(6);
  const int64_t q_heads = 6, kv_heads = 2, d = 16, group = q_heads / kv_heads;
  // (cached prefix + new tokens): a first prefill, chunked prefills, a single new token.
  const std::vector<int32_t> lens = {9, 40, 23, 5};
  const std::vector<int32_t> q_lens = {9, 12, 1, 5};
  PagedLayout l = random_layout(rng, lens, 8, kv_heads, d);
  std::vector<int32_t> cu = {0};
  for (int32_t n : q_lens) cu.push_back(cu.back() + n);
  const int64_t total = cu.back();
  const std::vector<double> q = to_double(random_floats(rng, total * q_heads * d));
  const double scale = 0.3;
  std::vector<double> out(q.size());
  ref::paged_prefill_attention(q.data(), q_heads * d, cu.data(), q_heads, l.cache, l.seqs, scale, out.data());
  std::vector<double> want(q.size());
  for (size_t s = 0; s < lens.size(); ++s) {
    for (int64_t i = 0; i < q_lens[s]; ++i) {
      const int64_t token = cu[s] + i, position = lens[s] - q_lens[s] + i;
      for (int64_t h = 0; h < q_heads; ++h) {
        // Causal: the first position + 1 keys of the contiguous sequence.
        const std::vector<double> o =
            dense_attention(&q[(token * q_heads + h) * d], gather(l, l.key, s, h / group, kv_heads, d),
                            gather(l, l.value, s, h / group, kv_heads, d), position + 1, d, scale);
        std::copy(o.begin(), o.end(), &want[(token * q_heads + h) * d]);
      }
    }
  }
  check_close("prefill", out, want, kDouble);

  // Sequence 2 has one new token: the decode reference gives the same row.
  std::vector<double> decoded(q_heads * d);
  const int32_t len2 = lens[2];
  PagedSequences one{&l.block_tables[2 * l.max_blocks_per_seq], &len2, 1, l.max_blocks_per_seq, len2};
  ref::paged_decode_attention(&q[cu[2] * q_heads * d], q_heads * d, q_heads, l.cache, one, scale, decoded.data());
  check_close("prefill at q_len 1 vs decode", std::vector<double>(&out[cu[2] * q_heads * d], &out[cu[3] * q_heads * d]),
              decoded, kDouble);
}

TEST_CASE("Philox4x32-10 matches the Random123 known answers; the uniform is in [0, 1)") {
  using kernels::philox4x32_10;
  using kernels::PhiloxBlock;
  auto same = [](PhiloxBlock a, std::array<uint32_t, 4> b) {
    return a.v[0] == b[0] && a.v[1] == b[1] && a.v[2] == b[2] && a.v[3] == b[3];
  };
  // Random123 tests/kat_vectors, "philox4x32 10" lines.
  CHECK(same(philox4x32_10({{0, 0, 0, 0}}, 0, 0), {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  CHECK(same(philox4x32_10({{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}}, 0xffffffff, 0xffffffff),
             {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  CHECK(same(philox4x32_10({{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, 0xa4093822, 0x299f31d0),
             {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
  int64_t buckets[10] = {};
  for (uint64_t position = 0; position < 100000; ++position) {
    const double u = kernels::philox_uniform(12345, position);
    REQUIRE((u >= 0 && u < 1));
    ++buckets[static_cast<int>(u * 10)];
  }
  for (int64_t b : buckets) CHECK(std::abs(b - 10000) < 500);  // 5 standard deviations
  CHECK(kernels::philox_uniform(1, 2) != kernels::philox_uniform(2, 1));
}

TEST_CASE("sampling reference keeps the same tokens as the sampler, with the same log-probs") {
  auto rng = kernel_test_rng(7);
  Sampler sampler;
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t vocab = 5 + static_cast<int64_t>(rng() % 60);
    std::vector<float> logits = random_floats(rng, vocab, 0.0f, 2.0f);
    if (trial % 3 == 0) {  // ties: logits on a coarse grid
      for (float& x : logits) x = std::round(x * 2.0f) / 2.0f;
    }
    SamplingParams p;
    p.temperature = trial % 10 == 0 ? 0.0 : 0.3 + static_cast<double>(rng() % 100) / 50.0;
    p.top_k = trial % 4 == 0 ? 0 : static_cast<int64_t>(rng() % (vocab + 3));
    p.top_p = trial % 5 == 0 ? 1.0 : 0.2 + static_cast<double>(rng() % 80) / 100.0;
    INFO("trial " << trial << " vocab " << vocab << " T " << p.temperature << " top_k " << p.top_k << " top_p "
                  << p.top_p);
    const double u0 = kernels::philox_uniform(rng(), 0);
    const ref::SampleReference r = ref::sample(logits.data(), vocab, p.temperature, p.top_k, p.top_p, u0);
    const SampledToken s = sampler.sample(logits.data(), vocab, p, u0);
    REQUIRE(r.kept[r.token]);
    // log softmax(logits / T) from its definition (T = 1 when greedy).
    const double t_eff = p.temperature == 0 ? 1.0 : p.temperature;
    double log_z = -INFINITY;
    for (float x : logits) log_z = std::max(log_z, x / t_eff);
    double total = 0;
    for (float x : logits) total += std::exp(x / t_eff - log_z);
    log_z += std::log(total);
    auto full_logprob = [&](int32_t t) { return logits[t] / t_eff - log_z; };
    CHECK(r.logprob == doctest::Approx(full_logprob(r.token)).epsilon(1e-9));
    if (p.temperature == 0) {
      CHECK(s.token == r.token);
      CHECK(s.logprob == doctest::Approx(r.logprob).epsilon(1e-6));
      continue;
    }
    const bool truncating = (p.top_k > 0 && p.top_k < vocab) || p.top_p < 1;
    if (!truncating) {  // both walk ids in order: the same uniform, the same token
      CHECK(s.token == r.token);
      CHECK(s.logprob == doctest::Approx(r.logprob).epsilon(1e-6));
      continue;
    }
    // The sampler walks kept tokens by decreasing logit (lower id first): aim its uniform
    // at the middle of each reference-kept token's interval; it must return that token.
    std::vector<int32_t> order(vocab);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    double before = 0;
    int kept_count = 0;
    for (int32_t t : order) {
      if (!r.kept[t]) continue;
      ++kept_count;
      const double mid = before + r.probabilities[t] / 2;
      before += r.probabilities[t];
      if (r.probabilities[t] < 1e-12) continue;  // too thin to aim at in double arithmetic
      const SampledToken hit = sampler.sample(logits.data(), vocab, p, mid);
      CHECK_MESSAGE(hit.token == t, "uniform " << mid << " should draw kept token " << t);
      CHECK(hit.sampling_logprob == doctest::Approx(std::log(r.probabilities[t])).epsilon(1e-5));
      CHECK(hit.logprob == doctest::Approx(full_logprob(t)).epsilon(1e-5));
    }
    // Nothing outside: the sampler's draws for uniforms just below 1 and at 0 are kept tokens.
    CHECK(r.kept[sampler.sample(logits.data(), vocab, p, 0.0).token]);
    CHECK(r.kept[sampler.sample(logits.data(), vocab, p, std::nextafter(1.0, 0.0)).token]);
    if (p.top_k > 0 && p.top_k < vocab) CHECK(kept_count <= p.top_k);
    CHECK(r.sampling_logprob == doctest::Approx(std::log(r.probabilities[r.token])).epsilon(1e-9));
  }
}
