// The weights of a decoder model in pagoda's layout: matrices as views into a memory-mapped checkpoint (or
// into owned storage after a dtype conversion / random init), small vectors (norms, biases) as float32.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "pagoda/core/dtype.h"
#include "pagoda/core/quant_type.h"
#include "pagoda/model/model_config.h"

namespace pagoda {

class GgufFile;
class SafetensorsCheckpoint;

// A [rows, cols] row-major matrix (a PyTorch Linear weight is [out_features, in_features]). When `quant` is
// not kNone each row is quant_row_bytes(quant, cols) bytes of blocks and `dtype` is unused.
struct WeightMatrix {
  const void* data = nullptr;
  DType dtype = DType::kF32;  // kF32, kBF16 or kF16
  QuantType quant = QuantType::kNone;
  int64_t rows = 0, cols = 0;
};

struct LayerWeights {
  std::vector<float> input_norm, post_attn_norm;  // [hidden]
  std::vector<float> q_norm, k_norm;              // [head_dim], Qwen3 only
  std::vector<float> q_bias, k_bias, v_bias;      // [q_heads*head_dim], [kv_heads*head_dim] x2, when attention_bias
  std::vector<float> o_bias;                      // [hidden], when o_proj_bias
  WeightMatrix q, k, v, o;                        // [nq*hd, h], [nkv*hd, h] x2, [h, nq*hd]
  WeightMatrix gate, up, down;                    // [ffn, h] x2, [h, ffn]
};

struct ModelWeights {
  WeightMatrix embed;    // [vocab, hidden]
  WeightMatrix lm_head;  // [vocab, hidden]; the embedding when tie_word_embeddings
  std::vector<float> final_norm;
  std::vector<LayerWeights> layers;

  // Storage the views point into.
  std::shared_ptr<const SafetensorsCheckpoint> checkpoint;
  std::shared_ptr<const GgufFile> gguf;
  std::vector<std::vector<uint8_t>> owned;
};

// Loads every tensor the architecture needs from `checkpoint`, checking names, shapes and dtypes.
// `dtype`: store matrices in this dtype (converting, owned memory); nullopt keeps each as stored (no copy).
// Throws a config pagoda::Error naming the tensor and file: missing tensor, wrong shape, a dtype other than
// F32/BF16/F16.
ModelWeights load_model_weights(const ModelConfig& config, std::shared_ptr<const SafetensorsCheckpoint> checkpoint,
                                std::optional<DType> dtype);

// Bytes of weights a decode step reads: every matrix once (the lm_head again unless tied to the embedding,
// of which a step reads only a few rows) and the float32 norms and biases.
double weight_bytes_per_step(const ModelWeights& w);

// Random weights of the config's shapes, no files (`--load-format dummy`). Deterministic in `seed`:
// matrices and biases ~ N(0, 0.02^2) (transformers' default initializer_range), norm weights 1. dtype: kF32, kBF16 or kF16.
// Throws a config error, before allocating, when they would not fit in this machine's memory.
ModelWeights make_random_weights(const ModelConfig& config, uint64_t seed, DType dtype);

// The number of weights the architecture's tensors hold for `config` (embedding, layers, head), summed in
// 64 bits; a config error if the sum overflows (impossible within the config bounds, checked anyway).
int64_t model_parameter_count(const ModelConfig& config);

}  // namespace pagoda
