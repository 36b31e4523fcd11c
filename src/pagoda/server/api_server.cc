#include "pagoda/server/api_server.h"

#include <httplib.h>

#include <sys/socket.h>

#include <atomic>
#include <ctime>

#include "pagoda/attention/selector.h"
#include "pagoda/core/error.h"
#include "pagoda/core/logging.h"
#include "pagoda/core/strings.h"
#include "pagoda/server/engine_loop.h"
#include "pagoda/server/openai_api.h"
#include "pagoda/tokenizer/chat_template.h"

namespace pagoda {
namespace {

constexpr const char* kJson = "application/json";
// Handler threads: each streaming client holds one for its whole response.
constexpr size_t kHttpThreads = 128;
constexpr int kListenBacklog = 1024;

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(api_error_body(e), kJson);
}

// The per-request state a streamed response's callbacks share.
struct StreamState {
  StreamState(CompletionJob j, const ServedModel& model) : job(std::move(j)), response(job, model) {}
  CompletionJob job;
  CompletionResponse response;
  std::shared_ptr<OutputStream> stream;
};

std::string prometheus_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') { out += "\\n"; continue; }
    out += c;
  }
  return out;
}

}  // namespace

struct ApiServer::Impl {
  Impl(Engine& e, ServerOptions o) : engine(e), options(std::move(o)), loop(e) {}
  Engine& engine;
  ServerOptions options;
  ServedModel model;
  EngineLoop loop;
  httplib::Server http;
  int64_t created = int64_t(std::time(nullptr));
  std::atomic<bool> stopping{false};
  std::atomic<bool> run_entered{false};
  std::atomic<int64_t> http_requests{0};
  int listen_fd = -1;  // the listening socket, seen by the socket-options hook

  void routes();
  void completions(const httplib::Request& req, httplib::Response& res, bool chat);
  std::string metrics_text() const;
};

ApiServer::ApiServer(Engine& engine, ServerOptions options) : impl_(std::make_unique<Impl>(engine, std::move(options))) {
  Impl& s = *impl_;
  if (s.options.model_names.empty()) s.options.model_names.push_back(s.options.model_root);
  s.model.names = s.options.model_names;
  s.model.root = s.options.model_root;
  s.model.max_model_len = engine.max_model_len();
  s.model.tokenizer = engine.tokenizer();
  if (s.options.chat_template) {
    s.model.chat_template = std::make_shared<ChatTemplate>(*s.options.chat_template);
  } else if (s.model.tokenizer && !s.model.tokenizer->chat_template().empty()) {
    s.model.chat_template = std::make_shared<ChatTemplate>(s.model.tokenizer->chat_template());
  }
  s.http.new_task_queue = [] { return new httplib::ThreadPool(kHttpThreads); };
  s.http.set_socket_options([&s](int fd) {
    httplib::default_socket_options(fd);
    s.listen_fd = fd;
  });
  s.routes();
}

ApiServer::~ApiServer() { stop(); }

int ApiServer::bind() {
  int port = impl_->options.port == 0 ? impl_->http.bind_to_any_port(impl_->options.host)
                                      : (impl_->http.bind_to_port(impl_->options.host, impl_->options.port)
                                             ? impl_->options.port
                                             : -1);
  // httplib listens with a backlog of 5: a burst of clients would find the accept queue full.
  if (port >= 0 && impl_->listen_fd >= 0) ::listen(impl_->listen_fd, kListenBacklog);
  if (port < 0)
    throw_runtime_error("cannot listen on ", impl_->options.host, ":", impl_->options.port,
                        " (is the port in use? give another with --port, or --port 0 for a free one)");
  return port;
}

void ApiServer::run() {
  impl_->run_entered = true;
  if (!impl_->stopping) impl_->http.listen_after_bind();
}

