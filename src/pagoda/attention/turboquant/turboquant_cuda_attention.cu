// The TurboQuant attention kernels' host side (turboquant_cuda_attention.h): dispatch to the tensor-core kernel of
// the preset, the CUDA-core kernel for the other head sizes, and the split-KV merge.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "pagoda/attention/cuda_ok.h"
#include "pagoda/attention/paged/split_kv_merge.cuh"
#include "pagoda/attention/turboquant/turboquant_cuda_attention.h"
#include "pagoda/attention/turboquant/turboquant_cuda_kernel.cuh"
#include "pagoda/core/error.h"

namespace pagoda {
namespace tq_detail {

template <int KB, int VB, bool NC>
void launch_tq_preset(const KernelArgs& a, int num_items, bool decode8, cudaStream_t stream);
template <int KB, int VB, bool NC>
int tq_preset_ctas_per_sm(int head_size, bool decode8);

namespace {

// Code i of a little-endian bit stream of `bits`-bit codes (reads only the bytes that hold the code).
__device__ __forceinline__ unsigned get_code(const uint8_t* field, int i, int bits) {
  const int b = i * bits, byte = b >> 3, sh = b & 7;
  unsigned v = field[byte];
  if (sh + bits > 8) v |= unsigned(field[byte + 1]) << 8;
  return (v >> sh) & ((1u << bits) - 1);
}

// CUDA-core kernel for any head size up to kTurboQuantMaxHeadSize: the work item's rows one warp at a time;
// lane holds dims lane + 32 j of q~ (fp32, in shared memory for the chunked Walsh-Hadamard transform) and of
// the output. Every key is decoded per row: slow, for head sizes no model in scope has.
constexpr int kFbDims = kTurboQuantMaxHeadSize / 32;

__global__ void __launch_bounds__(kThreads) tq_fallback_kernel(const KernelArgs a, TurboQuantLayout L) {
  __shared__ float qs[kWarps][kTurboQuantMaxHeadSize];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const Item it = make_item(a, a.work[blockIdx.x], int(blockIdx.y));
  const int d = a.head_size, kvh = it.kvh;
  const int* btab = a.block_tables + int64_t(it.seq) * a.max_blocks_per_seq;
  float* q = qs[warp];
  for (int r = warp; r < kRowsPerItem; r += kWarps) {
    const int R = it.row_start + r;
    if (R >= it.rows_total) break;
    const int tok = it.q_begin + R / it.G, h = kvh * it.G + R % it.G;
    const size_t qrow = size_t(tok) * size_t(a.q_stride) + size_t(h) * d;
    for (int i = lane; i < d; i += 32) {
      const float v = a.bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(a.q)[qrow + i])
                             : __half2float(static_cast<const __half*>(a.q)[qrow + i]);
      q[i] = turboquant_sign_negative(a.layer, i) ? -v : v;
    }
    __syncwarp();
    for (int c = 0, nc = turboquant_num_chunks(d); c < nc; ++c) {
      int begin, size;
      turboquant_chunk(d, c, &begin, &size);
      for (int hstep = 1; hstep < size; hstep *= 2) {
        for (int p = lane; p < size / 2; p += 32) {
          const int i = begin + (p / hstep) * 2 * hstep + p % hstep, j = i + hstep;
          const float u = q[i], v = q[j];
          q[i] = u + v;
          q[j] = u - v;
        }
        __syncwarp();
      }
      const float inv = rsqrtf(float(size));
      for (int i = lane; i < size; i += 32) q[begin + i] *= inv;
      __syncwarp();
    }
    float qv[kFbDims], acc[kFbDims];
#pragma unroll
    for (int j = 0; j < kFbDims; ++j) {
      qv[j] = lane + 32 * j < d ? q[lane + 32 * j] : 0.f;
      acc[j] = 0.f;
    }
    __syncwarp();  // q is rewritten by the next row
    const int qpos = it.first_pos + R / it.G;
    const int key_begin = it.tile_begin * kTileKeys;
    const int key_end = min(min(it.tile_end * kTileKeys, it.kv_end), qpos + 1);
    const float inv_sqrt_d = rsqrtf(float(d));
    float m = kNegInf, l = 0.f;
    for (int key = key_begin; key < key_end; ++key) {
      const int blk = btab[key / a.block_size], off = key % a.block_size;
      const uint8_t* slot = a.cache + ((int64_t(blk) * a.num_kv_heads + kvh) * a.block_size + off) * L.slot_bytes;
      float dot = 0.f, sq = 0.f;
#pragma unroll
      for (int j = 0; j < kFbDims; ++j) {
        const int i = lane + 32 * j;
        if (i >= d) break;
        float k;
        if (L.key_bits == 8) {
          const __half_raw hr = __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(slot[i]), __NV_E4M3);
          k = __half2float(__half(hr));
        } else {
          k = a.centroids[get_code(slot, i, L.key_bits)];
          sq += k * k;
        }
        dot += qv[j] * k;
      }
#pragma unroll
      for (int o = 16; o > 0; o /= 2) {
        dot += __shfl_xor_sync(0xffffffffu, dot, o);
        sq += __shfl_xor_sync(0xffffffffu, sq, o);
      }
      float f = 1.f;
      if (L.key_bits != 8) f = ld_f16(slot + L.key_norm_offset) * (L.norm_correction ? rsqrtf(sq) : inv_sqrt_d);
      const float x = dot * f * a.scale * kLog2e;
      const float m_new = fmaxf(m, x);
      const float alpha = exp2f(m - m_new), p = exp2f(x - m_new);
      l = l * alpha + p;
      m = m_new;
      const float vsc = ld_f16(slot + L.value_scale_offset), vz = ld_f16(slot + L.value_zero_offset);
#pragma unroll
      for (int j = 0; j < kFbDims; ++j) {
        const int i = lane + 32 * j;
        if (i >= d) break;
        acc[j] = acc[j] * alpha + p * (vz + vsc * float(get_code(slot + L.value_offset, i, L.value_bits)));
      }
    }
    const int64_t row = int64_t(tok) * a.num_q_heads + h;
    if (a.write_partial) {
      const int64_t prow = int64_t(it.split) * a.partial_tokens * a.num_q_heads + row;
#pragma unroll
      for (int j = 0; j < kFbDims; ++j)
        if (lane + 32 * j < d) a.partial_out[prow * d + lane + 32 * j] = acc[j];
      if (lane == 0) {
        a.partial_ml[prow * 2] = m;
        a.partial_ml[prow * 2 + 1] = l;
      }
    } else {
      const float inv = l > 0.f ? 1.f / l : 0.f;
#pragma unroll
      for (int j = 0; j < kFbDims; ++j) {
        const int i = lane + 32 * j;
        if (i >= d) break;
        if (a.bf16) static_cast<__nv_bfloat16*>(a.out)[row * d + i] = __float2bfloat16_rn(acc[j] * inv);
        else static_cast<__half*>(a.out)[row * d + i] = __float2half_rn(acc[j] * inv);
      }
    }
  }
}

// Combines the KV splits of the rows of every split-0 work item (the paged family's merge); kMaxD bounds the
// head size (the merge's per-lane registers).
template <typename T, int kMaxD>
__global__ void __launch_bounds__(paged_detail::kThreads) tq_merge_kernel(const paged_detail::KernelArgs args,
                                                                         int num_splits) {
  const int4 w = args.work[blockIdx.x];
  if (w.z != 0) return;
  paged_detail::merge_split_rows<T, kMaxD>(args, w.x, w.y, int(blockIdx.y), num_splits);
}

template <typename T>
void launch_merge(const paged_detail::KernelArgs& m, dim3 grid, int num_splits, cudaStream_t stream) {
  if (m.p.head_size <= 256) tq_merge_kernel<T, 256><<<grid, paged_detail::kThreads, 0, stream>>>(m, num_splits);
  else tq_merge_kernel<T, kTurboQuantMaxHeadSize><<<grid, paged_detail::kThreads, 0, stream>>>(m, num_splits);
}

}  // namespace
}  // namespace tq_detail

