// `tandem logprobs --model M (--text T | --ids 1,2,3) [--top-k K] [--json]`: what a model
// assigns to each next token of a sequence, and its top-k alternatives, computed by the
// learner's module (actor/policy_torch.h) in float32 at temperature 1: the numbers
// training uses, for a user checking their model on an answer.
#include "actor/policy_torch.h"
#include "controller/cli/cli.h"
#include "controller/cli/model.h"
#include "core/error.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <nlohmann/json.hpp>

#include <cstdio>

namespace tandem {

int cli_logprobs(const LogprobsArgs& args) {
  CliModel model = load_cli_model(args.model);
  std::vector<int32_t> ids;
  if (!args.ids.empty()) {
    ids = parse_id_list(args.ids, model.config.sampled_vocab(), "--ids");
  } else {
    if (!model.tokenizer) {
      throw UsageError(fmt::format("--text: {} has no tokenizer (a llama2.c checkpoint, a directory without tokenizer.json, or a GGUF file without a vocabulary); give --ids", model.source));
    }
    ids = model.tokenizer->encode(args.text);
  }
  if (ids.size() < 2) throw UsageError("logprobs: the sequence needs at least 2 tokens (each is scored given those before)");
  auto text_of = [&](int32_t id) { return model.tokenizer ? model.tokenizer->decode({id}) : std::string(); };

  PolicyModel policy(model.config, model.weights, at::kFloat);
  const TokenLayout layout = padded_layout({ids});
  at::Tensor logits;
  {
    c10::NoGradGuard no_grad;
    logits = policy.forward(layout);  // [1, L, vocab]
  }
  const at::Tensor log_p = at::log_softmax(logits[0], -1);  // [L, vocab]: row t predicts token t + 1
  const int64_t k = std::min<int64_t>(args.top_k, log_p.size(1));
  const auto [top_values, top_ids] = log_p.topk(k, -1);
  double total = 0;
  for (size_t t = 1; t < ids.size(); ++t) {
    const int64_t row = static_cast<int64_t>(t) - 1;
    const double lp = log_p[row][ids[t]].item<double>();
    total += lp;
    nlohmann::json top = nlohmann::json::array();
    std::string top_text;
    for (int64_t j = 0; j < k; ++j) {
      const int32_t alt = static_cast<int32_t>(top_ids[row][j].item<int64_t>());
      const double alt_lp = top_values[row][j].item<double>();
      top.push_back({{"token", alt}, {"text", text_of(alt)}, {"logprob", alt_lp}});
      top_text += fmt::format("  {}:{:.4f}", alt, alt_lp);
    }
    if (args.json) {
      const nlohmann::json line = {{"position", t}, {"token", ids[t]}, {"text", text_of(ids[t])}, {"logprob", lp},
                                   {"top", top}};
      std::printf("%s\n", line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      const std::string shown = model.tokenizer ? nlohmann::json(text_of(ids[t])).dump(
                                                      -1, ' ', false, nlohmann::json::error_handler_t::replace)
                                                : "-";
      std::printf("%4zu %6d %-12s %10.4f |%s\n", t, ids[t], shown.c_str(), lp, top_text.c_str());
    }
  }
  std::fprintf(stderr, "%zu tokens scored, total log-prob %.4f (mean %.4f) under %s\n", ids.size() - 1, total,
               total / static_cast<double>(ids.size() - 1), model.source.c_str());
  return 0;
}

}  // namespace tandem
