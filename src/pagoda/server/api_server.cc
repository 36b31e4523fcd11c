#include "pagoda/server/api_server.h"

#include <atomic>
#include <ctime>
#include <thread>

#include "pagoda/core/error.h"
#include "pagoda/core/logging.h"
#include "pagoda/core/strings.h"
#include "pagoda/server/engine_loop.h"
#include "pagoda/server/openai_api.h"
#include "pagoda/tokenizer/chat_template.h"

namespace pagoda {
namespace {

constexpr const char* kJson = "application/json";
// After the drain: how long clients get to read the end of their responses before their sockets close.
constexpr std::chrono::milliseconds kWriteGrace{3000};

void send_error(ServerResponse& res, const ApiError& e) { res.send(e.status, kJson, api_error_body(e)); }

std::string prometheus_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') { out += "\\n"; continue; }
    out += c;
  }
  return out;
}

// Compares in time that depends on the lengths only, not on where the strings first differ.
bool constant_time_equal(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

enum class Route { kCompletions, kChat, kModels, kHealth, kMetrics, kTokenize, kDetokenize, kEmbeddings };
struct RouteEntry {
  const char* path;
  const char* method;
  Route route;
};
constexpr RouteEntry kRoutes[] = {
    {"/v1/completions", "POST", Route::kCompletions}, {"/v1/chat/completions", "POST", Route::kChat},
    {"/v1/models", "GET", Route::kModels},             {"/health", "GET", Route::kHealth},
    {"/metrics", "GET", Route::kMetrics},              {"/tokenize", "POST", Route::kTokenize},
    {"/detokenize", "POST", Route::kDetokenize},       {"/v1/embeddings", "POST", Route::kEmbeddings},
};

}  // namespace

struct ApiServer::Impl {
  Impl(Engine& e, ServerOptions o)
      : engine(e), options(std::move(o)), loop(e),
        http(options.http, [this](const ServerRequest& req, ServerResponse& res) { handle(req, res); }) {}
  Engine& engine;
  ServerOptions options;
  ServedModel model;
  EngineLoop loop;
  HttpServer http;
  int64_t created = int64_t(std::time(nullptr));
  std::atomic<bool> stopping{false};
  std::atomic<int64_t> http_requests{0};

  void handle(const ServerRequest& req, ServerResponse& res);
  void completions(const ServerRequest& req, ServerResponse& res, bool chat);
  std::string metrics_text() const;
};

ApiServer::ApiServer(Engine& engine, ServerOptions options) : impl_(std::make_unique<Impl>(engine, std::move(options))) {
  Impl& s = *impl_;
  if (s.options.model_names.empty()) s.options.model_names.push_back(s.options.model_root);
  s.model.names = s.options.model_names;
  s.model.root = s.options.model_root;
  s.model.max_model_len = engine.max_model_len();
  s.model.tokenizer = engine.tokenizer();
  s.model.limits = s.options.request_limits;
  s.model.render_limits.timeout = s.options.render_timeout;
  if (s.options.chat_template) {
    s.model.chat_template = std::make_shared<ChatTemplate>(*s.options.chat_template);
  } else if (s.model.tokenizer && !s.model.tokenizer->chat_template().empty()) {
    s.model.chat_template = std::make_shared<ChatTemplate>(s.model.tokenizer->chat_template());
  }
}

ApiServer::~ApiServer() { stop(); }

int ApiServer::bind() { return impl_->http.bind(impl_->options.host, impl_->options.port); }

void ApiServer::run() { impl_->http.run(); }

