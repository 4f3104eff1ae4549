// The learner's training loop: sharded (ddp, zero2; ranks as threads and as processes)
// equals one process on the same global batch; micro-batching does not change the
// result; a policy-gradient step moves log-probs the way the advantages say.
#include "core/error.h"
#include "core/files.h"
#include "core/process.h"
#include "learner/collectives.h"
#include "learner/learner_device.h"
#include "core/safetensors.h"
#include "tests/support/forward_tolerance.h"
#include "tests/support/on_threads.h"
#include "tests/support/trainer_ranks.h"

#include <ATen/ATen.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <functional>
#include <random>
#include <thread>

using namespace tandem;
using namespace tandem::testing;

namespace {

int free_tcp_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  socklen_t length = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

}  // namespace

TEST_CASE("2 and 3 ranks (threads) with ddp, zero2 and fsdp equal one process after 3 optimizer steps") {
  for (const char* sharding : {"ddp", "zero2", "fsdp"}) {
    TrainerScenario s = trainer_scenario(11, sharding);
    UpdateMetrics single_metrics, sharded_metrics;
    const ModelWeights single = train_single(s, &single_metrics);
    CHECK(max_weight_diff(single, s.weights) > 1e-3);  // training moved the weights
    for (int world : {2, 3}) {
      std::vector<ModelWeights> ranks = train_threads(s, world, &sharded_metrics);
      INFO(sharding << " with " << world << " ranks");
      // The bound: float32 epsilon x the accumulation (reorder_tolerance in trainer_ranks.h), so it holds on Intel and AMD alike.
      const double tolerance = reorder_tolerance(s);
      for (int r = 0; r < world; ++r) CHECK(max_weight_diff(ranks[r], single) <= tolerance);
      // Means over ~100 float32 terms in another order: relative error at most 2·N·u ≈ 1.2e-5
      // (u = 2^-24), under the 1e-4 asked, on any CPU.
      CHECK(sharded_metrics.objective.pg_loss == doctest::Approx(single_metrics.objective.pg_loss).epsilon(1e-4));
      CHECK(sharded_metrics.objective.kl == doctest::Approx(single_metrics.objective.kl).epsilon(1e-4));
      CHECK(sharded_metrics.grad_norm == doctest::Approx(single_metrics.grad_norm).epsilon(1e-4));
      CHECK(sharded_metrics.tokens == single_metrics.tokens);
    }
    CHECK(single_metrics.grad_norm > 0.5);  // the clip was active, so the global norm mattered
    CHECK(single_metrics.optimizer_steps == 3);
  }
}

TEST_CASE("2 rank processes over a TCP rendezvous equal one process") {
  TrainerScenario s = trainer_scenario(11, "zero2");
  const ModelWeights single = train_single(s);
  for (const char* sharding : {"ddp", "zero2", "fsdp"}) {
    TempDir dir;
    const std::string rendezvous = "tcp://127.0.0.1:" + std::to_string(free_tcp_port());
    std::vector<ChildProcess> ranks;
    for (int rank = 0; rank < 2; ++rank) {
      ranks.push_back(ChildProcess::spawn({TRAINER_RANK_BINARY, rendezvous, std::to_string(rank), "2", sharding, dir.path()},
                                          {dir.path() + "/rank" + std::to_string(rank) + ".log", false}));
    }
    for (int rank = 0; rank < 2; ++rank) {
      auto status = ranks[rank].wait_for(120);
      REQUIRE_MESSAGE(status.has_value(), "rank ", rank, " did not finish");
      REQUIRE_MESSAGE(status->success(), "rank ", rank, " ", status->describe(), ": ",
                      read_file(dir.path() + "/rank" + std::to_string(rank) + ".log").value_or(""));
    }
    INFO(sharding);
    // The bound: float32 epsilon x the accumulation (reorder_tolerance in trainer_ranks.h), so it holds on Intel and AMD alike.
    CHECK(max_weight_diff(load_model_weights(dir.path(), s.config), single) <= reorder_tolerance(s));
  }
}

