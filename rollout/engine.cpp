#include "rollout/engine.h"

#include "core/error.h"
#include "core/trace.h"
#include "rollout/kv_cache.h"
#include "rollout/merged_adapters.h"
#include "rollout/model_backend.h"
#include "rollout/scheduler.h"
#include "rollout/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <iterator>
#include <list>
#include <map>
#include <set>

namespace tandem {

const char* finish_reason_name(FinishReason reason) {
  return reason == FinishReason::finish_reason_stop ? "stop" : "length";
}

EngineOptions engine_options(const RolloutConfig& rollout) {
  EngineOptions o;
  o.kv_cache_bytes = rollout.kv_cache_mb << 20;
  o.block_size = rollout.kv_block_size;
  o.max_batch_tokens = rollout.max_batch_tokens;
  o.max_running = rollout.max_running;
  o.threads = static_cast<int>(rollout.threads);
  o.device = rollout.device;
  o.dtype = rollout.dtype;
  o.cpu_weights = rollout.cpu_weights;
  o.gpu_memory_fraction = rollout.gpu_memory_fraction;
  o.prefix_sharing = rollout.prefix_sharing;
  o.tensor_parallel = static_cast<int>(rollout.tensor_parallel);
  return o;
}

namespace {

struct RequestState {
  GenerationRequest request;
  std::set<int32_t> stop_ids;
  size_t longest_stop_string = 0;  // bytes
  int64_t order = 0;  // position among all requests added, for generate()'s output order
};

struct SampleState : Sequence {
  std::list<SampleState>::iterator self;  // for O(1) removal when it finishes
  std::shared_ptr<const RequestState> request;
  GeneratedSample result;
  uint64_t seed = 0;
  bool started = false;
  int64_t max_new_tokens = 0;  // this turn's
  uint64_t session = 0;        // keep_session: its id
};

// From this many logits on, a step's rows are sampled over a thread pool (a hand-off costs
// microseconds; a row of a 150k vocabulary about a millisecond, 256 rows a quarter second).
constexpr int64_t kParallelSamplingValues = int64_t{1} << 18;

// The sample's own stream: (request seed, sample index) mixed into one 64-bit seed.
uint64_t sample_seed(uint64_t request_seed, int64_t index) {
  return static_cast<uint64_t>(uniform_from_counter(request_seed, static_cast<uint64_t>(index)) * 0x1.0p53) ^
         (request_seed << 11);
}

}  // namespace

struct RolloutEngine::Impl {
  Impl(const ModelConfig& config, ModelWeights weights, const EngineOptions& options, Detokenizer detokenize)
      : options(checked(options)),
        model(make_model_backend(config, std::move(weights), options)),
        blocks(model->kv_blocks()),
        scheduler(blocks, SchedulerOptions{options.block_size, options.max_batch_tokens, options.max_running,
                                           options.prefix_sharing, options.max_pinned_blocks}),
        detokenize(std::move(detokenize)) {}

  static const EngineOptions& checked(const EngineOptions& o) {
    TANDEM_CHECK(o.block_size > 0, "block_size must be positive, got {}", o.block_size);
    TANDEM_CHECK(o.max_batch_tokens > 0, "max_batch_tokens must be positive, got {}", o.max_batch_tokens);
    TANDEM_CHECK(o.max_running > 0, "max_running must be positive, got {}", o.max_running);
    return o;
  }

