// `pagoda bench attention` on the built-in model on the CPU: the table, the JSON and the PNG (decoded here
// independently: signature, chunk CRCs, stored deflate blocks, Adler-32, the recommended bar's colour); a
// backend that is not valid here listed with its reasons and not timed; an accuracy failure injected through
// the test-only hook flagged and never recommended; and the recommended flags, pasted into `pagoda generate`,
// selecting that backend. The serve-trace workload from a trace file as `bench serve --save-trace` writes it.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "pagoda/cli/attention_bench.h"
#include "pagoda/core/error.h"
#include "pagoda/model/builtin_models.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using test::run_pagoda;
using testing::HasSubstr;

#define SKIP_WITHOUT_BUILTIN_MODEL()                                  \
  if (!fs::exists(model_cache_dir() / kDefaultModelFile))             \
  GTEST_SKIP() << "the built-in model is not in the model cache: run scripts/fetch-models.sh"

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("pagoda_bench_attn_" + std::to_string(::getpid()) + "_" + name)).string();
}

// A small load: the test runs on two busy cores. One thread, so that the candidates do not compete for them.
const std::string kSmallLoad = "--batch-size 2 --context-len 96 --time-budget 0.5 --cpu-threads 1";

Json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  if (!in) return Json();
  return Json::parse(in);
}

const Json* candidate(const Json& j, const std::string& backend, const std::string& kv = "auto") {
  for (const Json& c : j["candidates"])
    if (c["backend"] == backend && c["kv_cache_dtype"] == kv) return &c;
  return nullptr;
}

uint32_t be32(const std::string& s, size_t at) {
  return uint32_t(uint8_t(s[at])) << 24 | uint32_t(uint8_t(s[at + 1])) << 16 | uint32_t(uint8_t(s[at + 2])) << 8 |
         uint32_t(uint8_t(s[at + 3]));
}

uint32_t crc32_bitwise(const std::string& s, size_t at, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = at; i < at + n; ++i) {
    c ^= uint8_t(s[i]);
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1)));
  }
  return ~c;
}

// Decodes a PNG of stored deflate blocks (what --plot writes) into RGB rows; fails the test on any defect.
struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;
};
Image decode_png(const std::string& png) {
  Image im;
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  std::string idat;
  for (size_t at = 8; at + 12 <= png.size();) {
    const uint32_t len = be32(png, at);
    const std::string type = png.substr(at + 4, 4);
    EXPECT_EQ(crc32_bitwise(png, at + 4, len + 4), be32(png, at + 8 + len)) << type;
    if (type == "IHDR") {
      im.width = int(be32(png, at + 8));
      im.height = int(be32(png, at + 12));
      EXPECT_EQ(png.substr(at + 16, 5), std::string("\x08\x02\x00\x00\x00", 5));  // 8-bit RGB
    } else if (type == "IDAT") {
      idat += png.substr(at + 8, len);
    }
    at += 12 + len;
  }
  EXPECT_GE(idat.size(), 2u);
  std::string raw;
  size_t at = 2;  // zlib header
  for (bool last = false; !last && at + 5 <= idat.size();) {
    last = idat[at] & 1;
    EXPECT_EQ((uint8_t(idat[at]) >> 1) & 3, 0) << "stored blocks only";
    const size_t n = uint8_t(idat[at + 1]) | size_t(uint8_t(idat[at + 2])) << 8;
    EXPECT_EQ(n ^ 0xFFFF, uint8_t(idat[at + 3]) | size_t(uint8_t(idat[at + 4])) << 8);
    raw += idat.substr(at + 5, n);
    at += 5 + n;
  }
  uint32_t a = 1, b = 0;
  for (char c : raw) a = (a + uint8_t(c)) % 65521, b = (b + a) % 65521;
  EXPECT_EQ(be32(idat, at), b << 16 | a);
  EXPECT_EQ(raw.size(), size_t(im.height) * (size_t(im.width) * 3 + 1));
  for (int y = 0; y < im.height && raw.size() == size_t(im.height) * (size_t(im.width) * 3 + 1); ++y) {
    EXPECT_EQ(raw[size_t(y) * (size_t(im.width) * 3 + 1)], 0) << "filter byte of row " << y;
    const char* row = raw.data() + size_t(y) * (size_t(im.width) * 3 + 1) + 1;
    im.rgb.insert(im.rgb.end(), row, row + size_t(im.width) * 3);
  }
  return im;
}

int count_color(const Image& im, uint32_t rgb) {
  int n = 0;
  for (size_t i = 0; i + 2 < im.rgb.size(); i += 3)
    n += (uint32_t(im.rgb[i]) << 16 | uint32_t(im.rgb[i + 1]) << 8 | im.rgb[i + 2]) == rgb;
  return n;
}

