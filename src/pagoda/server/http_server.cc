#include "pagoda/server/http_server.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "pagoda/core/error.h"
#include "pagoda/core/logging.h"
#include "pagoda/core/strings.h"

namespace pagoda {

using Clock = std::chrono::steady_clock;

// A client connection. Owned by the event loop's table for its whole life; only the loop closes the
// descriptor, so a handler or the loop's checks never see a number reused by another connection.
class HttpConnection {
 public:
  explicit HttpConnection(int fd_) : fd(fd_) {}
  const int fd;
  std::string buf;  // received and not yet consumed (the next request, or part of it)
  Clock::time_point deadline;
  bool in_handler = false;  // loop thread only
  // Parse state of the request at the front of buf.
  size_t header_end = 0;  // bytes of request line + headers, CRLFCRLF included; 0 while incomplete
  size_t scanned = 0;     // bytes of buf searched for the end of the headers
  size_t body_len = 0;
  bool keep_alive = true;
  bool expect_continue = false;
  ServerRequest pending;
  std::atomic<bool> gone{false};    // the peer closed or reset (set by the loop's checks)
  std::atomic<bool> broken{false};  // a write failed or timed out
  std::chrono::milliseconds write_timeout{0};

  // Writes all of `data`, waiting up to write_timeout for each bit of progress.
  bool write_all(std::string_view data) {
    if (broken) return false;
    size_t off = 0;
    while (off < data.size()) {
      ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n > 0) {
        off += size_t(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        pollfd p{fd, POLLOUT, 0};
        int r = ::poll(&p, 1, int(write_timeout.count()));
        if (r > 0 && !(p.revents & (POLLERR | POLLHUP | POLLNVAL))) continue;
        if (r < 0 && errno == EINTR) continue;
      }
      broken = true;
      return false;
    }
    return true;
  }
};

const std::string* ServerRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (k == name) return &v;
  return nullptr;
}

