// TURBOQUANT declaration (spec §3.7): attention over a compressed low-bit KV cache, whose slot format is
// core/turboquant.h. The CPU runner is always built (on the CPU a turboquant_* layer selects TURBOQUANT,
// selector.cc); the CUDA runner only with PAGODA_BUILT_TURBOQUANT, which kernels_built() reports.
#include "pagoda/attention/backends.h"
#include "pagoda/attention/turboquant/turboquant_cpu_runner.h"
#include "pagoda/core/error.h"
#include "pagoda/core/turboquant.h"
#ifdef PAGODA_BUILT_TURBOQUANT
#include "pagoda/attention/turboquant/turboquant_cuda_runner.h"
#endif

namespace pagoda {
namespace {

TurboQuantPreset preset_of(std::string_view kv_cache_dtype) {
  auto p = turboquant_preset(kv_cache_dtype);
  if (!p) throw_runtime_error("not a TurboQuant KV cache dtype: ", kv_cache_dtype);
  return *p;
}

class TurboQuantBackend final : public AttentionBackend {
 public:
  BackendName name() const override { return BackendName::kTurboQuant; }

  Capabilities capabilities(const SelectorConfig&, const SelectionEnv&) const override {
    Capabilities c;
    c.dtypes = {DType::kF16, DType::kBF16};
    for (const auto& p : kTurboQuantPresets) c.kv_cache_dtypes.emplace_back(p.name);
    c.block_sizes = {{16, false}, {32, false}, {64, false}, {128, false}};
    c.head_sizes = {.exact = {}, .multiple_of = 1, .min = 1};
    c.compute_capability = {.cuda = true, .min = {0, 0}, .max = std::nullopt};
    c.attn_types = {AttnType::kDecoder};
    return c;
  }

  std::vector<std::string> beyond_selection(ComputeCapability) const override {
    return {"a CPU runner, always built: on the CPU a turboquant_* layer selects TURBOQUANT (spec §5.4 selects "
            "CPU_ATTN only)"};
  }

#ifdef PAGODA_BUILT_TURBOQUANT
  bool kernels_built() const override { return true; }
#endif
  std::unique_ptr<AttentionRunner> make_runner(const LayerShape& shape, const RunnerOptions& options) const override {
    if (options.cpu) return make_turboquant_cpu_runner(shape, options);
#ifdef PAGODA_BUILT_TURBOQUANT
    return make_turboquant_cuda_runner(shape, options);
#else
    return AttentionBackend::make_runner(shape, options);  // the `not built in this binary` error
#endif
  }

  // One slot of turboquant_layout() per (block, KV head, token): spec §10, whatever the layout.
  KvCacheShape kv_cache_shape(int64_t num_blocks, int64_t block_size, int64_t num_kv_heads, int64_t head_size,
                              const std::string& kv, DType, KvLayout) const override {
    KvCacheShape s;
    s.logical = {num_blocks, num_kv_heads, block_size, turboquant_slot_size(kv, int(head_size))};
    s.physical = s.logical;
    s.element_bytes = 1;
    return s;
  }
};

}  // namespace

int turboquant_slot_size(const std::string& kv, int head_size) {
  return turboquant_layout(preset_of(kv), head_size).slot_bytes;
}

std::unique_ptr<AttentionBackend> make_turboquant_backend() { return std::make_unique<TurboQuantBackend>(); }

}  // namespace pagoda
