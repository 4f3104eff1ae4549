// Command bodies on the control plane (core/command_codec.h): typed structs round-trip,
// and a body that is not the struct it should be is an Error naming the command and the
// struct, whatever was damaged, never a crash or a library's own message alone.
#include "controller/workers/rollout_client.h"
#include "core/command_codec.h"
#include "core/error.h"
#include "rollout/rollout_commands.capnp.h"
#include "weight_sync/options_wire.h"

#include <doctest/doctest.h>

#include <cstring>
#include <random>

using namespace tandem;

namespace {

std::string generate_body() {
  const std::vector<int32_t> a = {1, 2, 3}, b = {4};
  std::vector<rollout_client::PromptRequest> requests(2);
  requests[0] = {7, &a, 4, 99, std::nullopt};
  requests[1] = {8, &b, 1, 5, 0.0};
  return rollout_client::generate_command(requests, true, false).body;
}

std::string error_of(const std::string& body) {
  try {
    Body<wire::RolloutGenerate> decoded(body, "rollout_generate");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a command body round-trips its fields") {
  const Body<wire::RolloutGenerate> body(generate_body(), "rollout_generate");
  REQUIRE(body->getRequests().size() == 2);
  CHECK(body->getRequests()[0].getId() == 7);
  CHECK(body->getRequests()[0].getPromptLength() == 3);
  CHECK(body->getRequests()[0].getN() == 4);
  CHECK_FALSE(body->getRequests()[0].getOwnTemperature());
  CHECK(body->getRequests()[1].getOwnTemperature());
  CHECK(body->getRequests()[1].getTemperature() == 0.0);
  CHECK(body->getStream());
  CHECK_FALSE(body->getInterruptible());

  WeightSyncOptions options;
  options.method = "nccl";
  options.rank = 3;
  options.nccl_unique_id = std::string("\0\x01\xff", 3);  // raw bytes, zeros included
  const std::string load = rollout_client::load_transport_body(options, true);
  const Body<wire::RolloutLoadWeights> decoded(load, "rollout_load_weights");
  REQUIRE(decoded->isTransport());
  const WeightSyncOptions back = read_weight_sync_transport(decoded->getTransport(), "rollout_load_weights");
  CHECK(back.method == "nccl");
  CHECK(back.rank == 3);
  CHECK(back.nccl_unique_id == options.nccl_unique_id);
  CHECK(weight_sync_options_key(back) == weight_sync_options_key(options));
  CHECK(decoded->getRewind());
}

TEST_CASE("damaged bodies are errors naming the command and the struct") {
  const std::string good = generate_body();
  CHECK(error_of("").find("rollout_generate: the body is not a RolloutGenerate message (0 bytes") == 0);
  CHECK(error_of("{\"requests\":[]}").find("rollout_generate: the body is not a RolloutGenerate message (15 bytes") ==
        0);
  CHECK(error_of("{\"requests\": []}").find("rollout_generate: the body is not a valid RolloutGenerate") == 0);
  CHECK(error_of(good + std::string(8, '\0')).find("rollout_generate: the body has bytes after its RolloutGenerate") ==
        0);
  CHECK(error_of(good.substr(0, good.size() - 8)).find("rollout_generate: the body is not a valid RolloutGenerate") ==
        0);
  // Random words: whatever they decode to, never a crash, and an error is always located.
  std::mt19937_64 rng(std::random_device{}());
  for (int trial = 0; trial < 500; ++trial) {
    std::string bytes = good;
    for (int flips = 0; flips < 3; ++flips) bytes[rng() % bytes.size()] = static_cast<char>(rng());
    const std::string error = error_of(bytes);
    if (!error.empty()) CHECK(error.rfind("rollout_generate: the body", 0) == 0);
  }
}

TEST_CASE("a body whose list claims more than the message holds is refused, not read past") {
  // A root struct whose requests pointer claims 2^28 composite elements: far past the
  // body's few words, and past the traversal limit (twice the body's size).
  std::string bytes = generate_body();
  // Segment table (1 segment) is word 0; the root pointer word 1; the struct's data
  // section follows, then its pointer section: the list pointer's upper half holds the
  // element count (composite lists: the word count) in its top 29 bits.
  const size_t header = 8, root = 8;
  uint64_t root_pointer;
  std::memcpy(&root_pointer, bytes.data() + header, 8);
  const uint32_t offset = static_cast<uint32_t>(root_pointer) >> 2;
  const uint16_t data_words = static_cast<uint16_t>(root_pointer >> 32);
  const size_t list_at = header + root + (offset + data_words) * 8;
  REQUIRE(list_at + 8 <= bytes.size());
  uint64_t list_pointer;
  std::memcpy(&list_pointer, bytes.data() + list_at, 8);
  list_pointer = (list_pointer & 0xFFFFFFFFull) | (static_cast<uint64_t>((1u << 28) << 3 | 7) << 32);
  std::memcpy(bytes.data() + list_at, &list_pointer, 8);
  CHECK(error_of(bytes).rfind("rollout_generate: the body is not a valid RolloutGenerate", 0) == 0);
}
