// The conformance suite of the weight_sync transports (weight_sync/transport.h): the same
// cases against every transport, each rank in a thread of this process and again in a
// process of its own. Fresh random tensors every run (the seed is printed).
//
// Built three times: `weight_sync` (tests/meson.build) runs the CPU transports (shm,
// collective), with test_weight_sync_units.cpp beside it; `weight_sync_gpu` (suite gpu,
// built with TANDEM_WEIGHT_SYNC_GPU) runs cuda_ipc and nccl, and exits 77 with the reason
// when this machine has no GPU; `weight_sync_cudasim` (tools/cudasim/meson.build, also
// TANDEM_CUDASIM) runs nccl on the simulator (cuda_ipc skips: it is not simulated). The GPU
// suite touches CUDA only in forked children (a process that has used CUDA cannot fork
// children that use it).
// Why this stays one file past ~500 lines: it is one conformance suite compiled three ways
// with different -D defines, so that every transport meets every case; the pieces that are
// not the same for every transport already live apart in test_weight_sync_units.cpp.
#include "core/error.h"
#include "core/half.h"
#include "weight_sync/cuda_device.h"
#include "weight_sync/nccl_id.h"
#include "weight_sync/shm.h"
#include "weight_sync/transport.h"

#ifdef TANDEM_WEIGHT_SYNC_GPU
#define DOCTEST_CONFIG_IMPLEMENT
#endif
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <thread>

