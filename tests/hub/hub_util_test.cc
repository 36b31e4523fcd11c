// The small pieces: sha256, repo ids, URLs, the progress line, the shard index.
#include <gtest/gtest.h>

#include "pagoda/core/error.h"
#include "pagoda/hub/http.h"
#include "pagoda/hub/hub.h"
#include "pagoda/hub/hub_cache.h"
#include "pagoda/hub/progress.h"
#include "pagoda/hub/sha256.h"

namespace pagoda {
namespace {

// FIPS 180-2 test vectors.
TEST(Sha256, KnownVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  Sha256 h;  // incremental over a million 'a's
  std::string chunk(1000, 'a');
  for (int i = 0; i < 1000; ++i) h.update(chunk.data(), chunk.size());
  EXPECT_EQ(h.hex_digest(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  EXPECT_TRUE(is_sha256_hex("cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"));
  EXPECT_FALSE(is_sha256_hex("cdc76e5c9914fb9281a1c7e284d73e67f1809a48"));  // a git sha1 is not one
}

TEST(RepoId, HuggingFaceHubRules) {
  for (const char* ok : {"meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-0.6B", "gpt2", "a_b/c.d", "x/y"}) {
    EXPECT_TRUE(is_valid_repo_id(ok)) << ok;
  }
  for (const char* bad : {"", "a/b/c", "/abs/path", "./x", "org/", "-org/x", "org/x.", "a--b/c", "a/b..c", "a b/c",
                          "org/na@me", "~/models/x"}) {
    EXPECT_FALSE(is_valid_repo_id(bad)) << bad;
  }
  EXPECT_FALSE(is_valid_repo_id(std::string(97, 'a')));
}

TEST(RepoId, RevisionSuffix) {
  auto r = parse_repo_ref("Qwen/Qwen3-0.6B", "main");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->repo_id, "Qwen/Qwen3-0.6B");
  EXPECT_EQ(r->revision, "main");
  r = parse_repo_ref("Qwen/Qwen3-0.6B@refs/pr/3", "main");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->revision, "refs/pr/3");
  EXPECT_EQ(parse_repo_ref("org/x", "v1.0")->revision, "v1.0");
  EXPECT_FALSE(parse_repo_ref("org/x@../../etc", "main"));
  EXPECT_FALSE(parse_repo_ref("org/x@", "main"));
}

TEST(Http, UrlHelpers) {
  EXPECT_EQ(url_encode("refs/pr/1", false), "refs%2Fpr%2F1");
  EXPECT_EQ(url_encode("sub dir/a+b.json", true), "sub%20dir/a%2Bb.json");
  EXPECT_EQ(resolve_location("https://hub.example/a/b", "/c/d"), "https://hub.example/c/d");
  EXPECT_EQ(resolve_location("https://hub.example/a/b", "https://cdn.example/x"), "https://cdn.example/x");
  EXPECT_EQ(resolve_location("http://h:1/a/b", "//cdn/x"), "http://cdn/x");
  EXPECT_EQ(url_origin("https://HuggingFace.co/a/resolve/main/x"), "https://huggingface.co:443");
  EXPECT_EQ(url_origin("http://127.0.0.1:8080"), "http://127.0.0.1:8080");
  EXPECT_EQ(url_origin("http://[::1]/x?y"), "http://[::1]:80");
  EXPECT_NE(url_origin("http://127.0.0.1:8080/a"), url_origin("http://127.0.0.1:8081/a"));
}

TEST(Progress, Line) {
  EXPECT_EQ(format_progress_line("model.safetensors", 512LL << 20, 2048LL << 20, 35.24e6),
            "model.safetensors  512.00 MiB / 2.00 GiB  35.2 MB/s  25%");
  EXPECT_EQ(format_progress_line("x", 10, -1, 0), "x  10 B  0.0 MB/s");
}

TEST(IndexWeightFiles, HostileIndex) {
  EXPECT_EQ(index_weight_files(R"({"weight_map": {"a": "m-1.safetensors", "b": "m-2.safetensors", "c": "m-1.safetensors"}})", "i"),
            (std::vector<std::string>{"m-1.safetensors", "m-2.safetensors"}));
  try {
    index_weight_files(R"({"weight_map": )" + std::string(100000, '[') + std::string(100000, ']') + "}", "idx.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("idx.json: JSON nested deeper than 128"), std::string::npos) << e.what();
  }
  try {
    index_weight_files(R"({"weight_map": {")" + std::string(100000, 't') + R"(": "../x"}})", "idx.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_LT(std::string(e.what()).size(), 300u) << e.what();
  }
}

}  // namespace
}  // namespace pagoda
