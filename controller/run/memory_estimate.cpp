#include "controller/run/memory_estimate.h"

#include "actor/lora.h"
#include "actor/model_weights.h"

#include <fmt/format.h>

#include <fstream>
#include <set>
#include <sstream>

namespace tandem {

namespace {

constexpr double kFloat = 4;  // bytes: parameters, gradients, moments and activations are float32

double sum(const std::vector<MemoryPart>& parts) {
  double total = 0;
  for (const MemoryPart& p : parts) total += p.bytes;
  return total;
}

// Parameters of one decoder layer, and of the whole model; doubles throughout, so that a
// shape of a billion layers is a large number, not an overflow.
double layer_parameters(const ModelConfig& m) {
  const double h = static_cast<double>(m.hidden_size), q = static_cast<double>(m.num_attention_heads * m.head_dim);
  const double kv = static_cast<double>(m.num_key_value_heads * m.head_dim);
  const double inter = static_cast<double>(m.intermediate_size);
  return h * q + 2 * h * kv + q * h                    // q, k, v, o projections
         + (m.attention_bias ? q + 2 * kv : 0)          // their biases
         + (m.o_proj_bias() ? h : 0)                    //
         + (m.qk_norm ? 2 * static_cast<double>(m.head_dim) : 0)  // Qwen3's q and k norms
         + 3 * h * inter                                // gate, up, down
         + 2 * h;                                       // the two RMSNorm scales
}

double model_parameters(const ModelConfig& m) {
  const double embedding = static_cast<double>(m.vocab_size) * static_cast<double>(m.hidden_size);
  return embedding * (m.tie_word_embeddings ? 1 : 2) + static_cast<double>(m.num_hidden_layers) * layer_parameters(m) +
         static_cast<double>(m.hidden_size);
}

// Saved for the backward of one micro-batch of `tokens` tokens, each of `sequence`:
// per layer and token the inputs of its matrix products and norms (~8 hidden-size
// vectors and 3 of the MLP's width) and the attention probabilities (heads x sequence).
// Split over `t` tensor-parallel ranks a rank holds 1/t of the MLP's width and heads, and
// with sequence parallelism 1/t of the hidden-size vectors too.
double activation_bytes(const ModelConfig& m, double micro_batch, double sequence, double t, bool sequence_parallel) {
  const double tokens = micro_batch * sequence;
  const double hidden_share = sequence_parallel ? 1.0 / t : 1.0;
  const double per_token_layer = 8 * static_cast<double>(m.hidden_size) * hidden_share +
                                 3 * static_cast<double>(m.intermediate_size) / t +
                                 static_cast<double>(m.num_attention_heads) / t * sequence;
  return kFloat * tokens * per_token_layer * static_cast<double>(m.num_hidden_layers);
}

// LoRA's trained values: r·(in + out) for each targeted projection [out, in] of every layer.
double lora_parameters(const ModelConfig& m, const LoraConfig& lora) {
  std::set<std::string> targeted;
  for (int64_t layer = 0; layer < m.num_hidden_layers; ++layer) {
    for (const std::string& module : lora_modules(lora.target_modules)) {
      targeted.insert(lora_module_path(layer, module) + ".weight");
    }
  }
  double values = 0;
  for (const WeightSpec& spec : expected_weights(m)) {
    if (targeted.count(spec.name)) values += static_cast<double>(lora.rank * (spec.shape[0] + spec.shape[1]));
  }
  return values;
}

// The values of the layer projections (what learner.lora.base_dtype bf16 stores in 2 bytes).
double projection_parameters(const ModelConfig& m) {
  double values = 0;
  for (const WeightSpec& spec : expected_weights(m)) {
    if (is_layer_projection_weight(spec.name)) values += static_cast<double>(spec.shape[0] * spec.shape[1]);
  }
  return values;
}

}  // namespace

double MemoryEstimate::learner_rank_bytes() const { return sum(learner_rank); }
double MemoryEstimate::rollout_worker_bytes() const { return sum(rollout_worker); }
double MemoryEstimate::controller_bytes() const { return sum(controller); }

double MemoryEstimate::host_bytes(const Config& c) const {
  return controller_bytes() + static_cast<double>(c.rollout.workers) * rollout_worker_bytes() +
         static_cast<double>(c.learner.workers) * learner_rank_bytes() + snapshots;
}

MemoryEstimate estimate_memory(const Config& c, const ModelConfig& model, int64_t longest_prompt) {
  MemoryEstimate e;
  const double p = model_parameters(model);
  e.parameters = p;
  // Tensor parallelism splits (nearly) every weight over t ranks; the data-parallel
  // strategy then shards a rank's part over the replicas.
  const double t = static_cast<double>(std::max<int64_t>(1, c.learner.tensor_parallel));
  const double ranks = static_cast<double>(c.learner.workers) / t, split = p / t;
  const bool adamw = c.learner.optimizer.name == "adamw";
  const std::string& sharding = c.learner.sharding;
  // LoRA trains its adapters only: the base is frozen and whole on every replica (split
  // over t), and gradients and optimizer state are the adapters'.
  const bool lora = c.learner.lora.enabled();
  const double trained = lora ? lora_parameters(model, c.learner.lora) / t : split;
  // What a rank holds of each: ddp everything; zero2 the parameters whole, gradients and
  // moments sharded; fsdp all of it sharded.
  const double values = sharding == "fsdp" ? trained / ranks : trained;
  const double sharded = sharding == "ddp" ? trained : trained / ranks;
  if (lora) {
    // bf16 storage halves the layer projections; embeddings, head and norms stay float32.
    const double bf16_values = c.learner.lora.base_dtype == "bf16" ? projection_parameters(model) / t : 0;
    e.learner_rank.push_back({"frozen base model", kFloat * (split - bf16_values) + 2 * bf16_values});
  }
  e.learner_rank.push_back({lora ? "LoRA adapters" : "parameters", kFloat * values});
  e.learner_rank.push_back({"gradients", kFloat * sharded});
  if (adamw) e.learner_rank.push_back({"AdamW moments", 2 * kFloat * sharded});
  // The learners hold the reference whenever kl.coef > 0: in the loss, or for the in-reward
  // penalty. Under LoRA it is the base itself (adapters off), until an sft warm-up makes
  // the merged warmed-up policy the reference.
  if (c.algorithm.kl.coef > 0 && (!lora || c.sft.steps > 0)) {
    e.learner_rank.push_back({"KL reference", kFloat * split});
  }
  const int64_t response = c.multi_turn() ? c.rollout.multi_turn.max_total_tokens : c.rollout.max_new_tokens;
  const double sequence = static_cast<double>(longest_prompt) + static_cast<double>(response);
  e.learner_rank.push_back({"activations of a micro-batch",
                            activation_bytes(model, static_cast<double>(c.learner.micro_batch_size), sequence, t,
                                             t > 1 && c.learner.sequence_parallel)});

  e.rollout_worker.push_back({"weights", kFloat * p});
  e.rollout_worker.push_back({"KV cache (rollout.kv_cache_mb)", static_cast<double>(c.rollout.kv_cache_mb) * 1024 * 1024});

  // Per sample and token: the token, its log-prob, loss mask, advantage and old log-prob
  // in the controller's step (samples and the training batch), ~24 bytes.
  const double samples = static_cast<double>(c.data.batch_size) * static_cast<double>(c.algorithm.group_size);
  e.controller.push_back({"a step's samples (data.batch_size x algorithm.group_size)", samples * sequence * 24});

  if (c.learner.snapshot == "memory") {
    const double state = kFloat * values + (adamw ? 2 * kFloat * sharded : 0);
    // The newest whole one and the one being written, for every rank (tensor-parallel ranks hold different parts).
    e.snapshots = 2 * state * static_cast<double>(c.learner.workers);
  }
  return e;
}

std::string format_bytes(double bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 4) {
    bytes /= 1024;
    ++unit;
  }
  if (bytes >= 1e5) return fmt::format("{:.2g} {}", bytes, units[unit]);
  return fmt::format(bytes >= 100 || unit == 0 ? "{:.0f} {}" : "{:.1f} {}", bytes, units[unit]);
}

