// PRIVATE to turboquant/: what the CTA bodies of the TurboQuant attention kernels (turboquant_cuda_attention.h)
// share: the kernel arguments, the slot format per preset and head size (64, 128, 256), the decoding of codes
// into mma fragments, the rotation of the queries and the output. The bodies are turboquant_cuda_cta.cuh (any
// work item) and turboquant_cuda_decode.cuh (decode items of <= 8 rows), instantiated in
// turboquant_cuda_<preset>.cu.
//
// A CTA (4 warps) serves one work item of the paged planner ({sequence, first row, KV split}, paged_attention.h)
// for one KV head; a row is (query token, query head of the KV head's group) as in the paged kernels. Keys
// stream through shared memory in subtiles of 16 slots: a subtile never straddles a cache block (block sizes
// are multiples of 16), so it is one contiguous run of 16 * slot_bytes bytes ([block][KV head][token][slot]),
// copied with 16-byte cp.async. Decode-shaped items (<= 16 rows) give each warp the same rows and its own
// subtile of every 64 keys (own copies, own pipeline), and merge the 4 warps at the end; other items give
// each warp 16 rows and all of the CTA's subtiles.
//
// Nothing is decoded to memory: a lane decodes the codes it needs straight into mma.m16n8k16 fragments (fp16
// operands, fp32 accumulation):
// - scores S = q~ K~^T: B = the key codes. Lane (g, t) = (lane / 4, lane % 4) holds key g (and 8 + g) at
//   k-positions 2t, 2t+1, 2t+8, 2t+9 of every 16 dims; the dims are permuted (the dot product does not
//   care) so that k-step kk gives lane t dims t D/4 + 4 kk .. + 3: a lane decodes one contiguous D/4-dim slice
//   of a key. 4-bit codes become centroid pairs through a 256-entry table of half2 (one byte, two codes),
//   3-bit codes through a 64-entry one (six bits), replicated per lane in shared memory so that lookups never
//   conflict; FP8 keys convert in registers. q~ = H s q is rotated once per row and stored as fp16 scaled by
//   a power of two (its largest coordinate in [2^13, 2^14)), undone in the score scale.
// - norm correction: ||c||^2 of each key is the diagonal of the Gram matrix of the decoded keys, another mma
//   on the same B fragments: with A = B^T (rows 8-15 of the score mma when a warp has <= 8 rows, so that it
//   costs nothing; two extra mma per 16 dims otherwise).
// - values: v^ = zero + scale * q, so sum_j p_j v^_j = sum_j p_j zero_j + sum_j (p_j scale_j) q_j: A = the
//   fp16 products p_j scale_j, B = the value codes as 1 + q / 2^b (one LOP3: the code in the fp16 mantissa's
//   top bits), so the mma gives sum p' + sum p' q / 2^b; sum p' (of the rounded p') and sum p zero are kept
//   per row in fp32. Value dims are permuted too: lane g of n-tile nt holds dim (D / 8) g + nt, so a lane
//   reads one contiguous D/8-dim slice of each of its four keys.
// Masked keys (past the context or the causal end) get p = 0 by selection, never by arithmetic, so whatever
// bytes a stale slot holds cannot reach the output.
//
// The body is written against an `Ops` policy (mma, shuffles, asynchronous copies, barriers); everything but
// DeviceOps and the kernel also compiles as plain C++, so the same code runs on the host, a thread per lane,
// in tests/attention_gpu/turboquant_emulation_test.cc.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <vector_types.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "pagoda/core/cuda_bits.cuh"
#include "pagoda/core/turboquant.h"

#define PAGODA_TQ_DEV __host__ __device__ __forceinline__
#ifdef __CUDA_ARCH__
#define PAGODA_TQ_UNROLL _Pragma("unroll")
#else
#define PAGODA_TQ_UNROLL
#endif

