// Private to ops/ (and its tests): y = x @ W^T with block-quantized W, the activations quantized per block
// to int8 as llama.cpp does.
//
// Activations: each row is cut into blocks of 32 (the 32-weight types, Q8_0-style) or 256 (the k-quants,
// Q8_K-style); a block's scale is dx = max|x| / 127 (float32) and its codes qx = round-to-nearest-even(x / dx)
// in [-127, 127], so |x - dx * qx| <= dx * (1/2 + 2^-15). Sums of the codes over every 16 and 32 elements
// go with them (they turn unsigned weight codes into signed ones, and carry the min of Q4_1/Q5_1/Q4_K/Q5_K).
//
// The canonical order. Whatever the instruction set, the row count or the threads, output (i, j) is the
// result of exactly these float32 operations, in block order b = 0, 1, ... (integer sums are exact):
//   Q4_0 Q5_0 Q8_0 Q6_K   acc = acc + (dw_b * dx_b) * float(isum_b)
//   Q4_1 Q5_1             acc = acc + ((dw_b * dx_b) * float(isum_b) + mw_b * sx_b),   sx_b = dx_b * float(sum qx)
//   Q4_K Q5_K             acc = acc + ((dw_b * dx_b) * float(isum_b) - (dmin_b * dx_b) * float(msum_b))
// then y = acc (+ bias). isum_b is the integer dot product of the weight codes (scaled by the 6-bit /
// int8 sub-block scales for the k-quants) with qx; msum_b = sum over sub-blocks of mn_s * (sum of qx over s).
// So every path (scalar, AVX2, AVX-512 VNNI) gives the same bits, and batch composition changes nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "pagoda/core/quant_visit.h"
#include "pagoda/ops/gemm.h"

namespace pagoda::quant {

enum class QuantIsa { kScalar, kAvx2, kAvx512Vnni };

const char* quant_isa_name(QuantIsa isa);
// The paths this CPU can run, scalar first; the last one is what matmul() uses.
std::vector<QuantIsa> quant_isas_available();

// matmul() with MatmulParams::w_quant set, on a chosen path. PRECOND: isa is available, k % block_elems == 0.
void quant_matmul(const MatmulParams& p, ThreadPool* pool, QuantIsa isa);

// ---- the kernels' interface (quant_matmul.cc prepares the data, the ISA files compute) ----

// Activations with m rows, quantized, row-major.
struct RowActs {
  int64_t m = 0, k = 0;
  int block = 32;                 // 32 or 256
  const int8_t* q = nullptr;      // [m][k]
  const float* d = nullptr;       // [m][k / block]
  const int32_t* sum32 = nullptr;  // [m][k / 32]
  const int32_t* sum16 = nullptr;  // [m][k / 16]
  const float* sx = nullptr;      // [m][k / block]: d * (sum of the block's codes), 32-blocks only
};

// The same activations interleaved for the GEMM kernels: rows in panels of P (a vector's int32 lanes), the
// last panel padded with zero rows. Within a panel and block, the codes go 4 elements of row 0, 4 of row
// 1, ..., 4 of row P-1, then the next 4 elements; the scales and sums go P rows at a time.
struct PanelActs {
  int P = 16;
  int64_t panels = 0, k = 0;
  int block = 32;
  const int8_t* q = nullptr;       // [panel][k / 4][P][4]
  const float* d = nullptr;        // [panel][k / block][P]
  const int32_t* sum32 = nullptr;  // [panel][k / 32][P]
  const int32_t* sum16 = nullptr;  // [panel][k / 16][P]
  const float* sx = nullptr;       // [panel][k / block][P]
};

struct QuantWeights {
  QuantType t = QuantType::kNone;
  const uint8_t* w = nullptr;  // [n] rows of row_bytes
  size_t row_bytes = 0;
  int64_t k = 0;
};

// The GEMV kernels take at most this many rows; above, the rows are interleaved in panels so a decoded
// weight block serves a whole panel per instruction (GEMM).
constexpr int64_t kGemvMaxRows = 3;

// rows x k activations (row stride ldx) quantized into RowActs' arrays (q row stride k, the others per row
// as in RowActs; sx may be null), the same bits as the scalar quantizer.
void quantize_acts_avx2(const float* x, int64_t ldx, int64_t rows, int64_t k, int block, int8_t* q, float* d,
                        int32_t* sum32, int32_t* sum16, float* sx);
void quantize_acts_avx512(const float* x, int64_t ldx, int64_t rows, int64_t k, int block, int8_t* q, float* d,
                          int32_t* sum32, int32_t* sum16, float* sx);

// Writes acc (the canonical sum, no bias) of rows [0, a.m) x weight rows [j0, j1) to y[i * ldy + j].
void gemv_avx2(const QuantWeights& w, const RowActs& a, int64_t j0, int64_t j1, float* y, int64_t ldy);
void gemv_avx512(const QuantWeights& w, const RowActs& a, int64_t j0, int64_t j1, float* y, int64_t ldy);
// Same for panel activations (rows [0, m)), j1 - j0 <= 16; scratch holds gemm_scratch_floats(k, 16) floats.
size_t gemm_scratch_floats(int64_t k, int64_t rows);
void gemm_avx2(const QuantWeights& w, const PanelActs& a, int64_t m, int64_t j0, int64_t j1, float* y,
               int64_t ldy, float* scratch);
void gemm_avx512(const QuantWeights& w, const PanelActs& a, int64_t m, int64_t j0, int64_t j1, float* y,
                 int64_t ldy, float* scratch);

}  // namespace pagoda::quant