double machine_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    if (line.rfind("MemTotal:", 0) != 0) continue;
    std::istringstream fields(line.substr(9));
    double kib = 0;
    fields >> kib;
    return kib * 1024;
  }
  return 0;
}

namespace {

std::string parts_text(const std::vector<MemoryPart>& parts) {
  std::string out;
  for (const MemoryPart& p : parts) out += fmt::format("{}{} {}", out.empty() ? "" : ", ", p.what, format_bytes(p.bytes));
  return out;
}

// No machine holds this much in one process (1 PiB).
constexpr double kNoMachine = 1024.0 * 1024 * 1024 * 1024 * 1024;

}  // namespace

std::string describe_memory(const Config& c, const MemoryEstimate& e, double machine_bytes) {
  std::string out = fmt::format("a model of {:.3g} parameters; each learner rank about {} ({}); each rollout worker "
                                "about {} ({}); the controller about {} ({})",
                                e.parameters, format_bytes(e.learner_rank_bytes()), parts_text(e.learner_rank),
                                format_bytes(e.rollout_worker_bytes()), parts_text(e.rollout_worker),
                                format_bytes(e.controller_bytes()), parts_text(e.controller));
  if (e.snapshots > 0) out += fmt::format("; learner snapshots about {} (learner.snapshot_dir)", format_bytes(e.snapshots));
  if (c.launcher.kind == "local") {
    out += fmt::format("; this host, with every worker here, about {}", format_bytes(e.host_bytes(c)));
    if (machine_bytes > 0) out += fmt::format(" of its {}", format_bytes(machine_bytes));
  }
  return out;
}

