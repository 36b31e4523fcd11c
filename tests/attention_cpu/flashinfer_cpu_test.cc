// FLASHINFER's plan-executing CPU reference in float64 against plain dense attention in float64, so that a
// plan's splits, merges and cascade groups are proven to compute attention: the house-style shapes (lengths
// 1, 7, 17, 97, 513, 4099; head sizes 64, 128, 256, 512; GQA 1, 4, 8), page sizes 1, 8, 16, 64, 128 in both
// layouts, mixed prefill and decode, window, non-causal, shared-prefix groups of 1 to 256 requests with
// cascade on equal to cascade off, and the captured-decode grid. Outputs poisoned with NaN.
#include <gtest/gtest.h>

#include "flashinfer_test_util.h"

namespace pagoda {
namespace {

using fi_test::Layer;
using fi_test::Step;
using fi_test::StepSpec;

struct Result {
  std::vector<double> out;
  int num_tasks = 0, num_merged = 0;
  size_t groups = 0;
};

// Plans the step and runs the float64 executor over a float32 cache; the dense reference reads the same cache.
Result run_plan(const Layer& L, const Step& st, const std::vector<float>& cache, const std::vector<double>& q, int target,
                bool cascade, int graph_splits = 0) {
  FiPlan plan;
  FiPlanLimits lim;
  lim.max_tokens = st.tokens;
  lim.max_seqs = st.num_seqs();
  lim.max_model_len = *std::max_element(st.ctx.begin(), st.ctx.end());
  lim.target_ctas = target;
  lim.cascade = cascade;
  lim.graph_splits = graph_splits;
  plan.reserve(L.plan_shape(), lim);
  if (graph_splits > 0) plan.build_graph_decode(st.num_seqs(), graph_splits);
  else plan.build(st.fi());
  Result r;
  r.out = fi_test::run_plan_reference(
      L, st, plan, q, {cache.data(), DType::kF32, L.layout, st.num_blocks, L.num_kv_heads, L.head_size, L.block_size});
  r.num_tasks = plan.num_tasks();
  r.num_merged = plan.num_merged();
  r.groups = plan.cascade().groups.size();
  return r;
}

double max_err(const std::vector<double>& a, const std::vector<double>& b) {
  double e = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return INFINITY;
    e = std::max(e, std::abs(a[i] - b[i]));
  }
  return e;
}

struct Checked {
  double err_off = 0, err_on = 0;
  Result off, on;
};

Checked check(const Layer& L, const StepSpec& spec, uint64_t seed, int target = 264) {
  std::mt19937_64 rng(seed);
  Step st = fi_test::make_step(spec, L.block_size, rng);
  std::vector<float> cache = fi_test::make_cache(L, st, rng);
  auto qf = fi_test::random_nonzero(size_t(st.tokens) * L.num_q_heads * L.head_size, rng);
  std::vector<double> q(qf.begin(), qf.end());
  const FiCacheView view{cache.data(), DType::kF32, L.layout, st.num_blocks, L.num_kv_heads, L.head_size, L.block_size};
  const std::vector<double> want = fi_test::dense_attention(L, st, q, view);
  Checked c;
  c.off = run_plan(L, st, cache, q, target, false);
  c.on = run_plan(L, st, cache, q, target, true);
  c.err_off = max_err(c.off.out, want);
  c.err_on = max_err(c.on.out, want);
  const double tol = fi_test::tolerance(L.head_size, *std::max_element(st.ctx.begin(), st.ctx.end()), fi_test::kU64);
  EXPECT_LE(c.err_off, tol);
  EXPECT_LE(c.err_on, tol);  // cascade on equals cascade off equals dense, within the float64 bound
  return c;
}

struct ShapeCase {
  int block_size, head_size, q_heads, kv_heads;
  KvLayout layout;
};

class FlashInferCpuShapes : public testing::TestWithParam<ShapeCase> {};

TEST_P(FlashInferCpuShapes, MixedBatchAgainstDense) {
  const ShapeCase& sc = GetParam();
  Layer L{sc.q_heads, sc.kv_heads, sc.head_size, sc.block_size, 0, true, sc.layout};
  // Decodes at every house length, prefill chunks and whole short prefills in one step.
  StepSpec spec{{1, 1, 1, 1, 1, 1, 7, 17, 97, 33, 1}, {1, 7, 17, 97, 513, 4099, 7, 17, 97, 4099, 2}, {}, {}};
  if (sc.head_size >= 256) spec = {{1, 1, 17, 7}, {97, 4099, 513, 7}, {}, {}};  // fewer flops at the big head sizes
  Checked c = check(L, spec, 100 + sc.block_size + sc.head_size);
  EXPECT_GT(c.off.num_merged, 0);  // the long contexts were split
}

INSTANTIATE_TEST_SUITE_P(Shapes, FlashInferCpuShapes,
                         testing::Values(ShapeCase{1, 64, 8, 8, KvLayout::kNHD}, ShapeCase{8, 64, 4, 1, KvLayout::kHND},
                                         ShapeCase{16, 128, 8, 1, KvLayout::kNHD}, ShapeCase{16, 128, 32, 8, KvLayout::kHND},
                                         ShapeCase{64, 128, 4, 4, KvLayout::kNHD}, ShapeCase{128, 64, 8, 2, KvLayout::kHND},
                                         ShapeCase{16, 256, 8, 2, KvLayout::kNHD}, ShapeCase{8, 512, 4, 1, KvLayout::kHND}),
                         [](const testing::TestParamInfo<ShapeCase>& i) {
                           return "b" + std::to_string(i.param.block_size) + "_h" + std::to_string(i.param.head_size) + "_q" +
                                  std::to_string(i.param.q_heads) + "kv" + std::to_string(i.param.kv_heads) + "_" +
                                  kv_layout_str(i.param.layout);
                         });

TEST(FlashInferCpu, SlidingWindowAndNonCausal) {
  for (int window : {0, 1, 100}) {
    for (bool causal : {true, false}) {
      if (window == 0 && causal) continue;
      Layer L{8, 2, 64, 16, window, causal, KvLayout::kNHD};
      SCOPED_TRACE(testing::Message() << "window " << window << " causal " << causal);
      check(L, {{1, 17, 97, 1}, {513, 513, 97, 4099}, {}, {}}, 7 + window);
    }
  }
}

TEST(FlashInferCpu, PrefillFromEmptyContext) {
  Layer L{4, 4, 64, 8, 0, true, KvLayout::kHND};
  check(L, {{513, 97, 1}, {513, 97, 1}, {}, {}}, 11, 16);
}

TEST(FlashInferCpu, SharedPrefixGroupsCascadeOnEqualsOff) {
  for (int bs : {1, 16, 64}) {
    for (int n : {1, 2, 5, 64, 256}) {
      Layer L{8, 2, 64, bs, 0, true, bs == 16 ? KvLayout::kHND : KvLayout::kNHD};
      StepSpec sp;
      sp.group_keys = {bs * ((1024 + bs - 1) / bs), bs * ((200 + bs - 1) / bs)};
      std::mt19937_64 rng(uint64_t(n * 131 + bs));
      for (int s = 0; s < n; ++s) {
        const int g = s % 5 == 4 ? 1 : 0;  // a second, smaller group beside the main one
        const int q = s % 7 == 3 ? 9 : 1;   // a few members in a prefill chunk
        sp.group.push_back(n == 1 ? 0 : g);
        sp.q_lens.push_back(q);
        sp.ctx.push_back(sp.group_keys[size_t(sp.group.back())] + q + int(rng() % 200));
      }
      sp.group.push_back(-1), sp.q_lens.push_back(1), sp.ctx.push_back(4099);  // an unrelated long decode
      SCOPED_TRACE(testing::Message() << "block " << bs << " members " << n);
      Checked c = check(L, sp, uint64_t(n + bs));
      if (n >= 2) EXPECT_GE(c.on.groups, 1u);
      else EXPECT_EQ(c.on.groups, 0u);
    }
  }
}

TEST(FlashInferCpu, CapturedDecodeGrid) {
  Layer L{16, 4, 128, 16, 0, true, KvLayout::kNHD};
  std::mt19937_64 rng(12);
  Step st = fi_test::make_step({{1, 1, 1, 1}, {1, 30, 700, 4099}, {}, {}}, L.block_size, rng);
  std::vector<float> cache = fi_test::make_cache(L, st, rng);
  auto qf = fi_test::random_nonzero(size_t(st.tokens) * L.num_q_heads * L.head_size, rng);
  std::vector<double> q(qf.begin(), qf.end());
  const FiCacheView view{cache.data(), DType::kF32, L.layout, st.num_blocks, L.num_kv_heads, L.head_size, L.block_size};
  const auto want = fi_test::dense_attention(L, st, q, view);
  for (int splits : {1, 4, 32}) {
    Result r = run_plan(L, st, cache, q, 64, false, splits);
    EXPECT_LE(max_err(r.out, want), fi_test::tolerance(L.head_size, 4099, fi_test::kU64)) << splits;
  }
}

TEST(FlashInferCpu, ReadsOfFp8AndHalfCaches) {
  // The executor dequantizes what the cache holds; the dense reference reads the same elements.
  Layer L{8, 2, 64, 16, 0, true, KvLayout::kHND};
  std::mt19937_64 rng(13);
  Step st = fi_test::make_step({{1, 17, 1}, {97, 513, 4099}, {}, {}}, L.block_size, rng);
  std::vector<float> f32 = fi_test::make_cache(L, st, rng);
  auto qf = fi_test::random_nonzero(size_t(st.tokens) * L.num_q_heads * L.head_size, rng);
  std::vector<double> q(qf.begin(), qf.end());
  for (DType dt : {DType::kBF16, DType::kF16, DType::kF8E4M3, DType::kF8E5M2}) {
    std::vector<uint8_t> cache(f32.size() * dtype_size(dt));
    const float ks = dtype_is_fp8(dt) ? 0.02f : 1.0f, vs = dtype_is_fp8(dt) ? 0.03f : 1.0f;
    for (size_t i = 0; i < f32.size(); ++i) {
      const bool is_v = (i / size_t(L.head_size)) % 2 == 1;
      const float x = std::isnan(f32[i]) ? 0.0f : f32[i];
      store_from_f32(cache.data(), dt, i, dtype_is_fp8(dt) ? x / (is_v ? vs : ks) : x);
    }
    FiCacheView view{cache.data(), dt, L.layout, st.num_blocks, L.num_kv_heads, L.head_size, L.block_size, ks, vs};
    const auto want = fi_test::dense_attention(L, st, q, view);
    FiPlan plan;
    plan.reserve(L.plan_shape(), {st.tokens, st.num_seqs(), 4099, 64, false, 0});
    plan.build(st.fi());
    const std::vector<double> out = fi_test::run_plan_reference(L, st, plan, q, view);
    // fp8 values are up to 448 / 57344 times the scale: |v| <= 1.2 here, so the float64 bound holds with margin.
    EXPECT_LE(max_err(out, want), 2 * fi_test::tolerance(L.head_size, 4099, fi_test::kU64)) << dtype_name(dt);
  }
}

}  // namespace
}  // namespace pagoda
