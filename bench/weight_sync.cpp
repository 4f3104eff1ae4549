// Weight-transfer throughput of the weight_sync transports: for 10 MiB, 100 MiB, 1 GiB and
// 2 GiB of weights (tensors of up to 64 MiB, float32 and bfloat16, 256 MiB buckets) one
// JSON line per (transport, size):
//   {"bench":"weight_sync","transport":"shm","bytes":...,"seconds":...,"gb_per_s":...,
//    "memcpy_seconds":...,"vs_memcpy":...}
// `seconds` is the median over --reps of a whole transfer: from publish() until the
// receiver's sink has copied every tensor into its own memory (what a rollout worker does),
// checksums included. `first_seconds` is the transfer before those: for shm the one that
// creates the segment (later ones rewrite it in place), for collective the one that also
// connects the group. `vs_memcpy` is our speed over a plain memcpy of the same bytes in the
// same run (1.0 would be memcpy speed; every transport copies at least twice).
//   shm         publish, then receive, in this process (a mailbox: nothing waits on a peer)
//   collective  a receiver in a second process on loopback; seconds as seen by the sender,
//               whose publish() returns once the receiver has checked every bucket
//   cuda_ipc, nccl: a "skipped" line with the reason (no GPU here; not measured yet)
// Sizes beyond --max-bytes (default 2 GiB), or that do not fit in free memory or
// /dev/shm, are skipped with a line saying why.
#include "core/error.h"
#include "weight_sync/cuda_device.h"
#include "weight_sync/shm.h"
#include "weight_sync/transport.h"

#include <nlohmann/json.hpp>
#include <signal.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

using namespace tandem;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kBucketBytes = 256 * kMiB;
constexpr int64_t kTensorBytes = 64 * kMiB;

struct Weights {
  std::vector<std::vector<uint8_t>> data;
  std::vector<OutgoingTensor> outgoing;
  std::vector<ExpectedTensor> expected;
  int64_t bytes = 0;
};

// Tensors of up to 64 MiB, alternating float32 and bfloat16, random bits (never zeros).
Weights make_weights(int64_t total) {
  Weights w;
  std::mt19937_64 rng(7);
  for (int64_t left = total, i = 0; left > 0; ++i) {
    const DType dtype = i % 2 == 0 ? DType::f32 : DType::bf16;
    const int64_t element = static_cast<int64_t>(dtype_size(dtype));
    const int64_t numel = std::min(left, kTensorBytes) / element;
    std::vector<uint8_t> data(static_cast<size_t>(numel * element));
    for (size_t j = 0; j + 8 <= data.size(); j += 8) {
      const uint64_t x = rng();
      std::memcpy(&data[j], &x, 8);
    }
    const std::string name = "layers." + std::to_string(i) + ".weight";
    w.expected.push_back({name, {numel}, dtype});
    w.data.push_back(std::move(data));
    w.bytes += numel * element;
    left -= numel * element;
  }
  for (size_t i = 0; i < w.data.size(); ++i) {
    w.outgoing.push_back({w.expected[i].name, w.expected[i].shape, w.data[i].data(), w.expected[i].dtype});
  }
  return w;
}