TEST_CASE("checkpoint on N ranks, load on M (either strategy), continue identically") {
  TrainerScenario s = trainer_scenario(17, "zero2");
  const ModelWeights uninterrupted = train_single(s);
  // The bound: float32 epsilon x the accumulation (reorder_tolerance in trainer_ranks.h), so it holds on Intel and AMD alike.
  const double tolerance = reorder_tolerance(s);
  const std::vector<std::vector<TrainingSample>> first_two(s.mini_batches.begin(), s.mini_batches.begin() + 2);
  const std::vector<std::vector<TrainingSample>> last = {s.mini_batches[2]};
  struct Case {
    int save_world;
    const char* save_sharding;
    int load_world;
    const char* load_sharding;
  };
  for (Case c : {Case{2, "zero2", 1, "ddp"}, Case{2, "zero2", 3, "zero2"}, Case{1, "ddp", 2, "zero2"},
                 Case{3, "ddp", 2, "ddp"}, Case{2, "fsdp", 3, "zero2"}, Case{3, "zero2", 2, "fsdp"},
                 Case{2, "fsdp", 1, "fsdp"}}) {
    TempDir dir;
    const std::string checkpoint = dir.path() + "/step_2";
    with_thread_ranks(s, c.save_world, c.save_sharding, [&](Trainer& t, Collectives& coll) {
      t.train(rank_shares(first_two, coll.rank(), coll.world_size()));
      t.save_checkpoint(checkpoint);
    });
    CHECK_FALSE(std::filesystem::exists(checkpoint + ".tmp"));
    std::vector<ModelWeights> resumed(c.load_world);
    with_thread_ranks(s, c.load_world, c.load_sharding, [&](Trainer& t, Collectives& coll) {
      t.load_checkpoint(checkpoint);
      CHECK(t.optimizer_steps() == 2);
      t.train(rank_shares(last, coll.rank(), coll.world_size()));
      resumed[coll.rank()] = t.weights();
    });
    INFO("saved by " << c.save_world << " " << c.save_sharding << ", loaded by " << c.load_world << " "
                     << c.load_sharding);
    for (const ModelWeights& w : resumed) CHECK(max_weight_diff(w, uninterrupted) <= tolerance);
  }
}

TEST_CASE("loading a checkpoint of another model is a clear error") {
  TrainerScenario s = trainer_scenario(2, "ddp");
  TempDir dir;
  auto collectives = Collectives::create({});
  Trainer trainer(s.config, s.weights, s.options, *collectives);
  trainer.save_checkpoint(dir.path() + "/c");
  CHECK_THROWS_WITH_AS(trainer.save_checkpoint(dir.path() + "/c"), doctest::Contains("exists already"), tandem::Error);
  TrainerScenario other = s;
  other.config.intermediate_size += 8;
  other.weights = random_model_weights(other.config, 1);
  Trainer different(other.config, other.weights, other.options, *collectives);
  CHECK_THROWS_WITH_AS(different.load_checkpoint(dir.path() + "/c"), doctest::Contains("has shape"), tandem::Error);
  CHECK_THROWS_WITH_AS(trainer.load_checkpoint(dir.path() + "/none"), doctest::Contains("no trainer_state.json"),
                       tandem::Error);
}

TEST_CASE("export_policy writes a loadable Hugging Face directory") {
  TrainerScenario s = trainer_scenario(8, "fsdp");
  TempDir dir;
  write_file_atomic(dir.path() + "/tokenizer.json", "{\"model\": {}}");
  std::vector<ModelWeights> trained(2);
  with_thread_ranks(s, 2, "fsdp", [&](Trainer& t, Collectives& coll) {
    t.train(rank_shares(s.mini_batches, coll.rank(), 2));
    trained[coll.rank()] = t.weights();
    t.export_policy(dir.path() + "/policy", dir.path(), DType::bf16);
  });
  const ModelConfig config = read_model_config(dir.path() + "/policy/config.json");
  CHECK(config.torch_dtype == "bfloat16");
  CHECK(read_file(dir.path() + "/policy/tokenizer.json").value_or("") == "{\"model\": {}}");
  const ModelWeights exported = load_model_weights(dir.path() + "/policy", config);
  CHECK(max_weight_diff(exported, trained[0]) <= 0.01);  // bf16 rounding of weights ~0.15
  CHECK(max_weight_diff(trained[0], trained[1]) == 0);
}

