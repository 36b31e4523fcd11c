#include "pagoda/attention/cpu_attn/cpu_attn.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "pagoda/core/error.h"

// Same dispatch scheme as ops/simd.h (kept local: this backend links only pagoda_core).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CPU_ATTN_MULTIVERSION __attribute__((target_clones("avx2", "default")))
#else
#define CPU_ATTN_MULTIVERSION
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

// Query tokens of one sequence handled together, so each K/V block is converted once for all of them.
constexpr int kQueryTile = 16;

struct WorkItem {
  int seq;
  int kv_head;
  int32_t t_begin, t_end;  // global query token indices
};

struct Scratch {
  std::vector<float> k, v;      // [block_size, head_size] converted rows
  std::vector<float> m, l;      // [rows] running max and denominator
  std::vector<float> acc;       // [rows, head_size] running numerator
  std::vector<float> scores;    // [block_size]
};

float decode_elem(const uint8_t* base, DType t, int64_t i) { return load_as_f32(base, t, size_t(i)); }

// The 256 values of an fp8 format (e4m3 or e5m2), built once.
const float* fp8_table(DType t) {
  struct Tables {
    float e4m3[256], e5m2[256];
    Tables() {
      for (int i = 0; i < 256; ++i) {
        const uint8_t b = uint8_t(i);
        e4m3[i] = load_as_f32(&b, DType::kF8E4M3, 0);
        e5m2[i] = load_as_f32(&b, DType::kF8E5M2, 0);
      }
    }
  };
  static const Tables tables;
  return t == DType::kF8E4M3 ? tables.e4m3 : tables.e5m2;
}

// Rows [o0, o1) of K and V of (block, kv head) as float32 with row stride *ld.
void load_block(const CpuAttnParams& p, int64_t block, int kv_head, int o0, int o1, Scratch& s, const float** k,
                const float** v, int64_t* ld) {
  const int hd = p.head_size;
  const int64_t row0 = ((block * p.num_kv_heads + kv_head) * p.block_size + o0) * int64_t(2 * hd);
  if (p.cache_dtype == DType::kF32) {
    const float* base = static_cast<const float*>(p.kv_cache) + row0;
    *k = base;
    *v = base + hd;
    *ld = 2 * hd;
    return;
  }
  const auto* bytes = static_cast<const uint8_t*>(p.kv_cache);
  const int rows = o1 - o0;
  float* kd = s.k.data();
  float* vd = s.v.data();
  switch (p.cache_dtype) {
    case DType::kBF16: {
      const uint16_t* src = reinterpret_cast<const uint16_t*>(bytes) + row0;
      for (int r = 0; r < rows; ++r)
        for (int d = 0; d < hd; ++d) {
          kd[r * hd + d] = bf16_to_f32(src[int64_t(r) * 2 * hd + d]);
          vd[r * hd + d] = bf16_to_f32(src[int64_t(r) * 2 * hd + hd + d]);
        }
      break;
    }
    case DType::kF16:
      for (int r = 0; r < rows; ++r)
        for (int d = 0; d < hd; ++d) {
          kd[r * hd + d] = decode_elem(bytes, p.cache_dtype, row0 + int64_t(r) * 2 * hd + d);
          vd[r * hd + d] = decode_elem(bytes, p.cache_dtype, row0 + int64_t(r) * 2 * hd + hd + d);
        }
      break;
    case DType::kF8E4M3:
    case DType::kF8E5M2: {
      // One table lookup per element: the 256 values of the format, scaled (exact: the product is the
      // same float the per-element conversion times the scale gives).
      const float* table = fp8_table(p.cache_dtype);
      float kt[256], vt[256];
      for (int i = 0; i < 256; ++i) {
        kt[i] = table[i] * p.k_scale;
        vt[i] = table[i] * p.v_scale;
      }
      const uint8_t* src = bytes + row0;
      for (int r = 0; r < rows; ++r)
        for (int d = 0; d < hd; ++d) {
          kd[r * hd + d] = kt[src[int64_t(r) * 2 * hd + d]];
          vd[r * hd + d] = vt[src[int64_t(r) * 2 * hd + hd + d]];
        }
      break;
    }
    case DType::kF32:
    case DType::kU8:
    case DType::kI32:
    case DType::kI64:
      PAGODA_CHECK(false, "cpu_attn: unsupported cache dtype ", dtype_name(p.cache_dtype));
  }
  *k = kd;
  *v = vd;
  *ld = hd;
}

