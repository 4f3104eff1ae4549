// Learner workers as real processes (`tandem worker --role learner`): initialised over a
// TCP rendezvous, trained on binary-encoded batches the "controller" (this test) sends,
// checkpointed; the result equals one in-process trainer. Also the batch codec.
#include "controller/launch/launcher.h"
#include "controller/workers/learner_client.h"
#include "controller/workers/worker_pool.h"
#include "core/command_codec.h"
#include "core/config.h"
#include "core/files.h"
#include "learner/collectives.h"
#include "learner/learner_commands.capnp.h"
#include "learner/sample_codec.h"
#include "plugins/plugin_loader.h"
#include "tests/support/trainer_ranks.h"

#include <ATen/Parallel.h>
#include <doctest/doctest.h>

#include <set>

#include <cstring>

using namespace tandem;
using namespace tandem::testing;

namespace {

PoolOptions pool_options(const std::string& dir) {
  PoolOptions o;
  o.bind_address = "tcp://127.0.0.1:*";
  o.log_dir = dir;
  o.register_timeout_s = 60;
  o.heartbeat_interval_s = 0.2;
  o.heartbeat_timeout_s = 10;
  o.command_timeout_s = 120;
  o.shutdown_grace_s = 2;
  return o;
}

// The scenario's TrainerOptions as the experiment config a controller would send.
std::string scenario_config_yaml(const TrainerScenario& s) {
  Config c;
  c.learner = s.options.learner;
  c.algorithm = s.options.algorithm;
  c.rollout.temperature = s.options.temperature;
  c.rollout.max_new_tokens = s.options.max_response_length;
  c.learner.workers = 2;
  return config_to_yaml(c);
}

}  // namespace

TEST_CASE("the training-batch codec round-trips and rejects damaged messages") {
  TrainerScenario s = trainer_scenario(4, "ddp");
  s.mini_batches[1][2].ref_logprobs.assign(s.mini_batches[1][2].response.size(), -1.5f);
  s.mini_batches[0][1].is_weights.assign(s.mini_batches[0][1].response.size(), 0.75f);
  s.mini_batches[0][2].stale = true;
  s.mini_batches[1][0].loss_mask.assign(s.mini_batches[1][0].response.size(), 1.0f);
  s.mini_batches[1][0].loss_mask[0] = 0.0f;
  EncodedBatch encoded = encode_training_batch(s.mini_batches);
  auto decoded = decode_training_batch(encoded.body, encoded.attachments);
  REQUIRE(decoded.size() == s.mini_batches.size());
  for (size_t m = 0; m < decoded.size(); ++m) {
    REQUIRE(decoded[m].size() == s.mini_batches[m].size());
    for (size_t i = 0; i < decoded[m].size(); ++i) {
      CHECK(decoded[m][i].prompt == s.mini_batches[m][i].prompt);
      CHECK(decoded[m][i].response == s.mini_batches[m][i].response);
      CHECK(decoded[m][i].old_logprobs == s.mini_batches[m][i].old_logprobs);
      CHECK(decoded[m][i].advantages == s.mini_batches[m][i].advantages);
      CHECK(decoded[m][i].ref_logprobs == s.mini_batches[m][i].ref_logprobs);
      CHECK(decoded[m][i].is_weights == s.mini_batches[m][i].is_weights);
      CHECK(decoded[m][i].stale == s.mini_batches[m][i].stale);
      CHECK(decoded[m][i].loss_mask == s.mini_batches[m][i].loss_mask);
    }
  }
  std::vector<std::string> short_frames = encoded.attachments;
  short_frames[1].resize(short_frames[1].size() - 4);
  CHECK_THROWS_WITH(decode_training_batch(encoded.body, short_frames), doctest::Contains("runs past the end"));
  std::vector<std::string> long_frames = encoded.attachments;
  long_frames[0] += "abcd";
  CHECK_THROWS_WITH(decode_training_batch(encoded.body, long_frames), doctest::Contains("left over"));
  // Bodies that are not a TrainingBatch: a stray byte, a message cut short, another struct's words.
  CHECK_THROWS_WITH(decode_training_batch(encoded.body + "x", encoded.attachments, "learner_train"),
                    doctest::Contains("learner_train: the body is not a TrainingBatch message"));
  CHECK_THROWS_WITH(decode_training_batch(encoded.body.substr(0, encoded.body.size() - 8), encoded.attachments,
                                          "learner_train"),
                    doctest::Contains("learner_train: the body is not a valid TrainingBatch"));
  CHECK_THROWS_WITH(decode_training_batch(std::string(16, '\xff'), encoded.attachments, "learner_train"),
                    doctest::Contains("learner_train: the body is not a valid TrainingBatch"));
}

