// PRIVATE to model/cuda/: a model's weights on the device, in one allocation, in the compute dtype, with the
// per-layer projections fused the way the GPU forward pass runs them (q|k|v, gate|up).
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

#include "pagoda/core/dtype.h"
#include "pagoda/model/load_model.h"
#include "pagoda/ops/cuda/device_buffer.h"

namespace pagoda {

struct CudaLayerWeights {
  void* input_norm = nullptr;  // [hidden]
  void* post_norm = nullptr;   // [hidden]
  void* q_norm = nullptr;      // [head_dim] (Qwen3) or null
  void* k_norm = nullptr;      // [head_dim] (Qwen3) or null
  void* qkv_bias = nullptr;    // [q + k + v widths] or null
  void* o_bias = nullptr;      // [hidden] or null
  void* w_qkv = nullptr;       // [q + k + v widths, hidden]
  void* w_o = nullptr;         // [hidden, heads x head_dim]
  void* w_gate_up = nullptr;   // [2 x intermediate, hidden]
  void* w_down = nullptr;      // [hidden, intermediate]
};

struct CudaWeights {
  DeviceBuffer buffer;  // every weight
  std::vector<CudaLayerWeights> layers;
  void* embed = nullptr;       // [vocab, hidden]
  void* lm_head = nullptr;     // [vocab, hidden]; == embed when tied
  void* final_norm = nullptr;  // [hidden]
};

// Uploads the model's weights converted to `dtype` on the host, or, for deferred dummy weights (no host
// weights), fills them with random values on the device (norms 1.0, the rest N(0, 0.02^2)). Synchronises.
CudaWeights upload_weights(const LoadedModel& model, DType dtype, cudaStream_t stream);

}  // namespace pagoda
