// Spans: where a process's time goes, for the Chrome traces of `logging.trace_every`
// (controller/observe/step_trace.h). Every process (the controller and each worker) records the
// spans of its threads into one bounded ring buffer; recording costs a lock and a store
// per span, so it is always on and the buffer keeps the newest kSpanCapacity spans. A
// worker hands its spans over on the `trace_collect` command.
//
// Span names and categories must be string literals (or other storage that outlives the
// process): records keep the pointers. On builds with the CUDA toolkit each span is also
// an NVTX range, so Nsight Systems shows the same phases.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tandem::trace {

inline constexpr size_t kSpanCapacity = 1 << 16;

struct SpanRecord {
  const char* name = "";
  const char* category = "";
  int64_t start_us = 0;     // now_us() when it began
  int64_t duration_us = 0;
  int32_t thread_id = 0;    // the kernel's thread id (gettid)
  int64_t count = -1;       // what the span processed (tokens, bytes, samples); -1: nothing said
};

// Microseconds on the monotonic clock every span uses. One clock per host: processes on
// one host agree; across hosts the controller measures offsets (WorkerPool::clock_offset_us).
int64_t now_us();

// Records a span that began at `start_us` and ends now.
void record(const char* name, const char* category, int64_t start_us, int64_t count = -1);

// A span from construction to destruction, on the current thread.
class Span {
 public:
  explicit Span(const char* name, const char* category = "tandem");
  ~Span();
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  // What the span processed (shown as its argument in the trace viewer).
  void set_count(int64_t count) { count_ = count; }

 private:
  const char* name_;
  const char* category_;
  int64_t start_us_;
  int64_t count_ = -1;
};

// Removes and returns the spans recorded so far, oldest first.
std::vector<SpanRecord> take();
// How many spans the ring buffer overwrote before a take() got them, since the last take().
uint64_t take_dropped();

// The names of this process's threads that have recorded spans (/proc/self/task/TID/comm).
std::map<int32_t, std::string> thread_names();

// The `trace_collect` reply body: {pid, host, now_us, dropped, threads: {tid: name},
// spans: [[name, category, start_us, duration_us, tid, count], ...]}; drains the buffer.
nlohmann::json collect_json();

}  // namespace tandem::trace
