// PRIVATE to attention/: the CUDA runtime check of the host code of the attention kernels (the ops
// library's PAGODA_CUDA_CHECK lives in ops/, which attention does not depend on).
#pragma once

#include <cuda_runtime_api.h>

#include "pagoda/core/error.h"

#define PAGODA_CUDA_OK(expr)                                              \
  do {                                                                    \
    cudaError_t e_ = (expr);                                              \
    PAGODA_CHECK(e_ == cudaSuccess, #expr, ": ", cudaGetErrorString(e_)); \
  } while (0)
