// PRIVATE to ops/cuda: the quantized GEMV kernel of quant_gemv.h, one template over the block format,
// included by the .cu file of each format family (quant_gemv_legacy.cu, quant_gemv_kquants.cu), which
// instantiate launch_quant_gemv<Q> for their formats.
//
// A CTA owns 16 weight rows; its 8 warps split k into contiguous runs of slabs (a slab: 1 k-quant block or
// 4-8 32-weight blocks of each of the 16 rows) and stream them through shared memory, each warp through its
// own 3-stage cp.async ring. Lane (g, t) = (lane / 4, lane % 4) decodes the codes of rows g and g + 8 for
// 4 of every 16 consecutive k into the A fragment of mma.m16n8k16 (M = weight rows, K = weights); the B
// fragment holds x of token g of an 8-token tile at the same k, so one mma multiplies 16 rows by 8 tokens.
//
// A code q (0..63: a nibble with its high bits for Q5/Q6, or half of a Q8_0 byte) becomes the 16-bit float
// 128 + q in one LOP3 (the magic-number trick: at the exponent of 128 the mantissa's low bits count units).
// The mma sums S = sum (128 + q) x over each group of weights that share a scale (products exact, fp32
// accumulation), a second mma with all-ones A gives X = sum x over the same k, and the group adds
// alpha * S + beta * X to fp32 accumulators, alpha and beta from the block's scales (Q4_0: w = d (q - 8),
// so alpha = d, beta = -136 d). The offset 128 costs about 4 of fp32's 24 bits in S, far below the output
// dtype's rounding (the test's tolerance counts it). The 8 warps' sums are added in a fixed order at the
// end: an output is the same function of its row of x whatever m is.
//
// The CTA body is written against an `Ops` policy (the mma, the memory operations and the barriers), and
// everything but DeviceOps, the kernel and its launch also compiles as plain C++: the same code runs on the
// host, a thread per lane, in tests/ops_cuda/quant_gemv_emulation_test.cc.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <vector_types.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "pagoda/core/quant_type.h"
#include "pagoda/ops/cuda/quant_gemv.h"
#include "pagoda/ops/cuda/quant_gemv_bits.cuh"
#ifdef __CUDACC__
#include "pagoda/core/error.h"
#include "pagoda/ops/cuda/cuda_common.cuh"
#include "pagoda/ops/cuda/quant_gemv_launch.h"
#endif

// The host pass (the emulation test) ignores unroll hints without a warning.
#ifdef __CUDA_ARCH__
#define PAGODA_UNROLL _Pragma("unroll")
#else
#define PAGODA_UNROLL
#endif

