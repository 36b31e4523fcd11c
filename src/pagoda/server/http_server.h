// A small HTTP/1.1 server for untrusted clients: the transport under the OpenAI API (api_server.cc).
//
// One event-loop thread owns every connection that is idle or still sending its request: a slow client
// costs a file descriptor, never a thread. A request that has arrived whole (headers and body, within
// the size limits and the whole-request deadline) goes to a handler thread; the handler writes the
// response (whole, or chunked for streams) and the connection returns to the loop for its next request
// (keep-alive, pipelined requests answered in order). Requests beyond the handler limit get a 503.
//
// Shutdown (stop()): the listener and idle connections close at once; handlers finish within a grace
// period, after which their sockets are shut so that a client that stopped reading cannot hold the
// process; run() returns when every handler has returned.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pagoda {

struct HttpLimits {
  size_t max_header_bytes = size_t(4) << 20;  // request line + headers (vLLM's --h11-max-incomplete-event-size)
  int max_header_count = 256;                 // (vLLM's --h11-max-header-count)
  size_t max_body_bytes = size_t(32) << 20;
  // From a request's first byte to its last: a client sending one byte a second is cut off here, not
  // kept alive by each byte.
  std::chrono::milliseconds request_timeout{60'000};
  std::chrono::milliseconds keep_alive_timeout{5'000};  // an idle connection between requests (uvicorn's 5 s)
  std::chrono::milliseconds write_timeout{30'000};      // a response write that makes no progress
  int max_connections = 4096;                           // open at once; beyond: 503 and close
  int max_handlers = 512;                               // requests being handled at once; beyond: 503
};

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct ServerRequest {
  std::string method;
  std::string target;  // as sent: path and query
  std::string path;    // target without the query
  HttpHeaders headers;  // names lower-cased, values trimmed
  std::string body;
  // The first header of that (lower-case) name, or nullptr.
  const std::string* header(std::string_view name) const;
};

class HttpConnection;

// The response to one request, written on the handler's thread. Every write returns false once the
// client is gone (closed, reset, or not reading for write_timeout); the handler should then stop.
class ServerResponse {
 public:
  // The whole response, with Content-Length.
  bool send(int status, std::string_view content_type, std::string_view body, const HttpHeaders& extra = {});
  // A chunked response: begin once, then chunks, then end.
  bool begin_chunked(int status, std::string_view content_type, const HttpHeaders& extra = {});
  bool write_chunk(std::string_view data);
  bool end_chunked();
  bool started() const { return state_ != State::kNone; }
  // The peer has closed or reset the connection (the event loop checks connections in handlers every
  // 100 ms). The flag is stable, so long work can poll it or hand it to a cancellable callee.
  bool client_gone() const;
  const std::atomic<bool>* gone_flag() const;

 private:
  friend class HttpServer;
  enum class State { kNone, kChunked, kDone };
  ServerResponse(HttpConnection& conn, bool keep_alive) : conn_(conn), keep_alive_(keep_alive) {}
  bool write_head(int status, std::string_view content_type, const HttpHeaders& extra, std::string_view framing);
  HttpConnection& conn_;
  bool keep_alive_;
  State state_ = State::kNone;
};

using ServerHandler = std::function<void(const ServerRequest&, ServerResponse&)>;

class HttpServer {
 public:
  HttpServer(HttpLimits limits, ServerHandler handler);
  ~HttpServer();  // stop() and wait for run() to return
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens (no SO_REUSEPORT: a second server on a busy port fails here). Port 0: a free one.
  // Returns the port. Throws pagoda::Error (runtime) naming the address and the reason.
  int bind(const std::string& host, int port);
  // Serves until stop(); returns once every handler has returned.
  void run();
  // Thread-safe, not from a signal handler. Closes the listener and idle connections now; handlers get
  // `grace` to finish, then their sockets are shut down. New requests on kept-alive connections of
  // running handlers are not read: those connections close after their response.
  void stop(std::chrono::milliseconds grace);
  size_t num_connections() const;
  size_t num_handlers() const;  // requests being handled now

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The reason phrase of an HTTP status ("Not Found").
const char* http_status_text(int status);

}  // namespace pagoda
