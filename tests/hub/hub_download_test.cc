// resolve_model against the fake hub on 127.0.0.1: the cache layout it writes, cache reuse without the
// network, interrupted and corrupt downloads, HTTP errors, offline mode and the token.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fake_hub.h"
#include "hub_test_util.h"
#include "pagoda/core/error.h"
#include "pagoda/hub/hub.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using pagoda::testing::FakeHub;
using pagoda::testing::FakeRepo;

constexpr const char* kRepo = "acme/tiny-llama";
constexpr const char* kSharded = "acme/sharded";

// A port nothing listens on: bind an ephemeral one, then close it.
int closed_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

class HubDownloadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::isolate_hub_env(env_);
    env_.set("HF_HOME", home_.path());
    env_.set("HF_ENDPOINT", hub_.endpoint());
    tiny_ = testing::make_tiny_repo();
    hub_.add_repo(kRepo, tiny_);
    hub_.add_repo(kSharded, testing::make_sharded_repo());
    opts_.download_retries = 0;
    opts_.connect_timeout_s = 2;
    opts_.stall_timeout_s = 5;
  }

  std::string repo_dir() const { return home_.path() + "/hub/models--acme--tiny-llama"; }
  std::string snapshot() const { return repo_dir() + "/snapshots/" + tiny_.commit; }
  std::string weights_etag() const { return FakeHub::lfs_etag(tiny_.files.at("model.safetensors").content); }

  // Nothing that a reader could take for a finished download.
  void expect_nothing_complete() {
    EXPECT_FALSE(fs::exists(repo_dir() + "/refs/main"));
    EXPECT_FALSE(fs::exists(snapshot() + "/config.json"));
    EXPECT_FALSE(fs::exists(snapshot() + "/model.safetensors"));
    EXPECT_FALSE(fs::exists(repo_dir() + "/blobs/" + weights_etag()));
    EXPECT_FALSE(find_cached_model({kRepo, "main"}, opts_).has_value());
  }

  std::string resolve_error(const std::string& name) {
    try {
      resolve_model(name, opts_);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kRuntime) << e.what();
      return e.what();
    }
    ADD_FAILURE() << "resolve_model(" << name << ") did not throw";
    return "";
  }

  testing::ScopedEnv env_;
  testing::TempDir home_;
  FakeHub hub_;
  FakeRepo tiny_;
  HubOptions opts_;
};

// (1) The model lands in huggingface_hub's layout and the snapshot dir is returned.
TEST_F(HubDownloadTest, DownloadWritesHuggingFaceCacheLayout) {
  std::string dir = resolve_model(kRepo, opts_);
  EXPECT_EQ(dir, snapshot());
  EXPECT_EQ(testing::slurp(repo_dir() + "/refs/main"), tiny_.commit);

  std::string config_etag = FakeHub::small_etag(tiny_.files.at("config.json").content);
  ASSERT_TRUE(fs::is_symlink(dir + "/config.json"));
  EXPECT_EQ(fs::read_symlink(dir + "/config.json").string(), "../../blobs/" + config_etag);
  ASSERT_TRUE(fs::is_symlink(dir + "/model.safetensors"));
  EXPECT_EQ(fs::read_symlink(dir + "/model.safetensors").string(), "../../blobs/" + weights_etag());
  for (const char* f : {"config.json", "tokenizer.json", "model.safetensors"}) {
    EXPECT_EQ(testing::slurp(dir + "/" + f), tiny_.files.at(f).content) << f;
  }
  // Only what pagoda needs, and no leftovers.
  EXPECT_FALSE(fs::exists(dir + "/pytorch_model.bin"));
  EXPECT_FALSE(fs::exists(dir + "/README.md"));
  EXPECT_FALSE(fs::exists(dir + "/original"));
  EXPECT_EQ(hub_.count_requests(".bin"), 0);
  EXPECT_EQ(hub_.count_requests("original/"), 0);
  for (const auto& e : fs::directory_iterator(repo_dir() + "/blobs")) {
    EXPECT_THAT(e.path().string(), Not(HasSubstr(".incomplete")));
  }
  EXPECT_TRUE(fs::exists(home_.path() + "/hub/.locks/models--acme--tiny-llama/" + weights_etag() + ".lock"));
  // The API and resolve endpoints huggingface_hub uses.
  EXPECT_EQ(hub_.count_requests("/api/models/acme/tiny-llama/revision/main"), 1);
  EXPECT_EQ(hub_.count_requests("/acme/tiny-llama/resolve/" + tiny_.commit + "/model.safetensors"), 2);  // HEAD, GET
}

