// The CUDA model runner's KV cache: one device allocation holding every layer's paged cache, each layer in its
// own group's format (spec §10), so that the layers of a TurboQuant model (packed slots) and its boundary
// layers (the model dtype) share one block pool while their blocks differ in bytes.
#pragma once

#include <cstddef>
#include <vector>

#include "pagoda/model/cuda/cuda_model_runner.h"
#include "pagoda/ops/cuda/device_buffer.h"
#include "pagoda/ops/cuda/rope_kv.h"

namespace pagoda {

struct CudaKvCache {
  DeviceBuffer data;                  // every layer's cache, zeroed
  std::vector<size_t> layer_offset;   // [num_layers]: bytes into data
  std::vector<DType> layer_dtype;     // [num_layers]: rope_kv's cache_dtype (kU8 for TurboQuant)
  std::vector<RopeKvParams::TurboQuant> layer_turboquant;  // [num_layers]: key_bits 0 unless TurboQuant
  DeviceBuffer k_scale, v_scale;      // [num_layers] floats: the fp8 layers' scales (1.0 elsewhere)
};

// Sizes the cache from what memory is left under gpu_memory_utilization (kv_cache_sizing.h), each layer's
// blocks in the format of its group (layer_group[l] indexes opt.attention), allocates and zeroes it, and fills
// `cache` (num_blocks, block_size, the non-TurboQuant dtype, the fp8 scales).
CudaKvCache allocate_cuda_kv_cache(const ModelConfig& config, const CudaRunnerOptions& opt,
                                   const std::vector<int>& layer_group, KvCacheOptions& cache);

}  // namespace pagoda