namespace pagoda {
namespace quant_gemv_detail {

using bf16 = __nv_bfloat16;
using f16 = __half;

constexpr int kWarps = 8;                         // per CTA: they split k and share the CTA's rows
constexpr int kThreads = kWarps * 32;
constexpr int kTileRows = 16;                     // weight rows per row tile (the mma's M)
constexpr int kMaxTiles = kQuantGemvMaxRows / 8;  // 8-token tiles (the mma's N): kernels of 1 and of 4
// Shared memory of an SM (Hopper: 228 KiB, of which the system reserves 1 KiB per CTA).
constexpr int kSmemPerSm = 228 * 1024;

// ---- per-format constants ----
// kBlocksPerSlab blocks of a row are copied per slab. A row's slab lands in its stage at
// row * kStride + (its global address % 16); kStride holds the 14 bytes a 2-byte-aligned start can lead
// with (none for blocks of a multiple of 16 bytes, whose slabs all start 16-byte aligned), and
// kStride / 16 is odd, so the 8 row groups' 32-bit reads hit 8 distinct bank quadruples.
template <QuantType Q>
struct Fmt {
  static constexpr int kBlockBytes = quant_traits(Q).block_bytes;
  static constexpr int kBlockElems = quant_traits(Q).block_elems;
  static constexpr int kBlocksPerSlab = kBlockElems == 256 ? 1 : (Q == QuantType::kQ8_0 ? 4 : 8);
  static constexpr int kSlabBytes = kBlocksPerSlab * kBlockBytes;
  static constexpr int kLead = kBlockBytes % 16 == 0 ? 0 : 14;
  static constexpr int kStride0 = (kLead + kSlabBytes + 15) / 16 * 16;
  static constexpr int kStride = (kStride0 / 16) % 2 == 1 ? kStride0 : kStride0 + 16;
  static constexpr int kChunks = kStride / 16;  // 16-byte copies per row and slab, at most
  // Whether every field a lane reads is 4-byte aligned (block sizes multiples of 4).
  static constexpr bool kAligned4 = kBlockBytes % 4 == 0;
  static constexpr size_t kStageBytes = size_t(kWarps) * kTileRows * kStride;  // one stage of every warp
};

// The cross-warp sums of a row tile: two buffers (a tile's sums are read while the next tile's are written)
// of kWarps x (accumulators per lane) x 32 floats. NT: Lane's (0: one token).
template <int NT>
constexpr size_t kRedBytes = size_t(2) * kWarps * (NT == 0 ? 1 : NT) * 4 * 32 * sizeof(float);

// The formats whose one-token kernel lays B out by scale group: with one token, 7 of B's 8 columns would
// repeat it, so column j holds x for sub-block j of the block (in the lanes of group j, zeros elsewhere)
// and one mma accumulator collects all 8 sub-blocks' sums; lane (g, t) ends up with those of sub-blocks
// 2t and 2t + 1, applies only their scales (a quarter of the work), and the row's sum passes through the
// 4 lanes of a group in sub-block order, so every output sees the operations of the other kernels in the
// same order (bit-identical rows across m; an mma column adds exact zeros outside its sub-block). The
// row sums end in lane t = 3, where the cross-warp sum reads them.
template <QuantType Q>
constexpr bool kColumns = Q == QuantType::kQ4_K || Q == QuantType::kQ5_K;

// The launch configuration of a kernel: ring depth, shared memory, CTAs an SM. The one-token kernels of
// Q4_K, Q5_K (kColumns: their lanes keep a quarter of the accumulators and scales) and Q8_0 need under 64
// registers: as many CTAs an SM as the shared memory holds, up to 4, for more warps to issue from (their
// warps stall mostly on dependencies and on the integer pipe, not on memory, so the rings stay shallow:
// 2 stages and 4 CTAs for Q4_K and Q8_0, 3 and 3 for Q5_K, which would spill registers at 4). Otherwise
// two CTAs an SM for m <= 8 (128 registers), with 4 stages where they fit, else 3; one for the four-tile
// kernel, whose accumulators get all the registers. S (a benchmark knob, QuantGemvParams::stages)
// overrides the ring depth.
template <QuantType Q, int NT, int S = 0>
struct Cfg {
  static constexpr bool kCols = NT == 0 && kColumns<Q>;
  static constexpr bool kLight = kCols || (NT == 0 && Q == QuantType::kQ8_0);
  static constexpr int kDefaultStages =
      kLight && Q != QuantType::kQ5_K
          ? 2
          : (kLight ? 3 : (4 * Fmt<Q>::kStageBytes + kRedBytes<NT> <= size_t(kSmemPerSm / 2 - 1024) ? 4 : 3));
  static constexpr int kStages = S > 0 ? S : kDefaultStages;
  static constexpr size_t kRingBytes = kStages * Fmt<Q>::kStageBytes;
  static constexpr size_t kSmemBytes = kRingBytes + kRedBytes<NT>;
  static constexpr int kFit = int(kSmemPerSm / (kSmemBytes + 1024));
  static constexpr int kCtasPerSm = kLight ? (kFit < 4 ? kFit : 4) : (NT <= 1 ? 2 : 1);
};

// ---- bit tools that run on the host too (and quant_gemv_bits.cuh's) ----
PAGODA_HD float bits_to_float(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// ---- 16-bit float codes ----
// T = bf16: 128.0 is 0x4300 and the mantissa's unit is bit 0. T = fp16: 128.0 is 0x5800 and the unit is
// bit 3 (kShift). Both hold 128 + q exactly for q < 128.
template <typename T>
constexpr int kShift = std::is_same_v<T, bf16> ? 0 : 3;
template <typename T>
constexpr uint32_t kMagic = std::is_same_v<T, bf16> ? 0x43004300u : 0x58005800u;
template <typename T>
constexpr uint32_t kOnes = std::is_same_v<T, bf16> ? 0x3F803F80u : 0x3C003C00u;

template <int S>
PAGODA_HD uint32_t shift_right(uint32_t w) {
  if constexpr (S > 0) return w >> S;
  else if constexpr (S < 0) return w << (-S);
  else return w;
}

// (a & b) | c in one LOP3. Written out because ptxas splits the C expression with two constants into two
// LOP3s (one immediate each) rather than keep one constant in a register.
PAGODA_HD uint32_t and_or(uint32_t a, uint32_t b, uint32_t c) {
#ifdef __CUDA_ARCH__
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
#else
  return (a & b) | c;
#endif
}

// The 4-bit fields at bit S of each 16-bit half of w, as the pair (128 + field) of T: high_magic is
// kMagic<T> with the field's high bits (Q5's bit 4, Q6's bits 4-5, in T's units) already or'ed in.
template <typename T, int S>
PAGODA_HD uint32_t code_pair(uint32_t w, uint32_t high_magic) {
  return and_or(shift_right<S - kShift<T>>(w), 0x000F000Fu << kShift<T>, high_magic);
}

template <typename T, int B, int P, uint32_t kMask>
PAGODA_HD uint32_t high_bits(uint32_t h) {
  return and_or(shift_right<8 * P + B - 4 - kShift<T>>(h), kMask << kShift<T>, kMagic<T>);
}

// Bits B and B + 1 (kMask 0x00300030) or bit B (kMask 0x00100010) of bytes 0 and 2 (P = 0) or 1 and 3
// (P = 1) of h, moved to the high-bit place of code_pair's two halves (bit 4 in T's units), with kMagic<T>
// (code_pair's high_magic; defined below and_or).
template <typename T, int B, int P, uint32_t kMask>
PAGODA_HD uint32_t high_bits(uint32_t h);

// A 32-bit little-endian word at p (shared memory), 4-byte aligned when kAligned4, else 2-byte aligned.
template <bool kAligned4>
PAGODA_HD uint32_t ld32(const uint8_t* p) {
  if constexpr (kAligned4) {
    return *reinterpret_cast<const uint32_t*>(p);
  } else {
    // Two 16-bit loads: their offsets from a block's pointer are constants, so no address arithmetic.
    const uint16_t* q = reinterpret_cast<const uint16_t*>(p);
    return uint32_t(q[0]) | uint32_t(q[1]) << 16;
  }
}
PAGODA_HD float ld_half(const uint8_t* p) { return __half2float(*reinterpret_cast<const __half*>(p)); }

// 2^23 + byte B of w, as a float (exact; the magic-number trick, one PRMT). `magic` is 0x4B000000 in a
// register the compiler cannot see through (Lane::magic): with two constants ptxas makes the magic the
// immediate and moves the selector into a register for every byte, two instructions instead of one.
template <int B>
PAGODA_HD float byte_raw(uint32_t w, uint32_t magic) {
#ifdef __CUDA_ARCH__
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(w), "r"(magic), "n"(0x7440 | B));
  return __uint_as_float(d);
#else
  return bits_to_float(byte_perm(w, magic, 0x7440 | B));
#endif
}

// byte_raw with the byte's selector (0x7440 | B) in a register.
PAGODA_HD float byte_raw_at(uint32_t w, uint32_t magic, uint32_t sel) {
#ifdef __CUDA_ARCH__
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(w), "r"(magic), "r"(sel));
  return __uint_as_float(d);
#else
  return bits_to_float(byte_perm(w, magic, sel));
#endif
}

#ifdef __CUDACC__
// ---- the device's operations ----
struct DeviceOps {
  // 8 bytes of x (read-only for the kernel's lifetime).
  static __device__ __forceinline__ uint2 load8(const void* p) { return __ldg(reinterpret_cast<const uint2*>(p)); }
  // c += A[16 x 16] B[16 x 8], fp32 accumulation.
  template <typename T>
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    if constexpr (std::is_same_v<T, bf16>)
      asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
          "{%0,%1,%2,%3};"
          : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
      asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
          "{%0,%1,%2,%3};"
          : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  // The shared-memory address of p (computed once per slab: cvta is several instructions).
  static __device__ __forceinline__ uint32_t shared_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
  }
  static __device__ __forceinline__ void copy16(uint32_t smem, const void* gmem) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem), "l"(gmem) : "memory");
  }
  // 16 bytes into smem of which the first `bytes` (1..16) are read from gmem, the rest zero-filled.
  static __device__ __forceinline__ void copy16_upto(uint32_t smem, const void* gmem, uint32_t bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem), "l"(gmem), "r"(bytes) : "memory");
  }
  static __device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
  template <int N>
  static __device__ __forceinline__ void wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
  }
  static __device__ __forceinline__ float shfl(float v, int src_lane) { return __shfl_sync(0xffffffffu, v, src_lane); }
  static __device__ __forceinline__ void sync_warp() { __syncwarp(); }
  static __device__ __forceinline__ void sync_cta() { __syncthreads(); }
};
#endif  // __CUDACC__

