// Rotary position embedding applied in place to q and k, fused with writing k and v into the paged KV cache.
//
// RoPE is the rotate_half (GPT-NeoX / Hugging Face Llama) layout: element i of a head pairs with element
// i + head_dim/2, angle = position * inv_freq_i, inv_freq_i = theta^(-2i/head_dim) (optionally Llama-3
// scaled), over the whole head:
//   out[i]       = x[i] * cos - x[i + d/2] * sin
//   out[i + d/2] = x[i + d/2] * cos + x[i] * sin        (fp32 arithmetic, one rounding to the dtype)
//
// KV cache: logical shape (num_blocks, num_kv_heads, block_size, 2 * head_dim) with K in [..., :head_dim]
// and V in [..., head_dim:]. Physical order NHD = (num_blocks, block_size, num_kv_heads, 2 * head_dim) or
// HND = (num_blocks, num_kv_heads, block_size, 2 * head_dim). Token t goes to slot slot_mapping[t] =
// block * block_size + offset; a negative slot means "do not write" (padding). The cache holds the model
// dtype, or FP8 E4M3 / E5M2 with per-tensor scales: stored = value / scale, saturated to the largest finite
// value, rounded to nearest even (the K written is the rounded, rotated k that is left in `k`).
// A TurboQuant cache (cache_dtype kU8 with `turboquant` set) holds one packed slot per (token, KV head), laid out
// [num_blocks][num_kv_heads][block_size][slot_bytes] whatever `layout` says (spec §10): the rounded, rotated k
// and v are encoded as core/turboquant.h defines, bitwise as its float64 model does.
//
// PRECOND (checked, pagoda::Error otherwise): head_dim is a multiple of 8 in [8, 512] (all of 32..256 that
// are multiples of 8; multiples of 16 take 16-byte accesses for 16-bit dtypes, the others 8-byte ones);
// num_q_heads a multiple of num_kv_heads (GQA); q, k, v, the cache and the tables 16-byte aligned and the
// token strides multiples of 8 elements (16 bytes for fp32).
#pragma once

#include "pagoda/core/kv_layout.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "pagoda/core/dtype.h"

namespace pagoda {

// Llama-3 frequency scaling (rope_scaling.rope_type == "llama3").
struct Llama3RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int original_max_position = 8192;
};

// Host-built cos/sin tables, each [max_position, head_dim / 2] fp32, row p = position p.
struct RopeTable {
  int max_position = 0, head_dim = 0;
  std::vector<float> cos, sin;
};

// inv_freq_i = theta^(-2i/head_dim), Llama-3 scaled when `llama3` is given, then divided by
// freq_factors[i] when given ([head_dim / 2], GGUF's rope_freqs), computed in double and rounded
// to fp32 (Hugging Face computes it in fp32; the two agree to an ulp). The angle p * inv_freq_i (with the
// fp32 inv_freq, as HF multiplies) and its cos/sin are evaluated in double, then rounded to fp32.
std::vector<float> rope_inv_freq(int head_dim, double theta, const Llama3RopeScaling* llama3 = nullptr,
                                 const float* freq_factors = nullptr);
RopeTable build_rope_table(int max_position, int head_dim, double theta, const Llama3RopeScaling* llama3 = nullptr,
                           const float* freq_factors = nullptr);


struct RopeKvParams {
  void* q = nullptr;        // [tokens, num_q_heads, head_dim], token stride q_stride elements; rotated in place
  void* k = nullptr;        // [tokens, num_kv_heads, head_dim], token stride k_stride; rotated in place
  const void* v = nullptr;  // [tokens, num_kv_heads, head_dim], token stride v_stride; only read
  int64_t q_stride = 0, k_stride = 0, v_stride = 0;  // 0 means contiguous (heads * head_dim)
  const int64_t* positions = nullptr;  // [tokens], device
  const float* cos = nullptr;          // [max_position, head_dim / 2] device copy of RopeTable::cos
  const float* sin = nullptr;          // [max_position, head_dim / 2]
  int max_position = 0;
  int num_tokens = 0, num_q_heads = 0, num_kv_heads = 0, head_dim = 0;
  DType dtype = DType::kBF16;          // q, k, v: bfloat16, float16 or float32

  // Paged KV cache; kv_cache == nullptr applies RoPE only.
  void* kv_cache = nullptr;             // see the layout above
  const int64_t* slot_mapping = nullptr;  // [tokens], device; < 0: skip the token
  int num_blocks = 0, block_size = 0;
  KvLayout layout = KvLayout::kNHD;
  DType cache_dtype = DType::kBF16;     // == dtype, or kF8E4M3 / kF8E5M2, or kU8 (TurboQuant)
  const float* k_scale = nullptr;       // device scalar, FP8 caches only (nullptr: 1.0)
  const float* v_scale = nullptr;
  // The TurboQuant preset of a kU8 cache (core/turboquant.h) and the layer that seeds the key rotation.
  struct TurboQuant {
    int key_bits = 0;  // 3, 4 or 8 (FP8 keys)
    int value_bits = 0;  // 3 or 4
    bool norm_correction = false;
    int layer = 0;
    float boundaries[15] = {};  // turboquant_boundaries(turboquant_codebook(key_bits, head_dim)); 3/4-bit keys
  } turboquant;

  // Optional device int: set to 1 when a token's position is outside [0, max_position) or its slot is
  // outside the cache. Such a token is left untouched (no rotation, no cache write).
  int* error_flag = nullptr;
};
void rope_kv(const RopeKvParams& p, cudaStream_t stream);

}  // namespace pagoda
