#include "actor/model_config.h"

#include "core/error.h"
#include "core/files.h"
#include "core/text.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>

namespace tandem {

namespace {

using json = nlohmann::json;

class Reader {
 public:
  Reader(const json& root, std::string source) : root_(root), source_(std::move(source)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw Error(fmt::format("{}: {}: {}", source_, key, what));
  }
  int64_t positive_int(const std::string& key) const {
    if (!root_.contains(key)) fail(key, "missing (required)");
    return positive_int_value(key, root_[key]);
  }
  int64_t positive_int_or(const std::string& key, int64_t fallback) const {
    if (!root_.contains(key) || root_[key].is_null()) return fallback;
    return positive_int_value(key, root_[key]);
  }
  double positive_number_or(const std::string& key, double fallback) const {
    if (!root_.contains(key) || root_[key].is_null()) return fallback;
    const json& v = root_[key];
    if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>())) {
      fail(key, fmt::format("expected a positive number, got {}", v.dump()));
    }
    return v.get<double>();
  }
  bool flag_or(const std::string& key, bool fallback) const {
    if (!root_.contains(key) || root_[key].is_null()) return fallback;
    if (!root_[key].is_boolean()) fail(key, fmt::format("expected true or false, got {}", root_[key].dump()));
    return root_[key].get<bool>();
  }
  std::string string_or(const std::string& key, const std::string& fallback) const {
    if (!root_.contains(key) || root_[key].is_null()) return fallback;
    if (!root_[key].is_string()) fail(key, fmt::format("expected a string, got {}", root_[key].dump()));
    return root_[key].get<std::string>();
  }
  const json& root() const { return root_; }

 private:
  int64_t positive_int_value(const std::string& key, const json& v) const {
    if (!v.is_number_integer() || v.get<int64_t>() <= 0) fail(key, fmt::format("expected a positive integer, got {}", v.dump()));
    return v.get<int64_t>();
  }
  const json& root_;
  std::string source_;
};

RopeScaling read_rope_scaling(const Reader& r, const std::string& source) {
  RopeScaling s;
  const json& root = r.root();
  if (!root.contains("rope_scaling") || root["rope_scaling"].is_null()) return s;
  const json& v = root["rope_scaling"];
  if (!v.is_object()) r.fail("rope_scaling", fmt::format("expected an object or null, got {}", v.dump()));
  // Transformers has spelled the kind both "rope_type" and "type".
  std::string type = v.contains("rope_type") ? v["rope_type"].get<std::string>()
                     : v.contains("type")    ? v["type"].get<std::string>()
                                             : "default";
  if (type != "default" && type != "llama3") {
    r.fail("rope_scaling.rope_type",
           fmt::format("\"{}\" is not supported (supported: default, llama3)", type));
  }
  s.type = type;
  Reader scaling(v, source + ": rope_scaling");
  if (type == "llama3") {
    s.factor = scaling.positive_number_or("factor", 8.0);
    s.low_freq_factor = scaling.positive_number_or("low_freq_factor", 1.0);
    s.high_freq_factor = scaling.positive_number_or("high_freq_factor", 4.0);
    s.original_max_position_embeddings = scaling.positive_int_or("original_max_position_embeddings", 8192);
    if (s.high_freq_factor <= s.low_freq_factor) {
      r.fail("rope_scaling.high_freq_factor", fmt::format("must exceed low_freq_factor ({} <= {})", s.high_freq_factor,
                                                          s.low_freq_factor));
    }
  }
  return s;
}

}  // namespace

ModelConfig parse_model_config(const std::string& json_text, const std::string& source) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: not valid JSON: {}", source, e.what()));
  }
  if (!root.is_object()) throw Error(fmt::format("{}: expected a JSON object", source));
  Reader r(root, source);
  ModelConfig c;
  c.model_type = r.string_or("model_type", "");
  const std::vector<std::string> supported = {"llama", "qwen2", "qwen3"};
  if (std::find(supported.begin(), supported.end(), c.model_type) == supported.end()) {
    r.fail("model_type", fmt::format("\"{}\" is not supported (supported: {})", c.model_type, join_choices(supported)));
  }
  c.vocab_size = r.positive_int("vocab_size");
  c.hidden_size = r.positive_int("hidden_size");
  c.intermediate_size = r.positive_int("intermediate_size");
  c.num_hidden_layers = r.positive_int("num_hidden_layers");
  c.num_attention_heads = r.positive_int("num_attention_heads");
  c.num_key_value_heads = r.positive_int_or("num_key_value_heads", c.num_attention_heads);
  c.head_dim = r.positive_int_or("head_dim", c.hidden_size / c.num_attention_heads);
  c.max_position_embeddings = r.positive_int_or("max_position_embeddings", 4096);
  c.rms_norm_eps = r.positive_number_or("rms_norm_eps", 1e-6);
  c.rope_theta = r.positive_number_or("rope_theta", 10000.0);
  c.rope_scaling = read_rope_scaling(r, source);
  // transformers 5 writes the RoPE settings into rope_parameters instead.
  if (root.contains("rope_parameters") && !root["rope_parameters"].is_null()) {
    if (!root["rope_parameters"].is_object()) {
      r.fail("rope_parameters", fmt::format("expected an object or null, got {}", root["rope_parameters"].dump()));
    }
    const Reader parameters(root["rope_parameters"], source + ": rope_parameters");
    if (!root.contains("rope_theta")) c.rope_theta = parameters.positive_number_or("rope_theta", c.rope_theta);
    const std::string type = parameters.string_or("rope_type", "default");
    if (type != "default" && c.rope_scaling.type == "default") {
      r.fail("rope_parameters.rope_type",
             fmt::format("\"{}\" scaling given only in rope_parameters is not read yet; add it as rope_scaling", type));
    }
  }
  c.tie_word_embeddings = r.flag_or("tie_word_embeddings", false);
  // transformers 5 writes "dtype" where earlier versions wrote "torch_dtype".
  c.torch_dtype = root.contains("torch_dtype") ? r.string_or("torch_dtype", "float32") : r.string_or("dtype", "float32");
  c.qk_norm = c.model_type == "qwen3";
  c.attention_bias = c.model_type == "qwen2" ? true : r.flag_or("attention_bias", false);

  std::string act = r.string_or("hidden_act", "silu");
  if (act != "silu") r.fail("hidden_act", fmt::format("\"{}\" is not supported (supported: silu)", act));
  if (r.flag_or("mlp_bias", false)) r.fail("mlp_bias", "true is not supported (MLP projections without bias only)");
  if (r.flag_or("use_sliding_window", false)) r.fail("use_sliding_window", "sliding-window attention is not supported");
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    r.fail("num_key_value_heads", fmt::format("{} attention heads are not a multiple of {} key/value heads",
                                              c.num_attention_heads, c.num_key_value_heads));
  }
  if (c.head_dim % 2 != 0) r.fail("head_dim", fmt::format("rotary embeddings need an even head_dim, got {}", c.head_dim));
  if (root.contains("bos_token_id") && root["bos_token_id"].is_number_integer()) c.bos_token_id = root["bos_token_id"].get<int64_t>();
  if (root.contains("eos_token_id")) {
    const json& eos = root["eos_token_id"];
    if (eos.is_number_integer()) c.eos_token_ids.push_back(eos.get<int64_t>());
    else if (eos.is_array())
      for (const json& e : eos)
        if (e.is_number_integer()) c.eos_token_ids.push_back(e.get<int64_t>());
  }
  return c;
}

