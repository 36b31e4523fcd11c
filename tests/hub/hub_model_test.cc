// End to end through the hub: `pagoda generate --model karpathy/stories260K` with HF_ENDPOINT on a fake hub
// serving the real stories260K files downloads them into the Hugging Face cache layout, loads the model
// and reproduces the golden greedy text; a second run works offline from the cache.
#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../cli/cli_runner.h"
#include "fake_hub.h"
#include "hub_test_util.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;
using pagoda::testing::FakeFile;
using pagoda::testing::FakeHub;
using pagoda::testing::FakeRepo;

TEST(HubModel, GenerateDownloadsLoadsAndRunsTheModel) {
  const std::string hf = test::test_data_dir() + "/models/stories260K/hf";
  FakeRepo repo;
  repo.commit = "0123456789abcdef0123456789abcdef01234567";
  for (const char* f : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                        "special_tokens_map.json", "model.safetensors"}) {
    if (!fs::exists(hf + "/" + f)) continue;
    repo.files[f] = FakeFile{test::slurp(hf + "/" + f), std::string(f) == "model.safetensors"};
  }
  FakeHub hub;
  hub.add_repo("karpathy/stories260K", repo);
  pagoda::testing::TempDir home;
  const std::string env = "HF_HOME=" + home.path() + " HF_ENDPOINT=" + hub.endpoint() +
                          " HF_HUB_CACHE= HF_TOKEN= HF_HUB_OFFLINE= ";
  auto r = test::run_pagoda("generate --model karpathy/stories260K --prompt '' --temperature 0 --max-tokens 256", env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json golden = nlohmann::json::parse(test::slurp(test::test_data_dir() + "/models/stories260K/golden.json"));
  EXPECT_EQ(r.out, golden["greedy"]["text"].get<std::string>() + "\n");
  const std::string snap = home.path() + "/hub/models--karpathy--stories260K/snapshots/" + repo.commit;
  EXPECT_TRUE(fs::is_symlink(snap + "/model.safetensors"));
  EXPECT_EQ(test::slurp(home.path() + "/hub/models--karpathy--stories260K/refs/main"), repo.commit);

  // Offline, from the cache: the hub is gone.
  hub.stop();
  r = test::run_pagoda("generate --model karpathy/stories260K --prompt '' --temperature 0 --max-tokens 8", env + "HF_HUB_OFFLINE=1 ");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // A repo that is neither cached nor reachable: a clear error, exit status 1.
  r = test::run_pagoda("generate --model acme/missing --max-tokens 1", env);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, ::testing::HasSubstr("acme/missing"));
}

}  // namespace
}  // namespace pagoda
