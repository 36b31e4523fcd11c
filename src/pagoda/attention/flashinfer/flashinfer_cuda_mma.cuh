// FLASHINFER's tensor-core CTA body over a FiPlan: one CTA runs one (task, KV head) of the plan with
// mma.sync, for head sizes 64/128/256. PRIVATE to flashinfer/.
//
// Rows. The task's rows are packed with the query heads of the KV head (FlashInfer's GQA head grouping):
// packed row pr is row pr / group of the task with query head kvh * group + pr % group, so a decode token of
// GQA 8 is 8 rows of one m16 tile. Up to 64 packed rows (4 m-tiles) are attended per pass over the keys.
// With one m-tile the four warps share it and split every 64-key stage into four 16-key slices (FlashInfer's
// key-parallel decode; two 16-key slices of a 32-key stage at head size 256); with two, two warps share
// each; with three or four, each warp owns one. The warps of
// an m-tile merge their partial softmax states through shared memory at the end.
//
// Keys. The task's key range [kv_begin, kv_end) (or its run-time split range) is read in stages of keys,
// a ring of kStages buffers filled with cp.async (kStages - 1 stages in flight while one is consumed). The
// offset of every key's K row in the paged cache (any page size, NHD or HND) is looked up once per stage by
// 64 threads; keys past the range are zero-filled, never left stale. K and V rows are stored with 16 bytes
// of padding so the fragment loads are bank-conflict free. The block ids are loaded a stage before they are
// needed, so their latency is off the copy's critical path.
//
// Products. q.k: m16n8k16 in the query dtype T (fp8 K widened exactly to T), or, with kQ8 (e4m3 cache and
// the query quantized to e4m3 with one scale per packed row: amax / 448), m16n8k32 e4m3 x e4m3 MMA on the
// cache bytes as they are (SM 8.9+). p.v: m16n8k16 in T over T values, or in fp16 over fp8 V widened exactly
// to fp16 (probabilities in [0, 1] lose nothing to fp16's range), the V scale applied once to the output.
// Softmax in float32, base 2.
//
// Every collective (mma, ldmatrix, shuffle, cp.async, barriers) goes through Ops, so the host emulation test
// (tests/attention_gpu/flashinfer_emulation_test.cc) runs this same body with one thread per lane.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "pagoda/attention/flashinfer/flashinfer_cuda_row.cuh"

