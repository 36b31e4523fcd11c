// `pagoda generate` on the GPU (label gpu): the reference models give the same greedy tokens on the GPU as
// on the CPU, with TRITON_ATTN, with FLASH_ATTN (FA2 and FA3) and with FLASHINFER (qwen3-tiny, the reference
// model of a head size FLASHINFER takes: pages of 1, 8 and 16, NHD and HND, the seed's --block-size 8
// example, fp8 KV with and without query quantization, cascade on), and stories260K (head size 8, below
// TRITON_ATTN's 32, so FLASH_ATTN) reproduces the published golden text.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "pagoda/platform/device.h"

namespace pagoda {
namespace {

using Json = nlohmann::json;
using test::run_pagoda;
using test::test_data_dir;

#define SKIP_WITHOUT_GPU() \
  if (!detect_cuda_device()) GTEST_SKIP() << "skipped: no CUDA device"

Json load_json(const std::string& path) {
  std::ifstream in(path);
  return Json::parse(in);
}

std::string join_ids(const Json& ids) {
  std::string s;
  for (const auto& x : ids) s += (s.empty() ? "" : ",") + std::to_string(x.get<int>());
  return s;
}

// Greedy tokens agree up to the first step whose reference top-1/top-2 logit margin is below `margin`
// (a different summation order may flip a near-tie; after a flip the sequences legitimately differ).
void expect_greedy_prefix(const Json& got, const Json& want, const Json& margins, double margin, const std::string& what) {
  size_t n = want.size();
  for (size_t i = 0; i < margins.size(); ++i) {
    if (margins[i].get<double>() < margin) {
      n = i + 1;  // the token at a low-margin step may already differ
      break;
    }
  }
  size_t checked = 0;
  for (size_t i = 0; i < n && i < got.size(); ++i, ++checked) {
    if (i + 1 == n && n < want.size()) break;
    EXPECT_EQ(got[i], want[i]) << what << " step " << i;
  }
  std::printf("[gpu-greedy] %-40s %zu/%zu tokens compared\n", what.c_str(), checked, want.size());
}

TEST(GenerateGpu, ReferenceModelsFloat32MatchCpu) {
  SKIP_WITHOUT_GPU();
  for (const char* model : {"qwen3-tiny", "llama-tiny", "qwen2-tiny"}) {
    std::string dir = test_data_dir() + "/reference/" + model;
    Json ref = load_json(dir + "/reference.json");
    for (const auto& p : ref["prompts"]) {
      std::string ids = join_ids(p["input_ids"]);
      std::string common = " --model " + dir + " --temperature 0 --ignore-eos --max-tokens " +
                           std::to_string(p["float32"]["greedy"].size()) + " --output-json --prompt-token-ids " + ids;
      auto gpu = run_pagoda("generate --device cuda --dtype float32" + common);
      ASSERT_EQ(gpu.exit_code, 0) << gpu.err;
      EXPECT_THAT(gpu.err, testing::HasSubstr("Using TRITON_ATTN attention backend"));
      Json j = Json::parse(gpu.out);
      expect_greedy_prefix(j["token_ids"], p["float32"]["greedy"], p["float32"]["greedy_top1_minus_top2"], 1e-3,
                           std::string(model) + " fp32 " + p["name"].get<std::string>());
      auto bf = run_pagoda("generate --device cuda --dtype bfloat16" + common);
      ASSERT_EQ(bf.exit_code, 0) << bf.err;
      Json jb = Json::parse(bf.out);
      expect_greedy_prefix(jb["token_ids"], p["bfloat16"]["greedy"], p["bfloat16"]["greedy_top1_minus_top2"], 0.1,
                           std::string(model) + " bf16 " + p["name"].get<std::string>());
    }
  }
}

// Each backend against the CPU tokens, as above; FA2 runs TRITON_ATTN's tensor-core kernels with the same
// plan (flash_attn.h), so its tokens are TRITON_ATTN's exactly. FA3 (SM 9.0) runs its own prefill kernel.
TEST(GenerateGpu, ReferenceModelsFlashAttnMatchesTritonAttn) {
  SKIP_WITHOUT_GPU();
  for (const char* model : {"qwen3-tiny", "llama-tiny", "qwen2-tiny"}) {
    std::string dir = test_data_dir() + "/reference/" + model;
    Json ref = load_json(dir + "/reference.json");
    for (const auto& p : ref["prompts"]) {
      const std::string what = std::string(model) + " bf16 " + p["name"].get<std::string>();
      std::string common = " --device cuda --dtype bfloat16 --model " + dir + " --temperature 0 --ignore-eos --max-tokens " +
                           std::to_string(p["bfloat16"]["greedy"].size()) + " --output-json --prompt-token-ids " +
                           join_ids(p["input_ids"]);
      auto triton = run_pagoda("generate --attention-backend TRITON_ATTN" + common);
      ASSERT_EQ(triton.exit_code, 0) << triton.err;
      EXPECT_THAT(triton.err, testing::HasSubstr("Using TRITON_ATTN backend."));
      Json jt = Json::parse(triton.out);
      expect_greedy_prefix(jt["token_ids"], p["bfloat16"]["greedy"], p["bfloat16"]["greedy_top1_minus_top2"], 0.1,
                           what + " TRITON_ATTN");
      for (int version : {2, 3}) {
        auto fa = run_pagoda("generate --attention-backend FLASH_ATTN -ac.flash_attn_version " + std::to_string(version) +
                             common);
        ASSERT_EQ(fa.exit_code, 0) << fa.err;
        EXPECT_THAT(fa.err, testing::HasSubstr("Using FLASH_ATTN backend."));
        EXPECT_THAT(fa.err, testing::HasSubstr("Using FlashAttention version " + std::to_string(version)));
        Json jf = Json::parse(fa.out);
        expect_greedy_prefix(jf["token_ids"], p["bfloat16"]["greedy"], p["bfloat16"]["greedy_top1_minus_top2"], 0.1,
                             what + " FA" + std::to_string(version));
        if (version == 2) {
          EXPECT_EQ(jf["token_ids"], jt["token_ids"]) << what << ": FA2 differs from TRITON_ATTN";
        }
      }
    }
  }
}

TEST(GenerateGpu, BatchOfPromptsAndFp8Kv) {
  SKIP_WITHOUT_GPU();
  std::string dir = test_data_dir() + "/reference/qwen3-tiny";
  auto r = run_pagoda("generate --device cuda --model " + dir + " --kv-cache-dtype fp8 --temperature 0 --max-tokens 8 "
                      "--output-json --prompt-token-ids 1,2,3,4,5");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Json::parse(r.out)["token_ids"].size(), 8u);
  EXPECT_THAT(r.err, testing::HasSubstr("kv_cache_dtype=fp8"));
}

// CUDA graphs replay decode steps: the tokens must be those of eager execution (same kernels, same order),
// for each backend of the CUDA model path (FLASH_ATTN has no float32).
TEST(GenerateGpu, CudaGraphsMatchEager) {
  SKIP_WITHOUT_GPU();
  std::string dir = test_data_dir() + "/reference/qwen3-tiny";
  const std::vector<std::pair<std::string, std::string>> runs = {
      {"bfloat16", "TRITON_ATTN"}, {"float32", "TRITON_ATTN"}, {"bfloat16", "FLASH_ATTN"}, {"float16", "FLASH_ATTN"}};
  for (const auto& [dtype, backend] : runs) {
    std::string common = " --device cuda --model " + dir + " --dtype " + dtype + " --attention-backend " + backend +
                         " --temperature 0 --ignore-eos --max-tokens 40 --output-json --prompt-token-ids 11,22,33,44,55,66,77";
    auto graphs = run_pagoda("generate" + common);
    auto eager = run_pagoda("generate --enforce-eager" + common);
    ASSERT_EQ(graphs.exit_code, 0) << graphs.err;
    ASSERT_EQ(eager.exit_code, 0) << eager.err;
    EXPECT_EQ(Json::parse(graphs.out)["token_ids"], Json::parse(eager.out)["token_ids"]) << dtype << " " << backend;
  }
}

// stories260K has head size 8: TRITON_ATTN (>= 32) is rejected, FLASH_ATTN (multiples of 8) is selected and
// must reproduce the published greedy text (golden.json), which the CPU path reproduces exactly in float32.
// FLASH_ATTN has no float32, so the GPU computes in float16/bfloat16 and a near-tie of the float32 logits may
// legitimately flip. The logits are ~10-20 (golden first_positions) and the logits GEMM writes the compute
// dtype, so the final rounding alone moves a logit by up to 2^-12 * 32 = 0.0078 (fp16) or 2^-9 * 32 = 0.0625
// (bf16) and a top-1/top-2 margin by twice that; the rounding of the activations upstream is of the same
// order. The tokens are therefore compared up to the first step whose float32 margin (from the CPU run) is
// below 4x the logit rounding: 2^-5 (fp16) and 2^-2 (bf16).
TEST(GenerateGpu, Stories260KReproducesTheGoldenTextWithFlashAttn) {
  SKIP_WITHOUT_GPU();
  const std::string dir = test_data_dir() + "/models/stories260K";
  Json golden = load_json(dir + "/golden.json");
  const Json& want = golden["hf_reference"]["greedy_token_ids"];
  // --ignore-eos: after a legitimate flip the GPU text may reach EOS early; the CPU run never samples it.
  const std::string common = " --model " + dir + "/hf --prompt '' --temperature 0 --ignore-eos --max-tokens 256 --output-json";
  auto cpu = run_pagoda("generate --device cpu --dtype float32 --logprobs 2" + common);
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  Json jc = Json::parse(cpu.out);
  ASSERT_EQ(jc["token_ids"], want);
  ASSERT_EQ(jc["text"], golden["greedy"]["text"]);
  Json margins = Json::array();
  for (const auto& top : jc["logprobs"]) margins.push_back(top[0]["logprob"].get<double>() - top[1]["logprob"].get<double>());

  for (const auto& [dtype, margin] : std::vector<std::pair<std::string, double>>{{"float16", std::ldexp(1.0, -5)},
                                                                                 {"bfloat16", std::ldexp(1.0, -2)}}) {
    for (int version : {2, 3}) {  // FA3 serves head sizes 64/128/256: head 8 runs the FA2 kernels under both
      auto gpu = run_pagoda("generate --device cuda --dtype " + dtype + " -ac.flash_attn_version " +
                            std::to_string(version) + common);
      ASSERT_EQ(gpu.exit_code, 0) << gpu.err;
      EXPECT_THAT(gpu.err, testing::HasSubstr("Using FLASH_ATTN attention backend out of potential backends: ['FLASH_ATTN']"));
      Json jg = Json::parse(gpu.out);
      EXPECT_EQ(jg["token_ids"].size(), want.size());
      expect_greedy_prefix(jg["token_ids"], want, margins, margin,
                           "stories260K " + dtype + " FA" + std::to_string(version));
    }
  }
  // With TRITON_ATTN forced, the selector's error names the head size.
  auto r = run_pagoda("generate --device cuda --attention-backend TRITON_ATTN --model " + dir + "/hf --max-tokens 4");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, testing::HasSubstr("Selected backend TRITON_ATTN is not valid for this configuration. "
                                        "Reason: ['head_size not supported']"));
}

