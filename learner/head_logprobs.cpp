#include "learner/head_logprobs.h"

#include "actor/aten_parallel.h"
#include "actor/fused_linear.h"
#include "actor/onednn_matmul.h"

#include "core/error.h"
#include "learner/head_rows.h"
#include "learner/tensor_parallel_ops.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <limits>

namespace tandem {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Calls visit(row_begin, row_count, vocab_begin, vocab_count) for every tile, vocabulary
// innermost: a block of rows meets the whole vocabulary before the next block starts.
template <class Visit>
void for_each_tile(int64_t rows, int64_t vocab, const HeadTiles& tiles, const Visit& visit) {
  for (int64_t r = 0; r < rows; r += tiles.rows) {
    const int64_t row_count = std::min(tiles.rows, rows - r);
    for (int64_t v = 0; v < vocab; v += tiles.vocab) visit(r, row_count, v, std::min(tiles.vocab, vocab - v));
  }
}

// Whether the head's products go through oneDNN (actor/onednn_matmul.h): on the CPU, in
// float32 or bfloat16. It writes float32 results and sums into the gradients in the same
// pass; libtorch's bfloat16 products return bfloat16 and need a cast pass each (on a
// 151k vocabulary, 12% of a bf16 step in bench/learner_cpu --profile).
bool onednn_products(const at::Tensor& t) {
  return onednn_available() && t.device().is_cpu() && (t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16);
}

// The scaled logits of one tile, float32: hidden[r0 : r0+n] · weight[v0 : v0+m]ᵀ / T,
// [n, m]. `hidden` is already in the compute dtype; the weight's tile is cast to it.
// Written into `out` when given (float32 [n, m], contiguous), else into a new tensor.
at::Tensor tile_logits(const at::Tensor& hidden, const at::Tensor& weight, int64_t r0, int64_t n, int64_t v0,
                       int64_t m, double inverse_temperature, const at::Tensor& out = {}) {
  const at::Tensor w = weight.narrow(0, v0, m).to(hidden.scalar_type());
  if (onednn_products(hidden)) {  // float32 logits written directly, no cast pass
    at::Tensor z = out.defined() ? out : at::empty({n, m}, hidden.options().dtype(at::kFloat));
    onednn_matmul(hidden.narrow(0, r0, n), w.t(), z);
    // The CPU's row passes scale as they read (inverse_temperature 1 here): no pass for x · 1.
    return inverse_temperature == 1.0 ? z : z.mul_(inverse_temperature);
  }
  at::Tensor z = at::mm(hidden.narrow(0, r0, n), w.t()).to(at::kFloat);
  if (inverse_temperature != 1.0) z.mul_(inverse_temperature);
  return out.defined() ? out.copy_(z) : z;
}

// The tile (r0, n, v0, m) of a call's kept logits (HeadTiles::kept_logits_bytes): every
// tile is a contiguous [n, m] block, a block of rows' tiles one after another, so that the
// products write them and the row passes read them as they do a tile of their own.
at::Tensor kept_tile(const at::Tensor& kept, int64_t vocab, int64_t r0, int64_t n, int64_t v0, int64_t m) {
  return kept.narrow(0, r0 * vocab + v0 * n, n * m).view({n, m});
}

// Per row: where the target falls in the tile's columns (clamped into it) and whether it does.
struct TileTargets {
  at::Tensor column;  // [n, 1] int64
  at::Tensor inside;  // [n] bool
};

TileTargets tile_targets(const at::Tensor& targets, int64_t r0, int64_t n, int64_t v0, int64_t m) {
  const at::Tensor local = targets.narrow(0, r0, n) - v0;
  return {local.clamp(0, m - 1).unsqueeze(1), local.ge(0).logical_and(local.lt(m))};
}

// Forward without autograd. Over the vocabulary chunks of a row block each row keeps a
// running maximum `top`, sum = Σ exp(z - top) and moment = Σ exp(z - top) (z - top); then
// log-sum-exp = top + log(sum) and entropy = log(sum) - moment / sum. Both terms of the
// entropy are small for a peaked distribution, where lse - E[z] would cancel in float32.
struct HeadForward {
  at::Tensor logprobs, entropy, log_normaliser;
};

// The group's statistics from each rank's (vocabulary-parallel): the largest maximum, every
// rank's sum and moment rescaled to it and summed, the target's logit from the rank holding it.
void combine_over_group(GroupTensorParallelOps& group, at::Tensor& top, at::Tensor& sum, at::Tensor& moment,
                        at::Tensor& picked) {
  const at::Tensor global_top = group.all_reduce_max(top, "head");
  // A rank's sum relative to the global maximum: Σ exp(z - G) = sum · exp(top - G), and the
  // moment Σ exp(z - G) (z - G) = (moment + sum · (top - G)) · exp(top - G). A rank whose
  // rows all lie at -inf has sum 0: its shift becomes the lowest float, its terms 0.
  const at::Tensor shift = (top - global_top).nan_to_num_(0.0);
  const at::Tensor scale = shift.exp();
  const at::Tensor moments = at::stack({sum * scale, (moment + sum * shift) * scale});
  const at::Tensor summed = group.all_reduce(moments, "head");
  sum = summed[0];
  moment = summed[1];
  picked = group.all_reduce(picked, "head");
  top = global_top;
}

// The CPU forward of one tile (learner/head_rows.h): z = logits * inverse_temperature is
// folded into each row's running statistics in one pass, and the target's z picked.
void fold_tile_cpu(const at::Tensor& logits, const at::Tensor& targets, int64_t r0, int64_t v0,
                   double inverse_temperature, at::Tensor& top, at::Tensor& sum, at::Tensor& moment,
                   at::Tensor& picked) {
  const int64_t n = logits.size(0), m = logits.size(1);
  const float inv_t = static_cast<float>(inverse_temperature);
  const float* z = logits.data_ptr<float>();
  const int64_t* target = targets.data_ptr<int64_t>() + r0;
  float* tops = top.data_ptr<float>() + r0;
  float* sums = sum.data_ptr<float>() + r0;
  float* moments = moment.data_ptr<float>() + r0;
  float* picks = picked.data_ptr<float>() + r0;
  at::parallel_for(0, n, 8, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      head_rows::RowStatistics row{tops[i], sums[i], moments[i]};
      head_rows::fold_tile_row(z + i * m, m, inv_t, row);
      tops[i] = row.top;
      sums[i] = row.sum;
      moments[i] = row.moment;
      const int64_t column = target[i] - v0;
      if (column >= 0 && column < m) picks[i] = z[i * m + column] * inv_t;
    }
  });
}

