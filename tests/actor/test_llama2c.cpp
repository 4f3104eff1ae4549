// llama2.c checkpoints: ../shared/data/tinystories/stories260K.bin (real trained weights)
// read into the HF layout, against a float64 forward written here from llama2.c's own
// definition (its file layout and interleaved-pair RoPE, on the unpermuted weights), so
// the q/k row permutation is checked by a model that never uses it. Both our rollout
// engine and our learner module must give its log-probs within the float32 bound of
// tests/support/forward_tolerance.h, and its greedy tokens up to the first near-tie.
// Exits 77 (skip) where the shared data is absent (a user's clone has no ../shared).
#include "actor/llama2c.h"
#include "actor/model_weights.h"
#include "actor/policy_torch.h"
#include "core/error.h"
#include "core/files.h"
#include "tests/support/forward_tolerance.h"
#include "rollout/engine.h"
#include "tests/support/run_tandem.h"

#include <ATen/ATen.h>
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

using namespace tandem;
using namespace tandem::testing;
namespace fs = std::filesystem;

namespace {

const std::string kCheckpoint = TANDEM_SOURCE_DIR "/../shared/data/tinystories/stories260K.bin";

std::string checkpoint_or_skip() {
  if (!fs::is_regular_file(kCheckpoint)) {
    std::printf("skipped: %s is absent (the shared test data; see the project's data README)\n", kCheckpoint.c_str());
    std::exit(77);
  }
  return kCheckpoint;
}

// llama2.c's forward in float64, from its file as stored (run.c's semantics).
class Llama2cReference {
 public:
  explicit Llama2cReference(const std::string& path) {
    const std::string bytes = read_file(path).value();
    int32_t h[7];
    std::memcpy(h, bytes.data(), sizeof h);
    dim_ = h[0], hidden_ = h[1], layers_ = h[2], heads_ = h[3], kv_heads_ = h[4], vocab_ = std::abs(h[5]);
    head_ = dim_ / heads_;
    kv_dim_ = kv_heads_ * head_;
    const float* f = reinterpret_cast<const float*>(bytes.data() + sizeof h);
    auto take = [&](int64_t n) {
      std::vector<double> v(f, f + n);
      f += n;
      return v;
    };
    embedding_ = take(vocab_ * dim_);
    rms_att_ = take(layers_ * dim_);
    wq_ = take(layers_ * dim_ * dim_);
    wk_ = take(layers_ * kv_dim_ * dim_);
    wv_ = take(layers_ * kv_dim_ * dim_);
    wo_ = take(layers_ * dim_ * dim_);
    rms_ffn_ = take(layers_ * dim_);
    w1_ = take(layers_ * hidden_ * dim_);
    w2_ = take(layers_ * dim_ * hidden_);
    w3_ = take(layers_ * hidden_ * dim_);
    rms_final_ = take(dim_);
    REQUIRE(h[5] > 0);  // stories260K shares its classifier with the embedding
  }

  int64_t vocab() const { return vocab_; }

