#include "pagoda/attention/flashinfer/flashinfer_cpu.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "pagoda/core/error.h"

namespace pagoda {
namespace {

// Keys converted at once per (task, KV head): each converted K/V row serves every row and head of the task.
constexpr int kKeyTile = 32;

const float* fp8_table(DType t) {
  struct Tables {
    float e4m3[256], e5m2[256];
    Tables() {
      for (int i = 0; i < 256; ++i) e4m3[i] = f8e4m3_to_f32(uint8_t(i)), e5m2[i] = f8e5m2_to_f32(uint8_t(i));
    }
  };
  static const Tables tables;
  return t == DType::kF8E4M3 ? tables.e4m3 : tables.e5m2;
}

template <typename T>
void load_row(const FiCacheView& c, int64_t elem, float scale, T* dst) {
  const int n = c.head_size;
  switch (c.dtype) {
    case DType::kF32: {
      const float* s = static_cast<const float*>(c.data) + elem;
      for (int i = 0; i < n; ++i) dst[i] = T(s[i]);
      return;
    }
    case DType::kBF16: {
      const uint16_t* s = static_cast<const uint16_t*>(c.data) + elem;
      for (int i = 0; i < n; ++i) dst[i] = T(bf16_to_f32(s[i]));
      return;
    }
    case DType::kF16: {
      const uint16_t* s = static_cast<const uint16_t*>(c.data) + elem;
      for (int i = 0; i < n; ++i) dst[i] = T(f16_to_f32(s[i]));
      return;
    }
    case DType::kF8E4M3: case DType::kF8E5M2: {
      const uint8_t* s = static_cast<const uint8_t*>(c.data) + elem;
      const float* tab = fp8_table(c.dtype);
      for (int i = 0; i < n; ++i) dst[i] = T(tab[s[i]]) * T(scale);
      return;
    }
    case DType::kU8: case DType::kI32: case DType::kI64: break;
  }
  throw_runtime_error("FLASHINFER: KV cache dtype ", dtype_name(c.dtype), " is not supported");
}

template <typename T>
T dot(const T* a, const T* b, int n) {
  T s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int i = 0;
  for (; i + 4 <= n; i += 4) s0 += a[i] * b[i], s1 += a[i + 1] * b[i + 1], s2 += a[i + 2] * b[i + 2], s3 += a[i + 3] * b[i + 3];
  for (; i < n; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}

template <typename T>
struct Scratch {
  std::vector<T> k, v, m, l, acc, score;
  std::vector<int> pos;
};

template <typename T>
void run_item(const FiCpuParams<T>& p, const FiTask& task, int kvh, Scratch<T>& s) {
  const FiPlan& plan = *p.plan;
  const FiPlanShape& sh = plan.shape();
  const FiCacheView& c = p.cache;
  const int g = plan.group_size(), hd = c.head_size, bs = c.block_size;
  const int R = task.row_end - task.row_begin, RG = R * g;
  const int64_t qstride = p.query_stride > 0 ? p.query_stride : int64_t(p.num_q_heads) * hd;
  const T scale = p.scale > 0 ? T(p.scale) : T(1) / std::sqrt(T(hd));
  s.k.resize(size_t(kKeyTile * hd));
  s.v.resize(size_t(kKeyTile * hd));
  s.m.assign(size_t(RG), -std::numeric_limits<T>::infinity());
  s.l.assign(size_t(RG), T(0));
  s.acc.assign(size_t(RG) * hd, T(0));
  s.score.resize(size_t(kKeyTile));
  s.pos.resize(size_t(R));
  const int32_t* row_token = plan.row_token() + task.row_begin;
  const int32_t* row_seq = plan.row_seq() + task.row_begin;
  for (int r = 0; r < R; ++r) {
    const int sq = row_seq[r];
    const int q_len = p.query_start_loc[sq + 1] - p.query_start_loc[sq];
    s.pos[size_t(r)] = p.seq_lens[sq] - q_len + (row_token[r] - p.query_start_loc[sq]);
  }
  int kb = task.kv_begin, ke = task.kv_end;
  if (task.num_splits > 0) {  // a captured decode step: the piece of this step's visible keys
    int lo, hi;
    fi_visible_range(s.pos[0], p.seq_lens[row_seq[0]], sh.sliding_window, sh.causal, &lo, &hi);
    fi_split_range(lo, hi, task.split, task.num_splits, &kb, &ke);
  }
  const int32_t* table = p.block_tables + int64_t(task.seq) * p.block_table_stride;
  for (int k0 = kb; k0 < ke; k0 += kKeyTile) {
    const int n = std::min(kKeyTile, ke - k0);
    for (int j = 0; j < n; ++j) {
      const int k = k0 + j;
      if (k / bs >= p.block_table_stride)
        throw_runtime_error("FLASHINFER: key ", k, " of sequence ", task.seq, " is past its block table (",
                            p.block_table_stride, " blocks)");
      const int64_t id = table[k / bs];
      if (id < 0 || id >= c.num_blocks)
        throw_runtime_error("FLASHINFER: block id ", id, " outside the KV cache (", c.num_blocks, " blocks)");
      const int64_t e = c.row(id, kvh, k % bs);
      load_row(c, e, c.k_scale, s.k.data() + j * hd);
      load_row(c, e + hd, c.v_scale, s.v.data() + j * hd);
    }
    for (int r = 0; r < R; ++r) {
      const int pos = s.pos[size_t(r)];
      for (int hh = 0; hh < g; ++hh) {
        const int h = kvh * g + hh, x = r * g + hh;
        const T* q = p.query + int64_t(row_token[r]) * qstride + int64_t(h) * hd;
        T mx = -std::numeric_limits<T>::infinity();
        for (int j = 0; j < n; ++j) {
          T sc = -std::numeric_limits<T>::infinity();
          if (fi_visible(pos, k0 + j, sh.sliding_window, sh.causal)) {
            sc = scale * dot(q, s.k.data() + j * hd, hd);
            if (p.softcap > 0) sc = T(p.softcap) * std::tanh(sc / T(p.softcap));
          }
          s.score[size_t(j)] = sc;
          mx = std::max(mx, sc);
        }
        if (mx == -std::numeric_limits<T>::infinity()) continue;
        T& m = s.m[size_t(x)];
        T& l = s.l[size_t(x)];
        T* acc = s.acc.data() + int64_t(x) * hd;
        const T m_new = std::max(m, mx);
        const T corr = std::exp(m - m_new);  // 0 when m was -inf
        l *= corr;
        for (int d = 0; d < hd; ++d) acc[d] *= corr;
        for (int j = 0; j < n; ++j) {
          if (s.score[size_t(j)] == -std::numeric_limits<T>::infinity()) continue;
          const T e = std::exp(s.score[size_t(j)] - m_new);
          l += e;
          const T* v = s.v.data() + j * hd;
          for (int d = 0; d < hd; ++d) acc[d] += e * v[d];
        }
        m = m_new;
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int hh = 0; hh < g; ++hh) {
      const int h = kvh * g + hh, x = r * g + hh;
      const T l = s.l[size_t(x)];
      const T inv = l > 0 ? T(1) / l : T(0);
      const T* acc = s.acc.data() + int64_t(x) * hd;
      T* dst;
      if (task.slab < 0) {
        dst = p.out + (int64_t(row_token[r]) * p.num_q_heads + h) * hd;
      } else {
        const int64_t slab = task.slab + r;
        dst = p.slab_o + (slab * p.num_q_heads + h) * hd;
        p.slab_lse[slab * p.num_q_heads + h] = l > 0 ? s.m[size_t(x)] + std::log(l) : -std::numeric_limits<T>::infinity();
      }
      for (int d = 0; d < hd; ++d) dst[d] = acc[d] * inv;
    }
  }
}

template <typename T>
void merge_token(const FiCpuParams<T>& p, int i) {
  const FiPlan& plan = *p.plan;
  const int hd = p.cache.head_size, nq = p.num_q_heads;
  const int t = plan.merge_token()[i];
  const int32_t* slabs = plan.merge_slab() + plan.merge_indptr()[i];
  const int n = plan.merge_indptr()[i + 1] - plan.merge_indptr()[i];
  for (int h = 0; h < nq; ++h) {
    T mx = -std::numeric_limits<T>::infinity();
    for (int e = 0; e < n; ++e) mx = std::max(mx, p.slab_lse[int64_t(slabs[e]) * nq + h]);
    T* dst = p.out + (int64_t(t) * nq + h) * hd;
    std::fill_n(dst, hd, T(0));
    if (mx == -std::numeric_limits<T>::infinity()) continue;
    T sum = 0;
    for (int e = 0; e < n; ++e) {
      const T w = std::exp(p.slab_lse[int64_t(slabs[e]) * nq + h] - mx);
      if (w == 0) continue;
      sum += w;
      const T* o = p.slab_o + (int64_t(slabs[e]) * nq + h) * hd;
      for (int d = 0; d < hd; ++d) dst[d] += w * o[d];
    }
    for (int d = 0; d < hd; ++d) dst[d] /= sum;
  }
}

void for_chunks(const FiParallelFor& pf, int64_t n, const std::function<void(int64_t, int64_t)>& body) {
  if (n <= 0) return;
  if (pf) pf(n, body);
  else body(0, n);
}

}  // namespace

template <typename T>
void fi_cpu_run(const FiCpuParams<T>& p) {
  const FiPlan& plan = *p.plan;
  const FiPlanShape& sh = plan.shape();
  PAGODA_CHECK(p.cache.num_kv_heads == sh.num_kv_heads && p.num_q_heads == sh.num_q_heads &&
                   p.cache.block_size == sh.block_size,
               "FLASHINFER: the call's heads or block size are not the plan's");
  if (p.num_seqs <= 0 ? plan.num_tokens() != 0 : p.query_start_loc[p.num_seqs] != plan.num_tokens())
    throw_runtime_error("FLASHINFER: a step of ", p.num_seqs > 0 ? p.query_start_loc[p.num_seqs] : 0,
                        " tokens, planned for ", plan.num_tokens());
  const int H = sh.num_kv_heads;
  const int64_t items = int64_t(plan.num_tasks()) * H;
  for_chunks(p.parallel_for, items, [&](int64_t b, int64_t e) {
    thread_local Scratch<T> s;
    for (int64_t i = b; i < e; ++i) run_item(p, plan.tasks()[i / H], int(i % H), s);
  });
  for_chunks(p.parallel_for, plan.num_merged(), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) merge_token(p, int(i));
  });
}

template void fi_cpu_run<float>(const FiCpuParams<float>&);
template void fi_cpu_run<double>(const FiCpuParams<double>&);

void fi_cpu_write_kv(const FiCpuWriteKvParams& p) {
  const FiCacheView& c = p.view;
  const int hd = c.head_size;
  const int64_t stride = p.kv_stride > 0 ? p.kv_stride : int64_t(c.num_kv_heads) * hd;
  const bool fp8 = dtype_is_fp8(c.dtype);
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    const int64_t slot = p.slot_mapping[t];
    if (slot < 0) continue;
    const int64_t block = slot / c.block_size;
    if (block >= c.num_blocks)
      throw_runtime_error("FLASHINFER: slot ", slot, " outside the KV cache (", c.num_blocks, " blocks of ", c.block_size, ")");
    for (int h = 0; h < c.num_kv_heads; ++h) {
      const int64_t e = c.row(block, h, int(slot % c.block_size));
      const float* k = p.key + t * stride + int64_t(h) * hd;
      const float* v = p.value + t * stride + int64_t(h) * hd;
      for (int d = 0; d < hd; ++d) {
        store_from_f32(p.cache, c.dtype, size_t(e + d), fp8 ? k[d] / c.k_scale : k[d]);
        store_from_f32(p.cache, c.dtype, size_t(e + hd + d), fp8 ? v[d] / c.v_scale : v[d]);
      }
    }
  }
}

}  // namespace pagoda