  EngineOptions options;
  std::unique_ptr<ModelBackend> model;
  std::unique_ptr<MergedAdapters> merged_adapters;  // LoRA on a backend that cannot apply them unmerged
  BlockAllocator blocks;
  Scheduler scheduler;
  Detokenizer detokenize;
  Sampler sampler;
  std::unique_ptr<ThreadPool> sampling_pool;  // for steps with many large rows of logits
  std::vector<Sampler> samplers;  // one per pool chunk
  std::vector<SampledToken> drawn;  // per logit row
  std::list<SampleState> samples;  // stable addresses: the scheduler holds pointers
  // Sessions between turns, moved here by splice (addresses stay), by id.
  std::list<SampleState> waiting_sessions;
  std::map<uint64_t, SampleState*> session_index;
  uint64_t next_session = 1;
  int64_t next_arrival = 0;
  int64_t next_order = 0;
  ForwardBatch batch;
  std::vector<float> logits;
};

RolloutEngine::RolloutEngine(const ModelConfig& config, ModelWeights weights, const EngineOptions& options,
                             Detokenizer detokenize)
    : impl_(std::make_unique<Impl>(config, std::move(weights), options, std::move(detokenize))) {
  stats_.kv_blocks_total = impl_->model->kv_blocks();
}

RolloutEngine::~RolloutEngine() = default;

const ModelConfig& RolloutEngine::config() const { return impl_->model->config(); }

std::string RolloutEngine::backend_name() const { return impl_->model->name(); }

bool RolloutEngine::has_unfinished() const { return !impl_->samples.empty(); }

void RolloutEngine::check_request(const GenerationRequest& r) const {
  const std::string where = fmt::format("request {}", r.id);
  TANDEM_CHECK(!r.prompt.empty(), "{}: the prompt is empty", where);
  check_token_ids(where, r.prompt, "prompt token {}");
  if (r.n < 1) throw Error(fmt::format("{}: n must be >= 1, got {}", where, r.n));
  if (r.max_new_tokens < 1) throw Error(fmt::format("{}: max_new_tokens must be >= 1, got {}", where, r.max_new_tokens));
  try {
    check_sampling_params(r.sampling);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", where, e.what()));
  }
  if (!r.stop_strings.empty() && !impl_->detokenize) {
    throw Error(fmt::format("{}: stop strings need a tokenizer, and this engine was built without one", where));
  }
  for (const std::string& s : r.stop_strings) TANDEM_CHECK(!s.empty(), "{}: an empty stop string", where);
  check_fits(where, "prompt", static_cast<int64_t>(r.prompt.size()), r.max_new_tokens);
}

void RolloutEngine::check_token_ids(const std::string& where, const std::vector<int32_t>& ids,
                                    const char* label) const {
  const int64_t vocab = config().vocab_size;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      throw Error(fmt::format("{}: {} is {}, outside the vocabulary (0..{})", where, fmt::format(fmt::runtime(label), i),
                              ids[i], vocab - 1));
    }
  }
}

void RolloutEngine::check_fits(const std::string& where, const char* what, int64_t length,
                               int64_t max_new_tokens) const {
  const ModelConfig& c = config();
  if (length >= c.max_position_embeddings) {
    throw Error(fmt::format("{}: the {} has {} tokens; the model's max_position_embeddings is {}", where, what, length,
                            c.max_position_embeddings));
  }
  const int64_t longest = std::min(length + max_new_tokens, c.max_position_embeddings);
  const int64_t blocks = impl_->scheduler.blocks_needed(longest);
  const int64_t cache_blocks = impl_->model->kv_blocks();
  if (blocks > cache_blocks) {
    const std::string remedy =
        impl_->options.device == "cpu"
            ? fmt::format("({} MB); raise rollout.kv_cache_mb", impl_->options.kv_cache_bytes >> 20)
            : fmt::format("(on {}); raise rollout.gpu_memory_fraction", impl_->model->name());
    throw Error(fmt::format("{}: one sample of {} {} + {} new tokens needs {} KV blocks of {} tokens; the cache has "
                            "{} {} or lower max_new_tokens",
                            where, length, what, max_new_tokens, blocks, impl_->options.block_size, cache_blocks,
                            remedy));
  }
}

void RolloutEngine::add_request(const GenerationRequest& r) {
  check_request(r);
  const ModelConfig& c = config();
  const int64_t prompt_length = static_cast<int64_t>(r.prompt.size());
  auto state = std::make_shared<RequestState>();
  state->request = r;
  state->order = impl_->next_order++;
  state->stop_ids.insert(r.stop_token_ids.begin(), r.stop_token_ids.end());
  if (!r.ignore_eos) state->stop_ids.insert(c.eos_token_ids.begin(), c.eos_token_ids.end());
  for (const std::string& stop : r.stop_strings) state->longest_stop_string = std::max(state->longest_stop_string, stop.size());
  for (int64_t i = 0; i < r.n; ++i) {
    SampleState& s = impl_->samples.emplace_back();
    s.self = std::prev(impl_->samples.end());
    s.arrival = impl_->next_arrival++;
    s.tokens = r.prompt;
    s.prompt_length = prompt_length;
    s.request = state;
    s.seed = sample_seed(r.seed, i);
    s.result.request_id = r.id;
    s.result.sample_index = i;
    s.max_new_tokens = r.max_new_tokens;
    if (r.keep_session) s.session = impl_->next_session++;
    impl_->scheduler.add(&s);
  }
}