// `kept`: where the CPU path writes every tile's logits for backward (kept_tile), or undefined.
HeadForward head_forward(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                         double temperature, const HeadTiles& tiles, GroupTensorParallelOps* group,
                         const at::Tensor& kept = {}) {
  const int64_t rows = hidden.size(0), vocab = weight.size(0);
  const at::TensorOptions f32 = hidden.options().dtype(at::kFloat);
  at::Tensor top = at::full({rows}, -std::numeric_limits<float>::infinity(), f32);
  at::Tensor sum = at::zeros({rows}, f32), moment = at::zeros({rows}, f32), picked = at::zeros({rows}, f32);
  const bool fused = hidden.device().is_cpu();
  const at::Tensor targets_c = fused ? targets.contiguous() : targets;
  for_each_tile(rows, vocab, tiles, [&](int64_t r0, int64_t n, int64_t v0, int64_t m) {
    if (fused) {
      const at::Tensor logits =
          tile_logits(hidden, weight, r0, n, v0, m, 1.0, kept.defined() ? kept_tile(kept, vocab, r0, n, v0, m) : kept);
      fold_tile_cpu(logits, targets_c, r0, v0, 1.0 / temperature, top, sum, moment, picked);
      return;
    }
    at::Tensor z = tile_logits(hidden, weight, r0, n, v0, m, 1.0 / temperature);
    const TileTargets target = tile_targets(targets, r0, n, v0, m);
    at::Tensor picked_rows = picked.narrow(0, r0, n);
    picked_rows.copy_(at::where(target.inside, z.gather(1, target.column).squeeze(1), picked_rows));
    at::Tensor old_top = top.narrow(0, r0, n);
    const at::Tensor new_top = at::maximum(old_top, std::get<0>(z.max(1)));
    // Rescale what earlier chunks summed relative to the old maximum: z - new = (z - old) + (old - new).
    // Before the first chunk old_top is -inf: the shift becomes the lowest float, its
    // scale 0, and the sums (0) stay 0.
    const at::Tensor shift = (old_top - new_top).nan_to_num_(0.0);
    const at::Tensor scale = shift.exp();
    at::Tensor sum_rows = sum.narrow(0, r0, n), moment_rows = moment.narrow(0, r0, n);
    moment_rows.add_(sum_rows * shift).mul_(scale);
    sum_rows.mul_(scale);
    z.sub_(new_top.unsqueeze(1));  // z - top
    const at::Tensor e = z.exp();
    sum_rows.add_(e.sum(1));
    moment_rows.add_(e.mul_(z).sum(1));
    old_top.copy_(new_top);
  });
  if (group) combine_over_group(*group, top, sum, moment, picked);
  const at::Tensor log_sum = sum.log();
  HeadForward out;
  out.log_normaliser = top + log_sum;
  out.logprobs = picked - out.log_normaliser;
  out.entropy = log_sum - moment / sum;
  return out;
}