ModelConfig read_model_config(const std::string& path) {
  std::optional<std::string> text = read_file(path);
  if (!text) throw Error(fmt::format("{}: cannot read the model config", path));
  return parse_model_config(*text, path);
}

std::string model_config_to_json(const ModelConfig& c) {
  static const std::map<std::string, std::string> architectures = {
      {"llama", "LlamaForCausalLM"}, {"qwen2", "Qwen2ForCausalLM"}, {"qwen3", "Qwen3ForCausalLM"}};
  json j = {
      {"architectures", {architectures.at(c.model_type)}},
      {"model_type", c.model_type},
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.hidden_size},
      {"intermediate_size", c.intermediate_size},
      {"num_hidden_layers", c.num_hidden_layers},
      {"num_attention_heads", c.num_attention_heads},
      {"num_key_value_heads", c.num_key_value_heads},
      {"head_dim", c.head_dim},
      {"max_position_embeddings", c.max_position_embeddings},
      {"rms_norm_eps", c.rms_norm_eps},
      {"rope_theta", c.rope_theta},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"hidden_act", "silu"},
      {"torch_dtype", c.torch_dtype},
  };
  if (c.model_type != "qwen2") j["attention_bias"] = c.attention_bias;
  if (c.rope_scaling.type == "llama3") {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", c.rope_scaling.factor},
                         {"low_freq_factor", c.rope_scaling.low_freq_factor},
                         {"high_freq_factor", c.rope_scaling.high_freq_factor},
                         {"original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids[0];
  if (c.eos_token_ids.size() > 1) j["eos_token_id"] = c.eos_token_ids;
  return j.dump(2) + "\n";
}

std::vector<double> rope_inverse_frequencies(const ModelConfig& c) {
  std::vector<double> inv(static_cast<size_t>(c.head_dim / 2));
  for (size_t i = 0; i < inv.size(); ++i) {
    inv[i] = 1.0 / std::pow(c.rope_theta, static_cast<double>(2 * i) / static_cast<double>(c.head_dim));
  }
  if (c.rope_scaling.type == "llama3") {
    // Llama 3: long wavelengths are slowed by `factor`, short ones kept, and the band
    // between the two wavelength bounds blended linearly in 1/wavelength.
    const RopeScaling& s = c.rope_scaling;
    const double original = static_cast<double>(s.original_max_position_embeddings);
    const double low_freq_wavelength = original / s.low_freq_factor;
    const double high_freq_wavelength = original / s.high_freq_factor;
    for (double& f : inv) {
      double wavelength = 2.0 * M_PI / f;
      if (wavelength > low_freq_wavelength) {
        f = f / s.factor;
      } else if (wavelength >= high_freq_wavelength) {
        double smooth = (original / wavelength - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = (1.0 - smooth) * f / s.factor + smooth * f;
      }
    }
  }
  return inv;
}

void limit_to_tokenizer(ModelConfig& config, int64_t tokenizer_ids, const std::string& where) {
  if (tokenizer_ids > config.vocab_size) {
    throw Error(fmt::format("{}: the tokenizer has {} ids but config.json's vocab_size is {}: the model cannot "
                            "read or emit ids {}..{}",
                            where, tokenizer_ids, config.vocab_size, config.vocab_size, tokenizer_ids - 1));
  }
  TANDEM_CHECK(tokenizer_ids > 0, "{}: the tokenizer has no ids", where);
  config.sampled_vocab_size = tokenizer_ids < config.vocab_size ? tokenizer_ids : 0;
}

}  // namespace tandem