// What a lane needs to run one block: its x pointers (token 8 i + g of tile i, at the slab's first k plus
// 4 t; tokens past m repeat the last one, their outputs unwritten), the block's first k within the slab (a
// constant once the block loop is unrolled, so x loads take immediate offsets), and the accumulators
// (acc[i][e]: row g + 8 (e / 2), token 8 i + 2 t + e % 2). NT: 1 tile (m <= 8), kMaxTiles, or 0: m = 1,
// one tile of which only token 0's accumulators (e = 0, 2) are kept; they see the same operations in the
// same order as in the other kernels, so a row's outputs stay the same bits whatever m is.
template <typename T, int NT>
struct Lane {
  static constexpr int kTiles = NT == 0 ? 1 : NT;
  static constexpr bool kOne = NT == 0;
  const T* x[kTiles];
  int k0;
  int g;  // lane / 4
  float acc[kTiles][4];
  uint32_t magic;  // 0x4B000000 for byte_raw
};

// The B fragment of x[k0 + off + 4 t .. + 3] (8 bytes): slots (2t, 2t+1) take x[0], x[2]; (2t+8, 2t+9)
// take x[1], x[3], matching code_pair's pairs (bytes 0 and 2, 1 and 3 of a weight word).
template <class Ops, typename T>
PAGODA_HD void load_b(const T* p, uint32_t& b0, uint32_t& b1) {
  const uint2 v = Ops::load8(p);
  b0 = byte_perm(v.x, v.y, 0x5410);
  b1 = byte_perm(v.x, v.y, 0x7632);
}