TEST_CASE("two learner worker processes train like one in-process trainer") {
  TrainerScenario s = trainer_scenario(11, "zero2");
  auto single_collectives = Collectives::create({});
  Trainer single(s.config, s.weights, s.options, *single_collectives);
  single.train(s.mini_batches);

  TempDir dir;
  const std::string model_dir = dir.path() + "/model";
  save_model_weights(model_dir, s.weights, DType::f32);
  write_file_atomic(model_dir + "/config.json", model_config_to_json(s.config));

  WorkerPool pool(pool_options(dir.path()), make_local_launcher(TANDEM_BINARY));
  const std::vector<WorkerId> ranks = {{"learner", 0}, {"learner", 1}};
  pool.start(ranks);
  const std::string rendezvous = "file://" + dir.path() + "/rendezvous";
  std::vector<uint64_t> pending;
  for (int r = 0; r < 2; ++r) {
    learner_client::InitArgs args;
    args.model_dir = model_dir;
    args.config_yaml = scenario_config_yaml(s);
    args.rank = r;
    args.local_rank = r;
    args.world_size = 2;
    args.rendezvous = rendezvous;
    args.total_optimizer_steps = 3;
    args.threads = 1;
    pending.push_back(pool.send(ranks[r], "learner_init", learner_client::init_body(args)));
  }
  for (const auto& [id, reply] : pool.wait(pending)) {
    CHECK(Body<wire::LearnerReady>(reply.reply.body, "learner_init reply")->getIntraOpThreads() == 1);
  }
  pending.clear();
  for (int r = 0; r < 2; ++r) {
    learner_client::BatchCommand batch = learner_client::batch_command(rank_shares(s.mini_batches, r, 2));
    pending.push_back(pool.send(ranks[r], "learner_train", batch.body, batch.attachments));
  }
  auto replies = pool.wait(pending);
  const learner_client::TrainResult result = learner_client::read_train(replies.at(pending[0]));
  CHECK(result.optimizer_steps == 3);
  std::set<std::string> names;
  for (const auto& [name, value] : result.metrics) names.insert(name);
  CHECK(names.count("actor/pg_loss"));
  CHECK(names.count("actor/grad_norm"));

  pending.clear();
  const std::string checkpoint = dir.path() + "/checkpoint";
  for (int r = 0; r < 2; ++r) pending.push_back(pool.send(ranks[r], "learner_save", learner_client::save_body(checkpoint, "")));
  pool.wait(pending);
  const ModelWeights trained = load_model_weights(checkpoint, s.config);
  const ModelWeights want = single.weights();
  double worst = 0;
  for (const WeightTensor& t : want.tensors()) {
    for (size_t i = 0; i < t.data.size(); ++i) worst = std::max(worst, std::abs(double(t.data[i]) - trained.get(t.name).data[i]));
  }
  // Two ranks add gradients in another order: float32 epsilon x the accumulation (reorder_tolerance in trainer_ranks.h), so it holds on Intel and AMD alike.
  CHECK(worst <= reorder_tolerance(s));

  write_file_atomic(model_dir + "/tokenizer.json", "{}");
  pending.clear();
  for (int r = 0; r < 2; ++r) {
    pending.push_back(
        pool.send(ranks[r], "learner_export", learner_client::export_body(dir.path() + "/policy", model_dir, "float32")));
  }
  pool.wait(pending);
  CHECK(read_file(dir.path() + "/policy/tokenizer.json").has_value());
  CHECK(load_model_weights(dir.path() + "/policy", s.config).parameter_count() == s.weights.parameter_count());

  // Damaged commands are error replies naming the problem; the worker survives them.
  TrainingSample damaged;
  damaged.prompt = {1, 2, 3};
  damaged.response = {4, 5};
  damaged.old_logprobs = damaged.advantages = {0.0f, 0.0f};
  learner_client::BatchCommand batch = learner_client::batch_command({{damaged}});
  uint64_t bad = pool.send(ranks[0], "learner_train", batch.body, {"ab", ""});
  CHECK_THROWS_WITH(pool.wait({bad}), doctest::Contains("runs past the end"));
  bad = pool.send(ranks[0], "learner_save", "{\"dir\": \"x\"}");  // JSON is no longer a body
  CHECK_THROWS_WITH(pool.wait({bad}), doctest::Contains("learner_save: the body is not a CheckpointRequest message"));
  bad = pool.send(ranks[0], "learner_nope", "");
  CHECK_THROWS_WITH(pool.wait({bad}), doctest::Contains("learner worker: unknown command \"learner_nope\" (known: ping, describe, "));
  pool.shutdown("test done");
}

