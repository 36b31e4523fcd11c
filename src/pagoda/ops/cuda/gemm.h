// Dense GEMM through cuBLASLt: y[M, N] = x[M, K] @ W[N, K]^T (+ bias[N]).
//
// x and y are row-major activations, W is a Hugging Face linear weight (row-major [out, in]). x, W, bias and
// y share one dtype: bfloat16, float16 or float32. Accumulation is fp32 (CUBLAS_COMPUTE_32F; for float32
// inputs this is true fp32, not TF32, so the float32 model path stays within fp32 rounding). The result is
// rounded once to the output dtype; split-K algorithms that would reduce partial sums in the output dtype
// are excluded.
//
//   GemmRunner gemm;                                  // cuBLASLt handle + 32 MiB workspace
//   gemm.prepare(m, n, k, DType::kBF16);              // picks and caches the algorithm (optional)
//   gemm.run({.x = x, .w = w, .y = y, .m = m, .n = n, .k = k, .dtype = DType::kBF16}, stream);
//
// run() allocates nothing and never synchronises once its shape was prepared (by prepare() or an earlier
// run()), so it can be captured in a CUDA graph: prepare every shape before capture. (With lazy module
// loading, drivers older than CUDA 12.3 cannot load a kernel during capture: run each shape once first.) A GemmRunner is not
// thread-safe (run() sets the bias pointer on a cached descriptor); use one per thread or stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "pagoda/core/dtype.h"

namespace pagoda {

struct GemmParams {
  const void* x = nullptr;     // [m, k] row-major, 16-byte aligned
  const void* w = nullptr;     // [n, k] row-major (HF weight layout), 16-byte aligned
  const void* bias = nullptr;  // [n] or nullptr, 16-byte aligned
  void* y = nullptr;           // [m, n] row-major, 16-byte aligned; must not overlap x or w
  int m = 0, n = 0, k = 0;     // m may be 0 (nothing to do); n, k >= 1
  DType dtype = DType::kBF16;  // kBF16, kF16 or kF32, for x, w, bias and y
};

class GemmRunner {
 public:
  static constexpr size_t kDefaultWorkspaceBytes = size_t(32) << 20;  // NVIDIA's advice for Hopper

  explicit GemmRunner(size_t workspace_bytes = kDefaultWorkspaceBytes);
  ~GemmRunner();
  GemmRunner(const GemmRunner&) = delete;
  GemmRunner& operator=(const GemmRunner&) = delete;

  // Creates the descriptors and asks the cuBLASLt heuristic for the algorithm of this problem; cached per
  // (m, n, k, dtype, bias). Throws pagoda::Error when cuBLASLt has no algorithm for it.
  void prepare(int m, int n, int k, DType dtype, bool with_bias = false);
  // Enqueues the GEMM on `stream`.
  void run(const GemmParams& p, cudaStream_t stream);
  // Batch invariance: one algorithm per (n, k, dtype, bias) for every m (cuBLASLt's choice for 256 rows,
  // without split-K), so a row's result does not depend on the step's other rows. Clears the prepared plans.
  void set_batch_invariant(bool on);
  // Number of prepared problems.
  size_t cached_plans() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pagoda