  // Log-softmax of the logits after each token of `ids`: [ids.size()][vocab].
  std::vector<std::vector<double>> logprobs(const std::vector<int32_t>& ids) const {
    const int64_t n = static_cast<int64_t>(ids.size());
    std::vector<std::vector<double>> keys(static_cast<size_t>(layers_ * n)), values(keys.size()), out;
    for (int64_t pos = 0; pos < n; ++pos) {
      std::vector<double> x(embedding_.begin() + ids[pos] * dim_, embedding_.begin() + (ids[pos] + 1) * dim_);
      for (int64_t l = 0; l < layers_; ++l) {
        std::vector<double> xb = rmsnorm(x, &rms_att_[l * dim_]);
        std::vector<double> q = matvec(&wq_[l * dim_ * dim_], xb, dim_, dim_);
        std::vector<double> k = matvec(&wk_[l * kv_dim_ * dim_], xb, kv_dim_, dim_);
        std::vector<double> v = matvec(&wv_[l * kv_dim_ * dim_], xb, kv_dim_, dim_);
        for (int64_t i = 0; i < dim_; i += 2) {  // interleaved pairs, as llama2.c rotates
          const double freq = 1.0 / std::pow(10000.0, static_cast<double>(i % head_) / static_cast<double>(head_));
          const double c = std::cos(pos * freq), s = std::sin(pos * freq);
          for (std::vector<double>* t : {&q, &k}) {
            if (t == &k && i >= kv_dim_) continue;
            const double a = (*t)[i], b = (*t)[i + 1];
            (*t)[i] = a * c - b * s;
            (*t)[i + 1] = a * s + b * c;
          }
        }
        keys[l * n + pos] = k;
        values[l * n + pos] = v;
        std::vector<double> attended(static_cast<size_t>(dim_), 0.0);
        for (int64_t hd = 0; hd < heads_; ++hd) {
          const int64_t kv = hd / (heads_ / kv_heads_);
          std::vector<double> scores;
          double top = -INFINITY;
          for (int64_t t = 0; t <= pos; ++t) {
            double dot = 0;
            for (int64_t i = 0; i < head_; ++i) dot += q[hd * head_ + i] * keys[l * n + t][kv * head_ + i];
            scores.push_back(dot / std::sqrt(static_cast<double>(head_)));
            top = std::max(top, scores.back());
          }
          double sum = 0;
          for (double& sc : scores) sum += (sc = std::exp(sc - top));
          for (int64_t t = 0; t <= pos; ++t) {
            for (int64_t i = 0; i < head_; ++i) attended[hd * head_ + i] += scores[t] / sum * values[l * n + t][kv * head_ + i];
          }
        }
        const std::vector<double> o = matvec(&wo_[l * dim_ * dim_], attended, dim_, dim_);
        for (int64_t i = 0; i < dim_; ++i) x[i] += o[i];
        xb = rmsnorm(x, &rms_ffn_[l * dim_]);
        std::vector<double> gate = matvec(&w1_[l * hidden_ * dim_], xb, hidden_, dim_);
        const std::vector<double> up = matvec(&w3_[l * hidden_ * dim_], xb, hidden_, dim_);
        for (int64_t i = 0; i < hidden_; ++i) gate[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
        const std::vector<double> down = matvec(&w2_[l * dim_ * hidden_], gate, dim_, hidden_);
        for (int64_t i = 0; i < dim_; ++i) x[i] += down[i];
      }
      const std::vector<double> logits = matvec(embedding_.data(), rmsnorm(x, rms_final_.data()), vocab_, dim_);
      double top = -INFINITY, sum = 0;
      for (double z : logits) top = std::max(top, z);
      for (double z : logits) sum += std::exp(z - top);
      std::vector<double> lp;
      for (double z : logits) lp.push_back(z - top - std::log(sum));
      out.push_back(std::move(lp));
    }
    return out;
  }

 private:
  std::vector<double> rmsnorm(const std::vector<double>& x, const double* w) const {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double scale = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + 1e-5);
    std::vector<double> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = w[i] * x[i] * scale;
    return out;
  }
  static std::vector<double> matvec(const double* w, const std::vector<double>& x, int64_t rows, int64_t columns) {
    std::vector<double> out(static_cast<size_t>(rows), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < columns; ++c) out[r] += w[r * columns + c] * x[c];
    }
    return out;
  }

  int64_t dim_ = 0, hidden_ = 0, layers_ = 0, heads_ = 0, kv_heads_ = 0, vocab_ = 0, head_ = 0, kv_dim_ = 0;
  std::vector<double> embedding_, rms_att_, wq_, wk_, wv_, wo_, rms_ffn_, w1_, w2_, w3_, rms_final_;
};

int32_t argmax(const std::vector<double>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// The gap between the largest and second-largest entries: where it is below twice the
// logits' float32 bound, float32 may pick either.
double top_gap(std::vector<double> v) {
  std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<double>());
  return v[0] - v[1];
}

}  // namespace

