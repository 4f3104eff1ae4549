#include "controller/workers/rollout_client.h"

#include "core/command_codec.h"
#include "core/error.h"
#include "rollout/rollout_commands.capnp.h"
#include "weight_sync/options_wire.h"

#include <cstring>

namespace tandem::rollout_client {

std::string init_body(const std::string& config_yaml, const std::string& model_dir, int64_t sampled_vocab_size,
                      const std::string& turn_frames, const std::string& environment_template) {
  return encode_body<wire::RolloutInit>([&](wire::RolloutInit::Builder out) {
    out.setConfig(config_yaml);
    out.setModel(model_dir);
    out.setSampledVocabSize(sampled_vocab_size);
    out.setTurnFrames(turn_frames);
    out.setEnvironmentTemplate(environment_template);
  });
}

GenerateCommand generate_command(const std::vector<PromptRequest>& requests, bool stream, bool interruptible) {
  GenerateCommand command;
  command.body = encode_body<wire::RolloutGenerate>([&](wire::RolloutGenerate::Builder out) {
    auto list = out.initRequests(static_cast<unsigned>(requests.size()));
    for (size_t i = 0; i < requests.size(); ++i) {
      const PromptRequest& r = requests[i];
      auto request = list[static_cast<unsigned>(i)];
      request.setId(r.id);
      request.setPromptLength(static_cast<uint32_t>(r.prompt->size()));
      request.setN(r.n);
      request.setSeed(r.seed);
      if (r.temperature) {
        request.setOwnTemperature(true);
        request.setTemperature(*r.temperature);
      }
      if (r.environment_row) request.setEnvironmentRow(*r.environment_row);
      command.tokens.append(reinterpret_cast<const char*>(r.prompt->data()), r.prompt->size() * 4);
    }
    out.setStream(stream);
    out.setInterruptible(interruptible);
  });
  return command;
}

ReturnedSamples read_samples(const CommandReply& reply) {
  const std::string what = fmt::format("rollout_generate reply from {}", reply.reply.worker.name());
  const Body<wire::RolloutSamples> body(reply.reply.body, what);
  if (reply.attachments.size() != 2) throw Error(fmt::format("{}: expected 2 frames, got {}", what, reply.attachments.size()));
  const std::string &tokens = reply.attachments[0], &logprobs = reply.attachments[1];
  ReturnedSamples out;
  size_t offset = 0;
  for (const auto s : body->getSamples()) {
    ReturnedSample sample;
    sample.request_id = s.getRequestId();
    sample.sample_index = s.getSampleIndex();
    const size_t length = s.getLength();
    if ((offset + length) * 4 > tokens.size() || (offset + length) * 4 > logprobs.size()) {
      throw Error(fmt::format("{}: sample frames too short", what));
    }
    sample.tokens.resize(length);
    sample.logprobs.resize(length);
    std::memcpy(sample.tokens.data(), tokens.data() + offset * 4, length * 4);
    std::memcpy(sample.logprobs.data(), logprobs.data() + offset * 4, length * 4);
    offset += length;
    sample.finish_reason = to_string(s.getFinishReason());
    sample.weight_version = s.getWeightVersion();
    for (const auto run : s.getVersionRuns()) sample.version_runs.emplace_back(run.getFirstToken(), run.getVersion());
    sample.multi_turn = to_string(s.getMultiTurn());
    out.samples.push_back(std::move(sample));
  }
  if (offset * 4 != tokens.size() || offset * 4 != logprobs.size()) {
    throw Error(fmt::format("{}: bytes left over in the frames after the last sample", what));
  }
  const auto stats = body->getStats();
  out.stats = {stats.getDecodeTokens(),         stats.getPrefillTokens(),   stats.getPrefillTokensSaved(),
               stats.getPreemptions(),          stats.getSessionTokensReused(), stats.getEvictedSessions(),
               stats.getKvPinnedBlocksMax()};
  return out;
}

std::string load_local_body(bool rewind) {
  return encode_body<wire::RolloutLoadWeights>([&](wire::RolloutLoadWeights::Builder out) {
    out.setLocal();
    out.setRewind(rewind);
  });
}

std::string load_transport_body(const WeightSyncOptions& options, bool rewind) {
  return encode_body<wire::RolloutLoadWeights>([&](wire::RolloutLoadWeights::Builder out) {
    write_weight_sync_transport(out.initTransport(), options);
    out.setRewind(rewind);
  });
}

int64_t loaded_version(const CommandReply& reply) {
  const Body<wire::RolloutWeightsLoaded> body(
      reply.reply.body, fmt::format("rollout_load_weights reply from {}", reply.reply.worker.name()));
  return body->getVersion();
}

}  // namespace tandem::rollout_client
