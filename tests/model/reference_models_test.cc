// The tiny random-weight reference models of shared/reference/ against transformers' float32 outputs.
#include <chrono>
#include <cmath>
#include <cstdio>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model_test_util.h"
#include "pagoda/model/load_model.h"

namespace pagoda::test {
namespace {

using nlohmann::json;

// Logit tolerance against transformers float32 (CPU). Both sides compute in float32 and differ only in
// summation order and in libm rounding. A length-K float32 dot product differs between two orders by about
// sqrt(K) * 2^-24 relative to the sum of |terms| (random-walk rounding; K <= 512 here, so ~1.4e-6), each
// layer adds such a relative perturbation to the residual stream (3-4 layers), and logits reach |12|:
// 4 layers * 1.4e-6 * 12 ~= 7e-5. 1e-4 covers that plus the reference's rounding to 6 decimals (5e-7).
// The README expects ~1e-4; its own independent re-implementation agrees with transformers to 6e-6.
constexpr double kLogitTol = 1e-4;

struct Model {
  std::string name;
  json ref;
};

json load_reference(const std::string& name) {
  return json::parse(read_file(data_dir() + "/reference/" + name + "/reference.json"));
}

std::vector<int32_t> ids_of(const json& a) { return a.get<std::vector<int32_t>>(); }

class ReferenceModel : public ::testing::TestWithParam<std::string> {};

// A forward over each prompt (all positions' logits), then 32 greedy tokens one at a time.
TEST_P(ReferenceModel, Float32LogitsTop5AndGreedy) {
  const std::string name = GetParam();
  const json ref = load_reference(name);
  LoadedModel model = load_model(data_dir() + "/reference/" + name);
  CpuModelRunner runner(model, {.num_blocks = 64, .block_size = 16, .dtype = DType::kF32}, 2);
  BlockAllocator alloc(64);
  double max_err = 0;
  for (const auto& p : ref["prompts"]) {
    Sequence s;
    s.prompt = ids_of(p["input_ids"]);
    s.max_new_tokens = 32;
    s.keep_prompt_logits = true;
    std::vector<Sequence> seqs{std::move(s)};
    const auto t0 = std::chrono::steady_clock::now();
    run_greedy(runner, alloc, seqs, 1 << 20);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    Sequence& r = seqs[0];
    const std::string label = name + "/" + p["name"].get<std::string>();
    const auto& f32 = p["float32"];

    // Last-position logits, every vocab entry.
    const auto last = f32["last_logits"].get<std::vector<double>>();
    ASSERT_EQ(r.last_prompt_logits.size(), last.size()) << label;
    double err = 0;
    for (size_t i = 0; i < last.size(); ++i) err = std::max(err, std::abs(double(r.last_prompt_logits[i]) - last[i]));
    EXPECT_LE(err, kLogitTol) << label;
    max_err = std::max(max_err, err);

    // Top-5 ids at every prompt position; a rank may differ only at a near-tie (both logits within the
    // tolerance of each other), and the reference's top-5 logits must match ours.
    const auto top5_ids = f32["top5_ids"];
    const auto top5_logits = f32["top5_logits"];
    ASSERT_EQ(r.prompt_logits.size(), top5_ids.size()) << label;
    for (size_t pos = 0; pos < top5_ids.size(); ++pos) {
      const std::vector<float>& L = r.prompt_logits[pos];
      std::vector<int32_t> ours(L.size());
      for (size_t i = 0; i < L.size(); ++i) ours[i] = int32_t(i);
      std::partial_sort(ours.begin(), ours.begin() + 5, ours.end(), [&](int32_t a, int32_t b) { return L[size_t(a)] > L[size_t(b)]; });
      for (int k = 0; k < 5; ++k) {
        const int32_t want = top5_ids[pos][size_t(k)].get<int32_t>();
        const double want_logit = top5_logits[pos][size_t(k)].get<double>();
        EXPECT_NEAR(L[size_t(want)], want_logit, kLogitTol) << label << " pos " << pos << " rank " << k;
        if (ours[size_t(k)] != want) {
          EXPECT_LE(std::abs(double(L[size_t(ours[size_t(k)])]) - want_logit), 2 * kLogitTol)
              << label << " pos " << pos << " rank " << k << ": got id " << ours[size_t(k)] << ", reference " << want
              << " and they are not a near-tie";
        }
      }
    }
    EXPECT_EQ(r.output, ids_of(f32["greedy"])) << label;
    std::printf("[ %s ] last-logit max |err| %.2e, prompt %zu + 32 greedy tokens in %.3f s\n", label.c_str(), err,
                r.prompt.size(), secs);
  }
  std::printf("[ %s ] max |logit error| over the 4 prompts: %.2e (tolerance %.0e)\n", name.c_str(), max_err, kLogitTol);
}

// The 4 prompts as one stream of batches: chunked prefill (chunk 16) of the long prompts runs in the same
// forward calls as the decode steps of the short ones. Tokens must equal the single runs (the reference).
TEST_P(ReferenceModel, MixedBatchMatchesSingleRuns) {
  const std::string name = GetParam();
  const json ref = load_reference(name);
  LoadedModel model = load_model(data_dir() + "/reference/" + name);
  for (int block_size : {16, 128}) {
    CpuModelRunner runner(model, {.num_blocks = 40, .block_size = block_size}, 2);
    BlockAllocator alloc(40);
    std::vector<Sequence> seqs;
    for (const auto& p : ref["prompts"]) {
      Sequence s;
      s.prompt = ids_of(p["input_ids"]);
      s.max_new_tokens = 32;
      seqs.push_back(std::move(s));
    }
    run_greedy(runner, alloc, seqs, 16);
    for (size_t i = 0; i < seqs.size(); ++i) {
      const auto& p = ref["prompts"][i];
      EXPECT_EQ(seqs[i].output, ids_of(p["float32"]["greedy"])) << name << " " << p["name"] << " block " << block_size;
      EXPECT_EQ(seqs[i].output, ids_of(ref["batched_float32"]["greedy"][i])) << name << " " << p["name"];
      const auto last = p["float32"]["last_logits"].get<std::vector<double>>();
      double err = 0;
      for (size_t j = 0; j < last.size(); ++j) err = std::max(err, std::abs(double(seqs[i].last_prompt_logits[j]) - last[j]));
      EXPECT_LE(err, kLogitTol) << name << " " << p["name"];
    }
    for (auto& s : seqs) s.blocks.release(alloc);
    EXPECT_EQ(alloc.num_free(), 40);
  }
}

// bf16 KV cache (weights are bf16 in the file; compute stays float32) against transformers' bfloat16 run.
// HF's bf16 run rounds every activation to bf16, so its logits differ from its own float32 ones by up to
// ~0.1 (README). Ours round only K and V to bf16 (relative 2^-9), a perturbation well below that. So:
// |ours - bf16 ref| <= max|f32 ref - bf16 ref| (measured per prompt from the file) + kBf16KvTol, where
// kBf16KvTol bounds our own deviation from the float32 reference: 2^-9 relative on K/V moves attention
// outputs by ~0.2% and logits (|l| <= 12) by ~0.03; 0.05 leaves room. Greedy tokens are compared with
// the bf16 reference only up to its first step whose top-1/top-2 margin is below 0.1, where bf16
// rounding can flip the argmax.
TEST_P(ReferenceModel, Bf16KvCacheAgainstBf16Reference) {
  constexpr double kBf16KvTol = 0.05;
  constexpr double kBf16Margin = 0.1;
  const std::string name = GetParam();
  const json ref = load_reference(name);
  LoadedModel model = load_model(data_dir() + "/reference/" + name);
  CpuModelRunner runner(model, {.num_blocks = 64, .block_size = 16, .dtype = DType::kBF16}, 2);
  BlockAllocator alloc(64);
  for (const auto& p : ref["prompts"]) {
    Sequence s;
    s.prompt = ids_of(p["input_ids"]);
    s.max_new_tokens = 32;
    std::vector<Sequence> seqs{std::move(s)};
    run_greedy(runner, alloc, seqs, 1 << 20);
    const auto f32 = p["float32"]["last_logits"].get<std::vector<double>>();
    const auto bf16 = p["bfloat16"]["last_logits"].get<std::vector<double>>();
    double spread = 0, err_f32 = 0, err_bf16 = 0;
    for (size_t i = 0; i < f32.size(); ++i) {
      spread = std::max(spread, std::abs(f32[i] - bf16[i]));
      err_f32 = std::max(err_f32, std::abs(double(seqs[0].last_prompt_logits[i]) - f32[i]));
      err_bf16 = std::max(err_bf16, std::abs(double(seqs[0].last_prompt_logits[i]) - bf16[i]));
    }
    EXPECT_LE(err_f32, kBf16KvTol) << name << " " << p["name"];
    EXPECT_LE(err_bf16, spread + kBf16KvTol) << name << " " << p["name"];
    const auto greedy = ids_of(p["bfloat16"]["greedy"]);
    const auto margins = p["bfloat16"]["greedy_top1_minus_top2"].get<std::vector<double>>();
    size_t n = 0;
    while (n < greedy.size() && margins[n] >= kBf16Margin) ++n;
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(seqs[0].output[i], greedy[i]) << name << " " << p["name"] << " step " << i;
    std::printf("[ %s/%s bf16 KV ] |err| vs f32 ref %.2e, vs bf16 ref %.2e (ref spread %.2e), %zu greedy steps compared\n",
                name.c_str(), p["name"].get<std::string>().c_str(), err_f32, err_bf16, spread, n);
    seqs[0].blocks.release(alloc);
  }
}

// Not a pass/fail check: prints prefill and decode throughput of qwen3-tiny on this CPU (2 threads).
TEST(Throughput, Qwen3TinyGreedy) {
  const json ref = load_reference("qwen3-tiny");
  LoadedModel model = load_model(data_dir() + "/reference/qwen3-tiny");
  CpuModelRunner runner(model, {.num_blocks = 8, .block_size = 128}, 2);
  BlockAllocator alloc(8);
  std::vector<Sequence> seqs(1);
  seqs[0].prompt = ids_of(ref["prompts"][3]["input_ids"]);  // 200 tokens
  seqs[0].max_new_tokens = 1;
  auto t0 = std::chrono::steady_clock::now();
  run_greedy(runner, alloc, seqs, 1 << 20);
  const double prefill = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  seqs[0].max_new_tokens = 257;
  t0 = std::chrono::steady_clock::now();
  run_greedy(runner, alloc, seqs, 1 << 20);
  const double decode = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(seqs[0].output.size(), 257u);
  std::printf("[ qwen3-tiny ] prefill 200 tokens: %.1f ms (%.0f tokens/s); greedy decode 256 tokens: %.0f tokens/s\n",
              prefill * 1e3, 200 / prefill, 256 / decode);
}

INSTANTIATE_TEST_SUITE_P(Models, ReferenceModel, ::testing::Values("qwen3-tiny", "llama-tiny", "qwen2-tiny"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n) if (ch == '-') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace pagoda::test
