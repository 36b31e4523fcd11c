// Cache lookup without any server: where the cache is, and reading a cache laid out by huggingface_hub.
#include <filesystem>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "hub_test_util.h"
#include "pagoda/core/error.h"
#include "pagoda/hub/hub.h"
#include "pagoda/hub/hub_download.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr const char* kCommit = "0123456789abcdef0123456789abcdef01234567";

TEST(HubCacheDir, FollowsHuggingFaceHubPrecedence) {
  testing::ScopedEnv env;
  testing::isolate_hub_env(env);
  env.set("HOME", "/home/someone");
  EXPECT_EQ(hub_cache_dir(), "/home/someone/.cache/huggingface/hub");
  env.set("XDG_CACHE_HOME", "/xdg");
  EXPECT_EQ(hub_cache_dir(), "/xdg/huggingface/hub");
  env.set("HF_HOME", "~/hf");
  EXPECT_EQ(hub_cache_dir(), "/home/someone/hf/hub");
  env.set("HUGGINGFACE_HUB_CACHE", "/legacy");
  EXPECT_EQ(hub_cache_dir(), "/legacy");
  env.set("HF_HUB_CACHE", "/hub-cache");
  EXPECT_EQ(hub_cache_dir(), "/hub-cache");
  HubOptions o;
  o.cache_dir = "/explicit";
  EXPECT_EQ(hub_cache_dir(o), "/explicit");
}

TEST(HubSettings, TokenEndpointAndOfflineFromEnvironment) {
  testing::ScopedEnv env;
  testing::isolate_hub_env(env);
  testing::TempDir home;
  env.set("HF_HOME", home.path());
  HubSettings s = hub_settings({});
  EXPECT_EQ(s.endpoint, "https://huggingface.co");
  EXPECT_EQ(s.token, "");
  EXPECT_FALSE(s.offline);

  testing::write_file(home.path() + "/token", "  hf_file\n");
  EXPECT_EQ(hub_settings({}).token, "hf_file");
  testing::write_file(home.path() + "/other", "hf_path");
  env.set("HF_TOKEN_PATH", home.path() + "/other");
  EXPECT_EQ(hub_settings({}).token, "hf_path");
  env.set("HF_TOKEN", "hf_env");
  EXPECT_EQ(hub_settings({}).token, "hf_env");
  EXPECT_EQ(hub_settings({}).token_source, "HF_TOKEN");
  HubOptions o;
  o.token = "hf_opt";
  EXPECT_EQ(hub_settings(o).token, "hf_opt");

  env.set("HF_ENDPOINT", "http://mirror.local:8080/");
  EXPECT_EQ(hub_settings({}).endpoint, "http://mirror.local:8080");

  for (const char* v : {"1", "true", "YES", "on"}) {
    env.set("HF_HUB_OFFLINE", v);
    EXPECT_TRUE(hub_settings({}).offline) << v;
  }
  for (const char* v : {"0", "false", ""}) {
    env.set("HF_HUB_OFFLINE", v);
    EXPECT_FALSE(hub_settings({}).offline) << v;
  }
  env.unset("HF_HUB_OFFLINE");
  env.set("TRANSFORMERS_OFFLINE", "1");
  EXPECT_TRUE(hub_settings({}).offline);
}

// Builds what `huggingface-cli download` leaves: refs/main, blobs/, snapshots/<commit>/ with relative links.
class HandmadeCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::isolate_hub_env(env_);
    env_.set("HF_HUB_CACHE", cache_.path());
    env_.set("HF_HUB_OFFLINE", "1");
    repo_ = cache_.path() + "/models--org--model";
    testing::write_file(repo_ + "/refs/main", std::string(kCommit) + "\n");
  }
  void add(const std::string& name, const std::string& etag, const std::string& content) {
    testing::write_file(repo_ + "/blobs/" + etag, content);
    std::string link = repo_ + "/snapshots/" + kCommit + "/" + name;
    fs::create_directories(fs::path(link).parent_path());
    fs::create_symlink("../../blobs/" + etag, link);
  }
  std::string snapshot() const { return repo_ + "/snapshots/" + kCommit; }

  testing::ScopedEnv env_;
  testing::TempDir cache_;
  std::string repo_;
};

TEST_F(HandmadeCacheTest, CompleteSnapshotResolvesOffline) {
  add("config.json", "aaaa", "{}");
  add("model.safetensors", "bbbb", "weights");
  EXPECT_EQ(resolve_model("org/model"), snapshot());
  EXPECT_EQ(resolve_model(std::string("org/model@") + kCommit), snapshot());
  EXPECT_EQ(find_cached_model({"org/model", "main"}), snapshot());
}

TEST_F(HandmadeCacheTest, ShardedSnapshotNeedsEveryIndexedShard) {
  add("config.json", "aaaa", "{}");
  add("model.safetensors.index.json", "cccc",
      R"({"weight_map": {"x": "model-00001-of-00002.safetensors", "y": "model-00002-of-00002.safetensors"}})");
  add("model-00001-of-00002.safetensors", "dddd", "w1");
  EXPECT_FALSE(find_cached_model({"org/model", "main"}).has_value());
  try {
    resolve_model("org/model");
    FAIL() << "an incomplete snapshot was used";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kRuntime);
    EXPECT_THAT(e.what(), HasSubstr("incomplete"));
    EXPECT_THAT(e.what(), HasSubstr("model-00002-of-00002.safetensors"));
    EXPECT_THAT(e.what(), HasSubstr("HF_HUB_OFFLINE=1"));
  }
  add("model-00002-of-00002.safetensors", "eeee", "w2");
  EXPECT_EQ(resolve_model("org/model"), snapshot());
}

TEST_F(HandmadeCacheTest, DanglingLinkIsNotAFile) {
  add("config.json", "aaaa", "{}");
  add("model.safetensors", "bbbb", "weights");
  fs::remove(repo_ + "/blobs/bbbb");
  EXPECT_FALSE(find_cached_model({"org/model", "main"}).has_value());
}

TEST_F(HandmadeCacheTest, OtherRevisionIsNotMain) {
  add("config.json", "aaaa", "{}");
  add("model.safetensors", "bbbb", "weights");
  EXPECT_FALSE(find_cached_model({"org/model", "v2"}).has_value());
  testing::write_file(repo_ + "/refs/v2", kCommit);
  EXPECT_EQ(resolve_model("org/model@v2"), snapshot());
}

TEST(ResolveModel, BadNamesAreConfigErrors) {
  testing::TempDir dir;
  testing::write_file(dir.path() + "/model.safetensors", "x");
  for (const std::string& name : {std::string(""), dir.path() + "/no-such-dir", std::string("./relative/missing"),
                                  std::string("a/b/c"), std::string("org/model@"), std::string("org--x/y"),
                                  dir.path() + "/model.safetensors"}) {
    try {
      resolve_model(name);
      ADD_FAILURE() << "no error for '" << name << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig) << name << ": " << e.what();
      EXPECT_EQ(e.exit_code(), 2);
      if (!name.empty()) {
        EXPECT_THAT(e.what(), HasSubstr("'" + name + "'"));
      }
    }
  }
}

}  // namespace
}  // namespace pagoda
