// GPU suite: the kernels of kernels/ against their float64 references
// (kernels/reference/), on fresh random inputs (the seed is printed; TANDEM_TEST_SEED
// replays it), outputs poisoned with NaN before each launch so that an unwritten element
// fails. This file: main, norms and activations, embedding, rope, launcher argument
// checks; test_kernels_attention.cpp and test_kernels_sampling.cpp hold the rest.
// Without a usable GPU (or without CUDA in the build) it prints the reason and exits 77,
// which Meson reports as a skip.
#include "kernels/device_probe.h"

#include <cstdio>

#if TANDEM_WITH_CUDA

#define DOCTEST_CONFIG_IMPLEMENT
#include "kernels/norm_act.h"
#include "kernels/paged_attention.h"
#include "kernels/reference/norm_act_reference.h"
#include "kernels/reference/rope_reference.h"
#include "kernels/rope.h"
#include "tests/support/kernel_device.h"

#include <doctest/doctest.h>

#include <cmath>

using namespace tandem;
using namespace tandem::testing;
namespace ref = tandem::kernels::reference;

TEST_CASE_TEMPLATE("rms_norm, fused_add_rms_norm and silu_mul match float64", S, Fp32, Bf16) {
  auto rng = kernel_test_rng(101);
  TestStream stream;
  const int64_t rows = 37;
  const float eps = 1e-6f;
  for (int64_t dim : {8, 100, 1027, 4096}) {
    // offset 1: every pointer one element past a 16-byte boundary, so the scalar path runs.
    for (int64_t offset : {0, 1}) {
      INFO(S::kName << " dim " << dim << " offset " << offset);
      const size_t n = static_cast<size_t>(rows * dim + offset);
      DeviceTensor<S> x(normal_values(rng, n, 0.0, 1.5)), residual(normal_values(rng, n));
      DeviceTensor<S> weight(normal_values(rng, dim + offset, 1.0, 0.3));
      auto slice = [&](const std::vector<double>& v) { return std::vector<double>(v.begin() + offset, v.end()); };

      DeviceTensor<S> out = poisoned_tensor<S>(n);
      kernels::rms_norm(x.at(offset), weight.at(offset), rows, dim, eps, out.at(offset), stream.get());
      std::vector<double> want(rows * dim);
      ref::rms_norm(slice(x.values).data(), slice(weight.values).data(), rows, dim, eps, want.data());
      check_close("rms_norm", slice(out.download()), want, S::kElementwise);

      // In place (out == x), as qk-norm runs.
      DeviceTensor<S> in_place(x.values);
      kernels::rms_norm(in_place.at(offset), weight.at(offset), rows, dim, eps, in_place.at(offset), stream.get());
      check_close("rms_norm in place", slice(in_place.download()), want, S::kElementwise);

      std::vector<double> want_residual = slice(residual.values), want_fused(rows * dim);
      ref::fused_add_rms_norm(slice(x.values).data(), want_residual.data(), slice(weight.values).data(), rows, dim,
                              eps, want_fused.data());
      // The kernel normalises the residual as stored (rounded to S), as the next layer
      // reads it: the reference does too. From the unrounded sum, a bf16 row of 8 whose
      // sum cancels carries three roundings and exceeded rtol (seen under tools/cudasim).
      std::vector<double> stored_residual = want_residual;
      for (double& r : stored_residual) r = S::decode(S::encode(r));
      ref::rms_norm(stored_residual.data(), slice(weight.values).data(), rows, dim, eps, want_fused.data());
      DeviceTensor<S> fused_out = poisoned_tensor<S>(n);
      kernels::fused_add_rms_norm(x.at(offset), residual.at(offset), weight.at(offset), rows, dim, eps,
                                  fused_out.at(offset), stream.get());
      check_close("fused_add_rms_norm residual", slice(residual.download()), want_residual, S::kElementwise);
      check_close("fused_add_rms_norm output", slice(fused_out.download()), want_fused, S::kElementwise);

      DeviceTensor<S> gate_up(normal_values(rng, rows * 2 * dim + offset, 0.0, 3.0));
      DeviceTensor<S> silu_out = poisoned_tensor<S>(n);
      kernels::silu_mul(gate_up.at(offset), rows, dim, silu_out.at(offset), stream.get());
      std::vector<double> want_silu(rows * dim);
      ref::silu_mul(slice(gate_up.values).data(), rows, dim, want_silu.data());
      check_close("silu_mul", slice(silu_out.download()), want_silu, S::kElementwise);
    }
  }
}

TEST_CASE_TEMPLATE("embedding gathers rows exactly and writes NaN rows for bad ids", S, Fp32, Bf16) {
  auto rng = kernel_test_rng(102);
  TestStream stream;
  const int64_t vocab = 50;
  for (int64_t dim : {8, 100, 1027}) {
    INFO(S::kName << " dim " << dim);
    DeviceTensor<S> table(normal_values(rng, vocab * dim));
    std::vector<int32_t> ids(29);
    for (int32_t& id : ids) id = static_cast<int32_t>(rng() % vocab);
    ids[3] = -1;
    ids[17] = static_cast<int32_t>(vocab);
    DeviceBuffer<int32_t> ids_device(ids);
    const int64_t tokens = static_cast<int64_t>(ids.size());
    DeviceTensor<S> out = poisoned_tensor<S>(tokens * dim);
    kernels::embedding(ids_device.get(), table.at(), tokens, vocab, dim, out.at(), stream.get());
    std::vector<double> want(tokens * dim);
    ref::embedding(ids.data(), table.values.data(), tokens, vocab, dim, want.data());
    const std::vector<double> got = out.download();
    for (int64_t t = 0; t < tokens; ++t) {
      const bool bad = ids[t] < 0 || ids[t] >= vocab;
      for (int64_t i = 0; i < dim; ++i) {
        const double g = got[t * dim + i], w = want[t * dim + i];
        if (bad ? !std::isnan(g) : g != w) FAIL("token " << t << " (id " << ids[t] << ") element " << i << ": " << g);
      }
    }
  }
}

