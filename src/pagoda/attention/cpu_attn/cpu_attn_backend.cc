// CPU_ATTN declaration (spec §3.6). On CPU nothing is validated (§5.4); the declaration is used only
// when CPU_ATTN is forced on CUDA, where the compute-capability check always fails.
#include "pagoda/attention/backends.h"
#include "pagoda/attention/cpu_attn/cpu_attn_runner.h"
#include "pagoda/core/error.h"

namespace pagoda {
namespace {

class CpuAttnBackend final : public AttentionBackend {
 public:
  BackendName name() const override { return BackendName::kCpuAttn; }

  Capabilities capabilities(const SelectorConfig&, const SelectionEnv&) const override {
    Capabilities c;
    c.dtypes = {DType::kF16, DType::kBF16, DType::kF32};
    c.kv_cache_dtypes = {"auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"};
    c.block_sizes = {{16, true}};
    c.head_sizes = {.exact = {32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512}};
    c.compute_capability = {.cuda = false};
    c.attn_types = {AttnType::kDecoder, AttnType::kEncoder, AttnType::kEncoderOnly, AttnType::kEncoderDecoder};
    c.sliding_window = c.non_causal = true;
    return c;
  }

  std::optional<KvLayout> required_kv_layout(ComputeCapability) const override { return KvLayout::kHND; }

  bool kernels_built() const override { return true; }
  std::unique_ptr<AttentionRunner> make_runner(const LayerShape& shape, const RunnerOptions& options) const override {
    return make_cpu_attn_runner(shape, options);
  }

  void check_construction(const SelectorConfig& cfg, const ConstructionEnv&) const override {
    if (starts_with(cfg.kv_cache_dtype, "fp8") && cfg.head_size % 32 != 0)
      throw_runtime_error("FP8 KV cache requires head_size divisible by 32 on CPU.");
    if (is_turboquant_kv_dtype(cfg.kv_cache_dtype))
      throw_runtime_error("CPU_ATTN does not support ", cfg.kv_cache_dtype, " kv-cache.");
  }

  KvCacheShape kv_cache_shape(int64_t num_blocks, int64_t block_size, int64_t num_kv_heads, int64_t head_size,
                              const std::string& kv, DType model_dtype, KvLayout) const override {
    KvCacheShape s;  // any block size on CPU; always HND
    s.logical = {num_blocks, num_kv_heads, block_size, 2 * head_size};
    s.physical = s.logical;
    s.element_bytes = int64_t(dtype_size(kv_cache_element_dtype(kv, model_dtype)));
    return s;
  }
};

}  // namespace

std::unique_ptr<AttentionBackend> make_cpu_attn_backend() { return std::make_unique<CpuAttnBackend>(); }

}  // namespace pagoda
