// TURBOQUANT CPU attention (its runner) over the packed cache against CPU_ATTN over the dequantized cache:
// the slots the runner wrote are decoded by the float64 model, keys un-rotated, into a float32 CPU_ATTN cache,
// and both outputs are compared with the float64 attention over the same decoded keys and values, each within
// a bound derived from its float32 arithmetic. The shapes that break kernels: sequence lengths 1, 7, 17, 97,
// 513 and 4099; GQA 1, 3, 4, 8; block sizes 16, 32, 64, 128; head sizes 64, 80, 96, 128; every preset; batches
// mixing prefill, chunked prefill and decode; split decode contexts. Outputs are poisoned with NaN and the
// cache with 0xFF bytes. A decode step's run() allocates nothing; bad shapes give config errors.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <new>
#include <numeric>
#include <random>

#include <gtest/gtest.h>

#include "pagoda/attention/cpu_attn/cpu_attn.h"
#include "pagoda/attention/turboquant/turboquant_cpu.h"
#include "pagoda/attention/turboquant/turboquant_cpu_runner.h"
#include "pagoda/core/error.h"
#include "pagoda/ops/thread_pool.h"

// Allocation counter for the graph-safety test: counts operator new while g_count is set.
namespace {
std::atomic<bool> g_count{false};
std::atomic<int64_t> g_allocs{0};
}  // namespace
void* operator new(size_t n) {
  if (g_count.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace pagoda {
namespace {

constexpr double kU = 0x1p-24;  // float32 unit roundoff

struct Seq {
  int ctx;    // tokens in the cache after the step
  int q_len;  // new tokens this step (the last q_len of ctx)
};

struct Case {
  std::string preset;
  int head_size, block_size, num_q_heads, num_kv_heads;
  std::vector<Seq> seqs;
  float scale = 0.0f;
  bool threads = true;
};

std::string describe(const Case& c) {
  std::string s = str_cat(c.preset, " hd ", c.head_size, " bs ", c.block_size, " heads ", c.num_q_heads, "/",
                          c.num_kv_heads, c.threads ? "" : " serial", " seqs");
  for (auto& q : c.seqs) s += str_cat(" (", q.ctx, ",", q.q_len, ")");
  return s;
}

ThreadPool& pool() {
  static ThreadPool p(2);
  return p;
}

RunnerOptions options(bool threads) {
  RunnerOptions o;
  o.cpu = true;
  if (threads) {
    o.num_threads = 2;
    o.parallel_for = [](int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body) {
      pool().parallel_for(n, grain, body);
    };
  }
  return o;
}

LayerShape layer_shape(const Case& c) {
  LayerShape s;
  s.num_q_heads = c.num_q_heads;
  s.num_kv_heads = c.num_kv_heads;
  s.head_size = c.head_size;
  s.dtype = DType::kF32;
  s.kv_dtype = DType::kU8;
  s.kv_preset = c.preset;
  s.layout = KvLayout::kHND;
  s.block_size = c.block_size;
  s.scale = c.scale;
  return s;
}

void run_case(const Case& c, uint64_t seed) {
  SCOPED_TRACE(describe(c));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> gauss;
  std::uniform_real_distribution<float> unif(-1.0f, 1.0f);
  const int hd = c.head_size, bs = c.block_size, nkv = c.num_kv_heads, nq = c.num_q_heads, group = nq / nkv;
  const int S = int(c.seqs.size()), layer = 3;
  const TurboQuantCpuShape sh = turboquant_cpu_shape(c.preset, hd, nq, nkv, bs, c.scale);
  const TurboQuantLayout& L = sh.layout;

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
  std::vector<uint8_t> cache(size_t(num_blocks) * nkv * bs * L.slot_bytes, 0xFF);

  // Keys Gaussian with a per-token scale, values uniform with a per-token offset, queries Gaussian.
  const int row = nkv * hd;
  std::vector<std::vector<float>> K(static_cast<size_t>(S)), V(static_cast<size_t>(S));
  std::vector<int32_t> qsl = {0}, seq_lens;
  std::vector<int> q_lens, ctxs;
  for (int s = 0; s < S; ++s) {
    const Seq& q = c.seqs[size_t(s)];
    for (int p = 0; p < q.ctx; ++p) {
      const float ks = std::exp(unif(rng)), off = 2 * unif(rng);
      for (int i = 0; i < row; ++i) {
        K[size_t(s)].push_back(ks * gauss(rng));
        V[size_t(s)].push_back(off + unif(rng));
      }
    }
    qsl.push_back(qsl.back() + q.q_len);
    seq_lens.push_back(q.ctx);
    q_lens.push_back(q.q_len);
    ctxs.push_back(q.ctx);
  }
  auto slot_of = [&](int s, int p) { return int64_t(tables[size_t(s * max_blocks + p / bs)]) * bs + p % bs; };
  auto gather = [&](bool new_tokens, std::vector<float>* k, std::vector<float>* v, std::vector<int64_t>* slots) {
    for (int s = 0; s < S; ++s) {
      const Seq& q = c.seqs[size_t(s)];
      for (int p = new_tokens ? q.ctx - q.q_len : 0; p < (new_tokens ? q.ctx : q.ctx - q.q_len); ++p) {
        k->insert(k->end(), K[size_t(s)].begin() + long(p) * row, K[size_t(s)].begin() + long(p + 1) * row);
        v->insert(v->end(), V[size_t(s)].begin() + long(p) * row, V[size_t(s)].begin() + long(p + 1) * row);
        slots->push_back(slot_of(s, p));
      }
    }
  };
  {  // The context written by earlier steps.
    std::vector<float> k, v;
    std::vector<int64_t> slots;
    gather(false, &k, &v, &slots);
    TurboQuantCpuWorkspace ws(sh, 1);
    TurboQuantCpuWriteKvParams w;
    w.key = k.data();
    w.value = v.data();
    w.slot_mapping = slots.data();
    w.num_tokens = int64_t(slots.size());
    w.kv_cache = cache.data();
    w.num_blocks = num_blocks;
    w.layer = layer;
    turboquant_cpu_write_kv(sh, w, ws);
  }
  // The step: the runner writes the new tokens (and skips a padding token) and attends.
  std::vector<float> k_new, v_new;
  std::vector<int64_t> slots_new;
  gather(true, &k_new, &v_new, &slots_new);
  slots_new.push_back(-1);
  k_new.resize(k_new.size() + size_t(row), 5.0f);
  v_new.resize(v_new.size() + size_t(row), 5.0f);
  const int T = qsl.back();
  std::vector<float> query(size_t(T + 1) * nq * hd);
  for (auto& x : query) x = gauss(rng);
  std::vector<float> out(query.size(), std::numeric_limits<float>::quiet_NaN());
  auto runner = make_turboquant_cpu_runner(layer_shape(c), options(c.threads));
  runner->reserve({});
  runner->plan({q_lens, ctxs}, nullptr);
  AttentionParams p;
  p.layer = layer;
  p.q = query.data();
  p.out = out.data();
  p.kv_cache = cache.data();
  p.num_blocks = num_blocks;
  p.k = k_new.data();
  p.v = v_new.data();
  p.slot_mapping = slots_new.data();
  p.query_start_loc = qsl.data();
  p.seq_lens = seq_lens.data();
  p.block_tables = tables.data();
  p.block_table_stride = max_blocks;
  p.num_tokens = T + 1;
  p.num_seqs = S;
  runner->run(p, nullptr);

  // Every slot of the sequences decoded by the float64 model: keys un-rotated, into a float32 CPU_ATTN cache
  // (NaN elsewhere) and into double arrays.
  std::vector<float> fcache(size_t(num_blocks) * nkv * bs * 2 * hd, std::numeric_limits<float>::quiet_NaN());
  std::vector<std::vector<double>> Kd(static_cast<size_t>(S)), Vd(static_cast<size_t>(S));
  std::vector<std::vector<double>> Wd(static_cast<size_t>(S));  // |zero| + |scale| (2^b - 1) per (pos, head)
  std::vector<double> kbuf(static_cast<size_t>(hd)), vbuf(static_cast<size_t>(hd));
  for (int s = 0; s < S; ++s)
    for (int pos = 0; pos < c.seqs[size_t(s)].ctx; ++pos)
      for (int h = 0; h < nkv; ++h) {
        const int64_t slot = slot_of(s, pos);
        const size_t at = size_t(((slot / bs) * nkv + h) * bs + slot % bs);
        const uint8_t* sb = cache.data() + at * size_t(L.slot_bytes);
        turboquant_decode_reference(L, sh.codebook, layer, sb, nullptr, kbuf.data(), vbuf.data());
        for (int i = 0; i < hd; ++i) {
          fcache[at * 2 * hd + size_t(i)] = float(kbuf[size_t(i)]);
          fcache[at * 2 * hd + size_t(hd + i)] = float(vbuf[size_t(i)]);
        }
        Kd[size_t(s)].insert(Kd[size_t(s)].end(), kbuf.begin(), kbuf.end());
        Vd[size_t(s)].insert(Vd[size_t(s)].end(), vbuf.begin(), vbuf.end());
        uint16_t sc, zr;
        std::memcpy(&sc, sb + L.value_scale_offset, 2);
        std::memcpy(&zr, sb + L.value_zero_offset, 2);
        Wd[size_t(s)].push_back(std::abs(f16_to_f32(zr)) + std::abs(f16_to_f32(sc)) * ((1 << L.value_bits) - 1));
      }
  std::vector<float> out_cpu(query.size(), std::numeric_limits<float>::quiet_NaN());
  CpuAttnParams a;
  a.query = query.data();
  a.out = out_cpu.data();
  a.kv_cache = fcache.data();
  a.num_blocks = num_blocks;
  a.query_start_loc = qsl.data();
  a.seq_lens = seq_lens.data();
  a.block_tables = tables.data();
  a.max_blocks_per_seq = max_blocks;
  a.num_seqs = S;
  a.num_q_heads = nq;
  a.num_kv_heads = nkv;
  a.head_size = hd;
  a.block_size = bs;
  a.scale = c.scale;
  cpu_attn_forward(a);

  // Error budgets against the float64 attention over the decoded cache, per query row; K = the largest decoded
  // key norm of the row's keys, |q| the query's norm, Lc its number of keys.
  //  TURBOQUANT: the rotated query errs by gamma_log2(n) |q_c|_1 scale / sqrt(n) + 2u |q~_i| per coordinate
  //  (turboquant_cpu_simd.h), which moves a score by at most log2(n) sqrt(n) u scale |q| K (|q_c|_1 |c_c|_1 <=
  //  n |q_c| |c_c|); the float dot of d terms, gamma_d; the key factor norm / ||c|| (a float sum of d squares,
  //  a square root, a division) (d/2 + 2) u and its product u: ds <= 1.01 u scale |q| K (log2(n) sqrt(n) +
  //  1.5 d + 8). A uniform score error ds moves each softmax weight by a relative 2 ds, the output by 2 ds max|v|.
  //  The numerator sums Lc terms p_j (scale_j code_j) and p_j zero_j, each term rounded ~4 times and rescaled at
  //  most once per block, the denominator Lc terms, a split's merge a few more: all within (3 Lc + 40) u
  //  relative to W = max_j (|zero_j| + |scale_j| (2^b - 1)), which bounds |acc| + |z| over l.
  //  CPU_ATTN (its own test's budget): ds <= (d + 2) u scale |q| K plus u scale |q| K for the keys' rounding to
  //  float32; the output (2 ds + (2 Lc + 16) u) max|v| plus u max|v| for the values' rounding.
  const double scale = c.scale != 0 ? c.scale : 1.0 / std::sqrt(double(hd));
  const int n_chunk = 1 << (std::bit_width(unsigned(hd)) - 1);
  const double log_n = std::bit_width(unsigned(n_chunk)) - 1;
  double worst = 0, worst_cpu = 0;
  for (int s = 0; s < S; ++s) {
    const Seq& q = c.seqs[size_t(s)];
    for (int i = 0; i < q.q_len; ++i) {
      const int pos = q.ctx - q.q_len + i, t = qsl[size_t(s)] + i;
      for (int h = 0; h < nq; ++h) {
        const int g = h / group;
        const float* qv = query.data() + size_t((t * nq + h) * hd);
        double qn = 0;
        for (int d = 0; d < hd; ++d) qn += double(qv[d]) * qv[d];
        qn = std::sqrt(qn);
        std::vector<double> sc;
        double m = -1e300, kmax = 0, vmax = 0, wmax = 0;
        for (int j = 0; j <= pos; ++j) {
          const double* kj = Kd[size_t(s)].data() + size_t((j * nkv + g) * hd);
          const double* vj = Vd[size_t(s)].data() + size_t((j * nkv + g) * hd);
          double dotv = 0, kn = 0;
          for (int d = 0; d < hd; ++d) {
            dotv += double(qv[d]) * kj[d];
            kn += kj[d] * kj[d];
            vmax = std::max(vmax, std::abs(vj[d]));
          }
          kmax = std::max(kmax, std::sqrt(kn));
          wmax = std::max(wmax, Wd[size_t(s)][size_t(j * nkv + g)]);
          sc.push_back(dotv * scale);
          m = std::max(m, dotv * scale);
        }
        double l = 0;
        for (double& x : sc) l += (x = std::exp(x - m));
        const double Lc = double(sc.size());
        const double ds_tq = 1.01 * kU * scale * qn * kmax * (log_n * std::sqrt(double(n_chunk)) + 1.5 * hd + 8);
        const double tol_tq = vmax * 2 * ds_tq + wmax * (3 * Lc + 40) * kU;
        const double ds_cpu = (hd + 3) * kU * scale * qn * kmax;
        const double tol_cpu = vmax * (2 * ds_cpu + (2 * Lc + 17) * kU);
        for (int d = 0; d < hd; ++d) {
          double ref = 0;
          for (int j = 0; j <= pos; ++j) ref += sc[size_t(j)] * Vd[size_t(s)][size_t((j * nkv + g) * hd + d)];
          ref /= l;
          const float got = out[size_t((t * nq + h) * hd + d)], cpu = out_cpu[size_t((t * nq + h) * hd + d)];
          ASSERT_TRUE(std::isfinite(got)) << "seq " << s << " token " << i << " head " << h << " dim " << d;
          ASSERT_NEAR(got, ref, tol_tq) << "seq " << s << " token " << i << " head " << h << " dim " << d;
          ASSERT_NEAR(cpu, ref, tol_cpu) << "seq " << s << " token " << i << " head " << h << " dim " << d;
          ASSERT_NEAR(got, cpu, tol_tq + tol_cpu) << "seq " << s << " token " << i << " head " << h << " dim " << d;
          worst = std::max(worst, std::abs(got - ref) / tol_tq);
          worst_cpu = std::max(worst_cpu, std::abs(got - cpu) / (tol_tq + tol_cpu));
        }
      }
    }
  }
  std::printf("[ turboquant ] %s: worst |err| / tolerance = %.3f (vs exact), %.3f (vs CPU_ATTN)\n", describe(c).c_str(),
              worst, worst_cpu);
}

// A 1-token prefill, a 7-token prefill, a 17-context decode, a 97-context chunk, a 513-context decode and a
// 513-context chunk (and, when asked, a whole 513-token prefill).
std::vector<Seq> mixed(bool full_513_prefill) {
  std::vector<Seq> s = {{1, 1}, {7, 7}, {17, 1}, {97, 30}, {513, 1}, {513, 40}};
  if (full_513_prefill) s.push_back({513, 513});
  return s;
}

// Each preset over head sizes 64/80/96/128, block sizes 16/32/64/128 and GQA 1/3/4/8, in a Latin arrangement
// (every head size meets every block size and group across the presets).
TEST(TurboQuantCpuAttn, ShapesGrid) {
  struct Shape { int hd, bs, nq, nkv; };
  const Shape shapes[] = {{64, 16, 8, 8}, {128, 32, 9, 3}, {80, 64, 8, 2}, {96, 128, 8, 1}};
  uint64_t seed = 1;
  for (int p = 0; p < 4; ++p)
    for (int k = 0; k < 4; ++k) {
      const Shape& s = shapes[size_t((k + p) % 4)];
      const int bs = shapes[size_t(k)].bs;  // rotate block sizes against head sizes
      run_case({std::string(kTurboQuantPresets[p].name), s.hd, bs, s.nq, s.nkv, mixed(p == k)}, seed++);
    }
}

// 4099-token contexts: decode alone (split across the threads), beside a chunk and a short prefill, and serial.
TEST(TurboQuantCpuAttn, LongContexts) {
  uint64_t seed = 100;
  for (const auto& preset : kTurboQuantPresets) {
    const std::string name(preset.name);
    run_case({name, 128, 16, 8, 2, {{4099, 1}}}, seed++);
    run_case({name, 64, 32, 9, 3, {{4099, 1}, {4099, 33}, {7, 7}}}, seed++);
  }
  run_case({"turboquant_k3v4_nc", 128, 16, 8, 2, {{4099, 1}, {513, 1}}, 0.0f, false}, seed++);
}

TEST(TurboQuantCpuAttn, ScaleAndOddHeadSize) {
  run_case({"turboquant_4bit_nc", 128, 16, 4, 1, {{97, 1}, {200, 17}}, 0.05f}, 200);
  run_case({"turboquant_3bit_nc", 36, 16, 6, 2, {{1, 1}, {50, 3}, {20, 20}}}, 201);  // chunks 32 + 4
  run_case({"turboquant_k8v4", 36, 16, 6, 2, {{1, 1}, {50, 3}, {20, 20}}}, 202);
}

// A decode step (and a prefill step) through the runner allocates nothing: its plan and workspace hold
// everything. Counted across both threads of the pool.
TEST(TurboQuantCpuAttn, RunAllocatesNothing) {
  g_allocs = 0;  // the counter counts
  g_count = true;
  int* volatile probe = new int(1);  // volatile: the allocation cannot be elided
  delete probe;
  g_count = false;
  ASSERT_EQ(g_allocs.load(), 1);
  for (const auto& batch : std::vector<std::vector<Seq>>{{{100, 1}, {700, 1}, {2000, 1}}, {{3000, 1}}, {{300, 300}}}) {
    Case c{"turboquant_k3v4_nc", 64, 16, 9, 3, batch};
    SCOPED_TRACE(describe(c));
    const int hd = 64, nkv = 3, nq = 9, bs = 16;
    int blocks = 0;
    std::vector<int32_t> qsl = {0}, lens, tables;
    std::vector<int> q_lens, ctxs;
    std::vector<int64_t> slots;
    for (const Seq& s : batch) {
      const int nb = (s.ctx + bs - 1) / bs;
      for (int p = s.ctx - s.q_len; p < s.ctx; ++p) slots.push_back(int64_t(blocks) * bs + p);
      for (int b = 0; b < nb; ++b) tables.push_back(blocks + b);
      blocks += nb;
      qsl.push_back(qsl.back() + s.q_len);
      lens.push_back(s.ctx);
      q_lens.push_back(s.q_len);
      ctxs.push_back(s.ctx);
    }
    // One table row per sequence: pad rows to the longest.
    const int stride = *std::max_element(ctxs.begin(), ctxs.end()) / bs + 1;
    std::vector<int32_t> padded;
    for (size_t s = 0, at = 0; s < batch.size(); ++s) {
      const int nb = (batch[s].ctx + bs - 1) / bs;
      for (int b = 0; b < stride; ++b) padded.push_back(b < nb ? tables[at + size_t(b)] : 0);
      at += size_t(nb);
    }
    const TurboQuantCpuShape sh = turboquant_cpu_shape(c.preset, hd, nq, nkv, bs, 0.0f);
    std::vector<uint8_t> cache(size_t(blocks) * nkv * bs * sh.layout.slot_bytes);
    std::mt19937_64 rng(9);
    for (auto& b : cache) b = uint8_t(rng());  // any bytes decode to finite values
    const int T = qsl.back();
    std::vector<float> q(size_t(T) * nq * hd, 0.25f), k(size_t(T) * nkv * hd, 0.5f), out(q.size(), NAN);
    auto runner = make_turboquant_cpu_runner(layer_shape(c), options(true));
    runner->reserve({});
    runner->plan({q_lens, ctxs}, nullptr);
    AttentionParams p;
    p.q = q.data();
    p.out = out.data();
    p.kv_cache = cache.data();
    p.num_blocks = blocks;
    p.k = k.data();
    p.v = k.data();
    p.slot_mapping = slots.data();
    p.query_start_loc = qsl.data();
    p.seq_lens = lens.data();
    p.block_tables = padded.data();
    p.block_table_stride = stride;
    p.num_tokens = T;
    p.num_seqs = int(batch.size());
    runner->run(p, nullptr);  // warm: the pool's threads and the codebook exist
    g_allocs = 0;
    g_count = true;
    runner->run(p, nullptr);
    g_count = false;
    EXPECT_EQ(g_allocs.load(), 0);
    for (float x : out) ASSERT_TRUE(std::isfinite(x));
  }
}

template <typename F>
void expect_config_error(F f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(TurboQuantCpuAttn, RejectsBadShapes) {
  const Case good{"turboquant_4bit_nc", 64, 16, 8, 2, {}};
  auto make = [&](auto edit) {
    return [=] {
      LayerShape s = layer_shape(good);
      edit(s);
      make_turboquant_cpu_runner(s, options(true));
    };
  };
  EXPECT_NO_THROW(make([](LayerShape&) {})());
  expect_config_error(make([](LayerShape& s) { s.dtype = DType::kBF16; }), "float32");
  expect_config_error(make([](LayerShape& s) { s.kv_preset = ""; s.kv_dtype = DType::kBF16; }), "turboquant_*");
  expect_config_error(make([](LayerShape& s) { s.kv_preset = "turboquant_k2v2"; }), "turboquant_k2v2");
  expect_config_error(make([](LayerShape& s) { s.kv_dtype = DType::kBF16; }), "uint8");
  expect_config_error(make([](LayerShape& s) { s.num_q_heads = 7; }), "bad layer shape");
  expect_config_error(make([](LayerShape& s) { s.causal = false; }), "causal");
  expect_config_error(make([](LayerShape& s) { s.sliding_window = 128; }), "sliding window");
  expect_config_error(make([](LayerShape& s) { s.softcap = 30; }), "soft-capping");
}

TEST(TurboQuantCpuAttn, RejectsBadMetadata) {
  const Case c{"turboquant_4bit_nc", 32, 16, 1, 1, {}};
  auto runner = make_turboquant_cpu_runner(layer_shape(c), options(false));
  runner->plan({{1}, {1}}, nullptr);
  std::vector<float> q(32, 0.5f), out(32);
  std::vector<uint8_t> cache(size_t(2 * 16) * turboquant_layout(4, 4, true, 32).slot_bytes);
  std::vector<int32_t> qsl = {0, 1}, lens = {2}, table = {0};
  AttentionParams p;
  p.q = q.data();
  p.out = out.data();
  p.kv_cache = cache.data();
  p.num_blocks = 2;
  p.query_start_loc = qsl.data();
  p.seq_lens = lens.data();
  p.block_tables = table.data();
  p.block_table_stride = 1;
  p.num_tokens = 1;
  p.num_seqs = 1;
  EXPECT_THROW(runner->run(p, nullptr), Error);  // context 2, planned 1
  lens = {1};
  table = {7};
  EXPECT_THROW(runner->run(p, nullptr), Error);  // block outside the cache
  runner->plan({{1}, {40}}, nullptr);
  lens = {40};
  table = {0};
  EXPECT_THROW(runner->run(p, nullptr), Error);  // table too short
}

}  // namespace
}  // namespace pagoda
