// controller/run/memory_estimate.h: the parameter count against the model's own weight
// list, the learner's share under each sharding, and when a run is refused.
#include "actor/model_weights.h"
#include "actor/presets.h"
#include "controller/run/memory_estimate.h"

#include <doctest/doctest.h>

using namespace tandem;

namespace {

const MemoryPart& part(const std::vector<MemoryPart>& parts, const std::string& what) {
  for (const MemoryPart& p : parts) {
    if (p.what == what) return p;
  }
  FAIL("no part ", what);
  static MemoryPart none;
  return none;
}

}  // namespace

TEST_CASE("the estimate's parameter count is the model's, for every preset and a Qwen2/Llama shape") {
  std::vector<ModelConfig> shapes;
  for (const std::string& preset : model_preset_names()) shapes.push_back(model_preset_config(preset));
  ModelConfig qwen2 = model_preset_config("small");  // biases on q, k, v; no qk norm; untied head
  qwen2.model_type = "qwen2";
  qwen2.attention_bias = true;
  qwen2.qk_norm = false;
  qwen2.tie_word_embeddings = false;
  shapes.push_back(qwen2);
  ModelConfig llama = qwen2;  // attention_bias on a llama also biases o_proj
  llama.model_type = "llama";
  shapes.push_back(llama);
  for (const ModelConfig& m : shapes) {
    INFO(m.model_type, " layers ", m.num_hidden_layers);
    CHECK(estimate_memory(Config{}, m, 0).parameters == static_cast<double>(parameter_count(m)));
  }
}

TEST_CASE("a learner rank holds parameters, gradients and moments as its sharding divides them") {
  const ModelConfig m = model_preset_config("small");
  const double p = static_cast<double>(parameter_count(m));
  Config c;
  c.learner.workers = 2;
  c.algorithm.kl.coef = 0;
  c.learner.sharding = "ddp";
  MemoryEstimate e = estimate_memory(c, m, 10);
  CHECK(part(e.learner_rank, "parameters").bytes == 4 * p);
  CHECK(part(e.learner_rank, "gradients").bytes == 4 * p);
  CHECK(part(e.learner_rank, "AdamW moments").bytes == 8 * p);
  CHECK(e.snapshots == 2 * 12 * p * 2);  // two copies of each of 2 ranks' state
  c.learner.sharding = "zero2";
  e = estimate_memory(c, m, 10);
  CHECK(part(e.learner_rank, "parameters").bytes == 4 * p);
  CHECK(part(e.learner_rank, "gradients").bytes == 2 * p);
  CHECK(part(e.learner_rank, "AdamW moments").bytes == 4 * p);
  c.learner.sharding = "fsdp";
  e = estimate_memory(c, m, 10);
  CHECK(part(e.learner_rank, "parameters").bytes == 2 * p);
  c.algorithm.kl.coef = 0.1;  // the frozen reference is whole on every rank
  CHECK(part(estimate_memory(c, m, 10).learner_rank, "KL reference").bytes == 4 * p);
  c.learner.snapshot = "off";
  CHECK(estimate_memory(c, m, 10).snapshots == 0);
  // 2 replicas x 2-way tensor parallel, zero2 over the replicas: a rank holds half the
  // model, and its gradients and moments halved again; sequence parallelism shrinks the
  // activations beyond what the split heads and MLP columns do alone.
  c.learner.workers = 4;
  c.learner.tensor_parallel = 2;
  c.learner.sharding = "zero2";
  c.learner.sequence_parallel = false;
  e = estimate_memory(c, m, 10);
  CHECK(part(e.learner_rank, "parameters").bytes == 2 * p);
  CHECK(part(e.learner_rank, "gradients").bytes == p);
  CHECK(part(e.learner_rank, "AdamW moments").bytes == 2 * p);
  CHECK(part(e.learner_rank, "KL reference").bytes == 2 * p);
  const double split_activations = part(e.learner_rank, "activations of a micro-batch").bytes;
  c.learner.sequence_parallel = true;
  const double sequence_split = part(estimate_memory(c, m, 10).learner_rank, "activations of a micro-batch").bytes;
  c.learner.tensor_parallel = 1;
  const double whole = part(estimate_memory(c, m, 10).learner_rank, "activations of a micro-batch").bytes;
  CHECK(sequence_split < split_activations);
  CHECK(split_activations < whole);
  CHECK(sequence_split == doctest::Approx(whole / 2));
  // LoRA: the base frozen, gradients and moments only for r·(in + out) per targeted projection.
  Config l;
  l.learner.workers = 1;
  l.learner.lora.rank = 8;
  l.learner.lora.target_modules = {"q_proj", "down_proj"};
  l.algorithm.kl.coef = 0.1;
  l.sft.steps = 0;
  const double adapters = 8.0 * static_cast<double>(m.num_hidden_layers) *
                          static_cast<double>(m.hidden_size + m.q_size() + m.intermediate_size + m.hidden_size);
  e = estimate_memory(l, m, 10);
  CHECK(part(e.learner_rank, "frozen base model").bytes == 4 * p);
  CHECK(part(e.learner_rank, "LoRA adapters").bytes == 4 * adapters);
  CHECK(part(e.learner_rank, "gradients").bytes == 4 * adapters);
  CHECK(part(e.learner_rank, "AdamW moments").bytes == 8 * adapters);
  for (const auto& item : e.learner_rank) CHECK(item.what != "KL reference");  // the base is the reference
  l.sft.steps = 5;  // after a warm-up the merged warmed-up policy is the reference: a copy
  CHECK(part(estimate_memory(l, m, 10).learner_rank, "KL reference").bytes == 4 * p);
  // base_dtype bf16: the layer projections in 2 bytes, the rest (embeddings, head, norms) in 4.
  l.learner.lora.base_dtype = "bf16";
  const double projections = static_cast<double>(m.num_hidden_layers) *
                             static_cast<double>(m.hidden_size * (m.q_size() + 2 * m.kv_size()) +
                                                 m.q_size() * m.hidden_size + 3 * m.hidden_size * m.intermediate_size);
  CHECK(part(estimate_memory(l, m, 10).learner_rank, "frozen base model").bytes == 4 * p - 2 * projections);
}

TEST_CASE("a run over this host's memory, or a process over any machine's, is refused with its largest part") {
  const ModelConfig m = model_preset_config("tiny");
  Config c;
  CHECK(memory_problem(c, estimate_memory(c, m, 8), 16e9) == "");
  c.rollout.kv_cache_mb = 10000000;  // 9.5 TiB per worker
  const std::string host = memory_problem(c, estimate_memory(c, m, 8), 16e9);
  CHECK(host.find("this run needs about 19.1 TiB on this host and the machine has 14.9 GiB") == 0);
  CHECK(host.find("most of it the rollout workers: KV cache (rollout.kv_cache_mb), 19.1 TiB") != std::string::npos);
  c.launcher.kind = "slurm";  // other hosts: only what no machine holds is refused
  CHECK(memory_problem(c, estimate_memory(c, m, 8), 16e9) == "");
  ModelConfig huge = m;
  huge.num_hidden_layers = 1000000000;
  const std::string any = memory_problem(c, estimate_memory(c, huge, 8), 16e9);
  CHECK(any.find("a learner rank would need about") == 0);
  CHECK(any.find("more than any machine has") != std::string::npos);
  CHECK(format_bytes(1536) == "1.5 KiB");
  CHECK(format_bytes(3.0 * 1024 * 1024 * 1024) == "3.0 GiB");
}