TEST_CASE("a learner worker loads the config's plugin, trains a critic with its policy loss, reports values") {
  load_plugin(EXAMPLE_PLUGIN);  // the in-process reference uses the same policy loss
  TrainerScenario s = critic_scenario(21, "ddp");
  s.options.algorithm.plugin = EXAMPLE_PLUGIN;
  s.options.algorithm.policy_loss = "vanilla_pg";
  // One intra-op thread here, as the worker below ("threads": 1): the same kernels on the
  // same machine in the same order, so the values must be equal, not merely close.
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  auto single_collectives = Collectives::create({});
  Trainer single(s.config, s.weights, s.options, *single_collectives);
  single.train(s.mini_batches);
  const std::vector<std::vector<float>> want = single.values(s.mini_batches[0]);
  at::set_num_threads(threads);

  TempDir dir;
  const std::string model_dir = dir.path() + "/model";
  save_model_weights(model_dir, s.weights, DType::f32);
  write_file_atomic(model_dir + "/config.json", model_config_to_json(s.config));
  WorkerPool pool(pool_options(dir.path()), make_local_launcher(TANDEM_BINARY));
  const WorkerId rank{"learner", 0};
  pool.start({rank});
  Config config = load_config_text(scenario_config_yaml(s), "scenario").config;
  config.learner.workers = 1;
  learner_client::InitArgs args;
  args.model_dir = model_dir;
  args.config_yaml = config_to_yaml(config);
  args.total_optimizer_steps = 3;
  args.threads = 1;
  pool.wait({pool.send(rank, "learner_init", learner_client::init_body(args))});
  learner_client::BatchCommand batch = learner_client::batch_command(s.mini_batches);
  pool.wait({pool.send(rank, "learner_train", batch.body, batch.attachments)});
  learner_client::BatchCommand probes = learner_client::batch_command({s.mini_batches[0]});
  const uint64_t id = pool.send(rank, "learner_values", probes.body, probes.attachments);
  auto replies = pool.wait({id});
  const std::vector<std::string>& frames = replies.at(id).attachments;
  REQUIRE(frames.size() == 1);
  size_t offset = 0;
  double worst = 0;
  for (const std::vector<float>& v : want) {
    for (float x : v) {
      REQUIRE(offset + sizeof(float) <= frames[0].size());
      float got;
      std::memcpy(&got, frames[0].data() + offset, sizeof got);
      offset += sizeof got;
      worst = std::max(worst, std::abs(static_cast<double>(got) - x));
    }
  }
  CHECK(offset == frames[0].size());
  CHECK(worst == 0.0);

  // A config naming a library that is not a plugin: learner_init fails naming it.
  config.algorithm.plugin = "/nonexistent/libplugin.so";
  args.config_yaml = config_to_yaml(config);
  CHECK_THROWS_WITH(pool.wait({pool.send(rank, "learner_init", learner_client::init_body(args))}),
                    doctest::Contains("algorithm.plugin: plugin /nonexistent/libplugin.so: cannot load"));
  pool.shutdown("test done");
}