// A tile's share of the input gradients from its logits' gradient grad_z [n, m] (float32,
// or already in `compute`):
// grad_hidden rows += grad_z · w, and grad_w = (or, after the first block of rows, +=)
// grad_zᵀ · h, the products in `compute`, the sums in float32.
// `overwrite`: grad_w is written (the first block of rows into a fresh gradient), else added to.
void accumulate_tile_products(const at::Tensor& grad_z, const at::Tensor& h, const at::Tensor& w,
                              at::ScalarType compute, bool overwrite, at::Tensor grad_hidden_rows, at::Tensor grad_w) {
  if (onednn_products(h)) {
    const at::Tensor g = grad_z.to(compute);
    onednn_matmul(g, w, grad_hidden_rows, /*accumulate=*/true);
    onednn_matmul(g.t(), h, grad_w, /*accumulate=*/!overwrite);
  } else if (compute == at::kFloat) {
    grad_hidden_rows.addmm_(grad_z, w);
    if (overwrite) at::mm_out(grad_w, grad_z.t(), h);
    else grad_w.addmm_(grad_z.t(), h);
  } else {  // products in the compute dtype, sums in float32
    const at::Tensor g = grad_z.to(compute);
    grad_hidden_rows.add_(at::mm(g, w));
    if (overwrite) grad_w.copy_(at::mm(g.t(), h));
    else grad_w.add_(at::mm(g.t(), h));
  }
}

