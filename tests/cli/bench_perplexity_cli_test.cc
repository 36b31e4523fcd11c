// `pagoda bench perplexity` through the binary: its perplexity against one computed here from
// ModelRunner::forward logits on the same chunks, KL against a cache that stores the same numbers as auto, fp8
// against auto on the built-in model, the JSON, and the errors. The text is Debian's GPL-3
// (/usr/share/common-licenses); the tests that need it skip where it is absent.
#include <cmath>
#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "pagoda/model/builtin_models.h"
#include "pagoda/model/cpu_model_runner.h"
#include "pagoda/model/load_model.h"
#include "pagoda/tokenizer/tokenizer.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using test::run_pagoda;
using test::test_data_dir;

constexpr const char* kText = "/usr/share/common-licenses/GPL-3";

#define SKIP_WITHOUT_TEXT()                                                            \
  if (!fs::exists(kText)) GTEST_SKIP() << kText << " is absent (Debian's common-licenses)"

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("pagoda_ppl_" + std::to_string(::getpid()) + "_" + name)).string();
}

Json run_json(const std::string& args) {
  const std::string out = temp_path("out.json");
  auto r = run_pagoda("bench perplexity " + args + " --output-json " + out);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, testing::HasSubstr("kv_cache_dtype"));  // the table
  std::ifstream in(out);
  if (!in) return Json();
  Json j = Json::parse(in);
  fs::remove(out);
  return j;
}

std::string stories_dir() { return test_data_dir() + "/models/stories260K/hf"; }