// FLASHINFER against the CPU's bfloat16 greedy tokens, as FLASH_ATTN above (the same margin: a different
// summation order may flip a near-tie of bf16 logits), with decode steps replayed from CUDA graphs (the
// plan's captured grid) and eager (its per-step plan), over pages of 1 and 16 tokens in NHD and HND, and
// with cascade on (one sequence: no group, so the same plans).
TEST(GenerateGpu, FlashInferMatchesTheReference) {
  SKIP_WITHOUT_GPU();
  const std::string dir = test_data_dir() + "/reference/qwen3-tiny";
  Json ref = load_json(dir + "/reference.json");
  const std::vector<std::pair<std::string, std::string>> variants = {
      {"", ""}, {" --enforce-eager", ""}, {" --block-size 1", ""}, {"", "PAGODA_KV_CACHE_LAYOUT=HND "},
      {" -ac.use_cascade_attention true", ""}};
  for (const auto& p : ref["prompts"]) {
    const std::string common = " --device cuda --dtype bfloat16 --attention-backend FLASHINFER --model " + dir +
                               " --temperature 0 --ignore-eos --max-tokens " +
                               std::to_string(p["bfloat16"]["greedy"].size()) + " --output-json --prompt-token-ids " +
                               join_ids(p["input_ids"]);
    for (const auto& [args, env] : variants) {
      const std::string what = "qwen3-tiny bf16 " + p["name"].get<std::string>() + " FLASHINFER" + args + " " + env;
      auto r = run_pagoda("generate" + common + args, env);
      ASSERT_EQ(r.exit_code, 0) << what << "\n" << r.err;
      EXPECT_THAT(r.err, testing::HasSubstr("Using FLASHINFER backend."));
      EXPECT_THAT(r.err, testing::HasSubstr(args.find("cascade") != std::string::npos ? "FLASHINFER (plan/run, cascade)"
                                                                                       : "FLASHINFER (plan/run)"));
      expect_greedy_prefix(Json::parse(r.out)["token_ids"], p["bfloat16"]["greedy"],
                           p["bfloat16"]["greedy_top1_minus_top2"], 0.1, what);
    }
  }
}

