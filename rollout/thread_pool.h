// A fork-join pool for the CPU backend's loops.
//
// Why not OpenMP: at the end of an OpenMP parallel region every thread of the team must
// arrive at the barrier, so when another process holds a core (a learner beside the
// rollout worker, a build, a CI neighbour) each region waits for a descheduled thread's
// next time slice; measured here that made a decode step 10-100x slower on 2 busy cores.
// In this pool the caller works through the chunks itself and waits only for chunks a
// helper has already claimed; a helper that wakes late finds nothing left and goes back
// to sleep. Chunks never depend on which thread runs them, so results are deterministic.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace tandem {

class ThreadPool {
 public:
  // `threads` counts the caller: 1 runs everything inline. 0: the machine's cores.
  explicit ThreadPool(int threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return static_cast<int>(helpers_.size()) + 1; }
  // Calls body(chunk) for chunk in [0, chunks), spread over the pool; returns when all
  // are done. The first exception thrown by a chunk is rethrown here.
  void run(int64_t chunks, const std::function<void(int64_t)>& body);

 private:
  struct Job;
  void helper_loop();
  static void work_on(Job& job);

  std::vector<std::thread> helpers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::shared_ptr<Job> job_;  // the latest job; helpers hold their own reference
  uint64_t generation_ = 0;
  bool stopping_ = false;
};

}  // namespace tandem
