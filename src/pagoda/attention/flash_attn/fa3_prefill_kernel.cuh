// PRIVATE to flash_attn/: the FA3 prefill kernel (FlashAttention-3 algorithm on Hopper, sm_90a).
//
// CTA = NW consumer warpgroups (64 query rows each) + 1 producer warpgroup: NW = 3 at head 64 (a 192-row
// query tile, 160 registers per consumer, 32 for the producer, 512 threads), else 2 (128 rows, 224 and 56
// registers, 384 threads). More warpgroups per CTA at head 64, where the softmax costs as much as the GEMMs
// per key, keep the tensor cores fed while two of them run their softmax (the FA3 paper's 192 x 128 tile).
// The producer loads the kBlockM x D query tile with TMA, then every KV tile of kBlockN keys into a stage:
// with TMA bulk tensor loads (one box of kBlockN rows per 64-column chunk) when every cache block holds
// whole tiles (or the KV is staged: a sequence's staged blocks are consecutive, so a tile may straddle
// two), else gathered 16-token page by page with cp.async by the 128 producer threads (not a TMA box per
// 16-token page: the number of small boxes, not the bytes, would limit TMA). Either way the tile
// completes on its stage's mbarrier (k_full/v_full).
// Consumers run S = Q K^T with wgmma (both operands in shared memory, K-major, 128-byte swizzle), the
// online softmax in registers (fp32, exp2; the running maxima and O move only when a row's maximum grows by
// more than 2^8, which skips nearly every rescale of O after the first tiles), and O += P V with P from
// registers and V in shared memory (MN-major). Intra-warpgroup overlap: S of the next tile is issued before
// P V of the current one, so the softmax of the next tile runs while P V is on the tensor cores. Consumers
// release a K stage (k_empty) as soon as its S is computed and a V stage (v_empty) once its P V has
// completed, so the producer refills K about two tiles ahead of its use.
//
// Shared-memory tiles are stored as [D/64 chunks][rows][64 elements], 128 bytes per row, swizzled by TMA
// (16-byte chunk c of row r at c ^ (r % 8)) -- the canonical SW128 layout the wgmma descriptors describe.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "pagoda/attention/device_common.cuh"
#include "pagoda/attention/paged/paged_attention.h"
#include "pagoda/core/cuda_convert.cuh"

namespace pagoda::flash_attn_detail {

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define PAGODA_FA3_DEVICE 1
#include "pagoda/attention/flash_attn/wgmma_ops.inc"
#endif

struct Fa3Args {
  const int4* work;  // {seq, m_block, q_start, q_len}
  const void* kv_cache;
  void* out;         // [num_tokens, num_q_heads, head_size]
  const int* seq_lens;
  const int* block_tables;
  int max_blocks_per_seq;
  const int* stage_first_block;  // non-null: KV staged contiguously (kv_stage.h); block b of sequence s is
                                 // stage_first_block[s] + b of kv_cache, and block_tables is unused
  int block_size;
  int rows_per_load;  // kBlockN: whole tiles by TMA (blocks hold whole tiles); 16: 16-token pages by cp.async
  int num_q_heads;
  int num_kv_heads;
  int head_size;
  float scale_log2;  // softmax scale * log2(e)
  float scale;       // softmax scale (soft-cap)
  float softcap;     // 0: none
  float v_scale;     // dequantisation of V (fp8 KV; 1 otherwise); k_scale is folded into scale/scale_log2
  int sliding_window;
  const float* sinks;  // [num_q_heads] or null
  bool causal;
  bool hnd;
};

template <int D>
struct Fa3Traits {
  static constexpr int kConsumerWGs = D <= 64 ? 3 : 2;
  static constexpr int kBlockM = 64 * kConsumerWGs;
  // Head 256: 80 keys per tile (not 64), so S = Q K^T runs m64n80 wgmmas, whose operands cost less shared
  // memory bandwidth per FLOP; 2 stages of 80 x 256 K and V tiles plus Q fill 225 KB.
  static constexpr int kBlockN = D <= 128 ? 128 : 80;
  static constexpr int kStages = D <= 64 ? 4 : 2;
  static constexpr int kChunks = D / 64;
  static constexpr int kQChunkBytes = kBlockM * 128;
  static constexpr int kKvChunkBytes = kBlockN * 128;
  static constexpr int kQBytes = kQChunkBytes * kChunks;
  static constexpr int kKvBytes = kKvChunkBytes * kChunks;  // one K (or V) tile
  static constexpr int kOffK = kQBytes;
  static constexpr int kOffV = kOffK + kStages * kKvBytes;
  static constexpr int kOffBar = kOffV + kStages * kKvBytes;
  static constexpr int kSmemBytes = kOffBar + 8 * (1 + 4 * kStages) + 1024;  // + 1024: alignment slack
  static constexpr int kThreads = 128 * (kConsumerWGs + 1);  // warpgroups 0..NW-1 consume, NW produces
  // Registers after setmaxnreg: the CTA holds kThreads x (65536 / kThreads) registers, and an increase the
  // pool cannot cover would block setmaxnreg.inc forever.
  static constexpr int kConsumerRegs = kConsumerWGs == 3 ? 160 : 224;
  static constexpr int kProducerRegs = kConsumerWGs == 3 ? 32 : 56;
  static_assert(128 * (kConsumerWGs * kConsumerRegs + kProducerRegs) <= 65536, "register budget");
  static_assert(kSmemBytes <= 232448, "shared memory per CTA");
};

#ifdef PAGODA_FA3_DEVICE

using cuda_convert::pack2;
using attention_device::smem_u32;
__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, int phase) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_u32(bar)), "r"(phase)
        : "memory");
  } while (!done);
}
__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\n" ::
          "r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
