// Host-side checks and the dispatch to the format families' launchers (no device code: a .cc compiles in a
// second where nvcc takes twenty for its two device passes).
#include "pagoda/ops/cuda/quant_gemv.h"

#include <cstdint>

#include "pagoda/core/error.h"
#include "pagoda/core/quant_visit.h"
#include "pagoda/ops/cuda/quant_gemv_launch.h"

namespace pagoda {

void quant_gemv(const QuantGemvParams& p, cudaStream_t stream) {
  using namespace quant_gemv_detail;
  const QuantTraits tr = quant_traits(p.type);
  PAGODA_CHECK(p.type != QuantType::kNone, "quant_gemv: weights are not quantized");
  PAGODA_CHECK(p.m >= 0 && p.m <= kQuantGemvMaxRows && p.n >= 1 && p.k >= 1 && p.k % tr.block_elems == 0,
               "quant_gemv: bad shape m=", p.m, " n=", p.n, " k=", p.k, " for ", tr.name);
  PAGODA_CHECK(p.dtype == DType::kBF16 || p.dtype == DType::kF16, "quant_gemv: dtype ", dtype_name(p.dtype),
               " (bfloat16 or float16)");
  PAGODA_CHECK(p.ldy == 0 || p.ldy >= p.n, "quant_gemv: ldy ", p.ldy, " < n ", p.n);
  if (p.m == 0) return;
  PAGODA_CHECK(p.x && p.w && p.y, "quant_gemv: null operand");
  PAGODA_CHECK(reinterpret_cast<uintptr_t>(p.w) % 16 == 0 && reinterpret_cast<uintptr_t>(p.x) % 8 == 0,
               "quant_gemv: w ", p.w, " must be 16-byte aligned, x ", p.x, " 8-byte aligned");
  if (quant_gemv_i8_applies(p)) {
    launch_quant_gemv_i8(p, stream);
    return;
  }
  visit_quant_type(p.type, [&](auto q) { launch_quant_gemv<decltype(q)::value>(p, stream); });
}

}  // namespace pagoda
