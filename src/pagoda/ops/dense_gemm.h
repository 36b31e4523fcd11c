// Dense float32 GEMM over weights packed once: y = act(residual + x @ W^T + bias), the linear layers of the
// CPU encoders (model/bert.cc).
//
// W ([n, k], a PyTorch Linear's layout) is packed at load into panels of kDensePanel columns, each stored
// k-major ([k][kDensePanel], the last panel zero-padded), so the micro-kernel broadcasts one x element and
// multiply-adds it into a register tile of y (an outer product; no horizontal sums).
//
// Batch invariance: every y[i][j] is bias[j] followed by one fused multiply-add per t = 0 .. k-1, in that
// order, on every path that has FMA (AVX2 and AVX-512 give bitwise equal results), whatever m, the thread
// count or the row's place in the batch; the epilogue is element-wise. The generic path (CPUs without
// FMA) rounds each product and sum separately, and so differs from them in the last bits.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "pagoda/ops/thread_pool.h"

namespace pagoda {

inline constexpr int kDensePanel = 32;  // output columns per packed panel

struct DenseWeights {
  struct AlignedFree {
    void operator()(float* p) const;
  };
  int64_t n = 0, k = 0;
  std::unique_ptr<float[], AlignedFree> panels;  // [ceil(n / 32), k, 32], 64-byte aligned
  std::unique_ptr<float[], AlignedFree> bias;    // [ceil(n / 32) * 32], zeros where absent or padded
  int64_t num_panels() const { return (n + kDensePanel - 1) / kDensePanel; }
};

// Packs w ([n, k], rows contiguous) and bias ([n] or nullptr). PRECOND: n >= 1, k >= 1.
DenseWeights dense_pack(const float* w, const float* bias, int64_t n, int64_t k);

enum class DenseEpilogue { kNone, kGeluErf };

struct DenseMatmulParams {
  const float* x = nullptr;  // [m, k], row stride ldx
  int64_t ldx = 0;           // 0 = k
  const DenseWeights* w = nullptr;
  const float* residual = nullptr;  // [m, n] row stride ldr, or nullptr; may equal y (same stride)
  int64_t ldr = 0;                  // 0 = n
  DenseEpilogue epilogue = DenseEpilogue::kNone;
  float* y = nullptr;  // [m, n], row stride ldy; must not overlap x
  int64_t ldy = 0;     // 0 = n
  int64_t m = 0;
};

enum class DenseIsa { kGeneric, kAvx2, kAvx512 };
const char* dense_isa_name(DenseIsa isa);
// The paths this CPU runs, generic first; dense_matmul's default is the last.
const std::vector<DenseIsa>& dense_isas_available();

// y = epilogue(residual + (bias + x @ W^T)): the sum as the file comment says, then the residual added, then
// GELU (erf form, gelu_erf's rounding) when asked.
void dense_matmul(const DenseMatmulParams& p, ThreadPool* pool);
// The same on a chosen path. PRECOND: isa is in dense_isas_available().
void dense_matmul(const DenseMatmulParams& p, ThreadPool* pool, DenseIsa isa);

// x[i] = 0.5 x (1 + erf(x / sqrt 2)) in place, with a vectorised rational erf whose absolute error is below
// kGeluErfAbsError (so the result's error is at most 0.5 |x| kGeluErfAbsError plus float32 rounding).
inline constexpr double kGeluErfAbsError = 5e-7;
void gelu_erf(float* x, int64_t n);

// Float64 reference of the matmul (tests): y = residual + bias + x @ W^T from the packed weights, GELU in
// float64 when asked. y is [m, n] contiguous.
void dense_matmul_reference(const DenseMatmulParams& p, double* y);

}  // namespace pagoda
