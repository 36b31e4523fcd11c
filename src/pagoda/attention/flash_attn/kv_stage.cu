// FA3 KV staging: paged cache -> contiguous blocks in the model dtype (see kv_stage.h).
#include "pagoda/attention/flash_attn/kv_stage.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <type_traits>

#include "pagoda/attention/cuda_ok.h"
#include "pagoda/core/cuda_convert.cuh"
#include "pagoda/core/error.h"

namespace pagoda::flash_attn_detail {
namespace {

constexpr int kThreads = 256;

struct SameKv {};
template <__nv_fp8_interpretation_t kKind>
struct Fp8Kv {};

// blockIdx.x: staged block i = {seq, b}; blockIdx.y: KV head. Copies tokens b*128 .. b*128+127 of the
// sequence (K then V, 2 * D elements per token and head), zeros past its context.
template <typename T, typename Kv>
__global__ void __launch_bounds__(kThreads) kv_stage_kernel(const PagedAttentionParams p, const KvStage st) {
  const int2 blk = st.blocks[blockIdx.x];
  const int seq = blk.x, kvh = blockIdx.y;
  const int ctx = p.seq_lens[seq];
  const int D = p.head_size;
  const int hk = p.num_kv_heads;
  const int* bt = p.block_tables + size_t(seq) * p.max_blocks_per_seq;
  const size_t dst_token0 = size_t(st.first_block[seq] + blk.y) * kStageBlock;
  T* dst = static_cast<T*>(st.base);
  const int chunks = 2 * D / 8;  // 8-element (16-byte in T) chunks per token and head
  for (int i = threadIdx.x; i < kStageBlock * chunks; i += kThreads) {
    const int t = i / chunks, c = i % chunks;
    const int tok = blk.y * kStageBlock + t;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (tok < ctx) {
      const int page = __ldg(bt + tok / p.block_size), off = tok % p.block_size;
      const size_t slot = p.layout == KvLayout::kNHD ? (size_t(page) * p.block_size + off) * hk + kvh
                                                     : (size_t(page) * hk + kvh) * p.block_size + off;
      const size_t e = slot * 2 * D + size_t(c) * 8;  // element index in the cache
      if constexpr (std::is_same_v<Kv, SameKv>) {
        v = __ldg(reinterpret_cast<const uint4*>(static_cast<const T*>(p.kv_cache) + e));
      } else {
        const uint2 raw = __ldg(reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(p.kv_cache) + e));
        if constexpr (std::is_same_v<Kv, Fp8Kv<__NV_E4M3>>) v = cuda_convert::widen_fp8x8<T, __NV_E4M3>(raw);
        else v = cuda_convert::widen_fp8x8<T, __NV_E5M2>(raw);
      }
    }
    *reinterpret_cast<uint4*>(dst + ((dst_token0 + t) * hk + kvh) * 2 * D + size_t(c) * 8) = v;
  }
}

template <typename T>
void launch_typed(const PagedAttentionParams& p, const KvStage& st, cudaStream_t stream) {
  const dim3 grid(unsigned(st.count), unsigned(p.num_kv_heads));
  switch (p.kv_dtype) {
    case DType::kF8E4M3: kv_stage_kernel<T, Fp8Kv<__NV_E4M3>><<<grid, kThreads, 0, stream>>>(p, st); break;
    case DType::kF8E5M2: kv_stage_kernel<T, Fp8Kv<__NV_E5M2>><<<grid, kThreads, 0, stream>>>(p, st); break;
    case DType::kBF16:
    case DType::kF16: kv_stage_kernel<T, SameKv><<<grid, kThreads, 0, stream>>>(p, st); break;
    case DType::kF32:
    case DType::kU8:
    case DType::kI32:
    case DType::kI64: PAGODA_CHECK(false, "KV staging: unsupported KV dtype ", dtype_name(p.kv_dtype));
  }
  PAGODA_CUDA_OK(cudaGetLastError());
}

}  // namespace

void launch_kv_stage(const PagedAttentionParams& p, const KvStage& stage, cudaStream_t stream) {
  if (stage.count == 0) return;
  PAGODA_CHECK(p.head_size % 8 == 0, "KV staging needs a head size that is a multiple of 8");
  PAGODA_CHECK(p.kv_dtype == p.dtype || dtype_is_fp8(p.kv_dtype),
               "KV staging: KV dtype ", dtype_name(p.kv_dtype), " with model dtype ", dtype_name(p.dtype));
  if (p.dtype == DType::kBF16) launch_typed<__nv_bfloat16>(p, stage, stream);
  else if (p.dtype == DType::kF16) launch_typed<__half>(p, stage, stream);
  else PAGODA_CHECK(false, "KV staging runs bf16 and fp16, not ", dtype_name(p.dtype));
}

}  // namespace pagoda::flash_attn_detail
