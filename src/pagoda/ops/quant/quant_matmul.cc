// Quantized matmul: activation quantization, the scalar path (the oracle of the SIMD ones, and what runs
// on a CPU without AVX2), run-time choice of the path and the split over threads.
#include "pagoda/ops/quant/quant_matmul.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "pagoda/core/error.h"
#include "pagoda/ops/quant/quant_blocks.h"

namespace pagoda::quant {
namespace {

// Output columns (weight rows) per GEMM task: their decoded codes stay in L1 while all panels pass.
constexpr int64_t kGemmTileN = 16;

bool cpu_has_avx2() {
#if defined(__x86_64__) && defined(__GNUC__)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}
bool cpu_has_avx512_vnni() {
#if defined(__x86_64__) && defined(__GNUC__)
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

// Quantized activations and their storage, reused across calls on one thread.
struct ActBuffers {
  std::vector<int8_t> q;
  std::vector<float> d, sx;
  std::vector<int32_t> sum32, sum16;
  std::vector<int8_t> pq;
  std::vector<float> pd, psx;
  std::vector<int32_t> psum32, psum16;
};

// One row: see quant_matmul.h. A non-finite x makes the block's scale NaN, so the outputs it feeds are NaN
// as with a float matmul (never garbage codes).
void quantize_act_row(const float* x, int64_t k, int block, int8_t* q, float* d, int32_t* sum32, int32_t* sum16,
                      float* sx) {
  for (int64_t b0 = 0; b0 < k; b0 += block) {
    float amax = 0;
    bool finite = true;
    for (int t = 0; t < block; ++t) {
      const float a = std::fabs(x[b0 + t]);
      finite = finite && a <= std::numeric_limits<float>::max();
      amax = std::max(amax, a);
    }
    const float dx = finite ? amax / 127.0f : std::numeric_limits<float>::quiet_NaN();
    const float id = finite && dx > 0 ? 1.0f / dx : 0.0f;
    int32_t s = 0;
    for (int t = 0; t < block; ++t) {
      const int v = finite ? int(std::nearbyint(x[b0 + t] * id)) : 0;
      q[b0 + t] = int8_t(v);
      s += v;
    }
    d[b0 / block] = dx;
    if (sx) sx[b0 / block] = dx * float(s);
  }
  for (int64_t g = 0; g < k / 16; ++g) {
    int32_t s = 0;
    for (int t = 0; t < 16; ++t) s += q[16 * g + t];
    sum16[g] = s;
  }
  for (int64_t g = 0; g < k / 32; ++g) sum32[g] = sum16[2 * g] + sum16[2 * g + 1];
}

RowActs quantize_acts(const MatmulParams& p, int64_t ldx, int block, ActBuffers& buf, ThreadPool* pool) {
  const int64_t m = p.m, k = p.k, nb = k / block;
  buf.q.resize(size_t(m * k));
  buf.d.resize(size_t(m * nb));
  buf.sx.resize(size_t(m * nb));
  buf.sum32.resize(size_t(m * k / 32));
  buf.sum16.resize(size_t(m * k / 16));
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 16) / k);
  parallel_for(pool, m, grain, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      quantize_act_row(p.x + i * ldx, k, block, buf.q.data() + i * k, buf.d.data() + i * nb,
                       buf.sum32.data() + i * (k / 32), buf.sum16.data() + i * (k / 16),
                       block == 32 ? buf.sx.data() + i * nb : nullptr);
  });
  return RowActs{.m = m, .k = k, .block = block, .q = buf.q.data(), .d = buf.d.data(), .sum32 = buf.sum32.data(),
                 .sum16 = buf.sum16.data(), .sx = buf.sx.data()};
}

PanelActs make_panels(const RowActs& a, int P, ActBuffers& buf) {
  const int64_t panels = (a.m + P - 1) / P, k = a.k, nb = k / a.block;
  buf.pq.assign(size_t(panels * P * k), 0);
  buf.pd.assign(size_t(panels * P * nb), 0.0f);
  buf.psx.assign(size_t(panels * P * nb), 0.0f);
  buf.psum32.assign(size_t(panels * P * (k / 32)), 0);
  buf.psum16.assign(size_t(panels * P * (k / 16)), 0);
  const bool has_sx = a.block == 32;
  for (int64_t i = 0; i < a.m; ++i) {
    const int64_t pn = i / P, r = i % P;
    int8_t* pq = buf.pq.data() + pn * P * k;
    for (int64_t t4 = 0; t4 < k / 4; ++t4)
      for (int e = 0; e < 4; ++e) pq[(t4 * P + r) * 4 + e] = a.q[i * k + 4 * t4 + e];
    for (int64_t b = 0; b < nb; ++b) {
      buf.pd[size_t((pn * nb + b) * P + r)] = a.d[i * nb + b];
      if (has_sx) buf.psx[size_t((pn * nb + b) * P + r)] = a.sx[i * nb + b];
    }
    for (int64_t g = 0; g < k / 32; ++g) buf.psum32[size_t((pn * (k / 32) + g) * P + r)] = a.sum32[i * (k / 32) + g];
    for (int64_t g = 0; g < k / 16; ++g) buf.psum16[size_t((pn * (k / 16) + g) * P + r)] = a.sum16[i * (k / 16) + g];
  }
  return PanelActs{.P = P, .panels = panels, .k = k, .block = a.block, .q = buf.pq.data(), .d = buf.pd.data(),
                   .sum32 = buf.psum32.data(), .sum16 = buf.psum16.data(), .sx = buf.psx.data()};
}

// ---- scalar path: the canonical order of quant_matmul.h, written plainly ----

void gemm_scalar_rows(const QuantWeights& w, const RowActs& a, int64_t j0, int64_t j1, float* y, int64_t ldy) {
  const int64_t k = w.k;
  const QuantTraits tr = quant_traits(w.t);
  const int64_t nb = k / tr.block_elems;
  std::vector<Block32> b32(static_cast<size_t>(nb));
  std::vector<BlockK> bk(static_cast<size_t>(nb));
  std::vector<BlockQ6K> b6(static_cast<size_t>(nb));
  for (int64_t j = j0; j < j1; ++j) {
    const uint8_t* row = w.w + size_t(j) * w.row_bytes;
    switch (w.t) {
      case QuantType::kQ4_0:
      case QuantType::kQ4_1:
      case QuantType::kQ5_0:
      case QuantType::kQ5_1:
      case QuantType::kQ8_0: {
        const bool has_min = w.t == QuantType::kQ4_1 || w.t == QuantType::kQ5_1;
        auto& blocks = b32;
        for (int64_t b = 0; b < nb; ++b) decode_block32(w.t, row + b * tr.block_bytes, &blocks[size_t(b)]);
        for (int64_t i = 0; i < a.m; ++i) {
          float acc = 0;
          for (int64_t b = 0; b < nb; ++b) {
            const Block32& wb = blocks[size_t(b)];
            const int8_t* xq = a.q + i * k + b * 32;
            int32_t isum = 0;
            for (int l = 0; l < 32; ++l) isum += int32_t(wb.q[l]) * xq[l];
            const float dx = a.d[i * nb + b];
            if (has_min) acc = acc + ((wb.d * dx) * float(isum) + wb.m * a.sx[i * nb + b]);
            else acc = acc + (wb.d * dx) * float(isum);
          }
          y[i * ldy + j] = acc;
        }
        break;
      }
      case QuantType::kQ4_K:
      case QuantType::kQ5_K: {
        auto& blocks = bk;
        for (int64_t b = 0; b < nb; ++b) {
          if (w.t == QuantType::kQ4_K) decode_q4_k(row + b * tr.block_bytes, &blocks[size_t(b)]);
          else decode_q5_k(row + b * tr.block_bytes, &blocks[size_t(b)]);
        }
        for (int64_t i = 0; i < a.m; ++i) {
          float acc = 0;
          for (int64_t b = 0; b < nb; ++b) {
            const BlockK& wb = blocks[size_t(b)];
            const int8_t* xq = a.q + i * k + b * 256;
            const int32_t* s32 = a.sum32 + i * (k / 32) + b * 8;
            int32_t isum = 0, msum = 0;
            for (int s = 0; s < 8; ++s) {
              int32_t dot = 0;
              for (int l = 0; l < 32; ++l) dot += int32_t(wb.q[32 * s + l]) * xq[32 * s + l];
              isum += int32_t(wb.sc[s]) * dot;
              msum += int32_t(wb.mn[s]) * s32[s];
            }
            const float dx = a.d[i * nb + b];
            acc = acc + ((wb.d * dx) * float(isum) - (wb.dmin * dx) * float(msum));
          }
          y[i * ldy + j] = acc;
        }
        break;
      }
      case QuantType::kQ6_K: {
        auto& blocks = b6;
        for (int64_t b = 0; b < nb; ++b) decode_q6_k(row + b * tr.block_bytes, &blocks[size_t(b)]);
        for (int64_t i = 0; i < a.m; ++i) {
          float acc = 0;
          for (int64_t b = 0; b < nb; ++b) {
            const BlockQ6K& wb = blocks[size_t(b)];
            const int8_t* xq = a.q + i * k + b * 256;
            int32_t isum = 0;
            for (int g = 0; g < 16; ++g) {
              int32_t dot = 0;
              for (int l = 0; l < 16; ++l) dot += int32_t(wb.q[16 * g + l]) * xq[16 * g + l];
              isum += int32_t(wb.sc[g]) * dot;
            }
            acc = acc + (wb.d * a.d[i * nb + b]) * float(isum);
          }
          y[i * ldy + j] = acc;
        }
        break;
      }
      case QuantType::kNone: PAGODA_CHECK(false, "quantized matmul without a quant type");
    }
  }
}

}  // namespace

