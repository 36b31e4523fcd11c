// FLASHINFER's CPU runner, made through the declaration (options.cpu, every build): it writes the step's
// keys and values into a cache of the layer's layout (NHD or HND) and dtype, plans (split KV, cascade over
// the step's block tables) and runs in float32; compared with dense float64 attention over what the cache
// holds. Cascade on equals cascade off; the model runner's reserve({}) grows; a cascade step without block
// tables is refused. The CUDA runner is made exactly in CUDA builds, and its wants_eager() is host code.
#include <gtest/gtest.h>

#include "flashinfer_test_util.h"
#include "pagoda/attention/backends.h"
#include "pagoda/core/error.h"

namespace pagoda {
namespace {

using fi_test::Layer;
using fi_test::Step;
using fi_test::StepSpec;

struct Harness {
  LayerShape shape;
  Step st;
  std::vector<uint8_t> cache;
  std::vector<float> q, k_new, v_new;
  std::vector<int64_t> slots_new;
  FiCacheView view;
  float k_scale = 1.0f, v_scale = 1.0f;

  Harness(const LayerShape& s, const StepSpec& spec, uint64_t seed) : shape(s) {
    std::mt19937_64 rng(seed);
    st = fi_test::make_step(spec, s.block_size, rng);
    if (dtype_is_fp8(s.kv_dtype)) k_scale = 0.02f, v_scale = 0.03f;
    view = {nullptr, s.kv_dtype, s.layout, st.num_blocks, s.num_kv_heads, s.head_size, s.block_size, k_scale, v_scale};
    cache.assign(size_t(st.num_blocks) * s.num_kv_heads * s.block_size * 2 * s.head_size * dtype_size(s.kv_dtype), 0xff);
    // The context before the step, written directly; the step's own keys go through the runner.
    std::vector<int64_t> slots_old;
    for (int sq = 0; sq < st.num_seqs(); ++sq)
      for (int p = 0; p < st.ctx[size_t(sq)]; ++p) {
        const int64_t slot = int64_t(st.tables[size_t(sq) * st.stride + p / s.block_size]) * s.block_size + p % s.block_size;
        (p < st.ctx[size_t(sq)] - st.q_lens[size_t(sq)] ? slots_old : slots_new).push_back(slot);
      }
    const size_t row = size_t(s.num_kv_heads) * s.head_size;
    auto k_old = fi_test::random_nonzero(slots_old.size() * row, rng), v_old = fi_test::random_nonzero(slots_old.size() * row, rng);
    FiCpuWriteKvParams w;
    w.key = k_old.data(), w.value = v_old.data(), w.slot_mapping = slots_old.data();
    w.num_tokens = int64_t(slots_old.size()), w.cache = cache.data(), w.view = view;
    fi_cpu_write_kv(w);
    k_new = fi_test::random_nonzero(slots_new.size() * row, rng);
    v_new = fi_test::random_nonzero(slots_new.size() * row, rng);
    q = fi_test::random_nonzero(size_t(st.tokens) * s.num_q_heads * s.head_size, rng);
  }

  std::vector<float> run(AttentionRunner& r, bool reserve_ahead, bool with_tables = true) {
    if (reserve_ahead) r.reserve({.max_tokens = st.tokens, .max_seqs = st.num_seqs(), .max_model_len = 5000});
    else r.reserve({});
    AttentionBatch b{std::vector<int>(st.q_lens.begin(), st.q_lens.end()), std::vector<int>(st.ctx.begin(), st.ctx.end())};
    if (with_tables) b.block_tables = st.tables.data(), b.block_table_stride = st.stride;
    r.plan(b, nullptr);
    std::vector<float> out(size_t(st.tokens) * shape.num_q_heads * shape.head_size, std::nanf(""));
    AttentionParams a;
    a.q = q.data();
    a.out = out.data();
    a.kv_cache = cache.data();
    a.num_blocks = st.num_blocks;
    a.k = k_new.data();
    a.v = v_new.data();
    a.slot_mapping = slots_new.data();
    a.query_start_loc = st.qsl.data();
    a.seq_lens = st.ctx.data();
    a.block_tables = st.tables.data();
    a.block_table_stride = st.stride;
    a.num_tokens = st.tokens;
    a.num_seqs = st.num_seqs();
    a.k_scale = k_scale;
    a.v_scale = v_scale;
    r.run(a, nullptr);
    return out;
  }

