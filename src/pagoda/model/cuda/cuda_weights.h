// PRIVATE to model/cuda/: a model's weights on the device, in one allocation, with the per-layer
// projections fused the way the GPU forward pass runs them (q|k|v, gate|up). Dense matrices are stored in
// the compute dtype; block-quantized ones (GGUF files, quantized built-ins) as their raw GGML blocks.
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

#include "pagoda/core/dtype.h"
#include "pagoda/core/quant_type.h"
#include "pagoda/model/load_model.h"
#include "pagoda/ops/cuda/device_buffer.h"

namespace pagoda {

// A weight matrix [rows, cols] on the device as row ranges ("parts"), each dense in the compute dtype or
// quantized in one block format, 16-byte aligned: one part, unless a fused projection joins matrices
// stored differently (a Q4_K_M file's q and k in Q4_K with v in Q6_K).
struct CudaMatrix {
  struct Part {
    const void* data = nullptr;
    QuantType quant = QuantType::kNone;  // kNone: dense, compute dtype
    int rows = 0;
  };
  std::vector<Part> parts;  // in row order; their rows sum to `rows`
  int rows = 0, cols = 0;

  bool quantized() const {
    for (const Part& p : parts)
      if (p.quant != QuantType::kNone) return true;
    return false;
  }
  bool all_quantized() const {
    for (const Part& p : parts)
      if (p.quant == QuantType::kNone) return false;
    return true;
  }
};

struct CudaLayerWeights {
  void* input_norm = nullptr;  // [hidden]
  void* post_norm = nullptr;   // [hidden]
  void* q_norm = nullptr;      // [head_dim] (Qwen3) or null
  void* k_norm = nullptr;      // [head_dim] (Qwen3) or null
  void* qkv_bias = nullptr;    // [q + k + v widths] or null
  void* o_bias = nullptr;      // [hidden] or null
  CudaMatrix w_qkv;            // [q + k + v widths, hidden]
  CudaMatrix w_o;              // [hidden, heads x head_dim]
  CudaMatrix w_gate_up;        // [2 x intermediate, hidden]
  CudaMatrix w_down;           // [hidden, intermediate]
};

struct CudaWeights {
  DeviceBuffer buffer;  // every weight
  std::vector<CudaLayerWeights> layers;
  CudaMatrix embed;            // [vocab, hidden], one part
  CudaMatrix lm_head;          // [vocab, hidden], one part; the embedding's when tied
  void* final_norm = nullptr;  // [hidden]
};

// Uploads the model's weights (dense ones converted to `dtype` on the host, quantized ones as stored) or,
// for deferred dummy weights (no host weights), fills them on the device: norms 1.0, dense matrices and
// biases N(0, 0.02^2), and with model.random_weight_quant set, every linear layer's matrix (not the
// embedding) N(0, 0.02^2) quantized by the device quantizer. Synchronises.
CudaWeights upload_weights(const LoadedModel& model, DType dtype, cudaStream_t stream);

}  // namespace pagoda
