// GPU suite, attention: kv_cache_append, split-K decode and causal prefill over the paged
// cache against kernels/reference/attention_reference.h, over every supported head_dim,
// GQA group sizes 1 to 16, contexts of one to several split-K partitions, and prefills
// with and without a cached prefix. (main: test_kernels.cpp.)
#if TANDEM_WITH_CUDA

#include "kernels/paged_attention.h"
#include "kernels/reference/attention_reference.h"
#include "tests/support/kernel_device.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

using namespace tandem;
using namespace tandem::testing;
namespace ref = tandem::kernels::reference;

namespace {

struct AttentionCase {
  int64_t q_heads, kv_heads, head_dim, block_size;
};

// Every head_dim the kernels support; groups of 3 (one head per block), 1, 8, 6, 4, 16.
const AttentionCase kCases[] = {
    {6, 2, 8, 16}, {6, 6, 16, 4}, {8, 1, 32, 8}, {12, 2, 64, 16}, {32, 8, 128, 16}, {16, 1, 128, 32}, {16, 2, 256, 16},
};

// A step's sequences, their blocks drawn from a shuffled pool (some blocks unused), and
// their tokens' keys and values written to the cache with kv_cache_append on the GPU and
// with the reference on the host; the two caches are compared slot by slot.
template <typename S>
struct CachedSequences {
  AttentionCase c;
  std::vector<int32_t> lens, block_tables;
  int64_t max_blocks_per_seq = 0, num_blocks = 0, max_seq_len = 0;
  std::vector<double> key_ref, value_ref;  // reference cache, float64
  DeviceTensor<S> key, value;              // device cache
  DeviceBuffer<int32_t> tables_device, lens_device;

  CachedSequences(std::mt19937_64& rng, const AttentionCase& c_, const std::vector<int32_t>& lens_,
                  int64_t max_seq_len_, TestStream& stream)
      : c(c_), lens(lens_), key(std::vector<double>()), value(std::vector<double>()), tables_device(1), lens_device(lens_) {
    int64_t needed = 0, longest = 0;
    for (int32_t len : lens) {
      needed += (len + c.block_size - 1) / c.block_size;
      longest = std::max<int64_t>(longest, len);
    }
    max_seq_len = std::max(max_seq_len_, longest);
    max_blocks_per_seq = std::max<int64_t>(1, (max_seq_len + c.block_size - 1) / c.block_size);
    num_blocks = needed + 5;
    std::vector<int32_t> pool(num_blocks);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng);
    block_tables.assign(lens.size() * max_blocks_per_seq, -1);
    std::vector<int64_t> slots;
    size_t next = 0;
    for (size_t s = 0; s < lens.size(); ++s) {
      for (int64_t p = 0; p < lens[s]; ++p) {
        int32_t& block = block_tables[s * max_blocks_per_seq + p / c.block_size];
        if (p % c.block_size == 0) block = pool[next++];
        slots.push_back(static_cast<int64_t>(block) * c.block_size + p % c.block_size);
      }
    }
    tables_device = DeviceBuffer<int32_t>(block_tables);

    // Keys and values of every token, inside wider rows (a fused qkv output): stride row + 8
    // keeps 16-byte packs, row + 1 takes the scalar path.
    const int64_t row = c.kv_heads * c.head_dim, slot_count = num_blocks * c.block_size;
    const int64_t tokens = static_cast<int64_t>(slots.size());
    const int64_t stride = row + (c.head_dim == 64 ? 1 : 8);
    DeviceTensor<S> k(normal_values(rng, tokens * stride)), v(normal_values(rng, tokens * stride));
    const double nan = std::numeric_limits<double>::quiet_NaN();
    key_ref.assign(slot_count * row, nan);
    value_ref.assign(slot_count * row, nan);
    key = DeviceTensor<S>(key_ref);  // NaN everywhere: a read of an unwritten slot shows
    value = DeviceTensor<S>(value_ref);
    DeviceBuffer<int64_t> slots_device(slots);
    kernels::kv_cache_append(k.at(), stride, v.at(), stride, slots_device.get(), tokens, cache(), stream.get());
    ref::kv_cache_append(k.values.data(), stride, v.values.data(), stride, slots.data(), tokens,
                         {key_ref.data(), value_ref.data(), num_blocks, c.block_size, c.kv_heads, c.head_dim});
    const std::vector<double> got_k = key.download(), got_v = value.download();
    for (int64_t slot : slots) {
      for (int64_t i = slot * row; i < (slot + 1) * row; ++i) {
        if (got_k[i] != key_ref[i] || got_v[i] != value_ref[i]) FAIL("kv_cache_append: slot " << slot << " differs");
      }
    }
  }