TEST(BenchAttentionCli, TableJsonAndPngForTheBuiltInModel) {
  SKIP_WITHOUT_BUILTIN_MODEL();
  const std::string json = temp_path("a.json"), png = temp_path("a.png");
  auto r = run_pagoda("bench attention --device cpu --backends CPU_ATTN,FLEX_ATTENTION,FLASH_ATTN " + kSmallLoad +
                      " --output-json " + json + " --plot " + png);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("MS/STEP"));
  EXPECT_THAT(r.out, HasSubstr("engine start's choice with your flags: CPU_ATTN"));
  EXPECT_THAT(r.out, HasSubstr("recommendation: "));
  EXPECT_THAT(r.out, HasSubstr("flags: --attention-backend "));
  const Json j = read_json(json);
  ASSERT_TRUE(j.contains("candidates"));
  EXPECT_EQ(j["shape"]["layers"], 30);
  EXPECT_EQ(j["shape"]["q_heads"], 9);
  EXPECT_EQ(j["shape"]["kv_heads"], 3);
  EXPECT_EQ(j["shape"]["head_size"], 64);

  // FLASH_ATTN is not valid on the CPU: listed with its reason, not timed.
  const Json* fa = candidate(j, "FLASH_ATTN");
  ASSERT_NE(fa, nullptr);
  EXPECT_FALSE((*fa)["valid"].get<bool>());
  ASSERT_FALSE((*fa)["reasons"].empty());
  EXPECT_THAT((*fa)["reasons"][0].get<std::string>(), HasSubstr("engine start runs CPU_ATTN"));
  EXPECT_FALSE(fa->contains("median_ms"));
  EXPECT_THAT(r.out, HasSubstr("FLASH_ATTN kv=auto                 invalid   with these flags engine start runs CPU_ATTN"));

  for (const char* b : {"CPU_ATTN", "FLEX_ATTENTION"}) {
    const Json* c = candidate(j, b);
    ASSERT_NE(c, nullptr) << b;
    ASSERT_TRUE((*c)["valid"].get<bool>()) << b << ": " << (*c)["reasons"].dump();
    EXPECT_GT((*c)["median_ms"].get<double>(), 0.0) << b;
    EXPECT_GE((*c)["rounds"].get<int>(), 3) << b;
    EXPECT_TRUE((*c)["checked"].get<bool>()) << b;
    EXPECT_LE((*c)["error"].get<double>(), (*c)["bound"].get<double>()) << b;
    EXPECT_GT((*c)["error"].get<double>(), 0.0) << b << ": a bfloat16 cache rounds";
    EXPECT_TRUE((*c)["accurate"].get<bool>()) << b;
    EXPECT_GT((*c)["kv_capacity_tokens"].get<int64_t>(), 0) << b;
    EXPECT_GT((*c)["percent_of_ceiling"].get<double>(), 0.0) << b;
  }
  EXPECT_TRUE((*candidate(j, "CPU_ATTN"))["automatic"].get<bool>());
  ASSERT_FALSE(j["recommendation"].is_null());
  const std::string rec = j["recommendation"]["backend"];
  EXPECT_TRUE(rec == "CPU_ATTN" || rec == "FLEX_ATTENTION") << rec;

  std::ifstream in(png, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const Image im = decode_png(bytes);
  EXPECT_GT(im.width, 300);
  EXPECT_GT(im.height, 100);
  EXPECT_GT(count_color(im, 0x2CA02C), 1000) << "the recommended bar";
  EXPECT_GT(count_color(im, 0x000000), 500) << "the labels";
  fs::remove(json);
  fs::remove(png);
}

// The test-only hook adds 1 to one output element of CPU_ATTN's accuracy layer: an error of ~1 / max|v|
// (max|v| <= sqrt 3 for the bench's inputs), far above a bfloat16 cache's bound (< 0.1 here).
TEST(BenchAttentionCli, InjectedAccuracyFailureIsFlaggedAndNeverRecommended) {
  SKIP_WITHOUT_BUILTIN_MODEL();
  const std::string json = temp_path("inj.json");
  BenchAttentionHooks hooks;
  int calls = 0;
  hooks.corrupt_output = [&](const BenchCandidate& c, float* out, int64_t n) {
    if (c.backend != BackendName::kCpuAttn) return;
    ++calls;
    out[n / 2] += 1.0f;
  };
  std::vector<std::string> args = {"--device", "cpu", "--backends", "CPU_ATTN,FLEX_ATTENTION", "--batch-size", "2",
                                   "--context-len", "96", "--time-budget", "0.5", "--cpu-threads", "1",
                                   "--output-json", json};
  testing::internal::CaptureStdout();
  const int rc = run_bench_attention_hooked(args, &hooks);
  const std::string out = testing::internal::GetCapturedStdout();
  ASSERT_EQ(rc, 0);
  EXPECT_GE(calls, 1);
  const Json j = read_json(json);
  const Json* cpu = candidate(j, "CPU_ATTN");
  ASSERT_NE(cpu, nullptr);
  EXPECT_TRUE((*cpu)["valid"].get<bool>());
  EXPECT_TRUE((*cpu)["checked"].get<bool>());
  EXPECT_GT((*cpu)["error"].get<double>(), 0.5);
  EXPECT_FALSE((*cpu)["accurate"].get<bool>());
  EXPECT_FALSE((*cpu)["recommended"].get<bool>());
  EXPECT_THAT(out, HasSubstr("INACCURATE"));
  // The other candidate is accurate, so it is the recommendation whatever the times.
  ASSERT_FALSE(j["recommendation"].is_null());
  EXPECT_EQ(j["recommendation"]["backend"], "FLEX_ATTENTION");
  EXPECT_THAT(out, HasSubstr("engine start's choice CPU_ATTN kv=auto is"));
  fs::remove(json);
}

