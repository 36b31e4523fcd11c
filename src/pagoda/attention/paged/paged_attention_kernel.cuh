// PRIVATE to paged/: the tensor-core paged-attention kernel (FlashAttention-2 algorithm:
// mma.sync m16n8k16, ldmatrix, cp.async double buffering, online softmax in fp32).
//
// One CTA (4 warps, 128 threads) computes a tile of 64 "rows" of one sequence and one KV head, a row being
// (query token, query head of the KV head's GQA group): row R -> token R / G, head kv_head * G + R % G.
// Each warp owns 16 rows. KV tiles of BN keys are gathered from the paged cache through the block table.
// With KV splits, the CTA covers one contiguous range of KV tiles and writes unnormalised partials that
// split_kv_merge.cuh combines (in the decode kernel itself, or in merge_partials_kernel of paged_attention.cu).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "pagoda/attention/device_common.cuh"
#include "pagoda/attention/mma_sm80.cuh"
#include "pagoda/attention/paged/split_kv_merge.cuh"
#include "pagoda/attention/paged/paged_attention.h"
#include "pagoda/attention/paged/paged_attention_args.cuh"
#include "pagoda/core/cuda_convert.cuh"

namespace pagoda::paged_detail {

using attention_device::cp_async_16;
using attention_device::cp_async_commit;
using attention_device::cp_async_wait;
using attention_device::ldmatrix_x4;
using attention_device::ldmatrix_x4_trans;
using attention_device::mma16816;
using attention_device::smem_u32;
using attention_device::swz;
using cuda_convert::pack2;

struct KvSame {};
struct KvE4M3 {};
struct KvE5M2 {};

// 8 fp8 values of the Kv kind (8 bytes) to 8 elements of T (exact).
template <typename T, typename Kv>
__device__ __forceinline__ uint4 fp8x8_to(uint2 v) {
  return cuda_convert::widen_fp8x8<T, std::is_same_v<Kv, KvE4M3> ? __NV_E4M3 : __NV_E5M2>(v);
}

// The KV tiles [begin, end) of BN keys that the CTA of (rows row_start.., KV split `split` of `nsplit`) covers:
// the keys its query rows may attend (causal end, sliding-window start), cut into equal runs of tiles.
struct TileRange {
  int begin, end, kv_end;
};
__device__ __forceinline__ TileRange cta_tile_range(const PagedAttentionParams& p, int row_start, int rows_total,
                                                    int first_pos, int ctx, int G, int split, int nsplit, int BN) {
  const int last_row = min(rows_total, row_start + kBlockM) - 1;
  const int min_pos = first_pos + row_start / G;
  const int max_pos = first_pos + max(last_row, row_start) / G;
  const int kv_end = p.causal ? min(ctx, max_pos + 1) : ctx;
  const int kv_begin = (p.sliding_window > 0) ? max(0, min_pos - p.sliding_window + 1) : 0;
  const int t_first = kv_begin / BN, t_last = (kv_end + BN - 1) / BN;
  const int per_split = (t_last - t_first + nsplit - 1) / nsplit;
  const int begin = t_first + split * per_split;
  return {begin, min(t_last, begin + per_split), kv_end};
}

// The factor that turns a row's unnormalised output (log2-domain max m, sum l) into the final one: the
// attention-sink logit of head h joins the softmax denominator; v_scale dequantises fp8 V.
__device__ __forceinline__ float output_scale(float m, float l, const float* sinks, int h, float v_scale) {
  float o_scale = 1.f;
  if (sinks) {
    const float sink = sinks[h] * kLog2e;
    const float mf = fmaxf(m, sink);
    o_scale = exp2f(m - mf);
    l = l * o_scale + exp2f(sink - mf);
  }
  return l > 0.f ? o_scale * v_scale / l : 0.f;
}

template <typename T, typename Kv, int D, int BN, bool kDecodeOnly = false>
struct Smem {
  static constexpr int kChunks = D / 8;
  // The decode-only kernel reads 16 query rows; its smaller footprint lets more CTAs share an SM.
  static constexpr int kQRows = kDecodeOnly ? 16 : kBlockM;
  static constexpr bool kFp8 = !std::is_same_v<Kv, KvSame>;
  // cp.async pipeline depth: 3 stages while two CTAs still fit an SM (D <= 128), else 2. The fp8 decode
  // kernel keeps 2 so that three CTAs share an SM: its in-kernel conversion makes it the CTA count, not
  // the bytes in flight, that sets its rate, while 16-bit KV, bound by the bytes in flight, gains from the
  // third stage.
  static constexpr int kStages = (D <= 128 && !(kDecodeOnly && kFp8)) ? 3 : 2;
  // CTAs of the decode-only kernel per SM that its launch bounds promise (registers <= 65536 / (128 x it)).
  static constexpr int kDecodeCtasPerSm = kFp8 ? 3 : 2;
  // 16-bit KV lands in kStages K/V tiles; fp8 KV lands raw in kStages staging tiles and is converted
  // into one K/V tile before use.
  static constexpr int kTiles = kFp8 ? 1 : kStages;
  static constexpr size_t kQBytes = size_t(kQRows) * kChunks * 16;
  static constexpr size_t kTileBytes = size_t(2) * kTiles * BN * kChunks * 16;
  static constexpr size_t kStagingBytes = kFp8 ? size_t(2) * kStages * BN * D : 0;
  // Decode tiles split keys across warps; the warps' states are merged through shared memory: (m, l) and
  // rows of kMergeStride floats (D + 8: a warp's 8-byte stores and the merge's 8-byte loads hit every bank
  // pair exactly twice, the least for 256 bytes).
  static constexpr int kMergeStride = D + 8;
  static constexpr size_t kMergeBytes = size_t(4) * 16 * (kMergeStride + 2) * 4;
  // The cluster merge of KV splits (SM 9.0, split_kv_merge.cuh): the CTA's merged rows stay in shared
  // memory, after the warps' merge area, for the cluster's other CTAs to read: m[16], l[16], o[16][D].
  static constexpr size_t kPartialOffset = kQBytes + kMergeBytes;
  static constexpr size_t kPartialBytes = size_t(16) * (D + 2) * 4;
  static constexpr size_t kMain = kQBytes + kTileBytes + kStagingBytes;
  static constexpr size_t kBytes =
      kMain > kPartialOffset + kPartialBytes ? kMain : kPartialOffset + kPartialBytes;
  // Warps split the keys of a tile (16 each) when the tile has at most 16 query rows (decode).
  static constexpr bool kCanWarpSplit = BN == 64;
};

// The split planner's slots for fp8 decode steps (kDecodeCtasPerSm, paged_attention.h) are the CTAs the fp8
// decode kernel's launch bounds promise.
static_assert(Smem<__nv_bfloat16, KvE4M3, 128, 64, true>::kDecodeCtasPerSm == kDecodeCtasPerSm &&
                  Smem<__half, KvE5M2, 128, 64, true>::kDecodeCtasPerSm == kDecodeCtasPerSm,
              "the planner's fp8 decode slots and the fp8 decode kernel's occupancy differ");

// kSmemPartial (the decode kernel of a cluster merge): the CTA's merged rows stay in shared memory at
// S::kPartialOffset instead of going to the output or the global partials.
template <typename T, typename Kv, int D, int BN, bool kSplit, typename S, bool kSmemPartial = false>
__device__ __forceinline__ void attention_tile(const KernelArgs& args, uint4* smem) {
  constexpr int CH = S::kChunks;
  constexpr int kStages = S::kStages;
  // n-tiles of S per warp: all BN keys, or the warp's 16 keys of the tile when warps split the keys.
  constexpr int kNT = kSplit ? 2 : BN / 8;
  constexpr int kDT = D / 8;   // n-tiles of O per warp
  const PagedAttentionParams& p = args.p;
  uint4* sQ = smem;
  uint4* sK = sQ + S::kQRows * CH;
  uint4* sV = sK + S::kTiles * BN * CH;
  uint8_t* staging = reinterpret_cast<uint8_t*>(sV + S::kTiles * BN * CH);  // fp8: [stage][K|V][BN][D]

  const WorkItem wi = work_item(args);
  const int seq = wi.seq, row_start = wi.row_start, split = wi.split, nsplit = wi.nsplit;
  const int kvh = wi.kvh, G = wi.G, q_begin = wi.q_begin, ctx = wi.ctx, first_pos = wi.first_pos;
  const int rows_total = wi.rows_total;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int hs = p.head_size;
  const size_t kv_row_stride = size_t(2) * hs;  // elements between consecutive (token, head) slots
  // Decode-shaped tile (<= 16 query rows): every warp takes rows 0-15 and 16 of each tile's 64 keys.
  constexpr bool warp_split = kSplit;
  const int row_base = warp_split ? 0 : warp * 16;
  const int koff = warp_split ? warp * 16 : 0;  // the warp's first key within a tile

  const int* btab = p.block_tables + size_t(seq) * p.max_blocks_per_seq;
  const int bs_shift = p.block_size_log2;
  // A decode CTA of split 0 without a sliding window starts at tile 0: the block-table entries of its
  // prologue tiles are read now, beside the sequence's metadata, not after it (one dependent load less
  // before the first KV bytes).
  const bool pre_blocks = kSplit && bs_shift >= 4 && split == 0 && p.sliding_window <= 0;
  int pre_blk[kStages - 1];
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    const int idx = (st * BN + koff) >> (bs_shift >= 0 ? bs_shift : 0);
    pre_blk[st] = pre_blocks && idx < p.max_blocks_per_seq ? btab[idx] : 0;
  }