size_t gemm_scratch_floats(int64_t k, int64_t rows) {
  // codes (k bytes), d and m per 32-block, or per 256-block d, dmin, 16 scales and 8 mins (int32).
  return size_t(rows * (k / 4 + 2 * (k / 32) + 26 * (k / 256)));
}

const char* quant_isa_name(QuantIsa isa) {
  switch (isa) {
    case QuantIsa::kScalar: return "scalar";
    case QuantIsa::kAvx2: return "avx2";
    case QuantIsa::kAvx512Vnni: return "avx512-vnni";
  }
  return "?";
}

std::vector<QuantIsa> quant_isas_available() {
  std::vector<QuantIsa> v{QuantIsa::kScalar};
  if (cpu_has_avx2()) v.push_back(QuantIsa::kAvx2);
  if (cpu_has_avx512_vnni()) v.push_back(QuantIsa::kAvx512Vnni);
  return v;
}

void quant_matmul(const MatmulParams& p, ThreadPool* pool, QuantIsa isa) {
  const QuantTraits tr = quant_traits(p.w_quant);
  PAGODA_CHECK(p.w_quant != QuantType::kNone, "quant_matmul without a quant type");
  PAGODA_CHECK(p.k % tr.block_elems == 0, "matmul: k = ", p.k, " is not a multiple of the ", tr.name, " block (",
               tr.block_elems, ")");
  if (p.m == 0 || p.n == 0) return;
  const int64_t ldx = p.ldx ? p.ldx : p.k;
  const int64_t ldy = p.ldy ? p.ldy : p.n;
  const QuantWeights w{.t = p.w_quant, .w = static_cast<const uint8_t*>(p.w),
                       .row_bytes = quant_row_bytes(p.w_quant, p.k), .k = p.k};
  thread_local ActBuffers buf;
  const RowActs acts = quantize_acts(p, ldx, tr.block_elems == 32 ? 32 : 256, buf, pool);
  const bool gemv = isa == QuantIsa::kScalar || p.m <= kGemvMaxRows;
  PanelActs panels;
  if (!gemv) panels = make_panels(acts, isa == QuantIsa::kAvx512Vnni ? 16 : 8, buf);
  // Tasks of at least ~64K multiply-adds: less is not worth handing to another thread.
  const int64_t tile = gemv ? 1 : kGemmTileN;
  const int64_t num_tiles = (p.n + tile - 1) / tile;
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(1, p.m * p.k * tile));
  parallel_for(pool, num_tiles, grain, [&](int64_t tb, int64_t te) {
    const int64_t j0 = tb * tile, j1 = std::min(p.n, te * tile);
    if (gemv) {
      switch (isa) {
        case QuantIsa::kScalar: gemm_scalar_rows(w, acts, j0, j1, p.y, ldy); break;
        case QuantIsa::kAvx2: gemv_avx2(w, acts, j0, j1, p.y, ldy); break;
        case QuantIsa::kAvx512Vnni: gemv_avx512(w, acts, j0, j1, p.y, ldy); break;
      }
    } else {
      thread_local std::vector<float> scratch;
      scratch.resize(gemm_scratch_floats(p.k, tile));
      for (int64_t t0 = j0; t0 < j1; t0 += tile) {
        const int64_t t1 = std::min(j1, t0 + tile);
        if (isa == QuantIsa::kAvx512Vnni) gemm_avx512(w, panels, p.m, t0, t1, p.y, ldy, scratch.data());
        else gemm_avx2(w, panels, p.m, t0, t1, p.y, ldy, scratch.data());
      }
    }
    if (p.bias)
      for (int64_t i = 0; i < p.m; ++i)
        for (int64_t j = j0; j < j1; ++j) p.y[i * ldy + j] = p.y[i * ldy + j] + p.bias[j];
  });
}

}  // namespace pagoda::quant
