// The policy architecture, read from a Hugging Face config.json.
//
// Supported families: Llama (incl. Llama-3 rope scaling), Qwen2 (q/k/v biases) and
// Qwen3 (per-head q/k RMSNorm). All are decoder-only transformers with RMSNorm,
// rotary embeddings, grouped-query attention and a SwiGLU MLP. A model_type or a
// field value outside what the engine implements is an Error naming it, never a model
// that silently computes something else.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

struct RopeScaling {
  std::string type = "default";  // "default" | "llama3"
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct ModelConfig {
  std::string model_type;  // "llama" | "qwen2" | "qwen3"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // biases on q, k, v projections (Qwen2 always; Llama/Qwen3 per config)
  bool qk_norm = false;         // RMSNorm over head_dim on q and k before RoPE (Qwen3)
  std::string torch_dtype = "float32";
  std::vector<int64_t> eos_token_ids;
  int64_t bos_token_id = -1;
  // Ids the policy may emit: the tokenizer's size when it is below vocab_size. Checkpoints
  // pad the embedding rows to a round number (Qwen: 151936 rows, 151669 tokens); a padded
  // id decodes to nothing, so the rollout engine never samples one and the learner's
  // log-probs normalise over the same ids. Not part of config.json: the controller sets it
  // from the tokenizer (limit_to_tokenizer). 0: every id up to vocab_size.
  int64_t sampled_vocab_size = 0;

  // A sequence classifier (Hugging Face *ForSequenceClassification, a reward model): its
  // head is score.weight [num_labels, hidden] in place of lm_head, and a forward's logit
  // rows are its num_labels scores. 0: a causal LM. Not read from config.json: set by the
  // loader of a classifier's directory (actor/sequence_classifier.h).
  int64_t num_labels = 0;

  // Rows of the output head: the vocabulary, or a classifier's labels.
  int64_t head_rows() const { return num_labels > 0 ? num_labels : vocab_size; }

  int64_t sampled_vocab() const { return sampled_vocab_size > 0 ? sampled_vocab_size : vocab_size; }

  int64_t q_size() const { return num_attention_heads * head_dim; }
  // Llama and Qwen3 put a bias on o_proj too when attention_bias is set; Qwen2 never does.
  bool o_proj_bias() const { return attention_bias && model_type != "qwen2"; }
  int64_t kv_size() const { return num_key_value_heads * head_dim; }
};

// Parses config.json text; `source` names the file in errors.
ModelConfig parse_model_config(const std::string& json_text, const std::string& source);
ModelConfig read_model_config(const std::string& config_json_path);
// The config.json a Hugging Face loader accepts for this architecture.
std::string model_config_to_json(const ModelConfig& config);

// Sets config.sampled_vocab_size to the tokenizer's `tokenizer_ids` when fewer than
// vocab_size. More ids than vocab_size is an Error naming `where` and both numbers.
void limit_to_tokenizer(ModelConfig& config, int64_t tokenizer_ids, const std::string& where);

// RoPE inverse frequencies, head_dim / 2 of them, with the configured scaling applied.
std::vector<double> rope_inverse_frequencies(const ModelConfig& config);

}  // namespace tandem