const char* http_status_text(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

namespace {

std::string json_escape(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  return out;
}

// A complete response for errors found by the transport itself, in the OpenAI error shape the API
// answers with; the connection closes after it.
std::string error_body(int status, std::string_view message) {
  const char* type = status == 503 ? "ServiceUnavailableError" : status >= 500 ? "InternalServerError" : "BadRequestError";
  return str_cat("{\"error\":{\"message\":\"", json_escape(message), "\",\"type\":\"", type,
                 "\",\"param\":null,\"code\":", status, "}}");
}

std::string error_response(int status, std::string_view message) {
  std::string body = error_body(status, message);
  std::string extra = status == 503 ? "Retry-After: 1\r\n" : "";
  return str_cat("HTTP/1.1 ", status, " ", http_status_text(status), "\r\nContent-Type: application/json\r\n",
                 "Content-Length: ", body.size(), "\r\nConnection: close\r\n", extra, "\r\n", body);
}

bool is_token_char(unsigned char c) {
  return std::isalnum(c) || std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

enum class Parse { kIncomplete, kComplete, kError };
struct ParseError {
  int status = 400;
  std::string message;
};

// Parses the request at the front of c.buf. kComplete: `out` holds it and its bytes are consumed.
Parse try_parse(HttpConnection& c, const HttpLimits& limits, ServerRequest& out, ParseError& err) {
  auto fail = [&](int status, std::string message) {
    err = ParseError{status, std::move(message)};
    return Parse::kError;
  };
  if (c.header_end == 0) {
    // Leading empty lines before a request are allowed (RFC 9112 2.2).
    size_t skip = 0;
    while (skip < c.buf.size() && (c.buf[skip] == '\r' || c.buf[skip] == '\n')) ++skip;
    if (skip > 0) {
      c.buf.erase(0, skip);
      c.scanned = 0;
    }
    size_t from = c.scanned >= 3 ? c.scanned - 3 : 0;
    size_t end = c.buf.find("\r\n\r\n", from);
    if (end == std::string::npos) {
      c.scanned = c.buf.size();
      if (c.buf.size() > limits.max_header_bytes)
        return fail(431, str_cat("the request line and headers exceed ", limits.max_header_bytes, " bytes"));
      return Parse::kIncomplete;
    }
    if (end + 4 > limits.max_header_bytes)
      return fail(431, str_cat("the request line and headers exceed ", limits.max_header_bytes, " bytes"));
    std::string_view head(c.buf.data(), end);
    size_t line_end = head.find("\r\n");
    std::string_view line = head.substr(0, line_end);
    ServerRequest req;
    size_t sp1 = line.find(' '), sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    if (sp1 == std::string_view::npos || sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
      return fail(400, "malformed request line");
    req.method = std::string(line.substr(0, sp1));
    req.target = std::string(line.substr(sp1 + 1, sp2 - sp1 - 1));
    std::string_view version = line.substr(sp2 + 1);
    if (req.method.empty() || req.target.empty() || req.target[0] != '/') return fail(400, "malformed request line");
    for (unsigned char ch : req.method)
      if (!is_token_char(ch)) return fail(400, "malformed request method");
    if (version != "HTTP/1.1" && version != "HTTP/1.0") return fail(505, "only HTTP/1.0 and HTTP/1.1 are served");
    req.path = req.target.substr(0, req.target.find('?'));
    bool http10 = version == "HTTP/1.0";
    std::optional<size_t> content_length;
    bool close = http10, keep_alive_header = false;
    c.expect_continue = false;
    size_t pos = line_end == std::string_view::npos ? head.size() : line_end + 2;
    while (pos < head.size()) {
      size_t e = head.find("\r\n", pos);
      if (e == std::string_view::npos) e = head.size();
      std::string_view h = head.substr(pos, e - pos);
      pos = e + 2;
      if (int(req.headers.size()) >= limits.max_header_count)
        return fail(431, str_cat("more than ", limits.max_header_count, " header fields"));
      size_t colon = h.find(':');
      if (colon == 0 || colon == std::string_view::npos) return fail(400, "malformed header field");
      std::string name(h.substr(0, colon));
      for (char& ch : name) {
        if (!is_token_char(static_cast<unsigned char>(ch))) return fail(400, "malformed header field name");
        ch = char(std::tolower(static_cast<unsigned char>(ch)));
      }
      std::string value(trim(h.substr(colon + 1)));
      if (name == "content-length") {
        if (value.empty() || value.size() > 19 || value.find_first_not_of("0123456789") != std::string::npos)
          return fail(400, "invalid Content-Length");
        size_t n = std::stoull(value);
        if (content_length && *content_length != n) return fail(400, "conflicting Content-Length headers");
        content_length = n;
      } else if (name == "transfer-encoding") {
        return fail(411, "request bodies with Transfer-Encoding are not accepted: send Content-Length");
      } else if (name == "connection") {
        std::string v = to_lower(value);
        if (v.find("close") != std::string::npos) close = true;
        if (v.find("keep-alive") != std::string::npos) keep_alive_header = true;
      } else if (name == "expect") {
        if (to_lower(value) != "100-continue") return fail(400, "unsupported Expect header");
        c.expect_continue = !http10;
      }
      req.headers.emplace_back(std::move(name), std::move(value));
    }
    c.body_len = content_length.value_or(0);
    if (c.body_len > limits.max_body_bytes)
      return fail(413, str_cat("the request body (", c.body_len, " bytes) exceeds the limit of ", limits.max_body_bytes,
                               " bytes"));
    c.keep_alive = http10 ? keep_alive_header && !close : !close;
    c.header_end = end + 4;
    c.pending = std::move(req);
  }
  if (c.buf.size() < c.header_end + c.body_len) {
    if (c.expect_continue) {
      c.expect_continue = false;
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      (void)::send(c.fd, kContinue.data(), kContinue.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    return Parse::kIncomplete;
  }
  out = std::move(c.pending);
  out.body = c.buf.substr(c.header_end, c.body_len);
  c.buf.erase(0, c.header_end + c.body_len);
  c.pending = ServerRequest{};
  c.header_end = 0;
  c.scanned = 0;
  c.body_len = 0;
  return Parse::kComplete;
}

}  // namespace

bool ServerResponse::write_head(int status, std::string_view content_type, const HttpHeaders& extra,
                              std::string_view framing) {
  std::string head = str_cat("HTTP/1.1 ", status, " ", http_status_text(status), "\r\n");
  if (!content_type.empty()) head += str_cat("Content-Type: ", content_type, "\r\n");
  head += str_cat(framing, "Connection: ", keep_alive_ ? "keep-alive" : "close", "\r\n");
  for (const auto& [k, v] : extra) head += str_cat(k, ": ", v, "\r\n");
  head += "\r\n";
  return conn_.write_all(head);
}

bool ServerResponse::send(int status, std::string_view content_type, std::string_view body, const HttpHeaders& extra) {
  PAGODA_CHECK(state_ == State::kNone, "a response is sent once");
  state_ = State::kDone;
  std::string head = str_cat("HTTP/1.1 ", status, " ", http_status_text(status), "\r\n");
  if (!content_type.empty()) head += str_cat("Content-Type: ", content_type, "\r\n");
  head += str_cat("Content-Length: ", body.size(), "\r\nConnection: ", keep_alive_ ? "keep-alive" : "close", "\r\n");
  for (const auto& [k, v] : extra) head += str_cat(k, ": ", v, "\r\n");
  head += "\r\n";
  // One write for small responses: with TCP_NODELAY, head and body then leave in one segment.
  if (body.size() <= 64 * 1024) return conn_.write_all(head.append(body));
  return conn_.write_all(head) && conn_.write_all(body);
}

bool ServerResponse::begin_chunked(int status, std::string_view content_type, const HttpHeaders& extra) {
  PAGODA_CHECK(state_ == State::kNone, "a response is begun once");
  state_ = State::kChunked;
  return write_head(status, content_type, extra, "Transfer-Encoding: chunked\r\n");
}

bool ServerResponse::write_chunk(std::string_view data) {
  PAGODA_CHECK(state_ == State::kChunked, "write_chunk() needs begin_chunked()");
  if (data.empty()) return !conn_.broken;  // an empty chunk would end the body
  char size[32];
  std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
  std::string chunk = str_cat(size, data, "\r\n");
  return conn_.write_all(chunk);
}

bool ServerResponse::end_chunked() {
  PAGODA_CHECK(state_ == State::kChunked, "end_chunked() needs begin_chunked()");
  state_ = State::kDone;
  return conn_.write_all("0\r\n\r\n");
}

bool ServerResponse::client_gone() const { return conn_.gone || conn_.broken; }
const std::atomic<bool>* ServerResponse::gone_flag() const { return &conn_.gone; }

struct HttpServer::Impl {
  Impl(HttpLimits l, ServerHandler h) : limits(l), handler(std::move(h)) {}
  HttpLimits limits;
  ServerHandler handler;
  int listen_fd = -1;
  int epoll_fd = -1;
  int wake_fd = -1;

  std::unordered_map<int, std::shared_ptr<HttpConnection>> conns;  // loop thread only
  std::atomic<size_t> num_conns{0};

  // Handler threads.
  struct Job {
    std::shared_ptr<HttpConnection> conn;
    ServerRequest request;
  };
  std::mutex mu;  // jobs, quit, returned
  std::condition_variable cv;
  std::deque<Job> jobs;
  std::vector<std::thread> threads;  // loop thread only
  bool quit = false;
  std::vector<std::pair<std::shared_ptr<HttpConnection>, bool>> returned;  // (connection, close it)
  std::atomic<int> handlers{0};

  std::atomic<bool> stop_requested{false};
  std::atomic<int64_t> grace_ms{0};
  std::atomic<bool> running{false};
  std::mutex run_mu;
  std::condition_variable run_cv;
  bool run_done = false;

  void wake() {
    uint64_t one = 1;
    (void)!::write(wake_fd, &one, sizeof(one));
  }
  void loop();
  void accept_all();
  void on_readable(const std::shared_ptr<HttpConnection>& c);
  void after_input(const std::shared_ptr<HttpConnection>& c);
  void dispatch(const std::shared_ptr<HttpConnection>& c, ServerRequest request);
  void close_conn(int fd);
  void reject(HttpConnection& c, int status, std::string_view message);
  void worker();
  void serve(std::shared_ptr<HttpConnection> c, ServerRequest request);
  void give_back(std::shared_ptr<HttpConnection> c, bool close);
  void tick(Clock::time_point now);
};

HttpServer::HttpServer(HttpLimits limits, ServerHandler handler)
    : impl_(std::make_unique<Impl>(limits, std::move(handler))) {
  impl_->epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  impl_->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (impl_->epoll_fd < 0 || impl_->wake_fd < 0) throw_runtime_error("cannot create the server's event loop: ", std::strerror(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = impl_->wake_fd;
  ::epoll_ctl(impl_->epoll_fd, EPOLL_CTL_ADD, impl_->wake_fd, &ev);
}

HttpServer::~HttpServer() {
  stop(std::chrono::milliseconds(0));
  if (impl_->running) {
    std::unique_lock<std::mutex> lock(impl_->run_mu);
    impl_->run_cv.wait(lock, [&] { return impl_->run_done; });
  }
  if (impl_->listen_fd >= 0) ::close(impl_->listen_fd);
  for (auto& [fd, c] : impl_->conns) ::close(fd);
  ::close(impl_->epoll_fd);
  ::close(impl_->wake_fd);
}

int HttpServer::bind(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port_text = std::to_string(port);
  if (int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), port_text.c_str(), &hints, &res); rc != 0)
    throw_runtime_error("cannot listen on ", host, ":", port, ": ", gai_strerror(rc));
  std::string why = "no address";
  for (addrinfo* a = res; a; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    // SO_REUSEADDR lets a restarted server bind past TIME_WAIT; it does not let two servers share a
    // listening port on Linux (SO_REUSEPORT would, and is not set).
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) {
      impl_->listen_fd = fd;
      break;
    }
    why = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  if (impl_->listen_fd < 0)
    throw_runtime_error("cannot listen on ", host, ":", port, ": ", why,
                        " (is another server on that port? give another with --port, or --port 0 for a free one)");
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(impl_->listen_fd, reinterpret_cast<sockaddr*>(&addr), &len);
  int bound = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                         : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = impl_->listen_fd;
  ::epoll_ctl(impl_->epoll_fd, EPOLL_CTL_ADD, impl_->listen_fd, &ev);
  return bound;
}

void HttpServer::run() {
  impl_->running = true;
  impl_->loop();
  std::lock_guard<std::mutex> lock(impl_->run_mu);
  impl_->run_done = true;
  impl_->run_cv.notify_all();
}

void HttpServer::stop(std::chrono::milliseconds grace) {
  impl_->grace_ms = grace.count();
  impl_->stop_requested = true;
  impl_->wake();
}

size_t HttpServer::num_connections() const { return impl_->num_conns; }
size_t HttpServer::num_handlers() const { return size_t(impl_->handlers.load()); }

void HttpServer::Impl::close_conn(int fd) {
  auto it = conns.find(fd);
  if (it == conns.end()) return;
  ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
  ::close(fd);
  conns.erase(it);
  --num_conns;
}

void HttpServer::Impl::reject(HttpConnection& c, int status, std::string_view message) {
  // Best effort without blocking the loop: the connection closes right after.
  std::string r = error_response(status, message);
  (void)::send(c.fd, r.data(), r.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  close_conn(c.fd);
}

void HttpServer::Impl::accept_all() {
  for (;;) {
    int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE) PAGODA_LOG_WARNING("accept: ", std::strerror(errno));
      return;
    }
    // Nagle's algorithm against the client's delayed ACKs costs ~40 ms per small response on a kept-alive
    // connection.
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto c = std::make_shared<HttpConnection>(fd);
    c->write_timeout = limits.write_timeout;
    c->deadline = Clock::now() + limits.request_timeout;
    conns[fd] = c;
    ++num_conns;
    if (int(num_conns) > limits.max_connections) {
      reject(*c, 503, str_cat("too many connections (the limit is ", limits.max_connections, ")"));
      continue;
    }
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = fd;
    ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev);
  }
}

void HttpServer::Impl::on_readable(const std::shared_ptr<HttpConnection>& c) {
  char chunk[64 * 1024];
  bool eof = false;
  // Read what is there, but no more than a request can be: the rest waits in the socket.
  const size_t cap = limits.max_header_bytes + limits.max_body_bytes + sizeof(chunk);
  while (c->buf.size() < cap) {
    ssize_t n = ::recv(c->fd, chunk, sizeof(chunk), 0);
    if (n > 0) {
      if (c->buf.empty() && c->header_end == 0) c->deadline = Clock::now() + limits.request_timeout;
      c->buf.append(chunk, size_t(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    eof = true;  // closed by the peer (0) or reset
    break;
  }
  after_input(c);
  if (eof && conns.count(c->fd) && !c->in_handler) close_conn(c->fd);
}

void HttpServer::Impl::after_input(const std::shared_ptr<HttpConnection>& c) {
  ServerRequest req;
  ParseError err;
  switch (try_parse(*c, limits, req, err)) {
    case Parse::kIncomplete: return;
    case Parse::kError: reject(*c, err.status, err.message); return;
    case Parse::kComplete: dispatch(c, std::move(req)); return;
  }
}

void HttpServer::Impl::dispatch(const std::shared_ptr<HttpConnection>& c, ServerRequest request) {
  if (handlers >= limits.max_handlers) {
    reject(*c, 503, str_cat("the server is busy (", limits.max_handlers, " requests in progress): retry later"));
    return;
  }
  ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c->fd, nullptr);
  c->in_handler = true;
  ++handlers;
  std::lock_guard<std::mutex> lock(mu);
  jobs.push_back(Job{c, std::move(request)});
  // One thread per request in progress at most: threads never outnumber max_handlers.
  if (threads.size() < size_t(handlers.load())) threads.emplace_back([this] { worker(); });
  else cv.notify_one();
}

void HttpServer::Impl::worker() {
  std::unique_lock<std::mutex> lock(mu);
  for (;;) {
    cv.wait(lock, [&] { return quit || !jobs.empty(); });
    if (jobs.empty()) return;  // quit
    Job job = std::move(jobs.front());
    jobs.pop_front();
    lock.unlock();
    serve(std::move(job.conn), std::move(job.request));
    lock.lock();
  }
}

void HttpServer::Impl::serve(std::shared_ptr<HttpConnection> c, ServerRequest request) {
  for (;;) {
    const bool keep = c->keep_alive && !stop_requested;
    ServerResponse res(*c, keep);
    try {
      handler(request, res);
    } catch (const std::exception& e) {
      PAGODA_LOG_ERROR("HTTP handler for ", request.method, " ", request.path, " failed: ", e.what());
      if (!res.started()) res.send(500, "application/json", error_body(500, str_cat("internal error: ", e.what())));
    }
    if (!res.started()) res.send(500, "application/json", error_body(500, "internal error: the handler wrote no response"));
    const bool reusable = keep && res.state_ == ServerResponse::State::kDone && !c->broken && !c->gone && !stop_requested;
    if (!reusable) return give_back(std::move(c), true);
    // A pipelined request already read is answered now, in order.
    ParseError err;
    switch (try_parse(*c, limits, request, err)) {
      case Parse::kComplete: continue;
      case Parse::kError: {
        c->write_all(error_response(err.status, err.message));
        return give_back(std::move(c), true);
      }
      case Parse::kIncomplete: return give_back(std::move(c), false);
    }
  }
}

void HttpServer::Impl::give_back(std::shared_ptr<HttpConnection> c, bool close) {
  {
    std::lock_guard<std::mutex> lock(mu);
    returned.emplace_back(std::move(c), close);
  }
  --handlers;
  wake();
}

void HttpServer::Impl::tick(Clock::time_point now) {
  std::vector<int> expired;
  std::vector<pollfd> busy;
  for (auto& [fd, c] : conns) {
    if (c->in_handler) busy.push_back(pollfd{fd, POLLRDHUP, 0});
    else if (now >= c->deadline) expired.push_back(fd);
  }
  for (int fd : expired) {
    auto c = conns[fd];
    if (!c->buf.empty() || c->header_end > 0) reject(*c, 408, "the request did not arrive in time");
    else close_conn(fd);
  }
  if (!busy.empty() && ::poll(busy.data(), busy.size(), 0) > 0)
    for (const pollfd& p : busy)
      if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) conns[p.fd]->gone = true;
}

void HttpServer::Impl::loop() {
  std::vector<epoll_event> events(256);
  Clock::time_point last_tick = Clock::now(), stop_deadline{};
  bool draining = false, forced = false;
  for (;;) {
    int n = ::epoll_wait(epoll_fd, events.data(), int(events.size()), 50);
    for (int i = 0; i < n; ++i) {
      const int fd = events[size_t(i)].data.fd;
      if (fd == wake_fd) {
        uint64_t v;
        (void)!::read(wake_fd, &v, sizeof(v));
      } else if (fd == listen_fd) {
        accept_all();
      } else if (auto it = conns.find(fd); it != conns.end() && !it->second->in_handler) {
        on_readable(it->second);
      }
    }
    std::vector<std::pair<std::shared_ptr<HttpConnection>, bool>> back;
    {
      std::lock_guard<std::mutex> lock(mu);
      back.swap(returned);
    }
    const Clock::time_point now = Clock::now();
    for (auto& [c, close] : back) {
      c->in_handler = false;
      if (close || draining || stop_requested) {
        close_conn(c->fd);
        continue;
      }
      c->deadline = now + (c->buf.empty() ? limits.keep_alive_timeout : limits.request_timeout);
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP;
      ev.data.fd = c->fd;
      ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, c->fd, &ev);
      if (!c->buf.empty()) after_input(c);  // a request that began while the last one was handled
    }
    if (now - last_tick >= std::chrono::milliseconds(50)) {
      tick(now);
      last_tick = now;
    }
    if (stop_requested && !draining) {
      draining = true;
      stop_deadline = now + std::chrono::milliseconds(grace_ms.load());
      if (listen_fd >= 0) {
        ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, listen_fd, nullptr);
        ::close(listen_fd);
        listen_fd = -1;
      }
      std::vector<int> idle_fds;
      for (auto& [fd, c] : conns)
        if (!c->in_handler) idle_fds.push_back(fd);
      for (int fd : idle_fds) close_conn(fd);
    }
    if (draining) {
      if (handlers == 0) break;
      if (!forced && now >= stop_deadline) {
        // Clients that stopped reading: their handlers' writes fail now instead of after write_timeout.
        forced = true;
        for (auto& [fd, c] : conns)
          if (c->in_handler) ::shutdown(fd, SHUT_RDWR);
      }
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    quit = true;
  }
  cv.notify_all();
  for (auto& t : threads) t.join();
  threads.clear();
  for (auto& [c, close] : returned) c->in_handler = false;
  returned.clear();
  std::vector<int> fds;
  for (auto& [fd, c] : conns) fds.push_back(fd);
  for (int fd : fds) close_conn(fd);
}

}  // namespace pagoda
