#include "pagoda/hub/http.h"

#include <curl/curl.h>

#include <cctype>
#include <mutex>

#include "pagoda/core/error.h"
#include "pagoda/core/strings.h"

namespace pagoda {
namespace {

constexpr size_t kMaxErrorBody = 64 * 1024;  // error bodies are short JSON; never buffer a blob by mistake

void global_init_once() {
  static std::once_flag once;
  std::call_once(once, [] { PAGODA_CHECK(curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK, "curl_global_init failed"); });
}

struct Transfer {
  CURL* curl = nullptr;
  const HttpBodySink* sink = nullptr;
  HttpResponse* resp = nullptr;
  bool started = false;   // first body byte seen
  bool to_sink = false;   // the body of this response goes to the sink
};

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  std::string_view line(data, size * n);
  // Each response of a redirect chain starts with a status line; keep only the last response's headers.
  if (starts_with(line, "HTTP/")) {
    t->resp->headers.clear();
    return size * n;
  }
  size_t colon = line.find(':');
  if (colon != std::string_view::npos) {
    std::string name = to_lower(trim(line.substr(0, colon)));
    t->resp->headers[name] = std::string(trim(line.substr(colon + 1)));
  }
  return size * n;
}

size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  size_t bytes = size * n;
  if (!t->started) {
    t->started = true;
    long status = 0;
    curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
    t->to_sink = t->sink != nullptr && status >= 200 && status < 300;
    if (t->to_sink && t->sink->begin && !t->sink->begin(status, t->resp->headers)) return 0;
  }
  if (t->to_sink) return t->sink->write(data, bytes) ? bytes : 0;
  if (t->sink != nullptr && t->resp->body.size() + bytes > kMaxErrorBody) return bytes;
  t->resp->body.append(data, bytes);
  return bytes;
}

}  // namespace

HttpResponse http_request(const HttpRequest& req, const HttpBodySink* sink) {
  global_init_once();
  HttpResponse resp;
  CURL* curl = curl_easy_init();
  PAGODA_CHECK(curl != nullptr, "curl_easy_init failed");
  Transfer t{.curl = curl, .sink = sink, .resp = &resp};
  char errbuf[CURL_ERROR_SIZE] = {0};

  curl_slist* headers = nullptr;
  for (const auto& h : req.headers) headers = curl_slist_append(headers, h.c_str());
  std::string range = str_cat(req.range_start, "-");

  curl_easy_setopt(curl, CURLOPT_URL, req.url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_USERAGENT, "pagoda/0.1 (huggingface_hub-compatible)");
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);  // thread-safe timeouts
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, req.follow_redirects ? 1L : 0L);
  curl_easy_setopt(curl, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, static_cast<long>(req.connect_timeout_s));
  curl_easy_setopt(curl, CURLOPT_TIMEOUT, static_cast<long>(req.total_timeout_s));
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, static_cast<long>(req.stall_timeout_s));
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &t);
  if (req.head) curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  if (req.range_start > 0) curl_easy_setopt(curl, CURLOPT_RANGE, range.c_str());

  CURLcode rc = curl_easy_perform(curl);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &resp.status);
  char* eff = nullptr;
  if (curl_easy_getinfo(curl, CURLINFO_EFFECTIVE_URL, &eff) == CURLE_OK && eff != nullptr) resp.effective_url = eff;
  if (rc != CURLE_OK) {
    resp.curl_code = static_cast<int>(rc);
    resp.transport_error = errbuf[0] != '\0' ? std::string(errbuf) : std::string(curl_easy_strerror(rc));
  }
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  return resp;
}

std::string url_encode(const std::string& s, bool keep_slash) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string url_origin(const std::string& url) {
  size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos) return "";
  std::string scheme = to_lower(url.substr(0, scheme_end));
  size_t host_start = scheme_end + 3;
  size_t host_end = url.find_first_of("/?#", host_start);
  std::string authority = to_lower(url.substr(host_start, host_end == std::string::npos ? std::string::npos : host_end - host_start));
  if (size_t at = authority.rfind('@'); at != std::string::npos) authority = authority.substr(at + 1);  // user:pass@
  size_t colon = authority.rfind(':');
  bool has_port = colon != std::string::npos && authority.find(']', colon) == std::string::npos;  // not inside [v6]
  if (!has_port) authority += scheme == "https" ? ":443" : scheme == "http" ? ":80" : "";
  return scheme + "://" + authority;
}

std::string resolve_location(const std::string& base_url, const std::string& location) {
  if (location.find("://") != std::string::npos) return location;
  size_t scheme_end = base_url.find("://");
  if (scheme_end == std::string::npos) return location;
  if (starts_with(location, "//")) return base_url.substr(0, scheme_end + 1) + location;
  size_t host_end = base_url.find('/', scheme_end + 3);
  std::string origin = host_end == std::string::npos ? base_url : base_url.substr(0, host_end);
  if (starts_with(location, "/")) return origin + location;
  // Relative to the base's directory (the hub never sends these, but be correct).
  size_t last_slash = base_url.rfind('/');
  std::string dir = last_slash > scheme_end + 2 ? base_url.substr(0, last_slash + 1) : origin + "/";
  return dir + location;
}

}  // namespace pagoda