// (2) A second resolve reads the cache, with the server gone.
TEST_F(HubDownloadTest, SecondResolveUsesCacheWithoutNetwork) {
  std::string dir = resolve_model(kRepo, opts_);
  size_t before = hub_.requests().size();
  hub_.stop();
  EXPECT_EQ(resolve_model(kRepo, opts_), dir);
  EXPECT_EQ(resolve_model(std::string(kRepo) + "@" + tiny_.commit, opts_), dir);  // a commit needs no ref
  env_.set("HF_HUB_OFFLINE", "1");
  EXPECT_EQ(resolve_model(kRepo, opts_), dir);
  EXPECT_EQ(hub_.requests().size(), before);
}

// A local directory is returned as is, even when it looks like a repo id.
TEST_F(HubDownloadTest, LocalDirectoryWins) {
  std::string local = home_.path() + "/acme/tiny-llama";
  fs::create_directories(local);
  EXPECT_EQ(resolve_model(local, opts_), local);
  EXPECT_TRUE(hub_.requests().empty());
}

// (3) A cut connection leaves a partial blob only; the next run resumes it with a Range request.
TEST_F(HubDownloadTest, InterruptedDownloadNeverLooksCompleteAndResumes) {
  const long long cut = 150 * 1024;
  hub_.cut_lfs_bodies(cut, 1);
  std::string msg = resolve_error(kRepo);
  EXPECT_THAT(msg, HasSubstr("model.safetensors"));
  EXPECT_THAT(msg, HasSubstr("incomplete"));
  EXPECT_THAT(msg, HasSubstr("run again to resume"));
  expect_nothing_complete();
  std::string part = repo_dir() + "/blobs/" + weights_etag() + ".incomplete";
  ASSERT_TRUE(fs::exists(part));
  EXPECT_EQ(static_cast<long long>(fs::file_size(part)), cut);

  std::string dir = resolve_model(kRepo, opts_);
  EXPECT_EQ(testing::slurp(dir + "/model.safetensors"), tiny_.files.at("model.safetensors").content);
  EXPECT_FALSE(fs::exists(part));
  auto reqs = hub_.requests();
  ASSERT_FALSE(reqs.empty());
  EXPECT_THAT(reqs.back().path, HasSubstr("/cdn/"));
  EXPECT_EQ(reqs.back().range, "bytes=" + std::to_string(cut) + "-");
}

// With retries allowed, one call rides over a cut connection by resuming.
TEST_F(HubDownloadTest, RetriesResumeWithinOneCall) {
  opts_.download_retries = 2;
  hub_.cut_lfs_bodies(100 * 1024, 2);
  std::string dir = resolve_model(kRepo, opts_);
  EXPECT_EQ(testing::slurp(dir + "/model.safetensors"), tiny_.files.at("model.safetensors").content);
  EXPECT_EQ(hub_.count_requests("/cdn/"), 3);
  EXPECT_EQ(hub_.requests().back().range, "bytes=102400-");
}

// (4) Wrong bytes for an LFS sha256 ETag are caught; the file is named with expected and actual hashes.
TEST_F(HubDownloadTest, CorruptBodyFailsTheHashCheck) {
  hub_.corrupt_lfs(true);
  std::string msg = resolve_error(kRepo);
  EXPECT_THAT(msg, HasSubstr("sha256 mismatch for 'model.safetensors'"));
  EXPECT_THAT(msg, HasSubstr("expected " + weights_etag()));
  EXPECT_THAT(msg, HasSubstr(", got "));
  expect_nothing_complete();
  EXPECT_FALSE(fs::exists(repo_dir() + "/blobs/" + weights_etag() + ".incomplete"));  // corrupt: not resumable

  hub_.corrupt_lfs(false);
  EXPECT_EQ(resolve_model(kRepo, opts_), snapshot());
}