using attention_device::cp_async_16_zfill;
// Arrives on the mbarrier when this thread's earlier cp.async copies have landed (counted in its init count).
__device__ __forceinline__ void cp_async_arrive(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
template <int N>
__device__ __forceinline__ void pin(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i]));
}
template <int N>
__device__ __forceinline__ void pin(uint32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i]));
}

// Shared-memory matrix descriptor, 128-byte swizzle. K-major: SBO = 1024 (8 rows of 128 B), LBO unused.
// MN-major: LBO = bytes between 64-element chunks of the MN dimension, SBO = 1024 (8 K rows).
__device__ __forceinline__ uint64_t desc_sw128(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  uint64_t d = 0;
  d |= uint64_t((addr & 0x3FFFF) >> 4);
  d |= uint64_t((lbo >> 4) & 0x3FFF) << 16;
  d |= uint64_t((sbo >> 4) & 0x3FFF) << 32;
  d |= uint64_t(1) << 62;
  return d;
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float fast_tanh(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}


constexpr float kNegInf = -__builtin_huge_valf();

#endif  // PAGODA_FA3_DEVICE

template <typename T, int D>
__global__ void __launch_bounds__(Fa3Traits<D>::kThreads, 1)
    fa3_prefill_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tkv, Fa3Args a) {
#ifdef PAGODA_FA3_DEVICE
  using Tr = Fa3Traits<D>;
  constexpr int BM = Tr::kBlockM, BN = Tr::kBlockN, S = Tr::kStages, NW = Tr::kConsumerWGs;
  constexpr int kProducer = 128 * NW;  // first producer thread
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  uint8_t* smem = smem_raw + (((raw + 1023) & ~1023u) - raw);
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + Tr::kOffBar);
  uint64_t* q_full = bars;
  uint64_t* k_full = bars + 1;
  uint64_t* v_full = bars + 1 + S;
  uint64_t* k_empty = bars + 1 + 2 * S;
  uint64_t* v_empty = bars + 1 + 3 * S;

  const int4 item = a.work[blockIdx.x];
  const int seq = item.x, m_block = item.y, q_start = item.z, q_len = item.w;
  const int h = blockIdx.y;
  const int kvh = h / (a.num_q_heads / a.num_kv_heads);
  const int ctx = a.seq_lens[seq];
  const int first_pos = ctx - q_len;
  const int row0 = m_block * BM;                       // first query token (within the sequence) of the tile
  const int last_row = min(q_len, row0 + BM) - 1;      // last valid one
  const int kv_end = a.causal ? min(ctx, first_pos + last_row + 1) : ctx;
  const int kv_begin = a.sliding_window > 0 ? max(0, first_pos + row0 - a.sliding_window + 1) : 0;
  const int n_first = kv_begin / BN;
  const int n_last = (kv_end - 1) / BN;
  const int n_tiles = n_last - n_first + 1;  // tiles run from n_last down to n_first

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const bool tma_kv = a.rows_per_load == BN;
  if (threadIdx.x == 0) {
    mbar_init(q_full, 1);
    const int fill_count = tma_kv ? 1 : 128;  // TMA: one expect_tx arrival; cp.async: every producer thread
    for (int s = 0; s < S; ++s) {
      mbar_init(&k_full[s], fill_count);
      mbar_init(&v_full[s], fill_count);
      mbar_init(&k_empty[s], 4 * NW);  // one arrival per consumer warp
      mbar_init(&v_empty[s], 4 * NW);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (warp >= 4 * NW) {
    // ---------------- producer warpgroup ----------------
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Tr::kProducerRegs) : "memory");
    const int* bt = a.block_tables + size_t(seq) * a.max_blocks_per_seq;
    if (threadIdx.x == kProducer) {
      mbar_expect_tx(q_full, Tr::kQBytes);
#pragma unroll
      for (int c = 0; c < Tr::kChunks; ++c)
        tma_load_3d(smem + c * Tr::kQChunkBytes, &tq, q_full, c * 64, h, q_start + row0);
    }
    if (tma_kv) {
      // Blocks hold whole tiles: one TMA box of BN rows per 64-column chunk, issued by one thread.
      if (threadIdx.x != kProducer) return;
      for (int it = 0; it < n_tiles; ++it) {
        const int n = n_last - it;
        const int stage = it % S;
        const int key = n * BN;
        const int b = key / a.block_size;
        const int blk = a.stage_first_block != nullptr ? a.stage_first_block[seq] + b : __ldg(bt + b);
        const int off = key - b * a.block_size;
        const int c1 = a.hnd ? off : kvh;
        const int c2 = a.hnd ? blk * a.num_kv_heads + kvh : blk * a.block_size + off;
        uint8_t* k_dst = smem + Tr::kOffK + stage * Tr::kKvBytes;
        uint8_t* v_dst = smem + Tr::kOffV + stage * Tr::kKvBytes;
        if (it >= S) mbar_wait(&k_empty[stage], ((it / S) + 1) & 1);
        mbar_expect_tx(&k_full[stage], Tr::kKvBytes);
#pragma unroll
        for (int c = 0; c < Tr::kChunks; ++c)
          tma_load_3d(k_dst + c * Tr::kKvChunkBytes, &tkv, &k_full[stage], c * 64, c1, c2);
        if (it >= S) mbar_wait(&v_empty[stage], ((it / S) + 1) & 1);
        mbar_expect_tx(&v_full[stage], Tr::kKvBytes);
#pragma unroll
        for (int c = 0; c < Tr::kChunks; ++c)
          tma_load_3d(v_dst + c * Tr::kKvChunkBytes, &tkv, &v_full[stage], D + c * 64, c1, c2);
      }
      return;
    }
    // 16-token pages anywhere in the cache: the 128 producer threads gather the tile with 16-byte cp.async
    // copies (consecutive threads read consecutive 16 bytes of a row: coalesced), writing the swizzled
    // layout TMA would have written; each thread's copies arrive on the stage's barrier when they land.
    // Rows past the context whose page is unmapped are zero-filled.
    constexpr int G = D / 8;          // 16-byte granules per row
    constexpr int kRowStep = 128 / G;  // rows covered by one pass of the 128 threads
    constexpr int kRowsPerThread = BN / kRowStep;
    const int pt = threadIdx.x - kProducer;
    const int g = pt % G, r0 = pt / G;
    const int tok_step = a.hnd ? 1 : a.num_kv_heads;  // cache rows (of 2D elements) between consecutive tokens
    const T* kv = static_cast<const T*>(a.kv_cache);
    const uint32_t k_smem = smem_u32(smem + Tr::kOffK), v_smem = smem_u32(smem + Tr::kOffV);
    const uint32_t dst0 = (g / 8) * Tr::kKvChunkBytes;
    for (int it = 0; it < n_tiles; ++it) {
      const int n = n_last - it;
      const int stage = it % S;
      // Lane p of every warp: the cache row of page p's first token for this KV head (-1: unmapped).
      int page_row = -1;
      const int pkey = n * BN + lane * 16;
      if (lane < BN / 16 && pkey < ctx) {
        const int b = pkey / a.block_size;
        const int blk = __ldg(bt + b);
        const int off = pkey - b * a.block_size;
        page_row = a.hnd ? (blk * a.num_kv_heads + kvh) * a.block_size + off
                         : (blk * a.block_size + off) * a.num_kv_heads + kvh;
      }
      auto gather = [&](uint32_t base, int col) {
#pragma unroll 4
        for (int i = 0; i < kRowsPerThread; ++i) {
          const int r = r0 + i * kRowStep;
          const int pr = __shfl_sync(0xffffffffu, page_row, r / 16);
          const bool valid = pr >= 0;
          const T* src = valid ? kv + size_t(pr + (r % 16) * tok_step) * (2 * D) + col + g * 8 : kv;
          cp_async_16_zfill(base + dst0 + r * 128 + (((g % 8) ^ (r % 8)) << 4), src, valid ? 16 : 0);
        }
      };
      if (it >= S) mbar_wait(&k_empty[stage], ((it / S) + 1) & 1);
      gather(k_smem + stage * Tr::kKvBytes, 0);
      cp_async_arrive(&k_full[stage]);
      if (it >= S) mbar_wait(&v_empty[stage], ((it / S) + 1) & 1);
      gather(v_smem + stage * Tr::kKvBytes, D);
      cp_async_arrive(&v_full[stage]);
    }
    return;
  }

  // ---------------- consumer warpgroups ----------------
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Tr::kConsumerRegs) : "memory");
  const int wg = warp / 4;                   // 0 .. NW-1: rows wg*64 .. +63 of the tile
  const int wrow = (warp % 4) * 16 + lane / 4;  // this thread's first row within the warpgroup's 64
  const int t0 = row0 + wg * 64 + wrow;         // query token (within the sequence) of the thread's rows t0, t0+8
  const int pos0 = first_pos + t0, pos1 = pos0 + 8;
  constexpr int NS = BN / 2;  // S accumulators per thread (64 x BN over 128 threads)
  constexpr int NO = D / 2;   // O accumulators per thread
  float o[NO];
