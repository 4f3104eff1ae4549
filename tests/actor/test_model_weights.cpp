// Model weights: HF names per architecture, checked loading (missing, unexpected,
// misshapen tensors), dtype and sharded round trips.
#include "actor/model_weights.h"
#include "core/error.h"
#include "core/files.h"
#include "core/half.h"
#include "tests/support/reference_model.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <functional>

using namespace tandem;
using namespace tandem::testing;

namespace {

// Writes `weights` as f32 safetensors, applying `edit` to the tensor list first.
void save_edited(const std::string& dir, const ModelWeights& weights,
                 const std::function<void(std::vector<TensorToWrite>&)>& edit) {
  std::vector<TensorToWrite> out;
  for (const WeightTensor& t : weights.tensors()) {
    TensorToWrite w{t.name, DType::f32, t.shape, std::string(t.data.size() * 4, '\0')};
    std::memcpy(w.bytes.data(), t.data.data(), w.bytes.size());
    out.push_back(std::move(w));
  }
  edit(out);
  write_safetensors(dir + "/model.safetensors", out);
}

std::string load_error(const std::string& dir, const ModelConfig& config) {
  try {
    load_model_weights(dir, config);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("expected weights follow the architecture's features") {
  for (const TestModel& m : test_models()) {
    std::vector<std::string> names;
    for (const WeightSpec& spec : expected_weights(m.config)) names.push_back(spec.name);
    auto has = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
    INFO(m.name);
    CHECK(has("model.layers.1.mlp.down_proj.weight"));
    CHECK(has("model.layers.0.self_attn.q_proj.bias") == m.config.attention_bias);
    CHECK(has("model.layers.0.self_attn.o_proj.bias") == (m.config.attention_bias && m.config.model_type != "qwen2"));
    CHECK(has("model.layers.0.self_attn.q_norm.weight") == m.config.qk_norm);
    CHECK(has("lm_head.weight") == !m.config.tie_word_embeddings);
  }
}

TEST_CASE("loading names the missing, unexpected or misshapen tensor") {
  const ModelConfig config = test_models()[0].config;
  const ModelWeights weights = random_model_weights(config, 1);
  TempDir dir;
  save_edited(dir.path(), weights, [](std::vector<TensorToWrite>& t) {
    t.erase(std::remove_if(t.begin(), t.end(), [](const TensorToWrite& x) { return x.name == "model.layers.1.mlp.up_proj.weight"; }),
            t.end());
  });
  CHECK(load_error(dir.path(), config).find("tensor model.layers.1.mlp.up_proj.weight is missing") != std::string::npos);

  save_edited(dir.path(), weights, [](std::vector<TensorToWrite>& t) {
    t.push_back({"model.layers.7.extra.weight", DType::f32, {1}, std::string(4, '\0')});
  });
  CHECK(load_error(dir.path(), config).find("unexpected tensor model.layers.7.extra.weight") != std::string::npos);

  save_edited(dir.path(), weights, [](std::vector<TensorToWrite>& t) {
    for (TensorToWrite& x : t)
      if (x.name == "model.norm.weight") {
        x.shape = {x.shape[0] / 2, 2};
      }
  });
  CHECK(load_error(dir.path(), config).find("tensor model.norm.weight has shape [24, 2], config.json implies [48]") !=
        std::string::npos);

  save_edited(dir.path(), weights, [](std::vector<TensorToWrite>& t) {
    for (TensorToWrite& x : t)
      if (x.name == "model.norm.weight") {
        x.dtype = DType::i32;
      }
  });
  CHECK(load_error(dir.path(), config).find("model.norm.weight") != std::string::npos);
}

TEST_CASE("tied checkpoints that also store lm_head load; f32, bf16 and sharded round trips") {
  const ModelConfig tied = test_models()[2].config;  // qwen2, tied embeddings
  REQUIRE(tied.tie_word_embeddings);
  const ModelWeights weights = random_model_weights(tied, 2, 0.2, true);
  TempDir dir;
  save_edited(dir.path(), weights, [&](std::vector<TensorToWrite>& t) {
    TensorToWrite head = t.front();  // a copy of the embeddings, as HF sometimes saves
    head.name = "lm_head.weight";
    t.push_back(head);
  });
  CHECK(load_model_weights(dir.path(), tied).parameter_count() == weights.parameter_count());

  TempDir f32, bf16, sharded;
  save_model_weights(f32.path(), weights, DType::f32);
  save_model_weights(bf16.path(), weights, DType::bf16);
  save_model_weights(sharded.path(), weights, DType::f32, /*max_shard_bytes=*/20000);
  CHECK(read_file(sharded.path() + "/model.safetensors.index.json").has_value());
  const ModelWeights back_f32 = load_model_weights(f32.path(), tied);
  const ModelWeights back_bf16 = load_model_weights(bf16.path(), tied);
  const ModelWeights back_sharded = load_model_weights(sharded.path(), tied);
  for (const WeightTensor& t : weights.tensors()) {
    CHECK(back_f32.get(t.name).data == t.data);
    CHECK(back_sharded.get(t.name).data == t.data);
    const std::vector<float>& b = back_bf16.get(t.name).data;
    for (size_t i = 0; i < t.data.size(); ++i) {
      if (b[i] != bf16_to_float(float_to_bf16(t.data[i]))) FAIL(t.name << "[" << i << "] is not the bf16 rounding");
    }
  }
}

TEST_CASE("a ModelWeights lookup of an unknown name suggests the closest") {
  const ModelWeights weights = random_model_weights(test_models()[0].config, 3);
  CHECK_THROWS_WITH(weights.get("model.norm.weights"), doctest::Contains("did you mean \"model.norm.weight\""));
}
