// A small fixed thread pool for the CPU ops: one parallel_for at a time, the calling thread takes part.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

namespace pagoda {

class ThreadPool {
 public:
  // num_threads counts the calling thread: 1 runs everything inline; <= 0 means one per hardware thread.
  explicit ThreadPool(int num_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Calls body(begin, end) on disjoint chunks covering [0, n), each at least `grain` long (except the
  // last), and returns when all are done. Chunks never depend on the thread count for their results:
  // callers write disjoint outputs. A call from inside a body runs inline (no nested parallelism).
  // Calls from several threads are serialised.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body);

 private:
  struct State;
  int num_threads_;
  std::unique_ptr<State> state_;
};

// parallel_for on `pool`, or inline when pool is null.
inline void parallel_for(ThreadPool* pool, int64_t n, int64_t grain,
                         const std::function<void(int64_t, int64_t)>& body) {
  if (n <= 0) return;
  if (pool == nullptr) {
    body(0, n);
    return;
  }
  pool->parallel_for(n, grain, body);
}

}  // namespace pagoda
