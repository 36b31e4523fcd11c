// `pagoda serve` for an encoder model: the OpenAI embeddings API over an Embedder (engine/embedder.h), in
// vLLM's shapes. POST /v1/embeddings, GET /v1/models, /health, /metrics. Concurrent requests share
// forward steps (the Embedder's batcher); /metrics shows the step count and the sequences per step.
#pragma once

#include <memory>
#include <string>

#include "pagoda/engine/embedder.h"
#include "pagoda/server/api_server.h"

namespace pagoda {

// The body of a /v1/embeddings request answered (for tests without sockets). Throws ApiError for a bad
// request, with vLLM's messages where vLLM has one.
std::string embeddings_body(const std::string& request, Embedder& embedder, const std::string& model_name);

class EmbeddingServer {
 public:
  // The embedder must outlive the server. Of `options`, the host, port, api key, model names and the HTTP
  // limits are used.
  EmbeddingServer(Embedder& embedder, ServerOptions options);
  ~EmbeddingServer();
  int bind();
  void run();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pagoda
