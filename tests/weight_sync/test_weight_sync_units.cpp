// weight_sync pieces that are not the same for every transport (the conformance suite is
// test_weight_sync.cpp): the checksum, the header codec, the factory's errors, shm's
// in-place rewrite and its guard against torn reads, a collective group after a timeout.
#include "core/error.h"
#include "core/half.h"
#include "core/checksum.h"
#include "weight_sync/collective.h"
#include "weight_sync/cuda_device.h"
#include "weight_sync/layout.h"
#include "weight_sync/nccl_id.h"
#include "weight_sync/shm.h"
#include "weight_sync/transport.h"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <thread>

using namespace tandem;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kBucketBytes = 4096;

uint32_t run_seed() {
  static const uint32_t seed = [] {
    const uint32_t s = std::random_device()();
    MESSAGE("seed ", s);
    return s;
  }();
  return seed;
}

struct TestTensor {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::f32;
  std::string bytes;
};

// float32 and bfloat16, one bigger than a 4 KiB bucket; normal draws, never all zeros.
std::vector<TestTensor> random_tensors(uint32_t salt) {
  std::mt19937 rng(run_seed() ^ (salt * 0x9e3779b9u));
  std::normal_distribution<float> normal;
  std::vector<TestTensor> out = {{"embed", {64, 40}, DType::f32, {}}, {"attn.q", {40, 40}, DType::bf16, {}},
                                 {"bias", {7}, DType::f32, {}}};
  for (TestTensor& t : out) {
    for (int64_t i = 0; i < tensor_numel(t.shape); ++i) {
      const float x = normal(rng);
      if (t.dtype == DType::f32) {
        t.bytes.append(reinterpret_cast<const char*>(&x), 4);
      } else {
        const uint16_t h = float_to_bf16(x);
        t.bytes.append(reinterpret_cast<const char*>(&h), 2);
      }
    }
  }
  return out;
}

std::vector<ExpectedTensor> expectation(const std::vector<TestTensor>& tensors) {
  std::vector<ExpectedTensor> out;
  for (const TestTensor& t : tensors) out.push_back({t.name, t.shape, t.dtype});
  return out;
}

std::string unique_address(const std::string& method, int n) {
  static std::atomic<int> counter{0};
  const std::string id = fmt::format("tandem-ws-unit-{}-{}-{}", ::getpid(), counter++, n);
  return method == "collective" ? (fs::temp_directory_path() / id).string() : "/" + id;
}

}  // namespace

