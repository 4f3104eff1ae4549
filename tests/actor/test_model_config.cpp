// HF config.json for the Llama, Qwen2 and Qwen3 families: fields, family rules,
// unsupported features named, round trip, and RoPE frequencies against float64.
#include "actor/model_config.h"
#include "core/error.h"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <random>

using namespace tandem;

namespace {

// Shapes of public checkpoints (Qwen3-0.6B, Llama-3.2-1B, Qwen2-0.5B), written here.
const char* qwen3_json = R"({
  "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 151936, "hidden_size": 1024,
  "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
  "head_dim": 128, "max_position_embeddings": 40960, "rms_norm_eps": 1e-06, "rope_theta": 1000000,
  "rope_scaling": null, "tie_word_embeddings": true, "attention_bias": false, "hidden_act": "silu",
  "torch_dtype": "bfloat16", "bos_token_id": 151643, "eos_token_id": 151645, "use_sliding_window": false,
  "sliding_window": null, "transformers_version": "4.51.0"})";

const char* llama_json = R"({
  "model_type": "llama", "vocab_size": 128256, "hidden_size": 2048, "intermediate_size": 8192,
  "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 131072,
  "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": true, "mlp_bias": false,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "torch_dtype": "bfloat16"})";

const char* qwen2_json = R"({
  "model_type": "qwen2", "vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864,
  "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2, "max_position_embeddings": 32768,
  "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "tie_word_embeddings": true, "use_sliding_window": false})";

