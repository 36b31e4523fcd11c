#include "pagoda/server/embedding_server.h"

#include <atomic>
#include <cstring>
#include <ctime>
#include <random>

#include <nlohmann/json.hpp>

#include "pagoda/core/error.h"
#include "pagoda/core/logging.h"
#include "pagoda/core/strings.h"

namespace pagoda {

namespace {

using Json = nlohmann::json;
constexpr const char* kJson = "application/json";

std::string base64(const void* data, size_t n) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto* p = static_cast<const unsigned char*>(data);
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t v = uint32_t(p[i]) << 16 | (i + 1 < n ? uint32_t(p[i + 1]) << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
    out += k[v >> 18 & 63];
    out += k[v >> 12 & 63];
    out += i + 1 < n ? k[v >> 6 & 63] : '=';
    out += i + 2 < n ? k[v & 63] : '=';
  }
  return out;
}

bool is_id_list(const Json& v) {
  if (!v.is_array() || v.empty()) return false;
  for (const Json& x : v)
    if (!x.is_number_integer()) return false;
  return true;
}

std::vector<int> ids_of(const Json& v) {
  std::vector<int> ids;
  for (const Json& x : v) {
    const int64_t id = x.get<int64_t>();
    if (id < 0 || id > INT32_MAX) throw ApiError{400, str_cat("token id ", id, " is out of range"), "input"};
    ids.push_back(int(id));
  }
  return ids;
}

std::string random_id() {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 rng(std::random_device{}() ^ counter++);
  char buf[40];
  std::snprintf(buf, sizeof(buf), "embd-%016llx%016llx", (unsigned long long)rng(), (unsigned long long)rng());
  return buf;
}

}  // namespace

std::string embeddings_body(const std::string& request, Embedder& embedder, const std::string& model_name) {
  Json j = Json::parse(request, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw ApiError{400, "the request body is not a JSON object", ""};
  if (!j.contains("input")) throw ApiError{400, "Field required: input", "input"};
  if (j.contains("dimensions") && !j["dimensions"].is_null()) {
    // The encoders served here are not Matryoshka models (vLLM's PoolingParams.verify).
    throw ApiError{400, str_cat("Model \"", model_name, "\" does not support matryoshka representation, changing "
                                "output dimensions will lead to poor results."), "dimensions"};
  }
  std::string format = "float";
  if (j.contains("encoding_format") && !j["encoding_format"].is_null()) {
    if (!j["encoding_format"].is_string() ||
        (j["encoding_format"] != "float" && j["encoding_format"] != "base64"))
      throw ApiError{400, "encoding_format must be 'float' or 'base64'", "encoding_format"};
    format = j["encoding_format"].get<std::string>();
  }
  std::vector<std::vector<int>> seqs;
  const Json& in = j["input"];
  if (in.is_string()) {
    seqs.push_back(embedder.tokenize(in.get<std::string>()));
  } else if (is_id_list(in)) {
    seqs.push_back(ids_of(in));
  } else if (in.is_array() && !in.empty()) {
    for (const Json& x : in) {
      if (x.is_string()) {
        seqs.push_back(embedder.tokenize(x.get<std::string>()));
      } else if (is_id_list(x)) {
        seqs.push_back(ids_of(x));
      } else {
        throw ApiError{400, "input must be a string, a list of strings, a list of token ids or a list of lists of "
                            "token ids", "input"};
      }
    }
  } else {
    throw ApiError{400, "input must be a non-empty string, list of strings, list of token ids or list of lists of "
                        "token ids", "input"};
  }
  int64_t tokens = 0;
  for (const auto& s : seqs) {
    // vLLM: a prompt longer than the model's length is refused, not truncated (truncate_prompt_tokens is
    // the opt-in there; texts are truncated here as sentence-transformers does).
    if (int(s.size()) > embedder.max_tokens())
      throw ApiError{400, str_cat("This model's maximum context length is ", embedder.max_tokens(),
                                  " tokens. However, you requested ", s.size(), " tokens in the input for embedding "
                                  "generation. Please reduce the length of the input."), "input"};
    tokens += int64_t(s.size());
  }
  const std::vector<std::vector<float>> vecs = embedder.embed(seqs);
  Json data = Json::array();
  for (size_t i = 0; i < vecs.size(); ++i) {
    Json e = format == "base64" ? Json(base64(vecs[i].data(), vecs[i].size() * sizeof(float))) : Json(vecs[i]);
    data.push_back({{"index", i}, {"object", "embedding"}, {"embedding", std::move(e)}});
  }
  Json out = {{"id", random_id()},
              {"object", "list"},
              {"created", int64_t(std::time(nullptr))},
              {"model", model_name},
              {"data", std::move(data)},
              {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}, {"completion_tokens", 0},
                         {"prompt_tokens_details", nullptr}}}};
  return out.dump();
}