// The seed's example (spec §4): --block-size 8 rules out FLASH_ATTN (multiples of 16), so the selector takes
// FLASHINFER with the WARNING naming FLASH_ATTN (SM 8.x, 9.x, 12.x; on SM 10.x FLASHINFER is first anyway),
// and the run generates the reference tokens.
TEST(GenerateGpu, BlockSize8SelectsFlashInferWithTheWarning) {
  SKIP_WITHOUT_GPU();
  const auto device = detect_cuda_device();
  const std::string dir = test_data_dir() + "/reference/qwen3-tiny";
  Json ref = load_json(dir + "/reference.json");
  const Json& p = ref["prompts"][2];
  auto r = run_pagoda("generate --device cuda --dtype bfloat16 --block-size 8 --model " + dir +
                      " --temperature 0 --ignore-eos --max-tokens " + std::to_string(p["bfloat16"]["greedy"].size()) +
                      " --output-json --prompt-token-ids " + join_ids(p["input_ids"]));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, testing::HasSubstr("Using FLASHINFER attention backend out of potential backends: ['FLASHINFER'"));
  const std::string warning = "--block-size 8 precluded higher-priority backend(s) FLASH_ATTN. Using FLASHINFER instead, "
                              "which may result in reduced performance. Consider removing --block-size to auto-select "
                              "the optimal block size.";
  if (device->cc->major != 10) {
    EXPECT_THAT(r.err, testing::HasSubstr(warning));
  }
  expect_greedy_prefix(Json::parse(r.out)["token_ids"], p["bfloat16"]["greedy"], p["bfloat16"]["greedy_top1_minus_top2"],
                       0.1, "qwen3-tiny bf16 block 8 FLASHINFER");
}

