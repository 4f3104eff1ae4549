#include "core/trace.h"

#include "core/files.h"
#include "core/net_address.h"

#include <nlohmann/json.hpp>

#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <mutex>
#include <set>

#ifdef TANDEM_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

namespace tandem::trace {
namespace {

// The process's spans: a ring of kSpanCapacity records, overwritten oldest first.
struct Ring {
  std::mutex mutex;
  std::vector<SpanRecord> records = std::vector<SpanRecord>(kSpanCapacity);
  size_t next = 0;   // where the next record goes
  size_t size = 0;   // records held
  uint64_t dropped = 0;
  std::set<int32_t> threads;  // every thread that recorded a span
};

Ring& ring() {
  static Ring* r = new Ring;  // never destroyed: threads may record during static destruction
  return *r;
}

int32_t this_thread_id() {
  thread_local const int32_t id = static_cast<int32_t>(::syscall(SYS_gettid));
  return id;
}

}  // namespace

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void record(const char* name, const char* category, int64_t start_us, int64_t count) {
  const SpanRecord span{name, category, start_us, now_us() - start_us, this_thread_id(), count};
  Ring& r = ring();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.records[r.next] = span;
  r.next = (r.next + 1) % kSpanCapacity;
  if (r.size < kSpanCapacity) {
    ++r.size;
  } else {
    ++r.dropped;
  }
  r.threads.insert(span.thread_id);
}

Span::Span(const char* name, const char* category) : name_(name), category_(category), start_us_(now_us()) {
#ifdef TANDEM_HAVE_NVTX
  nvtxRangePushA(name);
#endif
}

Span::~Span() {
#ifdef TANDEM_HAVE_NVTX
  nvtxRangePop();
#endif
  record(name_, category_, start_us_, count_);
}

std::vector<SpanRecord> take() {
  Ring& r = ring();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<SpanRecord> out;
  out.reserve(r.size);
  const size_t first = (r.next + kSpanCapacity - r.size) % kSpanCapacity;
  for (size_t i = 0; i < r.size; ++i) out.push_back(r.records[(first + i) % kSpanCapacity]);
  r.size = 0;
  return out;
}

uint64_t take_dropped() {
  Ring& r = ring();
  std::lock_guard<std::mutex> lock(r.mutex);
  const uint64_t dropped = r.dropped;
  r.dropped = 0;
  return dropped;
}

std::map<int32_t, std::string> thread_names() {
  std::set<int32_t> threads;
  {
    Ring& r = ring();
    std::lock_guard<std::mutex> lock(r.mutex);
    threads = r.threads;
  }
  std::map<int32_t, std::string> names;
  for (int32_t tid : threads) {
    // Empty when the thread has ended.
    std::string name = read_file("/proc/self/task/" + std::to_string(tid) + "/comm").value_or("");
    while (!name.empty() && (name.back() == '\n' || name.back() == '\r')) name.pop_back();
    names[tid] = name.empty() ? "thread " + std::to_string(tid) : name;
  }
  return names;
}

nlohmann::json collect_json() {
  const std::vector<SpanRecord> spans = take();
  nlohmann::json threads = nlohmann::json::object();
  for (const auto& [tid, name] : thread_names()) threads[std::to_string(tid)] = name;
  nlohmann::json rows = nlohmann::json::array();
  for (const SpanRecord& s : spans) {
    rows.push_back({s.name, s.category, s.start_us, s.duration_us, s.thread_id, s.count});
  }
  return {{"pid", static_cast<int64_t>(::getpid())},
          {"host", this_hostname()},
          {"now_us", now_us()},
          {"dropped", take_dropped()},
          {"threads", threads},
          {"spans", rows}};
}

}  // namespace tandem::trace