using namespace tandem;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {

// ---- what is sent -------------------------------------------------------------------

struct TestTensor {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::f32;
  std::string bytes;
};

uint32_t run_seed() {
  static const uint32_t seed = std::random_device()();
  return seed;
}

// Several names, shapes and dtypes; 4 KiB buckets cut ~23 KB into six, and "embed"
// (10 KiB) is bigger than a bucket. Values are normal draws: never all zeros.
std::vector<TestTensor> random_tensors(uint32_t salt) {
  std::mt19937 rng(run_seed() ^ (salt * 0x9e3779b9u));
  std::normal_distribution<float> normal;
  std::vector<TestTensor> out = {{"embed", {64, 40}, DType::f32, {}},   {"norm", {40}, DType::f32, {}},
                                 {"attn.q", {40, 40}, DType::bf16, {}}, {"attn.k", {8, 40, 3}, DType::bf16, {}},
                                 {"bias", {7}, DType::f32, {}},         {"scale", {}, DType::f32, {}},
                                 {"mlp.up", {100, 33}, DType::bf16, {}}};
  for (TestTensor& t : out) {
    const int64_t n = tensor_numel(t.shape);
    t.bytes.resize(static_cast<size_t>(tensor_bytes(t.shape, t.dtype)));
    for (int64_t i = 0; i < n; ++i) {
      const float x = normal(rng);
      if (t.dtype == DType::f32) {
        std::memcpy(&t.bytes[static_cast<size_t>(i) * 4], &x, 4);
      } else {
        const uint16_t h = float_to_bf16(x);
        std::memcpy(&t.bytes[static_cast<size_t>(i) * 2], &h, 2);
      }
    }
  }
  return out;
}

std::vector<ExpectedTensor> expectation(const std::vector<TestTensor>& tensors) {
  std::vector<ExpectedTensor> out;
  for (const TestTensor& t : tensors) out.push_back({t.name, t.shape, t.dtype});
  std::reverse(out.begin(), out.end());  // matching is by name, not order
  return out;
}

constexpr int64_t kBucketBytes = 4096;

// ---- transports and scenarios --------------------------------------------------------

struct TransportUnderTest {
  std::string method;
  bool processes = false;  // every rank in a forked process; else threads of this one
  int receivers = 2;
  std::string label() const { return method + (processes ? " (processes)" : " (threads)"); }
  bool mailbox() const { return method == "shm" || method == "cuda_ipc"; }
};

struct Step {
  int64_t version = 1;
  std::vector<TestTensor> tensors;
  std::vector<std::vector<ExpectedTensor>> expected;  // per receiver
  int tamper_bucket = -1;                              // flip one bit of this bucket in flight
  bool null_data = false;                              // the sender passes a null pointer for "norm"
};

Step plain_step(int64_t version, uint32_t salt, int receivers) {
  Step s;
  s.version = version;
  s.tensors = random_tensors(salt);
  s.expected.assign(static_cast<size_t>(receivers), expectation(s.tensors));
  return s;
}

struct Scenario {
  std::vector<Step> steps;
  bool with_sender = true;
  double timeout_s = 10;
};

struct Outcome {
  bool ok = false;
  int64_t version = -1;
  std::string error;
  std::map<std::string, std::string> tensors;  // what the sink got, by name
  int sink_calls = 0;
  double seconds = 0;
};

// A name no other run or step shares: mailboxes and rendezvous directories are per step.
std::string unique_address(const std::string& method, size_t step) {
  static std::atomic<int> counter{0};
  const std::string id = fmt::format("tandem-ws-test-{}-{}-{}", ::getpid(), counter++, step);
  return method == "collective" ? (fs::temp_directory_path() / id).string() : "/" + id;
}

struct Addresses {
  std::vector<std::string> per_step;
  std::string nccl_id;
};

WeightSyncOptions options_for(const TransportUnderTest& t, const Addresses& a, size_t step, int rank, double timeout_s) {
  WeightSyncOptions o;
  o.method = t.method;
  o.address = t.mailbox() ? a.per_step[step] : a.per_step[0];
  o.rank = t.mailbox() ? 0 : rank;
  o.world_size = t.receivers + 1;
  o.bucket_bytes = kBucketBytes;
  o.timeout_s = timeout_s;
  o.nccl_unique_id = a.nccl_id;
  o.cuda_device = t.method == "nccl" ? rank : 0;
  return o;
}

template <typename Fn>
void record(Outcome& out, Fn fn) {
  const auto start = Clock::now();
  try {
    fn();
    out.ok = true;
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  out.seconds = std::chrono::duration<double>(Clock::now() - start).count();
}

// Rank 0. A mailbox transport gets a sender per step (each step its own mailbox), kept
// alive until `hold` returns so receivers can still read its buffers; a collective one
// keeps one sender, so one group, for every step.
std::vector<Outcome> sender_role(const TransportUnderTest& t, const Scenario& s, const Addresses& a,
                                 const std::function<void(const std::vector<Outcome>&)>& hold) {
  std::vector<Outcome> outcomes(s.steps.size());
  std::vector<std::unique_ptr<WeightSender>> senders;
  auto current = std::make_shared<size_t>(0);  // the step being published, for the tamper hook
  for (size_t k = 0; k < s.steps.size(); ++k) {
    *current = k;
    record(outcomes[k], [&] {
      if (senders.empty() || t.mailbox()) {
        WeightSyncOptions o = options_for(t, a, k, 0, s.timeout_s);
        o.tamper_bucket_for_test = [&s, current](size_t bucket, uint8_t* data, size_t bytes) {
          if (static_cast<int>(bucket) == s.steps[*current].tamper_bucket && bytes > 0) data[bytes / 2] ^= 0x10;
        };
        senders.push_back(make_weight_sender(o));
      }
      std::vector<OutgoingTensor> out;
      for (const TestTensor& x : s.steps[k].tensors) {
        out.push_back({x.name, x.shape, s.steps[k].null_data && x.name == "norm" ? nullptr : x.bytes.data(), x.dtype});
      }
      senders.back()->publish(s.steps[k].version, out);
    });
  }
  hold(outcomes);
  return outcomes;
}

std::vector<Outcome> receiver_role(const TransportUnderTest& t, const Scenario& s, const Addresses& a, int rank,
                                   const std::function<void(const std::vector<Outcome>&)>& hold) {
  std::vector<Outcome> outcomes(s.steps.size());
  std::unique_ptr<WeightReceiver> receiver;
  for (size_t k = 0; k < s.steps.size(); ++k) {
    Outcome& out = outcomes[k];
    record(out, [&] {
      if (!receiver || t.mailbox()) receiver = make_weight_receiver(options_for(t, a, k, rank, s.timeout_s));
      out.version = receiver->receive(s.steps[k].expected[static_cast<size_t>(rank - 1)],
                                      [&](const ExpectedTensor& e, const void* data) {
                                        ++out.sink_calls;
                                        out.tensors[e.name] = std::string(static_cast<const char*>(data),
                                                                          static_cast<size_t>(tensor_bytes(e.shape, e.dtype)));
                                      });
    });
  }
  hold(outcomes);
  return outcomes;
}

// ---- running ranks as processes ------------------------------------------------------

std::string hex(const std::string& bytes) {
  std::string out;
  for (unsigned char c : bytes) out += fmt::format("{:02x}", c);
  return out;
}

std::string unhex(const std::string& text) {
  std::string out(text.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<char>(std::stoi(text.substr(2 * i, 2), nullptr, 16));
  return out;
}

nlohmann::json to_json(const std::vector<Outcome>& outcomes) {
  nlohmann::json all = nlohmann::json::array();
  for (const Outcome& o : outcomes) {
    nlohmann::json tensors = nlohmann::json::object();
    for (const auto& [name, bytes] : o.tensors) tensors[name] = hex(bytes);
    all.push_back({{"ok", o.ok}, {"version", o.version}, {"error", o.error}, {"tensors", tensors},
                   {"sink_calls", o.sink_calls}, {"seconds", o.seconds}});
  }
  return all;
}

std::vector<Outcome> from_json(const nlohmann::json& all) {
  std::vector<Outcome> outcomes;
  for (const auto& j : all) {
    Outcome o;
    o.ok = j.at("ok");
    o.version = j.at("version");
    o.error = j.at("error");
    o.sink_calls = j.at("sink_calls");
    o.seconds = j.at("seconds");
    for (const auto& [name, text] : j.at("tensors").items()) o.tensors[name] = unhex(text.get<std::string>());
    outcomes.push_back(std::move(o));
  }
  return outcomes;
}

// A forked child that runs `body`, writes what it returns to `path` and exits; killed
// and reaped if still running when this goes out of scope.
class Child {
 public:
  Child(const std::string& path, const std::function<std::string()>& body) {
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));  // no doctest: main uses it too
    if (pid_ == 0) {
      std::string text;
      try {
        text = body();
      } catch (const std::exception& e) {
        text = nlohmann::json{{"child_error", e.what()}}.dump();
      }
      std::ofstream(path + ".tmp") << text;
      std::rename((path + ".tmp").c_str(), path.c_str());
      ::_exit(0);
    }
  }
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  // Waits until `deadline`; false if it is still running.
  bool wait_until(Clock::time_point deadline) {
    while (Clock::now() < deadline) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) return reaped_ = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return false;
  }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
};

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Runs `body` in a forked child and returns its string (so that this process never
// initialises CUDA itself).
std::string in_child(const std::function<std::string()>& body) {
  const std::string path = (fs::temp_directory_path() / fmt::format("tandem-ws-child-{}", ::getpid())).string();
  fs::remove(path);
  {
    Child child(path, body);
    if (!child.wait_until(Clock::now() + std::chrono::seconds(60))) throw std::runtime_error("child did not finish in 60 s");
  }
  std::string text = read_text(path);
  fs::remove(path);
  return text;
}

// results[rank][step]; rank 0 is the sender (empty when the scenario has none).
std::vector<std::vector<Outcome>> run_scenario(const TransportUnderTest& t, const Scenario& s) {
  Addresses a;
  for (size_t k = 0; k < s.steps.size(); ++k) a.per_step.push_back(unique_address(t.method, k));
  // NCCL's bootstrap root lives in the process that made the unique id: a child that
  // keeps it for the whole scenario (it never joins, so "no sender" means no rank 0).
  std::unique_ptr<Child> nccl_root;
  const std::string id_path = (fs::temp_directory_path() / fmt::format("tandem-ws-nccl-id-{}", ::getpid())).string();
  if (t.method == "nccl") {
    const std::string& path = id_path;
    fs::remove(path);
    nccl_root = std::make_unique<Child>(path + ".unused", [path]() -> std::string {
      std::ofstream(path + ".tmp") << hex(nccl_new_unique_id());
      std::rename((path + ".tmp").c_str(), path.c_str());
      std::this_thread::sleep_for(std::chrono::minutes(10));  // killed when the scenario ends
      return "";
    });
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (!fs::exists(path) && !fs::exists(path + ".unused") && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    REQUIRE_MESSAGE(fs::exists(path), "no NCCL unique id: ", read_text(path + ".unused"));
    a.nccl_id = unhex(read_text(path));
    fs::remove(path);
  }
  std::vector<std::vector<Outcome>> results(static_cast<size_t>(t.receivers + 1));
  const int first = s.with_sender ? 0 : 1;
  auto role = [&](int rank, const std::function<void(const std::vector<Outcome>&)>& hold) {
    return rank == 0 ? sender_role(t, s, a, hold) : receiver_role(t, s, a, rank, hold);
  };
  if (!t.processes) {
    std::vector<std::thread> threads;
    for (int r = first; r <= t.receivers; ++r) {
      threads.emplace_back([&, r] { results[static_cast<size_t>(r)] = role(r, [](const std::vector<Outcome>&) {}); });
    }
    for (std::thread& th : threads) th.join();
  } else {
    // Every rank reports, then waits (holding its objects, so a cuda_ipc sender's buffer
    // stays mapped) until every rank has reported.
    const std::string dir = (fs::temp_directory_path() / fmt::format("tandem-ws-run-{}", ::getpid())).string();
    fs::remove_all(dir);
    fs::create_directories(dir);
    auto report_path = [&](int r) { return fmt::format("{}/rank-{}.json", dir, r); };
    auto all_reported = [&] {
      for (int r = first; r <= t.receivers; ++r)
        if (!fs::exists(report_path(r) + ".early")) return false;
      return true;
    };
    std::vector<std::unique_ptr<Child>> children;
    for (int r = first; r <= t.receivers; ++r) {
      children.push_back(std::make_unique<Child>(report_path(r), [&, r] {
        return to_json(role(r, [&, r](const std::vector<Outcome>& outcomes) {
                 std::ofstream(report_path(r) + ".early") << to_json(outcomes).dump();
                 const auto deadline = Clock::now() + std::chrono::duration<double>(s.timeout_s * 4 + 30);
                 while (!all_reported() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(2));
               }))
            .dump();
      }));
    }
    const auto deadline =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s.timeout_s * 6 + 60));
    for (size_t i = 0; i < children.size(); ++i) {
      const int r = first + static_cast<int>(i);
      if (!children[i]->wait_until(deadline)) {
        results[static_cast<size_t>(r)].assign(s.steps.size(), Outcome{false, -1, "rank process hung", {}, 0, 0});
        continue;
      }
      const nlohmann::json j = nlohmann::json::parse(read_text(report_path(r)));
      if (j.is_object()) {
        results[static_cast<size_t>(r)].assign(s.steps.size(), Outcome{false, -1, j.at("child_error").get<std::string>(), {}, 0, 0});
      } else {
        results[static_cast<size_t>(r)] = from_json(j);
      }
    }
    fs::remove_all(dir);
  }
  fs::remove(id_path + ".unused");
  for (const std::string& address : a.per_step) {
    if (t.method == "shm") remove_weights_shm(address);
    if (t.method == "collective") fs::remove_all(address);
  }
  return results;
}