CPU_ATTN_MULTIVERSION void run_item(const CpuAttnParams& p, const WorkItem& w, float scale, Scratch& s) {
  const int hd = p.head_size;
  const int bs = p.block_size;
  const int group = p.num_q_heads / p.num_kv_heads;
  const int32_t q0 = p.query_start_loc[w.seq];
  const int32_t q_len = p.query_start_loc[w.seq + 1] - q0;
  const int32_t first_pos = p.seq_lens[w.seq] - q_len;  // position of the sequence's first query token
  const int ntok = w.t_end - w.t_begin;
  const int rows = ntok * group;
  const int64_t q_stride = p.query_stride ? p.query_stride : int64_t(p.num_q_heads) * hd;
  const int64_t o_stride = p.out_stride ? p.out_stride : int64_t(p.num_q_heads) * hd;

  s.m.assign(size_t(rows), -std::numeric_limits<float>::infinity());
  s.l.assign(size_t(rows), 0.0f);
  s.acc.assign(size_t(rows) * size_t(hd), 0.0f);
  if (p.cache_dtype != DType::kF32) {
    s.k.resize(size_t(bs) * size_t(hd));
    s.v.resize(size_t(bs) * size_t(hd));
  }
  s.scores.resize(size_t(bs));

  auto pos_of = [&](int32_t t) { return first_pos + (t - q0); };
  auto lo_of = [&](int32_t pos) { return p.sliding_window > 0 ? std::max(0, pos - p.sliding_window + 1) : 0; };
  const int32_t k_lo = lo_of(pos_of(w.t_begin));
  // Causal: a query sees keys up to its own position; otherwise every key of the sequence.
  auto hi_of = [&](int32_t pos) { return p.causal ? pos : p.seq_lens[w.seq] - 1; };  // inclusive
  const int32_t k_hi = hi_of(pos_of(w.t_end - 1));

  for (int32_t b = k_lo / bs; b <= k_hi / bs; ++b) {
    const int64_t block = p.block_tables[int64_t(w.seq) * p.max_blocks_per_seq + b];
    const int32_t base = b * bs;
    const int o0 = std::max(k_lo, base) - base;
    const int o1 = std::min(k_hi + 1, base + bs) - base;
    const float* kb;
    const float* vb;
    int64_t ld;
    load_block(p, block, w.kv_head, o0, o1, s, &kb, &vb, &ld);
    for (int ti = 0; ti < ntok; ++ti) {
      const int32_t t = w.t_begin + ti;
      const int32_t pos = pos_of(t);
      const int j0 = std::max(lo_of(pos), base + o0) - base;  // block offsets [j0, j1)
      const int j1 = std::min(hi_of(pos) + 1, base + o1) - base;
      if (j0 >= j1) continue;
      for (int g = 0; g < group; ++g) {
        const int h = w.kv_head * group + g;
        const int r = ti * group + g;
        const float* q = p.query + int64_t(t) * q_stride + int64_t(h) * hd;
        float bmax = -std::numeric_limits<float>::infinity();
        for (int j = j0; j < j1; ++j) {
          const float sc = dot(q, kb + int64_t(j - o0) * ld, hd) * scale;
          s.scores[size_t(j)] = sc;
          bmax = std::max(bmax, sc);
        }
        const float m_new = std::max(s.m[size_t(r)], bmax);
        const float corr = std::exp(s.m[size_t(r)] - m_new);
        float* acc = s.acc.data() + size_t(r) * size_t(hd);
        float l = s.l[size_t(r)] * corr;
        if (corr != 1.0f)
          for (int d = 0; d < hd; ++d) acc[d] *= corr;
        for (int j = j0; j < j1; ++j) {
          const float pj = std::exp(s.scores[size_t(j)] - m_new);
          l += pj;
          const float* vr = vb + int64_t(j - o0) * ld;
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
      const int h = w.kv_head * group + g;
      float* o = p.out + int64_t(w.t_begin + ti) * o_stride + int64_t(h) * hd;
      const float inv = 1.0f / s.l[size_t(r)];  // l >= 1: every query sees at least its own key
      const float* acc = s.acc.data() + size_t(r) * size_t(hd);
      for (int d = 0; d < hd; ++d) o[d] = acc[d] * inv;
    }
}

bool cache_dtype_ok(DType t) {
  switch (t) {
    case DType::kF32: case DType::kBF16: case DType::kF16: case DType::kF8E4M3: case DType::kF8E5M2: return true;
    case DType::kU8: case DType::kI32: case DType::kI64: return false;
  }
  return false;
}

}  // namespace

void cpu_attn_write_kv(const CpuAttnWriteKvParams& p) {
  PAGODA_CHECK(cache_dtype_ok(p.cache_dtype), "cpu_attn: unsupported cache dtype ", dtype_name(p.cache_dtype));
  PAGODA_CHECK(p.head_size > 0 && p.block_size > 0 && p.num_kv_heads > 0, "cpu_attn_write_kv: bad shape");
  const int hd = p.head_size;
  const int64_t row = int64_t(p.num_kv_heads) * hd;
  const int64_t ks = p.key_stride ? p.key_stride : row;
  const int64_t vs = p.value_stride ? p.value_stride : row;
  const int64_t num_slots = p.num_blocks * p.block_size;
  const bool fp8 = dtype_is_fp8(p.cache_dtype);
  const float inv_k = fp8 ? 1.0f / p.k_scale : 1.0f, inv_v = fp8 ? 1.0f / p.v_scale : 1.0f;
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    const int64_t slot = p.slot_mapping[t];
    if (slot < 0) continue;
    if (slot >= num_slots)
      throw_runtime_error("cpu_attn: slot ", slot, " of token ", t, " is outside the KV cache (", num_slots, " slots)");
    const int64_t block = slot / p.block_size, off = slot % p.block_size;
    for (int h = 0; h < p.num_kv_heads; ++h) {
      const int64_t dst = ((block * p.num_kv_heads + h) * p.block_size + off) * int64_t(2 * hd);
      const float* k = p.key + t * ks + int64_t(h) * hd;
      const float* v = p.value + t * vs + int64_t(h) * hd;
      if (p.cache_dtype == DType::kF32) {
        float* c = static_cast<float*>(p.kv_cache) + dst;
        std::memcpy(c, k, size_t(hd) * 4);
        std::memcpy(c + hd, v, size_t(hd) * 4);
      } else {
        for (int d = 0; d < hd; ++d) {
          store_from_f32(p.kv_cache, p.cache_dtype, size_t(dst + d), k[d] * inv_k);
          store_from_f32(p.kv_cache, p.cache_dtype, size_t(dst + hd + d), v[d] * inv_v);
        }
      }
    }
  }
}

void cpu_attn_forward(const CpuAttnParams& p) {
  PAGODA_CHECK(cache_dtype_ok(p.cache_dtype), "cpu_attn: unsupported cache dtype ", dtype_name(p.cache_dtype));
  PAGODA_CHECK(p.head_size > 0 && p.block_size > 0 && p.num_kv_heads > 0 && p.num_q_heads > 0,
               "cpu_attn_forward: bad shape");
  PAGODA_CHECK(p.num_q_heads % p.num_kv_heads == 0, "cpu_attn_forward: ", p.num_q_heads, " query heads are not a multiple of ",
               p.num_kv_heads, " kv heads");
  if (p.num_seqs == 0) return;
  // Validate the metadata once, before any worker runs (errors cannot cross threads).
  if (p.query_start_loc[0] != 0) throw_runtime_error("cpu_attn: query_start_loc[0] must be 0");
  for (int s = 0; s < p.num_seqs; ++s) {
    const int32_t q_len = p.query_start_loc[s + 1] - p.query_start_loc[s];
    const int32_t ctx = p.seq_lens[s];
    if (q_len < 0) throw_runtime_error("cpu_attn: query_start_loc decreases at sequence ", s);
    if (q_len > ctx)
      throw_runtime_error("cpu_attn: sequence ", s, " has ", q_len, " query tokens but a context of only ", ctx);
    const int64_t nblocks = (int64_t(ctx) + p.block_size - 1) / p.block_size;
    if (nblocks > p.max_blocks_per_seq)
      throw_runtime_error("cpu_attn: sequence ", s, " needs ", nblocks, " blocks, the block table holds ",
                          p.max_blocks_per_seq);
    for (int64_t b = 0; b < nblocks; ++b) {
      const int32_t id = p.block_tables[int64_t(s) * p.max_blocks_per_seq + b];
      if (id < 0 || id >= p.num_blocks)
        throw_runtime_error("cpu_attn: sequence ", s, " block ", b, " is ", id, ", outside the cache (", p.num_blocks,
                            " blocks)");
    }
  }
  std::vector<WorkItem> items;
  for (int s = 0; s < p.num_seqs; ++s)
    for (int32_t t = p.query_start_loc[s]; t < p.query_start_loc[s + 1]; t += kQueryTile)
      for (int g = 0; g < p.num_kv_heads; ++g)
        items.push_back({s, g, t, std::min(t + kQueryTile, p.query_start_loc[s + 1])});
  const float scale = p.scale != 0.0f ? p.scale : 1.0f / std::sqrt(float(p.head_size));
  auto body = [&](int64_t b, int64_t e) {
    thread_local Scratch scratch;
    for (int64_t i = b; i < e; ++i) run_item(p, items[size_t(i)], scale, scratch);
  };
  if (p.parallel_for) p.parallel_for(int64_t(items.size()), body);
  else body(0, int64_t(items.size()));
}

}  // namespace pagoda