// A scale group of NM mma k-steps: a[j] the codes of step j (rows g, g + 8), x at element offset xoff[j]
// of the block; acc += alpha[row] * S + beta[row] * X.
template <class Ops, typename T, int NT, int NM>
PAGODA_HD void group(Lane<T, NT>& L, const uint32_t (&a)[NM][4], const int (&xoff)[NM], const float (&alpha)[2],
                     const float (&beta)[2]) {
  const uint32_t ones[4] = {kOnes<T>, kOnes<T>, kOnes<T>, kOnes<T>};
PAGODA_UNROLL
  for (int i = 0; i < Lane<T, NT>::kTiles; ++i) {
    float s[4] = {0.f, 0.f, 0.f, 0.f}, xs[4] = {0.f, 0.f, 0.f, 0.f};
PAGODA_UNROLL
    for (int j = 0; j < NM; ++j) {
      uint32_t b0, b1;
      load_b<Ops>(L.x[i] + L.k0 + xoff[j], b0, b1);
      Ops::template mma<T>(s, a[j], b0, b1);
      Ops::template mma<T>(xs, ones, b0, b1);
    }
    float* acc = L.acc[i];
    acc[0] = fmaf(alpha[0], s[0], fmaf(beta[0], xs[0], acc[0]));
    acc[2] = fmaf(alpha[1], s[2], fmaf(beta[1], xs[0], acc[2]));
    if constexpr (!Lane<T, NT>::kOne) {
      acc[1] = fmaf(alpha[0], s[1], fmaf(beta[0], xs[1], acc[1]));
      acc[3] = fmaf(alpha[1], s[3], fmaf(beta[1], xs[1], acc[3]));
    }
  }
}

// The A fragment of one k-step from a weight word per row (wg: row g, wh: row g + 8): the 4-bit fields at
// bits S, S + 16 (weights 0 and 2 of the word) and S + 8, S + 24 (weights 1 and 3), with their high bits.
template <typename T, int S>
PAGODA_HD void frag(uint32_t (&a)[4], uint32_t wg, uint32_t wh, uint32_t hg02 = kMagic<T>, uint32_t hh02 = kMagic<T>,
                    uint32_t hg13 = kMagic<T>, uint32_t hh13 = kMagic<T>) {
  a[0] = code_pair<T, S>(wg, hg02);
  a[1] = code_pair<T, S>(wh, hh02);
  a[2] = code_pair<T, S + 8>(wg, hg13);
  a[3] = code_pair<T, S + 8>(wh, hh13);
}

}  // namespace quant_gemv_detail
}  // namespace pagoda