// ---- which transports ----------------------------------------------------------------

#ifdef TANDEM_WEIGHT_SYNC_GPU
std::vector<TransportUnderTest> transports() {
  return {{"cuda_ipc", true, 1}, {"nccl", true, 1}};
}
#else
std::vector<TransportUnderTest> transports() {
  return {{"shm", false, 2}, {"shm", true, 2}, {"collective", false, 2}, {"collective", true, 2}};
}
#endif

// Why transport `t` cannot run on this machine ("" when it can), asked in a child.
std::string cannot_run(const TransportUnderTest& t) {
  if (t.method != "cuda_ipc" && t.method != "nccl") return "";
#ifdef TANDEM_CUDASIM
  if (t.method == "cuda_ipc") return "CUDA IPC is not simulated by cudasim (tools/cudasim/README.md); run it on a GPU";
#endif
  return in_child([&] {
    std::string why = cuda_unavailable_reason(0);
    if (why.empty() && t.method == "nccl" && cuda_device_count() < t.receivers + 1) {
      why = fmt::format("nccl needs {} GPUs (NCCL refuses two ranks on one GPU); this machine has {}", t.receivers + 1,
                        cuda_device_count());
    }
    return why;
  });
}

// Runs `body` for every transport this build has, each in its own subcase; a transport
// that cannot run here says so in the output ("SKIPPED: ...").
void for_each_transport(const std::function<void(const TransportUnderTest&)>& body) {
  for (const TransportUnderTest& t : transports()) {
    SUBCASE(t.label().c_str()) {
      const std::string why = cannot_run(t);
      if (!why.empty()) {
        MESSAGE("SKIPPED: ", t.label(), ": ", why);
        continue;
      }
      INFO("transport: ", t.label(), ", seed ", run_seed());
      body(t);
    }
  }
}