namespace pagoda::tq_detail {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kRowsPerItem = 64;  // rows of a work item (the paged planner's tile)
constexpr int kTileKeys = 64;     // keys of a KV tile (the planner's unit of KV splits)
constexpr int kSubKeys = 16;      // keys of a subtile: one warp's share of a tile, one mma k-step of P V
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kNegInf = -INFINITY;

// What the kernel receives (by value). The cache is [num_blocks][num_kv_heads][block_size][slot_bytes].
struct KernelArgs {
  const void* q;     // [tokens, num_q_heads, head_size], token stride q_stride elements (bf16 or fp16)
  int64_t q_stride;
  void* out;         // [tokens, num_q_heads, head_size], contiguous, q's dtype
  const uint8_t* cache;
  bool bf16;         // q and out are bf16 (else fp16)
  int num_q_heads, num_kv_heads, head_size, block_size, max_blocks_per_seq;
  const int* query_start_loc;  // [num_seqs + 1]
  const int* seq_lens;         // [num_seqs]
  const int* block_tables;     // [num_seqs, max_blocks_per_seq]
  float scale;                 // softmax scale
  int layer;                   // the rotation's seed
  float centroids[16];         // the key codebook (3/4-bit keys)
  const int4* work;            // {seq, row_start, split, num_splits} per CTA (blockIdx.x); blockIdx.y = KV head
  float* partial_out;          // [splits, partial_tokens, num_q_heads, head_size] unnormalised (split steps)
  float* partial_ml;           // [splits, partial_tokens, num_q_heads, 2]: log2-domain max, sum
  int partial_tokens;
  bool write_partial;
};

// ---- bit tools that run on the host too ----
using cuda_bits::byte_perm;
using cuda_bits::funnel_right;
// (a & b) | c in one LOP3 (ptxas splits the C expression with two constants into two).
PAGODA_TQ_DEV uint32_t and_or(uint32_t a, uint32_t b, uint32_t c) {
#ifdef __CUDA_ARCH__
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
#else
  return (a & b) | c;
#endif
}
PAGODA_TQ_DEV uint16_t f16_bits(float v) { return __half_raw(__float2half_rn(v)).x; }
PAGODA_TQ_DEV float f16_value(uint16_t u) {
  __half_raw r;
  r.x = u;
  return __half2float(__half(r));
}
PAGODA_TQ_DEV uint16_t bf16_bits(float v) { return __nv_bfloat16_raw(__float2bfloat16_rn(v)).x; }
PAGODA_TQ_DEV float bf16_value(uint16_t u) {
  __nv_bfloat16_raw r;
  r.x = u;
  return __bfloat162float(__nv_bfloat16(r));
}
PAGODA_TQ_DEV uint32_t pack_f16(float lo, float hi) { return uint32_t(f16_bits(lo)) | uint32_t(f16_bits(hi)) << 16; }
// An fp16 field of a slot (2-byte aligned).
PAGODA_TQ_DEV float ld_f16(const uint8_t* p) { return f16_value(*reinterpret_cast<const uint16_t*>(p)); }
PAGODA_TQ_DEV float exp2_(float x) {
#ifdef __CUDA_ARCH__
  return exp2f(x);
#else
  return std::exp2(x);
#endif
}

// Bits [B, B + N) of a little-endian word array (B, N compile-time constants once unrolled; N <= 8).
template <int N>
PAGODA_TQ_DEV uint32_t bits_at(const uint32_t* w, int b) {
  const int i = b >> 5, s = b & 31;
  const uint32_t v = s + N > 32 ? funnel_right(w[i], w[i + 1], uint32_t(s)) : w[i] >> s;
  return v & ((1u << N) - 1);
}

// The N-bit field at bit B of a little-endian word array moved to bit `to` of a word, the other bits whatever
// the shift leaves (one instruction; B, to compile-time constants once unrolled; to + N <= 32).
template <int N>
PAGODA_TQ_DEV uint32_t field_to(const uint32_t* w, int b, int to) {
  const int i = b >> 5, s = b & 31;
  if (s + N > 32) return funnel_right(w[i], w[i + 1], uint32_t(s - to));  // s > 29 >= to: a right shift
  return s >= to ? w[i] >> (s - to) : w[i] << (to - s);
}

// NB bytes starting at p (shared memory, any alignment), as (NB + 3) / 4 little-endian words. Reads the
// aligned words around them: up to 3 bytes before p and 4 past the last (inside the slot: see Fmt).
template <int NB>
PAGODA_TQ_DEV void load_bytes(const uint8_t* p, uint32_t (&w)[(NB + 3) / 4]) {
  constexpr int NW = (NB + 3) / 4;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uint32_t* base = reinterpret_cast<const uint32_t*>(a & ~uintptr_t(3));
  const uint32_t sh = uint32_t(a & 3) * 8;
  uint32_t r[NW + 1];
  PAGODA_TQ_UNROLL
  for (int i = 0; i <= NW; ++i) r[i] = base[i];
  PAGODA_TQ_UNROLL
  for (int i = 0; i < NW; ++i) w[i] = funnel_right(r[i], r[i + 1], sh);
}

// ---- the slot format, per preset and head size ----
template <int KB, int VB, bool NC, int D>
struct Fmt {
  static_assert(D == 64 || D == 128 || D == 256, "the mma kernel serves head sizes 64, 128 and 256");
  static_assert(KB == 3 || KB == 4 || KB == 8, "key bits");
  static_assert(VB == 3 || VB == 4, "value bits");
  static constexpr TurboQuantLayout L = turboquant_layout(KB, VB, NC, D);
  static constexpr int kSlot = L.slot_bytes;
  static constexpr int kSubBytes = kSubKeys * kSlot;  // a staged subtile: 16 slots, a multiple of 32 bytes
  static constexpr int kSubChunks = kSubBytes / 16;
  // A lane's key slice (D/4 dims) and value slice (D/8 dims), in bytes. Every slice is followed inside its
  // slot by at least 4 bytes (the norm and value after a key slice; scale and zero after a value slice), so
  // load_bytes never reads past the slot.
  static constexpr int kKeySlice = D / 4 * KB / 8;
  static constexpr int kValSlice = D / 8 * VB / 8;
  static constexpr int kKeyWords = (kKeySlice + 3) / 4;
  static constexpr int kValWords = (kValSlice + 3) / 4;
  static constexpr bool kGram = KB != 8 && NC;  // norm correction: ||c||^2 per key
  static constexpr int kLutEntries = KB == 4 ? 256 : KB == 3 ? 64 : 0;
  static constexpr int kStages = D >= 256 ? 2 : 3;
  static constexpr bool kQInRegs = D <= 128;  // the warp's q~ fragments stay in registers
  // Shared memory: [LUT][q~ rows][row factors][stages], and the decode merge reusing all of it.
  static constexpr int kLutBytes = kLutEntries * 32 * 4;
  static constexpr int kQStride = 2 * D + 16;  // bytes per q~ row (16 bytes of padding against bank conflicts)
  static constexpr int kQOffset = kLutBytes;
  static constexpr int kRfOffset = kQOffset + kRowsPerItem * kQStride;
  static constexpr int kStageOffset = kRfOffset + kRowsPerItem * 4;
  static constexpr int kMain = kStageOffset + kWarps * kStages * kSubBytes;
  static constexpr int kMergeStride = D + 4;  // floats per merged row
  static constexpr int kMerge = kWarps * 16 * (kMergeStride + 2) * 4;
  static constexpr int kSmem = kMain > kMerge ? kMain : kMerge;
  static constexpr uint32_t kOne = 0x3C003C00u;  // fp16 1.0 in both halves
  static constexpr float kValueUnit = float(1 << VB);  // B = 1 + q / kValueUnit
};

// The geometry of a work item.
struct Item {
  int seq, row_start, split, nsplit, kvh, G, q_begin, q_len, ctx, first_pos, rows_total;
  int tile_begin, tile_end, kv_end;
  bool decode;  // <= 16 rows: warps split the keys
};

PAGODA_TQ_DEV Item make_item(const KernelArgs& a, int4 w, int kvh) {
  Item it;
  it.seq = w.x;
  it.row_start = w.y;
  it.split = w.z;
  it.nsplit = w.w;
  it.kvh = kvh;
  it.G = a.num_q_heads / a.num_kv_heads;
  it.q_begin = a.query_start_loc[it.seq];
  it.q_len = a.query_start_loc[it.seq + 1] - it.q_begin;
  it.ctx = a.seq_lens[it.seq];
  it.first_pos = it.ctx - it.q_len;
  it.rows_total = it.q_len * it.G;
  const int rows = it.rows_total - it.row_start;
  it.decode = rows <= 16;
  // Causal: the item's keys end after its last row's position; the KV tiles are cut into equal runs.
  const int last_row = (rows < kRowsPerItem ? it.rows_total : it.row_start + kRowsPerItem) - 1;
  const int kv_end = it.first_pos + (last_row > it.row_start ? last_row : it.row_start) / it.G + 1;
  it.kv_end = kv_end < it.ctx ? kv_end : it.ctx;
  const int tiles = (it.kv_end + kTileKeys - 1) / kTileKeys;
  const int per_split = (tiles + it.nsplit - 1) / it.nsplit;
  it.tile_begin = it.split * per_split;
  it.tile_end = it.tile_begin + per_split < tiles ? it.tile_begin + per_split : tiles;
  return it;
}

// The byte offset in the cache of the 16 slots of KV head kvh from key key0 (a multiple of 16).
PAGODA_TQ_DEV const uint8_t* subtile_src(const KernelArgs& a, const int* btab, int kvh, int key0, int slot_bytes) {
  const int blk = btab[key0 / a.block_size], off = key0 % a.block_size;
  return a.cache + ((int64_t(blk) * a.num_kv_heads + kvh) * a.block_size + off) * slot_bytes;
}

// ---- per-lane decoding into fragments ----
// The two B registers of key slice `kw` at k-step kk: dims t D/4 + 4kk + {0, 1} and + {2, 3}.
template <int KB, int KW>
PAGODA_TQ_DEV void key_pair(const uint32_t (&kw)[KW], int kk, const uint32_t* lut_lane, uint32_t& b0, uint32_t& b1) {
  if constexpr (KB == 4) {  // bytes 2kk, 2kk + 1: one byte, two codes, one lookup
    const uint32_t w = kw[kk >> 1] >> (16 * (kk & 1));
    b0 = lut_lane[(w & 0xff) << 5];
    b1 = lut_lane[((w >> 8) & 0xff) << 5];
  } else if constexpr (KB == 3) {  // bits 12kk .. 12kk + 11: two 6-bit pairs
    b0 = lut_lane[bits_at<6>(kw, 12 * kk) << 5];
    b1 = lut_lane[bits_at<6>(kw, 12 * kk + 6) << 5];
  } else {  // FP8 E4M3: bytes 4kk .. 4kk + 3
    const uint32_t w = kw[kk];
    const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(w & 0xffff), __NV_E4M3);
    const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(w >> 16), __NV_E4M3);
    b0 = uint32_t(lo.x) | uint32_t(lo.y) << 16;
    b1 = uint32_t(hi.x) | uint32_t(hi.y) << 16;
  }
}