  // ---- the CTA's key range ----
  const TileRange range = cta_tile_range(p, row_start, rows_total, first_pos, ctx, G, split, nsplit, BN);
  const int tile_begin = range.begin, tile_end = range.end;

  // A warp's 16 keys of a tile lie in one block when the block size is a power of two >= 16 (the keys start
  // at a multiple of 16): then one block-table read serves them all (warp_blk, set per tile by load_tile).
  const bool one_block_per_warp = kSplit && bs_shift >= 4;
  int warp_blk = 0;
  auto slot_ptr = [&](int key) -> size_t {  // element offset of the (key, kv head) slot
    int blk, off;
    if (one_block_per_warp) {
      blk = warp_blk;
      off = key & (p.block_size - 1);
    } else if (bs_shift >= 0) {  // power-of-two block size: no integer division
      blk = btab[key >> bs_shift];
      off = key & (p.block_size - 1);
    } else {
      blk = btab[key / p.block_size];
      off = key % p.block_size;
    }
    if (p.layout == KvLayout::kNHD) return ((size_t(blk) * p.block_size + off) * p.num_kv_heads + kvh) * kv_row_stride;
    return ((size_t(blk) * p.num_kv_heads + kvh) * p.block_size + off) * kv_row_stride;
  };
  // Fast loads (key-split body, 16-bit KV, head_size == D): a warp's 16 keys lie in one block at a fixed
  // stride, so a run of 16 keys inside the context is copied without per-key block-table reads, bounds
  // checks or index arithmetic (the generic loop costs ~4x the instructions; the decode loop is issue bound).
  const bool fast_loads = one_block_per_warp && hs == D;
  const size_t key_stride = p.layout == KvLayout::kNHD ? size_t(p.num_kv_heads) * kv_row_stride : kv_row_stride;
  // Who copies which KV rows: in the key-split body each warp loads (and, for fp8, converts) only its own
  // 16 keys, so warps run independent pipelines synchronised by __syncwarp; otherwise the CTA loads the tile.
  const int ld_row0 = kSplit ? koff : 0;
  const int ld_rows = kSplit ? 16 : BN;
  const int ld_first = kSplit ? lane : tid;
  const int ld_step = kSplit ? 32 : kThreads;
  // Issues the asynchronous copies of one KV tile into pipeline stage `stage`.
  int forced_blk = -1;  // >= 0: the block of this load_tile's warp keys, read ahead (pre_blk)
  auto load_tile = [&](int tile, int stage) {
    if (one_block_per_warp) {
      const int first = tile * BN + ld_row0;
      warp_blk = forced_blk >= 0 ? forced_blk : first < ctx ? btab[first >> bs_shift] : 0;
    }
    if constexpr (S::kFp8) {
      constexpr int FCH = D / 16;  // 16-byte chunks of an fp8 row
      uint8_t* k_dst = staging + size_t(stage) * 2 * BN * D;
      uint8_t* v_dst = k_dst + BN * D;
      const uint8_t* kv = static_cast<const uint8_t*>(p.kv_cache);
      if constexpr (kSplit) {
        const int first = tile * BN + ld_row0;
        if (fast_loads && first + 16 <= ctx) {
          static_assert(32 % FCH == 0, "fast loads: a warp pass covers whole rows");
          constexpr int kRowsPerPass = 32 / FCH;
          const int c = lane % FCH, r0 = lane / FCH;
          const uint8_t* src = kv + slot_ptr(first + r0) + c * 16;
#pragma unroll
          for (int k = 0; k < 16 / kRowsPerPass; ++k) {
            const int r = ld_row0 + r0 + k * kRowsPerPass;
            cp_async_16(k_dst + r * D + c * 16, src);
            cp_async_16(v_dst + r * D + c * 16, src + D);
            src += kRowsPerPass * key_stride;
          }
          return;
        }
      }
      for (int i = ld_first; i < ld_rows * FCH; i += ld_step) {
        int r = ld_row0 + i / FCH, c = i % FCH, key = tile * BN + r;
        if (key < ctx && c * 16 < hs) {
          size_t base = slot_ptr(key) + c * 16;
          cp_async_16(k_dst + r * D + c * 16, kv + base);
          cp_async_16(v_dst + r * D + c * 16, kv + base + hs);
        } else {
          *reinterpret_cast<uint4*>(k_dst + r * D + c * 16) = make_uint4(0, 0, 0, 0);
          *reinterpret_cast<uint4*>(v_dst + r * D + c * 16) = make_uint4(0, 0, 0, 0);
        }
      }
    } else {
      uint4* k_dst = sK + stage * BN * CH;
      uint4* v_dst = sV + stage * BN * CH;
      const T* kv = static_cast<const T*>(p.kv_cache);
      if constexpr (kSplit) {
        const int first = tile * BN + ld_row0;
        if (fast_loads && first + 16 <= ctx) {
          static_assert(32 % CH == 0, "fast loads: a warp pass covers whole rows");
          constexpr int kRowsPerPass = 32 / CH;
          const int c = lane % CH, r0 = lane / CH;
          const T* src = kv + slot_ptr(first + r0) + c * 8;
#pragma unroll
          for (int k = 0; k < 16 / kRowsPerPass; ++k) {
            const int pos = swz<CH>(ld_row0 + r0 + k * kRowsPerPass, c);
            cp_async_16(&k_dst[pos], src);
            cp_async_16(&v_dst[pos], src + D);
            src += kRowsPerPass * key_stride;
          }
          return;
        }
      }
      for (int i = ld_first; i < ld_rows * CH; i += ld_step) {
        int r = ld_row0 + i / CH, c = i % CH, key = tile * BN + r;
        int pos = swz<CH>(r, c);
        if (key < ctx && c * 8 < hs) {
          size_t base = slot_ptr(key) + c * 8;
          cp_async_16(&k_dst[pos], kv + base);
          cp_async_16(&v_dst[pos], kv + base + hs);
        } else {
          k_dst[pos] = make_uint4(0, 0, 0, 0);
          v_dst[pos] = make_uint4(0, 0, 0, 0);
        }
      }
    }
  };
  // fp8: staging[stage] -> the K/V tile in T (exact conversion).
  auto convert_tile = [&](int stage) {
    if constexpr (S::kFp8) {
      constexpr int FCH = D / 16;
      const uint8_t* k_src = staging + size_t(stage) * 2 * BN * D;
      const uint8_t* v_src = k_src + BN * D;
      // Chunk c (16 fp8 values) of row r, loaded as kr / vr, widened into the K/V tile.
      auto store_widened = [&](int r, int c, uint4 kr, uint4 vr) {
        sK[swz<CH>(r, 2 * c)] = fp8x8_to<T, Kv>(make_uint2(kr.x, kr.y));
        sK[swz<CH>(r, 2 * c + 1)] = fp8x8_to<T, Kv>(make_uint2(kr.z, kr.w));
        sV[swz<CH>(r, 2 * c)] = fp8x8_to<T, Kv>(make_uint2(vr.x, vr.y));
        sV[swz<CH>(r, 2 * c + 1)] = fp8x8_to<T, Kv>(make_uint2(vr.z, vr.w));
      };
      if constexpr (kSplit) {
        // The warp's 16 rows: every lane's loads first, then the conversions (one shared-memory latency).
        constexpr int kIters = 16 * FCH / 32;
        static_assert(16 * FCH % 32 == 0, "a warp pass covers whole chunks");
        uint4 kr[kIters], vr[kIters];
#pragma unroll
        for (int k = 0; k < kIters; ++k) {
          const int i = lane + 32 * k, r = ld_row0 + i / FCH, c = i % FCH;
          kr[k] = *reinterpret_cast<const uint4*>(k_src + r * D + c * 16);
          vr[k] = *reinterpret_cast<const uint4*>(v_src + r * D + c * 16);
        }
#pragma unroll
        for (int k = 0; k < kIters; ++k) {
          const int i = lane + 32 * k;
          store_widened(ld_row0 + i / FCH, i % FCH, kr[k], vr[k]);
        }
      } else {
        for (int i = ld_first; i < ld_rows * FCH; i += ld_step) {
          const int r = ld_row0 + i / FCH, c = i % FCH;
          store_widened(r, c, *reinterpret_cast<const uint4*>(k_src + r * D + c * 16),
                        *reinterpret_cast<const uint4*>(v_src + r * D + c * 16));
        }
      }
    }
  };

