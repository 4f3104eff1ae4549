// Each CUDA kernel of kernels/ against the ceilings measured in the same run, on the
// shapes of a Qwen3-8B-like model in bf16 (hidden 4096, 32 query and 8 KV heads of 128,
// intermediate 12288, vocabulary 151936). One JSON line per figure:
//   {"bench":"kernels_gpu","kernel":"rms_norm","shape":"...","seconds":...,"bytes":...,
//    "gb_per_s":...,"vs_copy":...}                   memory-bound kernels
//   {"bench":"kernels_gpu","kernel":"paged_prefill",...,"tflop_per_s":...,"vs_gemm":...}
// The ceilings come first: "copy" (a device-to-device cudaMemcpy of 1 GiB; bytes read plus
// written over time) and "gemm" (cuBLAS bf16 8192^3 with fp32 accumulation). `vs_copy` and
// `vs_gemm` are a kernel's rate over them. `bytes` counts what a kernel must read and write
// once (its minimum traffic), so vs_copy near 1 means it runs at memory speed. Times are
// medians of --reps runs (cudaEvent), after a warm-up run.
// Without a usable GPU it prints {"bench":"kernels_gpu","skipped":"<reason>"} and exits 0.
#include "core/error.h"
#include "kernels/device_probe.h"
#include "kernels/norm_act.h"
#include "kernels/paged_attention.h"
#include "kernels/rope.h"
#include "kernels/sampling.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

using namespace tandem;
using kernels::bf16;

namespace {

void check(cudaError_t status, const char* call) {
  if (status != cudaSuccess) throw Error(fmt::format("kernels_gpu: {}: {}", call, cudaGetErrorString(status)));
}

void check(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS) throw Error(fmt::format("kernels_gpu: {}: cuBLAS status {}", call, static_cast<int>(status)));
}

// One cudaMalloc'd buffer, freed with its owner.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (data_) cudaFree(data_);
  }
  void* allocate(size_t bytes) {
    check(cudaMalloc(&data_, bytes), "cudaMalloc");
    bytes_ = bytes;
    return data_;
  }
  template <typename T>
  T* as() const { return static_cast<T*>(data_); }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

uint16_t bf16_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return static_cast<uint16_t>(bits >> 16);
}

