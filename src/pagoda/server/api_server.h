// `pagoda serve`'s HTTP server: the OpenAI-compatible API over an Engine (vLLM's routes and shapes).
//   POST /v1/completions, /v1/chat/completions (streamed as SSE or whole), GET /v1/models,
//   GET /health, GET /metrics (Prometheus), POST /tokenize, /detokenize.
// The transport is http_server.h; JSON stays inside openai_api.cc.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pagoda/engine/engine.h"
#include "pagoda/server/http_server.h"
#include "pagoda/server/openai_api.h"

namespace pagoda {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;                               // 0: a free port, chosen at bind()
  std::string api_key;                        // "": no authentication
  std::vector<std::string> model_names;       // served names; the first is reported
  std::string model_root;                     // the model as given (for /v1/models)
  std::string attention_backend;              // for pagoda_attention_backend_info
  std::optional<std::string> chat_template;   // template text overriding the tokenizer's
  HttpLimits http;
  RequestLimits request_limits;  // what one request may cost (prompts x n, stop strings, tokens)
  // A chat template rendering that runs longer is a 400 (the step and output budgets bound it too).
  std::chrono::milliseconds render_timeout{10'000};
  // On stop(): how long requests in flight may run on before they are aborted (vLLM's --shutdown-timeout;
  // 0: aborted at once). Either way each client gets a complete response ending in finish_reason "abort".
  std::chrono::milliseconds shutdown_timeout{0};
};

class ApiServer {
 public:
  // The engine must outlive the server. Throws pagoda::Error (config) for a chat template that does not parse.
  ApiServer(Engine& engine, ServerOptions options);
  ~ApiServer();  // stop()
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // Binds the listening socket; returns the port. Throws pagoda::Error (runtime) when it cannot.
  int bind();
  // Serves until stop(); returns after the last connection has been handled.
  void run();
  // Thread-safe, not from a signal handler; returns when run() may still be finishing its last writes.
  // Closes the listener and idle connections, refuses new requests with 503, lets the requests in flight
  // run for shutdown_timeout, then aborts the rest: streams end with a finish_reason "abort" chunk and
  // [DONE], whole responses come complete. Clients that do not read their response are cut off after a
  // few seconds. Then run() returns.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pagoda