void check_received(const Outcome& got, const Step& step) {
  REQUIRE_MESSAGE(got.ok, got.error);
  CHECK(got.version == step.version);
  CHECK(got.sink_calls == static_cast<int>(step.tensors.size()));
  for (const TestTensor& t : step.tensors) {
    INFO("tensor ", t.name);
    REQUIRE(got.tensors.count(t.name) == 1);
    CHECK(got.tensors.at(t.name) == t.bytes);  // bit-exact
  }
}

}  // namespace

TEST_CASE("weights arrive bit-exact with their version, over several buckets and versions") {
  for_each_transport([](const TransportUnderTest& t) {
    Scenario s;
    s.steps = {plain_step(3, 1, t.receivers), plain_step(4, 2, t.receivers)};
    const auto results = run_scenario(t, s);
    for (size_t k = 0; k < s.steps.size(); ++k) {
      INFO("step ", k);
      CHECK_MESSAGE(results[0][k].ok, results[0][k].error);
      for (int r = 1; r <= t.receivers; ++r) check_received(results[static_cast<size_t>(r)][k], s.steps[k]);
    }
  });
}

TEST_CASE("a header that does not match what the receiver expects is an error naming the tensor") {
  for_each_transport([](const TransportUnderTest& t) {
    struct Mismatch {
      std::function<void(std::vector<ExpectedTensor>&)> change;
      std::string message;
    };
    const std::vector<Mismatch> mismatches = {
        {[](auto& e) { e[0].shape = {33, 100}; }, "tensor mlp.up has shape [100,33], expected [33,100]"},
        {[](auto& e) { e[3].dtype = DType::f32; }, "tensor attn.k has dtype BF16, expected F32"},
        {[](auto& e) { e[2].name = "attn.v"; }, "tensor attn.v is missing"},
        {[](auto& e) { e.push_back({"lm_head", {4, 4}, DType::f32}); }, "tensor lm_head is missing"},
        {[](auto& e) { e.erase(e.begin() + 2); }, "unexpected tensor bias"},
    };
    // Rank 1 expects something else; the other receivers expect the truth. The last step
    // is right for everyone: the same sender and receivers must still work.
    Scenario s;
    for (size_t i = 0; i < mismatches.size(); ++i) {
      Step step = plain_step(10 + static_cast<int64_t>(i), 3 + static_cast<uint32_t>(i), t.receivers);
      mismatches[i].change(step.expected[0]);
      s.steps.push_back(step);
    }
    s.steps.push_back(plain_step(20, 9, t.receivers));
    const auto results = run_scenario(t, s);
    for (size_t k = 0; k < mismatches.size(); ++k) {
      INFO("step ", k, ": ", mismatches[k].message);
      const Outcome& wrong = results[1][k];
      CHECK_FALSE(wrong.ok);
      CHECK(wrong.error.find("weight_sync " + t.method) != std::string::npos);
      CHECK_MESSAGE(wrong.error.find(mismatches[k].message) != std::string::npos, wrong.error);
      CHECK(wrong.sink_calls == 0);  // rejected before any data
      if (t.mailbox()) {  // the sender and the other receivers are not involved
        CHECK_MESSAGE(results[0][k].ok, results[0][k].error);
        for (int r = 2; r <= t.receivers; ++r) check_received(results[static_cast<size_t>(r)][k], s.steps[k]);
      } else {  // one group: everyone stops, and the sender says who rejected what
        CHECK_FALSE(results[0][k].ok);
        CHECK_MESSAGE(results[0][k].error.find(mismatches[k].message) != std::string::npos, results[0][k].error);
        CHECK_MESSAGE(results[0][k].error.find("rank 1") != std::string::npos, results[0][k].error);
        for (int r = 2; r <= t.receivers; ++r) {
          CHECK_MESSAGE(results[static_cast<size_t>(r)][k].error.find("another receiver rejected") != std::string::npos,
                        results[static_cast<size_t>(r)][k].error);
        }
      }
    }
    const size_t last = mismatches.size();
    CHECK_MESSAGE(results[0][last].ok, results[0][last].error);
    for (int r = 1; r <= t.receivers; ++r) check_received(results[static_cast<size_t>(r)][last], s.steps[last]);
  });
}

