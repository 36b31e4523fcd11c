// The server's engine thread: one thread loops Engine::step() and hands each RequestOutput to the
// OutputStream of the HTTP request that asked for it; handler threads wait on their stream. An HTTP
// request with several engine requests (n > 1, a batch of prompts) has one stream; each item carries the
// index of its engine request. Latency histograms for /metrics are recorded here, from finished outputs.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "pagoda/core/ids.h"
#include "pagoda/engine/engine.h"

namespace pagoda {

class EngineLoop;

struct StreamItem {
  int index = 0;  // which of the stream's engine requests
  RequestOutput output;
  std::string error;  // non-empty: the engine failed this request (output.finished is set); the reason
};

class OutputStream {
 public:
  // Moves the queued items into `items` (cleared first), waiting up to `timeout` for one. Returns false
  // when every engine request of the stream has finished and nothing is left to take.
  bool pop(std::vector<StreamItem>& items, std::chrono::milliseconds timeout);
  size_t size() const { return ids_.size(); }

 private:
  friend class EngineLoop;
  std::vector<RequestId> ids_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StreamItem> queue_;
  size_t num_finished_ = 0;
};

// A Prometheus histogram (cumulative buckets, sum, count); not thread-safe on its own.
struct Histogram {
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double v);
  // "# HELP", "# TYPE" and the series lines; `labels` like `model_name="x"` (may be empty).
  std::string render(const std::string& name, const std::string& help, const std::string& labels) const;
  std::vector<double> bounds;
  std::vector<int64_t> counts;  // per bucket, not cumulative; one more for +Inf
  double sum = 0;
  int64_t count = 0;
};

struct LatencyHistograms {
  Histogram ttft, itl, e2e;
  LatencyHistograms();
};

class EngineLoop {
 public:
  explicit EngineLoop(Engine& engine);
  ~EngineLoop();  // stop()
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  // Adds the requests as one stream. When the engine rejects one (pagoda::Error), the ones already added
  // are aborted and the error is rethrown.
  std::shared_ptr<OutputStream> submit(std::vector<std::vector<int32_t>> prompts, const std::vector<RequestParams>& params);
  // Aborts the stream's unfinished requests and forgets the stream (idempotent; called when the client is
  // gone or the response is complete).
  void release(const std::shared_ptr<OutputStream>& stream);
  // Aborts every request in flight.
  void abort_all();
  // Requests whose stream has not seen their final output.
  size_t num_live() const;
  // Aborts what is in flight, drains it (at most `drain`), and ends the thread.
  void stop(std::chrono::milliseconds drain = std::chrono::milliseconds(5000));

  Engine& engine() { return engine_; }
  LatencyHistograms histograms() const;

 private:
  void run();
  void dispatch(std::vector<RequestOutput>& outs);
  // Ends every routed request with `error` and aborts it in the engine.
  void fail_all(const std::string& error);

  Engine& engine_;
  mutable std::mutex mu_;  // routes_, histograms_
  std::unordered_map<RequestId, std::pair<std::shared_ptr<OutputStream>, int>> routes_;
  LatencyHistograms histograms_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace pagoda
