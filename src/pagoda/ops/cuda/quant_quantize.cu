#include "pagoda/ops/cuda/quant_quantize.h"

#include "pagoda/core/quant_visit.h"
#include "pagoda/ops/cuda/cuda_common.cuh"
#include "pagoda/ops/cuda/quant_encode.cuh"

namespace pagoda {
namespace {

constexpr int kThreads = 128;

// One thread per block of one row (a one-time job: weight initialisation).
template <QuantType Q>
__global__ void __launch_bounds__(kThreads) quantize_kernel(const float* __restrict__ x, uint8_t* __restrict__ out,
                                                            int64_t blocks) {
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= blocks) return;
  constexpr QuantTraits tr = quant_traits(Q);
  quant_encode::quantize_block<Q>(x + i * tr.block_elems, out + i * tr.block_bytes);
}

template <QuantType Q>
void launch(const QuantQuantizeParams& p, cudaStream_t stream) {
  // Rows are contiguous and whole blocks, so the matrix is one run of blocks.
  const int64_t blocks = p.rows * (p.cols / quant_traits(Q).block_elems);
  quantize_kernel<Q><<<cuda_detail::ceil_div(blocks, kThreads), kThreads, 0, stream>>>(
      p.x, static_cast<uint8_t*>(p.out), blocks);
  PAGODA_CUDA_CHECK_LAUNCH();
}

}  // namespace

void quant_quantize(const QuantQuantizeParams& p, cudaStream_t stream) {
  const QuantTraits tr = quant_traits(p.type);
  PAGODA_CHECK(p.type != QuantType::kNone, "quant_quantize: no block type");
  PAGODA_CHECK(p.rows >= 0 && p.cols >= 1 && p.cols % tr.block_elems == 0, "quant_quantize: bad shape rows=", p.rows,
               " cols=", p.cols, " for ", tr.name);
  if (p.rows == 0) return;
  PAGODA_CHECK(p.x && p.out, "quant_quantize: null pointer");
  visit_quant_type(p.type, [&](auto q) { launch<decltype(q)::value>(p, stream); });
}

}  // namespace pagoda