// d logprob_i / d z_ij = [j = y_i] - p_ij and d entropy_i / d z_ij = -p_ij (log p_ij + H_i),
// where z = logits / temperature; the chain rule then goes through z = hidden · weightᵀ / T.
struct FusedHeadLogProbs : public torch::autograd::Function<FusedHeadLogProbs> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& weight,
                               const at::Tensor& targets, double temperature, int64_t tile_rows, int64_t tile_vocab,
                               int64_t kept_logits_bytes, int64_t compute_dtype, int64_t group_handle,
                               const std::vector<at::Tensor>& cast_and_buffer) {
    // The weight's kept cast and its gradient buffer, each possibly undefined: passed in a
    // vector, an argument libtorch does not look into (neither takes a gradient, and
    // libtorch 1.13 refuses an undefined tensor as an input).
    const at::Tensor& weight_in_compute = cast_and_buffer.at(0);
    // Not saved for backward: other gradients added into the same buffer first would fail
    // its version check.
    if (cast_and_buffer.at(1).defined()) ctx->saved_data["gradient_buffer"] = cast_and_buffer[1];
    ctx->set_materialize_grads(false);
    const HeadTiles tiles{tile_rows, tile_vocab};
    const at::ScalarType compute = static_cast<at::ScalarType>(compute_dtype);
    // The weight in the compute dtype once per call (a no-op in float32) unless the caller
    // kept one, saved for backward.
    const at::Tensor weight_c = weight_in_compute.defined() ? weight_in_compute : weight.to(compute);
    at::Tensor kept;
    const int64_t logits_count = hidden.size(0) * weight.size(0);
    // Only the CPU path (head_forward's fused tiles) writes them.
    if (hidden.device().is_cpu() && logits_count > 0 &&
        logits_count <= kept_logits_bytes / static_cast<int64_t>(sizeof(float))) {
      kept = at::empty({logits_count}, hidden.options().dtype(at::kFloat));
    }
    HeadForward f = head_forward(hidden.to(compute), weight_c, targets, temperature, tiles,
                                 reinterpret_cast<GroupTensorParallelOps*>(group_handle), kept);
    ctx->save_for_backward({hidden, weight_c, targets, f.log_normaliser, f.entropy, kept});
    ctx->saved_data["compute"] = compute_dtype;
    ctx->saved_data["weight_dtype"] = static_cast<int64_t>(weight.scalar_type());
    ctx->saved_data["temperature"] = temperature;
    ctx->saved_data["tile_rows"] = tile_rows;
    ctx->saved_data["tile_vocab"] = tile_vocab;
    return {f.logprobs, f.entropy};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& hidden = saved[0];
    const at::Tensor& weight_c = saved[1];  // in the compute dtype
    const at::Tensor& targets = saved[2];
    const at::Tensor& lse = saved[3];
    const at::Tensor& entropy = saved[4];
    const at::Tensor& kept = saved[5];  // forward's logits, or undefined: recompute them
    const double inverse_temperature = 1.0 / ctx->saved_data["temperature"].toDouble();
    const HeadTiles tiles{ctx->saved_data["tile_rows"].toInt(), ctx->saved_data["tile_vocab"].toInt()};
    const at::Tensor& grad_logprobs = grads[0];
    const at::Tensor& grad_entropy = grads[1];
    const variable_list none(10);
    if (!grad_logprobs.defined() && !grad_entropy.defined()) return none;

    const int64_t rows = hidden.size(0), vocab = weight_c.size(0);
    const at::ScalarType compute = static_cast<at::ScalarType>(ctx->saved_data["compute"].toInt());
    const at::Tensor hidden_c = hidden.to(compute);
    // float32 accumulators whatever the compute dtype. The first block of rows writes each
    // slice of the weight's gradient, later blocks add to it: no pass to zero it first
    // (600 MB for a 151k x 1024 head).
    const at::TensorOptions f32 = hidden.options().dtype(at::kFloat);
    at::Tensor grad_hidden = at::zeros(hidden.sizes(), f32);
    // The weight's gradient is added into the caller's buffer in place when it gave one.
    const auto buffer = ctx->saved_data.find("gradient_buffer");
    const bool into_buffer = buffer != ctx->saved_data.end();
    at::Tensor grad_weight = into_buffer ? buffer->second.toTensor()
                             : rows > 0  ? at::empty(weight_c.sizes(), f32)
                                         : at::zeros(weight_c.sizes(), f32);
    const bool fused = hidden_c.device().is_cpu();
    // Per-row inputs of the fused gradient, float32 and contiguous (a missing gradient is 0).
    auto per_row = [&](const at::Tensor& t) {
      return t.defined() ? t.to(at::kFloat).contiguous() : at::zeros({rows}, hidden.options().dtype(at::kFloat));
    };
    const at::Tensor g_lp = fused ? per_row(grad_logprobs) : at::Tensor();
    const at::Tensor g_h = fused ? per_row(grad_entropy) : at::Tensor();
    const at::Tensor lse_f = fused ? lse.contiguous() : at::Tensor(), entropy_f = fused ? entropy.contiguous() : at::Tensor();
    const at::Tensor targets_c = fused ? targets.contiguous() : at::Tensor();
    for_each_tile(rows, vocab, tiles, [&](int64_t r0, int64_t n, int64_t v0, int64_t m) {
      const at::Tensor h = hidden_c.narrow(0, r0, n), w = weight_c.narrow(0, v0, m);
      at::Tensor grad_w = grad_weight.narrow(0, v0, m);
      if (fused) {
        const at::Tensor logits = kept.defined() ? kept_tile(kept, vocab, r0, n, v0, m)
                                                 : tile_logits(hidden_c, weight_c, r0, n, v0, m, 1.0);
        // Written in the products' dtype when that is bf16 (rounded as a cast would).
        const bool bf16 = compute == at::kBFloat16;
        at::Tensor grad_z = at::empty({n, m}, f32.dtype(bf16 ? at::kBFloat16 : at::kFloat));
        const float* z = logits.data_ptr<float>();
        float* g = bf16 ? nullptr : grad_z.data_ptr<float>();
        uint16_t* g_bf16 = bf16 ? reinterpret_cast<uint16_t*>(grad_z.data_ptr<at::BFloat16>()) : nullptr;
        const int64_t* target = targets_c.data_ptr<int64_t>() + r0;
        const float *lses = lse_f.data_ptr<float>() + r0, *hs = entropy_f.data_ptr<float>() + r0;
        const float *glps = g_lp.data_ptr<float>() + r0, *ghs = g_h.data_ptr<float>() + r0;
        const float inv_t = static_cast<float>(inverse_temperature);
        at::parallel_for(0, n, 8, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) {
            const int64_t column = target[i] - v0;
            head_rows::tile_row_gradient(z + i * m, m, inv_t, lses[i], hs[i], ghs[i], glps[i],
                                         column >= 0 && column < m ? column : -1, g ? g + i * m : nullptr,
                                         g_bf16 ? g_bf16 + i * m : nullptr);
          }
        });
        accumulate_tile_products(grad_z, h, w, compute, r0 == 0 && !into_buffer, grad_hidden.narrow(0, r0, n), grad_w);
        return;
      }
      at::Tensor log_p = tile_logits(hidden_c, weight_c, r0, n, v0, m, inverse_temperature)
                             .sub_(lse.narrow(0, r0, n).unsqueeze(1));
      at::Tensor grad_z = log_p.exp();  // p, then -p * (g_lp + g_H (log p + H)) in place
      if (grad_entropy.defined()) {
        log_p.add_(entropy.narrow(0, r0, n).unsqueeze(1)).mul_(grad_entropy.narrow(0, r0, n).unsqueeze(1));
        if (grad_logprobs.defined()) log_p.add_(grad_logprobs.narrow(0, r0, n).unsqueeze(1));
        grad_z.mul_(log_p).neg_();
      } else {
        grad_z.mul_(grad_logprobs.narrow(0, r0, n).unsqueeze(1)).neg_();
      }
      if (grad_logprobs.defined()) {
        const TileTargets target = tile_targets(targets, r0, n, v0, m);
        // Rows whose target is outside the tile add 0 at the clamped column.
        grad_z.scatter_add_(1, target.column,
                            grad_logprobs.narrow(0, r0, n).mul(target.inside.to(at::kFloat)).unsqueeze(1));
      }
      grad_z.mul_(inverse_temperature);
      accumulate_tile_products(grad_z, h, w, compute, r0 == 0 && !into_buffer, grad_hidden.narrow(0, r0, n), grad_w);
    });
    variable_list out = none;
    out[0] = grad_hidden.to(hidden.scalar_type());
    if (!into_buffer) out[1] = grad_weight.to(static_cast<at::ScalarType>(ctx->saved_data["weight_dtype"].toInt()));
    return out;
  }
};

}  // namespace