// The B register of n-tile i of P V: (1 + q_a[i] / 2^b, 1 + q_b[i] / 2^b) for the value slices of two keys.
template <int VB, int VW>
PAGODA_TQ_DEV uint32_t value_pair(const uint32_t (&va)[VW], const uint32_t (&vb)[VW], int i) {
  if constexpr (VB == 4) {
    // Byte i / 2 of both slices into bytes 0-1 and 2-3, then nibble i % 2 of each half to bits 6-9.
    const int byte = i >> 1, bp = byte & 3;
    const uint32_t x = byte_perm(va[byte >> 2], vb[byte >> 2], uint32_t(bp | bp << 4 | (4 + bp) << 8 | (4 + bp) << 12));
    return and_or(i & 1 ? x << 2 : x << 6, 0x03C003C0u, 0x3C003C00u);
  } else {  // 3-bit fields at bit 3i, to bits 7-9 of each half: one shift each, the halves joined, one LOP3
    const uint32_t ta = field_to<3>(va, 3 * i, 7), tb = field_to<3>(vb, 3 * i, 23);
    return and_or(byte_perm(ta, tb, 0x7610), 0x03800380u, 0x3C003C00u);
  }
}

// ---- the per-warp work ----
// Q~ fragments of k-step kk for rows g, g + 8 of the warp's 16 rows starting at q_rows.
template <int D>
PAGODA_TQ_DEV void load_q_frag(const uint8_t* q_rows, int kk, int g, int t, int stride, uint32_t (&a)[4]) {
  const uint8_t* p0 = q_rows + g * stride + (t * (D / 4) + 4 * kk) * 2;
  const uint2 r0 = *reinterpret_cast<const uint2*>(p0);
  const uint2 r1 = *reinterpret_cast<const uint2*>(p0 + 8 * stride);
  a[0] = r0.x;
  a[1] = r1.x;
  a[2] = r0.y;
  a[3] = r1.y;
}