  kernels::PagedKvCache<typename S::Device> cache() const {
    return {key.at(), value.at(), num_blocks, c.block_size, c.kv_heads, c.head_dim};
  }
  kernels::PagedSequences device_sequences() const {
    return {tables_device.get(), lens_device.get(), static_cast<int64_t>(lens.size()), max_blocks_per_seq,
            max_seq_len};
  }
  kernels::PagedSequences host_sequences() const {
    return {block_tables.data(), lens.data(), static_cast<int64_t>(lens.size()), max_blocks_per_seq, max_seq_len};
  }
  kernels::PagedKvCache<double> host_cache() {
    return {key_ref.data(), value_ref.data(), num_blocks, c.block_size, c.kv_heads, c.head_dim};
  }
};

template <typename S>
void check_decode(std::mt19937_64& rng, const AttentionCase& c, const std::vector<int32_t>& lens,
                  int64_t max_seq_len) {
  TestStream stream;
  CachedSequences<S> seqs(rng, c, lens, max_seq_len, stream);
  const int64_t num_seqs = static_cast<int64_t>(lens.size()), d = c.head_dim;
  const int64_t q_stride = (c.q_heads + 2 * c.kv_heads) * d;  // q inside a fused qkv row
  DeviceTensor<S> q(normal_values(rng, num_seqs * q_stride));
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const int64_t bytes = kernels::paged_decode_workspace_bytes(num_seqs, c.q_heads, d, seqs.max_seq_len);
  DeviceBuffer<float> workspace(static_cast<size_t>(bytes / 4));
  workspace.poison();
  DeviceTensor<S> out = poisoned_tensor<S>(num_seqs * c.q_heads * d);
  kernels::paged_decode_attention(q.at(), q_stride, c.q_heads, seqs.cache(), seqs.device_sequences(), scale,
                                  bytes > 0 ? workspace.get() : nullptr, bytes, out.at(), stream.get());
  std::vector<double> want(num_seqs * c.q_heads * d);
  ref::paged_decode_attention(q.values.data(), q_stride, c.q_heads, seqs.host_cache(), seqs.host_sequences(), scale,
                              want.data());
  check_close("paged_decode_attention", out.download(), want, S::kAttention);
}

template <typename S>
void check_prefill(std::mt19937_64& rng, const AttentionCase& c, const std::vector<int32_t>& lens,
                   const std::vector<int32_t>& q_lens) {
  TestStream stream;
  CachedSequences<S> seqs(rng, c, lens, 0, stream);
  std::vector<int32_t> cu = {0};
  for (int32_t n : q_lens) cu.push_back(cu.back() + n);
  const int64_t total = cu.back(), d = c.head_dim;
  const int64_t max_q_len = *std::max_element(q_lens.begin(), q_lens.end());
  const int64_t q_stride = (c.q_heads + 2 * c.kv_heads) * d;
  DeviceTensor<S> q(normal_values(rng, total * q_stride));
  DeviceBuffer<int32_t> cu_device(cu);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  DeviceTensor<S> out = poisoned_tensor<S>(total * c.q_heads * d);
  kernels::paged_prefill_attention(q.at(), q_stride, cu_device.get(), total, max_q_len, c.q_heads, seqs.cache(),
                                   seqs.device_sequences(), scale, out.at(), stream.get());
  std::vector<double> want(total * c.q_heads * d);
  ref::paged_prefill_attention(q.values.data(), q_stride, cu.data(), c.q_heads, seqs.host_cache(),
                               seqs.host_sequences(), scale, want.data());
  check_close("paged_prefill_attention", out.download(), want, S::kAttention);
}

}  // namespace

