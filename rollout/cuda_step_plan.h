// The host half of a CUDA backend step ("plan, then run"): from the engine's ForwardBatch,
// every index array the step's kernels read, in one int32 buffer (uploaded with one copy)
// plus the int64 cache slots. Plain C++, no CUDA: compiled and unit-tested everywhere.
//
// Device token order: the sequences with exactly one new token first, one row each (their
// attention runs as decode, with q rows [0, decode_seqs)), then the other sequences'
// tokens, packed in batch order (prefill attention, with cu_seqlens over those rows). All
// other operations of a step are per token, so the order changes no result; logit rows
// are mapped through it.
//
// Every value is checked here (token ids, block ids, positions, coverage of the batch), so
// a broken batch is an Error before anything reaches the device.
#pragma once

#include "rollout/model_backend.h"

#include <cstdint>
#include <functional>
#include <vector>

namespace tandem {

struct StepPlanLimits {
  int64_t vocab_size = 0;
  int64_t max_positions = 0;  // max_position_embeddings
  int64_t block_size = 0;
  int64_t num_blocks = 0;     // of the KV cache
  int64_t max_tokens = 0;     // per step (the workspace's rows)
  int64_t max_seqs = 0;       // per step
  int64_t meta_capacity = 0;  // int32 values the device buffer holds
  // Bytes of split-K workspace decode attention needs for `seqs` sequences whose longest
  // context is `max_seq_len` (kernels/paged_attention.h paged_decode_workspace_bytes),
  // and the bytes there are: decode sequences are launched in groups that fit.
  std::function<int64_t(int64_t seqs, int64_t max_seq_len)> decode_workspace_bytes;
  int64_t decode_workspace_capacity = 0;
};

// Decode sequences [first, first + count) attended in one launch.
struct DecodeGroup {
  int64_t first = 0;
  int64_t count = 0;
  int64_t max_seq_len = 0;
};

struct StepPlan {
  int64_t tokens = 0;
  int64_t rows = 0;  // logit rows
  int64_t decode_seqs = 0, prefill_seqs = 0;
  int64_t decode_width = 0, prefill_width = 0;  // block-table columns (rows padded with -1)
  int64_t prefill_max_q_len = 0, prefill_max_seq_len = 0;
  std::vector<DecodeGroup> decode_groups;

  // Offsets into `meta` of its arrays, all int32:
  int64_t ids_at = 0;             // [tokens] token ids, device order
  int64_t positions_at = 0;       // [tokens] positions, device order
  int64_t rows_at = 0;            // [rows] device row of each logit row, in the batch's order
  int64_t decode_lens_at = 0;     // [decode_seqs] context lengths, this step's token included
  int64_t decode_tables_at = 0;   // [decode_seqs, decode_width] block tables
  int64_t prefill_lens_at = 0;    // [prefill_seqs] context lengths, this step's tokens included
  int64_t prefill_cu_at = 0;      // [prefill_seqs + 1] cu_seqlens of their q rows (from 0)
  int64_t prefill_tables_at = 0;  // [prefill_seqs, prefill_width] block tables
  std::vector<int32_t> meta;
  std::vector<int64_t> slots;  // [tokens] cache slot of each token (block * block_size + offset)
};

// Fills `plan` (its vectors are reused) or throws Error naming what is wrong with `batch`.
void plan_step(const ForwardBatch& batch, const StepPlanLimits& limits, StepPlan& plan);

}  // namespace tandem