TEST_CASE("a bucket corrupted in flight is a checksum error naming the bucket") {
  for_each_transport([](const TransportUnderTest& t) {
    Scenario s;
    Step bad = plain_step(30, 11, t.receivers);
    bad.tamper_bucket = 2;
    s.steps = {bad, plain_step(31, 12, t.receivers)};
    const auto results = run_scenario(t, s);
    for (int r = 1; r <= t.receivers; ++r) {
      const Outcome& got = results[static_cast<size_t>(r)][0];
      CHECK_FALSE(got.ok);
      CHECK_MESSAGE(got.error.find("weight_sync " + t.method) != std::string::npos, got.error);
      CHECK_MESSAGE(got.error.find("bucket 2 of ") != std::string::npos, got.error);
      CHECK_MESSAGE(got.error.find("corrupted") != std::string::npos, got.error);
    }
    if (!t.mailbox()) {
      CHECK_FALSE(results[0][0].ok);
      CHECK_MESSAGE(results[0][0].error.find("corrupted") != std::string::npos, results[0][0].error);
    }
    CHECK_MESSAGE(results[0][1].ok, results[0][1].error);
    for (int r = 1; r <= t.receivers; ++r) check_received(results[static_cast<size_t>(r)][1], s.steps[1]);
  });
}