TEST_CASE("stories260K.bin: our engine's and learner's log-probs and greedy tokens equal llama2.c's, in float64") {
  const std::string path = checkpoint_or_skip();
  const Llama2cReference reference(path);
  const Llama2cModel model = read_llama2c(path);
  CHECK(model.config.vocab_size == 512);
  CHECK(model.config.hidden_size == 64);
  CHECK(model.config.num_key_value_heads == 4);
  CHECK(model.config.tie_word_embeddings);

  // Greedy continuation of BOS + a few ids, in float64 from llama2.c's layout.
  std::vector<int32_t> ids = {1, 403, 407, 261, 378};
  const size_t prompt_length = ids.size();
  const int64_t new_tokens = 24;
  int64_t comparable = new_tokens;  // tokens before any near-tie in the reference
  const int64_t length = static_cast<int64_t>(prompt_length) + new_tokens;
  const double logit_bound = logit_tolerance(model.config, model.weights, length);
  const double logprob_bound = logprob_tolerance(model.config, model.weights, length);
  MESSAGE("float32 bounds: logits " << logit_bound << ", log-probs " << logprob_bound);
  for (int64_t t = 0; t < new_tokens; ++t) {
    const std::vector<double> last = reference.logprobs(ids).back();
    if (comparable == new_tokens && top_gap(last) <= 2 * logit_bound) comparable = t;
    ids.push_back(argmax(last));
  }
  REQUIRE(comparable >= 8);
  const std::vector<std::vector<double>> expected = reference.logprobs(ids);

  // The rollout engine, greedy, no stop token.
  EngineOptions options;
  options.kv_cache_bytes = 8 << 20;
  RolloutEngine engine(model.config, model.weights, options);
  GenerationRequest request;
  request.prompt.assign(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(prompt_length));
  request.max_new_tokens = new_tokens;
  request.sampling.temperature = 0;
  request.ignore_eos = true;
  const std::vector<GeneratedSample> samples = engine.generate({request});
  REQUIRE(samples.size() == 1);
  REQUIRE(samples[0].tokens.size() == static_cast<size_t>(new_tokens));
  double worst_engine = 0;
  for (int64_t t = 0; t < comparable; ++t) {
    INFO("token " << t);
    CHECK(samples[0].tokens[t] == ids[prompt_length + t]);
    const double ref = expected[prompt_length + t - 1][ids[prompt_length + t]];
    const double d = std::abs(samples[0].logprobs[t] - ref);
    worst_engine = std::isnan(d) ? INFINITY : std::max(worst_engine, d);
  }
  MESSAGE("engine: worst log-prob difference " << worst_engine << " over " << comparable << " greedy tokens");
  CHECK(worst_engine <= logprob_bound);

  // The learner's module: every next-token log-prob of the whole sequence.
  PolicyModel learner(model.config, model.weights, at::kFloat);
  const TokenLayout layout = padded_layout({ids});
  const TokenLogProbs lp = token_logprobs(learner.forward(layout), layout, 1.0);
  double worst_learner = 0;
  for (size_t t = 1; t < ids.size(); ++t) {
    const double d = std::abs(lp.logprobs[0][static_cast<int64_t>(t)].item<float>() - expected[t - 1][ids[t]]);
    worst_learner = std::isnan(d) ? INFINITY : std::max(worst_learner, d);
  }
  MESSAGE("learner: worst log-prob difference " << worst_learner << " over " << ids.size() - 1 << " tokens");
  CHECK(worst_learner <= logprob_bound);
}

