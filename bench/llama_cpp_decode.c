/* llama.cpp's batched generation speed: the baseline bench/rollout_cpu measures the rollout
 * engine's CPU backend against, on the same F32 GGUF weights, threads and batch sizes.
 *
 *   llama_cpp_decode BACKEND_DIR MODEL.gguf THREADS BATCHES PROMPT_TOKENS NEW_TOKENS REPEATS
 *
 * BACKEND_DIR holds llama.cpp's prebuilt CPU libraries (scripts/fetch_llama_cpp.sh);
 * BATCHES is a comma-separated list. For each batch size B the context is made for it:
 * F32 KV cache, flash attention off, B sequences (llama.cpp's default per-sequence KV
 * streams), n_ubatch large enough that the prefill is one graph. One run is:
 *   prefill: B prompts of PROMPT_TOKENS ids in one llama_batch (sequence b has seq_id b),
 *            logits for each prompt's last position, the argmax of each row;
 *   decode:  NEW_TOKENS - 1 steps, each one llama_batch of B tokens (each sequence's
 *            previous argmax), logits for all B, the argmax of each row.
 * The prefill samples each sequence's first new token, so NEW_TOKENS new tokens take
 * NEW_TOKENS - 1 decode steps: what the rollout engine runs for max_new_tokens = NEW_TOKENS.
 * The argmax stands in for the engine's greedy sampling; both happen on the host.
 * Prompt ids are bench_prompt_token(b, t, n_vocab), the function rollout_cpu.cpp uses too.
 * One warm-up run (4 new tokens) precedes REPEATS timed runs. One JSON line per batch:
 *   {"impl":"llama.cpp","batch":B,"prefill_seconds":[...],"decode_seconds":[...],
 *    "prefill_tokens":B*PROMPT_TOKENS,"decode_tokens":B*(NEW_TOKENS-1),
 *    "prefill_tokens_per_s":{"median":..,"min":..,"max":..},"decode_tokens_per_s":{...}}
 * Exit 1 with a message on stderr for any failure. */
#include <llama.h>
#include <ggml-backend.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { kMaxBatches = 64, kMaxRepeats = 1000 };