// (4) A body shorter than the advertised size (the response itself well-formed) is not accepted.
TEST_F(HubDownloadTest, ShortBodyIsIncomplete) {
  hub_.short_lfs_bodies(1000);
  std::string msg = resolve_error(kRepo);
  EXPECT_THAT(msg, HasSubstr("'model.safetensors'"));
  EXPECT_THAT(msg, HasSubstr("got 1000 of " + std::to_string(tiny_.files.at("model.safetensors").content.size())));
  expect_nothing_complete();
}

// (4) More bytes than advertised: a size mismatch naming expected and got.
TEST_F(HubDownloadTest, OversizeBodyIsASizeMismatch) {
  hub_.misreport_lfs_size(-10);
  size_t real = tiny_.files.at("model.safetensors").content.size();
  std::string msg = resolve_error(kRepo);
  EXPECT_THAT(msg, HasSubstr("size mismatch for 'model.safetensors'"));
  EXPECT_THAT(msg, HasSubstr("expected " + std::to_string(real - 10) + " bytes, got " + std::to_string(real)));
  expect_nothing_complete();
}

// (5) 401: gated or private, set HF_TOKEN.
TEST_F(HubDownloadTest, UnauthorizedSaysGatedAndToken) {
  hub_.gate(kRepo);
  std::string msg = resolve_error(kRepo);
  EXPECT_THAT(msg, HasSubstr("acme/tiny-llama"));
  EXPECT_THAT(msg, HasSubstr("HTTP 401"));
  EXPECT_THAT(msg, HasSubstr("gated or private"));
  EXPECT_THAT(msg, HasSubstr("HF_TOKEN"));
  expect_nothing_complete();
}

// (5) 404: repository or revision not found.
TEST_F(HubDownloadTest, NotFoundNamesRepoAndRevision) {
  std::string msg = resolve_error("acme/no-such-model");
  EXPECT_THAT(msg, HasSubstr("'acme/no-such-model'"));
  EXPECT_THAT(msg, HasSubstr("not found"));
  EXPECT_THAT(msg, HasSubstr("HTTP 404"));
  msg = resolve_error(std::string(kRepo) + "@no-such-branch");
  EXPECT_THAT(msg, HasSubstr("revision 'no-such-branch'"));
  EXPECT_THAT(msg, HasSubstr("not found"));
}

// (6) Offline with no cache: what is missing, where it looked, why it did not download, how to fix it.
TEST_F(HubDownloadTest, OfflineWithoutCacheExplains) {
  env_.set("HF_HUB_OFFLINE", "1");
  std::string msg = resolve_error(kRepo);
  EXPECT_THAT(msg, HasSubstr("'acme/tiny-llama'"));
  EXPECT_THAT(msg, HasSubstr("is not a local directory"));
  EXPECT_THAT(msg, HasSubstr("not in the Hugging Face cache at " + repo_dir()));
  EXPECT_THAT(msg, HasSubstr("downloading is disabled (HF_HUB_OFFLINE=1)"));
  EXPECT_THAT(msg, HasSubstr("huggingface-cli download acme/tiny-llama"));
  EXPECT_THAT(msg, HasSubstr("local model directory"));
  EXPECT_TRUE(hub_.requests().empty());
}

TEST_F(HubDownloadTest, UnreachableEndpointWithoutCacheExplains) {
  env_.set("HF_ENDPOINT", "http://127.0.0.1:" + std::to_string(closed_port()));
  std::string msg = resolve_error(kRepo);
  EXPECT_THAT(msg, HasSubstr("'acme/tiny-llama'"));
  EXPECT_THAT(msg, HasSubstr("not in the Hugging Face cache at " + repo_dir()));
  EXPECT_THAT(msg, HasSubstr("downloading it failed: could not reach http://127.0.0.1:"));
  EXPECT_THAT(msg, HasSubstr("onnect"));  // curl: "Failed to connect ... Couldn't connect to server"
  EXPECT_THAT(msg, HasSubstr("huggingface-cli download"));
  EXPECT_THAT(msg, HasSubstr("HF_ENDPOINT"));
}

