#include "pagoda/ops/cuda/activation.h"

#include "pagoda/ops/cuda/cuda_common.cuh"

namespace pagoda {
namespace {

using namespace cuda_detail;

// One thread per kN-element slice of a row: total = rows * cols / kN threads in a flat 1-D grid.
// PRECOND: cols % kN == 0; with kN > 1, in and out 16-byte aligned.
template <typename T, int kN>
__global__ void __launch_bounds__(256) silu_and_mul_kernel(const T* in, T* out, int64_t rows, int cols) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // A quantized GEMV after it is launched programmatically (SM 9.0): it may place its CTAs and prefetch its
  // weights now; it waits for this grid's completion before reading the output.
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  const int64_t per_row = cols / kN;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * per_row) return;
  const int64_t row = idx / per_row, c = (idx - row * per_row) * kN;
  const T* gate = in + row * 2 * cols + c;
  T* dst = out + row * cols + c;
  if constexpr (kN == 1) {
    const float g = to_f32(gate[0]);
    dst[0] = from_f32<T>(g / (1.0f + expf(-g)) * to_f32(gate[cols]));
  } else {
    float g[kN], u[kN];
    load_floats(gate, g);
    load_floats(gate + cols, u);
#pragma unroll
    for (int i = 0; i < kN; ++i) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
    store_floats(dst, g);
  }
}

template <typename T, int kN>
void launch(const SiluAndMulParams& p, cudaStream_t stream) {
  const int64_t total = int64_t(p.rows) * (p.cols / kN);
  silu_and_mul_kernel<T, kN><<<ceil_div(total, 256), 256, 0, stream>>>(static_cast<const T*>(p.in),
                                                                       static_cast<T*>(p.out), p.rows, p.cols);
  PAGODA_CUDA_CHECK_LAUNCH();
}

}  // namespace

void silu_and_mul(const SiluAndMulParams& p, cudaStream_t stream) {
  PAGODA_CHECK(p.rows >= 0 && p.cols > 0, "silu_and_mul: rows ", p.rows, " cols ", p.cols);
  if (p.rows == 0) return;
  PAGODA_CHECK(p.in && p.out, "silu_and_mul: null pointer");
  dispatch_model_dtype(p.dtype, "silu_and_mul", [&](auto tag) {
    using T = decltype(tag);
    constexpr int kN = kVec16<T>;
    if (p.cols % kN == 0 && is_aligned(p.in, 16) && is_aligned(p.out, 16)) launch<T, kN>(p, stream);
    else launch<T, 1>(p, stream);
  });
}

}  // namespace pagoda