  // The decode-only kernel may be launched programmatically behind the stream's previous kernel (SM 9.0,
  // decode_launch): what came before this point reads only the step's metadata (work item, sequence lengths,
  // block table), which the host uploads and no kernel writes. Q and the KV cache (the previous kernel's
  // output: RoPE and the cache write), and every write of this kernel, wait for that kernel's completion. A
  // no-op for a kernel launched without the attribute.
  attention_device::pdl_wait_for_prior_grid();

  // ---- Q tile (zero rows past the sequence and columns past head_size). The decode-only kernel's 16-row
  // tile (two chunks a thread) has its loads issued first, then the KV prologue's copies, and only then is
  // it stored, so that neither waits for the other. A 64-row tile (8-16 chunks a thread) is stored before
  // the prologue: holding it across the prologue spills registers ----
  constexpr int kQChunks = S::kQRows * CH;
  constexpr int kQIters = (kQChunks + kThreads - 1) / kThreads;
  constexpr bool kQAcrossPrologue = kQIters <= 2;
  const size_t q_stride = p.q_token_stride > 0 ? size_t(p.q_token_stride) : size_t(p.num_q_heads) * hs;
  auto load_q = [&](int i) {  // chunk i of the tile
    const int r = i / CH, c = i % CH, R = row_start + r;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (i < kQChunks && R < rows_total && c * 8 < hs) {
      const int tok = q_begin + R / G, h = kvh * G + R % G;
      v = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.q) + size_t(tok) * q_stride + size_t(h) * hs + c * 8);
    }
    return v;
  };
  uint4 qv[kQAcrossPrologue ? kQIters : 1];
  if constexpr (kQAcrossPrologue) {
#pragma unroll
    for (int k = 0; k < kQIters; ++k) qv[k] = load_q(tid + k * kThreads);
  } else {
    for (int i = tid; i < kQChunks; i += kThreads) sQ[swz<CH>(i / CH, i % CH)] = load_q(i);
  }

  // Prologue: stages 0 .. kStages-2 in flight. One commit group per stage, empty ones included, so that
  // wait_group<kStages-1> always means "the oldest tile has landed".
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    forced_blk = pre_blocks ? pre_blk[st] : -1;
    if (tile_begin + st < tile_end) load_tile(tile_begin + st, st);
    cp_async_commit();
  }
  forced_blk = -1;
  if constexpr (kQAcrossPrologue) {
#pragma unroll
    for (int k = 0; k < kQIters; ++k) {
      const int i = tid + k * kThreads;
      if (i < kQChunks) sQ[swz<CH>(i / CH, i % CH)] = qv[k];
    }
  }

  // Per-thread row state: rows r0 = row_base + lane/4 and r1 = r0 + 8.
  const int r_local[2] = {row_base + lane / 4, row_base + lane / 4 + 8};
  int q_pos[2];
  bool row_ok[2];
  float slope[2] = {0.f, 0.f};
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    int R = row_start + r_local[i];
    row_ok[i] = R < rows_total;
    q_pos[i] = first_pos + (row_ok[i] ? R / G : 0);
    if (p.alibi_slopes && row_ok[i]) slope[i] = p.alibi_slopes[kvh * G + R % G];
  }
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  float acc[kDT][4];
#pragma unroll
  for (int j = 0; j < kDT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
  const float qk_scale = p.scale * p.k_scale;
  const float qk_scale_log2 = qk_scale * kLog2e;
  // Tiles whose keys every valid row attends without soft-cap or ALiBi need no per-element masking: keys
  // below plain_end (the context, or for causal steps the first row's position + 1) and no sliding window.
  const bool plain_mask = p.softcap <= 0.f && !p.alibi_slopes && p.sliding_window <= 0;
  const int plain_end = p.causal ? min(ctx, first_pos + row_start / G + 1) : ctx;

  __syncthreads();  // the Q tile, written by every thread, is read by every warp

  for (int tile = tile_begin; tile < tile_end; ++tile) {
    const int it = tile - tile_begin;
    const int stage = it % kStages;
    if (tile + kStages - 1 < tile_end) load_tile(tile + kStages - 1, (it + kStages - 1) % kStages);
    cp_async_commit();
    cp_async_wait<kStages - 1>();
    if constexpr (kSplit) __syncwarp();
    else __syncthreads();
    if constexpr (S::kFp8) {
      convert_tile(stage);
      if constexpr (kSplit) __syncwarp();
      else __syncthreads();
    }
    const uint4* k_s = sK + (S::kFp8 ? 0 : stage) * BN * CH;
    const uint4* v_s = sV + (S::kFp8 ? 0 : stage) * BN * CH;

    // S = Q K^T for this warp's 16 rows x (all BN keys, or its 16 keys when warps split the tile).
    float s[kNT][4];
#pragma unroll
    for (int j = 0; j < kNT; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[4];
      ldmatrix_x4(a, &sQ[swz<CH>(row_base + (lane % 16), kk * 2 + lane / 16)]);
#pragma unroll
      for (int nn = 0; nn < kNT / 2; ++nn) {
        uint32_t b[4];
        ldmatrix_x4(b, &k_s[swz<CH>(koff + nn * 16 + (lane / 16) * 8 + (lane % 8), kk * 2 + (lane / 8) % 2)]);
        mma16816<T>(s[2 * nn], a, b);
        mma16816<T>(s[2 * nn + 1], a, b + 2);
      }
    }
    // Scale, soft-cap, ALiBi, mask; online softmax (log2 domain).
    float row_max[2] = {-INFINITY, -INFINITY};
    if (plain_mask && tile * BN + koff + kNT * 8 <= plain_end) {
#pragma unroll
      for (int j = 0; j < kNT; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float x = row_ok[e / 2] ? s[j][e] * qk_scale_log2 : -INFINITY;
          s[j][e] = x;
          row_max[e / 2] = fmaxf(row_max[e / 2], x);
        }
      }
    } else {
#pragma unroll
      for (int j = 0; j < kNT; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          int i = e / 2;
          int key = tile * BN + koff + j * 8 + (lane % 4) * 2 + (e % 2);
          float x = s[j][e] * qk_scale;
          if (p.softcap > 0.f) x = p.softcap * tanhf(x / p.softcap);
          x += slope[i] * float(key - q_pos[i]);
          bool ok = row_ok[i] && key < ctx && (!p.causal || key <= q_pos[i]) &&
                    (p.sliding_window <= 0 || key > q_pos[i] - p.sliding_window);
          x = ok ? x * kLog2e : -INFINITY;
          s[j][e] = x;
          row_max[i] = fmaxf(row_max[i], x);
        }
      }
    }
    float alpha[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      row_max[i] = fmaxf(row_max[i], __shfl_xor_sync(0xffffffff, row_max[i], 1));
      row_max[i] = fmaxf(row_max[i], __shfl_xor_sync(0xffffffff, row_max[i], 2));
      float m_new = fmaxf(m[i], row_max[i]);
      float m_use = m_new == -INFINITY ? 0.f : m_new;
      alpha[i] = exp2f(m[i] - m_use);
      m[i] = m_new;
      row_max[i] = m_use;
    }
    float row_sum[2] = {0.f, 0.f};
