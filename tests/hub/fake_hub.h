// An in-process stand-in for the Hugging Face hub on 127.0.0.1 (ephemeral port), serving the endpoints
// huggingface_hub and pagoda use, with the same headers:
//   GET  /api/models/{org}/{name}/revision/{rev}   {"sha": commit, "siblings": [{"rfilename": f}, ...]}
//   HEAD/GET /{org}/{name}/resolve/{rev}/{file}    small files: 200, ETag (git-oid-like), X-Repo-Commit
//                                                  LFS files: 302 to the CDN, X-Linked-Etag, X-Linked-Size
//   GET  {cdn}/cdn/{sha256}                        the LFS bytes, with Range support; the CDN is a second server
//                                                  (another origin, as on the hub), so clients must not follow
//                                                  the redirect in HEAD nor send it the Authorization header
// Knobs simulate failures: a required token, gated repos, connections cut mid-body, corrupt or short bodies.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace httplib {
class Server;
}

namespace pagoda::testing {

struct FakeFile {
  std::string content;
  bool lfs = false;
};

struct FakeRepo {
  std::string commit;                     // 40 hex
  std::set<std::string> branches = {"main"};  // revisions that name the commit besides the commit itself
  std::map<std::string, FakeFile> files;  // rfilename -> file
};

struct FakeRequest {
  std::string method;
  std::string path;
  std::string range;          // Range header, "" when none
  std::string authorization;  // Authorization header, "" when none
};

class FakeHub {
 public:
  FakeHub();
  ~FakeHub();
  FakeHub(const FakeHub&) = delete;
  FakeHub& operator=(const FakeHub&) = delete;

  std::string endpoint() const;      // http://127.0.0.1:<port>
  std::string cdn_endpoint() const;  // http://127.0.0.1:<other port>
  void stop();                       // closes both ports; later requests fail to connect

  void add_repo(const std::string& repo_id, FakeRepo repo);
  void rename(const std::string& old_id, const std::string& new_id);  // old id answers 307 (relative)
  void require_token(const std::string& token);  // api and resolve answer 401 without "Bearer <token>"
  void gate(const std::string& repo_id);         // this repo answers 401 (X-Error-Code: GatedRepo)
  void cut_lfs_bodies(long long at_byte, int times);  // the next `times` LFS bodies stop at this file offset
  void corrupt_lfs(bool on);                     // flip one byte of every LFS body
  void short_lfs_bodies(long long bytes);        // LFS GETs send only the first `bytes` (Content-Length agrees)
  void misreport_lfs_size(long long delta);      // X-Linked-Size is the true size + delta

  std::vector<FakeRequest> requests() const;
  int count_requests(const std::string& path_substring) const;

  static std::string lfs_etag(const std::string& content);    // sha256 hex
  static std::string small_etag(const std::string& content);  // 40 hex, like a git blob id

 private:
  void install_routes();
  bool authorized(const std::string& auth) const;

  struct Listener {
    std::unique_ptr<httplib::Server> server;
    std::thread thread;
    int port = 0;
    void start();
    void stop();
  };
  Listener hub_;
  Listener cdn_;
  bool stopped_ = false;

  mutable std::mutex mu_;
  std::map<std::string, FakeRepo> repos_;
  std::string token_;
  std::set<std::string> gated_;
  std::map<std::string, std::string> renamed_;
  long long cut_at_ = -1;
  int cuts_left_ = 0;
  bool corrupt_ = false;
  long long short_bytes_ = -1;
  long long size_delta_ = 0;
  std::vector<FakeRequest> log_;
};

// A small model: config.json, tokenizer.json (small files), model.safetensors (LFS, `weight_bytes` of
// seeded pseudo-random data), and files pagoda must skip: pytorch_model.bin, README.md, original/*.
FakeRepo make_tiny_repo(size_t weight_bytes = 300 * 1024);
// A sharded model: model.safetensors.index.json + two LFS shards, plus consolidated.safetensors (skipped).
FakeRepo make_sharded_repo();

}  // namespace pagoda::testing