std::string error_of(const std::string& text) {
  try {
    parse_model_config(text, "config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string with(const char* base, const std::string& key, const std::string& value) {
  std::string s = base;
  size_t brace = s.rfind('}');
  return s.substr(0, brace) + ", \"" + key + "\": " + value + "}";
}

}  // namespace

TEST_CASE("the three families read with their rules") {
  ModelConfig q3 = parse_model_config(qwen3_json, "config.json");
  CHECK(q3.model_type == "qwen3");
  CHECK(q3.head_dim == 128);  // given explicitly, not hidden / heads (64)
  CHECK(q3.qk_norm);
  CHECK_FALSE(q3.attention_bias);
  CHECK(q3.tie_word_embeddings);
  CHECK(q3.eos_token_ids == std::vector<int64_t>{151645});

  ModelConfig ll = parse_model_config(llama_json, "config.json");
  CHECK(ll.head_dim == 64);
  CHECK(ll.rope_scaling.type == "llama3");
  CHECK(ll.rope_scaling.factor == 32.0);
  CHECK_FALSE(ll.qk_norm);
  CHECK(ll.eos_token_ids.size() == 3);

  ModelConfig q2 = parse_model_config(qwen2_json, "config.json");
  CHECK(q2.attention_bias);  // Qwen2 always has q/k/v biases
  CHECK(q2.head_dim == 64);
  CHECK(q2.num_key_value_heads == 2);
}

TEST_CASE("unsupported models and features are errors naming them") {
  CHECK(error_of(R"({"model_type": "mistral"})") ==
        "config.json: model_type: \"mistral\" is not supported (supported: llama, qwen2 or qwen3)");
  CHECK(error_of(with(qwen2_json, "rope_scaling", R"({"rope_type": "yarn", "factor": 4})")) ==
        "config.json: rope_scaling.rope_type: \"yarn\" is not supported (supported: default, llama3)");
  CHECK(error_of(with(llama_json, "hidden_act", "\"gelu\"")) ==
        "config.json: hidden_act: \"gelu\" is not supported (supported: silu)");
  CHECK(error_of(with(llama_json, "mlp_bias", "true")).find("mlp_bias: true is not supported") != std::string::npos);
  CHECK(error_of(with(qwen2_json, "use_sliding_window", "true")).find("sliding-window attention is not supported") !=
        std::string::npos);
  CHECK(error_of(with(qwen2_json, "num_key_value_heads", "4")) ==
        "config.json: num_key_value_heads: 14 attention heads are not a multiple of 4 key/value heads");
  CHECK(error_of(with(qwen2_json, "hidden_size", "-3")) == "config.json: hidden_size: expected a positive integer, got -3");
  CHECK(error_of(R"({"model_type": "qwen3", "vocab_size": 10})") == "config.json: hidden_size: missing (required)");
  CHECK(error_of("{not json").find("config.json: not valid JSON") == 0);
}

TEST_CASE("config.json round-trips") {
  for (const char* text : {qwen3_json, llama_json, qwen2_json}) {
    ModelConfig a = parse_model_config(text, "a.json");
    ModelConfig b = parse_model_config(model_config_to_json(a), "b.json");
    CHECK(model_config_to_json(a) == model_config_to_json(b));
    CHECK(b.head_dim == a.head_dim);
    CHECK(b.attention_bias == a.attention_bias);
    CHECK(b.rope_scaling.factor == a.rope_scaling.factor);
  }
}

TEST_CASE("RoPE frequencies match a float64 reference, with and without llama3 scaling") {
  std::mt19937_64 rng(std::random_device{}());
  for (int round = 0; round < 20; ++round) {
    ModelConfig c = parse_model_config(llama_json, "config.json");
    c.head_dim = 2 * static_cast<int64_t>(4 + rng() % 60);
    c.rope_theta = 1000.0 * static_cast<double>(1 + rng() % 1000);
    c.rope_scaling.factor = 1.0 + static_cast<double>(rng() % 32);
    std::vector<double> ours = rope_inverse_frequencies(c);
    REQUIRE(ours.size() == static_cast<size_t>(c.head_dim / 2));
    for (size_t i = 0; i < ours.size(); ++i) {
      // theta^(-2i/d), then by wavelength band: > orig/low: /factor; < orig/high: kept; else blended.
      double base = std::exp(-std::log(c.rope_theta) * 2.0 * static_cast<double>(i) / static_cast<double>(c.head_dim));
      double wavelength = 2 * M_PI / base;
      double orig = static_cast<double>(c.rope_scaling.original_max_position_embeddings);
      double expected = base;
      if (wavelength > orig / c.rope_scaling.low_freq_factor) {
        expected = base / c.rope_scaling.factor;
      } else if (wavelength >= orig / c.rope_scaling.high_freq_factor) {
        double t = (orig / wavelength - c.rope_scaling.low_freq_factor) /
                   (c.rope_scaling.high_freq_factor - c.rope_scaling.low_freq_factor);
        expected = base / c.rope_scaling.factor + t * (base - base / c.rope_scaling.factor);
      }
      CHECK(std::fabs(ours[i] - expected) <= 1e-12 * expected);
    }
    c.rope_scaling.type = "default";
    std::vector<double> plain = rope_inverse_frequencies(c);
    CHECK(plain[0] == 1.0);
    CHECK(std::fabs(plain.back() - std::pow(c.rope_theta, -static_cast<double>(c.head_dim - 2) / c.head_dim)) <=
          1e-12 * plain.back());
  }
}

TEST_CASE("transformers 5's dtype is read where torch_dtype is absent") {
  nlohmann::json config = nlohmann::json::parse(qwen3_json);
  config.erase("torch_dtype");
  config["dtype"] = "bfloat16";
  CHECK(parse_model_config(config.dump(), "config.json").torch_dtype == "bfloat16");
  config["torch_dtype"] = "float32";  // the older key wins where both are written
  CHECK(parse_model_config(config.dump(), "config.json").torch_dtype == "float32");
}

TEST_CASE("transformers 5's rope_parameters give rope_theta; scaling given only there is refused") {
  nlohmann::json config = nlohmann::json::parse(qwen3_json);
  config.erase("rope_theta");
  config["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 5000000}};
  CHECK(parse_model_config(config.dump(), "config.json").rope_theta == 5000000);
  config["rope_theta"] = 1000000;  // the top-level key wins where both are written
  CHECK(parse_model_config(config.dump(), "config.json").rope_theta == 1000000);
  config.erase("rope_theta");
  config["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 5000000}, {"factor", 4}};
  CHECK(error_of(config.dump()) ==
        "config.json: rope_parameters.rope_type: \"yarn\" scaling given only in rope_parameters is not read yet; add it "
        "as rope_scaling");
}