void ApiServer::stop() {
  Impl& s = *impl_;
  if (s.stopping.exchange(true)) return;
  s.loop.abort_all();
  for (int i = 0; i < 500 && s.loop.num_live() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  // httplib's stop() only works once the server runs: wait for run() when it has been entered.
  if (s.run_entered)
    for (int i = 0; i < 200 && !s.http.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  s.http.stop();
  s.loop.stop();
}

void ApiServer::Impl::routes() {
  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    ++http_requests;
    if (stopping) {
      send_error(res, ApiError{503, "the server is shutting down", ""});
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!options.api_key.empty() && req.path.rfind("/v1/", 0) == 0 &&
        req.get_header_value("Authorization") != "Bearer " + options.api_key) {
      send_error(res, ApiError{401, "Unauthorized: give the API key as `Authorization: Bearer KEY`", ""});
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404) send_error(res, ApiError{404, str_cat("Not Found: ", req.method, " ", req.path), ""});
    else if (res.status == 405) send_error(res, ApiError{405, str_cat("Method Not Allowed: ", req.method, " ", req.path), ""});
  });
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    try {
      std::rethrow_exception(ep);
    } catch (const ApiError& e) {
      send_error(res, e);
    } catch (const std::exception& e) {
      send_error(res, ApiError{500, str_cat("internal error: ", e.what()), ""});
    }
  });
  http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { completions(req, res, false); });
  http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) { completions(req, res, true); });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) { res.set_content(models_body(model, created), kJson); });
  http.Get("/health", [](const httplib::Request&, httplib::Response& res) { res.status = 200; });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_text(), "text/plain; version=0.0.4; charset=utf-8");
  });
  http.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    try {
      res.set_content(tokenize_body(req.body, model), kJson);
    } catch (const ApiError& e) {
      send_error(res, e);
    }
  });
  http.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    try {
      res.set_content(detokenize_body(req.body, model), kJson);
    } catch (const ApiError& e) {
      send_error(res, e);
    }
  });
}

void ApiServer::Impl::completions(const httplib::Request& req, httplib::Response& res, bool chat) {
  std::shared_ptr<StreamState> state;
  try {
    state = std::make_shared<StreamState>(parse_completion_request(req.body, chat, model), model);
    state->stream = loop.submit(state->job.prompts, state->job.params);
  } catch (const ApiError& e) {
    send_error(res, e);
    return;
  } catch (const Error& e) {  // the engine rejected a request
    send_error(res, ApiError{400, e.what(), ""});
    return;
  }
  if (!state->job.stream) {
    // One JSON body, sent chunked so that a client that goes away is noticed: while the result is pending,
    // a space (JSON allows leading whitespace) is written every second; once the peer has closed, a write
    // fails and release() aborts the requests, freeing their KV blocks.
    res.set_chunked_content_provider(
        kJson,
        [this, state](size_t, httplib::DataSink& sink) {
          std::vector<StreamItem> items;
          auto last_beat = std::chrono::steady_clock::now();
          while (state->stream->pop(items, std::chrono::milliseconds(100))) {
            if (stopping) return false;
            for (const StreamItem& it : items) state->response.add(it.index, it.output);
            if (std::chrono::steady_clock::now() - last_beat >= std::chrono::seconds(1)) {
              last_beat = std::chrono::steady_clock::now();
              if (!sink.write(" ", 1)) return false;  // the client is gone
            }
          }
          std::string body = state->response.body();
          if (!sink.write(body.data(), body.size())) return false;
          sink.done();
          return true;
        },
        [this, state](bool) { loop.release(state->stream); });
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, state](size_t, httplib::DataSink& sink) {
        std::vector<StreamItem> items;
        while (state->stream->pop(items, std::chrono::milliseconds(100))) {
          if (stopping) return false;  // shutting down: do not keep the server waiting on a slow reader
          for (const StreamItem& it : items) {
            std::string events = state->response.stream_events(it.index, it.output);
            if (!events.empty() && !sink.write(events.data(), events.size())) return false;  // the client is gone
          }
        }
        std::string end = state->response.stream_end();
        if (!sink.write(end.data(), end.size())) return false;
        sink.done();
        return true;
      },
      // Runs when the response ends, also when the client went away: abort what is unfinished.
      [this, state](bool) { loop.release(state->stream); });
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