static void quiet_log(enum ggml_log_level level, const char* text, void* user_data) {
  (void)user_data;
  if (level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static int fail(const char* what) {
  fprintf(stderr, "llama_cpp_decode: %s\n", what);
  return 1;
}

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* splitmix64 of (b, t): fixed pseudo-random prompt ids, the same in bench/rollout_cpu.cpp. */
static int32_t bench_prompt_token(int64_t b, int64_t t, int64_t n_vocab) {
  uint64_t z = ((uint64_t)b << 32 | (uint64_t)t) + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (int32_t)(z % (uint64_t)n_vocab);
}

static int32_t argmax(const float* logits, int n_vocab) {
  int32_t best = 0;
  for (int32_t i = 1; i < n_vocab; ++i) best = logits[i] > logits[best] ? i : best;
  return best;
}

static int compare_doubles(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* {"median":..,"min":..,"max":..} of tokens / seconds[i]. */
static void print_rate(const char* name, double tokens, const double* seconds, int n) {
  double rates[kMaxRepeats];
  for (int i = 0; i < n; ++i) rates[i] = tokens / seconds[i];
  qsort(rates, (size_t)n, sizeof(double), compare_doubles);
  const double median = n % 2 ? rates[n / 2] : 0.5 * (rates[n / 2 - 1] + rates[n / 2]);
  printf(",\"%s\":{\"median\":%.2f,\"min\":%.2f,\"max\":%.2f}", name, median, rates[0], rates[n - 1]);
}

static void print_seconds(const char* name, const double* seconds, int n) {
  printf(",\"%s\":[", name);
  for (int i = 0; i < n; ++i) printf("%s%.6f", i ? "," : "", seconds[i]);
  putchar(']');
}

/* One prefill + decode run of `batch` sequences; adds its two times to *prefill_s, *decode_s. */
static int run_once(struct llama_context* ctx, struct llama_batch* tokens, int batch, int prompt_tokens,
                    int new_tokens, int n_vocab, int32_t* next, double* prefill_s, double* decode_s) {
  llama_memory_clear(llama_get_memory(ctx), true);
  tokens->n_tokens = 0;
  for (int b = 0; b < batch; ++b) {
    for (int t = 0; t < prompt_tokens; ++t) {
      const int i = tokens->n_tokens++;
      tokens->token[i] = bench_prompt_token(b, t, n_vocab);
      tokens->pos[i] = t;
      tokens->n_seq_id[i] = 1;
      tokens->seq_id[i][0] = b;
      tokens->logits[i] = t == prompt_tokens - 1;
    }
  }
  double start = now_seconds();
  if (llama_decode(ctx, *tokens) != 0) return fail("llama_decode of the prompts failed");
  for (int b = 0; b < batch; ++b) next[b] = argmax(llama_get_logits_ith(ctx, b * prompt_tokens + prompt_tokens - 1), n_vocab);
  *prefill_s += now_seconds() - start;

  start = now_seconds();
  for (int step = 1; step < new_tokens; ++step) {
    tokens->n_tokens = batch;
    for (int b = 0; b < batch; ++b) {
      tokens->token[b] = next[b];
      tokens->pos[b] = prompt_tokens + step - 1;
      tokens->n_seq_id[b] = 1;
      tokens->seq_id[b][0] = b;
      tokens->logits[b] = 1;
    }
    if (llama_decode(ctx, *tokens) != 0) return fail("llama_decode of a decode step failed");
    for (int b = 0; b < batch; ++b) next[b] = argmax(llama_get_logits_ith(ctx, b), n_vocab);
  }
  *decode_s += now_seconds() - start;
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 8) {
    return fail("usage: llama_cpp_decode BACKEND_DIR MODEL.gguf THREADS BATCHES PROMPT_TOKENS NEW_TOKENS REPEATS");
  }
  const int threads = atoi(argv[3]), prompt_tokens = atoi(argv[5]), new_tokens = atoi(argv[6]);
  const int repeats = atoi(argv[7]);
  int batches[kMaxBatches], n_batches = 0;
  for (char* p = argv[4]; *p && n_batches < kMaxBatches;) {
    batches[n_batches++] = (int)strtol(p, &p, 10);
    if (*p == ',') ++p;
  }
  if (threads < 1 || prompt_tokens < 1 || new_tokens < 2 || repeats < 1 || repeats > kMaxRepeats || n_batches == 0) {
    return fail("THREADS, BATCHES and PROMPT_TOKENS must be positive, NEW_TOKENS at least 2, REPEATS in 1..1000");
  }

  llama_log_set(quiet_log, NULL);
  ggml_backend_load_all_from_path(argv[1]);
  llama_backend_init();
  struct llama_model_params model_params = llama_model_default_params();
  model_params.n_gpu_layers = 0;
  struct llama_model* model = llama_model_load_from_file(argv[2], model_params);
  if (!model) return fail("llama_model_load_from_file failed");
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));

  for (int i = 0; i < n_batches; ++i) {
    const int batch = batches[i];
    if (batch < 1) return fail("batch sizes must be positive");
    const int prefill_tokens = batch * prompt_tokens;
    struct llama_context_params params = llama_context_default_params();
    params.n_ctx = (uint32_t)(batch * (prompt_tokens + new_tokens));
    params.n_seq_max = (uint32_t)batch;
    params.n_batch = (uint32_t)prefill_tokens;
    params.n_ubatch = (uint32_t)prefill_tokens;
    params.n_threads = threads;
    params.n_threads_batch = threads;
    params.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    params.type_k = GGML_TYPE_F32;
    params.type_v = GGML_TYPE_F32;
    params.no_perf = true;
    struct llama_context* ctx = llama_init_from_model(model, params);
    if (!ctx) return fail("llama_init_from_model failed (batch above llama.cpp's sequence limit?)");
    struct llama_batch tokens = llama_batch_init(prefill_tokens, 0, 1);
    int32_t* next = malloc(sizeof(int32_t) * (size_t)batch);
    double prefill_s[kMaxRepeats] = {0}, decode_s[kMaxRepeats] = {0}, warm_prefill = 0, warm_decode = 0;
    const int warm_tokens = new_tokens < 4 ? new_tokens : 4;
    if (run_once(ctx, &tokens, batch, prompt_tokens, warm_tokens, n_vocab, next, &warm_prefill, &warm_decode)) return 1;
    for (int r = 0; r < repeats; ++r) {
      if (run_once(ctx, &tokens, batch, prompt_tokens, new_tokens, n_vocab, next, &prefill_s[r], &decode_s[r])) return 1;
    }
    const double decode_tokens = (double)batch * (new_tokens - 1);
    printf("{\"impl\":\"llama.cpp\",\"batch\":%d,\"threads\":%d,\"prefill_tokens\":%d,\"decode_tokens\":%.0f", batch,
           threads, prefill_tokens, decode_tokens);
    print_rate("prefill_tokens_per_s", prefill_tokens, prefill_s, repeats);
    print_rate("decode_tokens_per_s", decode_tokens, decode_s, repeats);
    print_seconds("prefill_seconds", prefill_s, repeats);
    print_seconds("decode_seconds", decode_s, repeats);
    printf("}\n");
    fflush(stdout);
    free(next);
    llama_batch_free(tokens);
    llama_free(ctx);
  }
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