std::vector<GeneratedSample> RolloutEngine::step() {
  Impl& m = *impl_;
  const ScheduledStep plan = m.scheduler.plan();
  std::vector<GeneratedSample> finished;
  if (plan.chunks.empty()) return finished;
  ++stats_.steps;
  // A step that runs any prompt tokens is a prefill step in the trace; one-token steps are decode.
  const bool prefill_step = std::any_of(plan.chunks.begin(), plan.chunks.end(), [](const ScheduledChunk& c) {
    return !c.logits_of && !(static_cast<const SampleState*>(c.sequence)->started && c.end - c.begin == 1);
  });
  trace::Span span(prefill_step ? "prefill" : "decode", "generate");
  span.set_count(static_cast<int64_t>(plan.chunks.size()));
  stats_.preemptions = m.scheduler.preemptions();
  stats_.kv_blocks_peak = std::max(stats_.kv_blocks_peak, m.blocks.total() - m.blocks.free_count());

  ForwardBatch& batch = m.batch;
  batch.tokens.clear();
  batch.sequences.clear();
  batch.logit_rows.clear();
  std::vector<SampleState*> sampling;   // samples drawing a token this step
  std::vector<int64_t> sampling_rows;   // ... and the logit row each draws from
  const Sequence* last_drawing = nullptr;  // the latest chunk with a logit row, for its prompt's sharers
  for (const ScheduledChunk& chunk : plan.chunks) {
    auto* s = static_cast<SampleState*>(chunk.sequence);
    if (chunk.logits_of) {  // a sharer: no tokens, the prefill's logits
      TANDEM_CHECK(chunk.logits_of == last_drawing, "a sharer's chunk does not follow its prompt's prefill");
      sampling.push_back(s);
      sampling_rows.push_back(static_cast<int64_t>(batch.logit_rows.size()) - 1);
      s->cached = chunk.end;
      stats_.prefill_tokens_saved += chunk.end;
      continue;
    }
    const int64_t begin = static_cast<int64_t>(batch.tokens.size());
    batch.tokens.insert(batch.tokens.end(), s->tokens.begin() + chunk.begin, s->tokens.begin() + chunk.end);
    batch.sequences.push_back({begin, static_cast<int64_t>(batch.tokens.size()), chunk.begin, s->block_table.data()});
    if (chunk.end == static_cast<int64_t>(s->tokens.size())) {
      batch.logit_rows.push_back(static_cast<int64_t>(batch.tokens.size()) - 1);
      sampling.push_back(s);
      sampling_rows.push_back(static_cast<int64_t>(batch.logit_rows.size()) - 1);
      last_drawing = s;
    }
    s->cached = chunk.end;
    // A started sample running one token is decoding; anything else fills the cache
    // (a prompt, or the recomputation of a preempted sample).
    if (!(s->started && chunk.end - chunk.begin == 1)) stats_.prefill_tokens += chunk.end - chunk.begin;
  }
  const auto forward_start = std::chrono::steady_clock::now();
  if (!plan.copies.empty()) m.model->copy_kv_blocks(plan.copies);
  m.model->forward(batch, m.logits);
  const auto sample_start = std::chrono::steady_clock::now();
  stats_.forward_seconds += std::chrono::duration<double>(sample_start - forward_start).count();

  const ModelConfig& c = config();
  // Every row's draw first: each is a pure function of its logits, parameters and
  // counter-based uniform, so spreading rows over threads changes nothing.
  m.drawn.resize(sampling.size());
  auto draw = [&](int64_t r, Sampler& sampler) {
    const SampleState* s = sampling[r];
    const int64_t position = static_cast<int64_t>(s->tokens.size());  // where the new token goes
    const double u = uniform_from_counter(s->seed, static_cast<uint64_t>(position));
    // Rows are vocab_size wide; only the ids a tokenizer has are drawn (model_config.h).
    m.drawn[r] = sampler.sample(&m.logits[sampling_rows[r] * c.vocab_size], c.sampled_vocab(), s->request->request.sampling, u);
  };
  const int64_t rows = static_cast<int64_t>(sampling.size());
  if (rows > 1 && rows * c.vocab_size >= kParallelSamplingValues) {
    // Created on first use: the backend's forward is done, so its cores are free now.
    if (!m.sampling_pool) m.sampling_pool = std::make_unique<ThreadPool>(m.options.threads);
    const int64_t chunks = std::min<int64_t>(rows, m.sampling_pool->threads());
    m.samplers.resize(static_cast<size_t>(chunks));
    m.sampling_pool->run(chunks, [&](int64_t chunk) {
      for (int64_t r = chunk * rows / chunks; r < (chunk + 1) * rows / chunks; ++r) draw(r, m.samplers[chunk]);
    });
  } else {
    for (int64_t r = 0; r < rows; ++r) draw(r, m.sampler);
  }
  for (size_t r = 0; r < sampling.size(); ++r) {
    SampleState* s = sampling[r];
    const GenerationRequest& request = s->request->request;
    const SampledToken t = m.drawn[r];
    if (s->result.tokens.empty()) s->result.weight_version = weight_version_;
    s->started = true;
    s->result.token_versions.push_back(weight_version_);
    s->tokens.push_back(t.token);
    s->result.tokens.push_back(t.token);
    s->result.logprobs.push_back(t.logprob);
    s->result.sampling_logprobs.push_back(t.sampling_logprob);
    ++stats_.decode_tokens;

    bool done = false;
    if (s->request->stop_ids.count(t.token)) {
      s->result.finish_reason = FinishReason::finish_reason_stop;
      s->result.stop = std::to_string(t.token);
      done = true;
    } else if (!request.stop_strings.empty()) {
      // A stop string completed by this token spans at most its length in tokens (every
      // token is >= 1 byte); 8 more keep a character split at the window's start (a
      // few bytes of U+FFFD) away from it. Decoding only this tail keeps the check O(1)
      // per token instead of re-decoding the whole completion.
      const std::vector<int32_t>& all = s->result.tokens;
      const size_t window = std::min(all.size(), s->request->longest_stop_string + 8);
      const std::string text = m.detokenize(std::vector<int32_t>(all.end() - window, all.end()));
      for (const std::string& stop : request.stop_strings) {
        if (text.find(stop) != std::string::npos) {
          s->result.finish_reason = FinishReason::finish_reason_stop;
          s->result.stop = stop;
          done = true;
          break;
        }
      }
    }
    if (!done && (static_cast<int64_t>(s->result.tokens.size()) >= s->max_new_tokens ||
                  static_cast<int64_t>(s->tokens.size()) >= c.max_position_embeddings)) {
      s->result.finish_reason = FinishReason::finish_reason_length;
      done = true;
    }
    if (done && s->session != 0) {  // the turn ended; the session waits with its blocks
      s->result.session = s->session;
      finished.push_back(s->result);
      s->result.tokens.clear();
      s->result.logprobs.clear();
      s->result.sampling_logprobs.clear();
      s->result.token_versions.clear();
      s->result.stop.clear();
      ++s->result.turn;
      m.scheduler.park(s);
      m.session_index[s->session] = s;
      m.waiting_sessions.splice(m.waiting_sessions.end(), m.samples, s->self);
    } else if (done) {
      m.scheduler.finish(s);
      finished.push_back(std::move(s->result));
      m.samples.erase(s->self);
    }
  }
  stats_.kv_blocks_used = m.blocks.total() - m.blocks.free_count();
  note_session_stats();
  stats_.sample_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - sample_start).count();
  return finished;
}

