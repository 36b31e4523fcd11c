// The quantized GEMV (quant_gemv.h) of the 32-weight block formats.
#include "pagoda/ops/cuda/quant_gemv_kernel.cuh"

namespace pagoda::quant_gemv_detail {

template void launch_quant_gemv<QuantType::kQ4_0>(const QuantGemvParams&, cudaStream_t);
template void launch_quant_gemv<QuantType::kQ4_1>(const QuantGemvParams&, cudaStream_t);
template void launch_quant_gemv<QuantType::kQ5_0>(const QuantGemvParams&, cudaStream_t);
template void launch_quant_gemv<QuantType::kQ5_1>(const QuantGemvParams&, cudaStream_t);
template void launch_quant_gemv<QuantType::kQ8_0>(const QuantGemvParams&, cudaStream_t);

}  // namespace pagoda::quant_gemv_detail
