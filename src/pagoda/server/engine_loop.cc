#include "pagoda/server/engine_loop.h"

#include <algorithm>
#include <cstdio>

#include "pagoda/core/error.h"
#include "pagoda/core/logging.h"
#include "pagoda/core/strings.h"

namespace pagoda {

bool OutputStream::pop(std::vector<StreamItem>& items, std::chrono::milliseconds timeout) {
  items.clear();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !queue_.empty() || num_finished_ == ids_.size(); });
  while (!queue_.empty()) {
    items.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  return !items.empty() || num_finished_ < ids_.size();
}

Histogram::Histogram(std::vector<double> upper_bounds) : bounds(std::move(upper_bounds)), counts(bounds.size() + 1, 0) {}

void Histogram::observe(double v) {
  size_t i = size_t(std::lower_bound(bounds.begin(), bounds.end(), v) - bounds.begin());
  ++counts[i];
  sum += v;
  ++count;
}

std::string Histogram::render(const std::string& name, const std::string& help, const std::string& labels) const {
  std::string out = str_cat("# HELP ", name, " ", help, "\n# TYPE ", name, " histogram\n");
  const std::string sep = labels.empty() ? "" : ",";
  int64_t cum = 0;
  char buf[64];
  for (size_t i = 0; i <= bounds.size(); ++i) {
    cum += counts[i];
    std::string le = "+Inf";
    if (i < bounds.size()) {
      std::snprintf(buf, sizeof(buf), "%g", bounds[i]);
      le = buf;
    }
    out += str_cat(name, "_bucket{", labels, sep, "le=\"", le, "\"} ", cum, "\n");
  }
  std::snprintf(buf, sizeof(buf), "%.9g", sum);
  const std::string braces = labels.empty() ? "" : "{" + labels + "}";
  out += str_cat(name, "_sum", braces, " ", buf, "\n", name, "_count", braces, " ", count, "\n");
  return out;
}

// vLLM's buckets for these three histograms.
LatencyHistograms::LatencyHistograms()
    : ttft({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
            160.0, 640.0, 2560.0}),
      itl({0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}),
      e2e({0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0,
           1920.0, 7680.0}) {}

EngineLoop::EngineLoop(Engine& engine) : engine_(engine) { thread_ = std::thread([this] { run(); }); }

EngineLoop::~EngineLoop() { stop(); }

std::shared_ptr<OutputStream> EngineLoop::submit(std::vector<std::vector<int32_t>> prompts,
                                                 const std::vector<RequestParams>& params) {
  PAGODA_CHECK(prompts.size() == params.size(), "one RequestParams per prompt");
  auto stream = std::make_shared<OutputStream>();
  // Holding mu_ while adding: the loop cannot dispatch an output of these ids before their route exists.
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) throw_runtime_error("the server is shutting down");
  for (size_t i = 0; i < prompts.size(); ++i) {
    try {
      RequestId id = engine_.add_request(std::move(prompts[i]), params[i]);
      stream->ids_.push_back(id);
      routes_[id] = {stream, int(i)};
    } catch (...) {
      for (RequestId id : stream->ids_) {
        routes_.erase(id);
        engine_.abort(id);
      }
      throw;
    }
  }
  return stream;
}

void EngineLoop::release(const std::shared_ptr<OutputStream>& stream) {
  std::lock_guard<std::mutex> lock(mu_);
  for (RequestId id : stream->ids_) {
    // An id still routed has not finished: abort it; its final output is then dropped.
    if (routes_.erase(id) > 0) engine_.abort(id);
  }
}

void EngineLoop::abort_all() {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, route] : routes_) engine_.abort(id);
}

size_t EngineLoop::num_live() const {
  std::lock_guard<std::mutex> lock(mu_);
  return routes_.size();
}

LatencyHistograms EngineLoop::histograms() const {
  std::lock_guard<std::mutex> lock(mu_);
  return histograms_;
}

void EngineLoop::stop(std::chrono::milliseconds drain) {
  if (!thread_.joinable()) return;
  abort_all();
  const auto deadline = std::chrono::steady_clock::now() + drain;
  while (engine_.has_unfinished() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  engine_.wake();
  thread_.join();
}

void EngineLoop::run() {
  while (!stopping_) {
    if (!engine_.wait_for_work(std::chrono::milliseconds(100))) continue;
    // A step that throws (out of memory, a kernel error) cannot say which request caused it: the
    // requests in flight fail with the reason, and the loop goes on serving new ones.
    try {
      std::vector<RequestOutput> outs = engine_.step();
      dispatch(outs);
    } catch (const std::exception& e) {
      PAGODA_LOG_ERROR("engine step failed: ", e.what(), "; failing the requests in flight");
      fail_all(e.what());
    }
  }
}

void EngineLoop::fail_all(const std::string& error) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, route] : routes_) {
    auto& [stream, index] = route;
    engine_.abort(id);
    StreamItem item{index, RequestOutput{}, error};
    item.output.id = id;
    item.output.finished = true;
    item.output.finish_reason = FinishReason::kAbort;
    {
      std::lock_guard<std::mutex> slock(stream->mu_);
      stream->queue_.push_back(std::move(item));
      ++stream->num_finished_;
    }
    stream->cv_.notify_all();
  }
  routes_.clear();
}

void EngineLoop::dispatch(std::vector<RequestOutput>& outs) {
  std::lock_guard<std::mutex> lock(mu_);
  for (RequestOutput& out : outs) {
    if (out.finished && out.metrics) {
      const RequestMetrics& m = *out.metrics;
      if (out.num_generated_tokens > 0) histograms_.ttft.observe(m.ttft_s);
      for (double t : m.inter_token_latencies_s) histograms_.itl.observe(t);
      histograms_.e2e.observe(m.e2e_s);
    }
    auto it = routes_.find(out.id);
    if (it == routes_.end()) continue;  // released: nobody waits for it
    auto [stream, index] = it->second;
    const bool finished = out.finished;
    if (finished) routes_.erase(it);
    {
      std::lock_guard<std::mutex> slock(stream->mu_);
      stream->queue_.push_back(StreamItem{index, std::move(out)});
      if (finished) ++stream->num_finished_;
    }
    stream->cv_.notify_all();
  }
}

}  // namespace pagoda
