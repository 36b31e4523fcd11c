// `pagoda serve [MODEL]`: the OpenAI-compatible HTTP server (src/pagoda/server) over one engine.
// SIGINT/SIGTERM stop it cleanly: no new requests, in-flight ones drained for --shutdown-timeout then
// aborted with complete responses, exit status 0. A second signal exits at once (status 1).
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "pagoda/cli/command_line.h"
#include "pagoda/cli/commands.h"
#include "pagoda/config/attention_config.h"
#include "pagoda/core/error.h"
#include "pagoda/core/logging.h"
#include "pagoda/engine/model_setup.h"
#include "pagoda/model/builtin_models.h"
#include "pagoda/engine/embedder.h"
#include "pagoda/server/api_server.h"
#include "pagoda/server/embedding_server.h"

namespace pagoda {

int run_serve(const std::vector<std::string>& raw) {
  apply_early_log_level(raw);
  EngineArgs args;
  std::optional<std::string> positional_model;
  std::optional<std::string> chat_template;
  ArgParser parser("pagoda serve",
                   "Serve a model over an OpenAI-compatible HTTP API (/v1/completions, /v1/chat/completions, "
                   "/v1/models, /health, /metrics, /tokenize, /detokenize).");
  parser.add_positional("MODEL", "The model: a local Hugging Face folder, a GGUF file, a hub repo id, or a built-in "
                        "(smollm2:135m, served when no model is given, or dummy:tiny).",
                        [&](const std::string& v) { positional_model = v; });
  register_engine_options(parser, args, EngineOptionSet::kServe);
  parser.add({"--chat-template", {}, "FILE|TEMPLATE", "Chat template (a file, or the Jinja text itself) replacing "
              "the tokenizer's.", "server", [&](const std::string& v) { chat_template = v; }, {}, {}});
  if (!parse_command_line(parser, raw, true)) return 0;
  if (positional_model) args.model.model = *positional_model;
  else if (!parser.given("--model"))
    PAGODA_LOG_INFO("No model given: serving the built-in ", kDefaultModel, " (SmolLM2-135M-Instruct, Q4_1).");
  ValidatedArgs v = validate_engine_command(args);
  if (args.server.port < 0 || args.server.port > 65535)
    throw_config_error("--port must be between 0 and 65535, got ", args.server.port);

  ServerOptions opts;
  opts.host = args.server.host;
  opts.port = args.server.port;
  opts.api_key = args.server.api_key;
  opts.model_names = args.server.served_model_name;
  opts.model_root = args.model.model;
  using ms = std::chrono::milliseconds;
  opts.shutdown_timeout = ms(int64_t(args.server.shutdown_timeout_s * 1000));
  opts.http.keep_alive_timeout = ms(int64_t(args.server.timeout_keep_alive_s * 1000));
  opts.http.request_timeout = ms(int64_t(args.server.http_request_timeout_s * 1000));
  opts.http.max_header_bytes = size_t(args.server.h11_max_incomplete_event_size);
  opts.http.max_header_count = args.server.h11_max_header_count;
  opts.http.max_body_bytes = size_t(args.server.max_request_body_bytes);
  opts.http.max_connections = args.server.max_connections;
  opts.http.max_handlers = args.server.max_concurrent_requests;
  opts.request_limits.max_logprobs = args.server.max_logprobs;
  if (chat_template) {
    std::ifstream in(*chat_template, std::ios::binary);
    if (in) {
      std::stringstream ss;
      ss << in.rdbuf();
      opts.chat_template = ss.str();
    } else if (chat_template->find_first_of("{}") != std::string::npos) {
      opts.chat_template = *chat_template;
    } else {
      throw_config_error("--chat-template: cannot read the file ", *chat_template);
    }
  }

  // Signals are taken by a dedicated thread (sigwait): block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client that hangs up is a failed write, not the end of the process

  // An encoder model (BERT family) is served by the embeddings server; the rest by the engine.
  std::unique_ptr<Embedder> embedder;
  std::unique_ptr<EmbeddingServer> embedding_server;
  std::unique_ptr<EngineSetup> e;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<ApiServer> api_server;
  if (const std::optional<std::filesystem::path> enc = find_embedding_model(args.model.model)) {
    embedder = std::make_unique<Embedder>(*enc, embedder_options_from_args(args, v));
    opts.attention_backend = embedder->encoder().attention_backend();
    embedding_server = std::make_unique<EmbeddingServer>(*embedder, opts);
  } else {
    e = std::make_unique<EngineSetup>(setup_engine(args, v));
    opts.attention_backend = e->layer_backends.empty() ? "" : std::string(backend_name_str(e->layer_backends.front()));
    engine = std::make_unique<Engine>(*e->runner, e->tokenizer, engine_options_from_args(args, e->max_model_len));
    api_server = std::make_unique<ApiServer>(*engine, opts);
  }
  auto stop_server = [&] { api_server ? api_server->stop() : embedding_server->stop(); };
  const int port = api_server ? api_server->bind() : embedding_server->bind();
  std::atomic<bool> done{false};
  std::thread stopper;
  std::thread signal_thread([&] {
    const timespec tick{0, 100'000'000};
    int received = 0;
    while (!done) {
      const int sig = sigtimedwait(&signals, nullptr, &tick);
      if (sig < 0) continue;
      if (++received == 1) {
        PAGODA_LOG_INFO("Received ", sig == SIGINT ? "SIGINT" : "SIGTERM", ": shutting down (again to exit at once)");
        stopper = std::thread([&] { stop_server(); });
      } else {
        PAGODA_LOG_WARNING("Received a second signal: exiting now");
        std::_Exit(1);
      }
    }
  });
  PAGODA_LOG_INFO("Starting pagoda API server on http://", opts.host, ":", port);
  if (api_server) {
    api_server->run();
  } else {
    embedding_server->run();
  }
  done = true;
  signal_thread.join();
  if (stopper.joinable()) stopper.join();
  PAGODA_LOG_INFO("Server stopped");
  return 0;
}

}  // namespace pagoda