bool turboquant_attention_uses_tensor_cores(int head_size) {
  return head_size == 64 || head_size == 128 || head_size == 256;
}

int turboquant_attention_ctas_per_sm(int key_bits, int value_bits, bool norm_correction, int head_size, bool decode8) {
  using namespace tq_detail;
  (void)norm_correction;  // each key width has one preset's kernel (turboquant_attention checks the preset)
  if (!turboquant_attention_uses_tensor_cores(head_size)) {
    int n = 0;
    PAGODA_CUDA_OK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, tq_fallback_kernel, kThreads, 0));
    return n;
  }
  if (key_bits == 8) return tq_preset_ctas_per_sm<8, 4, false>(head_size, decode8);
  if (key_bits == 4) return tq_preset_ctas_per_sm<4, 4, true>(head_size, decode8);
  if (value_bits == 4) return tq_preset_ctas_per_sm<3, 4, true>(head_size, decode8);
  return tq_preset_ctas_per_sm<3, 3, true>(head_size, decode8);
}

void turboquant_attention(const TurboQuantAttentionParams& p, const PagedAttentionWorkspace& ws, cudaStream_t stream) {
  using namespace tq_detail;
  if (ws.num_work_items == 0) return;
  PAGODA_CHECK(p.dtype == DType::kBF16 || p.dtype == DType::kF16, "TurboQuant attention: dtype ",
               dtype_name(p.dtype), " (bf16 or fp16)");
  PAGODA_CHECK(p.head_size > 0 && p.head_size <= kTurboQuantMaxHeadSize, "TurboQuant attention: head size ",
               p.head_size);
  PAGODA_CHECK(p.block_size > 0 && p.block_size % kSubKeys == 0, "TurboQuant attention: block size ", p.block_size,
               " is not a multiple of 16");
  PAGODA_CHECK(p.num_kv_heads > 0 && p.num_q_heads % p.num_kv_heads == 0, "TurboQuant attention: ", p.num_q_heads,
               " query heads over ", p.num_kv_heads, " KV heads");
  PAGODA_CHECK(p.num_tokens <= ws.max_tokens, "num_tokens ", p.num_tokens, " > workspace max_tokens ", ws.max_tokens);
  PAGODA_CHECK(ws.num_splits == 1 || p.num_tokens <= ws.split_tokens, "split KV over ", p.num_tokens,
               " tokens > the workspace's split_tokens ", ws.split_tokens);
  const bool known = (p.key_bits == 8 && p.value_bits == 4 && !p.norm_correction) ||
                     (p.key_bits == 4 && p.value_bits == 4 && p.norm_correction) ||
                     (p.key_bits == 3 && p.value_bits == 4 && p.norm_correction) ||
                     (p.key_bits == 3 && p.value_bits == 3 && p.norm_correction);
  PAGODA_CHECK(known, "TurboQuant attention: no preset with ", p.key_bits, "-bit keys and ", p.value_bits,
               "-bit values", p.norm_correction ? " (norm-corrected)" : "");
  KernelArgs a{};
  a.q = p.q;
  a.q_stride = p.q_stride > 0 ? p.q_stride : int64_t(p.num_q_heads) * p.head_size;
  a.out = p.out;
  a.cache = static_cast<const uint8_t*>(p.kv_cache);
  a.bf16 = p.dtype == DType::kBF16;
  a.num_q_heads = p.num_q_heads;
  a.num_kv_heads = p.num_kv_heads;
  a.head_size = p.head_size;
  a.block_size = p.block_size;
  a.max_blocks_per_seq = p.max_blocks_per_seq;
  a.query_start_loc = p.query_start_loc;
  a.seq_lens = p.seq_lens;
  a.block_tables = p.block_tables;
  a.scale = p.scale;
  a.layer = p.layer;
  for (int i = 0; i < 16; ++i) a.centroids[i] = p.centroids[i];
  a.work = reinterpret_cast<const int4*>(ws.work);
  a.partial_out = ws.partial_out;
  a.partial_ml = ws.partial_ml;
  a.partial_tokens = ws.split_tokens;
  a.write_partial = ws.num_splits > 1;
  const int items = ws.num_work_items;
  // Every item of the step has <= 8 rows: the decode body (a decode-only plan, the longest query x GQA <= 8).
  const bool decode8 = ws.all_decode && p.max_query_len > 0 &&
                       int64_t(p.max_query_len) * (p.num_q_heads / p.num_kv_heads) <= 8;
  if (turboquant_attention_uses_tensor_cores(p.head_size)) {
    if (p.key_bits == 8) launch_tq_preset<8, 4, false>(a, items, decode8, stream);
    else if (p.key_bits == 4) launch_tq_preset<4, 4, true>(a, items, decode8, stream);
    else if (p.value_bits == 4) launch_tq_preset<3, 4, true>(a, items, decode8, stream);
    else launch_tq_preset<3, 3, true>(a, items, decode8, stream);
  } else {
    const TurboQuantLayout L = turboquant_layout(p.key_bits, p.value_bits, p.norm_correction, p.head_size);
    tq_fallback_kernel<<<dim3(unsigned(items), unsigned(p.num_kv_heads)), kThreads, 0, stream>>>(a, L);
    PAGODA_CUDA_OK(cudaGetLastError());
  }
  if (!a.write_partial) return;
  paged_detail::KernelArgs m{};
  m.p.out = p.out;
  m.p.dtype = p.dtype;
  m.p.num_tokens = p.num_tokens;
  m.p.num_seqs = p.num_seqs;
  m.p.num_q_heads = p.num_q_heads;
  m.p.num_kv_heads = p.num_kv_heads;
  m.p.head_size = p.head_size;
  m.p.query_start_loc = p.query_start_loc;
  m.p.v_scale = 1.f;
  m.work = a.work;
  m.partial_out = ws.partial_out;
  m.partial_ml = ws.partial_ml;
  m.partial_tokens = ws.split_tokens;
  m.write_partial = true;
  const dim3 grid(unsigned(items), unsigned(p.num_kv_heads));
  if (a.bf16) launch_merge<__nv_bfloat16>(m, grid, ws.num_splits, stream);
  else launch_merge<__half>(m, grid, ws.num_splits, stream);
  PAGODA_CUDA_OK(cudaGetLastError());
}

}  // namespace pagoda