#pragma unroll
  for (int i = 0; i < NO; ++i) o[i] = 0.f;
  float s[NS];
  uint32_t pfrag[BN / 16][4];
  float m0 = kNegInf, m1 = kNegInf, l0 = 0.f, l1 = 0.f;

  const uint32_t q_base = smem_u32(smem) + wg * 64 * 128;
  const uint32_t k_base = smem_u32(smem + Tr::kOffK);
  const uint32_t v_base = smem_u32(smem + Tr::kOffV);

  auto issue_s = [&](int stage) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t off = (kk % 4) * 32;  // 16 elements along K within the 128-byte swizzle row
      const uint64_t da = desc_sw128(q_base + (kk / 4) * Tr::kQChunkBytes + off, 16, 1024);
      const uint64_t db = desc_sw128(k_base + stage * Tr::kKvBytes + (kk / 4) * Tr::kKvChunkBytes + off, 16, 1024);
      Wgmma<T, BN>::ss(s, da, db, kk > 0 ? 1 : 0);
    }
  };
  auto issue_pv = [&](int stage) {
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      const uint64_t db = desc_sw128(v_base + stage * Tr::kKvBytes + kk * 16 * 128, Tr::kKvChunkBytes, 1024);
      Wgmma<T, D>::rs(o, pfrag[kk], db, 1);
    }
  };
  // Soft-caps and masks the tile in s, updates the running max m (in logit units) and the row sums l;
  // exponentiates s in place (exp2 of one FFMA per score); sets the correction factors for O and returns
  // whether O needs them (false: the maxima did not move, both factors are 1).
  const float sl = a.softcap > 0.f ? 1.4426950408889634f : a.scale_log2;  // logit -> log2 units
  auto softmax = [&](int n, float& alpha0, float& alpha1) -> bool {
    const int k0 = n * BN;
    const bool need_mask = k0 + BN > ctx || (a.causal && k0 + BN - 1 > first_pos + row0) ||
                           (a.sliding_window > 0 && k0 <= first_pos + last_row - a.sliding_window);
    if (a.softcap > 0.f) {
      const float inv = a.scale / a.softcap;
#pragma unroll
      for (int i = 0; i < NS; ++i) s[i] = a.softcap * fast_tanh(s[i] * inv);
    }
    if (need_mask) {
      // Row r keeps keys lo_r .. hi_r; as offsets from this thread's first column (k0 + 2 * (lane % 4)) the
      // test per score is two compares against the compile-time column 8 j + (e & 1).
      const int c0 = k0 + 2 * (lane % 4);
      const int hi0 = (a.causal ? min(ctx - 1, pos0) : ctx - 1) - c0;
      const int hi1 = (a.causal ? min(ctx - 1, pos1) : ctx - 1) - c0;
      const int lo0 = a.sliding_window > 0 ? pos0 - a.sliding_window + 1 - c0 : -BN;
      const int lo1 = a.sliding_window > 0 ? pos1 - a.sliding_window + 1 - c0 : -BN;
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int c = 8 * j + (e & 1);
          if (c > (e < 2 ? hi0 : hi1) || c < (e < 2 ? lo0 : lo1)) s[4 * j + e] = kNegInf;
        }
      }
    }
    float mx0 = m0, mx1 = m1;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      mx0 = fmaxf(mx0, fmaxf(s[4 * j], s[4 * j + 1]));
      mx1 = fmaxf(mx1, fmaxf(s[4 * j + 2], s[4 * j + 3]));
    }
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    // Lazy rescale: the running maxima move (and O is rescaled) only when some row of the warp grew by
    // more than 2^8 in exp2 units; otherwise the tile is exponentiated against the old maxima, its
    // probabilities at most 2^8 (exact in fp32 sums, bf16/fp16 keep their relative precision).
    const bool grow = (mx0 - m0) * sl > 8.f || (mx1 - m1) * sl > 8.f;  // -inf -> finite: grows; NaN: no
    const bool rescale = __any_sync(0xffffffffu, grow);
    if (rescale) {
      const float nb0 = mx0 == kNegInf ? 0.f : mx0 * sl;
      const float nb1 = mx1 == kNegInf ? 0.f : mx1 * sl;
      alpha0 = fast_exp2(m0 * sl - nb0);  // m = -inf -> 0 (O and l are 0 then anyway)
      alpha1 = fast_exp2(m1 * sl - nb1);
      m0 = mx0;
      m1 = mx1;
    } else {
      alpha0 = alpha1 = 1.f;
    }
    const float base0 = m0 == kNegInf ? 0.f : m0 * sl;
    const float base1 = m1 == kNegInf ? 0.f : m1 * sl;
    float sum0 = 0.f, sum1 = 0.f;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      s[4 * j] = fast_exp2(fmaf(s[4 * j], sl, -base0));
      s[4 * j + 1] = fast_exp2(fmaf(s[4 * j + 1], sl, -base0));
      s[4 * j + 2] = fast_exp2(fmaf(s[4 * j + 2], sl, -base1));
      s[4 * j + 3] = fast_exp2(fmaf(s[4 * j + 3], sl, -base1));
      sum0 += s[4 * j] + s[4 * j + 1];
      sum1 += s[4 * j + 2] + s[4 * j + 3];
    }
    l0 = l0 * alpha0 + sum0;
    l1 = l1 * alpha1 + sum1;
    return rescale;
  };
  auto to_p = [&]() {
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      pfrag[kk][0] = pack2<T>(s[8 * kk + 0], s[8 * kk + 1]);
      pfrag[kk][1] = pack2<T>(s[8 * kk + 2], s[8 * kk + 3]);
      pfrag[kk][2] = pack2<T>(s[8 * kk + 4], s[8 * kk + 5]);
      pfrag[kk][3] = pack2<T>(s[8 * kk + 6], s[8 * kk + 7]);
    }
  };
  auto release = [&](uint64_t* bar) {
    __syncwarp();
    if (lane == 0) mbar_arrive(bar);
  };

  // Turns between the consumer warpgroups, round robin (named barrier 1 + w is warpgroup w's turn): a
  // warpgroup issues its GEMMs only in its turn, then hands the turn to the next, so the others' softmax
  // runs while its GEMMs keep the tensor cores busy. Each warpgroup has n_tiles + 1 issue points; the last
  // warpgroup opens the first turn of warpgroup 0 and does not hand over after its last one.
  int turns_left = n_tiles + 1;
  auto turn_begin = [&]() { asm volatile("bar.sync %0, 256;\n" ::"r"(1 + wg) : "memory"); };
  auto turn_end = [&]() {
    if (--turns_left > 0 || wg != NW - 1)
      asm volatile("bar.arrive %0, 256;\n" ::"r"(1 + (wg + 1) % NW) : "memory");
  };
  if (wg == NW - 1) asm volatile("bar.arrive 1, 256;\n" ::: "memory");

  mbar_wait(q_full, 0);
  // Prologue: S of the first tile, its softmax.
  mbar_wait(&k_full[0], 0);
  if (!tma_kv) fence_proxy_async();  // cp.async (generic proxy) writes -> wgmma (async proxy) reads
  turn_begin();
  wgmma_fence();
  issue_s(0);
  wgmma_commit();
  turn_end();
  wgmma_wait<0>();
  pin(s);
  release(&k_empty[0]);
  {
    float a0, a1;  // O is still 0: no correction
    softmax(n_last, a0, a1);
  }
  to_p();
  for (int it = 1; it < n_tiles; ++it) {
    const int cur = (it - 1) % S, nxt = it % S;
    mbar_wait(&k_full[nxt], (it / S) & 1);
    mbar_wait(&v_full[cur], ((it - 1) / S) & 1);
    if (!tma_kv) fence_proxy_async();
    turn_begin();
    wgmma_fence();
    issue_s(nxt);
    wgmma_commit();
    issue_pv(cur);
    wgmma_commit();
    turn_end();
    wgmma_wait<1>();  // S of the next tile is ready; P V of the current one may still run
    pin(s);
    release(&k_empty[nxt]);
    float a0, a1;
    const bool rescale = softmax(n_last - it, a0, a1);
    wgmma_wait<0>();
    pin(o);
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) pin(pfrag[kk]);
    release(&v_empty[cur]);
    if (rescale) {
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        o[4 * j] *= a0;
        o[4 * j + 1] *= a0;
        o[4 * j + 2] *= a1;
        o[4 * j + 3] *= a1;
      }
    }
    to_p();
  }
  {
    const int cur = (n_tiles - 1) % S;
    mbar_wait(&v_full[cur], ((n_tiles - 1) / S) & 1);
    if (!tma_kv) fence_proxy_async();
    turn_begin();
    wgmma_fence();
    issue_pv(cur);
    wgmma_commit();
    turn_end();
    wgmma_wait<0>();
    pin(o);
    release(&v_empty[cur]);
  }

  // Epilogue: row sums across the quad, sinks, normalise, store valid rows.
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  float f0 = 1.f, f1 = 1.f;
  if (a.sinks != nullptr) {
    const float sk = a.sinks[h] * 1.4426950408889634f;
    const float ms0 = m0 * sl, ms1 = m1 * sl;
    const float mm0 = fmaxf(ms0, sk), mm1 = fmaxf(ms1, sk);
    f0 = fast_exp2(ms0 - mm0);
    f1 = fast_exp2(ms1 - mm1);
    l0 = l0 * f0 + fast_exp2(sk - mm0);
    l1 = l1 * f1 + fast_exp2(sk - mm1);
  }
  f0 = l0 > 0.f ? f0 * a.v_scale / l0 : 0.f;
  f1 = l1 > 0.f ? f1 * a.v_scale / l1 : 0.f;
  T* out = static_cast<T*>(a.out);
  const size_t hs = size_t(a.head_size);
  const int c_lane = 2 * (lane % 4);
  if (t0 < q_len) {
    T* row = out + (size_t(q_start + t0) * a.num_q_heads + h) * hs;
#pragma unroll
    for (int j = 0; j < D / 8; ++j)
      *reinterpret_cast<uint32_t*>(row + 8 * j + c_lane) = pack2<T>(o[4 * j] * f0, o[4 * j + 1] * f0);
  }
  if (t0 + 8 < q_len) {
    T* row = out + (size_t(q_start + t0 + 8) * a.num_q_heads + h) * hs;
#pragma unroll
    for (int j = 0; j < D / 8; ++j)
      *reinterpret_cast<uint32_t*>(row + 8 * j + c_lane) = pack2<T>(o[4 * j + 2] * f1, o[4 * j + 3] * f1);
  }
#endif  // PAGODA_FA3_DEVICE
}

}  // namespace pagoda::flash_attn_detail
