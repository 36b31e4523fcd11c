#include <cuda_fp8.h>

#include "pagoda/ops/cuda/cuda_common.cuh"
#include "pagoda/ops/cuda/rope_kv.h"
#include "pagoda/ops/cuda/rope_kv_turboquant.cuh"

namespace pagoda {
namespace {

using namespace cuda_detail;

enum class CacheKind { kSame, kE4M3, kE5M2, kTurboQuant };

struct Args {
  void* q;
  void* k;
  const void* v;
  int64_t q_stride, k_stride, v_stride;
  const int64_t* positions;
  const float* cos;
  const float* sin;
  int max_position;
  int num_q_heads, num_kv_heads, head_dim;
  void* cache;  // nullptr: RoPE only
  const int64_t* slots;
  int64_t num_slots;
  int block_size;
  bool hnd;
  const float* k_scale;
  const float* v_scale;
  int* error_flag;
  tq_encode::EncodeParams tq;  // kTurboQuant
};

// The warp barrier of the TurboQuant encoder (rope_kv_turboquant.cuh).
struct WarpOps {
  static __device__ __forceinline__ void sync_warp() { __syncwarp(); }
};

// Shared memory of the TurboQuant path: per warp, the head's k and v as floats and the encoder's scratch.
constexpr int kTqWarps = 4;
__host__ __device__ inline int tq_warp_bytes(int head_dim) {
  return (8 * head_dim + tq_encode::scratch_bytes(head_dim) + 15) / 16 * 16;
}

// kChunk consecutive elements of T (as raw words) written to the cache as CacheKind: the same bits, or
// value / scale rounded to FP8 (nearest even, saturating), four per word, element 0 in the lowest byte.
template <typename T, CacheKind kKind, int kChunk>
__device__ __forceinline__ void store_cache(void* cache, int64_t offset, const uint32_t (&w)[kWords<T, kChunk>],
                                            float scale) {
  if constexpr (kKind == CacheKind::kSame) {
    store_words(static_cast<T*>(cache) + offset, w);
  } else {
    constexpr __nv_fp8_interpretation_t kFmt = kKind == CacheKind::kE4M3 ? __NV_E4M3 : __NV_E5M2;
    float f[kChunk];
    words_to_floats<T, kChunk>(w, f);
    uint32_t out[kChunk / 4];
#pragma unroll
    for (int i = 0; i < kChunk / 4; ++i) {
      const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(f[4 * i] / scale, f[4 * i + 1] / scale), __NV_SATFINITE, kFmt);
      const uint32_t hi =
          __nv_cvt_float2_to_fp8x2(make_float2(f[4 * i + 2] / scale, f[4 * i + 3] / scale), __NV_SATFINITE, kFmt);
      out[i] = lo | (hi << 16);
    }
    store_words(static_cast<uint8_t*>(cache) + offset, out);
  }
}

// kChunk fp32 values of a cos/sin row, 16 bytes at a time.
template <int kChunk>
__device__ __forceinline__ void load_table(const float* p, float (&out)[kChunk]) {
#pragma unroll
  for (int i = 0; i < kChunk; i += 4) {
    float v[4];
    load_floats(p + i, v);
#pragma unroll
    for (int j = 0; j < 4; ++j) out[i + j] = v[j];
  }
}

// One block per token. Work items: the kChunk-wide slices of the first half of every q and k head (each
// rotates x[i..i+kChunk) with its partner x[i+d/2..)), then the kChunk-wide slices of every v head.
// PRECOND: head_dim / 2 % kChunk == 0; all rows and tables 16-byte aligned (checked on the host).
template <typename T, CacheKind kKind, int kChunk>
__global__ void __launch_bounds__(256) rope_kv_kernel(Args a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // The attention kernel after it is launched programmatically (SM 9.0): it may place its CTAs and read the
  // step's metadata now; it waits for this grid's completion before reading q and the cache.
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  constexpr int W = kWords<T, kChunk>;
  const int64_t token = blockIdx.x;
  const int64_t pos = a.positions[token];
  const int64_t slot = a.cache ? a.slots[token] : -1;
  if (pos < 0 || pos >= a.max_position || slot >= a.num_slots) {
    if (threadIdx.x == 0 && a.error_flag) *a.error_flag = 1;
    return;
  }
  const bool write = slot >= 0;
  const int hd = a.head_dim, half = hd / 2, cph = half / kChunk;
  const int q_items = a.num_q_heads * cph, rope_items = q_items + a.num_kv_heads * cph;
  const int items = rope_items + (write && kKind != CacheKind::kTurboQuant ? a.num_kv_heads * (hd / kChunk) : 0);
  const float* cos_row = a.cos + pos * half;
  const float* sin_row = a.sin + pos * half;

  // Element offset of (slot, kv head h, d) in the cache.
  auto cache_offset = [&](int h, int d) -> int64_t {
    const int64_t row = a.hnd ? ((slot / a.block_size) * a.num_kv_heads + h) * a.block_size + slot % a.block_size
                              : slot * a.num_kv_heads + h;
    return row * (2 * hd) + d;
  };
  float k_scale = 1.f, v_scale = 1.f;
  if constexpr (kKind != CacheKind::kSame) {
    if (a.k_scale) k_scale = *a.k_scale;
    if (a.v_scale) v_scale = *a.v_scale;
  }

  for (int it = threadIdx.x; it < items; it += blockDim.x) {
    if (it < rope_items) {
      const bool is_q = it < q_items;
      const int j = is_q ? it : it - q_items;
      const int head = j / cph, i0 = (j - head * cph) * kChunk;
      T* x = is_q ? static_cast<T*>(a.q) + token * a.q_stride + int64_t(head) * hd
                  : static_cast<T*>(a.k) + token * a.k_stride + int64_t(head) * hd;
      float x1[kChunk], x2[kChunk], c[kChunk], s[kChunk];
      load_floats(x + i0, x1);
      load_floats(x + half + i0, x2);
      load_table(cos_row + i0, c);
      load_table(sin_row + i0, s);
      float o1[kChunk], o2[kChunk];
#pragma unroll
      for (int i = 0; i < kChunk; ++i) {
        o1[i] = x1[i] * c[i] - x2[i] * s[i];
        o2[i] = x2[i] * c[i] + x1[i] * s[i];
      }
      uint32_t w1[W], w2[W];
      floats_to_words<T, kChunk>(o1, w1);
      floats_to_words<T, kChunk>(o2, w2);
      store_words(x + i0, w1);
      store_words(x + half + i0, w2);
      if constexpr (kKind != CacheKind::kTurboQuant) {
        if (!is_q && write) {  // the cache gets the rotated k as rounded to T
          store_cache<T, kKind, kChunk>(a.cache, cache_offset(head, i0), w1, k_scale);
          store_cache<T, kKind, kChunk>(a.cache, cache_offset(head, half + i0), w2, k_scale);
        }
      }
    } else if constexpr (kKind != CacheKind::kTurboQuant) {
      const int j = it - rope_items, per_head = hd / kChunk;
      const int head = j / per_head, i0 = (j - head * per_head) * kChunk;
      uint32_t vw[W];
      load_words(static_cast<const T*>(a.v) + token * a.v_stride + int64_t(head) * hd + i0, vw);
      store_cache<T, kKind, kChunk>(a.cache, cache_offset(head, hd + i0), vw, v_scale);
    }
  }
  if constexpr (kKind == CacheKind::kTurboQuant) {
    // Each warp encodes whole KV heads from the rotated k this block just wrote and the v row.
    if (!write) return;
    __syncthreads();  // the block's k rows are written
    extern __shared__ uint4 tq_smem[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;
    uint8_t* mine = reinterpret_cast<uint8_t*>(tq_smem) + warp * tq_warp_bytes(hd);
    float* kf = reinterpret_cast<float*>(mine);
    float* vf = kf + hd;
    uint8_t* scratch = mine + 8 * hd;
    const int64_t blk = slot / a.block_size, off = slot % a.block_size;
    for (int head = warp; head < a.num_kv_heads; head += nwarps) {
      const T* kr = static_cast<const T*>(a.k) + token * a.k_stride + int64_t(head) * hd;
      const T* vr = static_cast<const T*>(a.v) + token * a.v_stride + int64_t(head) * hd;
      for (int i = lane; i < hd; i += 32) {
        kf[i] = to_f32(kr[i]);
        vf[i] = to_f32(vr[i]);
      }
      __syncwarp();
      uint8_t* dst = static_cast<uint8_t*>(a.cache) +
                     ((blk * a.num_kv_heads + head) * a.block_size + off) * a.tq.layout.slot_bytes;
      tq_encode::encode_slot<WarpOps>(a.tq, kf, vf, dst, scratch, lane);
    }
  }
}

template <typename T, CacheKind kKind, int kChunk>
void launch(const Args& a, int num_tokens, cudaStream_t stream) {
  const int cph = a.head_dim / 2 / kChunk;
  const int items = (a.num_q_heads + a.num_kv_heads) * cph + (a.cache ? a.num_kv_heads * 2 * cph : 0);
  int threads = (items + 31) / 32 * 32;
  threads = threads > 256 ? 256 : threads;
  size_t smem = 0;
  if constexpr (kKind == CacheKind::kTurboQuant) {
    threads = 32 * kTqWarps;
    smem = size_t(kTqWarps) * tq_warp_bytes(a.head_dim);
  }
  rope_kv_kernel<T, kKind, kChunk><<<unsigned(num_tokens), threads, smem, stream>>>(a);
  PAGODA_CUDA_CHECK_LAUNCH();
}

template <typename T, CacheKind kKind>
void launch_chunk(const Args& a, int num_tokens, cudaStream_t stream) {
  // 16-byte accesses when the half head is a multiple of 16 bytes' worth of elements, else 8-byte ones
  // (16-bit dtypes with head_dim % 16 == 8). fp32 always uses 4-element (16-byte) chunks.
  if constexpr (sizeof(T) == 4) {
    launch<T, kKind, 4>(a, num_tokens, stream);
  } else {
    if ((a.head_dim / 2) % 8 == 0) launch<T, kKind, 8>(a, num_tokens, stream);
    else launch<T, kKind, 4>(a, num_tokens, stream);
  }
}

}  // namespace

void rope_kv(const RopeKvParams& p, cudaStream_t stream) {
  PAGODA_CHECK(p.num_tokens >= 0, "rope_kv: num_tokens ", p.num_tokens);
  if (p.num_tokens == 0) return;
  const int hd = p.head_dim;
  PAGODA_CHECK(hd >= 8 && hd <= 512 && hd % 8 == 0, "rope_kv: head_dim ", hd, " must be a multiple of 8 in [8, 512]");
  PAGODA_CHECK(p.num_q_heads > 0 && p.num_kv_heads > 0 && p.num_q_heads % p.num_kv_heads == 0,
               "rope_kv: num_q_heads ", p.num_q_heads, " must be a positive multiple of num_kv_heads ", p.num_kv_heads);
  PAGODA_CHECK(p.positions && p.cos && p.sin && p.max_position > 0, "rope_kv: positions and cos/sin tables required");
  const int64_t qs = p.q_stride ? p.q_stride : int64_t(p.num_q_heads) * hd;
  const int64_t ks = p.k_stride ? p.k_stride : int64_t(p.num_kv_heads) * hd;
  const int64_t vs = p.v_stride ? p.v_stride : int64_t(p.num_kv_heads) * hd;
  const size_t es = dtype_size(p.dtype);
  PAGODA_CHECK(p.q && p.k, "rope_kv: q and k required");
  const void* ptrs[] = {p.q, p.k, p.v, p.kv_cache, p.cos, p.sin};
  for (const void* ptr : ptrs)
    PAGODA_CHECK(cuda_detail::is_aligned(ptr, 16), "rope_kv: pointer ", ptr, " is not 16-byte aligned");
  for (int64_t s : {qs, ks, vs})
    PAGODA_CHECK(s > 0 && (s * int64_t(es)) % 16 == 0, "rope_kv: token stride ", s, " does not keep rows 16-byte aligned");

  CacheKind kind = CacheKind::kSame;
  if (p.kv_cache) {
    PAGODA_CHECK(p.v && p.slot_mapping, "rope_kv: v and slot_mapping required with a KV cache");
    PAGODA_CHECK(p.num_blocks > 0 && p.block_size > 0, "rope_kv: num_blocks ", p.num_blocks, " block_size ", p.block_size);
    if (p.cache_dtype == DType::kF8E4M3) kind = CacheKind::kE4M3;
    else if (p.cache_dtype == DType::kF8E5M2) kind = CacheKind::kE5M2;
    else if (p.cache_dtype == DType::kU8) kind = CacheKind::kTurboQuant;
    else
      PAGODA_CHECK(p.cache_dtype == p.dtype, "rope_kv: cache dtype ", dtype_name(p.cache_dtype),
                   " must be the model dtype ", dtype_name(p.dtype), " or an FP8 type");
  }
  Args a{p.q, p.k, p.v, qs, ks, vs, p.positions, p.cos, p.sin, p.max_position, p.num_q_heads, p.num_kv_heads, hd,
         p.kv_cache, p.slot_mapping, int64_t(p.num_blocks) * p.block_size, p.block_size,
         p.layout == KvLayout::kHND, p.k_scale, p.v_scale, p.error_flag, {}};
  if (kind == CacheKind::kTurboQuant) {
    const auto& t = p.turboquant;
    const bool preset = (t.key_bits == 3 || t.key_bits == 4 || t.key_bits == 8) && (t.value_bits == 3 || t.value_bits == 4);
    PAGODA_CHECK(preset, "rope_kv: a TurboQuant cache needs 3/4/8-bit keys and 3/4-bit values, got ", t.key_bits, "/",
                 t.value_bits);
    PAGODA_CHECK(p.dtype != DType::kF32, "rope_kv: a TurboQuant cache under a float32 model");
    a.tq.layout = turboquant_layout(t.key_bits, t.value_bits, t.norm_correction, hd);
    a.tq.layer = t.layer;
    for (int i = 0; i < 15; ++i) a.tq.boundaries[i] = t.boundaries[i];
  }
  cuda_detail::dispatch_model_dtype(p.dtype, "rope_kv", [&](auto tag) {
    using T = decltype(tag);
    switch (kind) {
      case CacheKind::kSame: launch_chunk<T, CacheKind::kSame>(a, p.num_tokens, stream); return;
      case CacheKind::kE4M3: launch_chunk<T, CacheKind::kE4M3>(a, p.num_tokens, stream); return;
      case CacheKind::kE5M2: launch_chunk<T, CacheKind::kE5M2>(a, p.num_tokens, stream); return;
      case CacheKind::kTurboQuant:
        if constexpr (sizeof(T) == 2) launch_chunk<T, CacheKind::kTurboQuant>(a, p.num_tokens, stream);
        return;
    }
  });
}

}  // namespace pagoda
