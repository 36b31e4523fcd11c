#include "fake_hub.h"

#include <httplib.h>

#include <chrono>
#include <random>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "pagoda/hub/sha256.h"

namespace pagoda::testing {
namespace {

void error_reply(httplib::Response& res, int status, const std::string& code, const std::string& message) {
  res.status = status;
  res.set_header("X-Error-Code", code);
  res.set_header("X-Error-Message", message);
  res.set_content(nlohmann::json{{"error", message}}.dump(), "application/json");
}

std::string random_bytes(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

// An ETag header value: the hub quotes them.
std::string etag_header(const std::string& s) {
  std::string out = "\"";
  out += s;
  out += '"';
  return out;
}

std::string commit_of(unsigned seed) { return sha256_hex(std::to_string(seed)).substr(0, 40); }

}  // namespace

std::string FakeHub::lfs_etag(const std::string& content) { return sha256_hex(content); }
std::string FakeHub::small_etag(const std::string& content) { return sha256_hex("blob " + content).substr(0, 40); }

void FakeHub::Listener::start() {
  port = server->bind_to_any_port("127.0.0.1");
  if (port <= 0) throw std::runtime_error("fake hub: cannot bind 127.0.0.1");
  thread = std::thread([this] { server->listen_after_bind(); });
  // stop() only works once the accept loop runs: wait for it (bounded).
  for (int i = 0; i < 5000 && !server->is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (!server->is_running()) throw std::runtime_error("fake hub: server did not start");
}

void FakeHub::Listener::stop() {
  server->stop();
  if (thread.joinable()) thread.join();
}

FakeHub::FakeHub() {
  hub_.server = std::make_unique<httplib::Server>();
  cdn_.server = std::make_unique<httplib::Server>();
  install_routes();
  hub_.start();
  cdn_.start();
}

FakeHub::~FakeHub() { stop(); }

void FakeHub::stop() {
  if (stopped_) return;
  stopped_ = true;
  hub_.stop();
  cdn_.stop();
}

std::string FakeHub::endpoint() const { return "http://127.0.0.1:" + std::to_string(hub_.port); }
std::string FakeHub::cdn_endpoint() const { return "http://127.0.0.1:" + std::to_string(cdn_.port); }

void FakeHub::add_repo(const std::string& repo_id, FakeRepo repo) {
  std::lock_guard<std::mutex> lock(mu_);
  repos_[repo_id] = std::move(repo);
}
void FakeHub::rename(const std::string& old_id, const std::string& new_id) {
  std::lock_guard<std::mutex> lock(mu_);
  renamed_[old_id] = new_id;
}
void FakeHub::require_token(const std::string& token) {
  std::lock_guard<std::mutex> lock(mu_);
  token_ = token;
}
void FakeHub::gate(const std::string& repo_id) {
  std::lock_guard<std::mutex> lock(mu_);
  gated_.insert(repo_id);
}
void FakeHub::cut_lfs_bodies(long long at_byte, int times) {
  std::lock_guard<std::mutex> lock(mu_);
  cut_at_ = at_byte;
  cuts_left_ = times;
}
void FakeHub::corrupt_lfs(bool on) {
  std::lock_guard<std::mutex> lock(mu_);
  corrupt_ = on;
}
void FakeHub::short_lfs_bodies(long long bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  short_bytes_ = bytes;
}
void FakeHub::misreport_lfs_size(long long delta) {
  std::lock_guard<std::mutex> lock(mu_);
  size_delta_ = delta;
}

std::vector<FakeRequest> FakeHub::requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return log_;
}

int FakeHub::count_requests(const std::string& path_substring) const {
  int n = 0;
  for (const auto& r : requests()) n += r.path.find(path_substring) != std::string::npos;
  return n;
}

// PRECOND: mu_ held.
bool FakeHub::authorized(const std::string& auth) const { return token_.empty() || auth == "Bearer " + token_; }

void FakeHub::install_routes() {
  auto log = [this](const httplib::Request& req) {
    std::lock_guard<std::mutex> lock(mu_);
    log_.push_back({req.method, req.path, req.get_header_value("Range"), req.get_header_value("Authorization")});
  };

  hub_.server->Get(R"(/api/models/([^/]+/[^/]+)/revision/(.+))", [this, log](const httplib::Request& req,
                                                                        httplib::Response& res) {
    log(req);
    std::lock_guard<std::mutex> lock(mu_);
    std::string repo_id = req.matches[1], rev = req.matches[2];
    if (auto r = renamed_.find(repo_id); r != renamed_.end()) {
      res.status = 307;
      res.set_header("Location", "/api/models/" + r->second + "/revision/" + rev);
      return;
    }
    if (!authorized(req.get_header_value("Authorization"))) {
      return error_reply(res, 401, "", "Invalid credentials in Authorization header");
    }
    if (gated_.count(repo_id)) {
      return error_reply(res, 401, "GatedRepo", "Access to model " + repo_id + " is restricted.");
    }
    auto it = repos_.find(repo_id);
    if (it == repos_.end()) return error_reply(res, 404, "RepoNotFound", "Repository not found");
    if (!it->second.branches.count(rev) && rev != it->second.commit) return error_reply(res, 404, "RevisionNotFound", "Invalid rev id: " + rev);
    nlohmann::json siblings = nlohmann::json::array();
    for (const auto& [name, file] : it->second.files) siblings.push_back({{"rfilename", name}});
    res.set_content(nlohmann::json{{"id", repo_id}, {"sha", it->second.commit}, {"siblings", siblings}}.dump(),
                    "application/json");
  });

  hub_.server->Get(R"(/([^/]+/[^/]+)/resolve/([^/]+)/(.+))", [this, log](const httplib::Request& req,
                                                                    httplib::Response& res) {
    log(req);
    std::lock_guard<std::mutex> lock(mu_);
    std::string repo_id = req.matches[1], rev = req.matches[2], name = req.matches[3];
    if (auto r = renamed_.find(repo_id); r != renamed_.end()) {
      res.status = 307;  // relative, as the hub answers for a renamed repo
      res.set_header("Location", "/" + r->second + "/resolve/" + rev + "/" + name);
      return;
    }
    if (!authorized(req.get_header_value("Authorization"))) {
      return error_reply(res, 401, "", "Invalid credentials in Authorization header");
    }
    if (gated_.count(repo_id)) return error_reply(res, 401, "GatedRepo", "Access restricted");
    auto it = repos_.find(repo_id);
    if (it == repos_.end()) return error_reply(res, 404, "RepoNotFound", "Repository not found");
    if (!it->second.branches.count(rev) && rev != it->second.commit) return error_reply(res, 404, "RevisionNotFound", "Invalid rev id");
    auto f = it->second.files.find(name);
    if (f == it->second.files.end()) return error_reply(res, 404, "EntryNotFound", "Entry not found");
    res.set_header("X-Repo-Commit", it->second.commit);
    if (!f->second.lfs) {
      res.set_header("ETag", etag_header(small_etag(f->second.content)));
      res.set_content(f->second.content, "application/octet-stream");
      return;
    }
    std::string sha = lfs_etag(f->second.content);
    res.status = 302;
    res.set_header("Location", cdn_endpoint() + "/cdn/" + sha);
    res.set_header("ETag", etag_header(small_etag(sha)));  // the pointer file's id, as the hub sends
    res.set_header("X-Linked-Etag", etag_header(sha));
    res.set_header("X-Linked-Size", std::to_string(static_cast<long long>(f->second.content.size()) + size_delta_));
  });

  cdn_.server->Get(R"(/cdn/([0-9a-f]{64}))", [this, log](const httplib::Request& req, httplib::Response& res) {
    log(req);
    std::lock_guard<std::mutex> lock(mu_);
    const std::string* content = nullptr;
    for (const auto& [id, repo] : repos_) {
      for (const auto& [name, file] : repo.files) {
        if (file.lfs && lfs_etag(file.content) == req.matches[1]) content = &file.content;
      }
    }
    if (content == nullptr) return error_reply(res, 404, "EntryNotFound", "no such blob");
    std::string body = *content;
    if (corrupt_) body[body.size() / 2] ^= 0x5a;
    if (short_bytes_ >= 0) {
      body.resize(std::min<size_t>(body.size(), static_cast<size_t>(short_bytes_)));
      res.set_content(body, "application/octet-stream");  // httplib applies a Range to it
      return;
    }
    long long cut = -1;
    if (cuts_left_ > 0) {
      --cuts_left_;
      cut = cut_at_;
    }
    auto data = std::make_shared<std::string>(std::move(body));
    // The provider sees the offsets of the requested range; it stops at `cut` and returns false, which
    // makes httplib close the connection mid-body (the client sees a partial transfer).
    res.set_content_provider(data->size(), "application/octet-stream",
                             [data, cut](size_t offset, size_t length, httplib::DataSink& sink) {
                               size_t end = offset + length;
                               if (cut >= 0) end = std::min(end, static_cast<size_t>(cut));
                               constexpr size_t kChunk = 16 * 1024;
                               for (size_t pos = offset; pos < end; pos += kChunk) {
                                 if (!sink.write(data->data() + pos, std::min(kChunk, end - pos))) return false;
                               }
                               return end == offset + length;
                             });
  });
}

FakeRepo make_tiny_repo(size_t weight_bytes) {
  FakeRepo r;
  r.commit = commit_of(1);
  r.files["config.json"] = {R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "vocab_size": 256})", false};
  r.files["tokenizer.json"] = {R"({"model": {"type": "BPE", "vocab": {}, "merges": []}})", false};
  r.files["model.safetensors"] = {random_bytes(weight_bytes, 7), true};
  r.files["pytorch_model.bin"] = {random_bytes(1000, 8), true};
  r.files["README.md"] = {"# tiny\n", false};
  r.files["original/consolidated.00.pth"] = {random_bytes(1000, 9), true};
  return r;
}

FakeRepo make_sharded_repo() {
  FakeRepo r;
  r.commit = commit_of(2);
  r.files["config.json"] = {R"({"architectures": ["Qwen3ForCausalLM"]})", false};
  r.files["generation_config.json"] = {R"({"do_sample": false})", false};
  r.files["model.safetensors.index.json"] = {
      R"({"metadata": {"total_size": 3000}, "weight_map": {"a": "model-00001-of-00002.safetensors",
          "b": "model-00002-of-00002.safetensors", "c": "model-00001-of-00002.safetensors"}})",
      false};
  r.files["model-00001-of-00002.safetensors"] = {random_bytes(2000, 10), true};
  r.files["model-00002-of-00002.safetensors"] = {random_bytes(1000, 11), true};
  r.files["consolidated.safetensors"] = {random_bytes(3000, 12), true};
  return r;
}

}  // namespace pagoda::testing
