// `pagoda serve`'s HTTP server: the OpenAI-compatible API over an Engine (vLLM's routes and shapes).
//   POST /v1/completions, /v1/chat/completions (streamed as SSE or whole), GET /v1/models,
//   GET /health, GET /metrics (Prometheus), POST /tokenize, /detokenize.
// httplib stays inside api_server.cc.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pagoda/engine/engine.h"

namespace pagoda {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;                               // 0: a free port, chosen at bind()
  std::string api_key;                        // "": no authentication
  std::vector<std::string> model_names;       // served names; the first is reported
  std::string model_root;                     // the model as given (for /v1/models)
  std::string attention_backend;              // for pagoda_attention_backend_info
  std::optional<std::string> chat_template;   // template text overriding the tokenizer's
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
  // Thread-safe: refuses new requests, aborts those in flight (their clients get what was generated and
  // finish_reason "abort"), and makes run() return. Must not be called from a signal handler.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pagoda
