// FLASHINFER declaration (spec §3.3): paged attention over pages of any size, HND on SM 10.x. Its planner and
// its CPU runner (the plan-executing reference, flashinfer_cpu_runner.h) are in every build; its CUDA runner
// (flashinfer_cuda_runner.h) in CUDA builds, under PAGODA_BUILT_FLASHINFER, which kernels_built() reports
// (without it the selector refuses FLASHINFER on CUDA with `not built in this binary`).
#include "pagoda/attention/backends.h"
#include "pagoda/attention/flashinfer/flashinfer_cpu_runner.h"
#ifdef PAGODA_BUILT_FLASHINFER
#include "pagoda/attention/flashinfer/flashinfer_cuda_runner.h"
#endif

namespace pagoda {
namespace {

class FlashInferBackend final : public AttentionBackend {
 public:
  BackendName name() const override { return BackendName::kFlashInfer; }

  Capabilities capabilities(const SelectorConfig&, const SelectionEnv&) const override {
    Capabilities c;
    c.dtypes = {DType::kF16, DType::kBF16};
    c.kv_cache_dtypes = {"auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"};
    c.block_sizes = {};  // any page size
    c.head_sizes = {.exact = {64, 128, 256, 512}};
    c.compute_capability = {.cuda = true, .min = {8, 0}, .max = ComputeCapability{12, 1}};
    c.attn_types = {AttnType::kDecoder};
    c.sliding_window = c.non_causal = true;
    return c;
  }

  std::optional<KvLayout> required_kv_layout(ComputeCapability cc) const override {
    if (cc.major == 10) return KvLayout::kHND;
    return std::nullopt;
  }

  bool serves_cascade() const override { return true; }

  // Spec §10's shape without FLASH_ATTN's multiple-of-16 check: §3.3 takes pages of any size.
  KvCacheShape kv_cache_shape(int64_t num_blocks, int64_t block_size, int64_t num_kv_heads, int64_t head_size,
                              const std::string& kv, DType model_dtype, KvLayout layout) const override {
    KvCacheShape s;
    s.logical = {num_blocks, num_kv_heads, block_size, 2 * head_size};
    s.physical = layout == KvLayout::kNHD ? std::vector<int64_t>{num_blocks, block_size, num_kv_heads, 2 * head_size}
                                          : s.logical;
    s.element_bytes = int64_t(dtype_size(kv_cache_element_dtype(kv, model_dtype)));
    return s;
  }

  std::vector<std::string> beyond_selection(ComputeCapability) const override {
    return {"a CPU runner, always built: on the CPU a forced FLASHINFER serves the layers (spec §5.4 selects "
            "CPU_ATTN only) by executing its plan (split KV, cascade) in float32 over NHD or HND pages of any size; "
            "its KV dtypes float32, bfloat16, float16, fp8",
            "cascade attention for shared prefixes (attention_config.use_cascade_attention, off by default)"};
  }

#ifdef PAGODA_BUILT_FLASHINFER
  bool kernels_built() const override { return true; }
#endif
  std::unique_ptr<AttentionRunner> make_runner(const LayerShape& shape, const RunnerOptions& options) const override {
    if (options.cpu) return make_flashinfer_cpu_runner(shape, options);
#ifdef PAGODA_BUILT_FLASHINFER
    return make_flashinfer_cuda_runner(shape, options);
#else
    return AttentionBackend::make_runner(shape, options);  // the `not built in this binary` error
#endif
  }
};

}  // namespace

std::unique_ptr<AttentionBackend> make_flashinfer_backend() { return std::make_unique<FlashInferBackend>(); }

}  // namespace pagoda
