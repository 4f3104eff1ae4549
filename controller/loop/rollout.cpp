// The step's rollout: prompts go to the rollout workers as rollout_generate commands,
// and their samples come back checked (weight versions, lengths) and in group order.
#include "controller/loop/training_loop_impl.h"

#include "controller/workers/rollout_client.h"
#include "core/log.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace tandem::training {

namespace {

// A trajectory's record (rollout/rollout_multi_turn.h) into the sample: the loss mask from
// its token kinds, its stop reason and counts, the conversation for rewards and logs.
// Anything malformed is an Error naming the worker.
void read_multi_turn(const CommandReply& reply, const std::string& text, Sample& sample) {
  const std::string where = fmt::format("rollout_generate reply from {}: a trajectory record", reply.reply.worker.name());
  const nlohmann::json record = nlohmann::json::parse(text, nullptr, false);
  const size_t length = sample.tokens.size();
  if (!record.is_object() || !record.contains("kinds") || !record["kinds"].is_array() || !record.contains("messages") ||
      !record["messages"].is_array() || !record.contains("stop")) {
    throw Error(fmt::format("{} is malformed: {}", where, text.substr(0, 200)));
  }
  sample.multi_turn = true;
  sample.loss_mask.assign(length, 0.0f);
  const nlohmann::json& kinds = record["kinds"];
  for (size_t i = 0; i < kinds.size(); ++i) {
    const size_t begin = kinds[i].at(0).get<size_t>();
    const size_t end = i + 1 < kinds.size() ? kinds[i + 1].at(0).get<size_t>() : length;
    TANDEM_CHECK(begin <= end && end <= length, "{}: token kinds run past its {} tokens", where, length);
    if (kinds[i].at(1).get<std::string>() == "policy") std::fill(sample.loss_mask.begin() + begin, sample.loss_mask.begin() + end, 1.0f);
  }
  sample.stop_reason = record["stop"].get<std::string>();
  sample.turns = record.value("turns", int64_t{0});
  sample.tool_calls = record.value("tool_calls", int64_t{0});
  sample.tool_errors = record.value("tool_errors", int64_t{0});
  sample.parse_errors = record.value("parse_errors", int64_t{0});
  sample.tool_seconds = record.value("tool_seconds", 0.0);
  for (const nlohmann::json& m : record["messages"]) {
    if (m.value("role", "") != "assistant") continue;
    sample.last_assistant = {m.at("begin").get<int64_t>(), m.at("end").get<int64_t>()};
    TANDEM_CHECK(sample.last_assistant.first <= sample.last_assistant.second &&
                     sample.last_assistant.second <= static_cast<int64_t>(length),
                 "{}: an assistant message's span runs past its {} tokens", where, length);
  }
  nlohmann::json messages = nlohmann::json::array();
  if (record.contains("prompt")) {  // an environment's: the prompt its reset() made
    sample.prompt = record["prompt"].get<std::vector<int32_t>>();
    sample.environment_reward = record.value("environment_reward", 0.0);
    sample.environment_steps = record.value("environment_steps", int64_t{0});
    for (nlohmann::json m : record.value("prompt_messages", nlohmann::json::array())) {
      m["prompt"] = true;
      messages.push_back(std::move(m));
    }
  }
  for (const nlohmann::json& m : record["messages"]) messages.push_back(m);
  sample.conversation = nlohmann::json{{"messages", std::move(messages)}, {"stop_reason", sample.stop_reason}}.dump(
      -1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

std::vector<Sample> TrainingLoop::generate(int64_t step, const std::vector<size_t>& rows,
                                           const std::vector<std::vector<int32_t>>& prompts,
                                           const std::optional<EvalSampling>& eval,
                                           const std::function<void(std::vector<Sample>&&)>& on_early) {
  log::debug("step {}: generating{}", step, eval ? " (evaluation)" : "");
  WorkerPool::ProgressHandler on_progress;
  const int64_t version = weight_version_;
  if (on_early) on_progress = [&](CommandReply&& progress) { on_early(read_samples(progress, version)); };
  const int64_t n = eval ? eval->n : c_.algorithm.group_size;
  return samples_from(collect(rollout_requests(step, rows, prompts, eval, static_cast<bool>(on_early)), on_progress),
                      prompts.size() * static_cast<size_t>(n), version);
}

std::vector<Request> TrainingLoop::rollout_requests(int64_t step, const std::vector<size_t>& rows,
                                                    const std::vector<std::vector<int32_t>>& prompts,
                                                    const std::optional<EvalSampling>& eval, bool stream,
                                                    bool interruptible) {
  const int64_t n = eval ? eval->n : c_.algorithm.group_size;
  // Evaluation draws from its own seeds: it never repeats the training samples' draws.
  const uint64_t seed = eval ? mix(static_cast<uint64_t>(c_.experiment.seed), 0xe7a1) : static_cast<uint64_t>(c_.experiment.seed);
  const size_t workers = static_cast<size_t>(c_.rollout.workers);
  std::vector<Request> all;
  for (size_t w = 0; w < workers; ++w) {
    const size_t begin = prompts.size() * w / workers, end = prompts.size() * (w + 1) / workers;
    std::vector<rollout_client::PromptRequest> requests;
    for (size_t i = begin; i < end; ++i) {
      rollout_client::PromptRequest r;
      r.id = i;
      r.prompt = &prompts[i];
      r.n = n;
      // Dynamic sampling's later rounds draw other prompts of the same step: seeds of their own.
      r.seed = generation_round_ == 0 || eval ? mix(seed, mix(step, i))
                                              : mix(seed, mix(mix(step, 0xd5a0 + generation_round_), i));
      if (eval) r.temperature = eval->temperature;
      const std::vector<std::string>& environment_rows = eval ? val_environment_rows_ : environment_rows_;
      if (!environment_rows.empty()) r.environment_row = &environment_rows.at(rows.at(i));
      requests.push_back(r);
    }
    const WorkerId worker = rollout_worker(c_, static_cast<int64_t>(w));
    rollout_client::GenerateCommand command = rollout_client::generate_command(requests, stream, interruptible);
    all.push_back(request(worker, "rollout_generate", std::move(command.body), {std::move(command.tokens)}));
  }
  return all;
}

std::vector<Sample> TrainingLoop::samples_from(const std::vector<CommandReply>& replies, size_t expected,
                                               int64_t first_version) {
  std::vector<Sample> samples;
  last_prefill_ = {};
  for (const CommandReply& reply : replies) {
    rollout_client::ReturnedSamples returned = rollout_client::read_samples(reply);
    for (Sample& sample : to_samples(reply, std::move(returned.samples), first_version)) samples.push_back(std::move(sample));
    last_prefill_.computed += returned.stats.prefill_tokens;
    last_prefill_.saved += returned.stats.prefill_tokens_saved;
    last_prefill_.session_reused += returned.stats.session_tokens_reused;
    last_prefill_.evicted_sessions += returned.stats.evicted_sessions;
    last_prefill_.pinned_blocks_max = std::max(last_prefill_.pinned_blocks_max, returned.stats.kv_pinned_blocks_max);
  }
  TANDEM_CHECK(samples.size() == expected, "the rollout workers returned {} samples, expected {}", samples.size(),
               expected);
  // Group order: the samples of prompt i are [i * group_size, (i + 1) * group_size).
  std::stable_sort(samples.begin(), samples.end(),
                   [](const Sample& a, const Sample& b) { return a.prompt_slot < b.prompt_slot; });
  return samples;
}

std::vector<Sample> TrainingLoop::read_samples(const CommandReply& reply, int64_t first_version) const {
  return to_samples(reply, rollout_client::read_samples(reply).samples, first_version);
}

std::vector<Sample> TrainingLoop::to_samples(const CommandReply& reply, std::vector<rollout_client::ReturnedSample> returned,
                                             int64_t first_version) const {
  std::vector<Sample> samples;
  for (rollout_client::ReturnedSample& s : returned) {
    Sample sample;
    sample.prompt_slot = static_cast<size_t>(s.request_id);
    sample.sample_index = s.sample_index;
    const size_t length = s.tokens.size();
    sample.tokens = std::move(s.tokens);
    sample.logprobs = std::move(s.logprobs);
    sample.finish_reason = std::move(s.finish_reason);
    sample.version = s.weight_version;
    // Version runs (first token, version): rising versions from token 0 on.
    const auto& runs = s.version_runs;
    TANDEM_CHECK(length == 0 || (!runs.empty() && runs[0].first == 0),
                 "rollout_generate reply from {}: a sample's version runs do not start at its first token",
                 reply.reply.worker.name());
    sample.token_versions.resize(length);
    for (size_t i = 0; i < runs.size(); ++i) {
      const size_t begin = runs[i].first;
      const size_t end = i + 1 < runs.size() ? runs[i + 1].first : length;
      const int64_t version = runs[i].second;
      TANDEM_CHECK(begin < end && end <= length && version >= first_version && version <= weight_version_ &&
                       (i == 0 || version > runs[i - 1].second),
                   "{} sampled tokens [{}, {}) with weight version {}; the rollout began at version {} and the "
                   "run is at {}: samples must be on-policy or of weights synced since",
                   reply.reply.worker.name(), begin, end, version, first_version, weight_version_);
      std::fill(sample.token_versions.begin() + static_cast<std::ptrdiff_t>(begin),
                sample.token_versions.begin() + static_cast<std::ptrdiff_t>(end), version);
    }
    TANDEM_CHECK(length == 0 || sample.version == sample.token_versions.front(),
                 "rollout_generate reply from {}: a sample's version is not its first token's",
                 reply.reply.worker.name());
    if (length == 0) sample.version = first_version;
    if (!s.multi_turn.empty()) read_multi_turn(reply, s.multi_turn, sample);
    samples.push_back(std::move(sample));
  }
  return samples;
}

}  // namespace tandem::training
