#include "rollout/sequence_scorer.h"

#include "core/error.h"
#include "rollout/kv_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

namespace tandem {

namespace {

constexpr int64_t kScoringBlockSize = 16;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

EngineOptions scoring_engine_options(const ModelConfig& c, const ScoringLimits& limits, EngineOptions base) {
  TANDEM_CHECK(limits.max_sequence_tokens > 0 && limits.pass_tokens > 0 && limits.pass_sequences > 0,
               "scoring limits must be positive: {} sequence tokens, {} pass tokens, {} pass sequences",
               limits.max_sequence_tokens, limits.pass_tokens, limits.pass_sequences);
  base.block_size = kScoringBlockSize;
  base.max_batch_tokens = limits.pass_tokens;
  base.max_running = limits.pass_sequences;
  // A pass of whole sequences takes at most one partly filled block per sequence beyond
  // its tokens' blocks; a chunked sequence holds all of its blocks until its last chunk.
  const int64_t blocks = std::max(ceil_div(limits.max_sequence_tokens, kScoringBlockSize),
                                  ceil_div(limits.pass_tokens, kScoringBlockSize) + limits.pass_sequences);
  base.max_kv_blocks = blocks;  // cuda
  const KvCacheShape shape{c.num_hidden_layers, c.num_key_value_heads, c.head_dim, kScoringBlockSize, 0};
  base.kv_cache_bytes = blocks * shape.bytes_per_block();  // cpu
  base.prefix_sharing = false;
  return base;
}

SequenceScorer::SequenceScorer(std::unique_ptr<ModelBackend> backend, const EngineOptions& options, ScoringLimits limits)
    : backend_(std::move(backend)), block_size_(options.block_size), limits_(limits) {
  TANDEM_CHECK(backend_->config().num_labels > 0, "a sequence scorer needs a classifier (num_labels > 0)");
}

std::vector<float> SequenceScorer::score(const std::vector<int32_t>& tokens, const std::vector<uint32_t>& lengths) {
  const ModelConfig& c = backend_->config();
  const int64_t longest = std::min(limits_.max_sequence_tokens, c.max_position_embeddings);
  std::vector<int64_t> starts;
  int64_t total = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] == 0) throw Error(fmt::format("sequence {} of {} to score is empty", i, lengths.size()));
    if (lengths[i] > longest) {
      throw Error(fmt::format("sequence {} of {} to score has {} tokens; this reward model takes at most {} ({})", i,
                              lengths.size(), lengths[i], longest,
                              longest == c.max_position_embeddings ? "its max_position_embeddings"
                                                                   : "the longest prompt and response of the run"));
    }
    starts.push_back(total);
    total += lengths[i];
  }
  if (total != static_cast<int64_t>(tokens.size())) {
    throw Error(fmt::format("{} sequences of {} tokens in all, but the token frame holds {}", lengths.size(), total,
                            tokens.size()));
  }
  std::vector<float> out(lengths.size() * static_cast<size_t>(labels()));
  size_t i = 0;
  while (i < lengths.size()) {
    if (lengths[i] > limits_.pass_tokens) {
      score_chunked(tokens, starts[i], lengths[i], i, out);
      ++i;
      continue;
    }
    // Whole sequences while the pass has room for their tokens, rows and blocks.
    size_t last = i;
    int64_t pass_tokens = 0, pass_blocks = 0;
    while (last < lengths.size() && lengths[last] <= limits_.pass_tokens &&
           static_cast<int64_t>(last - i) < limits_.pass_sequences &&
           pass_tokens + lengths[last] <= limits_.pass_tokens &&
           pass_blocks + blocks_for(lengths[last]) <= backend_->kv_blocks()) {
      pass_tokens += lengths[last];
      pass_blocks += blocks_for(lengths[last]);
      ++last;
    }
    TANDEM_CHECK(last > i, "sequence {} ({} tokens) fits no scoring pass of {} KV blocks", i, lengths[i],
                 backend_->kv_blocks());
    score_pass(tokens, starts, lengths, i, last, out);
    i = last;
  }
  return out;
}

void SequenceScorer::score_pass(const std::vector<int32_t>& tokens, const std::vector<int64_t>& starts,
                                const std::vector<uint32_t>& lengths, size_t first, size_t last,
                                std::vector<float>& out) {
  ForwardBatch batch;
  std::vector<std::vector<int32_t>> tables;
  tables.reserve(last - first);
  int32_t next_block = 0;
  for (size_t s = first; s < last; ++s) {
    const int64_t begin = static_cast<int64_t>(batch.tokens.size());
    batch.tokens.insert(batch.tokens.end(), tokens.begin() + starts[s], tokens.begin() + starts[s] + lengths[s]);
    tables.emplace_back(static_cast<size_t>(blocks_for(lengths[s])));
    std::iota(tables.back().begin(), tables.back().end(), next_block);
    next_block += static_cast<int32_t>(tables.back().size());
    batch.sequences.push_back({begin, begin + lengths[s], 0, tables.back().data()});
    batch.logit_rows.push_back(begin + lengths[s] - 1);
  }
  std::vector<float> scores;
  backend_->forward(batch, scores);
  std::copy(scores.begin(), scores.end(), out.begin() + static_cast<int64_t>(first) * labels());
}

void SequenceScorer::score_chunked(const std::vector<int32_t>& tokens, int64_t start, int64_t length, size_t index,
                                   std::vector<float>& out) {
  std::vector<int32_t> table(static_cast<size_t>(blocks_for(length)));
  std::iota(table.begin(), table.end(), 0);
  std::vector<float> scores;
  for (int64_t done = 0; done < length; done += limits_.pass_tokens) {
    const int64_t count = std::min(limits_.pass_tokens, length - done);
    ForwardBatch batch;
    batch.tokens.assign(tokens.begin() + start + done, tokens.begin() + start + done + count);
    batch.sequences.push_back({0, count, done, table.data()});
    batch.logit_rows.push_back(count - 1);  // kept from the last chunk only
    backend_->forward(batch, scores);
  }
  std::copy(scores.begin(), scores.end(), out.begin() + static_cast<int64_t>(index) * labels());
}

}  // namespace tandem