// The scores of the warp's 16 rows x the 16 keys of a staged subtile (S fragments: s[nt][e] = row g + 8 (e / 2),
// key nt * 8 + 2t + e % 2) and, for the lane's keys nt * 8 + 2t + e, the score factor (norm / ||c||, norm /
// sqrt(D), or 1 for FP8 keys), the value scale and zero. gram_free: the warp has <= 8 rows, so rows 8-15 of
// the score mma carry the Gram matrix of the keys (and s[nt][2..3] are not scores).
template <class Ops, int KB, int VB, bool NC, int D>
PAGODA_TQ_DEV void subtile_scores(const uint8_t* sub, const uint8_t* q_rows, const uint32_t (*qreg)[4],
                                  const uint32_t* lut_lane, bool gram_free, int lane, float (&s)[2][4],
                                  float (&fk)[2][2], float (&vs)[2][2], float (&vz)[2][2]) {
  using F = Fmt<KB, VB, NC, D>;
  const int g = lane >> 2, t = lane & 3;
  // ---- scores ----
  uint32_t kw[2][F::kKeyWords];
  PAGODA_TQ_UNROLL
  for (int nt = 0; nt < 2; ++nt) load_bytes<F::kKeySlice>(sub + (nt * 8 + g) * F::kSlot + t * F::kKeySlice, kw[nt]);
  PAGODA_TQ_UNROLL
  for (int nt = 0; nt < 2; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
  float gr[2][4] = {};
  PAGODA_TQ_UNROLL
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t qa[4];
    if constexpr (F::kQInRegs) {
      qa[0] = qreg[kk][0];
      qa[1] = qreg[kk][1];
      qa[2] = qreg[kk][2];
      qa[3] = qreg[kk][3];
    } else {
      load_q_frag<D>(q_rows, kk, g, t, F::kQStride, qa);
    }
    uint32_t b[2][2];
    PAGODA_TQ_UNROLL
    for (int nt = 0; nt < 2; ++nt) key_pair<KB>(kw[nt], kk, lut_lane, b[nt][0], b[nt][1]);
    if (F::kGram && gram_free) {
      // Rows 8-15 of A are this n-tile's keys: C rows 8-15 = their Gram matrix.
      PAGODA_TQ_UNROLL
      for (int nt = 0; nt < 2; ++nt) {
        const uint32_t a[4] = {qa[0], b[nt][0], qa[2], b[nt][1]};
        Ops::mma(s[nt], a, b[nt][0], b[nt][1]);
      }
    } else {
      Ops::mma(s[0], qa, b[0][0], b[0][1]);
      Ops::mma(s[1], qa, b[1][0], b[1][1]);
      if constexpr (F::kGram) {  // A = [keys 0-7; keys 8-15]: diag of rows 0-7 x n-tile 0, rows 8-15 x n-tile 1
        const uint32_t a[4] = {b[0][0], b[1][0], b[0][1], b[1][1]};
        Ops::mma(gr[0], a, b[0][0], b[0][1]);
        Ops::mma(gr[1], a, b[1][0], b[1][1]);
      }
    }
  }
  // ---- per key: the score factor, scale and zero (keys nt * 8 + 2t + e) ----
  PAGODA_TQ_UNROLL
  for (int nt = 0; nt < 2; ++nt) {
    PAGODA_TQ_UNROLL
    for (int e = 0; e < 2; ++e) {
      const uint8_t* slot = sub + (nt * 8 + 2 * t + e) * F::kSlot;
      if constexpr (KB == 8) {
        fk[nt][e] = 1.f;
      } else {
        const float norm = ld_f16(slot + F::L.key_norm_offset);
        if constexpr (F::kGram) {
          // ||c||^2 of key n = 2t + e sits on the diagonal, in lane 4n + n / 2 = 9t + 4e, element e (+ 2 for
          // rows 8-15).
          const float dg = gram_free ? s[nt][2 + e] : nt == 0 ? gr[0][e] : gr[1][2 + e];
          const float sq = Ops::shfl(dg, 9 * t + 4 * e);
          fk[nt][e] = norm * Ops::rsqrt(sq);
        } else {
          fk[nt][e] = norm * (1.f / 8.f) * (D == 64 ? 1.f : D == 128 ? 0.70710678118654752f : 0.5f);  // norm / sqrt(D)
        }
      }
      vs[nt][e] = ld_f16(slot + F::L.value_scale_offset);
      vz[nt][e] = ld_f16(slot + F::L.value_zero_offset);
    }
  }
}

