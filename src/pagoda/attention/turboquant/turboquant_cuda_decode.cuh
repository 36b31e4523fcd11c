// PRIVATE to turboquant/: the CTA body of TurboQuant decode steps whose work items have at most 8 rows per KV
// head (decode at GQA <= 8: the usual step of a serving engine). The keys and scores are the general body's
// (turboquant_cuda_kernel.cuh: the Gram matrix always rides in rows 8-15 of the score mma); P V is computed
// transposed, O^T = V^T P^T, with M = 16 value dims and N = the 8 rows, so that it takes half the mma and half
// the accumulator registers of O = P V over 16 rows of which 8 are empty, and the q~ area holds 16 rows, not 64:
// three CTAs fit an SM where the general body fits two.
//
// Each of the 4 warps takes its own 16-key subtile of every 64 keys (own copies, own pipeline); the warps merge
// at the end. Fragments: A = V^T (lane g: dims (D/8) g + 2m and + 1 of m-tile m, the lane's value slice;
// keys 2t, 2t+1, 2t+8, 2t+9), B = P^T (keys x row g: the score fragment's row g as it stands), C = O^T (dims
// x rows 2t, 2t+1: the row statistics of quads 2t and 2t+1 reach a lane by shuffles).
#pragma once

#include "pagoda/attention/turboquant/turboquant_cuda_kernel.cuh"