namespace {

// "the controller's a step's samples (...), 12.0 TiB": what weighs most on a host.
std::string largest_part(const Config& c, const MemoryEstimate& e) {
  std::string what;
  double most = -1;
  const auto consider = [&](const char* owner, const std::vector<MemoryPart>& parts, double copies) {
    for (const MemoryPart& p : parts) {
      if (p.bytes * copies > most) {
        most = p.bytes * copies;
        what = fmt::format("{}: {}, {}", owner, p.what, format_bytes(p.bytes * copies));
      }
    }
  };
  consider("the learner ranks", e.learner_rank, static_cast<double>(c.learner.workers));
  consider("the rollout workers", e.rollout_worker, static_cast<double>(c.rollout.workers));
  consider("the controller", e.controller, 1);
  if (e.snapshots > most) what = "learner snapshots (learner.snapshot: off drops them), " + format_bytes(e.snapshots);
  return what;
}

}  // namespace

std::string memory_problem(const Config& c, const MemoryEstimate& e, double machine_bytes) {
  const std::string numbers = describe_memory(c, e, machine_bytes);
  for (const auto& [name, bytes] : {std::pair<const char*, double>{"a learner rank", e.learner_rank_bytes()},
                                    {"a rollout worker", e.rollout_worker_bytes()},
                                    {"the controller", e.controller_bytes()}}) {
    if (!(bytes < kNoMachine)) {
      return fmt::format("{} would need about {}, more than any machine has (most of it {}). In detail: {}", name,
                         format_bytes(bytes), largest_part(c, e), numbers);
    }
  }
  if (c.launcher.kind == "local" && machine_bytes > 0 && e.host_bytes(c) > machine_bytes) {
    return fmt::format("this run needs about {} on this host and the machine has {} (most of it {}). In detail: {}",
                       format_bytes(e.host_bytes(c)), format_bytes(machine_bytes), largest_part(c, e), numbers);
  }
  return "";
}

}  // namespace tandem
