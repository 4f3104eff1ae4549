/* llama.cpp as an independent reference for our GGUF files (tests/actor/test_gguf_llama_cpp.cpp).
 *
 *   llama_cpp_logits BACKEND_DIR MODEL.gguf IDS N_GREEDY
 *
 * Loads MODEL.gguf with llama.cpp (its prebuilt CPU backends loaded from BACKEND_DIR),
 * evaluates the comma-separated token IDS in one batch and prints one JSON object:
 *   {"n_vocab": V, "logprobs": [[V log-probs after ids[0]], [after ids[1]], ...],
 *    "greedy": [N_GREEDY ids, each the argmax after the previous]}
 * The log-probs are llama.cpp's float32 logits put through a float64 log-softmax. The
 * context is set up to compute as plainly as llama.cpp can: F32 KV cache, flash attention
 * off, one thread (the sums then run in one fixed order). Exit 1 with a message on stderr
 * for any failure. */
#include <llama.h>
#include <ggml-backend.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void quiet_log(enum ggml_log_level level, const char* text, void* user_data) {
  (void)user_data;
  if (level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static int fail(const char* what) {
  fprintf(stderr, "llama_cpp_logits: %s\n", what);
  return 1;
}

static void print_logprobs(const float* logits, int n_vocab) {
  double top = -INFINITY, sum = 0.0;
  for (int i = 0; i < n_vocab; ++i) top = logits[i] > top ? logits[i] : top;
  for (int i = 0; i < n_vocab; ++i) sum += exp((double)logits[i] - top);
  const double log_sum = log(sum);
  putchar('[');
  for (int i = 0; i < n_vocab; ++i) printf("%s%.9g", i ? "," : "", (double)logits[i] - top - log_sum);
  putchar(']');
}

static int argmax(const float* logits, int n_vocab) {
  int best = 0;
  for (int i = 1; i < n_vocab; ++i) best = logits[i] > logits[best] ? i : best;
  return best;
}

int main(int argc, char** argv) {
  if (argc != 5) return fail("usage: llama_cpp_logits BACKEND_DIR MODEL.gguf IDS N_GREEDY");
  const int n_greedy = atoi(argv[4]);
  int ids[4096];
  int n_ids = 0;
  for (char* p = argv[3]; *p && n_ids < 4096;) {
    ids[n_ids++] = (int)strtol(p, &p, 10);
    if (*p == ',') ++p;
  }
  if (n_ids == 0) return fail("no token ids");

  llama_log_set(quiet_log, NULL);
  ggml_backend_load_all_from_path(argv[1]);
  llama_backend_init();
  struct llama_model_params model_params = llama_model_default_params();
  model_params.n_gpu_layers = 0;
  struct llama_model* model = llama_model_load_from_file(argv[2], model_params);
  if (!model) return fail("llama_model_load_from_file failed");
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));

  struct llama_context_params context_params = llama_context_default_params();
  context_params.n_ctx = (uint32_t)(n_ids + n_greedy + 16);
  context_params.n_batch = (uint32_t)n_ids;
  context_params.n_ubatch = (uint32_t)n_ids;
  context_params.n_threads = 1;
  context_params.n_threads_batch = 1;
  context_params.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  context_params.type_k = GGML_TYPE_F32;
  context_params.type_v = GGML_TYPE_F32;
  context_params.no_perf = true;
  struct llama_context* ctx = llama_init_from_model(model, context_params);
  if (!ctx) return fail("llama_init_from_model failed");

  struct llama_batch batch = llama_batch_init(n_ids, 0, 1);
  for (int i = 0; i < n_ids; ++i) {
    batch.token[i] = ids[i];
    batch.pos[i] = i;
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = 1;  /* every position's logits, not only the last */
  }
  batch.n_tokens = n_ids;
  if (llama_decode(ctx, batch) != 0) return fail("llama_decode of the ids failed");

  printf("{\"n_vocab\": %d, \"logprobs\": [", n_vocab);
  for (int i = 0; i < n_ids; ++i) {
    if (i) putchar(',');
    print_logprobs(llama_get_logits_ith(ctx, i), n_vocab);
  }
  printf("], \"greedy\": [");
  int next = argmax(llama_get_logits_ith(ctx, n_ids - 1), n_vocab);
  for (int t = 0; t < n_greedy; ++t) {
    printf("%s%d", t ? "," : "", next);
    if (t + 1 == n_greedy) break;
    llama_token token = next;
    if (llama_decode(ctx, llama_batch_get_one(&token, 1)) != 0) return fail("llama_decode of a greedy token failed");
    next = argmax(llama_get_logits_ith(ctx, -1), n_vocab);
  }
  printf("]}\n");
  llama_batch_free(batch);
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
