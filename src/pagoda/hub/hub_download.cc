#include "pagoda/hub/hub_download.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "pagoda/core/logging.h"
#include "pagoda/hub/hub_cache.h"
#include "pagoda/hub/http.h"
#include "pagoda/hub/progress.h"
#include "pagoda/hub/sha256.h"

namespace pagoda {
namespace fs = std::filesystem;

namespace {

constexpr int kMaxHubRedirects = 5;  // a renamed repo answers with one redirect; more is a loop

struct FileMeta {
  std::string etag;     // normalized: no W/ prefix, no quotes
  long long size = -1;  // -1: the server did not say
};

struct Session {
  const HubSettings& settings;
  const RepoRef& ref;
  RepoCache cache;

  std::vector<std::string> auth_headers() const {
    if (settings.token.empty()) return {};
    return {"Authorization: Bearer " + settings.token};
  }
  HttpRequest request(const std::string& url) const {
    HttpRequest r;
    r.url = url;
    r.headers = auth_headers();
    r.connect_timeout_s = settings.connect_timeout_s;
    r.stall_timeout_s = settings.stall_timeout_s;
    return r;
  }
  std::string resolve_url(const std::string& commit, const std::string& filename) const {
    return str_cat(settings.endpoint, "/", ref.repo_id, "/resolve/", commit, "/", url_encode(filename, true));
  }
};

std::string header(const HttpHeaders& h, const std::string& name) {
  auto it = h.find(name);
  return it == h.end() ? "" : it->second;
}

// The server's own explanation: X-Error-Message, else the "error" field of a JSON body.
std::string server_message(const HttpResponse& resp) {
  std::string msg = header(resp.headers, "x-error-message");
  if (msg.empty()) {
    auto j = nlohmann::json::parse(resp.body, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.contains("error") && j["error"].is_string()) msg = j["error"];
  }
  return msg.empty() ? "" : str_cat(" (server: ", msg, ")");
}

[[noreturn]] void throw_http_error(const Session& s, const HttpResponse& resp, const std::string& filename) {
  const std::string& repo = s.ref.repo_id;
  std::string code = header(resp.headers, "x-error-code");
  std::string server = server_message(resp);
  std::string token_hint =
      s.settings.token.empty()
          ? "no token was sent: set HF_TOKEN (or run `huggingface-cli login`) to an access token that can read it"
          : str_cat("the token from ", s.settings.token_source,
                    " was sent but was rejected or cannot read it: set HF_TOKEN to a token that has access");
  if (resp.status == 401 || resp.status == 403) {
    throw_runtime_error("cannot access model '", repo, "' at ", s.settings.endpoint, " (HTTP ", resp.status,
                        "): the repository is gated or private", resp.status == 401 ? " (or does not exist)" : "",
                        "; ", token_hint, ", and for a gated model accept its terms on ", s.settings.endpoint, "/",
                        repo, server);
  }
  if (resp.status == 404) {
    if (code == "EntryNotFound") {
      throw_runtime_error("file '", filename, "' of model '", repo, "' not found at revision '", s.ref.revision,
                          "' (HTTP 404)", server);
    }
    if (code == "RevisionNotFound") {
      throw_runtime_error("revision '", s.ref.revision, "' of model '", repo, "' not found at ", s.settings.endpoint,
                          " (HTTP 404): check the branch, tag or commit name", server);
    }
    throw_runtime_error("model repository '", repo, "' or its revision '", s.ref.revision, "' not found at ",
                        s.settings.endpoint, " (HTTP 404): check the repo id (org/name) and the revision", server);
  }
  std::string what = filename.empty() ? str_cat("the file list of model '", repo, "'")
                                      : str_cat("file '", filename, "' of model '", repo, "'");
  throw_runtime_error("cannot get ", what, " from ", s.settings.endpoint, ": HTTP ", resp.status, server);
}

bool retryable_status(long status) { return status == 429 || status >= 500; }

struct RepoFiles {
  std::string commit;
  std::vector<std::string> siblings;
};

RepoFiles fetch_repo_files(const Session& s) {
  std::string url = str_cat(s.settings.endpoint, "/api/models/", s.ref.repo_id, "/revision/",
                            url_encode(s.ref.revision, false));
  HttpRequest req = s.request(url);
  req.total_timeout_s = std::max(60, s.settings.stall_timeout_s);  // a small JSON document
  HttpResponse resp = http_request(req);
  if (!resp.transport_error.empty()) {
    throw HubUnreachable(str_cat("could not reach ", s.settings.endpoint, ": ", resp.transport_error));
  }
  if (resp.status != 200) throw_http_error(s, resp, "");
  auto j = nlohmann::json::parse(resp.body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("sha") || !j["sha"].is_string() ||
      !j.contains("siblings") || !j["siblings"].is_array()) {
    throw_runtime_error("unexpected reply from ", url, ": expected JSON with \"sha\" and \"siblings\"; is ",
                        s.settings.endpoint, " a Hugging Face hub (HF_ENDPOINT)?");
  }
  RepoFiles out;
  out.commit = j["sha"].get<std::string>();
  if (!is_commit_hash(out.commit)) throw_runtime_error("unexpected reply from ", url, ": sha '", out.commit, "' is not a commit hash");
  for (const auto& sib : j["siblings"]) {
    if (sib.is_object() && sib.contains("rfilename") && sib["rfilename"].is_string()) {
      out.siblings.push_back(sib["rfilename"].get<std::string>());
    }
  }
  return out;
}

std::string normalize_etag(std::string etag) {
  if (starts_with(etag, "W/")) etag = etag.substr(2);
  etag.erase(std::remove(etag.begin(), etag.end(), '"'), etag.end());
  return etag;
}

// An ETag becomes a file name in blobs/: allow only what hub ETags contain (hex, and a few safe marks).
bool is_safe_etag(const std::string& etag) {
  if (etag.empty() || etag.size() > 200 || etag.front() == '.') return false;
  return std::all_of(etag.begin(), etag.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.'; });
}

// HEAD of the resolve URL, as huggingface_hub does: redirects within the hub's origin are followed (a
// renamed repo), a redirect elsewhere (an LFS file's storage) is not: its X-Linked-* headers describe the
// file. A redirect that carries X-Linked-Etag is final even within the origin (mirrors serving LFS
// from the same host).
FileMeta fetch_file_meta(const Session& s, const std::string& commit, const std::string& filename) {
  std::string url = s.resolve_url(commit, filename);
  for (int hop = 0;; ++hop) {
    HttpRequest req = s.request(url);
    req.head = true;
    req.follow_redirects = false;
    req.total_timeout_s = std::max(60, s.settings.stall_timeout_s);
    HttpResponse resp = http_request(req);
    if (!resp.transport_error.empty()) {
      throw_runtime_error("could not get the metadata of '", filename, "' of model '", s.ref.repo_id, "' from ",
                          s.settings.endpoint, ": ", resp.transport_error);
    }
    std::string location = header(resp.headers, "location");
    bool lfs_redirect = !header(resp.headers, "x-linked-etag").empty();
    if (resp.status >= 300 && resp.status < 400 && !lfs_redirect && !location.empty()) {
      std::string target = resolve_location(url, location);
      if (url_origin(target) == url_origin(url)) {
        if (hop >= kMaxHubRedirects) throw_runtime_error("too many redirects resolving '", filename, "' at ", url);
        url = target;
        continue;
      }
    }
    if (resp.status >= 400 || (resp.status >= 300 && location.empty())) throw_http_error(s, resp, filename);
    std::string commit_header = header(resp.headers, "x-repo-commit");
    if (!commit_header.empty() && commit_header != commit) {
      PAGODA_LOG_WARNING("the hub answered '", filename, "' from commit ", commit_header, " instead of ", commit);
    }
    FileMeta meta;
    std::string etag = header(resp.headers, "x-linked-etag");
    if (etag.empty()) etag = header(resp.headers, "etag");
    meta.etag = normalize_etag(etag);
    if (meta.etag.empty()) {
      throw_runtime_error("the hub at ", s.settings.endpoint, " sent no ETag for '", filename,
                          "', so it cannot be cached; is HF_ENDPOINT a Hugging Face hub?");
    }
    if (!is_safe_etag(meta.etag)) throw_runtime_error("the hub sent an unusable ETag for '", filename, "': ", meta.etag);
    std::string size = header(resp.headers, "x-linked-size");
    if (size.empty()) size = header(resp.headers, "content-length");
    long long n = 0;
    if (!size.empty() && parse_int64(size, &n) && n >= 0) meta.size = n;
    return meta;
  }
}

long long file_size_or_zero(const std::string& path) {
  std::error_code ec;
  auto n = fs::file_size(path, ec);
  return ec ? 0 : static_cast<long long>(n);
}

// Downloads url into blobs/{etag}.incomplete (resuming what is there), checks size and sha256, and renames
// it to blobs/{etag}. PRECOND: the blob's FileLock is held.
void download_blob(const Session& s, const std::string& url, const std::string& filename, const FileMeta& meta) {
  const std::string part = s.cache.incomplete_path(meta.etag);
  const std::string blob = s.cache.blob_path(meta.etag);
  const bool check_sha = is_sha256_hex(meta.etag);
  fs::create_directories(fs::path(blob).parent_path());

  long long offset = file_size_or_zero(part);
  if (meta.size >= 0 && offset > meta.size) {
    PAGODA_LOG_WARNING("discarding ", part, ": it is larger than ", filename, " (", meta.size, " bytes)");
    fs::remove(part);
    offset = 0;
  }
  Sha256 hash;
  if (check_sha && offset > 0) {
    // Resuming: the digest covers the bytes already on disk too.
    std::FILE* in = std::fopen(part.c_str(), "rb");
    if (in == nullptr) throw_runtime_error("cannot read ", part, ": ", std::strerror(errno));
    std::string buf(1 << 20, '\0');
    size_t n;
    long long hashed = 0;
    while ((n = std::fread(buf.data(), 1, buf.size(), in)) > 0) {
      hash.update(buf.data(), n);
      hashed += static_cast<long long>(n);
    }
    std::fclose(in);
    offset = hashed;
  }
  std::FILE* out = std::fopen(part.c_str(), "ab");
  if (out == nullptr) throw_runtime_error("cannot write ", part, ": ", std::strerror(errno));
  struct Closer {
    std::FILE*& f;
    ~Closer() {
      if (f != nullptr) std::fclose(f);
    }
  } closer{out};

  DownloadProgress progress(filename, meta.size, offset, s.settings.progress);
  std::string write_error;
  std::string range_error;
  bool began = false;
  auto restart_from_zero = [&] {
    std::fflush(out);
    if (ftruncate(fileno(out), 0) != 0) return false;
    offset = 0;
    hash.reset();
    progress.restart(0);
    return true;
  };
  HttpBodySink sink;
  sink.begin = [&](long status, const HttpHeaders& h) {
    began = true;
    if (status == 206) {
      // "bytes START-END/TOTAL": the server must continue exactly where the partial file ends.
      std::string cr = header(h, "content-range");
      long long start = -1;
      auto sp = cr.find(' '), dash = cr.find('-');
      if (sp == std::string::npos || dash == std::string::npos || !parse_int64(cr.substr(sp + 1, dash - sp - 1), &start) ||
          start != offset) {
        range_error = str_cat("the server resumed at '", cr, "' instead of byte ", offset);
        return false;
      }
      return true;
    }
    if (offset > 0 && !restart_from_zero()) {  // a 200 ignores the Range: the body is the whole file
      write_error = std::strerror(errno);
      return false;
    }
    return true;
  };
  sink.write = [&](const char* data, size_t n) {
    if (std::fwrite(data, 1, n, out) != n) {
      write_error = std::strerror(errno);
      return false;
    }
    if (check_sha) hash.update(data, n);
    offset += static_cast<long long>(n);
    progress.add(static_cast<long long>(n));
    return true;
  };

  for (int attempt = 0;; ++attempt) {
    if (meta.size >= 0 && offset == meta.size) break;  // a complete partial file from an earlier run
    HttpRequest req = s.request(url);
    req.range_start = offset;
    began = false;
    HttpResponse resp = http_request(req, &sink);
    if (std::fflush(out) != 0 && write_error.empty()) write_error = std::strerror(errno);  // e.g. disk full
    if (!write_error.empty()) throw_runtime_error("cannot write ", part, " (", filename, "): ", write_error);
    if (!range_error.empty()) {
      fs::remove(part);
      throw_runtime_error("download of '", filename, "' could not resume: ", range_error,
                          "; the partial file was deleted: run again to start over");
    }
    if (resp.transport_error.empty() && resp.status == 200 && !began && offset > 0 && !restart_from_zero()) {
      throw_runtime_error("cannot write ", part, ": ", std::strerror(errno));  // empty 200 body after a Range
    }
    std::string why;
    if (resp.transport_error.empty() && resp.ok()) {
      if (meta.size < 0 || offset >= meta.size) break;
      why = "the server ended the response early";
    } else if (resp.transport_error.empty() && resp.status == 416 && offset > 0) {
      // The partial file does not fit what the server has (a stale one): start over once, without
      // counting it as a failed attempt (offset 0 sends no Range, so this cannot repeat).
      PAGODA_LOG_WARNING("the server refused to resume ", filename, " at byte ", offset, " (HTTP 416); starting over");
      if (!restart_from_zero()) throw_runtime_error("cannot write ", part, ": ", std::strerror(errno));
      --attempt;
      continue;
    } else if (resp.transport_error.empty() && !retryable_status(resp.status)) {
      progress.finish(false);
      throw_http_error(s, resp, filename);
    } else {
      why = resp.transport_error.empty() ? str_cat("HTTP ", resp.status) : resp.transport_error;
    }
    std::string at = meta.size >= 0 ? str_cat(offset, " of ", meta.size, " bytes") : str_cat(offset, " bytes");
    if (attempt >= s.settings.download_retries) {
      progress.finish(false);
      throw_runtime_error("download of '", filename, "' of model '", s.ref.repo_id, "' is incomplete: got ", at, " (",
                          why, ") after ", attempt + 1, " attempt", attempt == 0 ? "" : "s", "; the partial file ",
                          part, " is kept: run again to resume");
    }
    PAGODA_LOG_WARNING("download of ", filename, " interrupted at ", at, " (", why, "); resuming (retry ",
                       attempt + 1, " of ", s.settings.download_retries, ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(250 << std::min(attempt, 4)));  // 0.25 s, 0.5 s, ... 4 s
  }
  int close_rc = std::fclose(out);
  out = nullptr;
  if (close_rc != 0) throw_runtime_error("cannot write ", part, " (", filename, "): ", std::strerror(errno));

  if (meta.size >= 0 && offset != meta.size) {
    progress.finish(false);
    fs::remove(part);
    throw_runtime_error("size mismatch for '", filename, "' of model '", s.ref.repo_id, "': expected ", meta.size,
                        " bytes, got ", offset, "; the download was deleted: run again to retry");
  }
  if (check_sha) {
    std::string got = hash.hex_digest();
    if (got != to_lower(meta.etag)) {
      progress.finish(false);
      fs::remove(part);
      throw_runtime_error("sha256 mismatch for '", filename, "' of model '", s.ref.repo_id, "': expected ",
                          to_lower(meta.etag), ", got ", got, "; the corrupt download was deleted: run again to retry");
    }
  }
  progress.finish(true);
  fs::rename(part, blob);  // atomic: blobs/{etag} exists only when complete and verified
}

// Makes sure blobs/ holds filename; returns its etag, or "" when the snapshot already has the file.
std::string ensure_file(const Session& s, const std::string& commit, const std::string& filename) {
  if (s.cache.snapshot_has(commit, filename)) return "";  // a commit's files never change
  FileMeta meta = fetch_file_meta(s, commit, filename);
  std::string blob = s.cache.blob_path(meta.etag);
  auto blob_ok = [&] {
    std::error_code ec;
    if (!fs::is_regular_file(blob, ec)) return false;
    if (meta.size >= 0 && file_size_or_zero(blob) != meta.size) {
      PAGODA_LOG_WARNING("re-downloading ", blob, ": its size is not the ", meta.size, " bytes of ", filename);
      fs::remove(blob, ec);
      return false;
    }
    return true;
  };
  if (blob_ok()) return meta.etag;
  FileLock lock(s.cache.lock_path(meta.etag), filename);
  if (blob_ok()) return meta.etag;  // another process finished it while we waited
  download_blob(s, s.resolve_url(commit, filename), filename, meta);
  return meta.etag;
}

bool has(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

}  // namespace

std::string download_model(const HubSettings& settings, const RepoRef& ref) {
  Session s{settings, ref, RepoCache(settings.cache_root, ref.repo_id)};
  RepoFiles repo = fetch_repo_files(s);
  PAGODA_LOG_INFO("downloading model ", ref.repo_id, " (revision ", ref.revision, ", commit ", repo.commit, ") from ",
                  settings.endpoint, " into ", s.cache.dir());

  if (!has(repo.siblings, "config.json")) {
    throw_runtime_error("model '", ref.repo_id, "' at revision '", ref.revision,
                        "' has no config.json: it is not a transformers model pagoda can load");
  }
  std::vector<std::string> side;
  for (const char* f : kHubSideFiles) {
    if (has(repo.siblings, f)) side.push_back(f);
  }
  const bool sharded = has(repo.siblings, "model.safetensors.index.json");
  if (sharded) side.push_back("model.safetensors.index.json");

  std::vector<std::pair<std::string, std::string>> fetched;  // (filename, etag) to link
  for (const auto& f : side) fetched.emplace_back(f, ensure_file(s, repo.commit, f));

  // Weights: the shards the index lists (so a repo that also ships consolidated.safetensors does not
  // download it twice), else every top-level *.safetensors; never *.bin, *.pt, *.gguf or original/*.
  std::vector<std::string> weights;
  if (sharded) {
    const auto& [name, etag] = fetched.back();
    std::string path = etag.empty() ? s.cache.snapshot_dir(repo.commit) + "/" + name : s.cache.blob_path(etag);
    weights = index_weight_files(read_text_file(path), str_cat(ref.repo_id, "/", name));
    for (const auto& w : weights) {
      if (!has(repo.siblings, w)) {
        throw_runtime_error("model '", ref.repo_id, "': ", name, " lists '", w, "', which the repository does not have");
      }
    }
  } else {
    for (const auto& f : repo.siblings) {
      if (f.find('/') == std::string::npos && ends_with(f, ".safetensors")) weights.push_back(f);
    }
    if (!has(weights, "model.safetensors")) {
      throw_runtime_error("model '", ref.repo_id, "' at revision '", ref.revision,
                          "' has neither model.safetensors nor model.safetensors.index.json: pagoda loads safetensors "
                          "weights only (convert .bin/.pt weights with transformers' save_pretrained)");
    }
  }
  for (const auto& w : weights) fetched.emplace_back(w, ensure_file(s, repo.commit, w));

  // Every blob is complete: only now does the snapshot appear, and the ref last.
  for (const auto& [name, etag] : fetched) {
    if (!etag.empty()) s.cache.link_snapshot_file(repo.commit, name, etag);
  }
  s.cache.write_ref(ref.revision, repo.commit);
  std::string missing = s.cache.snapshot_missing(repo.commit);
  if (!missing.empty()) throw_runtime_error("model '", ref.repo_id, "' downloaded incompletely: ", missing);
  return s.cache.snapshot_dir(repo.commit);
}

}  // namespace pagoda