  std::vector<double> reference() const {
    Layer L{shape.num_q_heads, shape.num_kv_heads, shape.head_size, shape.block_size, shape.sliding_window, shape.causal,
            shape.layout};
    FiCacheView v = view;
    v.data = cache.data();
    return fi_test::dense_attention(L, st, std::vector<double>(q.begin(), q.end()), v);
  }
};

LayerShape shape_of(int hd, int bs, KvLayout layout, DType kv) {
  LayerShape s;
  s.num_q_heads = 8;
  s.num_kv_heads = 2;
  s.head_size = hd;
  s.dtype = DType::kF32;
  s.kv_dtype = kv;
  s.layout = layout;
  s.block_size = bs;
  return s;
}

TEST(FlashInferRunner, WritesAndAttendsInEveryLayoutAndDtype) {
  const auto fi = make_flashinfer_backend();
  StepSpec spec{{1, 1, 1, 9, 1, 40, 97}, {1300, 1200, 1500, 600, 4099, 513, 97}, {0, 0, 0, 0, -1, -1, -1}, {512}};
  uint64_t seed = 1;
  for (KvLayout layout : {KvLayout::kNHD, KvLayout::kHND})
    for (DType kv : {DType::kF32, DType::kBF16, DType::kF8E4M3, DType::kF8E5M2})
      for (bool cascade : {false, true}) {
        const LayerShape s = shape_of(64, layout == KvLayout::kNHD ? 16 : 8, layout, kv);
        SCOPED_TRACE(testing::Message() << s.str() << (cascade ? " cascade" : ""));
        RunnerOptions o;
        o.cpu = true;
        o.cascade = cascade;
        o.num_threads = 2;
        Harness h(s, spec, seed++);
        auto r = fi->make_runner(s, o);
        EXPECT_NE(r->describe().find("FLASHINFER"), std::string::npos);
        const auto got = h.run(*r, cascade);
        const auto want = h.reference();
        // float32 executor against float64 over the same cache values (fp8 values within 1.125 of 1: e5m2
        // rounds by up to 2^-3; the bound scales with |k| |v|, hence the factor 2).
        const double tol = 2 * fi_test::tolerance(s.head_size, 4099, fi_test::kU32);
        double worst = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_TRUE(std::isfinite(got[i])) << i;
          worst = std::max(worst, std::abs(double(got[i]) - want[i]));
        }
        EXPECT_LE(worst, tol);
        std::printf("[ flashinfer runner ] %s%s: max |runner - dense f64| = %.3g (tolerance %.3g)\n", s.str().c_str(),
                    cascade ? ", cascade" : "", worst, tol);
      }
}

// As the CPU model runner calls it: q, k and v rows of one fused [tokens, q + 2 kv] buffer (strided), the
// model's GQA 9/3 x 64, a prefill and then decode steps over the cache the earlier steps wrote.
TEST(FlashInferRunner, StridedQkvOverSteps) {
  LayerShape s = shape_of(64, 128, KvLayout::kNHD, DType::kF32);
  s.num_q_heads = 9;
  s.num_kv_heads = 3;
  RunnerOptions o;
  o.cpu = true;
  o.num_threads = 2;
  auto r = make_flashinfer_backend()->make_runner(s, o);
  r->reserve({});
  std::mt19937_64 rng(21);
  const int Q = 9 * 64, KV = 3 * 64, W = Q + 2 * KV;
  const int blocks = 4;
  std::vector<int32_t> table = {2, 0, 3, 1};
  Step st;  // one sequence, grown step by step
  st.stride = blocks;
  st.num_blocks = blocks;
  st.tables = table;
  std::vector<float> cache(size_t(blocks) * 128 * 3 * 128, std::nanf(""));
  int len = 0;
  for (int q_len : {35, 1, 1, 1, 200, 1}) {
    len += q_len;
    st.q_lens = {q_len};
    st.ctx = {len};
    st.qsl = {0, q_len};
    st.tokens = q_len;
    auto qkv = fi_test::random_nonzero(size_t(q_len) * W, rng);
    std::vector<int64_t> slots;
    for (int p = len - q_len; p < len; ++p) slots.push_back(int64_t(table[size_t(p / 128)]) * 128 + p % 128);
    AttentionBatch b{{q_len}, {len}, st.tables.data(), st.stride};
    r->plan(b, nullptr);
    std::vector<float> out(size_t(q_len) * Q, std::nanf(""));
    AttentionParams a;
    a.q = qkv.data(), a.q_stride = W, a.out = out.data(), a.kv_cache = cache.data(), a.num_blocks = blocks;
    a.k = qkv.data() + Q, a.v = qkv.data() + Q + KV, a.kv_stride = W, a.slot_mapping = slots.data();
    a.query_start_loc = st.qsl.data(), a.seq_lens = st.ctx.data(), a.block_tables = st.tables.data();
    a.block_table_stride = st.stride, a.num_tokens = q_len, a.num_seqs = 1;
    r->run(a, nullptr);
    std::vector<double> q;
    for (int t = 0; t < q_len; ++t) q.insert(q.end(), qkv.begin() + int64_t(t) * W, qkv.begin() + int64_t(t) * W + Q);
    Layer L{9, 3, 64, 128, 0, true, KvLayout::kNHD};
    const FiCacheView view{cache.data(), DType::kF32, KvLayout::kNHD, blocks, 3, 64, 128};
    const auto want = fi_test::dense_attention(L, st, q, view);
    double worst = 0;
    for (size_t i = 0; i < out.size(); ++i) worst = std::max(worst, std::abs(double(out[i]) - want[i]));
    EXPECT_LE(worst, fi_test::tolerance(64, len, fi_test::kU32)) << "step of " << q_len << " at " << len;
  }
}

TEST(FlashInferRunner, CascadeNeedsTheBlockTables) {
  const LayerShape s = shape_of(64, 16, KvLayout::kNHD, DType::kF32);
  RunnerOptions o;
  o.cpu = true;
  o.cascade = true;
  Harness h(s, {{1, 1}, {100, 100}, {0, 0}, {64}}, 3);
  auto r = make_flashinfer_backend()->make_runner(s, o);
  EXPECT_THROW(h.run(*r, true, false), Error);
  o.cascade = false;
  auto plain = make_flashinfer_backend()->make_runner(s, o);
  EXPECT_NO_THROW(h.run(*plain, true, false));
}

// Pages of any size (spec §3.3): the cache shape takes block size 1 and 8, in both orders.
TEST(FlashInferRunner, CacheShapeOfAnyPageSize) {
  const auto fi = make_flashinfer_backend();
  for (int bs : {1, 8, 16, 128}) {
    auto s = fi->kv_cache_shape(10, bs, 4, 64, "fp8", DType::kBF16, KvLayout::kNHD);
    EXPECT_EQ(s.logical, (std::vector<int64_t>{10, 4, bs, 128}));
    EXPECT_EQ(s.physical, (std::vector<int64_t>{10, bs, 4, 128}));
    EXPECT_EQ(s.element_bytes, 1);
    s = fi->kv_cache_shape(10, bs, 4, 64, "auto", DType::kF32, KvLayout::kHND);
    EXPECT_EQ(s.physical, (std::vector<int64_t>{10, 4, bs, 128}));
    EXPECT_EQ(s.element_bytes, 4);
  }
}

// The CUDA runner is built exactly in CUDA builds (PAGODA_BUILT_FLASHINFER, which pagoda_attention exports);
// elsewhere a GPU runner is the one `not built in this binary` error. The CPU runner refuses what it cannot
// compute in any build.
TEST(FlashInferRunner, CudaRunnerExactlyInCudaBuilds) {
#ifdef PAGODA_BUILT_FLASHINFER
  constexpr bool kBuilt = true;
#else
  constexpr bool kBuilt = false;
#endif
  const auto fi = make_flashinfer_backend();
  EXPECT_EQ(fi->kernels_built(), kBuilt);
  EXPECT_TRUE(fi->serves_cascade());
  RunnerOptions gpu;
  gpu.num_sms = 132;
  LayerShape bf16 = shape_of(128, 16, KvLayout::kNHD, DType::kBF16);
  bf16.dtype = DType::kBF16;
  if (kBuilt) {
    // Construction asks the device (none here: no FP8 queries) and allocates nothing; reserve() would.
    auto r = fi->make_runner(bf16, gpu);
    EXPECT_EQ(r->describe(), "FLASHINFER (plan/run)");
    EXPECT_THROW(fi->make_runner(shape_of(128, 16, KvLayout::kNHD, DType::kF32), gpu), Error);  // float32
  } else {
    try {
      fi->make_runner(bf16, gpu);
      ADD_FAILURE() << "a GPU runner without kernels";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("FLASHINFER is not built in this binary"), std::string::npos) << e.what();
    }
  }
  RunnerOptions cpu;
  cpu.cpu = true;
  EXPECT_THROW(fi->make_runner(bf16, cpu), Error);  // the CPU computes in float32
  LayerShape tq = shape_of(128, 16, KvLayout::kNHD, DType::kU8);
  tq.kv_preset = "turboquant_k8v4";
  EXPECT_THROW(fi->make_runner(tq, cpu), Error);
}

