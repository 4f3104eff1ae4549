// rollout.tensor_parallel on real weights: stories260K (llama2.c's TinyStories model, read
// from ../shared/data) split over 2 and 4 ranks decodes greedily the tokens the unsplit
// engine decodes, with log-probs within two float32 forwards' bound
// (tests/support/forward_tolerance.h). The random-weight models run split through the
// whole backend conformance suite (test_rollout_backends.cpp); these are trained weights,
// whose logits have the margins a real model has.
#include "actor/llama2c.h"
#include "rollout/engine.h"
#include "tests/support/forward_tolerance.h"

#include <doctest/doctest.h>

#include <filesystem>

using namespace tandem;
using namespace tandem::testing;

namespace {

const std::string kStories = TANDEM_SOURCE_DIR "/../shared/data/tinystories/stories260K.bin";

std::vector<GenerationRequest> greedy_requests() {
  std::vector<GenerationRequest> requests;
  const std::vector<std::vector<int32_t>> prompts = {{1, 403, 407, 261, 378}, {1, 320, 116}, {1, 9, 277, 56, 490, 12}};
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest r;
    r.id = i;
    r.prompt = prompts[i];
    r.max_new_tokens = 40;
    r.sampling.temperature = 0;  // greedy
    requests.push_back(r);
  }
  return requests;
}

}  // namespace

TEST_CASE("stories260K split over 2 and 4 ranks decodes the unsplit engine's greedy tokens") {
  if (!std::filesystem::is_regular_file(kStories)) {
    MESSAGE("skipped: " << kStories << " is absent (the shared test data)");
    return;
  }
  const Llama2cModel model = read_llama2c(kStories);
  EngineOptions options;
  options.kv_cache_bytes = 16 << 20;
  options.threads = 2;
  const std::vector<GenerationRequest> requests = greedy_requests();
  const std::vector<GeneratedSample> whole = RolloutEngine(model.config, model.weights, options).generate(requests);
  const double bound = logprob_agreement(model.config, model.weights, 46);
  for (const int split : {2, 4}) {
    CAPTURE(split);
    options.tensor_parallel = split;
    RolloutEngine engine(model.config, model.weights, options);
    const std::vector<GeneratedSample> got = engine.generate(requests);
    REQUIRE(got.size() == whole.size());
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      CAPTURE(i);
      CHECK(got[i].tokens == whole[i].tokens);
      REQUIRE(got[i].logprobs.size() == whole[i].logprobs.size());
      for (size_t t = 0; t < got[i].logprobs.size(); ++t) {
        const double d = std::abs(static_cast<double>(got[i].logprobs[t]) - whole[i].logprobs[t]);
        worst = std::isnan(d) ? INFINITY : std::max(worst, d);
      }
    }
    CHECK(worst <= bound);
    MESSAGE("stories260K split over ", split, ": ", got[0].tokens.size() + got[1].tokens.size() + got[2].tokens.size(),
            " greedy tokens identical; worst log-prob difference ", worst, " (bound ", bound, ")");
  }
}
