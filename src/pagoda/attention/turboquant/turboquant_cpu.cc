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
// Below this many items per thread, decode contexts are split until there are about as many: a thread that
// is descheduled (a shared machine) or slower leaves its share to the others in small pieces.
constexpr int kItemsPerThread = 8;
// Base items b < 8 t, each split into at most ceil(8 t / b) pieces: fewer than 8 t + b < 16 t partials.
constexpr int kMaxPartialsPerThread = 2 * kItemsPerThread;

int group_of(const TurboQuantCpuShape& sh) { return sh.num_q_heads / sh.num_kv_heads; }

// acc = acc * corr + sum_j w[j] v[j], v rows of stride d, NV vectors of acc held in registers over the keys.
template <int NV>
TQ_INLINE void accumulate_chunk(float* acc, float corr, const float* w, const float* v, int n, int d) {
  v8f a[NV];
  for (int k = 0; k < NV; ++k) a[k] = load8(acc + 8 * k) * corr;
  for (int j = 0; j < n; ++j) {
    const float wj = w[j];
    const float* vr = v + size_t(j) * size_t(d);
    for (int k = 0; k < NV; ++k) a[k] += wj * load8(vr + 8 * k);
  }
  for (int k = 0; k < NV; ++k) store8(acc + 8 * k, a[k]);
}
TQ_INLINE void accumulate(float* acc, float corr, const float* w, const float* v, int n, int d) {
  int i = 0;
  for (; i + 64 <= d; i += 64) accumulate_chunk<8>(acc + i, corr, w, v + i, n, d);
  switch ((d - i) / 8) {
    case 7: accumulate_chunk<7>(acc + i, corr, w, v + i, n, d); break;
    case 6: accumulate_chunk<6>(acc + i, corr, w, v + i, n, d); break;
    case 5: accumulate_chunk<5>(acc + i, corr, w, v + i, n, d); break;
    case 4: accumulate_chunk<4>(acc + i, corr, w, v + i, n, d); break;
    case 3: accumulate_chunk<3>(acc + i, corr, w, v + i, n, d); break;
    case 2: accumulate_chunk<2>(acc + i, corr, w, v + i, n, d); break;
    case 1: accumulate_chunk<1>(acc + i, corr, w, v + i, n, d); break;
    default: break;
  }
  for (i += (d - i) / 8 * 8; i < d; ++i) {
    float a = acc[i] * corr;
    for (int j = 0; j < n; ++j) a += w[j] * v[size_t(j) * size_t(d) + size_t(i)];
    acc[i] = a;
  }
}

// Keys and values of rows [o0, o1) of one (block, KV head) into the thread's tiles: centroids (or FP8 keys)
// and the key factor norm / ||c|| (or norm / sqrt(d), or 1 for FP8), value codes as floats, scale and zero.
// D: the head size when it is a compile-time constant (64, 128), else 0 (read from the layout).
template <int KB, int VB, int D>
TQ_INLINE void decode_block(const TurboQuantCpuShape& sh, const uint8_t* slot0, int rows, TurboQuantCpuThreadScratch& th) {
  const TurboQuantLayout& L = sh.layout;
  const int d = D ? D : L.head_size, d8 = d & ~7;
  const int64_t sb = L.slot_bytes;
  v8f lo = {}, hi = {};
  if constexpr (KB != 8) {
    lo = load8(sh.centroid_lut);
    hi = load8(sh.centroid_lut + 8);
  }
  const float inv_sqrt_d = float(1 / std::sqrt(double(d)));
  // ||c||^2 of 8 keys at a time: their vector sums reduced together, then 8 square roots and divisions.
  v8f ss[8];
  float tail[8] = {};
  for (int j = 0; j < rows; ++j) {
    const uint8_t* slot = slot0 + j * sb;
    float* kr = th.k.data() + size_t(j) * size_t(d);
    if constexpr (KB == 8) {
      for (int i = 0; i < d8; i += 8) store8(kr + i, e4m3x8(slot + i));
      for (int i = d8; i < d; ++i) kr[i] = f8e4m3_to_f32(slot[i]);
      th.kf[size_t(j)] = 1.0f;
    } else {
      v8f sq = {};
      for (int i = 0; i < d8; i += 8) {
        const v8f c = centroids8<KB>(codes8<KB>(slot, i), lo, hi);
        store8(kr + i, c);
        sq += c * c;
      }
      ss[j & 7] = sq;
      tail[j & 7] = 0;
      for (int i = d8; i < d; ++i) {
        kr[i] = sh.centroid_lut[code_at<KB>(slot, i)];
        tail[j & 7] += kr[i] * kr[i];
      }
      if ((j & 7) == 7 || j == rows - 1) {
        const int j0 = j & ~7, n = j - j0 + 1;
        for (int k = n; k < 8; ++k) ss[k] = v8f{} + 1.0f;
        const v8f sum = reduce8(ss);
        for (int k = 0; k < n; ++k) {
          const float norm = f16_field(slot0 + (j0 + k) * sb + L.key_norm_offset);
          th.kf[size_t(j0 + k)] = L.norm_correction ? norm / std::sqrt(sum[k] + tail[k]) : norm * inv_sqrt_d;
        }
      }
    }
    const uint8_t* vc = slot + L.value_offset;
    float* vr = th.v.data() + size_t(j) * size_t(d);
    for (int i = 0; i < d8; i += 8) store8(vr + i, __builtin_convertvector(codes8<VB>(vc, i), v8f));
    for (int i = d8; i < d; ++i) vr[i] = float(code_at<VB>(vc, i));
    th.vs[size_t(j)] = f16_field(slot + L.value_scale_offset);
    th.vz[size_t(j)] = f16_field(slot + L.value_zero_offset);
  }
}