void ApiServer::stop() {
  Impl& s = *impl_;
  if (s.stopping.exchange(true)) return;
  // The listener and idle connections close now; handlers have the drain and the write grace.
  s.http.stop(s.options.shutdown_timeout + kWriteGrace);
  const auto deadline = std::chrono::steady_clock::now() + s.options.shutdown_timeout;
  while (s.loop.num_live() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (s.loop.num_live() > 0)
    PAGODA_LOG_INFO("Aborting ", s.loop.num_live(), " request(s) in flight");
  s.loop.abort_all();
}

void ApiServer::Impl::handle(const ServerRequest& req, ServerResponse& res) {
  ++http_requests;
  const RouteEntry* found = nullptr;
  bool path_known = false;
  for (const RouteEntry& r : kRoutes) {
    if (req.path != r.path) continue;
    path_known = true;
    if (req.method == r.method) found = &r;
  }
  if (!path_known) return send_error(res, ApiError{404, str_cat("Not Found: ", req.method, " ", req.path), ""});
  if (!found) {
    std::string allow;
    for (const RouteEntry& r : kRoutes)
      if (req.path == r.path) allow = r.method;
    res.send(405, kJson, api_error_body(ApiError{405, str_cat("Method Not Allowed: ", req.method, " ", req.path), ""}),
             {{"Allow", allow}});
    return;
  }
  if (stopping) return send_error(res, ApiError{503, "the server is shutting down", ""});
  if (!options.api_key.empty() && req.path.rfind("/v1/", 0) == 0) {
    const std::string* auth = req.header("authorization");
    if (!auth || !constant_time_equal(*auth, "Bearer " + options.api_key))
      return send_error(res, ApiError{401, "Unauthorized: give the API key as `Authorization: Bearer KEY`", ""});
  }
  try {
    switch (found->route) {
      case Route::kCompletions: return completions(req, res, false);
      case Route::kChat: return completions(req, res, true);
      case Route::kModels: res.send(200, kJson, models_body(model, created)); return;
      case Route::kHealth: res.send(200, "", ""); return;
      case Route::kMetrics: res.send(200, "text/plain; version=0.0.4; charset=utf-8", metrics_text()); return;
      case Route::kTokenize: res.send(200, kJson, tokenize_body(req.body, model, res.gone_flag())); return;
      case Route::kDetokenize: res.send(200, kJson, detokenize_body(req.body, model)); return;
      // A generative model: vLLM's answer (encoder models are served by embedding_server.h).
      case Route::kEmbeddings: return send_error(res, ApiError{400, "The model does not support Embeddings API", ""});
    }
  } catch (const ApiError& e) {
    if (!res.started()) send_error(res, e);
  } catch (const Error& e) {
    if (!res.started()) send_error(res, ApiError{400, e.what(), ""});
  }
}

void ApiServer::Impl::completions(const ServerRequest& req, ServerResponse& res, bool chat) {
  const CompletionJob job = parse_completion_request(req.body, chat, model, res.gone_flag());
  CompletionResponse response(job, model);
  std::shared_ptr<OutputStream> stream;
  try {
    stream = loop.submit(job.prompts, job.params);
  } catch (const Error& e) {  // the engine refused a request
    return send_error(res, ApiError{400, e.what(), ""});
  } catch (const std::exception& e) {
    PAGODA_LOG_ERROR("adding a request failed: ", e.what());
    return send_error(res, ApiError{500, str_cat("internal error: ", e.what()), ""});
  }
  // Whatever ends this function (a client gone, a failed write) releases the requests: unfinished ones are
  // aborted and free their KV blocks.
  struct Release {
    EngineLoop& loop;
    const std::shared_ptr<OutputStream>& stream;
    ~Release() { loop.release(stream); }
  } release{loop, stream};
  std::vector<StreamItem> items;
  std::string error;
  if (!job.stream) {
    while (stream->pop(items, std::chrono::milliseconds(100))) {
      for (const StreamItem& it : items) {
        if (!it.error.empty()) error = it.error;
        response.add(it.index, it.output);
      }
      if (res.client_gone()) return;
    }
    if (!error.empty()) return send_error(res, ApiError{500, str_cat("internal error: ", error), ""});
    res.send(200, kJson, response.body());
    return;
  }
  if (!res.begin_chunked(200, "text/event-stream", {{"Cache-Control", "no-cache"}})) return;
  while (stream->pop(items, std::chrono::milliseconds(100))) {
    for (const StreamItem& it : items) {
      if (!it.error.empty()) {
        error = it.error;
        continue;
      }
      std::string events = response.stream_events(it.index, it.output);
      if (!events.empty() && !res.write_chunk(events)) return;
    }
    if (res.client_gone()) return;
  }
  if (!error.empty()) {
    std::string event = str_cat("data: ", api_error_body(ApiError{500, str_cat("internal error: ", error), ""}), "\n\n");
    if (!res.write_chunk(event)) return;
    res.write_chunk("data: [DONE]\n\n");
    res.end_chunked();
    return;
  }
  if (res.write_chunk(response.stream_end())) res.end_chunked();
}

std::string ApiServer::Impl::metrics_text() const {
  const EngineMetrics m = engine.metrics();
  const LatencyHistograms h = loop.histograms();
  const std::string labels = str_cat("model_name=\"", prometheus_escape(model.names.front()), "\"");
  std::string out;
  auto metric = [&](const std::string& name, const char* type, const std::string& help, const std::string& series) {
    out += str_cat("# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n", series);
  };
  auto line = [&](const std::string& name, const std::string& extra, auto value) {
    return str_cat(name, "{", labels, extra.empty() ? "" : ",", extra, "} ", value, "\n");
  };
  metric("pagoda_num_requests_running", "gauge", "Requests in the running batch.", line("pagoda_num_requests_running", "", m.num_running));
  metric("pagoda_num_requests_waiting", "gauge", "Requests waiting to be scheduled.", line("pagoda_num_requests_waiting", "", m.num_waiting));
  metric("pagoda_kv_cache_usage_perc", "gauge", "Fraction of KV cache blocks in use (1 = 100%).", line("pagoda_kv_cache_usage_perc", "", m.kv_cache_usage));
  metric("pagoda_prefix_cache_hit_rate", "gauge", "Prompt tokens found in the prefix cache / tokens looked up.",
         line("pagoda_prefix_cache_hit_rate", "", m.prefix_cache_hit_rate()));
  metric("pagoda_prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.", line("pagoda_prefix_cache_queries_total", "", m.prefix_cache_queries));
  metric("pagoda_prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.", line("pagoda_prefix_cache_hits_total", "", m.prefix_cache_hits));
  metric("pagoda_num_preemptions_total", "counter", "Preemptions of running requests.", line("pagoda_num_preemptions_total", "", m.num_preemptions));
  metric("pagoda_prompt_tokens_total", "counter", "Prompt tokens processed.", line("pagoda_prompt_tokens_total", "", m.prompt_tokens));
  metric("pagoda_generation_tokens_total", "counter", "Generated tokens.", line("pagoda_generation_tokens_total", "", m.generation_tokens));
  metric("pagoda_request_success_total", "counter", "Finished requests by finish reason.",
         line("pagoda_request_success_total", "finished_reason=\"stop\"", m.finished_stop) +
             line("pagoda_request_success_total", "finished_reason=\"length\"", m.finished_length) +
             line("pagoda_request_success_total", "finished_reason=\"abort\"", m.finished_abort));
  out += h.ttft.render("pagoda_time_to_first_token_seconds", "Time to first token.", labels);
  out += h.itl.render("pagoda_inter_token_latency_seconds", "Time between consecutive generated tokens.", labels);
  out += h.e2e.render("pagoda_e2e_request_latency_seconds", "End-to-end request latency.", labels);
  metric("pagoda_attention_backend_info", "gauge", "The attention backend serving the model.",
         str_cat("pagoda_attention_backend_info{backend=\"", prometheus_escape(options.attention_backend), "\"} 1\n"));
  metric("pagoda_http_requests_total", "counter", "HTTP requests received.", str_cat("pagoda_http_requests_total ", http_requests.load(), "\n"));
  return out;
}

}  // namespace pagoda