// The value slices of the lane's four keys 2t, 2t+1, 2t+8, 2t+9: dims (D/8) g .. (D/8) g + D/8 - 1.
template <int KB, int VB, bool NC, int D>
PAGODA_TQ_DEV void load_value_slices(const uint8_t* sub, int lane, uint32_t (&vw)[4][Fmt<KB, VB, NC, D>::kValWords]) {
  using F = Fmt<KB, VB, NC, D>;
  const int g = lane >> 2, t = lane & 3;
  PAGODA_TQ_UNROLL
  for (int k = 0; k < 4; ++k) {
    const int key = 2 * t + (k & 1) + 8 * (k >> 1);
    load_bytes<F::kValSlice>(sub + key * F::kSlot + F::L.value_offset + g * F::kValSlice, vw[k]);
  }
}

// Writes one row: final (normalised, q's dtype) or partial (fp32 and (m, l)). o(d) is column d's unnormalised
// value; the caller's lanes cover columns d_begin, d_begin + d_step, ...
struct RowOut {
  const KernelArgs* a;
  int split;
  PAGODA_TQ_DEV void put(int tok, int h, float m, float l, int d, float o0, float o1) const {
    const int64_t row = int64_t(tok) * a->num_q_heads + h;
    const int hs = a->head_size;
    if (a->write_partial) {
      const int64_t prow = int64_t(split) * a->partial_tokens * a->num_q_heads + row;
      float* po = a->partial_out + prow * hs + d;
      po[0] = o0;
      po[1] = o1;
      if (d == 0) {
        a->partial_ml[prow * 2] = m;
        a->partial_ml[prow * 2 + 1] = l;
      }
    } else {
      const float inv = l > 0.f ? 1.f / l : 0.f;
      const uint32_t w = a->bf16 ? uint32_t(bf16_bits(o0 * inv)) | uint32_t(bf16_bits(o1 * inv)) << 16
                                 : pack_f16(o0 * inv, o1 * inv);
      *reinterpret_cast<uint32_t*>(static_cast<uint8_t*>(a->out) + (row * hs + d) * 2) = w;
    }
  }
};

