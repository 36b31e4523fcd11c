// The tensor-core TurboQuant kernel of preset turboquant_k8v4 (keys 8 bits, values 4 bits), head sizes 64, 128, 256.
#include "pagoda/attention/turboquant/turboquant_cuda_launch.cuh"

namespace pagoda::tq_detail {
PAGODA_TQ_INSTANTIATE(8, 4, false)
}  // namespace pagoda::tq_detail
