#include "pagoda/ops/cuda/rmsnorm.h"

#include "pagoda/ops/cuda/cuda_common.cuh"

namespace pagoda {
namespace {

using namespace cuda_detail;

// Each thread keeps up to kCached 16-byte packs of its row in registers between the two passes; a longer
// row (more than kCached * threads packs) re-reads the rest, which then comes from L1/L2.
constexpr int kCached = 4;
constexpr int kWarpsPerBlock = 4;  // warp-per-row kernel: 4 rows per 128-thread block
constexpr int kMaxBlockThreads = 512;  // block-per-row kernel

struct RowArgs {
  const void* x;
  void* residual;  // fused variant only: [rows, cols] contiguous
  const void* w;
  void* y;
  int64_t rows;
  int cols;
  int heads;  // rows per token: row r is head r % heads of token r / heads
  int64_t x_token_stride, y_token_stride;  // elements
  float eps;
};

// PRECOND: cols % kVec16<T> == 0; every row base 16-byte aligned. kWarpPerRow: blockDim.x == 32 *
// kWarpsPerBlock, one warp per row; else blockDim.x is a multiple of 32, <= kMaxBlockThreads, and
// gridDim.x == rows.
template <typename T, bool kWarpPerRow, bool kFusedAdd>
__global__ void __launch_bounds__(kWarpPerRow ? 32 * kWarpsPerBlock : kMaxBlockThreads) rmsnorm_kernel(RowArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // A quantized GEMV after it is launched programmatically (SM 9.0): it may place its CTAs and prefetch its
  // weights now; it waits for this grid's completion before reading the output.
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  constexpr int N = kVec16<T>, W = kWords<T, N>;  // elements and words of one 16-byte access
  int64_t row;
  int tid, nthreads;
  if constexpr (kWarpPerRow) {
    row = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
    if (row >= a.rows) return;  // whole warp leaves together
    tid = threadIdx.x & 31;
    nthreads = 32;
  } else {
    row = blockIdx.x;
    tid = threadIdx.x;
    nthreads = blockDim.x;
  }
  const int64_t token = row / a.heads, head = row % a.heads;
  const T* x = static_cast<const T*>(a.x) + token * a.x_token_stride + head * a.cols;
  T* y = static_cast<T*>(a.y) + token * a.y_token_stride + head * a.cols;
  T* res = kFusedAdd ? static_cast<T*>(a.residual) + row * a.cols : nullptr;
  const T* w = static_cast<const T*>(a.w);
  const int nvec = a.cols / N;

  // Pass 1: (residual update and) sum of squares of `src`, the values that get normalised; the packs of
  // src are kept as raw words.
  auto load_src = [&](int v, uint32_t (&src)[W]) {
    load_words(x + int64_t(v) * N, src);
    if constexpr (kFusedAdd) {
      float xf[N], rf[N];
      words_to_floats<T, N>(src, xf);
      load_floats(res + int64_t(v) * N, rf);
#pragma unroll
      for (int i = 0; i < N; ++i) rf[i] += xf[i];
      floats_to_words<T, N>(rf, src);  // the residual rounded to T, as stored
      store_words(res + int64_t(v) * N, src);
    }
  };
  auto sum_squares = [](const uint32_t (&src)[W]) {
    float f[N], s = 0.f;
    words_to_floats<T, N>(src, f);
#pragma unroll
    for (int i = 0; i < N; ++i) s += f[i] * f[i];
    return s;
  };
  uint32_t cache[kCached][W];
  float ss = 0.f;
#pragma unroll
  for (int j = 0; j < kCached; ++j) {
    const int v = tid + j * nthreads;
    if (v < nvec) {
      load_src(v, cache[j]);
      ss += sum_squares(cache[j]);
    }
  }
  for (int v = tid + kCached * nthreads; v < nvec; v += nthreads) {
    uint32_t src[W];
    load_src(v, src);
    ss += sum_squares(src);
  }
  if constexpr (kWarpPerRow) ss = warp_sum(ss);
  else ss = block_sum(ss);
  const float inv_rms = 1.0f / sqrtf(ss / float(a.cols) + a.eps);

  // Pass 2: y = w * src * inv_rms. Each thread writes only the packs it read, so y may alias x.
  auto store_out = [&](int v, const uint32_t (&src)[W]) {
    float f[N], wf[N];
    words_to_floats<T, N>(src, f);
    load_floats(w + int64_t(v) * N, wf);
#pragma unroll
    for (int i = 0; i < N; ++i) f[i] = wf[i] * (f[i] * inv_rms);
    store_floats(y + int64_t(v) * N, f);
  };
#pragma unroll
  for (int j = 0; j < kCached; ++j) {
    const int v = tid + j * nthreads;
    if (v < nvec) store_out(v, cache[j]);
  }
  for (int v = tid + kCached * nthreads; v < nvec; v += nthreads) {
    uint32_t src[W];
    load_words((kFusedAdd ? res : x) + int64_t(v) * N, src);
    store_out(v, src);
  }
}

template <typename T, bool kFusedAdd>
void launch(const RowArgs& a, cudaStream_t stream) {
  constexpr int N = kVec16<T>;
  const int nvec = a.cols / N;
  if (nvec <= 32 * kCached) {
    const unsigned blocks = ceil_div(a.rows, kWarpsPerBlock);
    rmsnorm_kernel<T, true, kFusedAdd><<<blocks, 32 * kWarpsPerBlock, 0, stream>>>(a);
  } else {
    int threads = (ceil_div(nvec, kCached) + 31) / 32 * 32;
    threads = threads < 64 ? 64 : threads > kMaxBlockThreads ? kMaxBlockThreads : threads;
    rmsnorm_kernel<T, false, kFusedAdd><<<unsigned(a.rows), threads, 0, stream>>>(a);
  }
  PAGODA_CUDA_CHECK_LAUNCH();
}

void check_rows(const char* op, DType dtype, int cols, std::initializer_list<const void*> ptrs,
                std::initializer_list<int64_t> strides) {
  const size_t es = dtype_size(dtype);
  const int n = int(16 / es);
  PAGODA_CHECK(cols > 0 && cols % n == 0, op, ": cols ", cols, " must be a positive multiple of ", n, " for ",
               dtype_name(dtype));
  for (const void* p : ptrs) PAGODA_CHECK(p && is_aligned(p, 16), op, ": pointer ", p, " null or not 16-byte aligned");
  for (int64_t s : strides)
    PAGODA_CHECK(s >= 0 && (s * int64_t(es)) % 16 == 0, op, ": stride ", s, " does not keep rows 16-byte aligned");
}

void run(DType dtype, bool fused, const RowArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return;
  dispatch_model_dtype(dtype, "rmsnorm", [&](auto tag) {
    using T = decltype(tag);
    if (fused) launch<T, true>(a, stream);
    else launch<T, false>(a, stream);
  });
}

}  // namespace

void rmsnorm(const RmsNormParams& p, cudaStream_t stream) {
  PAGODA_CHECK(p.rows >= 0, "rmsnorm: rows ", p.rows);
  if (p.rows == 0) return;
  const int64_t xs = p.x_stride ? p.x_stride : p.cols, ys = p.y_stride ? p.y_stride : p.cols;
  check_rows("rmsnorm", p.dtype, p.cols, {p.x, p.w, p.y}, {xs, ys});
  PAGODA_CHECK(xs >= p.cols && ys >= p.cols, "rmsnorm: row stride smaller than cols");
  run(p.dtype, false, RowArgs{p.x, nullptr, p.w, p.y, p.rows, p.cols, 1, xs, ys, p.eps}, stream);
}

void fused_add_rmsnorm(const FusedAddRmsNormParams& p, cudaStream_t stream) {
  PAGODA_CHECK(p.rows >= 0, "fused_add_rmsnorm: rows ", p.rows);
  if (p.rows == 0) return;
  check_rows("fused_add_rmsnorm", p.dtype, p.cols, {p.x, p.residual, p.w, p.y}, {});
  run(p.dtype, true, RowArgs{p.x, p.residual, p.w, p.y, p.rows, p.cols, 1, p.cols, p.cols, p.eps}, stream);
}

void rmsnorm_heads(const RmsNormHeadsParams& p, cudaStream_t stream) {
  PAGODA_CHECK(p.tokens >= 0 && p.heads > 0, "rmsnorm_heads: tokens ", p.tokens, " heads ", p.heads);
  if (p.tokens == 0) return;
  const int64_t row = int64_t(p.heads) * p.head_dim;
  const int64_t xs = p.x_token_stride ? p.x_token_stride : row, ys = p.y_token_stride ? p.y_token_stride : row;
  check_rows("rmsnorm_heads", p.dtype, p.head_dim, {p.x, p.w, p.y}, {xs, ys});
  PAGODA_CHECK(xs >= row && ys >= row, "rmsnorm_heads: token stride smaller than heads * head_dim");
  run(p.dtype, false,
      RowArgs{p.x, nullptr, p.w, p.y, int64_t(p.tokens) * p.heads, p.head_dim, p.heads, xs, ys, p.eps}, stream);
}

}  // namespace pagoda