// The scoring, written out independently of the command: chunks of ctx tokens of the BOS-prefixed text,
// BOS in place of each chunk's first token, every position's logits from one prefill, NLL of the second
// half's next tokens; llama.cpp's PPL and its standard error.
TEST(BenchPerplexityCli, Stories260KPerplexityMatchesForwardLogits) {
  SKIP_WITHOUT_TEXT();
  const int ctx = 128, chunks = 3;
  Json j = run_json("--model " + stories_dir() + " -f " + kText + " --ctx-size 128 --chunks 3 --block-size 16 "
                    "--cpu-threads 1");
  ASSERT_TRUE(j.contains("results"));
  const Json& a = j["results"][0];
  EXPECT_EQ(a["kv_cache_dtype"], "auto");
  EXPECT_EQ(a["stored_as"], "bfloat16");  // a float32 checkpoint runs with a bfloat16 cache by default

  Tokenizer tok = Tokenizer::from_file(stories_dir());
  std::ifstream in(kText, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::vector<int> ids = tok.encode(text, true);
  ASSERT_TRUE(tok.bos_id().has_value());
  ASSERT_EQ(ids[0], *tok.bos_id());  // the per-chunk BOS is exercised
  EXPECT_EQ(j["num_tokens"], ids.size());
  EXPECT_EQ(j["chunks"], chunks);
  EXPECT_EQ(j["bos_per_chunk"], true);

  LoadedModel model = load_model(stories_dir());
  KvCacheOptions kv;
  kv.block_size = 16;
  kv.num_blocks = ctx / 16;
  kv.dtype = DType::kBF16;
  CpuModelRunner runner(model, kv, 1);
  const int V = model.config.vocab_size;
  double nll = 0, nll2 = 0;
  int64_t count = 0;
  std::vector<double> chunk_ppl;
  for (int c = 0; c < chunks; ++c) {
    ForwardBatch b;
    b.token_ids.assign(ids.begin() + c * ctx, ids.begin() + (c + 1) * ctx);
    b.token_ids[0] = *tok.bos_id();
    b.query_start_loc = {0, ctx};
    b.seq_lens = {ctx};
    b.max_blocks_per_seq = ctx / 16;
    for (int k = 0; k < ctx / 16; ++k) b.block_tables.push_back(k);
    for (int t = 0; t < ctx; ++t) b.logits_indices.push_back(t);  // every position; the command asks for fewer
    const std::vector<float> logits = runner.forward(b);
    for (int t = ctx / 2; t < ctx - 1; ++t) {
      const float* x = logits.data() + int64_t(t) * V;
      double m = x[0], s = 0;
      for (int i = 0; i < V; ++i) m = std::max(m, double(x[i]));
      for (int i = 0; i < V; ++i) s += std::exp(double(x[i]) - m);
      const double v = m + std::log(s) - double(x[ids[size_t(c * ctx + t + 1)]]);
      nll += v;
      nll2 += v * v;
      ++count;
    }
    chunk_ppl.push_back(std::exp(nll / double(count)));
  }
  EXPECT_EQ(j["scored_tokens"], count);
  const double mean = nll / double(count), ppl = std::exp(mean);
  const double err = std::sqrt((nll2 / double(count) - mean * mean) / double(count - 1)) * ppl;
  // The same runner settings give the same float32 logits, but the command asks for the scored rows only and
  // the lm_head's float32 sums may group differently over another row count: a few ulp of logits of size
  // ~10, ~1e-5 absolute, moves each NLL by at most twice that and the PPL by a relative 2e-5. A scoring
  // error (an off-by-one target, the wrong half, no BOS) moves it by far more.
  const double tol = 2e-5;
  EXPECT_NEAR(a["ppl"].get<double>() / ppl, 1.0, tol);
  EXPECT_NEAR(a["nll_mean"].get<double>(), mean, tol);
  EXPECT_NEAR(a["ppl_stderr"].get<double>() / err, 1.0, 1e-3);  // a difference of sums of squares: 3 digits fewer
  ASSERT_EQ(a["chunk_ppl"].size(), size_t(chunks));
  for (int c = 0; c < chunks; ++c) EXPECT_NEAR(a["chunk_ppl"][size_t(c)].get<double>() / chunk_ppl[size_t(c)], 1.0, tol);
}

// A bfloat16 cache stores what auto stores for this model (bfloat16), in its own runner: the comparison must
// then find the two distributions equal everywhere, and the greedy continuations equal throughout.
TEST(BenchPerplexityCli, IdenticalCacheHasZeroKl) {
  SKIP_WITHOUT_TEXT();
  Json j = run_json("--model " + stories_dir() + " -f " + kText + " --ctx-size 128 --chunks 4 --kv-cache-dtype "
                    "auto,bfloat16 --greedy-prompts 3 --greedy-prompt-tokens 24 --greedy-tokens 12");
  ASSERT_EQ(j["results"].size(), 2u);  // auto listed once
  const Json& a = j["results"][0];
  const Json& b = j["results"][1];
  EXPECT_EQ(b["kv_cache_dtype"], "bfloat16");
  EXPECT_EQ(a["stored_as"], b["stored_as"]);
  EXPECT_EQ(b["kl_mean"].get<double>(), 0.0);
  EXPECT_EQ(b["kl_max"].get<double>(), 0.0);
  EXPECT_EQ(b["top1_agreement"].get<double>(), 1.0);
  EXPECT_EQ(b["ppl"].get<double>(), a["ppl"].get<double>());
  EXPECT_EQ(b["ln_ppl_ratio"].get<double>(), 0.0);
  EXPECT_EQ(b["greedy_first_divergence"], Json::parse("[12, 12, 12]"));
  EXPECT_EQ(b["greedy_identical"], 3);
  EXPECT_EQ(j["greedy"]["prompts"], 3);
  EXPECT_FALSE(a.contains("kl_mean"));  // auto is the base: no comparison with itself
}

// fp8 e4m3 keys and values (3 mantissa bits, relative rounding up to 2^-4) on the built-in SmolLM2: the
// distributions move, but a working cache keeps them close. A broken one (wrong scale, wrong slots) gives
// KL of order 1 nat and top-1 agreement near chance; these bounds separate the two, they are no precision
// claim.
TEST(BenchPerplexityCli, Fp8AgainstAutoOnTheBuiltinModel) {
  SKIP_WITHOUT_TEXT();
  if (!fs::exists(model_cache_dir() / kDefaultModelFile))
    GTEST_SKIP() << "the built-in model is not in the model cache: run scripts/fetch-models.sh";
  Json j = run_json(std::string("-f ") + kText + " --ctx-size 128 --chunks 2 --kv-cache-dtype fp8 "
                    "--greedy-prompts 2 --greedy-prompt-tokens 16 --greedy-tokens 8");
  ASSERT_EQ(j["results"].size(), 2u);
  const Json& f = j["results"][1];
  EXPECT_EQ(f["stored_as"], "float8_e4m3fn");
  for (const char* key : {"ppl", "ppl_stderr", "nll_mean", "ln_ppl_ratio", "ln_ppl_ratio_stderr", "kl_mean",
                          "kl_stderr", "kl_median", "kl_p99", "kl_max", "top1_agreement", "top1_agreement_stderr",
                          "prefill_tokens_per_s", "greedy_first_divergence", "greedy_mean_first_divergence",
                          "greedy_identical"})
    EXPECT_TRUE(f.contains(key)) << key;
  EXPECT_GT(f["kl_mean"].get<double>(), 0.0);
  EXPECT_LT(f["kl_mean"].get<double>(), 0.1);
  EXPECT_GE(f["kl_max"].get<double>(), f["kl_p99"].get<double>());
  EXPECT_GE(f["kl_p99"].get<double>(), f["kl_median"].get<double>());
  EXPECT_GT(f["top1_agreement"].get<double>(), 0.75);
  EXPECT_LT(std::abs(f["ln_ppl_ratio"].get<double>()), 0.1);
  EXPECT_EQ(j["scored_tokens"], 2 * 63);
  for (const Json& d : f["greedy_first_divergence"]) EXPECT_TRUE(d.get<int>() >= 0 && d.get<int>() <= 8);
}

// The four TurboQuant presets through the CPU runner on the built-in model: 26 of its 30 layers packed (the
// first and last two keep bfloat16, spec §3.7). As for fp8 above, the bounds separate a working cache from
// a broken one (KL of nats, top-1 near chance); the 8-bit keys of k8v4 must move the distributions less
// than the 3-bit keys and values of 3bit_nc (measured apart by more than 10x).
TEST(BenchPerplexityCli, TurboQuantPresetsOnTheBuiltinModel) {
  SKIP_WITHOUT_TEXT();
  if (!fs::exists(model_cache_dir() / kDefaultModelFile))
    GTEST_SKIP() << "the built-in model is not in the model cache: run scripts/fetch-models.sh";
  Json j = run_json(std::string("-f ") + kText + " --ctx-size 128 --chunks 1 --kv-cache-dtype turboquant_k8v4,"
                    "turboquant_4bit_nc,turboquant_k3v4_nc,turboquant_3bit_nc");
  ASSERT_EQ(j["results"].size(), 5u);
  for (size_t i = 1; i < 5; ++i) {
    const Json& r = j["results"][i];
    EXPECT_EQ(r["stored_as"], "packed; 4 at bfloat16") << r["kv_cache_dtype"];
    EXPECT_GT(r["kl_mean"].get<double>(), 0.0) << r["kv_cache_dtype"];
    EXPECT_LT(r["kl_mean"].get<double>(), 1.0) << r["kv_cache_dtype"];
    EXPECT_GT(r["top1_agreement"].get<double>(), 0.5) << r["kv_cache_dtype"];
  }
  EXPECT_LT(j["results"][1]["kl_mean"].get<double>(), j["results"][4]["kl_mean"].get<double>());
}

TEST(BenchPerplexityCli, Errors) {
  auto r = run_pagoda("bench perplexity --help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* opt : {"--file", "--ctx-size", "--chunks", "--kv-cache-dtype", "--greedy-prompts", "--output-json"})
    EXPECT_THAT(r.out, testing::HasSubstr(opt));

  r = run_pagoda("bench perplexity --model dummy:tiny");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, testing::HasSubstr("needs --file"));

  r = run_pagoda("bench perplexity --model dummy:tiny -f /nonexistent/text.txt");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, testing::HasSubstr("--file /nonexistent/text.txt: cannot read it"));

  const std::string empty = temp_path("empty.txt");
  std::ofstream(empty) << "  \n";
  r = run_pagoda("bench perplexity --model dummy:tiny -f " + empty);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, testing::HasSubstr("is empty"));

  // dummy:tiny's tokenizer is byte-level: 100 bytes and BOS are 101 tokens, fewer than 2 x 64.
  const std::string short_text = temp_path("short.txt");
  std::ofstream(short_text) << std::string(100, 'a');
  r = run_pagoda("bench perplexity --model dummy:tiny --ctx-size 64 -f " + short_text);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, testing::HasSubstr("tokenizes to 101 tokens; perplexity with --ctx-size 64 needs at least 2 x 64 = 128"));

  r = run_pagoda("bench perplexity --model dummy:tiny --kv-cache-dtype auto,fp9 -f " + short_text);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, testing::HasSubstr("Invalid kv_cache_dtype: fp9"));
  r = run_pagoda("bench perplexity --model dummy:tiny --kv-cache-dtype auto,,fp8 -f " + short_text);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, testing::HasSubstr("empty entry"));
  r = run_pagoda("bench perplexity --model dummy:tiny --ctx-size 2 -f " + short_text);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, testing::HasSubstr("--ctx-size must be at least 4"));
  fs::remove(empty);
  fs::remove(short_text);
}

// dummy:tiny (random weights, no files): a run end to end with a short text, fp8 beside auto.
TEST(BenchPerplexityCli, DummyTinyRunsWithoutTestData) {
  const std::string text = temp_path("text.txt");
  std::string s;
  for (int i = 0; i < 40; ++i) s += "The quick brown fox jumps over the lazy dog. ";
  std::ofstream(text) << s;
  Json j = run_json("--model dummy:tiny --ctx-size 256 --kv-cache-dtype fp8 -f " + text);
  fs::remove(text);
  ASSERT_EQ(j["results"].size(), 2u);
  EXPECT_EQ(j["num_tokens"], s.size() + 1);  // bytes and BOS
  EXPECT_EQ(j["chunks"], int(s.size() + 1) / 256);
  EXPECT_GT(j["results"][1]["kl_mean"].get<double>(), 0.0);
}

}  // namespace
}  // namespace pagoda
