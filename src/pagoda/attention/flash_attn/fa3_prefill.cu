// FA3 prefill kernel launch: TMA tensor maps for Q and the paged KV cache, one instantiation per
// (element type, head dim 64/128/256). The kernel body exists only in the sm_90a image.
#include "pagoda/attention/flash_attn/fa3_prefill.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <mutex>

#include "pagoda/attention/flash_attn/fa3_prefill_kernel.cuh"
#include "pagoda/core/error.h"

namespace pagoda::flash_attn_detail {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q);
    PAGODA_CHECK(e == cudaSuccess && q == cudaDriverEntryPointSuccess && p != nullptr,
                 "cuTensorMapEncodeTiled is not available from the CUDA driver");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// A 3-D tensor map over 16-bit elements: dims {d0, d1, d2} (d0 contiguous), byte strides of d1 and d2,
// boxes of {64, b1, b2} elements landing in shared memory with the 128-byte swizzle.
CUtensorMap make_map(const void* base, uint64_t d0, uint64_t d1, uint64_t d2, uint64_t stride1, uint64_t stride2,
                     uint32_t b1, uint32_t b2) {
  CUtensorMap m;
  const cuuint64_t dims[3] = {d0, d1, d2};
  const cuuint64_t strides[2] = {stride1, stride2};
  const cuuint32_t box[3] = {64, b1, b2};
  const cuuint32_t elem[3] = {1, 1, 1};
  CUresult r = encode_fn()(&m, CU_TENSOR_MAP_DATA_TYPE_UINT16, 3, const_cast<void*>(base), dims, strides, box, elem,
                           CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                           CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  PAGODA_CHECK(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed (", int(r), ")");
  return m;
}

template <typename T, int D>
void launch(const PagedAttentionParams& p, int cache_blocks, const int4* work, int num_items, const KvStage* stage,
            cudaStream_t stream) {
  using Tr = Fa3Traits<D>;
  static std::once_flag once;
  std::call_once(once, [] {
    cudaError_t e = cudaFuncSetAttribute(fa3_prefill_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         Tr::kSmemBytes);
    PAGODA_CHECK(e == cudaSuccess, "cudaFuncSetAttribute: ", cudaGetErrorString(e));
  });
  const uint64_t q_stride = uint64_t(p.q_token_stride > 0 ? p.q_token_stride : int64_t(p.num_q_heads) * D) * 2;
  CUtensorMap tq = make_map(p.q, D, uint64_t(p.num_q_heads), uint64_t(p.num_tokens), uint64_t(D) * 2, q_stride, 1,
                            Tr::kBlockM);
  // The cache FA3 reads: the paged cache, or the staged copy (NHD blocks of kStageBlock tokens).
  const void* kv = stage ? stage->base : p.kv_cache;
  const int block_size = stage ? kStageBlock : p.block_size;
  const bool hnd = !stage && p.layout == KvLayout::kHND;
  // Rows of the cache: the staged blocks of this step (a tile that runs past the last one reads zeros), the
  // allocation's when known, else the addressable maximum (block ids come from the block table, which the
  // engine keeps in range).
  const uint64_t blocks = stage ? uint64_t(stage->count)
                          : cache_blocks > 0 ? uint64_t(cache_blocks)
                                             : (uint64_t(1) << 31) / uint64_t(p.block_size);
  const uint64_t row_bytes = uint64_t(2) * D * 2;
  // TMA loads of whole tiles when every cache block holds whole tiles or the KV is staged (a sequence's
  // staged blocks are consecutive: a tile may straddle two); else the cp.async gather (16).
  const uint32_t rows = stage || block_size % Tr::kBlockN == 0 ? uint32_t(Tr::kBlockN) : 16u;
  CUtensorMap tkv = !hnd ? make_map(kv, 2 * D, uint64_t(p.num_kv_heads), blocks * block_size, row_bytes,
                                    row_bytes * p.num_kv_heads, 1, rows)
                         : make_map(kv, 2 * D, uint64_t(block_size), blocks * p.num_kv_heads, row_bytes,
                                    row_bytes * block_size, rows, 1);
  Fa3Args a;
  a.work = work;
  a.kv_cache = kv;
  a.out = p.out;
  a.seq_lens = p.seq_lens;
  a.block_tables = p.block_tables;
  a.max_blocks_per_seq = p.max_blocks_per_seq;
  a.stage_first_block = stage ? stage->first_block : nullptr;
  a.block_size = block_size;
  a.rows_per_load = int(rows);
  a.num_q_heads = p.num_q_heads;
  a.num_kv_heads = p.num_kv_heads;
  a.head_size = p.head_size;
  a.scale = p.scale * p.k_scale;
  a.scale_log2 = a.scale * 1.4426950408889634f;
  a.softcap = p.softcap;
  a.v_scale = p.v_scale;
  a.sliding_window = p.sliding_window;
  a.sinks = p.sinks;
  a.causal = p.causal;
  a.hnd = hnd;
  dim3 grid(unsigned(num_items), unsigned(p.num_q_heads));
  fa3_prefill_kernel<T, D><<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(tq, tkv, a);
  cudaError_t e = cudaGetLastError();
  PAGODA_CHECK(e == cudaSuccess, "FA3 prefill launch: ", cudaGetErrorString(e));
}

template <typename T>
void launch_typed(const PagedAttentionParams& p, int cache_blocks, const int4* work, int num_items,
                  const KvStage* stage, cudaStream_t stream) {
  switch (p.head_size) {
    case 64: launch<T, 64>(p, cache_blocks, work, num_items, stage, stream); return;
    case 128: launch<T, 128>(p, cache_blocks, work, num_items, stage, stream); return;
    case 256: launch<T, 256>(p, cache_blocks, work, num_items, stage, stream); return;
    default: PAGODA_CHECK(false, "the FA3 prefill kernel has no head size ", p.head_size);
  }
}

}  // namespace

bool fa3_kernel_built() {
  static const bool built = [] {
    cudaFuncAttributes attr{};
    return cudaFuncGetAttributes(&attr, fa3_prefill_kernel<__nv_bfloat16, 128>) == cudaSuccess &&
           attr.binaryVersion == 90;
  }();
  return built;
}

Fa3Tile fa3_tile(int head_size) {
  if (head_size <= 64) return {Fa3Traits<64>::kBlockM, Fa3Traits<64>::kBlockN};
  if (head_size <= 128) return {Fa3Traits<128>::kBlockM, Fa3Traits<128>::kBlockN};
  return {Fa3Traits<256>::kBlockM, Fa3Traits<256>::kBlockN};
}

void launch_fa3_prefill(const PagedAttentionParams& p, int cache_blocks, const int4* work, int num_items,
                        const KvStage* stage, cudaStream_t stream) {
  PAGODA_CHECK(stage != nullptr || p.kv_dtype == p.dtype,
               "the FA3 prefill kernel reads a KV cache in the model dtype (fp8 KV is staged first)");
  PAGODA_CHECK(stage != nullptr || p.block_size % 16 == 0,
               "the FA3 prefill kernel needs a block size that is a multiple of 16, got ", p.block_size);
  PAGODA_CHECK(p.alibi_slopes == nullptr, "the FA3 prefill kernel has no ALiBi (FA2 serves it)");
  if (p.dtype == DType::kBF16) launch_typed<__nv_bfloat16>(p, cache_blocks, work, num_items, stage, stream);
  else if (p.dtype == DType::kF16) launch_typed<__half>(p, cache_blocks, work, num_items, stage, stream);
  else PAGODA_CHECK(false, "the FA3 prefill kernel runs bf16 and fp16, not ", dtype_name(p.dtype));
}

}  // namespace pagoda::flash_attn_detail
