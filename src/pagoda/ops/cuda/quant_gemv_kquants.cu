// The quantized GEMV (quant_gemv.h) of the 256-weight k-quant formats.
#include "pagoda/ops/cuda/quant_gemv_kernel.cuh"

namespace pagoda::quant_gemv_detail {

template void launch_quant_gemv<QuantType::kQ4_K>(const QuantGemvParams&, cudaStream_t);
template void launch_quant_gemv<QuantType::kQ5_K>(const QuantGemvParams&, cudaStream_t);
template void launch_quant_gemv<QuantType::kQ6_K>(const QuantGemvParams&, cudaStream_t);

}  // namespace pagoda::quant_gemv_detail
