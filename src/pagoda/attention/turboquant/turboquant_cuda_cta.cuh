// PRIVATE to turboquant/: the general CTA body of the TurboQuant attention kernel (turboquant_cuda_kernel.cuh
// describes the decoding; turboquant_cuda_decode.cuh is the body of decode steps with <= 8 rows per KV head).
// Any work item: decode-shaped items (<= 16 rows) give each warp the same 16 rows and its own 16-key subtile of
// every 64 keys, merged across the 4 warps at the end; other items give each warp 16 rows of the item and all
// of its keys. P V is O = P V (M = the warp's 16 rows, N = 8 value dims per n-tile).
#pragma once

#include "pagoda/attention/turboquant/turboquant_cuda_kernel.cuh"

namespace pagoda::tq_detail {

// One warp's softmax state of its 16 rows (lane: rows g and g + 8) and its output accumulators.
template <int D>
struct WarpState {
  float m[2], l[2];    // log2-domain max; sum of p (this lane's keys)
  float psum[2];       // sum of the fp16-rounded p * scale (this lane's keys)
  float zsum[2];       // sum of p * zero (this lane's keys)
  float acc[D / 8][4];  // sum p' (1 + q / 2^b): rows g (e < 2), g + 8; dim (D / 8)(2t + e % 2) + n-tile
  float rf[2];         // 2^e_row * scale * log2(e); 0 for rows past the item
  int qpos[2];         // the last key a row attends (causal); -1 for rows past the item
};


// One subtile of 16 staged slots (keys key0 ..) for the warp's 16 rows.
template <class Ops, int KB, int VB, bool NC, int D>
PAGODA_TQ_DEV void process_subtile(WarpState<D>& st, const uint8_t* sub, int key0, const uint8_t* q_rows,
                                   const uint32_t (*qreg)[4], const uint32_t* lut_lane, bool gram_free, int lane) {
  using F = Fmt<KB, VB, NC, D>;
  const int t = lane & 3;
  float s[2][4], fk[2][2], vs[2][2], vz[2][2];
  subtile_scores<Ops, KB, VB, NC, D>(sub, q_rows, qreg, lut_lane, gram_free, lane, s, fk, vs, vz);
  // ---- online softmax (log2 domain) ----
  float x[2][4];
  float rmax[2] = {kNegInf, kNegInf};
  bool ok[2][4];
  PAGODA_TQ_UNROLL
  for (int nt = 0; nt < 2; ++nt) {
    PAGODA_TQ_UNROLL
    for (int e = 0; e < 4; ++e) {
      const int i = e >> 1, key = key0 + nt * 8 + 2 * t + (e & 1);
      ok[nt][e] = key <= st.qpos[i];
      x[nt][e] = ok[nt][e] ? s[nt][e] * st.rf[i] * fk[nt][e & 1] : kNegInf;
      rmax[i] = fmaxf(rmax[i], x[nt][e]);
    }
  }
  float alpha[2], muse[2];
  PAGODA_TQ_UNROLL
  for (int i = 0; i < 2; ++i) {
    rmax[i] = fmaxf(rmax[i], Ops::shfl_xor(rmax[i], 1));
    rmax[i] = fmaxf(rmax[i], Ops::shfl_xor(rmax[i], 2));
    const float m_new = fmaxf(st.m[i], rmax[i]);
    muse[i] = m_new == kNegInf ? 0.f : m_new;
    alpha[i] = exp2_(st.m[i] - muse[i]);
    st.m[i] = m_new;
    st.l[i] *= alpha[i];
    st.psum[i] *= alpha[i];
    st.zsum[i] *= alpha[i];
  }
  PAGODA_TQ_UNROLL
  for (int j = 0; j < D / 8; ++j) {
    st.acc[j][0] *= alpha[0];
    st.acc[j][1] *= alpha[0];
    st.acc[j][2] *= alpha[1];
    st.acc[j][3] *= alpha[1];
  }
  float pv[2][4];  // p * scale, selected
  PAGODA_TQ_UNROLL
  for (int nt = 0; nt < 2; ++nt) {
    PAGODA_TQ_UNROLL
    for (int e = 0; e < 4; ++e) {
      const int i = e >> 1;
      const float p = exp2_(x[nt][e] - muse[i]);
      st.l[i] += p;
      pv[nt][e] = ok[nt][e] ? p * vs[nt][e & 1] : 0.f;
      st.zsum[i] += ok[nt][e] ? p * vz[nt][e & 1] : 0.f;
    }
  }
  // A fragment of P' (rows g, g + 8 x keys 2t, 2t+1, 2t+8, 2t+9), and sum p' of what the mma multiplies.
  const uint32_t pa[4] = {pack_f16(pv[0][0], pv[0][1]), pack_f16(pv[0][2], pv[0][3]), pack_f16(pv[1][0], pv[1][1]),
                          pack_f16(pv[1][2], pv[1][3])};
  PAGODA_TQ_UNROLL
  for (int r = 0; r < 4; ++r) {
    const int i = r & 1;  // pa[0], pa[2]: row g; pa[1], pa[3]: row g + 8
    st.psum[i] += f16_value(uint16_t(pa[r] & 0xffff)) + f16_value(uint16_t(pa[r] >> 16));
  }
  // ---- values: keys 2t, 2t+1, 2t+8, 2t+9, dims (D/8) g .. ----
  uint32_t vw[4][F::kValWords];
  load_value_slices<KB, VB, NC, D>(sub, lane, vw);
  PAGODA_TQ_UNROLL
  for (int j = 0; j < D / 8; ++j) {
    const uint32_t b0 = value_pair<VB>(vw[0], vw[1], j);
    const uint32_t b1 = value_pair<VB>(vw[2], vw[3], j);
    Ops::mma(st.acc[j], pa, b0, b1);
  }
}

// The unnormalised output of element (row i of the lane, e % 2, n-tile j) once the lane's sums are complete:
// sum p v^ = 2^b (acc - sum p') + sum p zero.
template <int VB, int D>
PAGODA_TQ_DEV float unnormalised(const WarpState<D>& st, int i, int j, int e) {
  return float(1 << VB) * (st.acc[j][2 * i + e] - st.psum[i]) + st.zsum[i];
}

// The CTA body: work item w for KV head kvh. smem holds Fmt::kSmem bytes, 16-byte aligned.
template <class Ops, int KB, int VB, bool NC, int D>
PAGODA_TQ_DEV void tq_cta(const KernelArgs& a, int4 w, int kvh, int tid, uint8_t* smem) {
  using F = Fmt<KB, VB, NC, D>;
  const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const Item it = make_item(a, w, kvh);
  if (it.rows_total <= it.row_start) return;
  const int* btab = a.block_tables + int64_t(it.seq) * a.max_blocks_per_seq;
  uint32_t* lut = reinterpret_cast<uint32_t*>(smem);
  uint8_t* q_s = smem + F::kQOffset;
  float* rf = reinterpret_cast<float*>(smem + F::kRfOffset);
  uint8_t* stages = smem + F::kStageOffset;

  // ---- the lookup table and q~ ----
  const int rows_cta = it.decode ? 16 : kRowsPerItem;
  if constexpr (F::kLutEntries > 0) {
    uint32_t* scratch = reinterpret_cast<uint32_t*>(stages);  // free until the first copy lands
    build_lut<KB>(a, lut, scratch, tid);
    Ops::sync_cta();
    replicate_lut<KB>(lut, scratch, tid);
  }
  prepare_queries<Ops, D>(a, it, rows_cta, q_s, F::kQStride, rf, warp, lane);
  Ops::sync_cta();

  // ---- the warp's rows ----
  const int rb = it.decode ? 0 : 16 * warp;  // first row of the warp (relative to row_start)
  const int warp_rows = it.rows_total - it.row_start - rb;  // valid rows of the warp (may be <= 0)
  const bool gram_free = warp_rows <= 8;
  WarpState<D> st;
  PAGODA_TQ_UNROLL
  for (int i = 0; i < 2; ++i) {
    const int r = rb + g + 8 * i, R = it.row_start + r;
    st.m[i] = kNegInf;
    st.l[i] = st.psum[i] = st.zsum[i] = 0.f;
    st.rf[i] = rf[r];
    st.qpos[i] = R < it.rows_total ? it.first_pos + R / it.G : -1;
  }
  PAGODA_TQ_UNROLL
  for (int j = 0; j < D / 8; ++j) st.acc[j][0] = st.acc[j][1] = st.acc[j][2] = st.acc[j][3] = 0.f;
  const uint8_t* q_rows = q_s + rb * F::kQStride;
  uint32_t qreg[F::kQInRegs ? D / 16 : 1][4];
  if constexpr (F::kQInRegs) {
    PAGODA_TQ_UNROLL
    for (int kk = 0; kk < D / 16; ++kk) load_q_frag<D>(q_rows, kk, g, t, F::kQStride, qreg[kk]);
  }
  const uint32_t* lut_lane = lut + lane;
  const int n = it.tile_end - it.tile_begin;

  if (it.decode) {
    // Warp w takes keys 16w .. of every tile, through its own ring of kStages subtiles.
    uint8_t* ring = stages + warp * F::kStages * F::kSubBytes;
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
        process_subtile<Ops, KB, VB, NC, D>(st, ring + (i % F::kStages) * F::kSubBytes, key0, q_rows, qreg, lut_lane,
                                            gram_free, lane);
      Ops::sync_warp();  // the stage is overwritten by a later issue
    }
  } else {
    // The CTA stages the 4 subtiles of each tile; every warp runs all of them for its own rows.
    auto issue = [&](int i) {
      if (i < n) {
        uint8_t* dst = stages + (i % F::kStages) * kWarps * F::kSubBytes;
        const int tile_key = (it.tile_begin + i) * kTileKeys;
        for (int c = tid; c < kWarps * F::kSubChunks; c += kThreads) {
          const int sub = c / F::kSubChunks, ch = c - sub * F::kSubChunks;
          const int key0 = tile_key + kSubKeys * sub;
          if (key0 < it.kv_end)
            Ops::copy16(dst + sub * F::kSubBytes + 16 * ch, subtile_src(a, btab, kvh, key0, F::kSlot) + 16 * ch);
        }
      }
      Ops::commit();
    };
    for (int i = 0; i < F::kStages - 1; ++i) issue(i);
    for (int i = 0; i < n; ++i) {
      issue(i + F::kStages - 1);
      Ops::template wait<F::kStages - 1>();
      Ops::sync_cta();
      const uint8_t* stage = stages + (i % F::kStages) * kWarps * F::kSubBytes;
      if (warp_rows > 0) {
        for (int sub = 0; sub < kWarps; ++sub) {
          const int key0 = (it.tile_begin + i) * kTileKeys + kSubKeys * sub;
          if (key0 < it.kv_end)
            process_subtile<Ops, KB, VB, NC, D>(st, stage + sub * F::kSubBytes, key0, q_rows, qreg, lut_lane,
                                                gram_free, lane);
        }
      }
      Ops::sync_cta();  // every warp is done with the stage before it is overwritten
    }
  }
  Ops::template wait<0>();

