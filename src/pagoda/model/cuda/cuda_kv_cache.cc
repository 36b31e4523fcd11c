#include "pagoda/model/cuda/cuda_kv_cache.h"

#include <cuda_runtime_api.h>

#include "pagoda/core/error.h"
#include "pagoda/core/strings.h"
#include "pagoda/core/turboquant.h"
#include "pagoda/model/kv_cache_sizing.h"

namespace pagoda {
namespace {

constexpr size_t kAlign = 256;
size_t align_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

}  // namespace

CudaKvCache allocate_cuda_kv_cache(const ModelConfig& c, const CudaRunnerOptions& opt,
                                   const std::vector<int>& layer_group, KvCacheOptions& cache) {
  CudaKvCache kv;
  const size_t L = size_t(c.num_layers);
  std::vector<size_t> block_bytes(L);
  kv.layer_dtype.resize(L);
  kv.layer_turboquant.resize(L);
  double total = 0;
  for (size_t l = 0; l < L; ++l) {
    const AttentionGroup& group = opt.attention[size_t(layer_group[l])];
    const LayerShape& s = group.shape;
    block_bytes[l] = size_t(kv_block_bytes(group));  // the group's backend's KV cache shape, as on the CPU
    total += double(block_bytes[l]);
    kv.layer_dtype[l] = s.kv_dtype;
    if (const auto preset = turboquant_preset(s.kv_preset)) {
      RopeKvParams::TurboQuant& t = kv.layer_turboquant[l];
      t.key_bits = preset->key_bits;
      t.value_bits = preset->value_bits;
      t.norm_correction = preset->norm_correction;
      t.layer = int(l);
      if (preset->key_bits != 8) {
        const std::vector<float> b = turboquant_boundaries(turboquant_codebook(preset->key_bits, s.head_size));
        for (size_t i = 0; i < b.size(); ++i) t.boundaries[i] = b[i];
      }
      kv.layer_dtype[l] = DType::kU8;
    }
  }
  size_t free_b = 0, total_b = 0;
  PAGODA_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  KvCacheSizing sizing;
  sizing.bytes_per_block = total;
  sizing.budget_bytes = double(total_b) * opt.gpu_memory_utilization - double(total_b - free_b) - 64.0 * (1 << 20);
  sizing.budget_hint = str_cat("weights and activations use ", format_bytes(double(total_b - free_b)), " of ",
                               format_bytes(double(total_b)), " at --gpu-memory-utilization ",
                               opt.gpu_memory_utilization, "; raise it or lower --max-num-batched-tokens");
  sizing.num_blocks_override = opt.num_blocks_override;
  const int64_t blocks = kv_cache_blocks(sizing);
  size_t at = 0;
  kv.layer_offset.resize(L);
  for (size_t l = 0; l < L; ++l) {
    kv.layer_offset[l] = at;
    at += align_up(size_t(blocks) * block_bytes[l]);  // 256-byte aligned: the kernels' 16-byte accesses
  }
  kv.data = DeviceBuffer(at);
  // Zeroed once: attention kernels may load whole pages past a sequence's end (masked, but P = 0 times a
  // NaN bit pattern would still poison O), so every slot holds a finite value from the start.
  PAGODA_CUDA_CHECK(cudaMemset(kv.data.data(), 0, at));
  cache.num_blocks = blocks;
  cache.block_size = opt.block_size;
  cache.dtype = opt.kv_dtype;
  cache.layer_scales = opt.layer_kv_scales;
  std::vector<float> ks(L), vs(L);
  for (size_t l = 0; l < L; ++l) {
    ks[l] = cache.layer_k_scale(int(l));
    vs[l] = cache.layer_v_scale(int(l));
  }
  kv.k_scale = DeviceBuffer(L * 4);
  kv.v_scale = DeviceBuffer(L * 4);
  kv.k_scale.upload(ks.data(), L * 4);
  kv.v_scale.upload(vs.data(), L * 4);
  return kv;
}

}  // namespace pagoda