// (7) HF_TOKEN is sent as a Bearer header; the token file under HF_HOME works too.
TEST_F(HubDownloadTest, TokenIsSentAsBearer) {
  hub_.require_token("hf_s3cret");
  std::string msg = resolve_error(kRepo);
  EXPECT_THAT(msg, HasSubstr("HTTP 401"));
  EXPECT_THAT(msg, HasSubstr("no token was sent"));

  env_.set("HF_TOKEN", "hf_wrong");
  msg = resolve_error(kRepo);
  EXPECT_THAT(msg, HasSubstr("token from HF_TOKEN was sent but was rejected"));

  env_.set("HF_TOKEN", "hf_s3cret");
  EXPECT_EQ(resolve_model(kRepo, opts_), snapshot());
  int api = 0, resolve = 0, cdn = 0;
  for (const auto& r : hub_.requests()) {
    if (r.path.find("/resolve/") != std::string::npos) {
      ++resolve;
      EXPECT_EQ(r.authorization, "Bearer hf_s3cret") << r.method << " " << r.path;
    }
    if (r.path.find("/api/") != std::string::npos && r.authorization == "Bearer hf_s3cret") ++api;
    if (r.path.find("/cdn/") != std::string::npos) {
      ++cdn;
      EXPECT_EQ(r.authorization, "") << "the token leaked to the storage host";
    }
  }
  EXPECT_EQ(api, 1);
  EXPECT_GT(resolve, 0);
  EXPECT_EQ(cdn, 1);
}

TEST_F(HubDownloadTest, TokenFileUnderHfHome) {
  hub_.require_token("hf_fromfile");
  testing::write_file(home_.path() + "/token", "hf_fromfile\n");
  EXPECT_EQ(resolve_model(kRepo, opts_), snapshot());
  EXPECT_EQ(hub_.requests().front().authorization, "Bearer hf_fromfile");
}

// A renamed repo answers with relative redirects; they are followed (the cache keeps the name asked for).
TEST_F(HubDownloadTest, RenamedRepoRedirectIsFollowed) {
  hub_.rename("acme/old-name", kRepo);
  std::string dir = resolve_model("acme/old-name", opts_);
  EXPECT_EQ(dir, home_.path() + "/hub/models--acme--old-name/snapshots/" + tiny_.commit);
  EXPECT_EQ(testing::slurp(dir + "/model.safetensors"), tiny_.files.at("model.safetensors").content);
}

// Sharded weights: the index decides; consolidated.safetensors is not downloaded.
TEST_F(HubDownloadTest, ShardedModelDownloadsIndexedShardsOnly) {
  std::string dir = resolve_model(kSharded, opts_);
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors.index.json",
                        "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}) {
    EXPECT_TRUE(fs::is_symlink(dir + "/" + f)) << f;
    EXPECT_TRUE(fs::is_regular_file(dir + "/" + f)) << f;
  }
  EXPECT_FALSE(fs::exists(dir + "/consolidated.safetensors"));
  EXPECT_EQ(hub_.count_requests("consolidated"), 0);
}

// A snapshot missing a file (a partial huggingface_hub download) is completed, reusing the blobs it has.
TEST_F(HubDownloadTest, IncompleteSnapshotIsCompleted) {
  std::string dir = resolve_model(kRepo, opts_);
  fs::remove(dir + "/model.safetensors");
  size_t before = hub_.requests().size();
  EXPECT_EQ(resolve_model(kRepo, opts_), dir);
  EXPECT_TRUE(fs::is_regular_file(dir + "/model.safetensors"));
  EXPECT_EQ(hub_.count_requests("/cdn/"), 1);  // the blob was still there: HEAD only, no second body
  EXPECT_EQ(hub_.requests().size(), before + 2);  // api + HEAD of model.safetensors
}

// Two resolves at once share the download: the blob lock makes the second wait and reuse it.
TEST_F(HubDownloadTest, ConcurrentResolvesDownloadOnce) {
  std::string a, b;
  std::thread t1([&] { a = resolve_model(kRepo, opts_); });
  std::thread t2([&] { b = resolve_model(kRepo, opts_); });
  t1.join();
  t2.join();
  EXPECT_EQ(a, snapshot());
  EXPECT_EQ(b, snapshot());
  EXPECT_EQ(hub_.count_requests("/cdn/"), 1);
  EXPECT_EQ(testing::slurp(a + "/model.safetensors"), tiny_.files.at("model.safetensors").content);
}