TEST_CASE("a single fsdp rank equals a single ddp rank") {
  const TrainerScenario ddp = trainer_scenario(6, "ddp");
  const ModelWeights expected = train_single(ddp);
  // The bound: float32 epsilon x the accumulation (reorder_tolerance in trainer_ranks.h), so it holds on Intel and AMD alike.
  CHECK(max_weight_diff(train_single(trainer_scenario(6, "fsdp")), expected) <= reorder_tolerance(ddp));
}

TEST_CASE("micro-batch size does not change the update") {
  // Micro-batches add the same gradient terms in another order: the bound is derived from
  // float32 epsilon x the accumulation and AdamW's epsilon (reorder_tolerance), so it holds
  // on Intel and AMD alike. Before it, a fixed 2e-5
  // measured on one Xeon failed on AMD EPYC (3.5e-5, 4.9e-5) with Adam's epsilon 1e-8.
  const TrainerScenario s = trainer_scenario(5, "ddp", 1);
  const ModelWeights one = train_single(s);
  const ModelWeights four = train_single(trainer_scenario(5, "ddp", 4));
  const ModelWeights all = train_single(trainer_scenario(5, "ddp", 7));
  const double tolerance = reorder_tolerance(s);
  INFO("tolerance " << tolerance);
  CHECK(max_weight_diff(one, four) <= tolerance);
  CHECK(max_weight_diff(one, all) <= tolerance);
  // The bound is far below what a real change moves the weights by: one sample left out.
  TrainerScenario short_one = s;
  for (auto& batch : short_one.mini_batches) batch.pop_back();
  CHECK(max_weight_diff(train_single(short_one), one) > 10 * tolerance);
}

TEST_CASE("a policy-gradient step raises the log-probs of positively rewarded tokens") {
  TrainerScenario s = trainer_scenario(3, "ddp", 8);
  s.options.algorithm.kl.coef = 0;
  s.options.algorithm.entropy_coef = 0;
  s.options.learner.optimizer.grad_clip = 0;
  s.mini_batches.resize(1);
  // Old log-probs equal to the current ones (on-policy), advantage +1 on sample 0, -1 on sample 1.
  auto collectives = Collectives::create({});
  Trainer probe(s.config, s.weights, s.options, *collectives);
  std::vector<TrainingSample>& batch = s.mini_batches[0];
  batch.resize(2);
  // The policy's log-probs of a sample's response tokens.
  auto response_logprobs = [&](const ModelWeights& w, const TrainingSample& t) {
    PolicyModel model(s.config, w, at::kFloat);
    std::vector<int32_t> sequence = t.prompt;
    sequence.insert(sequence.end(), t.response.begin(), t.response.end());
    TokenLayout layout = padded_layout({sequence});
    TokenLogProbs lp = token_logprobs(model.forward(layout), layout, s.options.temperature);
    std::vector<float> out;
    for (size_t k = 0; k < t.response.size(); ++k) out.push_back(lp.logprobs[0][t.prompt.size() + k].item<float>());
    return out;
  };
  auto current = [&](const ModelWeights& w, const TrainingSample& t) {
    double sum = 0;
    for (float lp : response_logprobs(w, t)) sum += lp;
    return sum;
  };
  for (int i = 0; i < 2; ++i) {
    TrainingSample& t = batch[i];
    t.old_logprobs = response_logprobs(s.weights, t);
    t.advantages.assign(t.response.size(), i == 0 ? 1.0f : -1.0f);
  }
  const double before0 = current(s.weights, batch[0]), before1 = current(s.weights, batch[1]);
  UpdateMetrics m = probe.train(s.mini_batches);
  CHECK(m.objective.clipfrac == 0);  // ratio 1 on the first step: nothing clipped
  CHECK(m.objective.ratio_mean == doctest::Approx(1.0).epsilon(1e-5));
  CHECK(current(probe.weights(), batch[0]) > before0);
  CHECK(current(probe.weights(), batch[1]) < before1);
}