  // ---- the lane's sums are the row's: quad reductions ----
  PAGODA_TQ_UNROLL
  for (int i = 0; i < 2; ++i) {
    PAGODA_TQ_UNROLL
    for (int o = 1; o <= 2; o *= 2) {
      st.l[i] += Ops::shfl_xor(st.l[i], o);
      st.psum[i] += Ops::shfl_xor(st.psum[i], o);
      st.zsum[i] += Ops::shfl_xor(st.zsum[i], o);
    }
  }
  const RowOut out{&a, it.split};
  constexpr int DS = D / 8;  // n-tiles of P V; dims (D/8)(2t + e) + j of a lane are contiguous in j
  if (!it.decode) {
    if (warp_rows <= 0) return;
    PAGODA_TQ_UNROLL
    for (int i = 0; i < 2; ++i) {
      const int R = it.row_start + rb + g + 8 * i;
      if (R >= it.rows_total) continue;
      const int tok = it.q_begin + R / it.G, h = kvh * it.G + R % it.G;
      PAGODA_TQ_UNROLL
      for (int e = 0; e < 2; ++e) {
        PAGODA_TQ_UNROLL
        for (int j = 0; j < DS; j += 2)
          out.put(tok, h, st.m[i], st.l[i], DS * (2 * t + e) + j, unnormalised<VB, D>(st, i, j, e),
                  unnormalised<VB, D>(st, i, j + 1, e));
      }
    }
    return;
  }
  // ---- decode: merge the 4 warps' states of rows 0-15 through shared memory ----
  Ops::sync_cta();  // every warp is done with the table, q~ and its ring
  constexpr int MS = F::kMergeStride;
  float* ms = reinterpret_cast<float*>(smem);  // [4][16] m, [4][16] l, [4][16][MS] o
  float* ls = ms + kWarps * 16;
  float* os = ls + kWarps * 16;
  PAGODA_TQ_UNROLL
  for (int i = 0; i < 2; ++i) {
    const int r = g + 8 * i;
    if (t == 0) {
      ms[warp * 16 + r] = st.m[i];
      ls[warp * 16 + r] = st.l[i];
    }
    PAGODA_TQ_UNROLL
    for (int e = 0; e < 2; ++e) {
      PAGODA_TQ_UNROLL
      for (int j = 0; j < DS; ++j) os[(warp * 16 + r) * MS + DS * (2 * t + e) + j] = unnormalised<VB, D>(st, i, j, e);
    }
  }
  Ops::sync_cta();
  const int valid_rows = it.rows_total - it.row_start;
  const int r = tid >> 3, part = tid & 7;  // 8 threads per row, column pairs part * 2 + 16 k
  if (r >= valid_rows) return;
  float mw[kWarps], mm = kNegInf;
  PAGODA_TQ_UNROLL
  for (int x = 0; x < kWarps; ++x) {
    mw[x] = ms[x * 16 + r];
    mm = fmaxf(mm, mw[x]);
  }
  const float mu = mm == kNegInf ? 0.f : mm;
  float wgt[kWarps], lsum = 0.f;
  PAGODA_TQ_UNROLL
  for (int x = 0; x < kWarps; ++x) {
    wgt[x] = exp2_(mw[x] - mu);  // 0 for a warp without keys (m = -inf)
    lsum += ls[x * 16 + r] * wgt[x];
  }
  const int R = it.row_start + r;
  const int tok = it.q_begin + R / it.G, h = kvh * it.G + R % it.G;
  for (int d = part * 2; d < D; d += 16) {
    float o0 = 0.f, o1 = 0.f;
    PAGODA_TQ_UNROLL
    for (int x = 0; x < kWarps; ++x) {
      // A warp without keys has weight 0 and finite sums (zeros): its o is 0 * 0.
      o0 += os[(x * 16 + r) * MS + d] * wgt[x];
      o1 += os[(x * 16 + r) * MS + d + 1] * wgt[x];
    }
    out.put(tok, h, mm, lsum, d, o0, o1);
  }
}


#ifdef __CUDACC__
template <int KB, int VB, bool NC, int D>
__global__ void __launch_bounds__(kThreads, D >= 256 ? 1 : 2) tq_attention_kernel(const KernelArgs a) {
  extern __shared__ uint4 tq_smem[];
  tq_cta<DeviceOps, KB, VB, NC, D>(a, a.work[blockIdx.x], int(blockIdx.y), int(threadIdx.x),
                                   reinterpret_cast<uint8_t*>(tq_smem));
}
#endif  // __CUDACC__

}  // namespace pagoda::tq_detail