TEST_CASE("a sender that cannot publish says why; its receivers get nothing and fail in bounded time") {
  for_each_transport([](const TransportUnderTest& t) {
    Scenario s;
    s.timeout_s = 2;
    Step bad = plain_step(50, 14, t.receivers);
    bad.null_data = true;
    s.steps = {bad, plain_step(51, 15, t.receivers)};
    const auto results = run_scenario(t, s);
    CHECK_FALSE(results[0][0].ok);
    CHECK_MESSAGE(results[0][0].error.find("tensor norm has no data") != std::string::npos, results[0][0].error);
    for (int r = 1; r <= t.receivers; ++r) {
      const Outcome& got = results[static_cast<size_t>(r)][0];
      CHECK_FALSE(got.ok);
      CHECK(got.sink_calls == 0);
      // A mailbox stays empty (the receiver times out); a group hears why at once.
      const std::string why = t.mailbox() ? "waited 2 s" : "abandoned this version: ";
      CHECK_MESSAGE(got.error.find(why) != std::string::npos, got.error);
      if (!t.mailbox()) CHECK_MESSAGE(got.error.find("tensor norm has no data") != std::string::npos, got.error);
    }
    CHECK_MESSAGE(results[0][1].ok, results[0][1].error);
    for (int r = 1; r <= t.receivers; ++r) check_received(results[static_cast<size_t>(r)][1], s.steps[1]);
  });
}

TEST_CASE("a receiver without a sender fails after its timeout, naming the transport") {
  for_each_transport([](const TransportUnderTest& t) {
    Scenario s;
    s.with_sender = false;
    s.timeout_s = 1.0;
    s.steps = {plain_step(40, 13, t.receivers)};
    const auto start = Clock::now();
    const auto results = run_scenario(t, s);
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    CHECK(elapsed < s.timeout_s + 10);  // bounded: no hang
    for (int r = 1; r <= t.receivers; ++r) {
      const Outcome& got = results[static_cast<size_t>(r)][0];
      CHECK_FALSE(got.ok);
      CHECK_MESSAGE(got.error.find("weight_sync " + t.method) != std::string::npos, got.error);
      CHECK_MESSAGE(got.error.find("1 s") != std::string::npos, got.error);  // the limit it waited
      CHECK(got.seconds >= s.timeout_s * 0.9);
      CHECK(got.seconds < s.timeout_s + 5);
      if (!t.mailbox()) CHECK_MESSAGE(got.error.find("rank 0") != std::string::npos, got.error);
    }
  });
}

#ifdef TANDEM_WEIGHT_SYNC_GPU

int main(int argc, char** argv) {
  const std::string why = in_child([] { return cuda_unavailable_reason(0); });
  if (!why.empty()) {
    std::printf("SKIP: weight_sync GPU transports (cuda_ipc, nccl): %s\n", why.c_str());
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}

#endif