// `count` bf16 values, uniform in [-1, 1).
bf16* random_bf16(DeviceBuffer& buffer, size_t count, std::mt19937& rng) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<uint16_t> host(count);
  for (uint16_t& v : host) v = bf16_bits(uniform(rng));
  buffer.allocate(count * 2);
  check(cudaMemcpy(buffer.as<void>(), host.data(), count * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
  return buffer.as<bf16>();
}

// `count` bf16 values of 0x3c3c (about 0.0115): for buffers too big to fill from the host
// quickly (KV caches, the embedding table, GEMM inputs), where the values do not change the time.
bf16* filled_bf16(DeviceBuffer& buffer, size_t count) {
  buffer.allocate(count * 2);
  check(cudaMemset(buffer.as<void>(), 0x3c, count * 2), "cudaMemset");
  return buffer.as<bf16>();
}

template <typename T>
T* upload(DeviceBuffer& buffer, const std::vector<T>& host) {
  buffer.allocate(host.size() * sizeof(T));
  check(cudaMemcpy(buffer.as<void>(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  return buffer.as<T>();
}

// Median seconds of `reps` runs of `launch` on the default stream, after one warm-up.
double time_median(int reps, const std::function<void()>& launch) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  launch();
  check(cudaDeviceSynchronize(), "warm-up");
  std::vector<double> seconds;
  for (int r = 0; r < reps; ++r) {
    check(cudaEventRecord(start), "cudaEventRecord");
    launch();
    check(cudaEventRecord(stop), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    seconds.push_back(ms / 1000.0);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

struct Ceilings {
  double copy_gb_per_s = 0;
  double gemm_tflop_per_s = 0;
};

void print(nlohmann::json line) {
  line["bench"] = "kernels_gpu";
  std::printf("%s\n", line.dump().c_str());
  std::fflush(stdout);
}

void report_memory_bound(const Ceilings& ceilings, const std::string& kernel, const std::string& shape, double seconds,
                         double bytes) {
  const double gb_per_s = bytes / seconds / 1e9;
  print({{"kernel", kernel}, {"shape", shape}, {"seconds", seconds}, {"bytes", bytes}, {"gb_per_s", gb_per_s},
         {"vs_copy", gb_per_s / ceilings.copy_gb_per_s}});
}

Ceilings measure_ceilings(int reps) {
  Ceilings c;
  const size_t copy_bytes = size_t{1} << 30;
  DeviceBuffer from, to;
  from.allocate(copy_bytes);
  to.allocate(copy_bytes);
  check(cudaMemset(from.as<void>(), 1, copy_bytes), "cudaMemset");
  const double copy_s = time_median(reps, [&] {
    check(cudaMemcpyAsync(to.as<void>(), from.as<void>(), copy_bytes, cudaMemcpyDeviceToDevice), "cudaMemcpyAsync");
  });
  c.copy_gb_per_s = 2.0 * copy_bytes / copy_s / 1e9;  // read + write
  print({{"ceiling", "copy"}, {"bytes", copy_bytes}, {"seconds", copy_s}, {"gb_per_s", c.copy_gb_per_s}});

  const int n = 8192;
  DeviceBuffer a, b, out;
  filled_bf16(a, size_t{n} * n);
  filled_bf16(b, size_t{n} * n);
  out.allocate(size_t{n} * n * 2);
  cublasHandle_t handle;
  check(cublasCreate(&handle), "cublasCreate");
  const float one = 1, zero = 0;
  const double gemm_s = time_median(reps, [&] {
    check(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a.as<void>(), CUDA_R_16BF, n, b.as<void>(),
                       CUDA_R_16BF, n, &zero, out.as<void>(), CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx");
  });
  cublasDestroy(handle);
  c.gemm_tflop_per_s = 2.0 * n * n * double(n) / gemm_s / 1e12;
  print({{"ceiling", "gemm"}, {"shape", "8192^3 bf16, fp32 accumulate"}, {"seconds", gemm_s},
         {"tflop_per_s", c.gemm_tflop_per_s}});
  return c;
}

constexpr int64_t kHidden = 4096, kQHeads = 32, kKvHeads = 8, kHeadDim = 128, kIntermediate = 12288;
constexpr int64_t kVocab = 151936;

void bench_norm_act(const Ceilings& c, int reps, int64_t rows) {
  std::mt19937 rng(2);
  DeviceBuffer x, residual, weight, out, gate_up, table, ids;
  random_bf16(x, rows * kHidden, rng);
  random_bf16(residual, rows * kHidden, rng);
  random_bf16(weight, kHidden, rng);
  out.allocate(rows * kIntermediate * 2);
  random_bf16(gate_up, rows * 2 * kIntermediate, rng);
  filled_bf16(table, kVocab * kHidden);
  std::vector<int32_t> host_ids(rows);
  for (int32_t& id : host_ids) id = static_cast<int32_t>(rng() % kVocab);
  const int32_t* d_ids = upload(ids, host_ids);
  const std::string shape = fmt::format("rows {} x {}", rows, kHidden);
  const double act = double(rows) * kHidden * 2;  // bytes of one [rows, hidden] bf16 activation

  double s = time_median(reps, [&] {
    kernels::rms_norm<bf16>(x.as<bf16>(), weight.as<bf16>(), rows, kHidden, 1e-6f, out.as<bf16>(), nullptr);
  });
  report_memory_bound(c, "rms_norm", shape, s, 2 * act);
  s = time_median(reps, [&] {
    kernels::fused_add_rms_norm<bf16>(x.as<bf16>(), residual.as<bf16>(), weight.as<bf16>(), rows, kHidden, 1e-6f,
                                      out.as<bf16>(), nullptr);
  });
  report_memory_bound(c, "fused_add_rms_norm", shape, s, 4 * act);
  s = time_median(reps, [&] {
    kernels::silu_mul<bf16>(gate_up.as<bf16>(), rows, kIntermediate, out.as<bf16>(), nullptr);
  });
  report_memory_bound(c, "silu_mul", fmt::format("rows {} x {}", rows, kIntermediate), s,
                      3.0 * rows * kIntermediate * 2);
  s = time_median(reps, [&] {
    kernels::embedding<bf16>(d_ids, table.as<bf16>(), rows, kVocab, kHidden, out.as<bf16>(), nullptr);
  });
  report_memory_bound(c, "embedding", shape, s, 2 * act);
}

void bench_rope_append(const Ceilings& c, int reps, int64_t tokens) {
  std::mt19937 rng(3);
  const int64_t max_positions = 8192, block_size = 16;
  const int64_t row = (kQHeads + 2 * kKvHeads) * kHeadDim;  // a fused qkv row
  DeviceBuffer qkv, cos, sin, positions, slots, key_cache, value_cache;
  bf16* d_qkv = random_bf16(qkv, tokens * row, rng);
  std::vector<double> inverse(kHeadDim / 2);
  for (int64_t i = 0; i < kHeadDim / 2; ++i) inverse[i] = std::pow(1e6, -2.0 * i / kHeadDim);
  std::vector<float> host_cos, host_sin;
  kernels::rope_cos_sin_table(inverse, max_positions, host_cos, host_sin);
  const float* d_cos = upload(cos, host_cos);
  const float* d_sin = upload(sin, host_sin);
  std::vector<int64_t> host_positions(tokens), host_slots(tokens);
  for (int64_t t = 0; t < tokens; ++t) {
    host_positions[t] = static_cast<int64_t>(rng() % max_positions);
    host_slots[t] = t;  // one slot each, blocks in order
  }
  const int64_t* d_positions = upload(positions, host_positions);
  const int64_t* d_slots = upload(slots, host_slots);
  const std::string shape = fmt::format("tokens {}, {} q + {} kv heads of {}", tokens, kQHeads, kKvHeads, kHeadDim);

  double s = time_median(reps, [&] {
    kernels::rope<bf16, int64_t>(d_qkv, row, d_qkv + kQHeads * kHeadDim, row, d_positions, d_cos, d_sin, tokens,
                                 kQHeads, kKvHeads, kHeadDim, max_positions, nullptr);
  });
  report_memory_bound(c, "rope", shape, s, 2.0 * tokens * (kQHeads + kKvHeads) * kHeadDim * 2);

  const int64_t num_blocks = (tokens + block_size - 1) / block_size;
  key_cache.allocate(num_blocks * block_size * kKvHeads * kHeadDim * 2);
  value_cache.allocate(key_cache.bytes());
  const kernels::PagedKvCache<bf16> cache{key_cache.as<bf16>(), value_cache.as<bf16>(), num_blocks, block_size,
                                          kKvHeads, kHeadDim};
  s = time_median(reps, [&] {
    kernels::kv_cache_append<bf16>(d_qkv + kQHeads * kHeadDim, row, d_qkv + (kQHeads + kKvHeads) * kHeadDim, row,
                                   d_slots, tokens, cache, nullptr);
  });
  report_memory_bound(c, "kv_cache_append", shape, s, 4.0 * tokens * kKvHeads * kHeadDim * 2);
}

// A paged cache holding `seqs` sequences of `context` tokens each, blocks shuffled.
struct PagedSetup {
  DeviceBuffer key, value, tables, lens;
  kernels::PagedKvCache<bf16> cache;
  kernels::PagedSequences seqs;
};

void make_paged(PagedSetup& p, int64_t seqs, int64_t context, std::mt19937& rng) {
  const int64_t block_size = 16, per_seq = (context + block_size - 1) / block_size, blocks = seqs * per_seq;
  filled_bf16(p.key, blocks * block_size * kKvHeads * kHeadDim);
  filled_bf16(p.value, blocks * block_size * kKvHeads * kHeadDim);
  std::vector<int32_t> order(blocks);
  for (int64_t i = 0; i < blocks; ++i) order[i] = static_cast<int32_t>(i);
  std::shuffle(order.begin(), order.end(), rng);
  p.cache = {p.key.as<bf16>(), p.value.as<bf16>(), blocks, block_size, kKvHeads, kHeadDim};
  p.seqs = {upload(p.tables, order), upload(p.lens, std::vector<int32_t>(seqs, static_cast<int32_t>(context))), seqs,
            per_seq, context};
}

void bench_decode(const Ceilings& c, int reps, int64_t seqs, int64_t context) {
  std::mt19937 rng(4);
  PagedSetup p;
  make_paged(p, seqs, context, rng);
  DeviceBuffer q, out, workspace;
  random_bf16(q, seqs * kQHeads * kHeadDim, rng);
  out.allocate(seqs * kQHeads * kHeadDim * 2);
  const int64_t workspace_bytes = kernels::paged_decode_workspace_bytes(seqs, kQHeads, kHeadDim, context);
  if (workspace_bytes > 0) workspace.allocate(workspace_bytes);
  const double s = time_median(reps, [&] {
    kernels::paged_decode_attention<bf16>(q.as<bf16>(), kQHeads * kHeadDim, kQHeads, p.cache, p.seqs,
                                          1.0f / std::sqrt(float(kHeadDim)), workspace.as<void>(), workspace_bytes,
                                          out.as<bf16>(), nullptr);
  });
  const double kv_bytes = 2.0 * seqs * context * kKvHeads * kHeadDim * 2;
  report_memory_bound(c, "paged_decode", fmt::format("{} seqs x {} context", seqs, context), s,
                      kv_bytes + 2.0 * seqs * kQHeads * kHeadDim * 2);
}

void bench_prefill(const Ceilings& c, int reps, int64_t seqs, int64_t length) {
  std::mt19937 rng(5);
  PagedSetup p;
  make_paged(p, seqs, length, rng);
  DeviceBuffer q, out, cu;
  random_bf16(q, seqs * length * kQHeads * kHeadDim, rng);
  out.allocate(seqs * length * kQHeads * kHeadDim * 2);
  std::vector<int32_t> host_cu(seqs + 1);
  for (int64_t i = 0; i <= seqs; ++i) host_cu[i] = static_cast<int32_t>(i * length);
  const int32_t* d_cu = upload(cu, host_cu);
  const double s = time_median(reps, [&] {
    kernels::paged_prefill_attention<bf16>(q.as<bf16>(), kQHeads * kHeadDim, d_cu, seqs * length, length, kQHeads,
                                           p.cache, p.seqs, 1.0f / std::sqrt(float(kHeadDim)), out.as<bf16>(),
                                           nullptr);
  });
  // Causal: each query attends (i + 1) keys, two products (QK^T and PV) of head_dim each.
  const double flops = 4.0 * kQHeads * kHeadDim * seqs * (double(length) * (length + 1) / 2);
  const double tflop_per_s = flops / s / 1e12;
  print({{"kernel", "paged_prefill"}, {"shape", fmt::format("{} seqs x {} tokens", seqs, length)}, {"seconds", s},
         {"flops", flops}, {"tflop_per_s", tflop_per_s}, {"vs_gemm", tflop_per_s / c.gemm_tflop_per_s}});
}

void bench_sampling(const Ceilings& c, int reps, int64_t rows, double temperature, int32_t top_k, float top_p) {
  std::mt19937 rng(6);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> host_logits(rows * kVocab);
  for (float& v : host_logits) v = normal(rng);
  DeviceBuffer logits, t, k, p, seeds, positions, tokens, logprobs, sampling_logprobs;
  kernels::SamplingBatch batch;
  batch.logits = upload(logits, host_logits);
  batch.logits_stride = kVocab;
  batch.rows = rows;
  batch.vocab = kVocab;
  batch.temperature = upload(t, std::vector<float>(rows, static_cast<float>(temperature)));
  batch.top_k = upload(k, std::vector<int32_t>(rows, top_k));
  batch.top_p = upload(p, std::vector<float>(rows, top_p));
  std::vector<uint64_t> host_seeds(rows);
  for (uint64_t& seed : host_seeds) seed = rng();
  batch.seeds = upload(seeds, host_seeds);
  batch.positions = upload(positions, std::vector<int64_t>(rows, 100));
  kernels::SamplingOutput out;
  out.tokens = static_cast<int32_t*>(tokens.allocate(rows * 4));
  out.logprobs = static_cast<float*>(logprobs.allocate(rows * 4));
  out.sampling_logprobs = static_cast<float*>(sampling_logprobs.allocate(rows * 4));
  const double s = time_median(reps, [&] { kernels::sample_tokens(batch, out, nullptr); });
  report_memory_bound(c, "sample_tokens",
                      fmt::format("{} rows x {} vocab, T {}, top_k {}, top_p {}", rows, kVocab, temperature, top_k,
                                  top_p),
                      s, double(rows) * kVocab * 4);  // one read of the logits
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 20;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--reps") reps = std::max(1, std::atoi(argv[i + 1]));
  }
  const CudaProbe probe = probe_cuda();
  if (!probe.usable) {
    print({{"skipped", probe.detail}});
    return 0;
  }
  try {
    cudaDeviceProp props;
    check(cudaGetDeviceProperties(&props, 0), "cudaGetDeviceProperties");
    print({{"device", props.name}, {"reps", reps}});
    const Ceilings ceilings = measure_ceilings(reps);
    for (int64_t rows : {1, 256, 8192}) bench_norm_act(ceilings, reps, rows);
    for (int64_t tokens : {256, 8192}) bench_rope_append(ceilings, reps, tokens);
    // KV of 256 x 4096 is 4.3 GB in bf16.
    for (int64_t seqs : {1, 32, 256}) {
      for (int64_t context : {1024, 4096}) bench_decode(ceilings, reps, seqs, context);
    }
    bench_decode(ceilings, reps, 1, 32768);  // one long context: split-K
    bench_prefill(ceilings, reps, 16, 512);
    bench_prefill(ceilings, reps, 2, 4096);
    bench_sampling(ceilings, reps, 256, 0.0, 0, 1.0f);
    bench_sampling(ceilings, reps, 256, 1.0, 0, 1.0f);
    bench_sampling(ceilings, reps, 256, 0.7, 50, 0.9f);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kernels_gpu: %s\n", e.what());
    return 1;
  }
  return 0;
}