TEST_CASE("a loss mask: observation tokens carry no loss and are not counted, whatever their values") {
  // Multi-turn samples hold tool and environment tokens the policy read but did not
  // write. With their loss mask 0 the update must not read their old log-probs or
  // advantages at all: NaN there changes nothing; and it must equal the update where
  // those tokens' advantages are 0 but with the token count of the policy's tokens only.
  TrainerScenario s = trainer_scenario(4, "ddp", 8);
  s.mini_batches.resize(1);
  std::vector<TrainingSample> masked = s.mini_batches[0];
  int64_t policy_tokens = 0;
  for (TrainingSample& t : masked) {
    t.loss_mask.assign(t.response.size(), 1.0f);
    for (size_t k = 1; k < t.response.size(); k += 3) {  // every third token, from the second, is an observation
      t.loss_mask[k] = 0.0f;
      t.old_logprobs[k] = std::numeric_limits<float>::quiet_NaN();
      t.advantages[k] = std::numeric_limits<float>::quiet_NaN();
      if (!t.ref_logprobs.empty()) t.ref_logprobs[k] = std::numeric_limits<float>::quiet_NaN();
    }
    for (float m : t.loss_mask) policy_tokens += m > 0 ? 1 : 0;
  }
  std::vector<TrainingSample> finite = masked;
  for (TrainingSample& t : finite) {
    for (size_t k = 0; k < t.response.size(); ++k) {
      if (t.loss_mask[k] == 0) {
        t.old_logprobs[k] = -3.0f;
        t.advantages[k] = 5.0f;
        if (!t.ref_logprobs.empty()) t.ref_logprobs[k] = -1.0f;
      }
    }
  }
  auto collectives = Collectives::create({});
  Trainer with_nan(s.config, s.weights, s.options, *collectives);
  const UpdateMetrics m = with_nan.train({masked});
  Trainer with_values(s.config, s.weights, s.options, *collectives);
  with_values.train({finite});
  CHECK(max_weight_diff(with_nan.weights(), with_values.weights()) == 0.0);
  CHECK(std::isfinite(m.objective.pg_loss));
  CHECK(m.tokens == policy_tokens);
  // ... and the mask does something: the same samples without it move the weights elsewhere.
  for (TrainingSample& t : finite) t.loss_mask.clear();
  Trainer unmasked(s.config, s.weights, s.options, *collectives);
  unmasked.train({finite});
  // reorder_tolerance (tests/support/trainer_ranks.h) is float32 epsilon x the accumulation
  // plus AdamW's epsilon: a real difference must stand well above it.
  CHECK(max_weight_diff(unmasked.weights(), with_values.weights()) > 10 * reorder_tolerance(s));
}

