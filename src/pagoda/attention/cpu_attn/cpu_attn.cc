#include "pagoda/attention/cpu_attn/cpu_attn.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "pagoda/core/error.h"

namespace pagoda {
namespace {

// Query tokens of one sequence handled together, so each K/V block is converted and K transposed once for
// all of them.
constexpr int kQueryTile = 32;

struct WorkItem {
  int seq;
  int kv_head;
  int32_t t_begin, t_end;  // global query token indices
};

struct Scratch {
  std::vector<float> k, v;      // [block_size, head_size] converted rows
  std::vector<float> kt;        // [head_size, padded block size]: K of the block transposed
  std::vector<float> m, l;      // [rows] running max and denominator
  std::vector<float> acc;       // [rows, head_size] running numerator
  std::vector<float> scores;    // [rows, padded block size]: scores, then weights
  std::vector<int> j0, j1;      // [rows] the block offsets a row sees
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

// The kernel, compiled twice: for AVX2 and for the baseline. GCC vector code must be compiled for its target
// from the start (a clone of baseline code keeps its element-by-element vector construction), hence the
// include; -ffp-contract=off keeps the two rounding identically.
#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx2")
namespace avx2 {
#include "pagoda/attention/cpu_attn/cpu_attn_item.inc"
}  // namespace avx2
#pragma GCC pop_options
#endif
namespace generic {
#include "pagoda/attention/cpu_attn/cpu_attn_item.inc"
}  // namespace generic

using RunItem = void (*)(const CpuAttnParams&, const WorkItem&, float, Scratch&);
RunItem pick_run_item() {
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx2")) return avx2::run_item;
#endif
  return generic::run_item;
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
    static const RunItem run_item = pick_run_item();
    for (int64_t i = b; i < e; ++i) run_item(p, items[size_t(i)], scale, scratch);
  };
  if (p.parallel_for) p.parallel_for(int64_t(items.size()), body);
  else body(0, int64_t(items.size()));
}

}  // namespace pagoda
