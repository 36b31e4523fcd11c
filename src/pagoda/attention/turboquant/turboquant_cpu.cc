// TURBOQUANT CPU attention over the packed cache (turboquant_cpu.h), its plan and its workspace.
#include "pagoda/attention/turboquant/turboquant_cpu.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>

#include "pagoda/attention/turboquant/turboquant_cpu_scratch.h"
#include "pagoda/attention/turboquant/turboquant_cpu_simd.h"
#include "pagoda/core/dtype.h"
#include "pagoda/core/error.h"

namespace pagoda {
namespace {

using namespace tq_cpu;

// Query tokens of one sequence handled together, so each block is decoded once for all of them.
constexpr int kQueryTile = 16;
// A split of a decode context covers at least this many keys: the split's fixed costs (rotating the query,
// writing and merging a partial) stay a few percent of its work.
constexpr int kMinSplitKeys = 256;
// Splitting aims at this many items per thread (counter hand-out balances them) ...
constexpr int kItemsPerThread = 8;
// ... and happens only below half of it; so the partials stay under (kItemsPerThread + kItemsPerThread / 2)
// per thread: base items b < 4 t, each split into ceil(8 t / b) pieces, is < 8 t + b < 12 t partials.
constexpr int kMaxPartialsPerThread = kItemsPerThread + kItemsPerThread / 2;

int group_of(const TurboQuantCpuShape& sh) { return sh.num_q_heads / sh.num_kv_heads; }

TQ_INLINE float dot(const float* a, const float* b, int n) {
  v8f acc = {};
  const int n8 = n & ~7;
  for (int i = 0; i < n8; i += 8) acc += load8(a + i) * load8(b + i);
  float s = hsum(acc);
  for (int i = n8; i < n; ++i) s += a[i] * b[i];
  return s;
}

// acc = acc * corr (corr != 1) then acc += w * x, over n floats.
TQ_INLINE void axpy(float* acc, float w, const float* x, int n) {
  const int n8 = n & ~7;
  for (int i = 0; i < n8; i += 8) store8(acc + i, load8(acc + i) + w * load8(x + i));
  for (int i = n8; i < n; ++i) acc[i] += w * x[i];
}
TQ_INLINE void scale_row(float* acc, float c, int n) {
  const int n8 = n & ~7;
  for (int i = 0; i < n8; i += 8) store8(acc + i, load8(acc + i) * c);
  for (int i = n8; i < n; ++i) acc[i] *= c;
}

// Keys and values of rows [o0, o1) of one (block, KV head) into the thread's tiles: centroids (or FP8 keys)
// and the key factor norm / ||c|| (or norm / sqrt(d), or 1 for FP8), value codes as floats, scale and zero.
template <int KB, int VB>
TQ_INLINE void decode_block(const TurboQuantCpuShape& sh, const uint8_t* slot0, int rows, TurboQuantCpuThreadScratch& th) {
  const TurboQuantLayout& L = sh.layout;
  const int d = L.head_size, d8 = d & ~7;
  v8f lo = {}, hi = {};
  if constexpr (KB != 8) {
    lo = load8(sh.centroid_lut);
    hi = load8(sh.centroid_lut + 8);
  }
  const float inv_sqrt_d = float(1 / std::sqrt(double(d)));
  for (int j = 0; j < rows; ++j) {
    const uint8_t* slot = slot0 + int64_t(j) * L.slot_bytes;
    float* kr = th.k.data() + size_t(j) * size_t(d);
    if constexpr (KB == 8) {
      for (int i = 0; i < d8; i += 8) store8(kr + i, e4m3x8(slot + i));
      for (int i = d8; i < d; ++i) kr[i] = f8e4m3_to_f32(slot[i]);
      th.kf[size_t(j)] = 1.0f;
    } else {
      v8f ss = {};
      for (int i = 0; i < d8; i += 8) {
        const v8f c = centroids8<KB>(codes8<KB>(slot, i), lo, hi);
        store8(kr + i, c);
        ss += c * c;
      }
      float sq = hsum(ss);
      for (int i = d8; i < d; ++i) {
        kr[i] = sh.centroid_lut[code_at<KB>(slot, i)];
        sq += kr[i] * kr[i];
      }
      const float norm = f16_field(slot + L.key_norm_offset);
      th.kf[size_t(j)] = L.norm_correction ? norm / std::sqrt(sq) : norm * inv_sqrt_d;
    }
    const uint8_t* vc = slot + L.value_offset;
    float* vr = th.v.data() + size_t(j) * size_t(d);
    for (int i = 0; i < d8; i += 8) store8(vr + i, __builtin_convertvector(codes8<VB>(vc, i), v8f));
    for (int i = d8; i < d; ++i) vr[i] = float(code_at<VB>(vc, i));
    th.vs[size_t(j)] = f16_field(slot + L.value_scale_offset);
    th.vz[size_t(j)] = f16_field(slot + L.value_zero_offset);
  }
}

template <int KB, int VB>
TQ_CPU_MULTIVERSION void run_item(const TurboQuantCpuShape& sh, const TurboQuantCpuParams& p, const uint32_t* signs,
                                  const TurboQuantCpuItem& w, TurboQuantCpuThreadScratch& th, float* partial) {
  const TurboQuantLayout& L = sh.layout;
  const int d = L.head_size, bs = sh.block_size, nkv = sh.num_kv_heads, group = group_of(sh);
  const int32_t q0 = p.query_start_loc[w.seq];
  const int32_t q_len = p.query_start_loc[w.seq + 1] - q0;
  const int32_t first_pos = p.seq_lens[w.seq] - q_len;
  const int ntok = w.t_end - w.t_begin;
  const int rows = ntok * group;
  const int64_t q_stride = p.query_stride ? p.query_stride : int64_t(sh.num_q_heads) * d;
  const float scale = sh.scale != 0.0f ? sh.scale : float(1 / std::sqrt(double(d)));

  for (int ti = 0; ti < ntok; ++ti)
    for (int g = 0; g < group; ++g) {
      const float* q = p.query + int64_t(w.t_begin + ti) * q_stride + int64_t(w.kv_head * group + g) * d;
      rotate(q, signs, d, scale, th.q.data() + size_t(ti * group + g) * size_t(d));
    }
  std::fill(th.m.begin(), th.m.begin() + rows, -std::numeric_limits<float>::infinity());
  std::fill(th.l.begin(), th.l.begin() + rows, 0.0f);
  std::fill(th.z.begin(), th.z.begin() + rows, 0.0f);
  std::fill(th.acc.begin(), th.acc.begin() + size_t(rows) * size_t(d), 0.0f);

  auto pos_of = [&](int32_t t) { return first_pos + (t - q0); };
  const int32_t k_lo = w.k_begin;
  const int32_t k_hi = std::min(w.k_end - 1, pos_of(w.t_end - 1));  // inclusive
  const auto* cache = static_cast<const uint8_t*>(p.kv_cache);
  for (int32_t b = k_lo / bs; b <= k_hi / bs; ++b) {
    const int64_t block = p.block_tables[int64_t(w.seq) * p.max_blocks_per_seq + b];
    const int32_t base = b * bs;
    const int o0 = std::max(k_lo, base) - base;
    const int o1 = std::min(k_hi + 1, base + bs) - base;
    decode_block<KB, VB>(sh, cache + ((block * nkv + w.kv_head) * bs + o0) * L.slot_bytes, o1 - o0, th);
    for (int ti = 0; ti < ntok; ++ti) {
      const int n = std::min(pos_of(w.t_begin + ti) + 1, base + o1) - base - o0;  // keys [o0, o0 + n)
      if (n <= 0) continue;
      for (int g = 0; g < group; ++g) {
        const int r = ti * group + g;
        const float* q = th.q.data() + size_t(r) * size_t(d);
        float bmax = -std::numeric_limits<float>::infinity();
        for (int j = 0; j < n; ++j) {
          const float s = dot(q, th.k.data() + size_t(j) * size_t(d), d) * th.kf[size_t(j)];
          th.scores[size_t(j)] = s;
          bmax = std::max(bmax, s);
        }
        const float m_new = std::max(th.m[size_t(r)], bmax);
        const float corr = std::exp(th.m[size_t(r)] - m_new);
        float* acc = th.acc.data() + size_t(r) * size_t(d);
        float l = th.l[size_t(r)] * corr, z = th.z[size_t(r)] * corr;
        if (corr != 1.0f) scale_row(acc, corr, d);
        for (int j = 0; j < n; ++j) {
          const float pj = std::exp(th.scores[size_t(j)] - m_new);
          l += pj;
          z += pj * th.vz[size_t(j)];
          axpy(acc, pj * th.vs[size_t(j)], th.v.data() + size_t(j) * size_t(d), d);
        }
        th.l[size_t(r)] = l;
        th.z[size_t(r)] = z;
        th.m[size_t(r)] = m_new;
      }
    }
  }
  if (partial) {  // one token: [m, l, z] x group, then acc [group, d]
    std::copy(th.m.begin(), th.m.begin() + group, partial);
    std::copy(th.l.begin(), th.l.begin() + group, partial + group);
    std::copy(th.z.begin(), th.z.begin() + group, partial + 2 * group);
    std::copy(th.acc.begin(), th.acc.begin() + size_t(group) * size_t(d), partial + 3 * group);
    return;
  }
  for (int r = 0; r < rows; ++r) {
    const int ti = r / group, g = r % group;
    float* o = p.out + (int64_t(w.t_begin + ti) * sh.num_q_heads + w.kv_head * group + g) * d;
    const float inv = 1.0f / th.l[size_t(r)];  // l >= 1: every query sees at least its own key
    const float z = th.z[size_t(r)];
    const float* acc = th.acc.data() + size_t(r) * size_t(d);
    for (int i = 0; i < d; ++i) o[i] = (acc[i] + z) * inv;
  }
}

using ItemFn = void (*)(const TurboQuantCpuShape&, const TurboQuantCpuParams&, const uint32_t*, const TurboQuantCpuItem&,
                        TurboQuantCpuThreadScratch&, float*);

ItemFn item_fn(const TurboQuantLayout& L) {
  if (L.key_bits == 8 && L.value_bits == 4) return run_item<8, 4>;
  if (L.key_bits == 4 && L.value_bits == 4) return run_item<4, 4>;
  if (L.key_bits == 3 && L.value_bits == 4) return run_item<3, 4>;
  if (L.key_bits == 3 && L.value_bits == 3) return run_item<3, 3>;
  PAGODA_CHECK(false, "turboquant: no CPU attention for ", L.key_bits, "-bit keys and ", L.value_bits, "-bit values");
  return nullptr;
}

// The rows of one split token from its partials: the log-sum-exp combination of (m, l, z, acc).
void merge(const TurboQuantCpuShape& sh, const TurboQuantCpuMerge& mg, const TurboQuantCpuWorkspace& ws, float* out) {
  const int d = sh.layout.head_size, group = group_of(sh);
  for (int g = 0; g < group; ++g) {
    float m = -std::numeric_limits<float>::infinity();
    for (int i = 0; i < mg.count; ++i) m = std::max(m, ws.partial(mg.first + i)[g]);
    float* o = out + (int64_t(mg.token) * sh.num_q_heads + mg.kv_head * group + g) * d;
    std::fill(o, o + d, 0.0f);
    float l = 0, z = 0;
    for (int i = 0; i < mg.count; ++i) {
      const float* pt = ws.partial(mg.first + i);
      if (pt[group + g] == 0) continue;  // an empty key range
      const float c = std::exp(pt[g] - m);
      l += pt[group + g] * c;
      z += pt[2 * group + g] * c;
      const float* acc = pt + 3 * group + size_t(g) * size_t(d);
      for (int k = 0; k < d; ++k) o[k] += acc[k] * c;
    }
    const float inv = 1.0f / l;
    for (int k = 0; k < d; ++k) o[k] = (o[k] + z) * inv;
  }
}

}  // namespace

void turboquant_cpu_fill_signs(int layer, int head_size, uint32_t* masks) {
  for (int i = 0; i < head_size; ++i) masks[i] = turboquant_sign_negative(layer, i) ? 0x80000000u : 0u;
}

TurboQuantCpuShape turboquant_cpu_shape(const std::string& preset, int head_size, int num_q_heads, int num_kv_heads,
                                        int block_size, float scale) {
  const auto p = turboquant_preset(preset);
  if (!p) throw_config_error("not a TurboQuant KV cache dtype: '", preset, "'");
  TurboQuantCpuShape s;
  s.layout = turboquant_layout(*p, head_size);
  s.num_q_heads = num_q_heads;
  s.num_kv_heads = num_kv_heads;
  s.block_size = block_size;
  s.scale = scale;
  if (p->key_bits != 8) {
    s.codebook = turboquant_codebook(p->key_bits, head_size);
    s.boundaries = turboquant_boundaries(s.codebook);
    std::copy(s.codebook.begin(), s.codebook.end(), s.centroid_lut);
  }
  return s;
}

TurboQuantCpuWorkspace::TurboQuantCpuWorkspace(const TurboQuantCpuShape& sh, int num_threads)
    : num_threads_(std::max(1, num_threads)), max_partials_(kMaxPartialsPerThread * num_threads_) {
  const size_t d = size_t(sh.layout.head_size), bs = size_t(sh.block_size), group = size_t(group_of(sh));
  const size_t rows = kQueryTile * group;
  partial_floats_ = group * (d + 3);
  for (int i = 0; i < num_threads_; ++i) {
    auto t = std::make_unique<TurboQuantCpuThreadScratch>();
    t->q.resize(rows * d);
    t->k.resize(bs * d);
    t->v.resize(bs * d);
    t->kf.resize(bs);
    t->vs.resize(bs);
    t->vz.resize(bs);
    t->scores.resize(bs);
    t->m.resize(rows);
    t->l.resize(rows);
    t->z.resize(rows);
    t->acc.resize(rows * d);
    t->rot.resize(d);
    t->codes.resize(d);
    threads_.push_back(std::move(t));
  }
  partials_ = std::make_unique<float[]>(size_t(max_partials_) * partial_floats_);
  signs_ = std::make_unique<uint32_t[]>(d);
}

TurboQuantCpuWorkspace::~TurboQuantCpuWorkspace() = default;

void turboquant_cpu_plan(const TurboQuantCpuShape& sh, const TurboQuantCpuWorkspace& ws, const std::vector<int>& query_lens,
                         const std::vector<int>& seq_lens, TurboQuantCpuPlan* plan) {
  PAGODA_CHECK(query_lens.size() == seq_lens.size(), "turboquant plan: ", query_lens.size(), " query lengths, ",
               seq_lens.size(), " sequence lengths");
  plan->items.clear();
  plan->merges.clear();
  plan->query_lens.assign(query_lens.begin(), query_lens.end());
  plan->seq_lens.assign(seq_lens.begin(), seq_lens.end());
  int64_t work = 0;
  int32_t t0 = 0;
  for (size_t s = 0; s < query_lens.size(); ++s) {
    const int q_len = query_lens[s], ctx = seq_lens[s];
    for (int32_t t = t0; t < t0 + q_len; t += kQueryTile)
      for (int h = 0; h < sh.num_kv_heads; ++h)
        plan->items.push_back({int32_t(s), h, t, std::min(t + kQueryTile, t0 + q_len), 0, ctx, -1});
    work += int64_t(q_len) * ctx;
    t0 += q_len;
  }
  // Work ~ new tokens x context x heads x head size; below ~1M multiply-adds one thread does it all, as
  // CPU_ATTN decides.
  plan->serial = work * sh.num_q_heads * sh.layout.head_size * 2 < (int64_t(1) << 20) || ws.num_threads() == 1;
  const int threads = ws.num_threads();
  const size_t base = plan->items.size();
  if (!plan->serial && base > 0 && base < size_t(threads * kItemsPerThread / 2)) {
    const int want = int((size_t(threads * kItemsPerThread) + base - 1) / base);
    std::vector<TurboQuantCpuItem> split;
    int next_partial = 0;
    for (const TurboQuantCpuItem& it : plan->items) {
      const int ctx = it.k_end;
      const int pieces = std::min(want, ctx / kMinSplitKeys);
      if (it.t_end - it.t_begin != 1 || pieces < 2 || next_partial + pieces > ws.max_partials()) {
        split.push_back(it);
        continue;
      }
      const int chunk = (ctx / pieces + sh.block_size - 1) / sh.block_size * sh.block_size;  // whole blocks
      const int first = next_partial;
      for (int k = 0; k < ctx; k += chunk) {
        TurboQuantCpuItem piece = it;
        piece.k_begin = k;
        piece.k_end = std::min(ctx, k + chunk);
        piece.partial = next_partial++;
        split.push_back(piece);
      }
      plan->merges.push_back({it.kv_head, it.t_begin, first, next_partial - first});
    }
    plan->items.swap(split);
  }
  // Costliest first (rows x keys), so the counter hands the long ones out early.
  auto cost = [&](const TurboQuantCpuItem& it) { return int64_t(it.t_end - it.t_begin) * (it.k_end - it.k_begin); };
  std::stable_sort(plan->items.begin(), plan->items.end(),
                   [&](const TurboQuantCpuItem& a, const TurboQuantCpuItem& b) { return cost(a) > cost(b); });
}

void turboquant_cpu_forward(const TurboQuantCpuShape& sh, const TurboQuantCpuPlan& plan, const TurboQuantCpuParams& p,
                            TurboQuantCpuWorkspace& ws) {
  if (p.num_seqs != int(plan.query_lens.size()))
    throw_runtime_error("turboquant: the step has ", p.num_seqs, " sequences, its plan ", plan.query_lens.size());
  if (p.num_seqs == 0) return;
  // Validate the metadata once, before any worker runs (errors cannot cross threads).
  if (p.query_start_loc[0] != 0) throw_runtime_error("turboquant: query_start_loc[0] must be 0");
  for (int s = 0; s < p.num_seqs; ++s) {
    const int32_t q_len = p.query_start_loc[s + 1] - p.query_start_loc[s];
    const int32_t ctx = p.seq_lens[s];
    if (q_len != plan.query_lens[size_t(s)] || ctx != plan.seq_lens[size_t(s)])
      throw_runtime_error("turboquant: sequence ", s, " has ", q_len, " new tokens and context ", ctx,
                          "; the step was planned with ", plan.query_lens[size_t(s)], " and ", plan.seq_lens[size_t(s)]);
    if (q_len < 0 || q_len > ctx)
      throw_runtime_error("turboquant: sequence ", s, " has ", q_len, " query tokens but a context of ", ctx);
    const int64_t nblocks = (int64_t(ctx) + sh.block_size - 1) / sh.block_size;
    if (nblocks > p.max_blocks_per_seq)
      throw_runtime_error("turboquant: sequence ", s, " needs ", nblocks, " blocks, the block table holds ",
                          p.max_blocks_per_seq);
    for (int64_t b = 0; b < nblocks; ++b) {
      const int32_t id = p.block_tables[int64_t(s) * p.max_blocks_per_seq + b];
      if (id < 0 || id >= p.num_blocks)
        throw_runtime_error("turboquant: sequence ", s, " block ", b, " is ", id, ", outside the cache (", p.num_blocks,
                            " blocks)");
    }
  }
  turboquant_cpu_fill_signs(p.layer, sh.layout.head_size, ws.sign_masks());
  struct Ctx {
    const TurboQuantCpuShape* sh;
    const TurboQuantCpuPlan* plan;
    const TurboQuantCpuParams* p;
    TurboQuantCpuWorkspace* ws;
    ItemFn fn;
    std::atomic<size_t> next{0};
  } ctx{&sh, &plan, &p, &ws, item_fn(sh.layout)};
  Ctx* c = &ctx;
  const std::function<void(int64_t, int64_t)> body = [c](int64_t slot, int64_t) {
    TurboQuantCpuThreadScratch& th = c->ws->thread(int(slot));
    const uint32_t* signs = c->ws->sign_masks();
    for (;;) {
      const size_t i = c->next.fetch_add(1, std::memory_order_relaxed);
      if (i >= c->plan->items.size()) break;
      const TurboQuantCpuItem& w = c->plan->items[i];
      c->fn(*c->sh, *c->p, signs, w, th, w.partial < 0 ? nullptr : c->ws->partial(w.partial));
    }
  };
  if (p.parallel_for && !plan.serial) p.parallel_for(ws.num_threads(), body);
  else body(0, 1);
  for (const TurboQuantCpuMerge& mg : plan.merges) merge(sh, mg, ws, p.out);
}

}  // namespace pagoda