std::vector<GeneratedSample> RolloutEngine::generate(
    const std::vector<GenerationRequest>& requests,
    const std::function<void(const std::vector<GeneratedSample>&)>& on_finished) {
  TANDEM_CHECK(!has_unfinished(), "generate() needs an idle engine; {} samples are in flight", impl_->samples.size());
  std::map<uint64_t, size_t> order;
  for (size_t i = 0; i < requests.size(); ++i) {
    TANDEM_CHECK(order.emplace(requests[i].id, i).second, "request id {} appears twice", requests[i].id);
  }
  for (const GenerationRequest& r : requests) check_request(r);  // all or nothing
  for (const GenerationRequest& r : requests) add_request(r);
  std::vector<GeneratedSample> out;
  while (has_unfinished()) {
    std::vector<GeneratedSample> done = step();
    if (on_finished) on_finished(done);  // every step, finished samples or none
    for (GeneratedSample& s : done) out.push_back(std::move(s));
  }
  std::sort(out.begin(), out.end(), [&](const GeneratedSample& a, const GeneratedSample& b) {
    size_t oa = order.at(a.request_id), ob = order.at(b.request_id);
    return oa != ob ? oa < ob : a.sample_index < b.sample_index;
  });
  return out;
}

void RolloutEngine::update_weights(const ModelWeights& weights, int64_t version, bool rewind) {
  update_weight_shards({weights}, version, rewind);
}

