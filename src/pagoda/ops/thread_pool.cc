#include "pagoda/ops/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace pagoda {

namespace {

thread_local bool t_inside_pool_body = false;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Workers and the caller spin this long for the next job / the end of the job before blocking: a decode
// step issues dozens of small parallel ops back to back, and a condition-variable wake-up per op would cost
// more than the op. Bounded, so idle threads do not burn a shared machine.
constexpr auto kSpin = std::chrono::microseconds(50);

template <typename Pred>
bool spin_until(Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  for (int i = 0;; ++i) {
    if (pred()) return true;
    cpu_relax();
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > deadline) return pred();
  }
}

}  // namespace

struct ThreadPool::State {
  std::mutex call_mu;  // serialises parallel_for callers
  std::mutex mu;       // guards sleeping on the condition variables
  std::condition_variable work_cv;
  std::condition_variable done_cv;
  std::vector<std::thread> workers;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> generation{0};  // bumped for every job
  // The current job (written before generation is bumped, read after it is seen).
  const std::function<void(int64_t, int64_t)>* body = nullptr;
  int64_t n = 0, chunk = 1, num_chunks = 0;
  std::atomic<int64_t> next_chunk{0};
  std::atomic<int> active{0};  // workers still inside the current job

  void run_chunks() {
    t_inside_pool_body = true;
    for (;;) {
      const int64_t c = next_chunk.fetch_add(1, std::memory_order_relaxed);
      if (c >= num_chunks) break;
      const int64_t b = c * chunk;
      (*body)(b, std::min(n, b + chunk));
    }
    t_inside_pool_body = false;
  }

  void worker_loop() {
    uint64_t seen = 0;
    for (;;) {
      auto ready = [&] { return stop.load(std::memory_order_acquire) || generation.load(std::memory_order_acquire) != seen; };
      if (!spin_until(ready)) {
        std::unique_lock<std::mutex> lock(mu);
        work_cv.wait(lock, ready);
      }
      if (stop.load(std::memory_order_acquire)) return;
      seen = generation.load(std::memory_order_acquire);
      run_chunks();
      if (active.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard<std::mutex> lock(mu);
        done_cv.notify_one();
      }
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
    state_->stop.store(true, std::memory_order_release);
  }
  state_->work_cv.notify_all();
  for (auto& t : state_->workers) t.join();
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  // Up to 4 chunks per thread for load balance, none smaller than grain.
  const int64_t max_chunks = int64_t(num_threads_) * 4;
  const int64_t chunk = std::max(grain, (n + max_chunks - 1) / max_chunks);
  const int64_t num_chunks = (n + chunk - 1) / chunk;
  if (num_threads_ == 1 || num_chunks == 1 || t_inside_pool_body) {
    body(0, n);
    return;
  }
  State& s = *state_;
  std::lock_guard<std::mutex> call_lock(s.call_mu);
  s.body = &body;
  s.n = n;
  s.chunk = chunk;
  s.num_chunks = num_chunks;
  s.next_chunk.store(0, std::memory_order_relaxed);
  s.active.store(int(s.workers.size()), std::memory_order_relaxed);
  {
    // Under the mutex, so a worker between its predicate check and its wait cannot miss the bump.
    std::lock_guard<std::mutex> lock(s.mu);
    s.generation.fetch_add(1, std::memory_order_release);
  }
  s.work_cv.notify_all();
  s.run_chunks();
  auto done = [&] { return s.active.load(std::memory_order_acquire) == 0; };
  if (!spin_until(done)) {
    std::unique_lock<std::mutex> lock(s.mu);
    s.done_cv.wait(lock, done);
  }
  s.body = nullptr;
}

}  // namespace pagoda
