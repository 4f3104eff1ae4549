// The supervised warm-up before RL (sft:), on the learner workers.
#include "controller/loop/training_loop_impl.h"

#include "controller/run/metrics_writer.h"
#include "controller/run/progress.h"
#include "controller/workers/learner_client.h"
#include "core/log.h"

namespace tandem::training {

// The supervised warm-up (sft:): each step one batch of prompts with their gold
// responses (the dataset's sft.response_key field, then end-of-sequence), one optimizer
// step on the learners. Its own seeded prompt order leaves the RL order untouched.
void TrainingLoop::warm_up() {
  if (c_.sft.steps == 0) return;
  TANDEM_CHECK(!model_.eos_token_ids.empty(), "sft: the model {} names no end-of-sequence token", model_dir_);
  // Every row has sft.response_key: load_run_inputs checked it.
  const std::string path = run_dir_ + "/sft_metrics.jsonl";
  truncate_metrics(path, 0);
  MetricsWriter metrics(c_.logging.jsonl ? path : "");
  ProgressLine progress(c_.logging.console, c_.sft.steps);
  PromptOrder order(data_.rows.size(), mix(static_cast<uint64_t>(c_.experiment.seed), 0x5f7), true);
  const int32_t eos = static_cast<int32_t>(model_.eos_token_ids.front());
  const size_t ranks = static_cast<size_t>(c_.learner.workers);
  for (int64_t step = 1; step <= c_.sft.steps; ++step) {
    const Clock::time_point start = Clock::now();
    std::vector<TrainingSample> batch;
    for (size_t row : order.next(static_cast<size_t>(c_.sft.batch_size))) {
      TrainingSample s;
      s.prompt = prompt_ids_[row];
      s.response = tokenizer_->encode(data_.rows[row].at(c_.sft.response_key));
      s.response.push_back(eos);
      s.old_logprobs.assign(s.response.size(), 0.0f);
      s.advantages.assign(s.response.size(), 0.0f);
      batch.push_back(std::move(s));
    }
    std::vector<Request> requests;
    for (size_t r = 0; r < ranks; ++r) {
      const auto [begin, end] = learner_share(batch.size(), static_cast<int64_t>(r), c_.learner);
      const std::vector<TrainingSample> share(batch.begin() + static_cast<std::ptrdiff_t>(begin),
                                              batch.begin() + static_cast<std::ptrdiff_t>(end));
      learner_client::BatchCommand command = learner_client::sft_command(share, c_.sft.lr);
      const WorkerId worker = learner_worker(c_, static_cast<int64_t>(r));
      requests.push_back(request(worker, "learner_sft", std::move(command.body), std::move(command.attachments)));
    }
    const learner_client::SftResult result = learner_client::read_sft(collect(std::move(requests)).at(0));
    const double loss = result.loss;
    metrics.write({{"step", static_cast<double>(step)},
                   {"sft/loss", loss},
                   {"sft/grad_norm", result.grad_norm},
                   {"sft/tokens", static_cast<double>(result.tokens)},
                   {"time/step_s", seconds_since(start)}});
    progress.update(step, fmt::format("warm-up loss {:.3f}", loss));
    log::info("warm-up step {}: loss {:.4f}", step, loss);
  }
  progress.finish();
}

}  // namespace tandem::training