TEST_CASE("shm: bytes flipped in the segment are a checksum error naming the bucket") {
  const std::string name = unique_address("shm", 0);
  const std::vector<TestTensor> tensors = random_tensors(21);
  std::vector<OutgoingTensor> out;
  for (const TestTensor& x : tensors) out.push_back({x.name, x.shape, x.bytes.data(), x.dtype});
  WeightSyncOptions o;
  o.method = "shm";
  o.address = name;
  o.bucket_bytes = kBucketBytes;
  o.timeout_s = 0;
  const PublishStats stats = make_weight_sender(o)->publish(7, out);
  CHECK(stats.buckets == (stats.bytes + kBucketBytes - 1) / kBucketBytes);
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
  REQUIRE(fd >= 0);
  const off_t size = ::lseek(fd, 0, SEEK_END);
  auto* bytes = static_cast<uint8_t*>(::mmap(nullptr, static_cast<size_t>(size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  bytes[size - 3] ^= 0x01;  // the last bucket's data
  ::munmap(bytes, static_cast<size_t>(size));
  ::close(fd);
  auto receiver = make_weight_receiver(o);
  CHECK_THROWS_WITH_AS(receiver->receive(expectation(tensors), [](const ExpectedTensor&, const void*) {}),
                       doctest::Contains(fmt::format("bucket {} of {}", stats.buckets - 1, stats.buckets).c_str()), Error);
  remove_weights_shm(name);
}

TEST_CASE("shm: a kept sender rewrites its segment in place; a read it overlaps is discarded, not used") {
  WeightSyncOptions o;
  o.method = "shm";
  o.address = unique_address("shm", 0);
  o.bucket_bytes = kBucketBytes;
  o.timeout_s = 1;
  auto sender = make_weight_sender(o);
  auto receiver = make_weight_receiver(o);
  auto publish = [&](int64_t version, const std::vector<TestTensor>& tensors) {
    std::vector<OutgoingTensor> out;
    for (const TestTensor& x : tensors) out.push_back({x.name, x.shape, x.bytes.data(), x.dtype});
    sender->publish(version, out);
  };
  auto receive = [&](const std::vector<TestTensor>& tensors, const WeightSink& also) {
    std::map<std::string, std::string> got;
    const int64_t version = receiver->receive(expectation(tensors), [&](const ExpectedTensor& e, const void* data) {
      got[e.name] = std::string(static_cast<const char*>(data), static_cast<size_t>(tensor_bytes(e.shape, e.dtype)));
      if (also) also(e, data);
    });
    for (const TestTensor& t : tensors) CHECK(got.at(t.name) == t.bytes);
    return version;
  };
  const std::vector<TestTensor> a = random_tensors(31), b = random_tensors(32);
  publish(1, a);
  CHECK(receive(a, {}) == 1);
  publish(2, b);  // same sizes: the same segment, rewritten
  CHECK(receive(b, {}) == 2);
  std::vector<TestTensor> bigger = random_tensors(33);
  bigger[0].shape = {65, 40};
  bigger[0].bytes += std::string(40 * 4, '\x11');
  publish(3, bigger);  // another size: a fresh segment, and the receiver maps it
  CHECK(receive(bigger, {}) == 3);
  // A version written while a receiver reads: the receive fails instead of returning a mix.
  publish(4, a);
  bool rewritten = false;
  CHECK_THROWS_WITH_AS(receive(a,
                               [&](const ExpectedTensor&, const void*) {
                                 if (!rewritten) publish(5, b);
                                 rewritten = true;
                               }),
                       doctest::Contains("wrote a new version while this receiver read"), Error);
  CHECK(receive(b, {}) == 5);
  remove_weights_shm(o.address);
}

TEST_CASE("collective: a sender that stops publishing is a timeout, and the group stays failed") {
  WeightSyncOptions o;
  o.method = "collective";
  o.address = unique_address("collective", 0);
  o.bucket_bytes = kBucketBytes;
  o.timeout_s = 2;
  const std::vector<TestTensor> tensors = random_tensors(22);
  std::vector<OutgoingTensor> out;
  for (const TestTensor& x : tensors) out.push_back({x.name, x.shape, x.bytes.data(), x.dtype});
  auto sender = make_weight_sender(o);
  o.rank = 1;
  auto receiver = make_weight_receiver(o);
  std::string publish_error;
  std::thread publish([&] {
    try {
      sender->publish(1, out);
    } catch (const std::exception& e) {
      publish_error = e.what();
    }
  });
  const auto ignore = [](const ExpectedTensor&, const void*) {};
  CHECK(receiver->receive(expectation(tensors), ignore) == 1);
  publish.join();
  CHECK_MESSAGE(publish_error.empty(), publish_error);
  const auto start = Clock::now();
  CHECK_THROWS_WITH_AS(receiver->receive(expectation(tensors), ignore),
                       doctest::Contains("broadcast from rank 0 (the sender) failed or did not complete within 2 s"),
                       Error);
  CHECK(std::chrono::duration<double>(Clock::now() - start).count() < 8);
  CHECK_THROWS_WITH_AS(receiver->receive(expectation(tensors), ignore), doctest::Contains("unusable after an earlier failure"),
                       Error);
  fs::remove_all(o.address);
}

TEST_CASE("collective: a rank waiting for a dead one gives up at once when the rendezvous is abandoned") {
  WeightSyncOptions o;
  o.method = "collective";
  o.address = unique_address("collective", 0);
  o.rank = 1;
  o.timeout_s = 60;  // far longer than the test allows: only the abandonment can end the wait
  auto receiver = make_weight_receiver(o);  // its sender (rank 0) never comes
  const std::vector<TestTensor> tensors = random_tensors(3);
  std::string error;
  const auto start = Clock::now();
  std::thread receive([&] {
    try {
      receiver->receive(expectation(tensors), [](const ExpectedTensor&, const void*) {});
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  abandon_collective_rendezvous(o.address);
  receive.join();
  CHECK(std::chrono::duration<double>(Clock::now() - start).count() < 10);
  CHECK(error.find("was abandoned (a rank died) while waiting for rank 0") != std::string::npos);
  fs::remove_all(o.address);
}

TEST_CASE("the factory: unknown methods, bad options, and GPU transports where they cannot run") {
  WeightSyncOptions o;
  o.method = "carrier_pigeon";
  CHECK_THROWS_WITH_AS(make_weight_sender(o), doctest::Contains("unknown weight_sync method \"carrier_pigeon\""), Error);
  o.method = "collective";
  o.address = unique_address("collective", 0);
  o.rank = 1;
  CHECK_THROWS_WITH_AS(make_weight_sender(o), doctest::Contains("the sender is rank 0"), Error);
  o.rank = 0;
  CHECK_THROWS_WITH_AS(make_weight_receiver(o), doctest::Contains("receivers are ranks 1 and up"), Error);
  o.rank = 3;
  CHECK_THROWS_WITH_AS(make_weight_receiver(o), doctest::Contains("rank 3 is outside [0, 2)"), Error);
  o.method = "shm";
  o.address = "no-slash";
  CHECK_THROWS_WITH_AS(make_weight_sender(o), doctest::Contains("POSIX shm name"), Error);

  const std::string why = cuda_unavailable_reason(0);
  if (why.empty()) {
    MESSAGE("a GPU is present: cuda_ipc and nccl run in the weight_sync_gpu suite");
    return;
  }
  for (const std::string method : {"cuda_ipc", "nccl"}) {
    INFO(method);
    WeightSyncOptions g;
    g.method = method;
    g.address = "/tandem-ws-test-gpu";
    g.nccl_unique_id = std::string(kNcclUniqueIdBytes, '\0');
    CHECK_THROWS_WITH_AS(make_weight_sender(g), doctest::Contains(("weight_sync " + method).c_str()), Error);
    CHECK_THROWS_WITH_AS(make_weight_sender(g), doctest::Contains(why.c_str()), Error);
  }
  MESSAGE("SKIPPED: cuda_ipc and nccl transfers: ", why);
}

TEST_CASE("the bucket checksum: pieces give the whole's digest; a flipped bit or a zero byte more changes it") {
  std::mt19937 rng(run_seed());
  std::string data(10007, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  const uint64_t whole = checksum64(data.data(), data.size());
  Checksum64 pieces;
  for (size_t at = 0; at < data.size();) {
    const size_t n = std::min<size_t>(data.size() - at, rng() % 97);
    pieces.update(data.data() + at, n);
    at += n;
  }
  CHECK(pieces.digest() == whole);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string flipped = data;
    flipped[rng() % flipped.size()] ^= static_cast<char>(1u << (rng() % 8));
    CHECK(checksum64(flipped.data(), flipped.size()) != whole);
  }
  std::string longer = data + std::string(1, '\0');
  CHECK(checksum64(longer.data(), longer.size()) != whole);
  Checksum64 padded;
  padded.update(data.data(), data.size());
  padded.update_zeros(1);
  CHECK(padded.digest() == checksum64(longer.data(), longer.size()));
}

TEST_CASE("a malformed header is an error naming where it came from, never a crash") {
  const std::string where = "weight_sync test";
  std::vector<OutgoingTensor> none;
  const std::string good = encode_weight_layout(plan_weight_layout(none, 1, 64, where));
  CHECK(decode_weight_layout(good, where).version == 1);
  for (const std::string& bad : {std::string("not json"), std::string("{}"),
                                 std::string(R"({"version":1,"total_bytes":8,"tensors":[{"name":"a","shape":[2],"dtype":"F32","offset":0,"bytes":8}],"buckets":[]})"),
                                 std::string(R"({"version":1,"total_bytes":8,"tensors":[{"name":"a","shape":[3],"dtype":"F32","offset":0,"bytes":8}],"buckets":[{"begin":0,"end":8,"checksum":"0000000000000000"}]})"),
                                 std::string(R"({"version":1,"total_bytes":8,"tensors":[{"name":"a","shape":[2],"dtype":"Q4","offset":0,"bytes":8}],"buckets":[{"begin":0,"end":8,"checksum":"0000000000000000"}]})")}) {
    INFO(bad);
    CHECK_THROWS_WITH_AS(decode_weight_layout(bad, where), doctest::Contains("weight_sync test: "), Error);
  }
}

TEST_CASE("nccl unique ids travel as hex") {
  const std::string id(kNcclUniqueIdBytes, '\x5a');
  CHECK(nccl_unique_id_from_hex(nccl_unique_id_to_hex(id)) == id);
  CHECK_THROWS_WITH_AS(nccl_unique_id_from_hex("abc"), doctest::Contains("256 lowercase hex digits"), Error);
}

