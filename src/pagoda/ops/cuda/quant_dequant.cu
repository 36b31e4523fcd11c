#include "pagoda/ops/cuda/quant_dequant.h"

#include "pagoda/core/quant_visit.h"
#include "pagoda/ops/cuda/cuda_common.cuh"
#include "pagoda/ops/cuda/quant_decode.cuh"

namespace pagoda {
namespace {

using namespace cuda_detail;

constexpr int kThreads = 256;

// One thread per 32 weights of an output row: decodes them (quant_decode.cuh) and writes them as 16-byte
// stores. PRECOND: out 16-byte aligned; cols % 32 == 0, so every run of 32 outputs is 16-byte aligned.
template <QuantType Q, typename T>
__global__ void __launch_bounds__(kThreads)
    dequant_kernel(const uint8_t* __restrict__ w, int64_t rows, int cols, const int32_t* __restrict__ ids,
                   int* error_flag, int64_t out_rows, T* __restrict__ out) {
  const int units = cols / 32;
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= out_rows * units) return;
  const int64_t r = i / units;
  const int u = int(i - r * units);
  T* dst = out + r * cols + 32 * u;
  constexpr int kVec = kVec16<T>;
  int64_t src = r;
  if (ids) {
    src = ids[r];
    if (src < 0 || src >= rows) {
      if (u == 0) *error_flag = 1;
      float zero[kVec] = {};
#pragma unroll
      for (int c = 0; c < 32; c += kVec) store_floats<T, kVec>(dst + c, zero);
      return;
    }
  }
  // The row size from constants only: a runtime call of quant_traits() (so quant_row_bytes()) in device
  // code is compiled as unreachable (its std::string_view of a literal is host-only code), and nvcc then
  // dropped this whole path: every thread took the bad-id branch, *error_flag = 1 even without ids.
  constexpr int64_t kBlockBytes = quant_traits(Q).block_bytes, kBlockElems = quant_traits(Q).block_elems;
  float v[32];
  quant_decode::dequant_unit<Q>(w + src * (cols / kBlockElems * kBlockBytes), u, v);
#pragma unroll
  for (int c = 0; c < 32; c += kVec) {
    float f[kVec];
#pragma unroll
    for (int e = 0; e < kVec; ++e) f[e] = v[c + e];
    store_floats<T, kVec>(dst + c, f);
  }
}

template <QuantType Q>
void launch(const QuantDequantParams& p, cudaStream_t stream) {
  const int64_t threads = p.out_rows * (p.cols / 32);
  dispatch_model_dtype(p.dtype, "quant_dequant", [&](auto tag) {
    using T = decltype(tag);
    dequant_kernel<Q, T><<<ceil_div(threads, kThreads), kThreads, 0, stream>>>(
        static_cast<const uint8_t*>(p.w), p.rows, p.cols, p.row_ids, p.error_flag, p.out_rows, static_cast<T*>(p.out));
  });
  PAGODA_CUDA_CHECK_LAUNCH();
}

}  // namespace

void quant_dequant(const QuantDequantParams& p, cudaStream_t stream) {
  const QuantTraits tr = quant_traits(p.type);
  PAGODA_CHECK(p.type != QuantType::kNone, "quant_dequant: weights are not quantized");
  PAGODA_CHECK(p.rows >= 1 && p.cols >= 1 && p.cols % tr.block_elems == 0 && p.out_rows >= 0,
               "quant_dequant: bad shape rows=", p.rows, " cols=", p.cols, " out_rows=", p.out_rows, " for ", tr.name);
  PAGODA_CHECK(p.row_ids || p.out_rows <= p.rows, "quant_dequant: ", p.out_rows, " out rows of ", p.rows);
  if (p.out_rows == 0) return;
  PAGODA_CHECK(p.w && p.out && (!p.row_ids || p.error_flag), "quant_dequant: null pointer");
  PAGODA_CHECK(is_aligned(p.out, 16) && is_aligned(p.w, 2), "quant_dequant: out must be 16-byte aligned, w 2-byte");
  visit_quant_type(p.type, [&](auto q) { launch<decltype(q)::value>(p, stream); });
}

}  // namespace pagoda
