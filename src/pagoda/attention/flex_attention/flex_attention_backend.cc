// FLEX_ATTENTION declaration (spec §3.5): score/mask-modifier attention with per-batch block masks. Its CPU
// runner (flex_attention_cpu_runner.h) is in every build; its CUDA runner (flex_attention_cuda_runner.h) in
// CUDA builds, under PAGODA_BUILT_FLEX_ATTENTION, which kernels_built() reports (without it the selector
// refuses FLEX_ATTENTION on CUDA with `not built in this binary`).
#include "pagoda/attention/backends.h"
#include "pagoda/attention/flex_attention/flex_attention_cpu_runner.h"
#include "pagoda/core/error.h"
#ifdef PAGODA_BUILT_FLEX_ATTENTION
#include "pagoda/attention/flex_attention/flex_attention_cuda_runner.h"
#endif

namespace pagoda {
namespace {

class FlexAttentionBackend final : public AttentionBackend {
 public:
  BackendName name() const override { return BackendName::kFlexAttention; }

  Capabilities capabilities(const SelectorConfig&, const SelectionEnv&) const override {
    Capabilities c;
    c.dtypes = {DType::kF16, DType::kBF16, DType::kF32};
    c.kv_cache_dtypes = {"auto", "float16", "bfloat16"};
    c.block_sizes = {{16, true}};
    c.head_sizes = {};
    c.compute_capability = {.cuda = true, .min = {0, 0}, .max = std::nullopt};
    c.attn_types = {AttnType::kDecoder, AttnType::kEncoderOnly};
    c.sliding_window = c.non_causal = c.batch_invariant = true;
    return c;
  }

  void check_construction(const SelectorConfig&, const ConstructionEnv& env) const override {
    auto check = [](const char* which, const std::optional<int>& v) {
      if (v && *v != 16 && *v != 32 && *v != 64 && *v != 128)
        throw_runtime_error("flex_attn_block_", which, " must be one of 16, 32, 64, 128, got ", *v, ".");
    };
    check("m", env.attention->flex_attn_block_m);
    check("n", env.attention->flex_attn_block_n);
  }

  std::vector<std::string> beyond_selection(ComputeCapability) const override {
    return {"a CPU runner, always built: on the CPU a forced FLEX_ATTENTION serves the layers (spec §5.4 selects "
            "CPU_ATTN only); its KV dtypes float32, bfloat16, float16"};
  }

#ifdef PAGODA_BUILT_FLEX_ATTENTION
  bool kernels_built() const override { return true; }
#endif
  std::unique_ptr<AttentionRunner> make_runner(const LayerShape& shape, const RunnerOptions& options) const override {
    if (options.cpu) return make_flex_attention_cpu_runner(shape, options);
#ifdef PAGODA_BUILT_FLEX_ATTENTION
    return make_flex_attention_cuda_runner(shape, options);
#else
    return AttentionBackend::make_runner(shape, options);  // the `not built in this binary` error
#endif
  }

  KvCacheShape kv_cache_shape(int64_t num_blocks, int64_t block_size, int64_t num_kv_heads, int64_t head_size,
                              const std::string& kv, DType model_dtype, KvLayout) const override {
    return AttentionBackend::kv_cache_shape(num_blocks, block_size, num_kv_heads, head_size, kv, model_dtype,
                                            KvLayout::kNHD);  // always the NHD order
  }
};

}  // namespace

std::unique_ptr<AttentionBackend> make_flex_attention_backend() { return std::make_unique<FlexAttentionBackend>(); }

}  // namespace pagoda
