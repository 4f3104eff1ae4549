// Test helper process: one learner rank of tests/support/trainer_scenario.h's scenario over a
// real rendezvous, writing its final weights as safetensors for test_trainer to compare.
// Usage: trainer_rank RENDEZVOUS RANK WORLD SHARDING OUT_DIR
#include "learner/collectives.h"
#include "tests/support/trainer_scenario.h"

#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  using namespace tandem;
  if (argc != 6) {
    std::fprintf(stderr, "usage: trainer_rank RENDEZVOUS RANK WORLD SHARDING OUT_DIR\n");
    return 2;
  }
  try {
    const int rank = std::stoi(argv[2]), world = std::stoi(argv[3]);
    testing::TrainerScenario s = testing::trainer_scenario(11, argv[4]);
    auto collectives = Collectives::create({argv[1], rank, world, 60.0});
    Trainer trainer(s.config, s.weights, s.options, *collectives);
    trainer.train(testing::rank_shares(s.mini_batches, rank, world));
    const ModelWeights weights = trainer.weights();  // collective under fsdp: every rank calls it
    if (rank == 0) save_model_weights(argv[5], weights, DType::f32);
    collectives->barrier();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainer_rank: %s\n", e.what());
    return 1;
  }
}