// The receiving side's memory: every tensor copied out of the transport, as rollout does.
struct Destination {
  std::vector<std::vector<uint8_t>> data;
  explicit Destination(const Weights& w) {
    for (const auto& d : w.data) data.emplace_back(d.size(), 1);  // touched: no page faults in the timing
  }
  WeightSink sink(const Weights& w) {
    return [this, &w](const ExpectedTensor& t, const void* bytes) {
      const size_t i = static_cast<size_t>(std::stoll(t.name.substr(7)));
      std::memcpy(data[i].data(), bytes, data[i].size());
    };
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double memcpy_seconds(const Weights& w, Destination& d, int reps) {
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    const auto start = Clock::now();
    for (size_t i = 0; i < w.data.size(); ++i) std::memcpy(d.data[i].data(), w.data[i].data(), w.data[i].size());
    times.push_back(seconds_since(start));
  }
  return median(times);
}

struct Timing {
  double median = 0;
  double first = 0;  // shm: a fresh segment (later versions rewrite it); collective: connecting too
};

Timing shm_seconds(const Weights& w, Destination& d, int reps) {
  WeightSyncOptions o;
  o.method = "shm";
  o.address = "/tandem-bench-ws-" + std::to_string(::getpid());
  o.bucket_bytes = kBucketBytes;
  auto sender = make_weight_sender(o);
  auto receiver = make_weight_receiver(o);
  std::vector<double> times;
  for (int r = 0; r <= reps; ++r) {
    const auto start = Clock::now();
    sender->publish(r, w.outgoing);
    TANDEM_CHECK(receiver->receive(w.expected, d.sink(w)) == r, "shm bench: wrong version");
    times.push_back(seconds_since(start));
  }
  remove_weights_shm(o.address);
  return {median(std::vector<double>(times.begin() + 1, times.end())), times[0]};
}

// The receiver runs in a forked child (before this process made any Gloo threads); the
// parent publishes a warm-up version (connecting the group) and then `reps` timed ones.
Timing collective_seconds(const Weights& w, int reps) {
  WeightSyncOptions o;
  o.method = "collective";
  o.address = (fs::temp_directory_path() / ("tandem-bench-ws-" + std::to_string(::getpid()))).string();
  o.bucket_bytes = kBucketBytes;
  o.timeout_s = 120;
  fs::remove_all(o.address);
  const pid_t child = ::fork();
  TANDEM_CHECK(child >= 0, "fork: {}", std::strerror(errno));
  if (child == 0) {
    int code = 0;
    try {
      WeightSyncOptions mine = o;
      mine.rank = 1;
      Destination d(w);
      auto receiver = make_weight_receiver(mine);
      for (int r = 0; r <= reps; ++r) receiver->receive(w.expected, d.sink(w));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "collective bench receiver: %s\n", e.what());
      code = 1;
    }
    ::_exit(code);
  }
  std::vector<double> times;
  double first = 0;
  try {
    auto sender = make_weight_sender(o);
    const auto start = Clock::now();
    sender->publish(0, w.outgoing);  // warm-up: connects the group
    first = seconds_since(start);
    for (int r = 1; r <= reps; ++r) {
      const auto start = Clock::now();
      sender->publish(r, w.outgoing);
      times.push_back(seconds_since(start));
    }
  } catch (...) {
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    throw;
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  fs::remove_all(o.address);
  TANDEM_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "collective bench: the receiver process failed");
  return {median(times), first};
}

int64_t meminfo_available() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024;
  }
  return 0;
}

int64_t shm_free() {
  struct statvfs s {};
  if (::statvfs("/dev/shm", &s) != 0) return 0;
  return static_cast<int64_t>(s.f_bavail) * static_cast<int64_t>(s.f_frsize);
}

void print(const nlohmann::json& line) {
  std::printf("%s\n", line.dump().c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t max_bytes = 2048 * kMiB;
  int reps = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--max-bytes" && i + 1 < argc) max_bytes = std::stoll(argv[++i]);
    else if (arg == "--max-mib" && i + 1 < argc) max_bytes = std::stoll(argv[++i]) * kMiB;
    else if (arg == "--reps" && i + 1 < argc) reps = std::max(1, std::stoi(argv[++i]));
    else {
      std::fprintf(stderr, "usage: %s [--max-mib N | --max-bytes N] [--reps N]\n", argv[0]);
      return 2;
    }
  }
  const std::string gpu = cuda_unavailable_reason(0);
  for (const std::string method : {"cuda_ipc", "nccl"}) {
    print({{"bench", "weight_sync"}, {"transport", method},
           {"skipped", gpu.empty() ? "a GPU is present, but this bench measures the CPU transports only" : gpu}});
  }
  try {
    for (const int64_t size : {10 * kMiB, 100 * kMiB, 1024 * kMiB, 2048 * kMiB}) {
      nlohmann::json base = {{"bench", "weight_sync"}, {"bytes", size}, {"bucket_bytes", kBucketBytes}, {"reps", reps}};
      // source + segment + destination (shm); source + destination in two processes (collective)
      std::string why;
      if (size > max_bytes) why = fmt::format("above --max-bytes {}", max_bytes);
      else if (3 * size > meminfo_available() * 8 / 10) why = fmt::format("needs {} bytes of free memory", 3 * size);
      if (!why.empty()) {
        base["skipped"] = why;
        print(base);
        continue;
      }
      const Weights w = make_weights(size);
      Destination d(w);
      const double copy = memcpy_seconds(w, d, reps);
      auto report = [&](const std::string& transport, Timing timing) {
        const double seconds = timing.median;
        nlohmann::json line = base;
        line["transport"] = transport;
        line["tensors"] = w.data.size();
        line["seconds"] = seconds;
        line["first_seconds"] = timing.first;
        line["gb_per_s"] = static_cast<double>(size) / seconds / 1e9;
        line["memcpy_seconds"] = copy;
        line["memcpy_gb_per_s"] = static_cast<double>(size) / copy / 1e9;
        line["vs_memcpy"] = copy / seconds;
        print(line);
      };
      if (size + 64 * kMiB > shm_free()) {
        nlohmann::json line = base;
        line["transport"] = "shm";
        line["skipped"] = "does not fit in /dev/shm";
        print(line);
      } else {
        report("shm", shm_seconds(w, d, reps));
      }
      report("collective", collective_seconds(w, reps));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "weight_sync bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