#pragma unroll
    for (int j = 0; j < kNT; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float pe = exp2f(s[j][e] - row_max[e / 2]);
        s[j][e] = pe;
        row_sum[e / 2] += pe;
      }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) l[i] = l[i] * alpha[i] + row_sum[i];  // quad-partial sums; reduced at the end
#pragma unroll
    for (int j = 0; j < kDT; ++j) {
      acc[j][0] *= alpha[0];
      acc[j][1] *= alpha[0];
      acc[j][2] *= alpha[1];
      acc[j][3] *= alpha[1];
    }
    // O += P V.
#pragma unroll
    for (int kk = 0; kk < kNT / 2; ++kk) {
      uint32_t a[4];
      a[0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
      a[1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
      a[2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      a[3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int dd = 0; dd < D / 16; ++dd) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, &v_s[swz<CH>(koff + kk * 16 + ((lane / 8) % 2) * 8 + (lane % 8), dd * 2 + lane / 16)]);
        mma16816<T>(acc[2 * dd], a, b);
        mma16816<T>(acc[2 * dd + 1], a, b + 2);
      }
    }
    // The stage is overwritten by a later load (by this warp alone in the key-split body).
    if constexpr (kSplit) __syncwarp();
    else __syncthreads();
  }
  cp_async_wait<0>();

  // Row sums: each row's elements live on the 4 threads of a quad.
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(0xffffffff, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffff, l[i], 2);
  }

  // Writes one row's final or partial result. o2(d) gives the unnormalised output of columns d and d + 1
  // (d even; head_size is a multiple of 8, so the partial row's float2 stores are aligned).
  auto write_row = [&](int r, float mi, float li, auto&& o2, int d_begin, int d_step) {
    int R = row_start + r;
    int tok = q_begin + R / G, h = kvh * G + R % G;
    size_t row = size_t(tok) * p.num_q_heads + h;
    if (args.write_partial) {
      size_t prow = size_t(split) * args.partial_tokens * p.num_q_heads + row;
      float* po = args.partial_out + prow * hs;
      for (int d = d_begin; d < hs; d += d_step) *reinterpret_cast<float2*>(po + d) = o2(d);
      if (d_begin == 0) {
        args.partial_ml[prow * 2] = mi;
        args.partial_ml[prow * 2 + 1] = li;
      }
    } else {
      const float inv = output_scale(mi, li, p.sinks, h, p.v_scale);
      T* out = static_cast<T*>(p.out) + row * hs;
      for (int d = d_begin; d < hs; d += d_step) {
        const float2 v = o2(d);
        *reinterpret_cast<uint32_t*>(out + d) = pack2<T>(v.x * inv, v.y * inv);
      }
    }
  };

  if (!warp_split) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if (!row_ok[i]) continue;
