// A small HTTP client over libcurl for the hub API: one request at a time, headers of the final response,
// the body either kept in memory or streamed to a sink. Transport failures come back as data, not
// exceptions, so the caller can word the error for the user.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace pagoda {

// Response header names are lower-cased; a repeated header keeps its last value.
using HttpHeaders = std::map<std::string, std::string>;

struct HttpRequest {
  std::string url;
  std::vector<std::string> headers;  // "Name: value"
  bool head = false;                 // HEAD instead of GET
  bool follow_redirects = true;      // at most 10; curl drops Authorization when the host changes
  long long range_start = 0;         // > 0: sends `Range: bytes=<range_start>-`
  int connect_timeout_s = 10;
  int total_timeout_s = 0;           // 0: none (downloads rely on stall_timeout_s)
  int stall_timeout_s = 60;          // abort when fewer than 1 byte/s arrive for this long
};

// Receives the body of a 2xx response: begin() once, before the first byte (it may be skipped for an
// empty body), then write() for each chunk. Returning false aborts the transfer.
struct HttpBodySink {
  std::function<bool(long status, const HttpHeaders& headers)> begin;
  std::function<bool(const char* data, size_t n)> write;
};

struct HttpResponse {
  std::string transport_error;  // empty when a complete response arrived; else curl's description
  int curl_code = 0;            // CURLcode; 0 on success
  long status = 0;              // HTTP status of the final response (0 when none arrived)
  HttpHeaders headers;          // of the final response
  std::string body;             // the body when no sink took it (error bodies; capped at 64 KiB with a sink)
  std::string effective_url;    // after redirects

  bool ok() const { return transport_error.empty() && status >= 200 && status < 300; }
};

HttpResponse http_request(const HttpRequest& req, const HttpBodySink* sink = nullptr);

// Percent-encodes everything but unreserved characters; keep_slash leaves '/' as is (file paths in URLs).
std::string url_encode(const std::string& s, bool keep_slash);
// "scheme://host:port" in lower case, the port made explicit (80/443 by default); "" for a malformed URL.
std::string url_origin(const std::string& url);
// Resolves a Location header against the URL it came from (absolute, scheme-relative or path-absolute).
std::string resolve_location(const std::string& base_url, const std::string& location);

}  // namespace pagoda
