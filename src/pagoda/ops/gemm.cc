#include "pagoda/ops/gemm.h"

#include <algorithm>
#include <vector>

#include "pagoda/core/error.h"
#include "pagoda/ops/convert.h"
#include "pagoda/ops/quant/quant.h"
#include "pagoda/ops/quant/quant_matmul.h"
#include "pagoda/ops/simd.h"

namespace pagoda {
namespace {

using simd::v8f;

// A task owns kPanelN consecutive rows of W (columns of y). K is walked in chunks of kChunkK so the
// converted weight panel (16 x 512 floats = 32 KiB) stays in L1/L2 while every row of x passes over it.
constexpr int64_t kPanelN = 16;
constexpr int64_t kChunkK = 512;  // a multiple of 8: only the last chunk has a scalar tail

// y[i][j] += dot(x_i, w_j) over kk for an MR x NR tile. Every (i, j) runs the identical operation
// sequence for any MR/NR, which is what makes results independent of the batch composition.
template <int MR, int NR>
PAGODA_ALWAYS_INLINE void tile(const float* x, int64_t ldx, const float* w, int64_t ldw, int64_t kk, float* y,
                               int64_t ldy) {
  v8f acc[MR][NR] = {};
  const int64_t k8 = kk & ~int64_t(7);
  for (int64_t t = 0; t < k8; t += 8) {
    v8f wv[NR];
    for (int j = 0; j < NR; ++j) wv[j] = simd::load8(w + j * ldw + t);
    for (int i = 0; i < MR; ++i) {
      v8f xv = simd::load8(x + i * ldx + t);
      for (int j = 0; j < NR; ++j) acc[i][j] += xv * wv[j];
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) {
      float s = simd::hsum8(acc[i][j]);
      for (int64_t t = k8; t < kk; ++t) s += x[i * ldx + t] * w[j * ldw + t];
      y[i * ldy + j] += s;
    }
}

// All m rows of x against nn (<= kPanelN) rows of w, one K chunk.
PAGODA_MULTIVERSION void panel(const float* x, int64_t ldx, int64_t m, const float* w, int64_t ldw, int64_t nn,
                               int64_t kk, float* y, int64_t ldy) {
  int64_t i = 0;
  for (; i + 2 <= m; i += 2) {
    int64_t j = 0;
    for (; j + 4 <= nn; j += 4) tile<2, 4>(x + i * ldx, ldx, w + j * ldw, ldw, kk, y + i * ldy + j, ldy);
    for (; j < nn; ++j) tile<2, 1>(x + i * ldx, ldx, w + j * ldw, ldw, kk, y + i * ldy + j, ldy);
  }
  for (; i < m; ++i) {
    int64_t j = 0;
    for (; j + 4 <= nn; j += 4) tile<1, 4>(x + i * ldx, ldx, w + j * ldw, ldw, kk, y + i * ldy + j, ldy);
    for (; j < nn; ++j) tile<1, 1>(x + i * ldx, ldx, w + j * ldw, ldw, kk, y + i * ldy + j, ldy);
  }
}

}  // namespace

void matmul(const MatmulParams& p, ThreadPool* pool) {
  if (p.w_quant != QuantType::kNone) {
    static const quant::QuantIsa isa = quant::quant_isas_available().back();
    quant::quant_matmul(p, pool, isa);
    return;
  }
  PAGODA_CHECK(p.w_dtype == DType::kF32 || p.w_dtype == DType::kBF16 || p.w_dtype == DType::kF16,
               "matmul: unsupported weight dtype ", dtype_name(p.w_dtype));
  PAGODA_CHECK(p.m >= 0 && p.n >= 0 && p.k >= 0, "matmul: negative shape");
  if (p.m == 0 || p.n == 0) return;
  const int64_t ldx = p.ldx ? p.ldx : p.k;
  const int64_t ldy = p.ldy ? p.ldy : p.n;
  const int64_t num_panels = (p.n + kPanelN - 1) / kPanelN;
  // At least ~256K multiply-adds (tens of microseconds) per task: below that, handing work to another thread
  // costs more than it saves, especially on a loaded machine where the other thread may not be running.
  const int64_t panel_flops = std::max<int64_t>(1, p.m * p.k * kPanelN);
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 18) / panel_flops);
  parallel_for(pool, num_panels, grain, [&](int64_t pb, int64_t pe) {
    thread_local std::vector<float> wbuf;
    if (p.w_dtype != DType::kF32) wbuf.resize(size_t(kPanelN * kChunkK));
    for (int64_t pi = pb; pi < pe; ++pi) {
      const int64_t n0 = pi * kPanelN;
      const int64_t nn = std::min(kPanelN, p.n - n0);
      for (int64_t i = 0; i < p.m; ++i) std::fill(p.y + i * ldy + n0, p.y + i * ldy + n0 + nn, 0.0f);
      for (int64_t k0 = 0; k0 < p.k; k0 += kChunkK) {
        const int64_t kk = std::min(kChunkK, p.k - k0);
        const float* w;
        int64_t ldw;
        if (p.w_dtype == DType::kF32) {
          w = static_cast<const float*>(p.w) + n0 * p.k + k0;
          ldw = p.k;
        } else {
          for (int64_t j = 0; j < nn; ++j)
            convert_to_f32(p.w, p.w_dtype, (n0 + j) * p.k + k0, kk, wbuf.data() + j * kk);
          w = wbuf.data();
          ldw = kk;
        }
        panel(p.x + k0, ldx, p.m, w, ldw, nn, kk, p.y + n0, ldy);
      }
      if (p.bias)
        for (int64_t i = 0; i < p.m; ++i)
          for (int64_t j = 0; j < nn; ++j) p.y[i * ldy + n0 + j] += p.bias[n0 + j];
    }
  });
}

void matmul_reference(const MatmulParams& p, double* y) {
  const int64_t ldx = p.ldx ? p.ldx : p.k;
  if (p.w_quant != QuantType::kNone) {  // the weights as dequantize_row gives them, the product in float64
    std::vector<float> w(size_t(p.k));
    for (int64_t j = 0; j < p.n; ++j) {
      dequantize_row(p.w_quant, static_cast<const uint8_t*>(p.w) + size_t(j) * quant_row_bytes(p.w_quant, p.k),
                     w.data(), p.k);
      for (int64_t i = 0; i < p.m; ++i) {
        double s = p.bias ? double(p.bias[j]) : 0.0;
        for (int64_t t = 0; t < p.k; ++t) s += double(p.x[i * ldx + t]) * double(w[size_t(t)]);
        y[i * p.n + j] = s;
      }
    }
    return;
  }
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j) {
      double s = p.bias ? double(p.bias[j]) : 0.0;
      for (int64_t t = 0; t < p.k; ++t)
        s += double(p.x[i * ldx + t]) * double(load_as_f32(p.w, p.w_dtype, size_t(j * p.k + t)));
      y[i * p.n + j] = s;
    }
}

}  // namespace pagoda