TEST_CASE("unknown strategies are named; learner.device: cuda where it cannot run says what is missing") {
  TrainerScenario s = trainer_scenario(1, "zero3");
  auto collectives = Collectives::create({});
  CHECK_THROWS_WITH_AS(Trainer(s.config, s.weights, s.options, *collectives),
                       doctest::Contains("learner.sharding: unknown strategy \"zero3\""), tandem::Error);
  s.options.learner.sharding = "ddp";
  s.options.learner.device = "cuda";
  const LearnerCudaSupport here = learner_cuda_support();
  if (here.gpu_usable && here.torch_has_cuda) {
    MESSAGE("skipped: this machine has a GPU and a CUDA libtorch, so learner.device: cuda trains here");
  } else {
    // This machine: Debian's CPU-only libtorch, and (here) no GPU: both are named.
    std::string message;
    try {
      Trainer trainer(s.config, s.weights, s.options, *collectives);
    } catch (const tandem::Error& e) {
      message = e.what();
    }
    INFO(message);
    CHECK(message.find("learner.device: cuda cannot train here: ") == 0);
    CHECK(message.find(learner_cuda_unavailable_reason(0, here)) != std::string::npos);
    CHECK(message.find("Train on the CPU with learner.device: cpu") != std::string::npos);
    if (!here.gpu_usable) CHECK(message.find("no CUDA device is usable (" + here.gpu_detail + ")") != std::string::npos);
    if (!here.torch_has_cuda) CHECK(message.find("-Dtorch_dir=PREFIX of a CUDA libtorch (meson option torch_dir)") != std::string::npos);
  }
  // auto trains where cuda would; here, on the CPU.
  s.options.learner.device = "auto";
  if (!(here.gpu_usable && here.torch_has_cuda)) CHECK_NOTHROW(Trainer(s.config, s.weights, s.options, *collectives));
}

TEST_CASE("learner.device resolves from what the process has: each missing piece is named, auto falls back to cpu") {
  LearnerCudaSupport none;
  none.gpu_detail = "CUDA runtime: no CUDA-capable device is detected";
  none.torch_version = "1.13.1";
  LearnerCudaSupport gpu_only = none;
  gpu_only.gpu_usable = true;
  gpu_only.device_count = 2;
  gpu_only.gpu_detail = "0: H100 (sm_90, 81000 MiB); 1: H100 (sm_90, 81000 MiB)";
  LearnerCudaSupport torch_only = none;
  torch_only.torch_has_cuda = true;
  LearnerCudaSupport both = gpu_only;
  both.torch_has_cuda = true;

  CHECK(resolve_learner_device("cpu", 0, none).type == "cpu");
  CHECK(resolve_learner_device("cpu", 0, none).index == -1);
  const LearnerDevice cuda1 = resolve_learner_device("cuda", 1, both);
  CHECK(cuda1.type == "cuda");
  CHECK(cuda1.index == 1);  // the rank's GPU is its local rank

  CHECK_THROWS_WITH_AS(resolve_learner_device("cuda", 0, none),
                       doctest::Contains("learner.device: cuda cannot train here: no CUDA device is usable (CUDA runtime: "
                                         "no CUDA-capable device is detected); and the libtorch 1.13.1 that tandem "
                                         "links has no CUDA"),
                       tandem::Error);
  CHECK_THROWS_WITH_AS(resolve_learner_device("cuda", 0, gpu_only),
                       doctest::Contains("cannot train here: the libtorch 1.13.1 that tandem links has no CUDA (Debian's "
                                         "libtorch-dev is CPU-only): configure tandem with -Dtorch_dir=PREFIX"),
                       tandem::Error);
  CHECK_THROWS_WITH_AS(resolve_learner_device("cuda", 0, torch_only),
                       doctest::Contains("cannot train here: no CUDA device is usable"), tandem::Error);
  CHECK_THROWS_WITH_AS(resolve_learner_device("cuda", 2, both),
                       doctest::Contains("learner rank 2 on this machine needs GPU 2, and there are 2"), tandem::Error);
  CHECK_THROWS_WITH_AS(resolve_learner_device("cuda", 0, none), doctest::Contains("learner.device: cpu"), tandem::Error);

  CHECK(resolve_learner_device("auto", 0, both).type == "cuda");
  CHECK(resolve_learner_device("auto", 0, gpu_only).type == "cpu");
  CHECK(resolve_learner_device("auto", 0, gpu_only).reason.find("has no CUDA") != std::string::npos);
  CHECK(resolve_learner_device("auto", 0, torch_only).type == "cpu");
  CHECK(resolve_learner_device("auto", 5, both).type == "cpu");  // more ranks than GPUs
  CHECK_THROWS_WITH_AS(resolve_learner_device("gpu", 0, both), doctest::Contains("unknown device \"gpu\""),
                       tandem::Error);
}

