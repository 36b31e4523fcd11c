// Placeholder while the FA3 kernel is written: FA3 is reported unavailable and every step runs FA2.
#include "pagoda/attention/flash_attn/fa3_prefill.h"

#include "pagoda/core/error.h"

namespace pagoda::flash_attn_detail {

bool fa3_kernel_built() { return false; }

void launch_fa3_prefill(const PagedAttentionParams&, const int4*, int, cudaStream_t) {
  PAGODA_CHECK(false, "the FA3 prefill kernel is not built in this binary");
}

}  // namespace pagoda::flash_attn_detail
