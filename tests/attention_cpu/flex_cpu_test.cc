// FLEX_ATTENTION's CPU kernel against a dense float64 reference with the mask applied pair by pair and the
// score modifiers applied in double: the shapes that break kernels (sequence lengths 1, 7, 17, 97, 513;
// cache blocks 16 and 64; GQA 1, 4, 8; tiles 16 and 64), odd head sizes 8, 40, 80, 96, 160, every predicate
// and compositions, prefill, chunked prefill and decode in one batch. Outputs and the unused cache are
// poisoned with NaN, so an unwritten output or a read of a skipped slot fails.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "pagoda/attention/cpu_attn/cpu_attn.h"
#include "pagoda/attention/flex_attention/flex_cpu.h"
#include "pagoda/core/dtype.h"
#include "pagoda/core/error.h"

namespace pagoda {
namespace {

constexpr double kU = 0x1p-24;  // float32 unit roundoff

struct Seq {
  int ctx;    // tokens in the cache after the step
  int q_len;  // new tokens this step (the last q_len of ctx)
};

struct Case {
  int head_size, block_size, num_q_heads, num_kv_heads;
  std::vector<Seq> seqs;
  int block_m = 64, block_n = 64;
  DType dtype = DType::kF32;
};

std::vector<float> random_nonzero(size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> mag(0.1f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = (rng() & 1) ? mag(rng) : -mag(rng);
  return v;
}

float quantized(float x, DType t) {
  uint8_t buf[4];
  store_from_f32(buf, t, 0, x);
  return load_as_f32(buf, t, 0);
}

std::string describe(const Case& c, const FlexMask& m) {
  std::string s = str_cat("hd ", c.head_size, " bs ", c.block_size, " heads ", c.num_q_heads, "/", c.num_kv_heads, " tiles ",
                          c.block_m, "/", c.block_n, " ", dtype_name(c.dtype), " ", m.str(), " seqs");
  for (auto& q : c.seqs) s += str_cat(" (", q.ctx, ",", q.q_len, ")");
  return s;
}

// Runs the kernel on fresh random data and checks every output element against the float64 reference.
// Returns the output (for the invariance test). Sequence data depends only on seed and the sequence's own
// index-free draw order, so the same seed and sequence give the same data alone or in a batch.
std::vector<float> run_case(const Case& c, const FlexMask& mask, const FlexScoreMod* mod, uint64_t seed, bool check = true) {
  SCOPED_TRACE(describe(c, mask));
  const int hd = c.head_size, bs = c.block_size, nkv = c.num_kv_heads, nq = c.num_q_heads;
  const int S = int(c.seqs.size());
  std::mt19937_64 rng(seed);
  int total_blocks = 0, max_blocks = 0, max_ctx = 0;
  for (auto& s : c.seqs) {
    const int nb = (s.ctx + bs - 1) / bs;
    total_blocks += nb;
    max_blocks = std::max(max_blocks, nb + 1);
    max_ctx = std::max(max_ctx, s.ctx);
  }
  const int num_blocks = total_blocks + 3;
  std::vector<int32_t> perm(static_cast<size_t>(num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> tables(size_t(S * max_blocks), -1);
  for (int s = 0, next = 0; s < S; ++s)
    for (int b = 0; b < (c.seqs[size_t(s)].ctx + bs - 1) / bs; ++b) tables[size_t(s * max_blocks + b)] = perm[size_t(next++)];

  const size_t cache_elems = size_t(num_blocks) * size_t(nkv) * size_t(bs) * size_t(2 * hd);
  std::vector<uint8_t> cache(cache_elems * dtype_size(c.dtype));
  for (size_t i = 0; i < cache_elems; ++i) store_from_f32(cache.data(), c.dtype, i, std::numeric_limits<float>::quiet_NaN());

  // Per-sequence data from a per-sequence generator, so a sequence's data is the same in any batch.
  std::vector<std::vector<float>> K(static_cast<size_t>(S)), V(static_cast<size_t>(S)), Q(static_cast<size_t>(S));
  std::vector<int32_t> qsl = {0}, seq_lens, q_lens;
  for (int s = 0; s < S; ++s) {
    const Seq& q = c.seqs[size_t(s)];
    std::mt19937_64 srng(seed * 1000003 + uint64_t(q.ctx) * 131 + uint64_t(q.q_len));
    K[size_t(s)] = random_nonzero(size_t(q.ctx * nkv * hd), srng);
    V[size_t(s)] = random_nonzero(size_t(q.ctx * nkv * hd), srng);
    Q[size_t(s)] = random_nonzero(size_t(q.q_len * nq * hd), srng);
    qsl.push_back(qsl.back() + q.q_len);
    seq_lens.push_back(q.ctx);
    q_lens.push_back(q.q_len);
  }
  {
    std::vector<float> k, v;
    std::vector<int64_t> slots;
    for (int s = 0; s < S; ++s)
      for (int p = 0; p < c.seqs[size_t(s)].ctx; ++p) {
        k.insert(k.end(), K[size_t(s)].begin() + long(p) * nkv * hd, K[size_t(s)].begin() + long(p + 1) * nkv * hd);
        v.insert(v.end(), V[size_t(s)].begin() + long(p) * nkv * hd, V[size_t(s)].begin() + long(p + 1) * nkv * hd);
        slots.push_back(int64_t(tables[size_t(s * max_blocks + p / bs)]) * bs + p % bs);
      }
    CpuAttnWriteKvParams w{.key = k.data(), .value = v.data(), .slot_mapping = slots.data(), .num_tokens = int64_t(slots.size()),
                           .kv_cache = cache.data(), .cache_dtype = c.dtype, .num_blocks = num_blocks, .num_kv_heads = nkv,
                           .head_size = hd, .block_size = bs};
    cpu_attn_write_kv(w);
  }
  const int T = qsl.back();
  std::vector<float> query;
  for (auto& q : Q) query.insert(query.end(), q.begin(), q.end());
  std::vector<float> out(size_t(T * nq * hd), std::numeric_limits<float>::quiet_NaN());

  FlexBlockPlan plan;
  plan.reserve(T, S, max_ctx, c.block_m, c.block_n);
  plan.build(mask, q_lens.data(), seq_lens.data(), S);
  FlexCpuParams p;
  p.query = query.data();
  p.out = out.data();
  p.kv_cache = cache.data();
  p.cache_dtype = c.dtype;
  p.num_blocks = num_blocks;
  p.seq_lens = seq_lens.data();
  p.block_tables = tables.data();
  p.max_blocks_per_seq = max_blocks;
  p.num_seqs = S;
  p.num_q_heads = nq;
  p.num_kv_heads = nkv;
  p.head_size = hd;
  p.block_size = bs;
  p.mask = &mask;
  p.score_mod = mod;
  p.plan = &plan;
  p.parallel_for = [](int64_t n, const std::function<void(int64_t, int64_t)>& body) {  // two threads
    std::thread t([&] { body(0, n / 2); });
    body(n / 2, n);
    t.join();
  };
  flex_cpu_forward(p);
  if (!check) return out;

  const double scale = 1.0 / std::sqrt(double(hd));
  const int group = nq / nkv;
  double worst = 0;
  for (int s = 0; s < S; ++s) {
    const Seq& sq = c.seqs[size_t(s)];
    std::vector<double> Kq(K[size_t(s)].size()), Vq(V[size_t(s)].size());
    for (size_t i = 0; i < Kq.size(); ++i) Kq[i] = quantized(K[size_t(s)][i], c.dtype), Vq[i] = quantized(V[size_t(s)][i], c.dtype);
    for (int i = 0; i < sq.q_len; ++i) {
      const int pos = sq.ctx - sq.q_len + i;
      const int t = qsl[size_t(s)] + i;
      for (int h = 0; h < nq; ++h) {
        const int g = h / group;
        const float* qv = query.data() + size_t((t * nq + h) * hd);
        std::vector<int> keys;
        std::vector<double> sc;
        double m = -1e300, ds = 0, vmax = 0;
        for (int j = 0; j < sq.ctx; ++j) {
          if (!mask.allows(s, pos, j)) continue;
          double dotv = 0, dabs = 0;
          for (int d = 0; d < hd; ++d) {
            const double kv = Kq[size_t((j * nkv + g) * hd + d)];
            dotv += double(qv[d]) * kv;
            dabs += std::abs(double(qv[d]) * kv);
            vmax = std::max(vmax, std::abs(Vq[size_t((j * nkv + g) * hd + d)]));
          }
          double x = dotv * scale, extra = 0;
          if (mod && mod->softcap > 0) x = mod->softcap * std::tanh(x / mod->softcap), extra += mod->softcap;
          if (mod && !mod->alibi_slopes.empty()) {
            const double a = double(mod->alibi_slopes[size_t(h)]) * double(j - pos);
            x += a;
            extra += std::abs(a);
          }
          if (mod && !mod->rel_bias.empty()) {
            const int R = mod->rel_bias_max;
            const double b = mod->rel_bias[size_t(h * (2 * R + 1) + std::clamp(j - pos, -R, R) + R)];
            x += b;
            extra += std::abs(b);
          }
          // Error of the kernel's float32 score: the dot of hd terms, (hd + 2) u sum|q k| scale (tanh has a
          // slope <= 1, so soft-capping passes it on); each further float op (divide, tanh, multiply, two
          // adds) rounds at most a few u of the magnitudes involved: 8 u of their sum.
          ds = std::max(ds, (hd + 2) * kU * dabs * scale + 8 * kU * (std::abs(x) + extra));
          keys.push_back(j);
          sc.push_back(x);
          m = std::max(m, x);
        }
        double l = 0;
        for (double& x : sc) l += (x = std::exp(x - m));
        // A uniform score error ds moves each softmax weight by a relative 2 ds; exp and the online rescaling
        // add a few u per term; the running sums of L terms add L u each. The output is a convex combination
        // of values: |err| <= max|v| (2 ds + (2 L + 16) u). A row with no key is exactly 0.
        const double L = double(sc.size());
        const double tol = keys.empty() ? 0.0 : vmax * (2 * ds + (2 * L + 16) * kU);
        for (int d = 0; d < hd; ++d) {
          double ref = 0;
          for (size_t j = 0; j < keys.size(); ++j) ref += sc[j] * Vq[size_t((keys[j] * nkv + g) * hd + d)];
          if (!keys.empty()) ref /= l;
          const float got = out[size_t((t * nq + h) * hd + d)];
          if (!std::isfinite(got) || std::abs(got - ref) > tol) {
            ADD_FAILURE() << "seq " << s << " token " << i << " head " << h << " dim " << d << ": got " << got << " want " << ref
                          << " tol " << tol;
            return out;
          }
          if (tol > 0) worst = std::max(worst, std::abs(got - ref) / tol);
        }
      }
    }
  }
  std::printf("[ flex_cpu ] %s: worst |err| / tolerance = %.3f, blocks full %lld partial %lld skipped %lld\n",
              describe(c, mask).c_str(), worst, (long long)plan.num_full(), (long long)plan.num_partial(),
              (long long)plan.num_skipped());
  return out;
}

// A 1-token prefill, a 7-token prefill, a 17-context decode, a 97-context chunk, a 513-context decode and
// a 513-context chunk.
std::vector<Seq> mixed(bool full_513_prefill = false) {
  std::vector<Seq> s = {{1, 1}, {7, 7}, {17, 1}, {97, 30}, {513, 1}, {513, 40}};
  if (full_513_prefill) s.push_back({513, 513});
  return s;
}

// Spans and documents for the six sequences of mixed() (index = sequence).
FlexMask prefix_lm() {
  return FlexMask::causal() | FlexMask::spans({{{0, 1}}, {{0, 4}}, {{2, 12}}, {{0, 50}, {60, 90}}, {{100, 300}}, {{480, 500}}, {{0, 400}}});
}
FlexMask packed_docs() {
  return FlexMask::causal() & FlexMask::documents({{}, {3}, {5, 16}, {40, 80}, {1, 200, 512}, {490}, {128, 256, 384}});
}

std::vector<FlexMask> every_mask() {
  const FlexMask c = FlexMask::causal();
  return {c,
          FlexMask::full(),
          c & FlexMask::sliding_window(33),
          FlexMask::sliding_window(20),
          c & FlexMask::chunked_local(48),
          prefix_lm(),
          packed_docs(),
          FlexMask::documents({{}, {3}, {5, 16}, {40, 80}, {1, 200, 512}, {490}, {128, 256, 384}}),
          (c & FlexMask::sliding_window(16)) | FlexMask::spans({{}, {}, {}, {{0, 20}}, {{0, 64}}, {{0, 64}}, {{0, 64}}}),
          c & ~c};
}

TEST(FlexCpu, ShapesGridCausal) {
  uint64_t seed = 1;
  for (int hd : {64, 128})
    for (int bs : {16, 64})
      for (int gqa : {1, 4, 8}) run_case({hd, bs, 8, 8 / gqa, mixed(hd == 64 && bs == 16), 64, 64}, FlexMask::causal(), nullptr, seed++);
}

TEST(FlexCpu, EveryMask) {
  uint64_t seed = 100;
  for (const FlexMask& m : every_mask())
    for (auto [bm, bn] : {std::pair{16, 64}, std::pair{64, 16}}) run_case({64, 16, 8, 2, mixed(true), bm, bn}, m, nullptr, seed++);
}

TEST(FlexCpu, OddHeadSizes) {
  const auto masks = every_mask();
  uint64_t seed = 200;
  int i = 0;
  for (int hd : {8, 40, 80, 96, 160})
    for (int gqa : {1, 4, 8}) {
      run_case({hd, gqa == 4 ? 64 : 16, 8, 8 / gqa, mixed(), 16, 16}, masks[size_t(i % masks.size())], nullptr, seed++);
      ++i;
    }
}

TEST(FlexCpu, ScoreModifiers) {
  std::mt19937_64 rng(5);
  const int nq = 8;
  FlexScoreMod softcap{.softcap = 0.6f};  // below the scores' spread, so the cap bends them
  FlexScoreMod alibi;
  for (int h = 0; h < nq; ++h) alibi.alibi_slopes.push_back(std::pow(2.0f, -float(h + 1)));
  FlexScoreMod bias;
  bias.rel_bias_max = 40;
  bias.rel_bias = random_nonzero(size_t(nq * 81), rng);
  FlexScoreMod all = bias;
  all.softcap = 0.6f;
  all.alibi_slopes = alibi.alibi_slopes;
  uint64_t seed = 300;
  for (const FlexScoreMod* mod : {&softcap, &alibi, &bias, &all}) {
    run_case({64, 16, nq, 2, mixed(true), 64, 64}, FlexMask::causal(), mod, seed++);
    run_case({40, 16, nq, 8, mixed(), 16, 16}, FlexMask::full(), mod, seed++);
  }
}

TEST(FlexCpu, CacheDtypes) {
  uint64_t seed = 400;
  for (DType dt : {DType::kBF16, DType::kF16})
    run_case({96, 16, 8, 2, mixed(), 64, 16, dt}, FlexMask::causal() & FlexMask::sliding_window(50), nullptr, seed++);
}

// A sequence's output is bitwise the same alone and inside batches (fixed reduction order).
TEST(FlexCpu, BatchInvariant) {
  const FlexMask m = FlexMask::causal() & FlexMask::sliding_window(70);
  const Seq one{300, 60};
  const auto alone = run_case({64, 16, 8, 2, {one}, 64, 64}, m, nullptr, 9, false);
  for (const std::vector<Seq>& batch : {std::vector<Seq>{{7, 7}, one}, std::vector<Seq>{{97, 1}, {513, 40}, one, {17, 17}}}) {
    const auto out = run_case({64, 16, 8, 2, batch, 64, 64}, m, nullptr, 9, false);
    int row = 0;
    for (const Seq& s : batch) {
      if (s.ctx == one.ctx && s.q_len == one.q_len) break;
      row += s.q_len;
    }
    ASSERT_EQ(std::memcmp(out.data() + size_t(row) * 8 * 64, alone.data(), alone.size() * sizeof(float)), 0);
  }
}

TEST(FlexCpu, RejectsBadMetadata) {
  const FlexMask m = FlexMask::causal();
  std::vector<float> q(64, 0.5f), out(64), cache(2 * 16 * 64, 0.0f);
  std::vector<int32_t> ql = {1}, lens = {40}, table = {0};
  FlexBlockPlan plan;
  plan.reserve(1, 1, 64, 16, 16);
  plan.build(m, ql.data(), lens.data(), 1);
  FlexScoreMod alibi{.alibi_slopes = {1.0f, 2.0f}};
  FlexCpuParams p{.query = q.data(), .out = out.data(), .kv_cache = cache.data(), .num_blocks = 2, .seq_lens = lens.data(),
                  .block_tables = table.data(), .max_blocks_per_seq = 1, .num_seqs = 1, .num_q_heads = 1, .num_kv_heads = 1,
                  .head_size = 32, .block_size = 16, .mask = &m, .plan = &plan};
  EXPECT_THROW(flex_cpu_forward(p), Error);  // context 40 needs 3 blocks, the table holds 1
  lens = {10};
  table = {5};
  EXPECT_THROW(flex_cpu_forward(p), Error);  // block outside the cache
  table = {1};
  p.score_mod = &alibi;
  EXPECT_THROW(flex_cpu_forward(p), Error);  // 2 slopes for 1 head
}

}  // namespace
}  // namespace pagoda