int RolloutEngine::tensor_parallel() const { return impl_->model->tensor_parallel(); }

void RolloutEngine::add_adapters(const LoraSpec& spec, const ModelWeights& base) {
  if (impl_->model->applies_adapters()) impl_->model->add_adapters(spec);
  else impl_->merged_adapters = std::make_unique<MergedAdapters>(config(), spec, base);
}

void RolloutEngine::update_weight_shards(const std::vector<ModelWeights>& shards, int64_t version, bool rewind) {
  // The same version again is a repeated delivery (a restarted peer's redone request).
  TANDEM_CHECK(rewind || version >= weight_version_,
               "weight version must not go back: engine has {}, update says {} (only a rewind to a checkpoint may)",
               weight_version_, version);
  // Canonical weights (one set) go to every rank, each taking its shard.
  if (shards.size() == 1 && impl_->merged_adapters) impl_->model->update_weights(impl_->merged_adapters->merge(shards[0]));
  else if (shards.size() == 1) impl_->model->update_weights(shards[0]);
  else impl_->model->update_weight_shards(shards);
  // Samples in flight continue on the new weights (a partial rollout): the cache holds the
  // old weights' keys and values, so each is recomputed from its prompt and tokens so far.
  impl_->scheduler.recompute_all();
  weight_version_ = version;
  note_session_stats();
}

void RolloutEngine::note_session_stats() {
  stats_.kv_blocks_used = impl_->blocks.total() - impl_->blocks.free_count();
  stats_.sessions_evicted = impl_->scheduler.evictions();
  stats_.kv_blocks_pinned = impl_->scheduler.pinned_blocks();
  stats_.kv_blocks_pinned_peak = std::max(stats_.kv_blocks_pinned_peak, stats_.kv_blocks_pinned);
}

int64_t RolloutEngine::waiting_sessions() const { return static_cast<int64_t>(impl_->session_index.size()); }

static SampleState* find_session(std::map<uint64_t, SampleState*>& index, uint64_t session) {
  auto it = index.find(session);
  if (it == index.end()) {
    throw Error(fmt::format("session {} is not waiting for a turn (unknown, closed, or still generating)", session));
  }
  return it->second;
}

void RolloutEngine::continue_session(uint64_t session, const std::vector<int32_t>& tokens, int64_t max_new_tokens) {
  Impl& m = *impl_;
  SampleState* s = find_session(m.session_index, session);
  const std::string where = fmt::format("session {} (request {}, sample {})", session, s->result.request_id,
                                        s->result.sample_index);
  check_token_ids(where, tokens, "token {} of the next turn");
  if (max_new_tokens < 1) throw Error(fmt::format("{}: max_new_tokens must be >= 1, got {}", where, max_new_tokens));
  check_fits(where, "conversation", static_cast<int64_t>(s->tokens.size() + tokens.size()), max_new_tokens);
  m.session_index.erase(session);
  s->tokens.insert(s->tokens.end(), tokens.begin(), tokens.end());
  // The new message is this turn's prompt (no other sample shares it: only a sequence
  // with nothing cached can be a prefix-sharing sharer or leader's match).
  s->prompt_length = static_cast<int64_t>(s->tokens.size());
  s->max_new_tokens = max_new_tokens;
  stats_.session_tokens_reused += s->cached;
  m.samples.splice(m.samples.end(), m.waiting_sessions, s->self);
  m.scheduler.resume(s);
  note_session_stats();
}

void RolloutEngine::close_session(uint64_t session) {
  Impl& m = *impl_;
  SampleState* s = find_session(m.session_index, session);
  m.session_index.erase(session);
  m.scheduler.close(s);
  m.waiting_sessions.erase(s->self);
  note_session_stats();
}

}  // namespace tandem
