#include "pagoda/ops/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace pagoda {

namespace {
thread_local bool t_inside_pool_body = false;
}  // namespace

struct ThreadPool::State {
  std::mutex call_mu;  // serialises parallel_for callers
  std::mutex mu;
  std::condition_variable work_cv;
  std::condition_variable done_cv;
  std::vector<std::thread> workers;
  bool stop = false;
  uint64_t generation = 0;  // bumped for every job
  // The current job.
  const std::function<void(int64_t, int64_t)>* body = nullptr;
  int64_t n = 0, chunk = 1, num_chunks = 0;
  std::atomic<int64_t> next_chunk{0};
  int active = 0;  // workers still inside the current job

  void run_chunks() {
    t_inside_pool_body = true;
    for (;;) {
      int64_t c = next_chunk.fetch_add(1, std::memory_order_relaxed);
      if (c >= num_chunks) break;
      int64_t b = c * chunk;
      (*body)(b, std::min(n, b + chunk));
    }
    t_inside_pool_body = false;
  }

  void worker_loop() {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      work_cv.wait(lock, [&] { return stop || generation != seen; });
      if (stop) return;
      seen = generation;
      lock.unlock();
      run_chunks();
      lock.lock();
      if (--active == 0) done_cv.notify_one();
    }
  }
};

ThreadPool::ThreadPool(int num_threads) : state_(std::make_unique<State>()) {
  if (num_threads <= 0) num_threads = int(std::max(1u, std::thread::hardware_concurrency()));
  num_threads_ = num_threads;
  for (int i = 1; i < num_threads_; ++i) state_->workers.emplace_back([s = state_.get()] { s->worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stop = true;
  }
  state_->work_cv.notify_all();
  for (auto& t : state_->workers) t.join();
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  // Up to 4 chunks per thread for load balance, none smaller than grain.
  int64_t max_chunks = int64_t(num_threads_) * 4;
  int64_t chunk = std::max(grain, (n + max_chunks - 1) / max_chunks);
  int64_t num_chunks = (n + chunk - 1) / chunk;
  if (num_threads_ == 1 || num_chunks == 1 || t_inside_pool_body) {
    body(0, n);
    return;
  }
  State& s = *state_;
  std::lock_guard<std::mutex> call_lock(s.call_mu);
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.body = &body;
    s.n = n;
    s.chunk = chunk;
    s.num_chunks = num_chunks;
    s.next_chunk.store(0, std::memory_order_relaxed);
    s.active = int(s.workers.size());
    ++s.generation;
  }
  s.work_cv.notify_all();
  s.run_chunks();
  std::unique_lock<std::mutex> lock(s.mu);
  s.done_cv.wait(lock, [&] { return s.active == 0; });
  s.body = nullptr;
}

}  // namespace pagoda
