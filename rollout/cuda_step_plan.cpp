#include "rollout/cuda_step_plan.h"

#include "core/error.h"

#include <algorithm>

namespace tandem {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Appends each sequence's block table row: the blocks of its context, then -1 (never read).
void append_tables(const std::vector<const ForwardSequence*>& sequences, int64_t width, const StepPlanLimits& limits,
                   std::vector<int32_t>& meta) {
  for (const ForwardSequence* s : sequences) {
    const int64_t used = ceil_div(s->start_position + (s->token_end - s->token_begin), limits.block_size);
    for (int64_t b = 0; b < used; ++b) {
      const int32_t block = s->block_table[b];
      TANDEM_CHECK(block >= 0 && block < limits.num_blocks,
                   "rollout cuda backend: block table entry {} is {}, outside the cache's {} blocks", b, block,
                   limits.num_blocks);
      meta.push_back(block);
    }
    meta.insert(meta.end(), static_cast<size_t>(width - used), -1);
  }
}

}  // namespace

void plan_step(const ForwardBatch& batch, const StepPlanLimits& limits, StepPlan& plan) {
  StepPlan& p = plan;
  std::vector<int32_t> meta = std::move(p.meta);  // keep the capacity
  std::vector<int64_t> slots = std::move(p.slots);
  p = StepPlan{};
  p.tokens = static_cast<int64_t>(batch.tokens.size());
  p.rows = static_cast<int64_t>(batch.logit_rows.size());
  TANDEM_CHECK(p.tokens > 0, "forward with no tokens");
  TANDEM_CHECK(p.tokens <= limits.max_tokens,
               "rollout cuda backend: a step of {} tokens; the workspace holds {} (max_batch_tokens)", p.tokens,
               limits.max_tokens);
  TANDEM_CHECK(static_cast<int64_t>(batch.sequences.size()) <= limits.max_seqs,
               "rollout cuda backend: a step of {} sequences; the workspace holds {} (max_running)",
               batch.sequences.size(), limits.max_seqs);
  TANDEM_CHECK(p.rows <= p.tokens, "rollout cuda backend: {} logit rows for {} tokens", p.rows, p.tokens);

  std::vector<const ForwardSequence*> decode, prefill;
  for (const ForwardSequence& s : batch.sequences) {
    TANDEM_CHECK(s.token_begin >= 0 && s.token_begin < s.token_end && s.token_end <= p.tokens &&
                     s.start_position >= 0 && s.block_table != nullptr,
                 "rollout cuda backend: a sequence of tokens [{}, {}) from position {} in a step of {} tokens",
                 s.token_begin, s.token_end, s.start_position, p.tokens);
    const int64_t seq_len = s.start_position + (s.token_end - s.token_begin);
    TANDEM_CHECK(seq_len <= limits.max_positions,
                 "rollout cuda backend: a sequence of {} tokens; the model's max_position_embeddings is {}", seq_len,
                 limits.max_positions);
    (s.token_end - s.token_begin == 1 ? decode : prefill).push_back(&s);
  }
  p.decode_seqs = static_cast<int64_t>(decode.size());
  p.prefill_seqs = static_cast<int64_t>(prefill.size());

  // Token ids, positions and cache slots in device order.
  meta.assign(static_cast<size_t>(2 * p.tokens), 0);
  slots.assign(static_cast<size_t>(p.tokens), -1);
  std::vector<int64_t> device_row(static_cast<size_t>(p.tokens), -1);  // per batch token
  p.ids_at = 0;
  p.positions_at = p.tokens;
  int64_t next = 0;
  auto place = [&](const ForwardSequence& s) {
    for (int64_t t = s.token_begin; t < s.token_end; ++t) {
      TANDEM_CHECK(device_row[t] < 0, "rollout cuda backend: token {} belongs to two sequences", t);
      const int32_t id = batch.tokens[t];
      TANDEM_CHECK(id >= 0 && id < limits.vocab_size, "token id {} outside the vocabulary (0..{})", id,
                   limits.vocab_size - 1);
      const int64_t position = s.start_position + (t - s.token_begin);
      const int32_t block = s.block_table[position / limits.block_size];
      TANDEM_CHECK(block >= 0 && block < limits.num_blocks,
                   "rollout cuda backend: position {} maps to block {}, outside the cache's {} blocks", position,
                   block, limits.num_blocks);
      device_row[t] = next;
      meta[p.ids_at + next] = id;
      meta[p.positions_at + next] = static_cast<int32_t>(position);
      slots[next] = static_cast<int64_t>(block) * limits.block_size + position % limits.block_size;
      ++next;
    }
  };
  for (const ForwardSequence* s : decode) place(*s);
  for (const ForwardSequence* s : prefill) place(*s);
  TANDEM_CHECK(next == p.tokens, "rollout cuda backend: the step's sequences cover {} of its {} tokens", next,
               p.tokens);

  p.rows_at = static_cast<int64_t>(meta.size());
  for (int64_t t : batch.logit_rows) {
    TANDEM_CHECK(t >= 0 && t < p.tokens, "logit row {} outside the step's {} tokens", t, p.tokens);
    meta.push_back(static_cast<int32_t>(device_row[t]));
  }

  // Decode sequences: lengths, block tables, and launches whose workspace fits.
  p.decode_lens_at = static_cast<int64_t>(meta.size());
  for (const ForwardSequence* s : decode) {
    const int64_t seq_len = s->start_position + 1;
    meta.push_back(static_cast<int32_t>(seq_len));
    p.decode_width = std::max(p.decode_width, ceil_div(seq_len, limits.block_size));
  }
  p.decode_tables_at = static_cast<int64_t>(meta.size());
  append_tables(decode, p.decode_width, limits, meta);
  for (int64_t first = 0; first < p.decode_seqs;) {
    DecodeGroup g{first, 0, 0};
    while (first + g.count < p.decode_seqs) {
      const int64_t longest = std::max<int64_t>(g.max_seq_len, meta[p.decode_lens_at + first + g.count]);
      if (limits.decode_workspace_bytes(g.count + 1, longest) > limits.decode_workspace_capacity) {
        TANDEM_CHECK(g.count > 0, "rollout cuda backend: one decode context of {} tokens needs {} bytes of "
                     "workspace; {} were planned", longest, limits.decode_workspace_bytes(1, longest),
                     limits.decode_workspace_capacity);
        break;
      }
      ++g.count;
      g.max_seq_len = longest;
    }
    p.decode_groups.push_back(g);
    first += g.count;
  }

  // Prefill sequences: lengths, cu_seqlens of their packed q rows, block tables.
  p.prefill_lens_at = static_cast<int64_t>(meta.size());
  for (const ForwardSequence* s : prefill) {
    const int64_t q_len = s->token_end - s->token_begin, seq_len = s->start_position + q_len;
    meta.push_back(static_cast<int32_t>(seq_len));
    p.prefill_width = std::max(p.prefill_width, ceil_div(seq_len, limits.block_size));
    p.prefill_max_q_len = std::max(p.prefill_max_q_len, q_len);
    p.prefill_max_seq_len = std::max(p.prefill_max_seq_len, seq_len);
  }
  p.prefill_cu_at = static_cast<int64_t>(meta.size());
  meta.push_back(0);
  for (const ForwardSequence* s : prefill) meta.push_back(meta.back() + static_cast<int32_t>(s->token_end - s->token_begin));
  p.prefill_tables_at = static_cast<int64_t>(meta.size());
  append_tables(prefill, p.prefill_width, limits, meta);

  TANDEM_CHECK(static_cast<int64_t>(meta.size()) <= limits.meta_capacity,
               "rollout cuda backend: step metadata of {} values; {} planned", meta.size(), limits.meta_capacity);
  p.meta = std::move(meta);
  p.slots = std::move(slots);
}

}  // namespace tandem
