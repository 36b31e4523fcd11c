#include "pagoda/ops/cuda/embedding.h"

#include "pagoda/ops/cuda/cuda_common.cuh"

namespace pagoda {
namespace {

using namespace cuda_detail;

// Block = (one token per threadIdx.y row, threads along the row in x). The row is moved as units of U
// (uint4 = 16 bytes, or uint8_t for rows of any size).
template <typename U>
__global__ void __launch_bounds__(256) embedding_kernel(const int32_t* ids, const U* table, U* out, int tokens,
                                                        int64_t units_per_row, int vocab, int* error_flag) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.y + threadIdx.y;
  if (t >= tokens) return;
  const int32_t id = ids[t];
  U* dst = out + t * units_per_row;
  if (id < 0 || id >= vocab) {
    if (threadIdx.x == 0) *error_flag = 1;
    for (int64_t i = threadIdx.x; i < units_per_row; i += blockDim.x) dst[i] = U{};
    return;
  }
  const U* src = table + int64_t(id) * units_per_row;
  for (int64_t i = threadIdx.x; i < units_per_row; i += blockDim.x) dst[i] = src[i];
}

template <typename U>
void launch(const EmbeddingParams& p, int64_t row_bytes, cudaStream_t stream) {
  const int64_t units = row_bytes / int64_t(sizeof(U));
  // 256 threads: a long row gets a whole block; a short one shares the block with other tokens.
  const int x = units >= 256 ? 256 : int((units + 31) / 32 * 32);
  const int y = 256 / x;
  embedding_kernel<U><<<ceil_div(p.tokens, y), dim3(x, y), 0, stream>>>(
      p.ids, static_cast<const U*>(p.table), static_cast<U*>(p.out), p.tokens, units, p.vocab, p.error_flag);
  PAGODA_CUDA_CHECK_LAUNCH();
}

}  // namespace

void embedding(const EmbeddingParams& p, cudaStream_t stream) {
  PAGODA_CHECK(p.tokens >= 0 && p.hidden > 0 && p.vocab > 0, "embedding: tokens ", p.tokens, " hidden ", p.hidden,
               " vocab ", p.vocab);
  if (p.tokens == 0) return;
  PAGODA_CHECK(p.ids && p.table && p.out && p.error_flag, "embedding: null pointer");
  PAGODA_CHECK(dtype_is_float(p.dtype), "embedding: dtype ", dtype_name(p.dtype), " is not a float type");
  const int64_t row_bytes = int64_t(p.hidden) * int64_t(dtype_size(p.dtype));
  if (row_bytes % 16 == 0 && is_aligned(p.table, 16) && is_aligned(p.out, 16)) launch<uint4>(p, row_bytes, stream);
  else launch<uint8_t>(p, row_bytes, stream);
}

}  // namespace pagoda