// q~ of the item's rows [0, rows) into shared memory (fp16, scaled by 2^-e) and rf[r] = 2^e scale log2(e).
// Warp w rotates rows w, w + 4, ...; lane holds dims lane D/32 .. + D/32 - 1.
template <class Ops, int D>
PAGODA_TQ_DEV void prepare_queries(const KernelArgs& a, const Item& it, int rows, uint8_t* q_s, int q_stride,
                                   float* rf, int warp, int lane) {
  constexpr int V = D / 32;
  const uint64_t sw = turboquant_sign_word(a.layer, (lane * V) >> 6);
  const int sb = (lane * V) & 63;
  for (int r = warp; r < rows; r += kWarps) {
    const int R = it.row_start + r;
    const bool valid = R < it.rows_total;
    float x[V];
    if (valid) {
      const int tok = it.q_begin + R / it.G, h = it.kvh * it.G + R % it.G;
      const uint8_t* src = static_cast<const uint8_t*>(a.q) + ((int64_t(tok) * a.q_stride) + int64_t(h) * D + lane * V) * 2;
      PAGODA_TQ_UNROLL
      for (int j = 0; j < V; j += 2) {
        const uint32_t w = *reinterpret_cast<const uint32_t*>(src + 2 * j);
        if (a.bf16) {
          x[j] = bf16_value(uint16_t(w & 0xffff));
          x[j + 1] = bf16_value(uint16_t(w >> 16));
        } else {
          x[j] = f16_value(uint16_t(w & 0xffff));
          x[j + 1] = f16_value(uint16_t(w >> 16));
        }
      }
    } else {
      PAGODA_TQ_UNROLL
      for (int j = 0; j < V; ++j) x[j] = 0.f;
    }
    PAGODA_TQ_UNROLL
    for (int j = 0; j < V; ++j)
      if ((sw >> (sb + j)) & 1) x[j] = -x[j];
    // Walsh-Hadamard (Sylvester order): strides below V inside the lane, the others across lanes.
    PAGODA_TQ_UNROLL
    for (int h = 1; h < V; h *= 2) {
      PAGODA_TQ_UNROLL
      for (int j = 0; j < V; ++j) {
        if (j & h) continue;
        const float u = x[j], v = x[j + h];
        x[j] = u + v;
        x[j + h] = u - v;
      }
    }
    PAGODA_TQ_UNROLL
    for (int hl = 1; hl < 32; hl *= 2) {
      PAGODA_TQ_UNROLL
      for (int j = 0; j < V; ++j) {
        const float y = Ops::shfl_xor(x[j], hl);
        x[j] = (lane & hl) ? y - x[j] : x[j] + y;
      }
    }
    float mx = 0.f;
    PAGODA_TQ_UNROLL
    for (int j = 0; j < V; ++j) {
      x[j] *= D == 64 ? 0.125f : D == 128 ? 0.088388347648318441f : 0.0625f;  // 1 / sqrt(D)
      mx = fmaxf(mx, fabsf(x[j]));
    }
    PAGODA_TQ_UNROLL
    for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, Ops::shfl_xor(mx, o));
    int ex = 0;
    if (mx > 0.f) {
      frexpf(mx, &ex);  // mx in [2^(ex-1), 2^ex)
      ex -= 14;         // mx * 2^-ex in [2^13, 2^14)
    }
    uint8_t* dst = q_s + r * q_stride + lane * V * 2;
    PAGODA_TQ_UNROLL
    for (int j = 0; j < V; j += 2)
      *reinterpret_cast<uint32_t*>(dst + 2 * j) = pack_f16(ldexpf(x[j], -ex), ldexpf(x[j + 1], -ex));
    if (lane == 0) rf[r] = valid ? ldexpf(a.scale * kLog2e, ex) : 0.f;
  }
}