HeadLogProbs head_logprobs(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                           double temperature, HeadTiles tiles, std::optional<at::ScalarType> compute,
                           GroupTensorParallelOps* vocab, int64_t vocab_offset, const at::Tensor& weight_in_compute,
                           const at::Tensor& gradient_buffer) {
  TANDEM_CHECK(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1),
               "head_logprobs: hidden [N, H] and weight [V, H], got {} and {}", c10::str(hidden.sizes()),
               c10::str(weight.sizes()));
  TANDEM_CHECK(targets.dim() == 1 && targets.size(0) == hidden.size(0) && targets.scalar_type() == at::kLong,
               "head_logprobs: targets must be [N] int64 with N = {}", hidden.size(0));
  TANDEM_CHECK(temperature > 0, "temperature must be positive, got {}", temperature);
  TANDEM_CHECK(tiles.rows > 0 && tiles.vocab > 0 && tiles.kept_logits_bytes >= 0,
               "head_logprobs: tiles must be positive and the kept logits' bytes not negative, got {} x {}, {}",
               tiles.rows, tiles.vocab, tiles.kept_logits_bytes);
  const at::ScalarType dtype = compute.value_or(hidden.scalar_type());
  check_kept_cast_and_buffer("head_logprobs", weight, dtype, weight_in_compute, gradient_buffer);
  // Ids of this rank's rows count from 0; a target on another rank falls outside every tile.
  const at::Tensor local_targets = vocab ? targets - vocab_offset : targets;
  const bool needs_graph = at::GradMode::is_enabled() && (hidden.requires_grad() || weight.requires_grad());
  if (!needs_graph) {
    HeadForward f = head_forward(hidden.to(dtype), weight_in_compute.defined() ? weight_in_compute : weight,
                                 local_targets, temperature, tiles, vocab);
    return {f.logprobs, f.entropy};
  }
  variable_list out = FusedHeadLogProbs::apply(hidden, weight, local_targets, temperature, tiles.rows, tiles.vocab,
                                               tiles.kept_logits_bytes, static_cast<int64_t>(dtype), reinterpret_cast<int64_t>(vocab),
                                               std::vector<at::Tensor>{weight_in_compute, gradient_buffer});
  return {out[0], out[1]};
}

}  // namespace tandem