namespace pagoda::tq_detail {

// A warp's state of rows 0-7 (score layout: lane row g) and its O^T accumulators.
template <int D>
struct DecodeState {
  float m, l, psum, zsum;  // row g: log2-domain max; sums of p, of the fp16 p * scale, of p * zero (lane's keys)
  // acc[m]: c0 = (dim (D/8) g + 2m, row 2t), c1 = (same dim, row 2t + 1), c2 / c3 = dim + 1, rows 2t / 2t + 1
  float acc[D / 16][4];
  float rf;  // row g: 2^e scale log2(e); 0 past the item
  int qpos;  // row g: the last key it attends; -1 past the item
};

// The smem layout of the decode body: [LUT][q~, 16 rows][row factors][stages]; the merge reuses all of it.
template <int KB, int VB, bool NC, int D>
struct DecodeFmt {
  using F = Fmt<KB, VB, NC, D>;
  static constexpr int kQOffset = F::kLutBytes;
  static constexpr int kRfOffset = kQOffset + 16 * F::kQStride;
  static constexpr int kStageOffset = kRfOffset + 16 * 4;
  static constexpr int kMain = kStageOffset + kWarps * F::kStages * F::kSubBytes;
  static constexpr int kMerge = kWarps * 8 * (F::kMergeStride + 2) * 4;
  static constexpr int kSmem = kMain > kMerge ? kMain : kMerge;
};

template <class Ops, int KB, int VB, bool NC, int D>
PAGODA_TQ_DEV void decode_subtile(DecodeState<D>& st, const uint8_t* sub, int key0, const uint8_t* q_rows,
                                  const uint32_t (*qreg)[4], const uint32_t* lut_lane, int lane) {
  using F = Fmt<KB, VB, NC, D>;
  const int t = lane & 3;
  float s[2][4], fk[2][2], vs[2][2], vz[2][2];
  subtile_scores<Ops, KB, VB, NC, D>(sub, q_rows, qreg, lut_lane, /*gram_free=*/true, lane, s, fk, vs, vz);
  // ---- online softmax of row g (log2 domain) ----
  float x[2][2];
  bool ok[2][2];
  float rmax = kNegInf;
  PAGODA_TQ_UNROLL
  for (int nt = 0; nt < 2; ++nt) {
    PAGODA_TQ_UNROLL
    for (int e = 0; e < 2; ++e) {
      const int key = key0 + nt * 8 + 2 * t + e;
      ok[nt][e] = key <= st.qpos;
      x[nt][e] = ok[nt][e] ? s[nt][e] * st.rf * fk[nt][e] : kNegInf;
      rmax = fmaxf(rmax, x[nt][e]);
    }
  }
  rmax = fmaxf(rmax, Ops::shfl_xor(rmax, 1));
  rmax = fmaxf(rmax, Ops::shfl_xor(rmax, 2));
  const float m_new = fmaxf(st.m, rmax);
  const float muse = m_new == kNegInf ? 0.f : m_new;
  const float alpha = exp2_(st.m - muse);
  st.m = m_new;
  st.l *= alpha;
  st.psum *= alpha;
  st.zsum *= alpha;
  // The accumulators hold rows 2t and 2t + 1: their factors are quads 2t's and 2t + 1's.
  const float a0 = Ops::shfl(alpha, 8 * t), a1 = Ops::shfl(alpha, 8 * t + 4);
  PAGODA_TQ_UNROLL
  for (int j = 0; j < D / 16; ++j) {
    st.acc[j][0] *= a0;
    st.acc[j][1] *= a1;
    st.acc[j][2] *= a0;
    st.acc[j][3] *= a1;
  }
  float pv[2][2];
  PAGODA_TQ_UNROLL
  for (int nt = 0; nt < 2; ++nt) {
    PAGODA_TQ_UNROLL
    for (int e = 0; e < 2; ++e) {
      const float p = exp2_(x[nt][e] - muse);
      st.l += p;
      pv[nt][e] = ok[nt][e] ? p * vs[nt][e] : 0.f;
      st.zsum += ok[nt][e] ? p * vz[nt][e] : 0.f;
    }
  }
  // B = P'^T: keys 2t, 2t+1 (b0) and 2t+8, 2t+9 (b1) of row g.
  const uint32_t b0 = pack_f16(pv[0][0], pv[0][1]), b1 = pack_f16(pv[1][0], pv[1][1]);
  st.psum += f16_value(uint16_t(b0 & 0xffff)) + f16_value(uint16_t(b0 >> 16)) + f16_value(uint16_t(b1 & 0xffff)) +
             f16_value(uint16_t(b1 >> 16));
  // ---- O^T += V^T P'^T: m-tile j takes nibbles 2j (dim pos g) and 2j + 1 (pos g + 8) of the lane's slices ----
  uint32_t vw[4][F::kValWords];
  load_value_slices<KB, VB, NC, D>(sub, lane, vw);
  PAGODA_TQ_UNROLL
  for (int j = 0; j < D / 16; ++j) {
    const uint32_t a[4] = {value_pair<VB>(vw[0], vw[1], 2 * j), value_pair<VB>(vw[0], vw[1], 2 * j + 1),
                           value_pair<VB>(vw[2], vw[3], 2 * j), value_pair<VB>(vw[2], vw[3], 2 * j + 1)};
    Ops::mma(st.acc[j], a, b0, b1);
  }
}

// The CTA body of a decode work item with at most 8 rows for KV head kvh. smem: DecodeFmt::kSmem bytes.
template <class Ops, int KB, int VB, bool NC, int D>
PAGODA_TQ_DEV void tq_decode_cta(const KernelArgs& a, int4 w, int kvh, int tid, uint8_t* smem) {
  using F = Fmt<KB, VB, NC, D>;
  using DF = DecodeFmt<KB, VB, NC, D>;
  const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const Item it = make_item(a, w, kvh);
  if (it.rows_total <= it.row_start) return;
  const int* btab = a.block_tables + int64_t(it.seq) * a.max_blocks_per_seq;
  uint32_t* lut = reinterpret_cast<uint32_t*>(smem);
  uint8_t* q_s = smem + DF::kQOffset;
  float* rf = reinterpret_cast<float*>(smem + DF::kRfOffset);
  uint8_t* ring = smem + DF::kStageOffset + warp * F::kStages * F::kSubBytes;
  if constexpr (F::kLutEntries > 0) {
    uint32_t* scratch = reinterpret_cast<uint32_t*>(smem + DF::kStageOffset);  // free until the first copy lands
    build_lut<KB>(a, lut, scratch, tid);
    Ops::sync_cta();
    replicate_lut<KB>(lut, scratch, tid);
  }
  prepare_queries<Ops, D>(a, it, 16, q_s, F::kQStride, rf, warp, lane);  // rows 8-15: zeros, never used
  Ops::sync_cta();
  DecodeState<D> st;
  {
    const int R = it.row_start + g;
    st.m = kNegInf;
    st.l = st.psum = st.zsum = 0.f;
    st.rf = rf[g];
    st.qpos = R < it.rows_total ? it.first_pos + R / it.G : -1;
  }
  PAGODA_TQ_UNROLL
  for (int j = 0; j < D / 16; ++j) st.acc[j][0] = st.acc[j][1] = st.acc[j][2] = st.acc[j][3] = 0.f;
  uint32_t qreg[F::kQInRegs ? D / 16 : 1][4];
  if constexpr (F::kQInRegs) {
    PAGODA_TQ_UNROLL
    for (int kk = 0; kk < D / 16; ++kk) load_q_frag<D>(q_s, kk, g, t, F::kQStride, qreg[kk]);
  }
  const uint32_t* lut_lane = lut + lane;
  const int n = it.tile_end - it.tile_begin;
  auto issue = [&](int i) {
    const int key0 = (it.tile_begin + i) * kTileKeys + kSubKeys * warp;
    if (i < n && key0 < it.kv_end) {
      const uint8_t* src = subtile_src(a, btab, kvh, key0, F::kSlot);
      uint8_t* dst = ring + (i % F::kStages) * F::kSubBytes;
      for (int c = lane; c < F::kSubChunks; c += 32) Ops::copy16(dst + 16 * c, src + 16 * c);
    }
    Ops::commit();
  };
  for (int i = 0; i < F::kStages - 1; ++i) issue(i);
  for (int i = 0; i < n; ++i) {
    issue(i + F::kStages - 1);
    Ops::template wait<F::kStages - 1>();
    Ops::sync_warp();
    const int key0 = (it.tile_begin + i) * kTileKeys + kSubKeys * warp;
    if (key0 < it.kv_end)
      decode_subtile<Ops, KB, VB, NC, D>(st, ring + (i % F::kStages) * F::kSubBytes, key0, q_s, qreg, lut_lane, lane);
    Ops::sync_warp();  // the stage is overwritten by a later issue
  }
  Ops::template wait<0>();

  // ---- row sums over the quad, then the statistics of rows 2t and 2t + 1 ----
  PAGODA_TQ_UNROLL
  for (int o = 1; o <= 2; o *= 2) {
    st.l += Ops::shfl_xor(st.l, o);
    st.psum += Ops::shfl_xor(st.psum, o);
    st.zsum += Ops::shfl_xor(st.zsum, o);
  }
  float ps[2], zs[2];
  PAGODA_TQ_UNROLL
  for (int r = 0; r < 2; ++r) {
    ps[r] = Ops::shfl(st.psum, 8 * t + 4 * r);
    zs[r] = Ops::shfl(st.zsum, 8 * t + 4 * r);
  }
  // ---- merge the 4 warps' rows 0-7 through shared memory ----
  Ops::sync_cta();  // every warp is done with the table, q~ and its ring
  constexpr int MS = F::kMergeStride;
  constexpr float kUnit = F::kValueUnit;
  float* ms = reinterpret_cast<float*>(smem);  // [4][8] m, [4][8] l, [4][8][MS] o
  float* ls = ms + kWarps * 8;
  float* os = ls + kWarps * 8;
  if (t == 0) {
    ms[warp * 8 + g] = st.m;
    ls[warp * 8 + g] = st.l;
  }
  PAGODA_TQ_UNROLL
  for (int j = 0; j < D / 16; ++j) {
    const int d = (D / 8) * g + 2 * j;
    PAGODA_TQ_UNROLL
    for (int r = 0; r < 2; ++r) {
      float* o = os + (warp * 8 + 2 * t + r) * MS + d;
      o[0] = kUnit * (st.acc[j][r] - ps[r]) + zs[r];
      o[1] = kUnit * (st.acc[j][2 + r] - ps[r]) + zs[r];
    }
  }
  Ops::sync_cta();
  const int valid_rows = it.rows_total - it.row_start;
  const int r = tid >> 4, part = tid & 15;  // 16 threads per row, column pairs part * 2 + 32 k
  if (r >= valid_rows) return;
  float mw[kWarps], mm = kNegInf;
  PAGODA_TQ_UNROLL
  for (int x = 0; x < kWarps; ++x) {
    mw[x] = ms[x * 8 + r];
    mm = fmaxf(mm, mw[x]);
  }
  const float mu = mm == kNegInf ? 0.f : mm;
  float wgt[kWarps], lsum = 0.f;
  PAGODA_TQ_UNROLL
  for (int x = 0; x < kWarps; ++x) {
    wgt[x] = exp2_(mw[x] - mu);  // 0 for a warp without keys
    lsum += ls[x * 8 + r] * wgt[x];
  }
  const int R = it.row_start + r;
  const int tok = it.q_begin + R / it.G, h = kvh * it.G + R % it.G;
  const RowOut out{&a, it.split};
  for (int d = part * 2; d < D; d += 32) {
    float o0 = 0.f, o1 = 0.f;
    PAGODA_TQ_UNROLL
    for (int x = 0; x < kWarps; ++x) {
      o0 += os[(x * 8 + r) * MS + d] * wgt[x];
      o1 += os[(x * 8 + r) * MS + d + 1] * wgt[x];
    }
    out.put(tok, h, mm, lsum, d, o0, o1);
  }
}

#ifdef __CUDACC__
template <int KB, int VB, bool NC, int D>
__global__ void __launch_bounds__(kThreads, D >= 256 ? 2 : 3) tq_decode_kernel(const KernelArgs a) {
  extern __shared__ uint4 tq_decode_smem[];
  tq_decode_cta<DeviceOps, KB, VB, NC, D>(a, a.work[blockIdx.x], int(blockIdx.y), int(threadIdx.x),
                                          reinterpret_cast<uint8_t*>(tq_decode_smem));
}
#endif  // __CUDACC__

}  // namespace pagoda::tq_detail