// Per tensor, the cosine between two runs' updates from `start` (the smallest over tensors).
double smallest_update_cosine(const ModelWeights& start, const ModelWeights& a, const ModelWeights& b) {
  double smallest = 1;
  for (const WeightTensor& t : start.tensors()) {
    const std::vector<float>& x = a.get(t.name).data;
    const std::vector<float>& y = b.get(t.name).data;
    double dot = 0, norm_x = 0, norm_y = 0;
    for (size_t i = 0; i < t.data.size(); ++i) {
      REQUIRE(std::isfinite(x[i]));
      REQUIRE(std::isfinite(y[i]));
      const double dx = x[i] - t.data[i], dy = y[i] - t.data[i];
      dot += dx * dy;
      norm_x += dx * dx;
      norm_y += dy * dy;
    }
    INFO(t.name);
    REQUIRE(norm_x > 0);  // every tensor moved
    REQUIRE(norm_y > 0);
    smallest = std::min(smallest, dot / std::sqrt(norm_x * norm_y));
  }
  return smallest;
}

TEST_CASE("learner.precision bf16: float32 master weights follow the float32 update, on 1 rank and on 2") {
  for (const std::string sharding : {"ddp", "fsdp"}) {
    INFO(sharding);
    TrainerScenario fp32 = trainer_scenario(13, sharding);
    TrainerScenario bf16 = fp32;
    bf16.options.learner.precision = "bf16";
    UpdateMetrics m32, m16, sharded;
    const ModelWeights w32 = train_single(fp32, &m32);
    const ModelWeights w16 = train_single(bf16, &m16);
    // These are separation thresholds, not rounding tolerances: a worst-case bf16 bound
    // (2^-8 per product term, 13 products on the forward path and 26 on the backward)
    // is 39·2^-8 = 15% of each sum's Σ|terms|, larger than what the checks must tell
    // apart. What they tell apart: a tensor whose gradient went wrong (or nowhere) under
    // bf16 points elsewhere after AdamW's normalisation (cosine near 0 or below), while
    // rounding alone keeps every update's cosine near 1 (0.9988 measured on this
    // scenario) and the loss and norm within a few rounding steps (0.3% and 0.9%).
    CHECK(smallest_update_cosine(fp32.weights, w32, w16) > 0.9);
    CHECK(m16.objective.pg_loss == doctest::Approx(m32.objective.pg_loss).epsilon(0.05));
    CHECK(m16.grad_norm == doctest::Approx(m32.grad_norm).epsilon(0.05));
    // Ranks run other micro-batch shapes, so bf16 rounds differently than on one rank:
    // close, not equal as in float32.
    std::vector<ModelWeights> ranks = train_threads(bf16, 2, &sharded);
    for (const ModelWeights& r : ranks) CHECK(smallest_update_cosine(fp32.weights, r, w16) > 0.9);
    CHECK(max_weight_diff(ranks[0], ranks[1]) == 0.0);  // every rank holds the same weights
    CHECK(sharded.grad_norm == doctest::Approx(m16.grad_norm).epsilon(0.05));
  }
}