TEST_CASE_TEMPLATE("paged decode attention matches float64, one partition and split-K", S, Fp32, Bf16) {
  auto rng = kernel_test_rng(201);
  for (const AttentionCase& c : kCases) {
    INFO(S::kName << " q_heads " << c.q_heads << " kv_heads " << c.kv_heads << " head_dim " << c.head_dim
                  << " block_size " << c.block_size);
    SUBCASE("one partition") { check_decode<S>(rng, c, {1, 100, 511, 0, 512, 37}, 0); }
    // Partitions of 512: lengths on both sides of the boundaries, and a grid sized for a
    // longer context than any sequence has (partitions past a sequence's end do nothing).
    SUBCASE("split-K") { check_decode<S>(rng, c, {1, 37, 0, 512, 513, 1500, 2100, 1024}, 2600); }
  }
}

TEST_CASE_TEMPLATE("paged prefill attention matches float64 with and without a cached prefix", S, Fp32, Bf16) {
  auto rng = kernel_test_rng(202);
  for (const AttentionCase& c : kCases) {
    INFO(S::kName << " q_heads " << c.q_heads << " kv_heads " << c.kv_heads << " head_dim " << c.head_dim);
    // A first prefill (q_len = len), chunked prefills (a cached prefix), a single token, and
    // a sequence that adds no tokens this step.
    check_prefill<S>(rng, c, {40, 300, 129, 70, 5, 33}, {40, 77, 1, 70, 5, 0});
  }
}

TEST_CASE("a broken plan gives NaN outputs, never a read outside the cache") {
  auto rng = kernel_test_rng(203);
  TestStream stream;
  const AttentionCase c{4, 2, 64, 16};
  for (int64_t max_seq_len : {int64_t{100}, int64_t{1200}}) {
    CachedSequences<Fp32> seqs(rng, c, {50, 60, 70}, max_seq_len, stream);
    // Sequence 0 claims more tokens than max_seq_len; sequence 1's first block id is past the cache.
    std::vector<int32_t> lens = seqs.lens, tables = seqs.block_tables;
    lens[0] = static_cast<int32_t>(seqs.max_seq_len + 1);
    tables[1 * seqs.max_blocks_per_seq] = static_cast<int32_t>(seqs.num_blocks + 7);
    DeviceBuffer<int32_t> lens_device(lens), tables_device(tables);
    kernels::PagedSequences broken = seqs.device_sequences();
    broken.seq_lens = lens_device.get();
    broken.block_tables = tables_device.get();
    const int64_t d = c.head_dim, bytes = kernels::paged_decode_workspace_bytes(3, c.q_heads, d, seqs.max_seq_len);
    DeviceBuffer<float> workspace(static_cast<size_t>(std::max<int64_t>(bytes, 4) / 4));
    DeviceTensor<Fp32> q(normal_values(rng, 3 * c.q_heads * d));
    DeviceTensor<Fp32> out = poisoned_tensor<Fp32>(3 * c.q_heads * d);
    kernels::paged_decode_attention(q.at(), c.q_heads * d, c.q_heads, seqs.cache(), broken, 0.125f, workspace.get(),
                                    bytes, out.at(), stream.get());
    const std::vector<double> got = out.download();
    INFO("max_seq_len " << max_seq_len);
    CHECK(std::all_of(got.begin(), got.begin() + 2 * c.q_heads * d, [](double x) { return std::isnan(x); }));
    CHECK(std::all_of(got.begin() + 2 * c.q_heads * d, got.end(), [](double x) { return std::isfinite(x); }));
    TANDEM_TEST_CUDA(cudaGetLastError());  // no fault
  }
}

#endif  // TANDEM_WITH_CUDA