// Revisions: a branch with '/' (URL-encoded in the API path) gets refs/<rev>; a commit hash gets no ref.
TEST_F(HubDownloadTest, RevisionsOtherThanMain) {
  FakeRepo pr = tiny_;
  pr.branches = {"main", "refs/pr/1"};
  hub_.add_repo("acme/with-pr", pr);
  std::string dir = resolve_model("acme/with-pr@refs/pr/1", opts_);
  std::string repo = home_.path() + "/hub/models--acme--with-pr";
  EXPECT_EQ(dir, repo + "/snapshots/" + tiny_.commit);
  EXPECT_EQ(testing::slurp(repo + "/refs/refs/pr/1"), tiny_.commit);
  EXPECT_FALSE(fs::exists(repo + "/refs/main"));
  EXPECT_EQ(hub_.count_requests("/api/models/acme/with-pr/revision/refs/pr/1"), 1);  // decoded by the server

  opts_.revision = tiny_.commit;
  EXPECT_EQ(resolve_model(kRepo, opts_), snapshot());
  EXPECT_FALSE(fs::exists(repo_dir() + "/refs"));
}

// A stale partial file the server cannot resume (HTTP 416) is restarted, not fatal.
TEST_F(HubDownloadTest, UnresumablePartialStartsOver) {
  std::string part = repo_dir() + "/blobs/" + weights_etag() + ".incomplete";
  testing::write_file(part, std::string(tiny_.files.at("model.safetensors").content.size() + 100, 'x'));
  // Larger than the file: discarded before any request.
  EXPECT_EQ(resolve_model(kRepo, opts_), snapshot());
  fs::remove_all(repo_dir());
  // Same size as what the (short-serving) server has: it answers 416 to the Range; start over.
  hub_.short_lfs_bodies(1000);
  testing::write_file(part, std::string(1000, 'x'));
  std::string msg = resolve_error(kRepo);
  EXPECT_THAT(msg, HasSubstr("got 1000 of"));
  EXPECT_EQ(testing::slurp(part), tiny_.files.at("model.safetensors").content.substr(0, 1000));
}

// Repos pagoda cannot use say why, without downloading anything.
TEST_F(HubDownloadTest, UnusableReposAreExplained) {
  FakeRepo no_config = tiny_;
  no_config.files.erase("config.json");
  hub_.add_repo("acme/no-config", no_config);
  EXPECT_THAT(resolve_error("acme/no-config"), HasSubstr("has no config.json"));

  FakeRepo bin_only = tiny_;
  bin_only.files.erase("model.safetensors");
  hub_.add_repo("acme/bin-only", bin_only);
  EXPECT_THAT(resolve_error("acme/bin-only"), HasSubstr("neither model.safetensors nor model.safetensors.index.json"));

  FakeRepo bad_index = testing::make_sharded_repo();
  bad_index.files["model.safetensors.index.json"].content = R"({"weight_map": {"a": "../../etc/passwd"}})";
  hub_.add_repo("acme/bad-index", bad_index);
  std::string msg = resolve_error("acme/bad-index");
  EXPECT_THAT(msg, HasSubstr("acme/bad-index/model.safetensors.index.json"));
  EXPECT_THAT(msg, HasSubstr("not a relative file name"));
  EXPECT_EQ(hub_.count_requests("/cdn/"), 0);
}

// A cache that cannot be written is a clear runtime error, not a filesystem exception.
TEST_F(HubDownloadTest, UnwritableCacheIsExplained) {
  testing::write_file(home_.path() + "/not-a-dir", "x");
  env_.set("HF_HUB_CACHE", home_.path() + "/not-a-dir/hub");
  std::string msg = resolve_error(kRepo);
  EXPECT_THAT(msg, HasSubstr("cannot write model 'acme/tiny-llama'"));
  EXPECT_THAT(msg, HasSubstr("HF_HUB_CACHE"));
}

}  // namespace
}  // namespace pagoda