TEST_CASE("tandem convert writes stories260K as a Hugging Face directory; bad files and formats are clear errors") {
  const std::string path = checkpoint_or_skip();
  TempDir dir;
  const std::string out = dir.path() + "/out.txt";
  REQUIRE(run_tandem({"convert", path, dir.path() + "/hf", "--to", "hf"}, out).exit_code == 0);
  const ModelConfig config = read_model_config(dir.path() + "/hf/config.json");
  const ModelWeights converted = load_model_weights(dir.path() + "/hf", config);
  const ModelWeights direct = read_llama2c(path).weights;
  for (const WeightTensor& t : direct.tensors()) {
    INFO(t.name);
    CHECK(converted.get(t.name).data == t.data);  // float32 both ways: exact
  }
  CHECK(config.bos_token_id == 1);
  // The directory has no tokenizer (llama2.c's is not published here): ids-only use works
  // on it as on the .bin, and training says the model has no tokenizer, naming model.path
  // as written (not a cache directory).
  fs::remove(out);
  REQUIRE_MESSAGE(run_tandem({"generate", "--model", dir.path() + "/hf", "--prompt-ids", "1,403,407", "--temperature",
                              "0", "--max-new-tokens", "4", "--json"},
                             out)
                          .exit_code == 0,
                  read_text(out));
  write_file_atomic(dir.path() + "/train.yaml", "model: {path: hf}\n");
  fs::remove(out);
  CHECK(run_tandem({"validate", dir.path() + "/train.yaml"}, out).exit_code == 2);
  CHECK_MESSAGE(read_text(out).find("model.path: the model " + dir.path() + "/hf has no tokenizer (no tokenizer.json)") !=
                    std::string::npos,
                read_text(out));
  write_file_atomic(dir.path() + "/bin.yaml", "model: {path: " + path + "}\n");
  fs::remove(out);
  CHECK(run_tandem({"validate", dir.path() + "/bin.yaml"}, out).exit_code == 2);
  CHECK_MESSAGE(read_text(out).find("the model " + path + " has no tokenizer") != std::string::npos, read_text(out));

  // A cut-off file, and a format tandem does not write.
  const std::string bytes = read_file(path).value();
  write_file_atomic(dir.path() + "/cut.bin", bytes.substr(0, bytes.size() - 10));
  fs::remove(out);
  CHECK(run_tandem({"convert", dir.path() + "/cut.bin", dir.path() + "/hf2"}, out).exit_code == 2);
  CHECK(read_text(out).find("cut.bin: not a llama2.c checkpoint: 1056530 bytes, and the header implies 1056540") !=
        std::string::npos);
  CHECK_FALSE(fs::exists(dir.path() + "/hf2"));
  fs::remove(out);
  CHECK(run_tandem({"convert", path, dir.path() + "/g", "--to", "onnx"}, out).exit_code == 2);
  CHECK(read_text(out).find("--to: onnx not in {hf,gguf}") != std::string::npos);
}

TEST_CASE("tandem logprobs and generate --prompt-ids --temperature 0 on stories260K.bin give llama2.c's numbers") {
  const std::string path = checkpoint_or_skip();
  const Llama2cReference reference(path);
  std::vector<int32_t> ids = {1, 403, 407};
  for (int t = 0; t < 6; ++t) ids.push_back(argmax(reference.logprobs(ids).back()));
  const std::vector<std::vector<double>> expected = reference.logprobs(ids);
  const Llama2cModel model = read_llama2c(path);
  const double logprob_bound = logprob_tolerance(model.config, model.weights, static_cast<int64_t>(ids.size()));
  std::string id_list;
  for (size_t i = 0; i < ids.size(); ++i) id_list += (i ? "," : "") + std::to_string(ids[i]);

  TempDir dir;
  const std::string out = dir.path() + "/out.txt";
  REQUIRE(run_tandem({"logprobs", "--model", path, "--ids", id_list, "--top-k", "3", "--json"}, out).exit_code == 0);
  std::vector<nlohmann::json> lines;
  std::istringstream text(read_text(out));
  for (std::string line; std::getline(text, line);) {
    if (!line.empty() && line[0] == '{') lines.push_back(nlohmann::json::parse(line));
  }
  REQUIRE(lines.size() == ids.size() - 1);
  for (size_t t = 1; t < ids.size(); ++t) {
    const nlohmann::json& line = lines[t - 1];
    INFO("position " << t);
    CHECK(line.at("token") == ids[t]);
    CHECK(std::abs(line.at("logprob").get<double>() - expected[t - 1][ids[t]]) <= logprob_bound);
    CHECK(line.at("top").at(0).at("token") == argmax(expected[t - 1]));
  }

  fs::remove(out);
  REQUIRE(run_tandem({"generate", "--model", path, "--prompt-ids", "1,403,407", "--temperature", "0",
                      "--max-new-tokens", "6", "--json"},
                     out)
              .exit_code == 0);
  const std::string generated = read_text(out);
  const size_t json_start = generated.find("{\"");  // stdout's line; stderr's summary may come first
  REQUIRE(json_start != std::string::npos);
  const nlohmann::json sample =
      nlohmann::json::parse(generated.substr(json_start, generated.find('\n', json_start) - json_start));
  CHECK(sample.at("token_ids") == std::vector<int32_t>(ids.begin() + 3, ids.end()));
  // Without a tokenizer, text prompts are refused with the reason.
  fs::remove(out);
  CHECK(run_tandem({"generate", "--model", path, "--prompt", "Once"}, out).exit_code == 2);
  CHECK(read_text(out).find("has no tokenizer (a llama2.c checkpoint, a directory without tokenizer.json, or a GGUF file "
                            "without a vocabulary); give --prompt-ids") != std::string::npos);
}