#pragma unroll
      for (int j = 0; j < kDT; ++j) {
        int d = j * 8 + (lane % 4) * 2;
        if (d >= hs) continue;
        const float2 v = make_float2(acc[j][2 * i], acc[j][2 * i + 1]);
        write_row(r_local[i], m[i], l[i], [&](int) { return v; }, d, hs);
      }
    }
    return;
  }
  // Warps split the keys: merge the four (m, l, acc) states of rows 0-15 through shared memory.
  constexpr int kMS = S::kMergeStride;
  float* ms = reinterpret_cast<float*>(sK);  // [4][16] m, then [4][16] l, then [4][16][kMS] acc
  float* ls = ms + 4 * 16;
  float* as = ls + 4 * 16;
  __syncthreads();
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    int r = lane / 4 + 8 * i;
    if (lane % 4 == 0) {
      ms[warp * 16 + r] = m[i];
      ls[warp * 16 + r] = l[i];
    }
#pragma unroll
    for (int j = 0; j < kDT; ++j) {
      int d = j * 8 + (lane % 4) * 2;
      *reinterpret_cast<float2*>(&as[(warp * 16 + r) * kMS + d]) = make_float2(acc[j][2 * i], acc[j][2 * i + 1]);
    }
  }
  __syncthreads();
  const int valid_rows = min(16, rows_total - row_start);
  // Thread layout: 8 threads per row (16 rows), each thread a strided set of column pairs.
  const int r = tid / 8, part = tid % 8;
  if (r < valid_rows) {
    float mw[4], mm = -INFINITY;
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      mw[x] = ms[x * 16 + r];
      mm = fmaxf(mm, mw[x]);
    }
    float mu = mm == -INFINITY ? 0.f : mm;
    float wgt[4], lsum = 0.f;
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      wgt[x] = exp2f(mw[x] - mu);
      lsum += ls[x * 16 + r] * wgt[x];
    }
    auto o = [&](int d) {
      float2 v = make_float2(0.f, 0.f);
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const float2 a = *reinterpret_cast<const float2*>(&as[(x * 16 + r) * kMS + d]);
        v.x += a.x * wgt[x];
        v.y += a.y * wgt[x];
      }
      return v;
    };
    if constexpr (kSmemPartial) {
      float* pm = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(smem) + S::kPartialOffset);
      if (part == 0) {
        pm[r] = mm;
        pm[16 + r] = lsum;
      }
      for (int d = part * 2; d < hs; d += 16) *reinterpret_cast<float2*>(pm + 32 + r * D + d) = o(d);
    } else {
      write_row(r, mm, lsum, o, part * 2, 16);
    }
  }
}