// The replicated lookup table: entry i of lane l at word i * 32 + l. 4-bit keys: i = one byte (codes i & 15,
// i >> 4); 3-bit: six bits (codes i & 7, i >> 3). Each half2 is (centroid of the low code, of the high code).
template <int KB>
PAGODA_TQ_DEV void build_lut(const KernelArgs& a, uint32_t* lut, uint32_t* scratch, int tid) {
  constexpr int N = KB == 4 ? 256 : 64, lo_bits = KB;
  for (int i = tid; i < N; i += kThreads)
    scratch[i] = pack_f16(a.centroids[i & ((1 << lo_bits) - 1)], a.centroids[i >> lo_bits]);
}
template <int KB>
PAGODA_TQ_DEV void replicate_lut(uint32_t* lut, const uint32_t* scratch, int tid) {
  constexpr int N = KB == 4 ? 256 : 64;
  for (int i = tid; i < N * 8; i += kThreads) {  // 16 bytes (4 lanes) per store
    const uint32_t v = scratch[i >> 3];
    *reinterpret_cast<uint4*>(lut + 4 * i) = make_uint4(v, v, v, v);
  }
}

#ifdef __CUDACC__
// ---- the device's operations ----
struct DeviceOps {
  // c += A[16 x 16] B[16 x 8]: fp16 operands, fp32 accumulation.
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ float shfl(float v, int src) { return __shfl_sync(0xffffffffu, v, src); }
  static __device__ __forceinline__ float shfl_xor(float v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
  static __device__ __forceinline__ float rsqrt(float v) { return rsqrtf(v); }
  static __device__ __forceinline__ void copy16(void* smem, const void* gmem) {
    const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
  }
  static __device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
  template <int N>
  static __device__ __forceinline__ void wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
  }
  static __device__ __forceinline__ void sync_warp() { __syncwarp(); }
  static __device__ __forceinline__ void sync_cta() { __syncthreads(); }
};

#endif  // __CUDACC__

}  // namespace pagoda::tq_detail