// The CUDA runner's wants_eager() (CUDA builds; host code, no device needed before reserve()): with cascade
// on, a step whose sequences share enough full prefix blocks must not replay a captured graph; a step
// without, or any step with cascade off, may.
TEST(FlashInferRunner, CudaRunnerWantsEagerForCascadeSteps) {
#ifndef PAGODA_BUILT_FLASHINFER
  GTEST_SKIP() << "no FLASHINFER CUDA runner in this build";
#endif
  const auto fi = make_flashinfer_backend();
  LayerShape shape = shape_of(128, 16, KvLayout::kNHD, DType::kBF16);
  shape.dtype = DType::kBF16;
  RunnerOptions on, off;
  on.num_sms = off.num_sms = 132;
  on.cascade = true;
  auto r_on = fi->make_runner(shape, on), r_off = fi->make_runner(shape, off);
  EXPECT_EQ(r_on->describe(), "FLASHINFER (plan/run, cascade)");
  std::mt19937_64 rng(10);
  // Three decode sequences over a shared 64-key prefix (4 blocks), and the same lengths with no sharing.
  const StepSpec shared{{1, 1, 1}, {100, 130, 70}, {0, 0, 0}, {64}};
  const StepSpec apart{{1, 1, 1}, {100, 130, 70}, {}, {}};
  for (bool sharing : {true, false}) {
    const Step st = fi_test::make_step(sharing ? shared : apart, shape.block_size, rng);
    AttentionBatch b;
    b.query_lens.assign(st.q_lens.begin(), st.q_lens.end());
    b.seq_lens.assign(st.ctx.begin(), st.ctx.end());
    b.block_tables = st.tables.data();
    b.block_table_stride = st.stride;
    EXPECT_EQ(r_on->wants_eager(b), sharing);
    EXPECT_FALSE(r_off->wants_eager(b));
    b.block_tables = nullptr;  // no tables: nothing to group
    EXPECT_FALSE(r_on->wants_eager(b));
  }
}

}  // namespace
}  // namespace pagoda