TEST_CASE_TEMPLATE("rope rotates q and k in a fused qkv row like the float64 reference", S, Fp32, Bf16) {
  auto rng = kernel_test_rng(103);
  TestStream stream;
  const int64_t tokens = 13, q_heads = 4, kv_heads = 2, max_positions = 4096;
  for (int64_t d : {8, 64, 128}) {
    std::vector<double> inverse(d / 2);
    for (int64_t i = 0; i < d / 2; ++i) inverse[i] = 1.0 / std::pow(1e4, 2.0 * i / static_cast<double>(d));
    std::vector<float> cos, sin;
    kernels::rope_cos_sin_table(inverse, max_positions, cos, sin);
    DeviceBuffer<float> cos_device(cos), sin_device(sin);
    const std::vector<double> cos_values(cos.begin(), cos.end()), sin_values(sin.begin(), sin.end());
    const int64_t stride = (q_heads + 2 * kv_heads) * d;  // [q | k | v]
    std::vector<int64_t> positions(tokens);
    for (int64_t& p : positions) p = static_cast<int64_t>(rng() % max_positions);
    positions[5] = max_positions;  // outside the table: NaN heads

    auto run = [&](auto position_type) {
      using P = decltype(position_type);
      INFO(S::kName << " head_dim " << d << " positions int" << 8 * sizeof(P));
      const std::vector<P> typed(positions.begin(), positions.end());
      DeviceBuffer<P> positions_device(typed);
      DeviceTensor<S> qkv(normal_values(rng, tokens * stride));
      kernels::rope(qkv.at(), stride, qkv.at(q_heads * d), stride, positions_device.get(), cos_device.get(),
                    sin_device.get(), tokens, q_heads, kv_heads, d, max_positions, stream.get());
      std::vector<double> want = qkv.values;
      ref::rope(want.data(), stride, want.data() + q_heads * d, stride, positions.data(), cos_values.data(),
                sin_values.data(), tokens, q_heads, kv_heads, d, max_positions);
      const std::vector<double> got = qkv.download();
      std::vector<double> got_rotated, want_rotated;
      for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t i = 0; i < stride; ++i) {
          const double g = got[t * stride + i], w = want[t * stride + i];
          if (i >= (q_heads + kv_heads) * d) {
            REQUIRE_MESSAGE(g == qkv.values[t * stride + i], "v touched at token " << t);
          } else if (t == 5) {
            REQUIRE_MESSAGE(std::isnan(g), "position outside the table must give NaN");
          } else {
            got_rotated.push_back(g);
            want_rotated.push_back(w);
          }
        }
      }
      check_close("rope", got_rotated, want_rotated, S::kElementwise);
    };
    run(int32_t{});
    run(int64_t{});
  }
}

TEST_CASE("launchers refuse bad shapes with a message naming the launcher") {
  float* fake = reinterpret_cast<float*>(uintptr_t{256});  // never dereferenced: the checks throw first
  kernels::PagedKvCache<float> cache{fake, fake, 4, 16, 2, 48};
  kernels::PagedSequences seqs{reinterpret_cast<const int32_t*>(fake), reinterpret_cast<const int32_t*>(fake), 1, 4,
                               64};
  CHECK_THROWS_WITH(kernels::paged_decode_attention(fake, 96, 4, cache, seqs, 0.1f, nullptr, 0, fake, nullptr),
                    doctest::Contains("paged_decode_attention: head_dim 48 is not supported"));
  cache.head_dim = 64;
  CHECK_THROWS_WITH(kernels::paged_decode_attention(fake, 192, 3, cache, seqs, 0.1f, nullptr, 0, fake, nullptr),
                    doctest::Contains("must be a positive multiple of num_kv_heads"));
  seqs.max_seq_len = 2000;
  seqs.max_blocks_per_seq = 200;
  CHECK_THROWS_WITH(kernels::paged_decode_attention(fake, 256, 4, cache, seqs, 0.1f, nullptr, 0, fake, nullptr),
                    doctest::Contains("paged_decode_workspace_bytes"));
  CHECK_THROWS_WITH(kernels::paged_prefill_attention(fake, 256, reinterpret_cast<const int32_t*>(fake), 10, 3000, 4,
                                                     cache, seqs, 0.1f, fake, nullptr),
                    doctest::Contains("max_q_len 3000"));
  CHECK_THROWS_WITH(kernels::rms_norm(fake, fake, 3, 0, 1e-6f, fake, nullptr), doctest::Contains("rms_norm: dim"));
  CHECK_THROWS_WITH(kernels::rope(fake, 8, fake, 8, reinterpret_cast<const int64_t*>(fake), fake, fake, 1, 2, 1, 7,
                                  64, nullptr),
                    doctest::Contains("head_dim must be even"));
}

int main(int argc, char** argv) {
  const tandem::CudaProbe probe = tandem::probe_cuda();
  if (!probe.usable) {
    std::printf("SKIPPED: no usable CUDA device: %s\n", probe.detail.c_str());
    return 77;
  }
  std::printf("kernel tests on %s\n", probe.detail.c_str());
  tandem::testing::kernel_test_seed();  // prints the seed
  doctest::Context context(argc, argv);
  return context.run();
}

#else

int main() {
  std::printf("SKIPPED: built without CUDA (no nvcc at configure time, or -Dcuda=disabled)\n");
  return 77;
}

#endif
