// Block-quantized weight formats (the GGML/GGUF ones). A quantized [rows, cols] matrix stores each row as
// cols / block_elems consecutive blocks of block_bytes; rows are contiguous. The block layouts, and the
// exact dequantization of each, are those of ggml (ggml-common.h / ggml-quants.c); ops/quant/ holds the
// reference and fast kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace pagoda {

enum class QuantType : uint8_t { kNone, kQ4_0, kQ4_1, kQ5_0, kQ5_1, kQ8_0, kQ4_K, kQ5_K, kQ6_K };

struct QuantTraits {
  std::string_view name;  // "Q4_K", as GGUF tools print it; "none" for kNone
  uint32_t ggml_type;     // the GGUF tensor-type id (Q4_0 = 2 ... Q6_K = 14); 0 (F32) for kNone
  int block_elems;        // weights per block: 32, or 256 for the k-quants; 1 for kNone
  int block_bytes;        // bytes per block; 0 for kNone
};

constexpr QuantTraits quant_traits(QuantType t) {
  switch (t) {
    case QuantType::kNone: return {"none", 0, 1, 0};
    case QuantType::kQ4_0: return {"Q4_0", 2, 32, 18};     // fp16 d, 16 bytes of nibbles
    case QuantType::kQ4_1: return {"Q4_1", 3, 32, 20};     // fp16 d, fp16 m, 16 bytes of nibbles
    case QuantType::kQ5_0: return {"Q5_0", 6, 32, 22};     // fp16 d, 4 bytes of high bits, 16 of nibbles
    case QuantType::kQ5_1: return {"Q5_1", 7, 32, 24};     // fp16 d, fp16 m, 4 high-bit bytes, 16 nibbles
    case QuantType::kQ8_0: return {"Q8_0", 8, 32, 34};     // fp16 d, 32 int8
    case QuantType::kQ4_K: return {"Q4_K", 12, 256, 144};  // fp16 d, dmin, 12 bytes of 6-bit scales, 128 nibbles
    case QuantType::kQ5_K: return {"Q5_K", 13, 256, 176};  // as Q4_K plus 32 bytes of high bits
    case QuantType::kQ6_K: return {"Q6_K", 14, 256, 210};  // 128 low nibbles, 64 high 2-bits, 16 int8 scales, fp16 d
  }
  return {"?", 0, 1, 0};
}

// The quantized type of a GGUF tensor-type id; nullopt for F32/F16/BF16 (plain dtypes) and unknown ids.
constexpr std::optional<QuantType> quant_type_from_ggml(uint32_t ggml_type) {
  for (QuantType t : {QuantType::kQ4_0, QuantType::kQ4_1, QuantType::kQ5_0, QuantType::kQ5_1, QuantType::kQ8_0,
                      QuantType::kQ4_K, QuantType::kQ5_K, QuantType::kQ6_K})
    if (quant_traits(t).ggml_type == ggml_type) return t;
  return std::nullopt;
}

// Bytes of one row of `cols` weights. PRECOND: t != kNone and cols % block_elems == 0.
constexpr size_t quant_row_bytes(QuantType t, int64_t cols) {
  return size_t(cols / quant_traits(t).block_elems) * size_t(quant_traits(t).block_bytes);
}

}  // namespace pagoda