#include "pagoda/ops/cuda/quant_gemv_blocks.cuh"

namespace pagoda {
namespace quant_gemv_detail {

// One CTA of `ctas`: row tiles cta, cta + ctas, ... of y[:m, :] (rows [16 tile, 16 tile + 16)), for thread
// `tid` (0..kThreads-1); smem: Cfg<Q, NT, S>::kSmemBytes, 16-byte aligned. PRECOND: quant_gemv()'s.
//
// Each warp owns the same run of slabs [s_begin, s_end) of every tile, and its ring streams its slabs of
// one tile after the other: the copies of the next tile's first slabs are in flight while it finishes a
// tile, so a CTA that runs many tiles keeps its loads going across them. At a tile's end the warps leave
// their sums in one of two buffers, one barrier, and the tile's outputs are summed over the warps in a
// fixed order.
template <QuantType Q, typename T, int NT, int S, class Ops>
PAGODA_HD void gemv_cta(const T* x, const uint8_t* w, const T* bias, T* y, int m, int n, int k, int ldy, int cta,
                        int ctas, int tid, uint8_t* smem) {
  using F = Fmt<Q>;
  using LaneT = Lane<T, NT>;
  constexpr int kTiles = LaneT::kTiles, kStages = Cfg<Q, NT, S>::kStages;
  const int lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const int tiles = (n + kTileRows - 1) / kTileRows;
  const int nb = k / F::kBlockElems;
  const size_t row_bytes = size_t(nb) * F::kBlockBytes;
  const int slabs = (nb + F::kBlocksPerSlab - 1) / F::kBlocksPerSlab;
  const int s_begin = warp * slabs / kWarps, s_end = (warp + 1) * slabs / kWarps;
  uint8_t* ring = smem + size_t(warp) * kStages * kTileRows * F::kStride;
  const uint32_t ring_sh = Ops::shared_addr(ring);
  // Copies slab s of tile `tile` into ring stage `stage`: the 16-byte chunks that cover each row's bytes.
  // With rows a multiple of 16 bytes long (every format at k = 2048 j), every row's slab starts at the same
  // offset within 16 bytes: lane copies chunk lane % 16 of rows 2 j + lane / 16 (j < 8), addresses affine
  // in j, destinations constant offsets. Rows past n are not copied (their outputs are not written, and an
  // mma row depends on its own A row alone). Other row lengths take each chunk's address from its row; the
  // chunk that holds the last byte of W reads only up to it (W's allocation may end there).
  static_assert(F::kChunks <= 16, "a row's slab is at most 16 chunks");
  const bool aligned16 = row_bytes % 16 == 0;
  const uint32_t my_chunk = uint32_t(lane & 15), my_row = uint32_t(lane >> 4);
  const uintptr_t w_begin = reinterpret_cast<uintptr_t>(w);
  const uintptr_t w_end = w_begin + uintptr_t(n) * row_bytes;
  auto issue = [&](int tile, int s, int stage) {
    const int bytes = imin(F::kBlocksPerSlab, nb - s * F::kBlocksPerSlab) * F::kBlockBytes;
    const uint32_t dst = ring_sh + uint32_t(stage * kTileRows * F::kStride);
    const int rows_here = imin(kTileRows, n - tile * kTileRows);
    const uintptr_t tile_at = w_begin + uintptr_t(tile) * kTileRows * row_bytes;
    if (aligned16) {
      const uint32_t lead = uint32_t(s * F::kSlabBytes) & 15u, chunks = (lead + uint32_t(bytes) + 15u) / 16u;
      if (my_chunk >= chunks) return;
      const uintptr_t src =
          tile_at + my_row * row_bytes + 16u * my_chunk + (uintptr_t(s) * F::kSlabBytes & ~uintptr_t(15));
      const uint32_t d = dst + my_row * F::kStride + 16u * my_chunk;
      if (rows_here == kTileRows) {
PAGODA_UNROLL
        for (int j = 0; j < kTileRows / 2; ++j)
          Ops::copy16(d + 2 * j * F::kStride, reinterpret_cast<const void*>(src + 2 * uintptr_t(j) * row_bytes));
      } else {
        for (int j = 0; 2 * j + int(my_row) < rows_here; ++j)
          Ops::copy16(d + 2 * j * F::kStride, reinterpret_cast<const void*>(src + 2 * uintptr_t(j) * row_bytes));
      }
      return;
    }
    for (int i = lane; i < rows_here * F::kChunks; i += 32) {
      const int r = i / F::kChunks, c = i - r * F::kChunks;
      const uintptr_t begin = tile_at + uintptr_t(r) * row_bytes + uintptr_t(s) * F::kSlabBytes;
      const uintptr_t chunk = (begin & ~uintptr_t(15)) + 16 * uintptr_t(c);
      if (chunk < begin + bytes)
        Ops::copy16_upto(dst + uint32_t(r * F::kStride + 16 * c), reinterpret_cast<const void*>(chunk),
                         uint32_t(w_end - chunk < 16 ? w_end - chunk : 16));
    }
  };
  // The next (tile, slab) to copy: the warp's slabs of its tiles in order (none when it has no slabs).
  int copy_tile = s_begin < s_end ? cta : tiles, copy_s = s_begin;
  auto issue_next = [&](int stage) {
    if (copy_tile >= tiles) return;
    issue(copy_tile, copy_s, stage);
    if (++copy_s == s_end) copy_s = s_begin, copy_tile += ctas;
  };

  LaneT L;
  L.k0 = 0;
  L.g = g;
  L.magic = 0x4B000000u | (uint32_t(m) >> 31);  // m >= 0: the constant, unknown to the compiler
  const T* xrow[kTiles];
PAGODA_UNROLL
  for (int i = 0; i < kTiles; ++i) {
    xrow[i] = x + size_t(imin(8 * i + g, m - 1)) * k + 4 * t;
PAGODA_UNROLL
    for (int e = 0; e < 4; ++e) L.acc[i][e] = 0.f;
  }

PAGODA_UNROLL
  for (int i = 0; i < kStages - 1; ++i) {
    issue_next(i);
    Ops::commit();
  }
  constexpr int kVals = kTiles * 4;
  float* const red = reinterpret_cast<float*>(smem + Cfg<Q, NT, S>::kRingBytes);  // [2][warp][i * 4 + e][lane]
  int stage_now = 0, stage_next = kStages - 1, buf = 0;
  for (int tile = cta; tile < tiles; tile += ctas, buf ^= 1) {
    // Where rows g and g + 8 start (16-byte offsets of a slab's start add to these).
    const uintptr_t start_g = w_begin + (uintptr_t(tile) * kTileRows + g) * row_bytes;
    const uintptr_t start_h = start_g + 8 * row_bytes;
    for (int s = s_begin; s < s_end; ++s) {
      Ops::template wait<kStages - 2>();
      Ops::sync_warp();  // every lane's copies of slab s have landed; every lane is done with the last stage
      issue_next(stage_next);
      Ops::commit();
      stage_next = stage_next == kStages - 1 ? 0 : stage_next + 1;

      const uint8_t* stage = ring + stage_now * kTileRows * F::kStride;
      stage_now = stage_now == kStages - 1 ? 0 : stage_now + 1;
      const uintptr_t off = uintptr_t(s) * F::kSlabBytes;
      const uint8_t* p = stage + g * F::kStride + ((start_g + off) & 15);
      const uint8_t* q = stage + (g + 8) * F::kStride + ((start_h + off) & 15);
      const int blocks = imin(F::kBlocksPerSlab, nb - s * F::kBlocksPerSlab);
PAGODA_UNROLL
      for (int i = 0; i < kTiles; ++i) L.x[i] = xrow[i] + size_t(s) * (F::kBlocksPerSlab * F::kBlockElems);
PAGODA_UNROLL
      for (int b = 0; b < F::kBlocksPerSlab; ++b) {
        if (b < blocks) {
          L.k0 = b * F::kBlockElems;
          block_dot<Q, T, NT, Ops>(L, p + b * F::kBlockBytes, q + b * F::kBlockBytes, t);
        }
      }
    }

    float* r = red + buf * (kWarps * kVals * 32);
PAGODA_UNROLL
    for (int i = 0; i < kTiles; ++i)
PAGODA_UNROLL
      for (int e = 0; e < 4; ++e) {
        r[(warp * kVals + i * 4 + e) * 32 + lane] = L.acc[i][e];
        L.acc[i][e] = 0.f;
      }
    // Every warp's sums of this tile are in; the other buffer's readers (the last tile) are done with it.
    Ops::sync_cta();
    const int row0 = tile * kTileRows;
    for (int o = tid; o < kTileRows * m; o += kThreads) {
      const int j = o / kTileRows, rr = o % kTileRows;  // token, row of the tile (consecutive threads: rows)
      if (row0 + rr >= n) continue;
      const int src_lane = (rr & 7) * 4 + (NT == 0 && kColumns<Q> ? 3 : (j & 7) >> 1);
      const int val = (j >> 3) * 4 + ((rr >> 3) << 1) + (j & 1);
      float sum = 0.f;
      for (int wi = 0; wi < kWarps; ++wi) sum += r[(wi * kVals + val) * 32 + src_lane];
      if (bias) sum += to_float(bias[row0 + rr]);
      y[size_t(j) * ldy + row0 + rr] = from_float<T>(sum);
    }
  }
  Ops::template wait<0>();
}

#ifdef __CUDACC__
// grid.x = the CTAs (at most ceil(n / 16)), kThreads threads, dynamic shared memory Cfg<Q, NT, S>::kSmemBytes.
template <QuantType Q, typename T, int NT, int S>
__global__ void __launch_bounds__(kThreads, Cfg<Q, NT, S>::kCtasPerSm)
    quant_gemv_kernel(const T* __restrict__ x, const uint8_t* __restrict__ w, const T* __restrict__ bias,
                      T* __restrict__ y, int m, int n, int k, int ldy) {
  extern __shared__ __align__(16) uint8_t smem[];
  gemv_cta<Q, T, NT, S, DeviceOps>(x, w, bias, y, m, n, k, ldy, int(blockIdx.x), int(gridDim.x), int(threadIdx.x),
                                   smem);
}

// One CTA per 16-row tile unless p.ctas asks for fewer (each then loops over several): the block scheduler
// hands the tiles out as CTAs finish, which balances better than a fixed share per resident CTA.
template <QuantType Q, typename T, int NT, int S = 0>
void launch_typed(const QuantGemvParams& p, cudaStream_t stream) {
  constexpr size_t kSmem = Cfg<Q, NT, S>::kSmemBytes;
  static const bool attr_set = [] {
    PAGODA_CUDA_CHECK(cudaFuncSetAttribute(quant_gemv_kernel<Q, T, NT, S>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem)));
    return true;
  }();
  (void)attr_set;
  const int tiles = cuda_detail::ceil_div(p.n, kTileRows);
  const int ctas = p.ctas > 0 ? std::min(p.ctas, tiles) : tiles;
  quant_gemv_kernel<Q, T, NT, S><<<ctas, kThreads, kSmem, stream>>>(
      static_cast<const T*>(p.x), static_cast<const uint8_t*>(p.w), static_cast<const T*>(p.bias),
      static_cast<T*>(p.y), p.m, p.n, p.k, p.ldy > 0 ? p.ldy : p.n);
  PAGODA_CUDA_CHECK_LAUNCH();
}

// m = 1 runs the one-token kernel, m <= 8 the one-tile kernel, larger m the four-tile one, whose tiles past
// m repeat the last token (an output is the same whichever kernel computes it: each does the same
// arithmetic for it). p.stages (a benchmark knob) picks another ring depth for the bf16 one-token kernel
// of Q4_K and Q8_0.
template <QuantType Q>
void launch_quant_gemv(const QuantGemvParams& p, cudaStream_t stream) {
  if constexpr (Q == QuantType::kQ4_K || Q == QuantType::kQ8_0) {
    if (p.m == 1 && p.dtype == DType::kBF16 && p.stages > 0) {
      PAGODA_CHECK(p.stages >= 2 && p.stages <= 4, "quant_gemv: stages ", p.stages, " (2..4)");
      if (p.stages == 2) launch_typed<Q, bf16, 0, 2>(p, stream);
      else if (p.stages == 3) launch_typed<Q, bf16, 0, 3>(p, stream);
      else launch_typed<Q, bf16, 0, 4>(p, stream);
      return;
    }
  }
  auto run = [&](auto tag) {
    using T = decltype(tag);
    if (p.m == 1) launch_typed<Q, T, 0>(p, stream);
    else if (p.m <= 8) launch_typed<Q, T, 1>(p, stream);
    else launch_typed<Q, T, kMaxTiles>(p, stream);
  };
  if (p.dtype == DType::kBF16) run(bf16{});
  else run(f16{});
}
#endif  // __CUDACC__

}  // namespace quant_gemv_detail
}  // namespace pagoda
