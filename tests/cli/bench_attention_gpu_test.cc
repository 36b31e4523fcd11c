// `pagoda bench attention` on a CUDA device (skipped without one): every built GPU backend on the Llama-3-8B
// shape (dummy:llama3-8b: only its config is read) is timed, within its accuracy bound for bfloat16, and the
// recommendation is one of them; fp8 and a TurboQuant preset run too (their rows timed, checked or not).
#include <cmath>
#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "pagoda/platform/device.h"

namespace pagoda {
namespace {

using Json = nlohmann::json;
using test::run_pagoda;

#define SKIP_WITHOUT_GPU() \
  if (!detect_cuda_device()) GTEST_SKIP() << "skipped: no CUDA device"

TEST(BenchAttentionGpu, Llama3ShapeEveryBuiltBackend) {
  SKIP_WITHOUT_GPU();
  const std::string json = (std::filesystem::temp_directory_path() / ("pagoda_bench_attn_gpu_" + std::to_string(::getpid()) + ".json")).string();
  auto r = run_pagoda("bench attention --device cuda --model dummy:llama3-8b --batch-size 4 --context-len 512 "
                      "--kv-cache-dtype auto,fp8,turboquant_k8v4 --time-budget 2 --output-json " + json);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(json);
  const Json j = Json::parse(in);
  std::filesystem::remove(json);
  int timed_auto = 0;
  for (const Json& c : j["candidates"]) {
    if (!c["valid"].get<bool>()) {
      EXPECT_FALSE(c["reasons"].empty()) << c.dump();
      continue;
    }
    EXPECT_GT(c["median_ms"].get<double>(), 0.0) << c.dump();
    EXPECT_TRUE(std::isfinite(c["error"].get<double>())) << c.dump();
    if (c["kv_cache_dtype"] == "auto") {
      ++timed_auto;
      EXPECT_TRUE(c["accurate"].get<bool>()) << c.dump();
    }
  }
  EXPECT_GE(timed_auto, 2) << "FLASH_ATTN and TRITON_ATTN at least";
  ASSERT_FALSE(j["recommendation"].is_null());
}

}  // namespace
}  // namespace pagoda