template <typename T, typename Kv, int D, int BN>
__global__ void __launch_bounds__(kThreads) paged_attention_kernel(const KernelArgs args) {
  attention_device::pdl_launch_dependents();  // the split merge kernel may take its place early
  extern __shared__ uint4 smem[];
  using S = Smem<T, Kv, D, BN>;
  // One kernel for the whole mixed batch; decode-shaped tiles (<= 16 query rows) take the key-split body.
  if constexpr (S::kCanWarpSplit) {
    const int4 w = cta_work(args);
    const int G = args.p.num_q_heads / args.p.num_kv_heads;
    const int rows = (args.p.query_start_loc[w.x + 1] - args.p.query_start_loc[w.x]) * G;
    if (rows - w.y <= 16) {
      attention_tile<T, Kv, D, BN, true, S>(args, smem);
      return;
    }
  }
  attention_tile<T, Kv, D, BN, false, S>(args, smem);
}

// The same kernel for steps whose every tile is decode-shaped (the common decode step): only the key-split
// body and a 16-row Q tile, so that two CTAs (16-bit KV, 3 stages) or three (fp8 KV, 2 stages) fit an SM.
// kMergeSplits: the kernel merges its KV splits. On SM 9.0 it is launched in clusters of one row group's
// splits, which merge through distributed shared memory (cluster_merge_splits); before SM 9.0 the last CTA
// of each row group merges the global partials (last_split_merges). A separate instantiation, because the
// merge code in the same kernel costs the main loop registers and with them its rate.
template <typename T, typename Kv, int D, int BN, bool kMergeSplits>
__global__ void __launch_bounds__(kThreads, (Smem<T, Kv, D, BN, true>::kDecodeCtasPerSm))
    decode_attention_kernel(const KernelArgs args) {
  attention_device::pdl_launch_dependents();  // the split merge kernel may take its place early
  extern __shared__ uint4 smem[];
  using S = Smem<T, Kv, D, BN, true>;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  attention_tile<T, Kv, D, BN, true, S, kMergeSplits>(args, smem);
  if constexpr (kMergeSplits) cluster_merge_splits<T, D>(args, smem, S::kPartialOffset);
#else
  attention_tile<T, Kv, D, BN, true, S>(args, smem);
  if constexpr (kMergeSplits) last_split_merges<T, D>(args);
#endif
}

// Instantiated per element type in paged_attention_{bf16,f16}.cu. Returns true when the launched kernel
// merged its KV splits itself (the decode-only kernel with merge_in_kernel), false when merge_partials must run.
// num_splits: the plan's KV splits per row group (the cluster size of a cluster merge).
template <typename T>
bool launch_paged(const KernelArgs& args, int num_items, int num_splits, cudaStream_t stream);

}  // namespace pagoda::paged_detail