namespace pagoda::fi_detail {

constexpr int kMmaWarps = 4;
constexpr int kMmaThreads = 32 * kMmaWarps;
constexpr int kDecodeRows = 16;  // packed rows of every task of a plan the decode kernel serves (one m-tile)

// kDecode: the kernel of plans whose every task packs at most kDecodeRows rows (decode steps at GQA <= 16,
// FiDevicePlan::decode). Its query area holds one m-tile instead of four, and the room this frees holds a
// third stage while two CTAs still share an SM: decode reads each key once and is bound by the bytes in
// flight, as the paged kernels' decode (paged_attention_kernel.cuh) measured.
template <typename T, KvKind kKv, int HD, bool kQ8, bool kDecode = false>
struct MmaFmt {
  static_assert(HD == 64 || HD == 128 || HD == 256);
  static_assert(!kQ8 || kKv == KvKind::kE4M3, "FP8 queries need an e4m3 cache");
  static constexpr int kKvBytes = kKv == KvKind::kSame ? 2 : 1;
  static constexpr int kKvRow = HD * kKvBytes;         // bytes of a K (or V) row in the cache
  static constexpr int kKvPitch = kKvRow + 16;         // in shared memory
  static constexpr int kQPitch = (kQ8 ? HD : 2 * HD) + 16;
  static constexpr int kPassRows = kDecode ? kDecodeRows : 64;  // packed rows attended per pass over the keys
  static constexpr int kStages = kDecode ? 3 : 2;
  static constexpr int kSub = HD <= 128 ? 64 : 32;     // most keys of one online-softmax step of a warp
  // Keys of one pipeline stage (two stages of 256-wide rows fit SM 8.0's 163 KB only at 32 keys).
  static constexpr int kStageKeys = HD <= 128 ? 64 : 32;
  static constexpr int kOPitch = HD + 4;               // floats of a row of the merge area
  static constexpr int kStageBytes = 2 * kStageKeys * kKvPitch;  // K rows, then V rows
  static constexpr int kQOff = 0, kScaleOff = kPassRows * kQPitch;
  static constexpr int kKeyOff = kScaleOff + kPassRows * 4;                  // int64 [kStages][kStageKeys]
  static constexpr int kStageOff = kKeyOff + kStages * kStageKeys * 8;
  static constexpr int kMainBytes = kStageOff + kStages * kStageBytes;
  // The merge area reuses the start of shared memory once the last stage is consumed.
  static constexpr int kMergeO = 0, kMergeMl = kMmaWarps * 16 * kOPitch * 4;
  static constexpr int kMergeBytes = kMergeMl + kMmaWarps * 16 * 2 * 4;
  static constexpr int kSmem = kMainBytes > kMergeBytes ? kMainBytes : kMergeBytes;
};

// Shared-memory accesses at aligned addresses: plain loads on the device, memcpy in the host emulation.
template <typename X>
__device__ __forceinline__ X lds(const uint8_t* p) {
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const X*>(p);
#else
  X v;
  memcpy(&v, p, sizeof(X));
  return v;
#endif
}
__device__ __forceinline__ void copy16_sync(uint8_t* dst, const void* src) {
#ifdef __CUDA_ARCH__
  *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
#else
  memcpy(dst, src, 16);
#endif
}
__device__ __forceinline__ void zero16(uint8_t* dst) {
#ifdef __CUDA_ARCH__
  *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
#else
  memset(dst, 0, 16);
#endif
}

// Two cache elements (raw, unscaled; element 0 in the low byte) widened to one fragment register of two
// 16-bit values of type P, element 0 low (exact: every e4m3 / e5m2 value is an fp16 and a bf16 value). One
// cvt.f16x2 of the byte pair on SM 8.9+; bf16 goes on through float.
template <typename P, KvKind kKv>
__device__ __forceinline__ uint32_t widen_pair(uint16_t bytes) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(bytes), kKv == KvKind::kE4M3 ? __NV_E4M3 : __NV_E5M2);
  if constexpr (std::is_same_v<P, __half>) {
    return uint32_t(h.x) | uint32_t(h.y) << 16;
  } else {
    __half_raw lo, hi;
    lo.x = h.x;
    hi.x = h.y;
    return cuda_convert::pack2<__nv_bfloat16>(__half2float(__half(lo)), __half2float(__half(hi)));
  }
}
__device__ __forceinline__ uint16_t byte_pair(uint8_t lo, uint8_t hi) { return uint16_t(lo | hi << 8); }

// Position of packed row pr of the task, or -1 for a padding row (pr >= packed).
__device__ __forceinline__ int packed_row_pos(const FiCudaParams& p, const FiTask& task, int g, int pr, int packed) {
  if (pr >= packed) return -1;
  const int r = pr / g, token = p.plan.row_token[task.row_begin + r], sq = p.plan.row_seq[task.row_begin + r];
  const int q_len = p.query_start_loc[sq + 1] - p.query_start_loc[sq];
  return p.seq_lens[sq] - q_len + (token - p.query_start_loc[sq]);
}

