// The tensor-core TurboQuant kernel of preset turboquant_3bit_nc (keys 3 bits, values 3 bits), head sizes 64, 128, 256.
#include "pagoda/attention/turboquant/turboquant_cuda_launch.cuh"

namespace pagoda::tq_detail {
PAGODA_TQ_INSTANTIATE(3, 3, true)
}  // namespace pagoda::tq_detail