struct EmbeddingServer::Impl {
  Impl(Embedder& e, ServerOptions o)
      : embedder(e), options(std::move(o)),
        http(options.http, [this](const ServerRequest& req, ServerResponse& res) { handle(req, res); }) {
    if (options.model_names.empty()) options.model_names.push_back(options.model_root);
  }
  Embedder& embedder;
  ServerOptions options;
  HttpServer http;
  int64_t created = int64_t(std::time(nullptr));
  std::atomic<bool> stopping{false};
  std::atomic<int64_t> requests{0};

  void handle(const ServerRequest& req, ServerResponse& res);
  std::string metrics() const;
};

std::string EmbeddingServer::Impl::metrics() const {
  const EmbeddingStats s = embedder.stats();
  const std::string& name = options.model_names.front();
  std::string out;
  out += "# HELP pagoda_embedding_steps_total Forward steps run for embedding requests.\n"
         "# TYPE pagoda_embedding_steps_total counter\n";
  out += str_cat("pagoda_embedding_steps_total{model_name=\"", name, "\"} ", s.steps, "\n");
  out += "# HELP pagoda_embedding_sequences_total Sequences embedded.\n# TYPE pagoda_embedding_sequences_total counter\n";
  out += str_cat("pagoda_embedding_sequences_total{model_name=\"", name, "\"} ", s.sequences, "\n");
  out += "# HELP pagoda_embedding_tokens_total Tokens embedded.\n# TYPE pagoda_embedding_tokens_total counter\n";
  out += str_cat("pagoda_embedding_tokens_total{model_name=\"", name, "\"} ", s.tokens, "\n");
  out += "# HELP pagoda_embedding_max_batch_sequences Most sequences in one step.\n"
         "# TYPE pagoda_embedding_max_batch_sequences gauge\n";
  out += str_cat("pagoda_embedding_max_batch_sequences{model_name=\"", name, "\"} ", s.max_batch, "\n");
  std::string recent;
  for (int b : s.recent_batches) recent += str_cat(recent.empty() ? "" : ",", b);
  out += str_cat("# recent embedding batch sizes (sequences per step, oldest first): ", recent, "\n");
  out += str_cat("pagoda_http_requests_total ", requests.load(), "\n");
  return out;
}

void EmbeddingServer::Impl::handle(const ServerRequest& req, ServerResponse& res) {
  ++requests;
  auto error = [&](const ApiError& e) { res.send(e.status, kJson, api_error_body(e)); };
  struct R {
    const char* path;
    const char* method;
  };
  static constexpr R kRoutes[] = {{"/v1/embeddings", "POST"}, {"/v1/models", "GET"}, {"/health", "GET"}, {"/metrics", "GET"}};
  const R* found = nullptr;
  bool known = false;
  for (const R& r : kRoutes) {
    if (req.path != r.path) continue;
    known = true;
    if (req.method == r.method) found = &r;
  }
  if (!known) {
    if (req.path == "/v1/completions" || req.path == "/v1/chat/completions")
      return error(ApiError{400, "The model does not support Completions API", ""});
    return error(ApiError{404, str_cat("Not Found: ", req.method, " ", req.path), ""});
  }
  if (!found) return error(ApiError{405, str_cat("Method Not Allowed: ", req.method, " ", req.path), ""});
  if (stopping) return error(ApiError{503, "the server is shutting down", ""});
  if (!options.api_key.empty() && req.path.rfind("/v1/", 0) == 0) {
    const std::string* auth = req.header("authorization");
    if (!auth || *auth != "Bearer " + options.api_key)
      return error(ApiError{401, "Unauthorized: give the API key as `Authorization: Bearer KEY`", ""});
  }
  const std::string path = found->path;
  try {
    if (path == "/v1/embeddings") {
      res.send(200, kJson, embeddings_body(req.body, embedder, options.model_names.front()));
    } else if (path == "/v1/models") {
      Json data = Json::array();
      for (const auto& name : options.model_names)
        data.push_back({{"id", name}, {"object", "model"}, {"created", created}, {"owned_by", "pagoda"},
                        {"root", options.model_root}, {"parent", nullptr},
                        {"max_model_len", embedder.max_tokens()}, {"permission", Json::array()}});
      res.send(200, kJson, Json{{"object", "list"}, {"data", data}}.dump());
    } else if (path == "/health") {
      res.send(200, "", "");
    } else {
      res.send(200, "text/plain; version=0.0.4; charset=utf-8", metrics());
    }
  } catch (const ApiError& e) {
    if (!res.started()) error(e);
  } catch (const Error& e) {
    if (!res.started()) error(ApiError{400, e.what(), ""});
  }
}

EmbeddingServer::EmbeddingServer(Embedder& embedder, ServerOptions options)
    : impl_(std::make_unique<Impl>(embedder, std::move(options))) {}
EmbeddingServer::~EmbeddingServer() { stop(); }
int EmbeddingServer::bind() { return impl_->http.bind(impl_->options.host, impl_->options.port); }
void EmbeddingServer::run() { impl_->http.run(); }
void EmbeddingServer::stop() {
  impl_->stopping = true;
  impl_->http.stop(impl_->options.shutdown_timeout);
}

}  // namespace pagoda