// The body of CTA (task_index, kvh); tid in [0, kMmaThreads); smem of MmaFmt<...>::kSmem bytes, 16-aligned.
// PRECOND: head_size == HD; q rows 16-byte aligned; kv_cache 16-byte aligned; with kDecode, the task packs at
// most kDecodeRows rows.
template <typename Ops, typename T, KvKind kKv, int HD, bool kQ8, bool kDecode = false>
__device__ __forceinline__ void fi_mma_cta(const FiCudaParams& p, int task_index, int kvh, int tid, uint8_t* smem) {
  using F = MmaFmt<T, kKv, HD, kQ8, kDecode>;
  constexpr int kPassRows = F::kPassRows, kStages = F::kStages;
  using PT = std::conditional_t<kKv == KvKind::kSame, T, __half>;  // the p.v product's type
  constexpr int kCh = F::kKvRow / 16;                              // 16-byte chunks of a K row
  constexpr float kLog2e = 1.4426950408889634f;
  const FiTask task = p.plan.tasks[task_index];
  const int g = p.num_q_heads / p.num_kv_heads;
  const int warp = tid / 32, lane = tid % 32, gr = lane / 4, tq = lane % 4;
  const int packed_all = (task.row_end - task.row_begin) * g;
  uint8_t* q_s = smem + F::kQOff;
  float* qscale_s = reinterpret_cast<float*>(smem + F::kScaleOff);
  int64_t* key_s = reinterpret_cast<int64_t*>(smem + F::kKeyOff);
  uint8_t* stage_s = smem + F::kStageOff;
  const uint8_t* cache = static_cast<const uint8_t*>(p.kv_cache);

  int kb = task.kv_begin, ke = task.kv_end;
  if (task.num_splits > 0) {  // a captured decode task: one token, its piece of the run-time range
    const int sq = p.plan.row_seq[task.row_begin];
    int lo, hi;
    fi_visible_range(packed_row_pos(p, task, g, 0, 1), p.seq_lens[sq], p.sliding_window, p.causal, &lo, &hi);
    fi_split_range(lo, hi, task.split, task.num_splits, &kb, &ke);
  }
  const float scale = p.scale > 0 ? p.scale : 1.0f / sqrtf(float(HD));
  const float k_mul = kKv == KvKind::kSame ? 1.0f : p.k_scale;
  const float v_mul = kKv == KvKind::kSame ? 1.0f : p.v_scale;
  const int64_t qstride = p.q_stride > 0 ? p.q_stride : int64_t(p.num_q_heads) * HD;
  const int num_tiles = ke > kb ? (ke - kb + F::kStageKeys - 1) / F::kStageKeys : 0;

  for (int rb = 0; rb < packed_all; rb += kPassRows) {
    const int packed = packed_all - rb < kPassRows ? packed_all - rb : kPassRows;
    const int m_tiles = (packed + 15) / 16;
    int wpt = m_tiles == 1 ? 4 : m_tiles == 2 ? 2 : 1;  // warps per m-tile, each on a slice of >= 16 keys
    if (wpt > F::kStageKeys / 16) wpt = F::kStageKeys / 16;
    const int mt = warp / wpt, ks = warp % wpt;
    const bool active = mt < m_tiles;
    const int slice = F::kStageKeys / wpt;                    // keys of a stage this warp attends
    const int sub = slice < F::kSub ? slice : F::kSub;     // keys per online-softmax step

    // The block id of stage t's key tid (threads below kStageKeys), -1 past the range. It is loaded a stage
    // ahead of its use (fetch for t + kStages, publish for t + kStages - 1), so the block table's latency
    // overlaps a stage's copy and products instead of preceding every copy.
    auto fetch = [&](int t) -> int64_t {
      const int k = kb + t * F::kStageKeys + tid;
      if (tid >= F::kStageKeys || t >= num_tiles || k >= ke) return -1;
      return p.block_tables[int64_t(task.seq) * p.block_table_stride + k / p.block_size];
    };
    int64_t first[kStages - 1];  // the first stages' block ids: in flight while the queries load
#pragma unroll
    for (int j = 0; j < kStages - 1; ++j) first[j] = fetch(j);

    // ---- the pass's queries: one warp per packed row (zeros past the task's rows) ----
    for (int r = warp; r < m_tiles * 16; r += kMmaWarps) {
      const int pr = rb + r;
      uint8_t* dst = q_s + r * F::kQPitch;
      const T* src = nullptr;
      if (pr < packed_all) {
        const int token = p.plan.row_token[task.row_begin + pr / g];
        src = static_cast<const T*>(p.q) + int64_t(token) * qstride + int64_t(kvh * g + pr % g) * HD;
      }
      if constexpr (kQ8) {
        constexpr int kPer = HD / 32;
        float x[kPer], amax = 0.0f;
#pragma unroll
        for (int j = 0; j < kPer; ++j) {
          x[j] = src ? cuda_convert::to_f32(src[lane * kPer + j]) : 0.0f;
          amax = fmaxf(amax, fabsf(x[j]));
        }
#pragma unroll
        for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, Ops::shfl_xor(amax, o));
        const float qs = amax > 0 ? amax / 448.0f : 1.0f;
#pragma unroll
        for (int j = 0; j < kPer; ++j)
          dst[lane * kPer + j] = uint8_t(__nv_cvt_float_to_fp8(x[j] / qs, __NV_SATFINITE, __NV_E4M3));
        if (lane == 0) qscale_s[r] = qs;
      } else {
        for (int c = lane; c < HD / 8; c += 32) {
          if (src) copy16_sync(dst + 16 * c, src + 8 * c);
          else zero16(dst + 16 * c);
        }
      }
    }

    // ---- the keys, in a ring of kStages stages ----
    auto publish = [&](int t, int64_t block) {  // the K-row offsets (elements) of stage t's keys, -1 past the range
      if (tid < F::kStageKeys) {
        const int o = (kb + t * F::kStageKeys + tid) % p.block_size;
        int64_t off = -1;
        if (block >= 0)
          off = p.layout == KvLayout::kHND ? ((block * p.num_kv_heads + kvh) * p.block_size + o) * 2 * HD
                                           : ((block * p.block_size + o) * p.num_kv_heads + kvh) * 2 * HD;
        key_s[(t % kStages) * F::kStageKeys + tid] = off;
      }
    };
    auto issue = [&](int t) {
      uint8_t* st = stage_s + (t % kStages) * F::kStageBytes;
      const int64_t* offs = key_s + (t % kStages) * F::kStageKeys;
      for (int c = tid; c < F::kStageKeys * 2 * kCh; c += kMmaThreads) {
        const int key = c / (2 * kCh), part = c % (2 * kCh), is_v = part / kCh, ch = part % kCh;
        uint8_t* dst = st + (is_v * F::kStageKeys + key) * F::kKvPitch + 16 * ch;
        const int64_t off = offs[key];
        if (off < 0) zero16(dst);
        else Ops::copy16(dst, cache + off * F::kKvBytes + is_v * F::kKvRow + 16 * ch);
      }
    };

    // This thread's two rows of its m-tile (gr and gr + 8) and their positions.
    int pos[2];
    for (int i = 0; i < 2; ++i) pos[i] = active ? packed_row_pos(p, task, g, rb + mt * 16 + gr + 8 * i, packed_all) : -1;
    float qmul[2] = {scale * k_mul * kLog2e, scale * k_mul * kLog2e};
    const bool capped = p.softcap > 0;
    if (capped) qmul[0] = qmul[1] = scale * k_mul;
    float o[HD / 8][4];
#pragma unroll
    for (int j = 0; j < HD / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

#pragma unroll
    for (int j = 0; j < kStages - 1; ++j)
      if (j < num_tiles) publish(j, first[j]);
    int64_t next_block = fetch(kStages - 1);  // published in the loop's first iteration
    Ops::sync_cta();  // the queries, their scales and the first stages' offsets are written
    if constexpr (kQ8) {
      if (active)
        for (int i = 0; i < 2; ++i) qmul[i] *= qscale_s[mt * 16 + gr + 8 * i];
    }
#pragma unroll
    for (int j = 0; j < kStages - 1; ++j) {  // one commit group per stage, empty ones included
      if (j < num_tiles) issue(j);
      Ops::commit();
    }
    for (int t = 0; t < num_tiles; ++t) {
      const int ahead = t + kStages - 1;  // the stage issued in this iteration
      if (ahead < num_tiles) publish(ahead, next_block);
      next_block = fetch(t + kStages);
      Ops::sync_cta();  // offsets of `ahead` visible; every warp is done with the buffer it reuses (t - 1's)
      if (ahead < num_tiles) issue(ahead);
      Ops::commit();
      Ops::template wait<kStages - 1>();
      Ops::sync_cta();  // stage t has landed, every thread's part of it
      const int k0 = kb + t * F::kStageKeys;
      const uint8_t* ks_base = stage_s + (t % kStages) * F::kStageBytes;
      const uint8_t* vs_base = ks_base + F::kStageKeys * F::kKvPitch;
      if (!active) continue;
      for (int s0 = ks * slice; s0 < (ks + 1) * slice && k0 + s0 < ke; s0 += sub) {
        // S = Q K^T over keys [s0, s0 + sub) of the stage: n-tiles of 8 keys.
        float s[F::kSub / 8][4];
#pragma unroll
        for (int nt = 0; nt < F::kSub / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
        // The A fragment of k-step kk from shared memory: 32 bytes of rows gr and gr + 8 of the m-tile (16
        // dimensions of 16-bit queries, 32 of e4m3 ones).
        auto load_a = [&](int kk, uint32_t(&a)[4]) {
          const uint8_t* q0 = q_s + (mt * 16 + gr) * F::kQPitch + 32 * kk + 4 * tq;
          a[0] = lds<uint32_t>(q0);
          a[1] = lds<uint32_t>(q0 + 8 * F::kQPitch);
          a[2] = lds<uint32_t>(q0 + 16);
          a[3] = lds<uint32_t>(q0 + 8 * F::kQPitch + 16);
        };
        if constexpr (kQ8) {
#pragma unroll
          for (int kk = 0; kk < HD / 32; ++kk) {
            uint32_t a[4];
            load_a(kk, a);
#pragma unroll
            for (int nt = 0; nt < F::kSub / 8; ++nt) {
              if (nt * 8 >= sub) break;
              const uint8_t* kr = ks_base + (s0 + nt * 8 + gr) * F::kKvPitch + 32 * kk + 4 * tq;
              Ops::mma_e4m3(s[nt], a, lds<uint32_t>(kr), lds<uint32_t>(kr + 16));
            }
          }
        } else if constexpr (kKv == KvKind::kSame) {
          // ldmatrix: A from the 16 x 16 query block (lane: row lane % 16, column 8 (lane / 16)); B for two
          // n-tiles (lane: key 8 (lane / 16) + lane % 8, dimensions 8 ((lane / 8) % 2) of the 16).
          const uint8_t* qrow = q_s + (mt * 16 + lane % 16) * F::kQPitch + 16 * (lane / 16);
          const uint8_t* krow = ks_base + (s0 + 8 * (lane / 16) + lane % 8) * F::kKvPitch + 16 * ((lane / 8) % 2);
#pragma unroll 4
          for (int kk = 0; kk < HD / 16; ++kk) {
            uint32_t a[4];
            Ops::ldsm_x4(a, qrow + 32 * kk);
#pragma unroll
            for (int nt = 0; nt < F::kSub / 8; nt += 2) {
              if (nt * 8 >= sub) break;
              uint32_t b[4];
              Ops::ldsm_x4(b, krow + nt * 8 * F::kKvPitch + 32 * kk);
              Ops::template mma<T>(s[nt], a, b[0], b[1]);
              Ops::template mma<T>(s[nt + 1], a, b[2], b[3]);
            }
          }
        } else {
#pragma unroll 4
          for (int kk = 0; kk < HD / 16; ++kk) {
            uint32_t a[4];
            load_a(kk, a);
#pragma unroll
            for (int nt = 0; nt < F::kSub / 8; ++nt) {
              if (nt * 8 >= sub) break;
              const uint8_t* kb8 = ks_base + (s0 + nt * 8 + gr) * F::kKvPitch + 16 * kk + 2 * tq;
              const uint32_t b0 = widen_pair<T, kKv>(lds<uint16_t>(kb8));  // dims 2tq, 2tq + 1 (+ 8)
              const uint32_t b1 = widen_pair<T, kKv>(lds<uint16_t>(kb8 + 8));
              Ops::template mma<T>(s[nt], a, b0, b1);
            }
          }
        }
        // Scale, cap, mask; the rows' maxima over the step.
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int nt = 0; nt < F::kSub / 8; ++nt) {
          if (nt * 8 >= sub) break;
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int i = e / 2, k = k0 + s0 + nt * 8 + 2 * tq + e % 2;
            float x = s[nt][e] * qmul[i];
            if (capped) x = p.softcap * tanhf(x / p.softcap) * kLog2e;
            if (pos[i] < 0 || k >= ke || !fi_visible(pos[i], k, p.sliding_window, p.causal)) x = -INFINITY;
            s[nt][e] = x;
            mx[i] = fmaxf(mx[i], x);
          }
        }
        float corr[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          mx[i] = fmaxf(mx[i], Ops::shfl_xor(mx[i], 1));
          mx[i] = fmaxf(mx[i], Ops::shfl_xor(mx[i], 2));
          const float m_new = fmaxf(m[i], mx[i]);
          const float m_use = m_new == -INFINITY ? 0.0f : m_new;
          corr[i] = exp2f(m[i] - m_use);  // 0 while m is -inf
          m[i] = m_new;
          mx[i] = m_use;
          l[i] *= corr[i];
        }
#pragma unroll
        for (int j = 0; j < HD / 8; ++j) {
          o[j][0] *= corr[0], o[j][1] *= corr[0];
          o[j][2] *= corr[1], o[j][3] *= corr[1];
        }
#pragma unroll
        for (int nt = 0; nt < F::kSub / 8; ++nt) {
          if (nt * 8 >= sub) break;
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            s[nt][e] = exp2f(s[nt][e] - mx[e / 2]);
            l[e / 2] += s[nt][e];
          }
        }
        // O += P V over the step's keys, 16 at a time.
#pragma unroll
        for (int kp = 0; kp < F::kSub / 16; ++kp) {
          if (kp * 16 >= sub) break;
          uint32_t a[4];
          a[0] = cuda_convert::pack2<PT>(s[2 * kp][0], s[2 * kp][1]);
          a[1] = cuda_convert::pack2<PT>(s[2 * kp][2], s[2 * kp][3]);
          a[2] = cuda_convert::pack2<PT>(s[2 * kp + 1][0], s[2 * kp + 1][1]);
          a[3] = cuda_convert::pack2<PT>(s[2 * kp + 1][2], s[2 * kp + 1][3]);
          if constexpr (kKv == KvKind::kSame) {
            // ldmatrix.trans over two dimension n-tiles (lane: key 8 ((lane / 8) % 2) + lane % 8, n-tile lane / 16).
            const uint8_t* vrow = vs_base + (s0 + 16 * kp + 8 * ((lane / 8) % 2) + lane % 8) * F::kKvPitch + 16 * (lane / 16);
#pragma unroll
            for (int j = 0; j < HD / 8; j += 2) {
              uint32_t b[4];
              Ops::ldsm_x4_trans(b, vrow + 16 * j);
              Ops::template mma<PT>(o[j], a, b[0], b[1]);
              Ops::template mma<PT>(o[j + 1], a, b[2], b[3]);
            }
          } else {
            const uint8_t* v0 = vs_base + (s0 + 16 * kp + 2 * tq) * F::kKvPitch;
#pragma unroll
            for (int j = 0; j < HD / 8; ++j) {
              const int d = 8 * j + gr;
              const uint32_t b0 = widen_pair<PT, kKv>(byte_pair(v0[d], v0[F::kKvPitch + d]));
              const uint32_t b1 = widen_pair<PT, kKv>(byte_pair(v0[8 * F::kKvPitch + d], v0[9 * F::kKvPitch + d]));
              Ops::template mma<PT>(o[j], a, b0, b1);
            }
          }
        }
      }
    }
    Ops::template wait<0>();

    // ---- merge the warps of each m-tile, normalise, write ----
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      l[i] += Ops::shfl_xor(l[i], 1);
      l[i] += Ops::shfl_xor(l[i], 2);
    }
    Ops::sync_cta();  // every warp is done with the queries and the stages: the merge area reuses them
    float* mo = reinterpret_cast<float*>(smem + F::kMergeO) + warp * 16 * F::kOPitch;
    float* ml = reinterpret_cast<float*>(smem + F::kMergeMl) + warp * 16 * 2;
    if (active) {
#pragma unroll
      for (int j = 0; j < HD / 8; ++j) {
        mo[gr * F::kOPitch + 8 * j + 2 * tq] = o[j][0];
        mo[gr * F::kOPitch + 8 * j + 2 * tq + 1] = o[j][1];
        mo[(gr + 8) * F::kOPitch + 8 * j + 2 * tq] = o[j][2];
        mo[(gr + 8) * F::kOPitch + 8 * j + 2 * tq + 1] = o[j][3];
      }
      if (tq == 0)
        for (int i = 0; i < 2; ++i) {
          ml[(gr + 8 * i) * 2] = m[i];
          ml[(gr + 8 * i) * 2 + 1] = l[i];
        }
    }
    Ops::sync_cta();
    const float* mo_all = reinterpret_cast<const float*>(smem + F::kMergeO);
    const float* ml_all = reinterpret_cast<const float*>(smem + F::kMergeMl);
    for (int x = tid; x < packed * HD; x += kMmaThreads) {
      const int pr = x / HD, d = x % HD, tile = pr / 16, rr = pr % 16;
      float mmax = -INFINITY;
      for (int w = tile * wpt; w < (tile + 1) * wpt; ++w) mmax = fmaxf(mmax, ml_all[(w * 16 + rr) * 2]);
      float num = 0.0f, den = 0.0f;
      if (mmax > -INFINITY)
        for (int w = tile * wpt; w < (tile + 1) * wpt; ++w) {
          const float wt = exp2f(ml_all[(w * 16 + rr) * 2] - mmax);
          den += wt * ml_all[(w * 16 + rr) * 2 + 1];
          num += wt * mo_all[(w * 16 + rr) * F::kOPitch + d];
        }
      const float val = den > 0 ? num / den * v_mul : 0.0f;
      const int r = (rb + pr) / g, h = kvh * g + (rb + pr) % g;
      if (task.slab < 0) {
        const int token = p.plan.row_token[task.row_begin + r];
        static_cast<T*>(p.out)[(int64_t(token) * p.num_q_heads + h) * HD + d] = cuda_convert::from_f32<T>(val);
      } else {
        const int64_t slab = task.slab + r;
        p.plan.slab_o[(slab * p.num_q_heads + h) * HD + d] = val;
        if (d == 0)
          p.plan.slab_lse[slab * p.num_q_heads + h] = den > 0 ? mmax * 0.6931471805599453f + logf(den) : -INFINITY;
      }
    }
    Ops::sync_cta();  // the merge area is read before the next pass writes its queries
  }
}

}  // namespace pagoda::fi_detail
