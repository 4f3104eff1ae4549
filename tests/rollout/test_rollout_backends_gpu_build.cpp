// The rollout backend cases only the CUDA builds of the suite run (test_rollout_backends_gpu,
// test_rollout_backends_cudasim): the CUDA backend against the CPU one, its options, and
// the executables' main, which exits 77 with the reason where no CUDA device is usable.
#define DOCTEST_CONFIG_IMPLEMENT
#include "tests/rollout/backends_under_test.h"

using namespace tandem;
using namespace tandem::testing;


namespace {

std::vector<double> log_softmax_row(const float* logits, int64_t vocab) {
  return reference_log_softmax(std::vector<double>(logits, logits + vocab), 1.0);
}

}  // namespace

TEST_CASE("cuda matches the cpu backend: greedy tokens (fp32) and log-probs of the same tokens") {
  auto rng = kernel_test_rng(6);
  for (const BackendUnderTest& b : backends_under_test()) {
    for (const TestModel& m : test_models()) {
      INFO(b.name << ": " << m.name);
      ModelWeights weights = weights_for(b, m.config, rng(), 0.15);
      // Against the CPU backend on the same (bf16-exact for bf16) weights: each within its
      // own bound of the exact log-probs (prompts and responses within 44 tokens).
      const double tolerance = logprob_bound(b, m.config, weights, 44, 1.0, 1) + logprob_bound(kCpu, m.config, weights, 44, 1.0, 1);
      RolloutEngine cpu(m.config, weights, options_for(kCpu));
      std::unique_ptr<ModelBackend> cuda = make_model_backend(m.config, weights, options_for(b, 16));
      RolloutEngine cuda_engine(m.config, weights, options_for(b));
      std::vector<GenerationRequest> requests;
      for (uint64_t id = 0; id < 4; ++id) {
        GenerationRequest r;
        r.id = id;
        r.prompt = prompt_tokens(rng, 2 + 9 * id, m.config.vocab_size);
        r.max_new_tokens = 16;
        r.ignore_eos = true;
        r.sampling.temperature = 0;
        requests.push_back(r);
      }
      const std::vector<GeneratedSample> want = cpu.generate(requests);
      const std::vector<GeneratedSample> got = cuda_engine.generate(requests);
      REQUIRE(got.size() == want.size());
      for (size_t i = 0; i < want.size(); ++i) {
        INFO("request " << i);
        if (b.dtype == "fp32") CHECK(got[i].tokens == want[i].tokens);
        // The CPU's tokens scored by the cuda backend in one prefill (bf16 may choose differently at near-ties).
        std::vector<int32_t> sequence = requests[i].prompt;
        sequence.insert(sequence.end(), want[i].tokens.begin(), want[i].tokens.end());
        const std::vector<float> logits = prefill_logits(*cuda, sequence, scattered_blocks(0, 5));
        const int64_t vocab = m.config.vocab_size;
        for (size_t t = 0; t < want[i].tokens.size(); ++t) {
          const size_t row = requests[i].prompt.size() + t - 1;
          const double lp = log_softmax_row(&logits[row * vocab], vocab)[want[i].tokens[t]];
          INFO("token " << t);
          CHECK(std::abs(lp - want[i].logprobs[t]) <= tolerance);
        }
      }
    }
  }
}

TEST_CASE("cuda options: unknown dtype, and the KV cache honours max_kv_blocks") {
  const TestModel m = test_models()[0];
  ModelWeights weights = random_model_weights(m.config, 1);
  EngineOptions options = options_for(kCudaFp32);
  options.dtype = "fp16";
  CHECK_THROWS_WITH_AS(make_model_backend(m.config, weights, options), doctest::Contains("dtype \"fp16\""),
                       tandem::Error);
  options.dtype = "bf16";
  options.max_kv_blocks = 33;
  CHECK(make_model_backend(m.config, weights, options)->kv_blocks() == 33);
  options.max_kv_blocks = 0;
  options.max_running = 3;  // at most 3 sequences of 512 positions in 4-token blocks
  CHECK(make_model_backend(m.config, weights, options)->kv_blocks() == 3 * 128);
  CHECK(make_model_backend(m.config, weights, options)->name().find("cuda bf16") == 0);
  // Split: a rank per device from cuda_device on, each with the blocks asked for.
  const int devices = probe_cuda().device_count;
  options.tensor_parallel = 2;
  options.max_kv_blocks = 21;
  if (devices >= 2) {
    std::unique_ptr<ModelBackend> split = make_model_backend(m.config, weights, options);
    CHECK(split->tensor_parallel() == 2);
    CHECK(split->kv_blocks() == 21);
    CHECK(split->name().find("cuda bf16, tensor_parallel 2 (devices 0..1") == 0);
  }
  options.cuda_device = devices - 1;  // the second rank has no device
  const std::string missing =
      fmt::format("the engine needs CUDA devices {}..{}; there are {}", devices - 1, devices, devices);
  CHECK_THROWS_WITH_AS(make_model_backend(m.config, weights, options), doctest::Contains(missing.c_str()),
                       tandem::Error);
}

int main(int argc, char** argv) {
  const CudaProbe probe = probe_cuda();
  if (!probe.usable) {
    std::printf("SKIPPED: no usable CUDA device: %s\n", probe.detail.c_str());
    return 77;
  }
  std::printf("rollout backend tests on %s\n", probe.detail.c_str());
  kernel_test_seed();  // prints the seed
  doctest::Context context(argc, argv);
  return context.run();
}

