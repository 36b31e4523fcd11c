// RMSNorm on the GPU: y = w * x / sqrt(mean(x^2) + eps), all arithmetic in fp32 and one rounding to the
// output dtype (Hugging Face rounds x * rsqrt to the dtype before multiplying by w: at most one ulp apart).
//
// Three entry points share one kernel: plain rows, vLLM's fused_add_rms_norm (residual += x, then the norm
// of the rounded new residual), and Qwen3's per-head q/k norm over head_dim of [tokens, heads, head_dim].
// A row of <= 1024 16-bit elements (512 fp32) is reduced by one warp, a longer one by one block.
//
// PRECOND (checked, pagoda::Error otherwise): dtype is bfloat16, float16 or float32; cols is a multiple of
// 8 (16-bit) or 4 (fp32) elements; pointers and row strides keep every row 16-byte aligned.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "pagoda/core/dtype.h"

namespace pagoda {

struct RmsNormParams {
  const void* x = nullptr;  // [rows, cols], row stride x_stride elements
  const void* w = nullptr;  // [cols]
  void* y = nullptr;        // [rows, cols], row stride y_stride elements; may be x (in place)
  int rows = 0, cols = 0;
  int64_t x_stride = 0, y_stride = 0;  // 0 means cols (contiguous)
  float eps = 1e-6f;
  DType dtype = DType::kBF16;  // x, w and y
};
void rmsnorm(const RmsNormParams& p, cudaStream_t stream);

// residual = round(residual + x); y = rmsnorm(residual) * w. Contiguous [rows, cols] tensors.
struct FusedAddRmsNormParams {
  const void* x = nullptr;  // [rows, cols], the sub-layer output
  void* residual = nullptr; // [rows, cols], in/out
  const void* w = nullptr;  // [cols]
  void* y = nullptr;        // [rows, cols]; may be x (vLLM writes the normalised value into its input)
  int rows = 0, cols = 0;
  float eps = 1e-6f;
  DType dtype = DType::kBF16;
};
void fused_add_rmsnorm(const FusedAddRmsNormParams& p, cudaStream_t stream);

// Per-head norm (Qwen3 q_norm / k_norm): each [head_dim] vector of x [tokens, heads, head_dim] is normalised
// with the shared weight w [head_dim]. x may be a slice of a fused qkv row (token stride > heads * head_dim).
struct RmsNormHeadsParams {
  const void* x = nullptr;  // [tokens, heads, head_dim], token stride x_token_stride elements
  const void* w = nullptr;  // [head_dim]
  void* y = nullptr;        // same shape, token stride y_token_stride; may be x (in place)
  int tokens = 0, heads = 0, head_dim = 0;
  int64_t x_token_stride = 0, y_token_stride = 0;  // 0 means heads * head_dim
  float eps = 1e-6f;
  DType dtype = DType::kBF16;
};
void rmsnorm_heads(const RmsNormHeadsParams& p, cudaStream_t stream);

}  // namespace pagoda
