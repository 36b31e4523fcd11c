// FLEX_ATTENTION's CPU runner, made through the declaration (options.cpu, every build), against CPU_ATTN's
// runner on the same cache (both read CPU_ATTN's layout): causal, sliding window, non-causal, non-causal
// within a window, over a mixed batch with the runner writing the step's keys itself; soft-cap against the
// kernel called directly. Outputs poisoned with NaN.
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <utility>

#include <gtest/gtest.h>

#include "pagoda/attention/backends.h"
#include "pagoda/attention/cpu_attn/cpu_attn.h"
#include "pagoda/attention/flex_attention/flex_cpu.h"
#include "pagoda/core/error.h"
#include "pagoda/core/strings.h"

namespace pagoda {
namespace {

constexpr double kU = 0x1p-24;  // float32 unit roundoff

struct Step {
  std::vector<int> q_lens, ctx;
};

std::vector<float> random_nonzero(size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> mag(0.1f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = (rng() & 1) ? mag(rng) : -mag(rng);
  return v;
}

// One step over a fresh cache: the context before the step is written directly, the step's own keys and
// values by the runner (as the CPU model runner hands them over), then attention. Returns the output.
struct Harness {
  LayerShape shape;
  Step step;
  uint64_t seed;
  bool unlimited = false;
  std::vector<float> cache, q, k_old, v_old, k_new, v_new, out;
  std::vector<int64_t> slots_old, slots_new;
  std::vector<int32_t> qsl{0}, lens, tables;
  int max_blocks = 0, num_blocks = 0, T = 0;

  void build() {
    std::mt19937_64 rng(seed);
    const int bs = shape.block_size, nkv = shape.num_kv_heads, hd = shape.head_size, nq = shape.num_q_heads;
    for (int c : step.ctx) max_blocks = std::max(max_blocks, (c + bs - 1) / bs);
    const int S = int(step.ctx.size());
    num_blocks = S * max_blocks + 2;
    tables.resize(size_t(S * max_blocks));
    std::iota(tables.begin(), tables.end(), 1);
    std::shuffle(tables.begin(), tables.end(), rng);
    cache.assign(size_t(num_blocks) * nkv * bs * 2 * hd, std::numeric_limits<float>::quiet_NaN());
    // The queries are the last q_len positions of each sequence; their keys are the step's new ones.
    for (int s = 0; s < S; ++s) {
      const int ctx = step.ctx[size_t(s)], first_new = ctx - step.q_lens[size_t(s)];
      for (int p = 0; p < ctx; ++p)
        (p < first_new ? slots_old : slots_new).push_back(int64_t(tables[size_t(s * max_blocks + p / bs)]) * bs + p % bs);
      qsl.push_back(qsl.back() + step.q_lens[size_t(s)]);
      lens.push_back(ctx);
    }
    k_old = random_nonzero(slots_old.size() * nkv * hd, rng);
    v_old = random_nonzero(slots_old.size() * nkv * hd, rng);
    k_new = random_nonzero(slots_new.size() * nkv * hd, rng);
    v_new = random_nonzero(slots_new.size() * nkv * hd, rng);
    T = qsl.back();
    q = random_nonzero(size_t(T * nq * hd), rng);
  }

  std::vector<float> run(AttentionRunner& r) {
    std::fill(cache.begin(), cache.end(), std::numeric_limits<float>::quiet_NaN());
    const int S = int(step.ctx.size());
    int max_ctx = 0;
    for (int c : step.ctx) max_ctx = std::max(max_ctx, c);
    if (unlimited) r.reserve({});  // as the CPU model runner does: plan() grows to the step
    else r.reserve({.max_tokens = T, .max_seqs = S, .max_model_len = max_ctx});
    CpuAttnWriteKvParams w{.key = k_old.data(), .value = v_old.data(), .slot_mapping = slots_old.data(), .num_tokens = int64_t(slots_old.size()),
                           .kv_cache = cache.data(), .cache_dtype = shape.kv_dtype, .num_blocks = num_blocks,
                           .num_kv_heads = shape.num_kv_heads, .head_size = shape.head_size, .block_size = shape.block_size};
    cpu_attn_write_kv(w);
    r.plan({step.q_lens, step.ctx}, nullptr);
    out.assign(size_t(T) * shape.num_q_heads * shape.head_size, std::numeric_limits<float>::quiet_NaN());
    AttentionParams a;
    a.q = q.data();
    a.out = out.data();
    a.kv_cache = cache.data();
    a.num_blocks = num_blocks;
    a.k = k_new.data();
    a.v = v_new.data();
    a.slot_mapping = slots_new.data();
    a.query_start_loc = qsl.data();
    a.seq_lens = lens.data();
    a.block_tables = tables.data();
    a.block_table_stride = max_blocks;
    a.num_tokens = T;
    a.num_seqs = S;
    r.run(a, nullptr);
    return out;
  }
};

LayerShape shape_of(int hd, int bs, bool causal, int window) {
  LayerShape s;
  s.num_q_heads = 8;
  s.num_kv_heads = 2;
  s.head_size = hd;
  s.dtype = s.kv_dtype = DType::kF32;
  s.layout = KvLayout::kHND;
  s.block_size = bs;
  s.causal = causal;
  s.sliding_window = window;
  return s;
}

TEST(FlexRunner, MatchesCpuAttn) {
  const auto flex = make_flex_attention_backend();
  const auto cpu = make_cpu_attn_backend();
  RunnerOptions o;
  o.cpu = true;
  const Step step{{1, 7, 1, 30, 1, 40, 513}, {1, 7, 17, 97, 513, 513, 513}};
  uint64_t seed = 1;
  for (int hd : {40, 64})
    for (bool causal : {true, false})
      for (int window : {0, 33})
        for (bool invariant : {false, true}) {
          const LayerShape s = shape_of(hd, hd == 40 ? 64 : 16, causal, window);
          SCOPED_TRACE(s.str());
          o.batch_invariant = invariant;
          Harness h{s, step, seed++, invariant};  // half the cases reserve nothing ahead
          h.build();
          auto fr = flex->make_runner(s, o);
          auto cr = cpu->make_runner(s, o);
          EXPECT_NE(fr->describe().find("FLEX_ATTENTION"), std::string::npos);
          const auto got = h.run(*fr);
          const auto want = h.run(*cr);
          // Both are float32 online softmaxes within max|v| (2 ds + (2 L + 16) u) of the exact result
          // (cpu_attn_test's bound): |q|, |k|, |v| <= 1, so sum|q k| scale <= sqrt(hd) and ds <= (hd + 2) u
          // sqrt(hd); L <= 513 keys. Their difference is within twice that.
          const double tol = 2 * (2 * (hd + 2) * kU * std::sqrt(double(hd)) + (2 * 513 + 16) * kU);
          double worst = 0;
          for (size_t i = 0; i < got.size(); ++i) {
            ASSERT_TRUE(std::isfinite(got[i])) << i;
            ASSERT_NEAR(got[i], want[i], tol) << i;
            worst = std::max(worst, std::abs(double(got[i]) - want[i]));
          }
          std::printf("[ flex runner ] %s: max |flex - cpu_attn| = %.3g (tolerance %.3g)\n", s.str().c_str(), worst, tol);
        }
}

// flex_attn_block_m / _n reach the runner (spec §6.5): it plans with those tiles and still computes what
// CPU_ATTN computes; the defaults apply when they are unset.
TEST(FlexRunner, ConfiguredTileSizes) {
  const auto flex = make_flex_attention_backend();
  const auto cpu = make_cpu_attn_backend();
  const Step step{{1, 7, 30, 513}, {1, 17, 97, 513}};
  const LayerShape s = shape_of(64, 16, true, 0);
  RunnerOptions defaults;
  defaults.cpu = true;
  EXPECT_NE(flex->make_runner(s, defaults)->describe().find("tiles 64x64"), std::string::npos);
  defaults.batch_invariant = true;
  EXPECT_NE(flex->make_runner(s, defaults)->describe().find("tiles 16x16"), std::string::npos);
  uint64_t seed = 100;
  for (auto [m, n] : {std::pair{32, 16}, std::pair{128, 32}, std::pair{16, 128}}) {
    RunnerOptions o;
    o.cpu = true;
    o.flex_block_m = m;
    o.flex_block_n = n;
    auto fr = flex->make_runner(s, o);
    EXPECT_NE(fr->describe().find(str_cat("tiles ", m, "x", n)), std::string::npos) << fr->describe();
    Harness h{s, step, seed++, false};
    h.build();
    const auto got = h.run(*fr);
    const auto want = h.run(*cpu->make_runner(s, o));
    const double tol = 2 * (2 * (64 + 2) * kU * std::sqrt(64.0) + (2 * 513 + 16) * kU);  // MatchesCpuAttn's bound
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(std::isfinite(got[i])) << i;
      ASSERT_NEAR(got[i], want[i], tol) << i;
    }
  }
}

TEST(FlexRunner, SoftcapIsTheKernels) {
  LayerShape s = shape_of(64, 16, true, 0);
  s.softcap = 0.5f;
  RunnerOptions o;
  o.cpu = true;
  Harness h{s, {{17, 1, 9}, {17, 40, 9}}, 77};
  h.build();
  const auto got = h.run(*make_flex_attention_backend()->make_runner(s, o));
  // The kernel directly, on the cache the runner left.
  const FlexMask m = FlexMask::causal();
  const FlexScoreMod mod{.softcap = 0.5f};
  FlexBlockPlan plan;
  plan.reserve(h.T, 3, 40, 64, 64);
  const std::vector<int32_t> ql = {17, 1, 9}, cl = {17, 40, 9};
  plan.build(m, ql.data(), cl.data(), 3);
  std::vector<float> want(got.size(), std::numeric_limits<float>::quiet_NaN());
  FlexCpuParams p{.query = h.q.data(), .out = want.data(), .kv_cache = h.cache.data(), .num_blocks = h.num_blocks,
                  .seq_lens = h.lens.data(), .block_tables = h.tables.data(), .max_blocks_per_seq = h.max_blocks, .num_seqs = 3,
                  .num_q_heads = 8, .num_kv_heads = 2, .head_size = 64, .block_size = 16, .mask = &m, .score_mod = &mod,
                  .plan = &plan};
  flex_cpu_forward(p);
  ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
  // And the cap changes the result (the scores reach past 0.5).
  FlexScoreMod none;
  p.score_mod = &none;
  flex_cpu_forward(p);
  EXPECT_NE(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
}

TEST(FlexRunner, RefusesWhatTheKernelDoesNotTake) {
  RunnerOptions o;
  o.cpu = true;
  const auto flex = make_flex_attention_backend();
  LayerShape s = shape_of(64, 16, true, 0);
  EXPECT_NO_THROW(flex->make_runner(s, o));
  LayerShape bad = s;
  bad.dtype = DType::kBF16;
  EXPECT_THROW(flex->make_runner(bad, o), Error);
  bad = s;
  bad.kv_dtype = DType::kF8E4M3;
  EXPECT_THROW(flex->make_runner(bad, o), Error);
  LayerShape nhd = s;  // the selector leaves the layout alone on the CPU; the cache is CPU_ATTN's order anyway
  nhd.layout = KvLayout::kNHD;
  EXPECT_NO_THROW(flex->make_runner(nhd, o));
  o.cpu = false;
  if (flex->kernels_built()) {  // CUDA builds: the CUDA runner (its construction needs no device)
    EXPECT_NO_THROW(flex->make_runner(s, o));
    return;
  }
  try {  // CPU-only builds: the one `not built` error
    flex->make_runner(s, o);
    ADD_FAILURE() << "a CUDA runner without kernels";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not built in this binary"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pagoda