// Whatever is recommended, its flags pasted into `pagoda generate` select it; FLEX_ATTENTION's are checked too
// (CPU_ATTN is also the default, so its flags alone would not show the path is followed).
TEST(BenchAttentionCli, RecommendedFlagsSelectThatBackendInGenerate) {
  SKIP_WITHOUT_BUILTIN_MODEL();
  const std::string json = temp_path("rec.json");
  auto r = run_pagoda("bench attention --device cpu --backends FLEX_ATTENTION,CPU_ATTN " + kSmallLoad + " --output-json " + json);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = read_json(json);
  ASSERT_FALSE(j["recommendation"].is_null());
  std::vector<std::pair<std::string, std::vector<std::string>>> checks = {
      {j["recommendation"]["backend"], j["recommendation"]["flags"].get<std::vector<std::string>>()},
      {"FLEX_ATTENTION", (*candidate(j, "FLEX_ATTENTION"))["flags"].get<std::vector<std::string>>()}};
  for (const auto& [backend, flags] : checks) {
    std::string cmd = "generate --device cpu --prompt hi --max-tokens 1 --cpu-threads 1";
    for (const std::string& f : flags) cmd += " " + f;
    auto g = run_pagoda(cmd);
    ASSERT_EQ(g.exit_code, 0) << cmd << "\n" << g.err;
    EXPECT_THAT(g.err, HasSubstr("Using " + backend + " attention backend")) << cmd;
  }
  fs::remove(json);
}

TEST(BenchAttentionCli, ServeTraceWorkload) {
  SKIP_WITHOUT_BUILTIN_MODEL();
  const std::string trace = temp_path("trace.json"), json = temp_path("trace_out.json");
  // As `pagoda bench serve --save-trace` writes it: three requests, two overlapping.
  std::ofstream(trace) << R"({"model": "x", "duration_s": 3.0, "requests": [
      {"arrival_s": 0.0, "ttft_s": 0.5, "e2e_s": 2.0, "prompt_tokens": 40, "output_tokens": 30},
      {"arrival_s": 0.2, "ttft_s": 0.9, "e2e_s": 2.5, "prompt_tokens": 24, "output_tokens": 50},
      {"arrival_s": 2.6, "ttft_s": 0.1, "e2e_s": 0.4, "prompt_tokens": 8, "output_tokens": 4}]})";
  auto r = run_pagoda("bench attention --device cpu --backends CPU_ATTN --workload serve-trace " + trace +
                      " --trace-steps 6 --time-budget 0.3 --cpu-threads 1 --output-json " + json);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = read_json(json);
  EXPECT_EQ(j["workload"]["name"], "serve-trace");
  const Json& steps = j["workload"]["steps"];
  ASSERT_FALSE(steps.empty());
  // t = 0.25 s (the first of 6 instants over 3 s): both early requests prefilling their prompts.
  EXPECT_EQ(steps[0]["query_lens"], Json::array({40, 24}));
  EXPECT_EQ(steps[0]["seq_lens"], Json::array({40, 24}));
  EXPECT_TRUE((*candidate(j, "CPU_ATTN"))["accurate"].get<bool>());
  fs::remove(trace);
  fs::remove(json);
}

TEST(BenchAttentionCli, BadOptionsAreConfigErrors) {
  for (const char* args : {"--kv-cache-dtype auto,bogus", "--workload serve-trace", "--backends CPU_ATTN,NOPE",
                           "--block-size 16,x", "--workload serve-trace /nonexistent/trace.json"}) {
    auto r = run_pagoda(std::string("bench attention --device cpu ") + args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr("ERROR")) << args;
  }
}

TEST(BenchAttention, TraceWorkloadReconstructsDecodeContexts) {
  // One request: prompt 100, 11 tokens from t = 1 (first token) to t = 2 (end); at t = 1.5 it has produced 6.
  std::vector<TraceRequest> t = {{0.0, 1.0, 2.0, 100, 11}};
  BenchWorkload w = trace_workload(t, 4);  // instants 0.25, 0.75, 1.25, 1.75
  ASSERT_EQ(w.steps.size(), 4u);
  EXPECT_EQ(w.steps[0].batch.query_lens, std::vector<int>{100});
  EXPECT_EQ(w.steps[2].batch.query_lens, std::vector<int>{1});
  EXPECT_EQ(w.steps[2].batch.seq_lens, std::vector<int>{100 + 1 + 2});   // 1 + 0.25 x 10
  EXPECT_EQ(w.steps[3].batch.seq_lens, std::vector<int>{100 + 1 + 7});   // 1 + 0.75 x 10
  EXPECT_THROW(trace_workload({}, 4), Error);
}

}  // namespace
}  // namespace pagoda
