// The tensor-core TurboQuant kernel of preset turboquant_k3v4_nc (keys 3 bits, values 4 bits), head sizes 64, 128, 256.
#include "pagoda/attention/turboquant/turboquant_cuda_launch.cuh"

namespace pagoda::tq_detail {
PAGODA_TQ_INSTANTIATE(3, 4, true)
}  // namespace pagoda::tq_detail