// sc[j] = (q . k_j) kf_j for the tile's keys j < n, 8 keys at a time (their 8 dot products reduced together);
// sc[n .. n rounded up to 8) = -inf. Returns max_j sc[j]. Tile rows past n are finite (zeroed at allocation,
// or older keys), so the padding lanes compute garbage that is then overwritten.
template <int D>
TQ_INLINE float scores(const float* q, const float* kt, const float* kf, int n, int d_rt, float* sc) {
  const int d = D ? D : d_rt, d8 = d & ~7;
  v8f vmax = v8f{} - std::numeric_limits<float>::infinity();
  for (int j0 = 0; j0 < n; j0 += 8) {
    v8f acc[8] = {};
    const float* k0 = kt + size_t(j0) * size_t(d);
    for (int i = 0; i < d8; i += 8) {
      const v8f qv = load8(q + i);
      for (int k = 0; k < 8; ++k) acc[k] += qv * load8(k0 + size_t(k) * size_t(d) + size_t(i));
    }
    v8f s = reduce8(acc);
    for (int i = d8; i < d; ++i)
      for (int k = 0; k < 8; ++k) s[k] += q[i] * k0[size_t(k) * size_t(d) + size_t(i)];
    s *= load8(kf + j0);
    if (j0 + 8 > n)
      for (int k = n - j0; k < 8; ++k) s[k] = -std::numeric_limits<float>::infinity();
    store8(sc + j0, s);
    vmax = vmax > s ? vmax : s;
  }
  float m = vmax[0];
  for (int k = 1; k < 8; ++k) m = std::max(m, vmax[k]);
  return m;
}

template <int KB, int VB, int D>
TQ_CPU_MULTIVERSION void run_item(const TurboQuantCpuShape& sh, const TurboQuantCpuParams& p, const uint32_t* signs,
                                  const TurboQuantCpuItem& w, TurboQuantCpuThreadScratch& th, float* partial) {
  const TurboQuantLayout& L = sh.layout;
  const int d = D ? D : L.head_size, bs = sh.block_size, nkv = sh.num_kv_heads, group = group_of(sh);
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
    if (b + 1 <= k_hi / bs) {  // the next block of this head: its lines are in flight while this one computes
      const int64_t next = p.block_tables[int64_t(w.seq) * p.max_blocks_per_seq + b + 1];
      const uint8_t* nb = cache + (next * nkv + w.kv_head) * bs * L.slot_bytes;
      for (int64_t off = 0; off < int64_t(bs) * L.slot_bytes; off += 64) __builtin_prefetch(nb + off);
    }
    decode_block<KB, VB, D>(sh, cache + ((block * nkv + w.kv_head) * bs + o0) * L.slot_bytes, o1 - o0, th);
    for (int ti = 0; ti < ntok; ++ti) {
      const int n = std::min(pos_of(w.t_begin + ti) + 1, base + o1) - base - o0;  // keys [o0, o0 + n)
      if (n <= 0) continue;
      for (int g = 0; g < group; ++g) {
        const int r = ti * group + g;
        const float* q = th.q.data() + size_t(r) * size_t(d);
        float* sc = th.scores.data();
        const float bmax = scores<D>(q, th.k.data(), th.kf.data(), n, d, sc);
        const int n8 = (n + 7) & ~7;
        const float m_old = th.m[size_t(r)];
        const float m_new = std::max(m_old, bmax);
        const float corr = std::exp(m_old - m_new);  // 0 for the first block (m_old = -inf)
        // p_j = exp(s_j - m_new); the weights of the value codes p_j scale_j; sums of p_j and p_j zero_j.
        float* pw = th.pw.data();
        v8f lsum = {}, zsum = {};
        for (int j = 0; j < n8; j += 8) {
          const v8f e = exp8(load8(sc + j) - m_new);
          lsum += e;
          zsum += e * load8(th.vz.data() + j);
          store8(pw + j, e * load8(th.vs.data() + j));
        }
        const float l = th.l[size_t(r)] * corr + hsum(lsum);
        const float z = th.z[size_t(r)] * corr + hsum(zsum);
        accumulate(th.acc.data() + size_t(r) * size_t(d), corr, pw, th.v.data(), n, d);
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

template <int KB, int VB>
ItemFn item_fn_of(int head_size) {
  switch (head_size) {
    case 64: return run_item<KB, VB, 64>;
    case 128: return run_item<KB, VB, 128>;
    default: return run_item<KB, VB, 0>;
  }
}

ItemFn item_fn(const TurboQuantLayout& L) {
  if (L.key_bits == 8 && L.value_bits == 4) return item_fn_of<8, 4>(L.head_size);
  if (L.key_bits == 4 && L.value_bits == 4) return item_fn_of<4, 4>(L.head_size);
  if (L.key_bits == 3 && L.value_bits == 4) return item_fn_of<3, 4>(L.head_size);
  if (L.key_bits == 3 && L.value_bits == 3) return item_fn_of<3, 3>(L.head_size);
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
  // Per-key arrays and the key tile padded to a multiple of 8 keys (the scores and the softmax work 8 keys at a
  // time; the padding stays finite: zeroed here, later older keys).
  const size_t bs8 = (bs + 7) / 8 * 8;
  for (int i = 0; i < num_threads_; ++i) {
    auto t = std::make_unique<TurboQuantCpuThreadScratch>();
    t->q.resize(rows * d);
    t->k.resize(bs8 * d);  // rows up to a multiple of 8: the scores read 8 keys at a time
    t->v.resize(bs * d);
    t->kf.resize(bs8);
    t->vs.resize(bs8);
    t->vz.resize(bs8);
    t->scores.resize(bs8);
    t->pw.resize(bs8);
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
  if (!plan->serial && base > 0 && base < size_t(threads * kItemsPerThread)) {
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