// The architecture of the kernel image the device runs: the newest of the binary's (PAGODA_TEST_CUDA_ARCHS,
// CMake's list with commas, such as "80-real,90a-real") that is not newer than the device; 0 if none.
int device_image_arch(const ComputeCapability& cc) {
  const int device = cc.major * 10 + cc.minor;
  int best = 0;
  std::stringstream list(PAGODA_TEST_CUDA_ARCHS);
  for (std::string a; std::getline(list, a, ',');) {
    const int arch = std::atoi(a.c_str());
    if (arch <= device) best = std::max(best, arch);
  }
  return best;
}

// fp8 KV with FLASHINFER (spec §6.5): e4m3 quantizes the query to FP8 unless
// disable_flashinfer_q_quantization, where the device and the kernel image the device runs are SM 8.9+;
// the runner's startup line says so. e5m2 never does. fp8 KV changes the logits by its rounding (2^-4
// relative for e4m3), far beyond the reference's margins, so the tokens are only counted here; the
// kernels' accuracy is flashinfer_gpu_test's.
TEST(GenerateGpu, FlashInferFp8KvWithAndWithoutQueryQuantization) {
  SKIP_WITHOUT_GPU();
  const auto device = detect_cuda_device();
  const bool fp8_mma = device_image_arch(*device->cc) >= 89;
  std::printf("[fp8] device %d.%d, kernel image sm_%d: FP8 queries %s\n", device->cc->major, device->cc->minor,
              device_image_arch(*device->cc), fp8_mma ? "expected" : "not expected");
  const std::string dir = test_data_dir() + "/reference/qwen3-tiny";
  const std::string common = " --device cuda --dtype bfloat16 --attention-backend FLASHINFER --model " + dir +
                             " --temperature 0 --ignore-eos --max-tokens 24 --output-json --prompt-token-ids " +
                             "3,14,15,92,65,35,89,79,32,38,46,26,43,38,32,79,50,28,84,19,71,69,39,93,75,10,58,20,97,49";
  struct Case {
    std::string kv, config;
    bool fp8_queries;
  };
  for (const Case& c : std::vector<Case>{{"fp8", "", fp8_mma},
                                         {"fp8", R"( --attention-config '{"disable_flashinfer_q_quantization": true}')", false},
                                         {"fp8_e4m3", " -ac.disable_flashinfer_q_quantization false", fp8_mma},
                                         {"fp8_e5m2", "", false}}) {
    auto r = run_pagoda("generate --kv-cache-dtype " + c.kv + common + c.config);
    ASSERT_EQ(r.exit_code, 0) << c.kv << c.config << "\n" << r.err;
    EXPECT_EQ(Json::parse(r.out)["token_ids"].size(), 24u) << c.kv << c.config;
    EXPECT_THAT(r.err, testing::HasSubstr(c.fp8_queries ? "FLASHINFER (plan/run, FP8 queries)" : "FLASHINFER (plan/run)"))
        << c.kv << c.config;
  }
}

}  // namespace
}  // namespace pagoda
