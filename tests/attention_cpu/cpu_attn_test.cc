// CPU_ATTN against a float64 reference: the shapes that break kernels (sequence lengths 1, 7, 17, 97, 513;
// block sizes 16 and 128 and odd ones; head sizes 64, 128 and odd; GQA 1, 4, 8), batches mixing prefill,
// chunked prefill and decode, every cache dtype, sliding windows. Outputs and the unused cache are
// poisoned with NaN so an unwritten output or a read of an unwritten slot fails.
#include "pagoda/attention/cpu_attn/cpu_attn.h"

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <thread>

#include <gtest/gtest.h>

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
  DType dtype = DType::kF32;
  int window = 0;
  float k_scale = 1.0f, v_scale = 1.0f;
  bool causal = true;  // false: every query sees the whole context (encoders)
};

std::vector<float> random_nonzero(size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> mag(0.1f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = (rng() & 1) ? mag(rng) : -mag(rng);
  return v;
}

// What the cache holds for x, read back as float: the value after rounding to the cache dtype (and scale).
float quantized(float x, DType t, float scale) {
  uint8_t buf[4];
  const float s = dtype_is_fp8(t) ? scale : 1.0f;
  store_from_f32(buf, t, 0, x / s);
  return load_as_f32(buf, t, 0) * s;
}

std::string describe(const Case& c) {
  std::string s = str_cat("hd ", c.head_size, " bs ", c.block_size, " heads ", c.num_q_heads, "/", c.num_kv_heads, " ",
                          dtype_name(c.dtype), " window ", c.window, c.causal ? "" : " non-causal", " seqs");
  for (auto& q : c.seqs) s += str_cat(" (", q.ctx, ",", q.q_len, ")");
  return s;
}

void run_case(const Case& c, uint64_t seed) {
  SCOPED_TRACE(describe(c));
  std::mt19937_64 rng(seed);
  const int hd = c.head_size, bs = c.block_size, nkv = c.num_kv_heads, nq = c.num_q_heads;
  const int S = int(c.seqs.size());
  // Block tables: a random permutation of the cache's blocks, plus spare blocks nobody uses.
  int total_blocks = 0, max_blocks = 0;
  for (auto& s : c.seqs) {
    const int nb = (s.ctx + bs - 1) / bs;
    total_blocks += nb;
    max_blocks = std::max(max_blocks, nb + 1);
  }
  const int num_blocks = total_blocks + 3;
  std::vector<int32_t> perm(static_cast<size_t>(num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> tables(size_t(S * max_blocks), -1);
  for (int s = 0, next = 0; s < S; ++s)
    for (int b = 0; b < (c.seqs[size_t(s)].ctx + bs - 1) / bs; ++b) tables[size_t(s * max_blocks + b)] = perm[size_t(next++)];

  // Cache poisoned with NaN.
  const size_t cache_elems = size_t(num_blocks) * size_t(nkv) * size_t(bs) * size_t(2 * hd);
  std::vector<uint8_t> cache(cache_elems * dtype_size(c.dtype));
  for (size_t i = 0; i < cache_elems; ++i) store_from_f32(cache.data(), c.dtype, i, std::numeric_limits<float>::quiet_NaN());

  // K/V of every context position; the old ones are written first, the new ones in the step's own call.
  std::vector<std::vector<float>> K(static_cast<size_t>(S)), V(static_cast<size_t>(S));
  std::vector<int32_t> qsl = {0}, seq_lens;
  for (int s = 0; s < S; ++s) {
    const Seq& q = c.seqs[size_t(s)];
    K[size_t(s)] = random_nonzero(size_t(q.ctx * nkv * hd), rng);
    V[size_t(s)] = random_nonzero(size_t(q.ctx * nkv * hd), rng);
    qsl.push_back(qsl.back() + q.q_len);
    seq_lens.push_back(q.ctx);
  }
  auto write = [&](bool new_tokens) {
    std::vector<float> k, v;
    std::vector<int64_t> slots;
    for (int s = 0; s < S; ++s) {
      const Seq& q = c.seqs[size_t(s)];
      const int p0 = new_tokens ? q.ctx - q.q_len : 0, p1 = new_tokens ? q.ctx : q.ctx - q.q_len;
      for (int p = p0; p < p1; ++p) {
        k.insert(k.end(), K[size_t(s)].begin() + long(p) * nkv * hd, K[size_t(s)].begin() + long(p + 1) * nkv * hd);
        v.insert(v.end(), V[size_t(s)].begin() + long(p) * nkv * hd, V[size_t(s)].begin() + long(p + 1) * nkv * hd);
        slots.push_back(int64_t(tables[size_t(s * max_blocks + p / bs)]) * bs + p % bs);
      }
    }
    slots.push_back(-1);  // a padding token: skipped
    k.resize(k.size() + size_t(nkv * hd), 5.0f);
    v.resize(v.size() + size_t(nkv * hd), 5.0f);
    CpuAttnWriteKvParams w{.key = k.data(), .value = v.data(), .slot_mapping = slots.data(), .num_tokens = int64_t(slots.size()),
                           .kv_cache = cache.data(), .cache_dtype = c.dtype, .num_blocks = num_blocks, .num_kv_heads = nkv,
                           .head_size = hd, .block_size = bs, .k_scale = c.k_scale, .v_scale = c.v_scale};
    cpu_attn_write_kv(w);
  };
  write(false);
  write(true);

  // The cache holds exactly the quantized K/V at each slot, in the HND layout.
  for (int s = 0; s < S; ++s)
    for (int p = 0; p < c.seqs[size_t(s)].ctx; p += 5)
      for (int h = 0; h < nkv; ++h) {
        const int64_t blk = tables[size_t(s * max_blocks + p / bs)];
        const size_t base = size_t(((blk * nkv + h) * bs + p % bs) * 2 * hd);
        const float scale_k = dtype_is_fp8(c.dtype) ? c.k_scale : 1.0f, scale_v = dtype_is_fp8(c.dtype) ? c.v_scale : 1.0f;
        for (int d = 0; d < hd; d += 7) {
          const size_t src = size_t((p * nkv + h) * hd + d);
          ASSERT_EQ(load_as_f32(cache.data(), c.dtype, base + size_t(d)) * scale_k, quantized(K[size_t(s)][src], c.dtype, c.k_scale));
          ASSERT_EQ(load_as_f32(cache.data(), c.dtype, base + size_t(hd + d)) * scale_v, quantized(V[size_t(s)][src], c.dtype, c.v_scale));
        }
      }

  const int T = qsl.back();
  auto query = random_nonzero(size_t(T * nq * hd), rng);
  std::vector<float> out(size_t(T * nq * hd), std::numeric_limits<float>::quiet_NaN());
  CpuAttnParams p;
  p.query = query.data();
  p.out = out.data();
  p.kv_cache = cache.data();
  p.cache_dtype = c.dtype;
  p.num_blocks = num_blocks;
  p.k_scale = c.k_scale;
  p.v_scale = c.v_scale;
  p.query_start_loc = qsl.data();
  p.seq_lens = seq_lens.data();
  p.block_tables = tables.data();
  p.max_blocks_per_seq = max_blocks;
  p.num_seqs = S;
  p.num_q_heads = nq;
  p.num_kv_heads = nkv;
  p.head_size = hd;
  p.block_size = bs;
  p.sliding_window = c.window;
  p.causal = c.causal;
  // Two threads, as the model runner does.
  p.parallel_for = [](int64_t n, const std::function<void(int64_t, int64_t)>& body) {
    std::thread t([&] { body(0, n / 2); });
    body(n / 2, n);
    t.join();
  };
  cpu_attn_forward(p);

  // Float64 reference over the quantized K/V.
  std::vector<std::vector<double>> Kq(static_cast<size_t>(S)), Vq(static_cast<size_t>(S));
  for (int s = 0; s < S; ++s)
    for (size_t i = 0; i < K[size_t(s)].size(); ++i) {
      Kq[size_t(s)].push_back(quantized(K[size_t(s)][i], c.dtype, c.k_scale));
      Vq[size_t(s)].push_back(quantized(V[size_t(s)][i], c.dtype, c.v_scale));
    }
  const double scale = 1.0 / std::sqrt(double(hd));
  const int group = nq / nkv;
  double worst = 0;
  for (int s = 0; s < S; ++s) {
    const Seq& q = c.seqs[size_t(s)];
    for (int i = 0; i < q.q_len; ++i) {
      const int pos = q.ctx - q.q_len + i;
      const int lo = c.window > 0 ? std::max(0, pos - c.window + 1) : 0;
      const int hi = c.causal ? pos : q.ctx - 1;  // inclusive
      const int t = qsl[size_t(s)] + i;
      for (int h = 0; h < nq; ++h) {
        const int g = h / group;
        const float* qv = query.data() + size_t((t * nq + h) * hd);
        std::vector<double> sc;
        double m = -1e300, s_abs_max = 0, vmax = 0;
        for (int j = lo; j <= hi; ++j) {
          double dotv = 0, dabs = 0;
          for (int d = 0; d < hd; ++d) {
            const double kv = Kq[size_t(s)][size_t((j * nkv + g) * hd + d)];
            dotv += double(qv[d]) * kv;
            dabs += std::abs(double(qv[d]) * kv);
            vmax = std::max(vmax, std::abs(Vq[size_t(s)][size_t((j * nkv + g) * hd + d)]));
          }
          sc.push_back(dotv * scale);
          s_abs_max = std::max(s_abs_max, dabs * scale);
          m = std::max(m, dotv * scale);
        }
        double l = 0;
        for (double& x : sc) l += (x = std::exp(x - m));
        // Error budget (float32 kernel vs exact): each score s_j is a float32 dot of hd terms times the
        // scale, |ds| <= (hd + 2) u sum|q k| scale; a uniform bound ds on every score changes each softmax
        // weight by a relative 2 ds; exp and the online rescaling add a few u per term; the running
        // denominator and numerator are sums of L terms, relative L u each. The output is a convex
        // combination of values, so |err| <= max|v| (2 ds + (2 L + 16) u).
        const double L = double(sc.size());
        const double ds = (hd + 2) * kU * s_abs_max;
        const double tol = vmax * (2 * ds + (2 * L + 16) * kU);
        for (int d = 0; d < hd; ++d) {
          double ref = 0;
          for (int j = lo; j <= hi; ++j)
            ref += sc[size_t(j - lo)] * Vq[size_t(s)][size_t((j * nkv + g) * hd + d)];
          ref /= l;
          const float got = out[size_t((t * nq + h) * hd + d)];
          ASSERT_TRUE(std::isfinite(got)) << "seq " << s << " token " << i << " head " << h << " dim " << d;
          ASSERT_NEAR(got, ref, tol) << "seq " << s << " token " << i << " head " << h << " dim " << d;
          worst = std::max(worst, std::abs(got - ref) / tol);
        }
      }
    }
  }
  EXPECT_LT(worst, 1.0);
  std::printf("[ cpu_attn ] %s: worst |err| / tolerance = %.3f\n", describe(c).c_str(), worst);
}

// Mixed batch: a 1-token prefill, a 7-token prefill, a 17-context decode, a 97-context chunk, and a
// 513-context decode plus a 513-context chunk (and, for head size 64, a full 513-token prefill).
std::vector<Seq> mixed(bool full_513_prefill) {
  std::vector<Seq> s = {{1, 1}, {7, 7}, {17, 1}, {97, 30}, {513, 1}, {513, 40}};
  if (full_513_prefill) s.push_back({513, 513});
  return s;
}

TEST(CpuAttn, ShapesGrid) {
  uint64_t seed = 1;
  for (int hd : {64, 128})
    for (int bs : {16, 128})
      for (int gqa : {1, 4, 8}) run_case({hd, bs, 8, 8 / gqa, mixed(hd == 64)}, seed++);
}

TEST(CpuAttn, OddHeadAndBlockSizes) {
  run_case({36, 7, 6, 2, {{1, 1}, {20, 20}, {50, 3}}}, 100);
  run_case({8, 1, 4, 4, {{9, 9}, {3, 1}}}, 101);
  run_case({256, 48, 4, 1, {{97, 97}, {130, 1}}}, 102);
}

TEST(CpuAttn, CacheDtypes) {
  for (DType dt : {DType::kBF16, DType::kF16, DType::kF8E4M3, DType::kF8E5M2}) {
    Case c{128, 16, 8, 2, {{1, 1}, {17, 17}, {97, 1}, {200, 33}}, dt};
    if (dtype_is_fp8(dt)) c.k_scale = 0.25f, c.v_scale = 0.5f;
    run_case(c, 200 + uint64_t(dt));
  }
}

TEST(CpuAttn, SlidingWindow) {
  for (int window : {1, 8, 100}) run_case({64, 16, 8, 2, {{7, 7}, {97, 97}, {300, 1}, {300, 25}}, DType::kF32, window}, 300);
}

// Encoder attention: whole prompts, every query sees every key of its sequence (all-MiniLM-L6-v2's shape:
// head size 32, 12 heads, block 128), and with GQA, a small block and a window.
TEST(CpuAttn, NonCausal) {
  Case c{32, 128, 12, 12, {{1, 1}, {16, 16}, {130, 130}, {512, 512}}};
  c.causal = false;
  run_case(c, 400);
  Case g{64, 16, 8, 2, {{7, 7}, {97, 97}, {40, 13}}};
  g.causal = false;
  run_case(g, 401);
  g.window = 20;
  run_case(g, 402);
}

TEST(CpuAttn, RejectsBadMetadata) {
  std::vector<float> q(64, 0.5f), out(64), cache(2 * 16 * 128, 0.0f);
  std::vector<int32_t> qsl = {0, 2}, lens = {1}, table = {0};
  CpuAttnParams p;
  p.query = q.data();
  p.out = out.data();
  p.kv_cache = cache.data();
  p.num_blocks = 2;
  p.query_start_loc = qsl.data();
  p.seq_lens = lens.data();
  p.block_tables = table.data();
  p.max_blocks_per_seq = 1;
  p.num_seqs = 1;
  p.num_q_heads = 1;
  p.num_kv_heads = 1;
  p.head_size = 32;
  p.block_size = 16;
  EXPECT_THROW(cpu_attn_forward(p), Error);  // 2 query tokens, context 1
  lens = {2};
  table = {7};
  EXPECT_THROW(cpu_attn_forward(p), Error);  // block outside the cache
  lens = {40};
  table = {0};
  EXPECT_THROW(cpu_attn_forward(p), Error);  // table too short
  int64_t slot = 32;
  CpuAttnWriteKvParams w{.key = q.data(), .value = q.data(), .slot_mapping = &slot, .num_tokens = 1, .kv_cache = cache.data(),
                         .num_blocks = 2, .num_kv_heads = 1, .head_size = 32, .block_size = 16};
  EXPECT_THROW(cpu_attn_write_kv(w), Error);
}

}  // namespace
}  // namespace pagoda