TEST_CASE("stale samples: proximal log-probs taken in the training forward equal a proximal forward of their own") {
  TrainerScenario s = trainer_scenario(19, "ddp");
  s.options.algorithm.async.is_cap = 1.2;  // low enough that some tokens are cut
  s.mini_batches.resize(1);                // one optimizer step: the only case the learner takes them itself
  auto collectives = Collectives::create({});
  Trainer separate(s.config, s.weights, s.options, *collectives);
  Trainer in_forward(s.config, s.weights, s.options, *collectives);

  // The controller's way (several optimizer steps need it): a forward for the proximal
  // log-probs, then the weights from them, sent with the samples.
  std::vector<TrainingSample> sent = s.mini_batches[0];
  const std::vector<std::vector<float>> proximal = separate.response_logprobs(sent);
  double weight_sum = 0, clipped = 0, tokens = 0;
  for (size_t i = 0; i < sent.size(); ++i) {
    for (size_t t = 0; t < sent[i].response.size(); ++t) {
      const double ratio = std::exp(static_cast<double>(proximal[i][t]) - sent[i].old_logprobs[t]);
      sent[i].is_weights.push_back(static_cast<float>(std::min(ratio, 1.2)));
      sent[i].old_logprobs[t] = proximal[i][t];
      weight_sum += sent[i].is_weights.back();
      clipped += ratio > 1.2 ? 1 : 0;
      tokens += 1;
    }
  }
  const UpdateMetrics expected = separate.train({sent});

  std::vector<TrainingSample> stale = s.mini_batches[0];
  for (TrainingSample& sample : stale) sample.stale = true;
  const UpdateMetrics got = in_forward.train({stale});
  // The same float32 forward over the same micro-batches, in the training pass or on its
  // own: bitwise the same log-probs, so the same update on any CPU.
  CHECK(max_weight_diff(in_forward.weights(), separate.weights()) == 0);
  CHECK(got.objective.pg_loss == expected.objective.pg_loss);
  CHECK(got.objective.is_tokens == tokens);
  CHECK(got.objective.is_clipped == clipped);
  CHECK(clipped > 0);
  CHECK(clipped < tokens);
  // A float32 sum of `tokens` positive weights against this float64 one: tokens·u relative.
  CHECK(got.objective.is_weight_sum == doctest::Approx(weight_sum).epsilon(tokens * 0x1p-24));
  CHECK(expected.objective.is_tokens == 0);  // sent weights are the controller's to report

  // Several optimizer steps: the training forward is not the proximal policy for the later ones.
  TrainerScenario two = s;
  two.options.learner.mini_batches = 2;
  Trainer refused(two.config, two.weights, two.options, *collectives);
  CHECK_THROWS_WITH_AS(refused.train({stale}), doctest::Contains("one optimizer step"), tandem::Error);
}

TEST_CASE("the weight-sync probe's log-probs are float32 whatever learner.precision; the proximal ones are not") {
  TrainerScenario fp32 = trainer_scenario(23, "ddp");
  TrainerScenario bf16 = fp32;
  bf16.options.learner.precision = "bf16";
  auto collectives = Collectives::create({});
  Trainer exact(fp32.config, fp32.weights, fp32.options, *collectives);
  Trainer mixed(bf16.config, bf16.weights, bf16.options, *collectives);
  const std::vector<TrainingSample>& samples = fp32.mini_batches[0];
  const auto reference = exact.response_logprobs(samples);
  const auto probe = mixed.response_logprobs(samples, /*float32=*/true);
  const auto proximal = mixed.response_logprobs(samples);
  double probe_diff = 0, proximal_diff = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    for (size_t t = 0; t < samples[i].response.size(); ++t) {
      REQUIRE(std::isfinite(proximal[i][t]));
      probe_diff = std::max(probe_diff, static_cast<double>(std::abs(probe[i][t] - reference[i][t])));
      proximal_diff = std::max(proximal_diff, static_cast<double>(std::abs(proximal[i][t] - reference[i][t])));
    }
  }
  // The probe is the same float32 forward as the float32 trainer's: bitwise equal. The
  // proximal log-probs are bf16's: they differ (1e-4 separates bf16's rounding, 0.05
  // measured here, from none at all) but stay within what a broken forward would exceed.
  CHECK(probe_diff == 0);
  CHECK(proximal_diff > 1e-4);
  CHECK(proximal_diff < 0.1);
  // The training precision is back afterwards.
  const auto again = mixed.response_logprobs(samples);
  CHECK(again == proximal);
}
