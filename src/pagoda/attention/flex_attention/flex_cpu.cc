#include "pagoda/attention/flex_attention/flex_cpu.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "pagoda/core/error.h"

// Same dispatch scheme as cpu_attn.cc (kept local: this folder links only pagoda_core).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FLEX_CPU_MULTIVERSION __attribute__((target_clones("avx2", "default")))
#else
#define FLEX_CPU_MULTIVERSION
#endif

namespace pagoda {
namespace {

typedef float v8f __attribute__((vector_size(32)));

inline __attribute__((always_inline)) float dot(const float* a, const float* b, int n) {
  v8f acc = {};
  const int n8 = n & ~7;
  for (int i = 0; i < n8; i += 8) {
    v8f x, y;
    std::memcpy(&x, a + i, sizeof x);
    std::memcpy(&y, b + i, sizeof y);
    acc += x * y;
  }
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (int i = n8; i < n; ++i) s += a[i] * b[i];
  return s;
}

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Scratch {
  std::vector<float> k, v;     // [block_n, head_size] the key block's rows converted to float32
  std::vector<const float*> krow, vrow;  // [block_n] each key's K and V row (in the cache when it is float32)
  std::vector<float> m, l;     // [rows] running max and denominator
  std::vector<float> acc;      // [rows, head_size] running numerator
  std::vector<float> scores;   // [block_n]
  std::vector<uint8_t> allow;  // [block_n]
};

// Key positions [k0, k1) of kv head `h` of sequence `seq`: s.krow / s.vrow point at float32 rows, the cache's
// own for a float32 cache, else rows of s.k / s.v converted here.
void load_keys(const FlexCpuParams& p, int seq, int h, int32_t k0, int32_t k1, Scratch& s) {
  const int hd = p.head_size, bs = p.block_size;
  for (int32_t pos = k0; pos < k1; ++pos) {
    const int64_t block = p.block_tables[int64_t(seq) * p.max_blocks_per_seq + pos / bs];
    const int64_t row = ((block * p.num_kv_heads + h) * bs + pos % bs) * int64_t(2 * hd);
    float* kd = s.k.data() + size_t(pos - k0) * size_t(hd);
    float* vd = s.v.data() + size_t(pos - k0) * size_t(hd);
    s.krow[size_t(pos - k0)] = kd;
    s.vrow[size_t(pos - k0)] = vd;
    switch (p.cache_dtype) {
      case DType::kF32: {
        const float* src = static_cast<const float*>(p.kv_cache) + row;
        s.krow[size_t(pos - k0)] = src;
        s.vrow[size_t(pos - k0)] = src + hd;
        break;
      }
      case DType::kBF16: {
        const uint16_t* src = static_cast<const uint16_t*>(p.kv_cache) + row;
        for (int d = 0; d < hd; ++d) {
          kd[d] = bf16_to_f32(src[d]);
          vd[d] = bf16_to_f32(src[hd + d]);
        }
        break;
      }
      case DType::kF16:
      case DType::kF8E4M3:
      case DType::kF8E5M2: {
        const bool fp8 = p.cache_dtype != DType::kF16;
        const float ks = fp8 ? p.k_scale : 1.0f, vs = fp8 ? p.v_scale : 1.0f;
        for (int d = 0; d < hd; ++d) {
          kd[d] = load_as_f32(p.kv_cache, p.cache_dtype, size_t(row + d)) * ks;
          vd[d] = load_as_f32(p.kv_cache, p.cache_dtype, size_t(row + hd + d)) * vs;
        }
        break;
      }
      case DType::kU8:
      case DType::kI32:
      case DType::kI64:
        PAGODA_CHECK(false, "flex_cpu: unsupported cache dtype ", dtype_name(p.cache_dtype));
    }
  }
}

FLEX_CPU_MULTIVERSION void run_item(const FlexCpuParams& p, const FlexPlanTile& t, int kv_head, float scale, Scratch& s) {
  const FlexBlockPlan& plan = *p.plan;
  const FlexScoreMod* mod = p.score_mod && !p.score_mod->empty() ? p.score_mod : nullptr;
  const int hd = p.head_size, bn = plan.block_n();
  const int group = p.num_q_heads / p.num_kv_heads;
  const int ntok = t.t_end - t.t_begin;
  const int rows = ntok * group;
  const int32_t ctx = p.seq_lens[t.seq];
  const int64_t q_stride = p.query_stride ? p.query_stride : int64_t(p.num_q_heads) * hd;
  const int64_t o_stride = int64_t(p.num_q_heads) * hd;

  s.m.assign(size_t(rows), kNegInf);
  s.l.assign(size_t(rows), 0.0f);
  s.acc.assign(size_t(rows) * size_t(hd), 0.0f);
  s.k.resize(size_t(bn) * size_t(hd));
  s.v.resize(size_t(bn) * size_t(hd));
  s.krow.resize(size_t(bn));
  s.vrow.resize(size_t(bn));
  s.scores.resize(size_t(bn));
  s.allow.resize(size_t(bn));

  for (int32_t e = t.first; e < t.first + t.count; ++e) {
    const int32_t k0 = plan.entry_block(e) * bn, k1 = std::min(k0 + bn, ctx);
    const int n = k1 - k0;
    const bool partial = plan.entry_partial(e);
    load_keys(p, t.seq, kv_head, k0, k1, s);
    for (int ti = 0; ti < ntok; ++ti) {
      const int32_t qpos = t.pos_begin + ti;
      if (partial) p.mask->eval_row(t.seq, qpos, k0, n, s.allow.data());
      for (int g = 0; g < group; ++g) {
        const int h = kv_head * group + g;
        const int r = ti * group + g;
        const float* q = p.query + int64_t(t.t_begin + ti) * q_stride + int64_t(h) * hd;
        float bmax = kNegInf;
        for (int j = 0; j < n; ++j) {
          float sc = kNegInf;
          if (!partial || s.allow[size_t(j)]) {
            sc = dot(q, s.krow[size_t(j)], hd) * scale;
            if (mod) {
              const int32_t rel = k0 + j - qpos;
              if (mod->softcap > 0) sc = mod->softcap * std::tanh(sc / mod->softcap);
              if (!mod->alibi_slopes.empty()) sc += mod->alibi_slopes[size_t(h)] * float(rel);
              if (!mod->rel_bias.empty()) {
                const int R = mod->rel_bias_max;
                sc += mod->rel_bias[size_t(h) * size_t(2 * R + 1) + size_t(std::clamp(rel, -R, R) + R)];
              }
            }
          }
          s.scores[size_t(j)] = sc;
          bmax = std::max(bmax, sc);
        }
        if (bmax == kNegInf) continue;  // the mask leaves this row nothing in this block
        const float m_new = std::max(s.m[size_t(r)], bmax);
        const float corr = std::exp(s.m[size_t(r)] - m_new);  // exp(-inf) = 0 on the row's first keys
        float* acc = s.acc.data() + size_t(r) * size_t(hd);
        float l = s.l[size_t(r)] * corr;
        if (corr != 1.0f)
          for (int d = 0; d < hd; ++d) acc[d] *= corr;
        for (int j = 0; j < n; ++j) {
          if (s.scores[size_t(j)] == kNegInf) continue;
          const float pj = std::exp(s.scores[size_t(j)] - m_new);
          l += pj;
          const float* vr = s.vrow[size_t(j)];
          for (int d = 0; d < hd; ++d) acc[d] += pj * vr[d];
        }
        s.l[size_t(r)] = l;
        s.m[size_t(r)] = m_new;
      }
    }
  }
  for (int ti = 0; ti < ntok; ++ti)
    for (int g = 0; g < group; ++g) {
      const int r = ti * group + g;
      const int h = kv_head * group + g;
      float* o = p.out + int64_t(t.t_begin + ti) * o_stride + int64_t(h) * hd;
      const float l = s.l[size_t(r)];
      const float inv = l > 0 ? 1.0f / l : 0.0f;  // l >= 1 once any key is allowed
      const float* acc = s.acc.data() + size_t(r) * size_t(hd);
      for (int d = 0; d < hd; ++d) o[d] = acc[d] * inv;
    }
}

}  // namespace

void flex_cpu_forward(const FlexCpuParams& p) {
  PAGODA_CHECK(p.plan && p.mask, "flex_cpu_forward: no plan or mask");
  PAGODA_CHECK(p.head_size > 0 && p.block_size > 0 && p.num_kv_heads > 0 && p.num_q_heads > 0 &&
                   p.num_q_heads % p.num_kv_heads == 0,
               "flex_cpu_forward: bad shape");
  switch (p.cache_dtype) {
    case DType::kF32: case DType::kBF16: case DType::kF16: case DType::kF8E4M3: case DType::kF8E5M2: break;
    case DType::kU8: case DType::kI32: case DType::kI64:
      throw_runtime_error("flex_cpu: unsupported cache dtype ", dtype_name(p.cache_dtype));
  }
  if (const FlexScoreMod* m = p.score_mod) {
    if (!m->alibi_slopes.empty() && m->alibi_slopes.size() != size_t(p.num_q_heads))
      throw_runtime_error("flex_cpu: ", m->alibi_slopes.size(), " ALiBi slopes for ", p.num_q_heads, " heads");
    if (!m->rel_bias.empty() && (m->rel_bias_max < 0 || m->rel_bias.size() != size_t(p.num_q_heads) * size_t(2 * m->rel_bias_max + 1)))
      throw_runtime_error("flex_cpu: relative bias table of ", m->rel_bias.size(), " entries, expected ", p.num_q_heads,
                          " x ", 2 * m->rel_bias_max + 1);
  }
  // Validate the tables once, before any worker runs (errors cannot cross threads).
  for (int s = 0; s < p.num_seqs; ++s) {
    const int64_t nblocks = (int64_t(p.seq_lens[s]) + p.block_size - 1) / p.block_size;
    if (nblocks > p.max_blocks_per_seq)
      throw_runtime_error("flex_cpu: sequence ", s, " needs ", nblocks, " blocks, the block table holds ", p.max_blocks_per_seq);
    for (int64_t b = 0; b < nblocks; ++b) {
      const int32_t id = p.block_tables[int64_t(s) * p.max_blocks_per_seq + b];
      if (id < 0 || id >= p.num_blocks)
        throw_runtime_error("flex_cpu: sequence ", s, " block ", b, " is ", id, ", outside the cache (", p.num_blocks, " blocks)");
    }
  }
  const float scale = p.scale != 0.0f ? p.scale : 1.0f / std::sqrt(float(p.head_size));
  const int64_t items = int64_t(p.plan->num_tiles()) * p.num_kv_heads;
  auto body = [&](int64_t b, int64_t e) {
    thread_local Scratch scratch;
    for (int64_t i = b; i < e; ++i) run_item(p, p.plan->tile(int(i / p.num_kv_heads)), int(i % p.num_kv_heads), scale, scratch);
  };
  if (p.parallel_for) p.parallel_for(items, body);
  else body(0, items);
}

}  // namespace pagoda
