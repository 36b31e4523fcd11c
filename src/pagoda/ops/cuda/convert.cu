#include "pagoda/ops/cuda/convert.h"

#include <type_traits>

#include "pagoda/ops/cuda/cuda_common.cuh"

namespace pagoda {
namespace {

using namespace cuda_detail;

constexpr int kN = 4;  // elements per thread: 16-byte fp32 / 8-byte 16-bit accesses

// PRECOND: in and out aligned to kN elements when kVector (else element by element).
template <typename In, typename Out, bool kVector>
__global__ void __launch_bounds__(256) convert_kernel(const In* in, Out* out, int64_t n) {
  const int64_t i0 = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * kN;
  if (i0 >= n) return;
  if (kVector && i0 + kN <= n) {
    float f[kN];
    load_floats(in + i0, f);
    store_floats(out + i0, f);
  } else {
    for (int64_t i = i0; i < n && i < i0 + kN; ++i) out[i] = from_f32<Out>(to_f32(in[i]));
  }
}

template <typename In, typename Out>
void launch(const ConvertParams& p, cudaStream_t stream) {
  const unsigned blocks = ceil_div(ceil_div(p.n, kN), 256);
  const In* in = static_cast<const In*>(p.in);
  Out* out = static_cast<Out*>(p.out);
  if (is_aligned(in, kN * sizeof(In)) && is_aligned(out, kN * sizeof(Out)))
    convert_kernel<In, Out, true><<<blocks, 256, 0, stream>>>(in, out, p.n);
  else
    convert_kernel<In, Out, false><<<blocks, 256, 0, stream>>>(in, out, p.n);
  PAGODA_CUDA_CHECK_LAUNCH();
}

}  // namespace

void convert(const ConvertParams& p, cudaStream_t stream) {
  PAGODA_CHECK(p.n >= 0, "convert: n ", p.n);
  if (p.n == 0) return;
  PAGODA_CHECK(p.in && p.out, "convert: null pointer");
  if (p.in_dtype == p.out_dtype) {
    if (p.in != p.out)
      PAGODA_CUDA_CHECK(cudaMemcpyAsync(p.out, p.in, size_t(p.n) * dtype_size(p.in_dtype), cudaMemcpyDeviceToDevice,
                                        stream));
    return;
  }
  dispatch_model_dtype(p.in_dtype, "convert", [&](auto in_tag) {
    dispatch_model_dtype(p.out_dtype, "convert", [&](auto out_tag) {
      using In = decltype(in_tag);
      using Out = decltype(out_tag);
      if constexpr (!std::is_same_v<In, Out>) launch<In, Out>(p, stream);  // equal dtypes were copied above
    });
  });
}

}  // namespace pagoda
