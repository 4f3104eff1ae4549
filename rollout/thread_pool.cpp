#include "rollout/thread_pool.h"

#include <chrono>
#include <exception>

namespace tandem {

struct ThreadPool::Job {
  const std::function<void(int64_t)>* body = nullptr;  // valid while a chunk is unclaimed or running
  int64_t chunks = 0;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
  std::mutex error_mutex;
  std::exception_ptr error;
};

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < threads; ++i) helpers_.emplace_back([this] { helper_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : helpers_) t.join();
}

void ThreadPool::work_on(Job& job) {
  for (int64_t chunk; (chunk = job.next.fetch_add(1)) < job.chunks;) {
    try {
      (*job.body)(chunk);
    } catch (...) {
      std::lock_guard<std::mutex> lock(job.error_mutex);
      if (!job.error) job.error = std::current_exception();
    }
    job.done.fetch_add(1, std::memory_order_release);
  }
}

void ThreadPool::helper_loop() {
  uint64_t seen = 0;
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      job = job_;
    }
    work_on(*job);
  }
}

void ThreadPool::run(int64_t chunks, const std::function<void(int64_t)>& body) {
  if (chunks <= 0) return;
  if (helpers_.empty() || chunks == 1) {
    for (int64_t c = 0; c < chunks; ++c) body(c);
    return;
  }
  auto job = std::make_shared<Job>();
  job->body = &body;
  job->chunks = chunks;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = job;
    ++generation_;
  }
  wake_.notify_all();
  work_on(*job);
  // Only chunks a helper has claimed are left; they are running right now.
  while (job->done.load(std::memory_order_acquire) < chunks) std::this_thread::yield();
  if (job->error) std::rethrow_exception(job->error);
}

}  // namespace tandem
