// FLASH_ATTN declaration (spec §3.2). Kernels: FA2 (SM 8.0+) and FA3 (SM 9.0).
#include <algorithm>

#include "pagoda/attention/backends.h"
#include "pagoda/attention/flash_attn/flash_attn_runner.h"
#include "pagoda/attention/flash_attn/fa_version.h"
#include "pagoda/core/error.h"

namespace pagoda {
namespace {

class FlashAttnBackend final : public AttentionBackend {
 public:
  BackendName name() const override { return BackendName::kFlashAttn; }

  Capabilities capabilities(const SelectorConfig& cfg, const SelectionEnv& env) const override {
    // The FP8, sink and per-head rows depend on the version resolved (silently) for this configuration.
    bool fa3 = resolved_version(env) == 3 && env.cc.major == 9;
    Capabilities c;
    c.dtypes = {DType::kF16, DType::kBF16};
    c.kv_cache_dtypes = {"auto", "float16", "bfloat16"};
    if (fa3) c.kv_cache_dtypes.insert(c.kv_cache_dtypes.end(), {"fp8", "fp8_e4m3"});
    c.block_sizes = {{16, true}};
    c.head_sizes = {.exact = {}, .multiple_of = 8, .min = 1, .max = 256};
    c.compute_capability = {.cuda = true, .min = {8, 0}, .max = std::nullopt};
    c.attn_types = {AttnType::kDecoder, AttnType::kEncoder, AttnType::kEncoderOnly, AttnType::kEncoderDecoder};
    c.sinks = resolved_version(env) == 3;
    c.per_head_quant_scales = resolved_version(env) == 3;
    c.sliding_window = c.non_causal = c.batch_invariant = true;
    return c;
  }

  std::optional<std::string> combination_rule(const SelectorConfig& cfg, const SelectionEnv& env) const override {
    if (cfg.has_sink && env.cc < ComputeCapability{9, 0}) return "sink not supported on compute capability < 9.0";
    if (is_fp8_kv_dtype(cfg.kv_cache_dtype)) {
      auto kv = capabilities(cfg, env).kv_cache_dtypes;
      if (std::find(kv.begin(), kv.end(), cfg.kv_cache_dtype) == kv.end())
        return "FP8 KV cache requires FA3 on SM90 or FA4 on SM100";
    }
    return std::nullopt;
  }

  std::vector<std::string> beyond_selection(ComputeCapability cc) const override {
    if (cc.major == 9) return {};
    return {"the FA2 kernels run fp8, fp8_e4m3 and fp8_e5m2 KV caches on this device too; selection follows "
            "vLLM's rule (FP8 KV on FLASH_ATTN only with FA3 on SM 9.x)"};
  }

#ifdef PAGODA_BUILT_FLASH_ATTN
  bool kernels_built() const override { return true; }
  std::unique_ptr<AttentionRunner> make_runner(const LayerShape& shape, const RunnerOptions& options) const override {
    return make_flash_attn_runner(shape, options);
  }
#endif

  void check_construction(const SelectorConfig& cfg, const ConstructionEnv& env) const override {
    auto r = resolve_fa_version(env.cc, env.attention->flash_attn_version, env.batch_invariant);
    if (!r.version)
      throw_runtime_error("FlashAttention version ", r.attempted, " cannot be used on this device: ", r.unavailable_reason);
    bool fa3 = *r.version == 3 && env.cc.major == 9;
    PAGODA_CHECK(!is_fp8_kv_dtype(cfg.kv_cache_dtype) || fa3, "FlashAttention does not support ", cfg.kv_cache_dtype,
                 " kv-cache on this device.");
    PAGODA_CHECK(!cfg.has_sink || *r.version == 3, "Sinks are only supported in FlashAttention 3");
  }

 private:
  static std::optional<int> resolved_version(const SelectionEnv& env) {
    return resolve_fa_version(env.cc, env.attention ? env.attention->flash_attn_version : std::nullopt,
                              env.batch_invariant)
        .version;
  }
};

}  // namespace

std::unique_ptr<AttentionBackend> make_flash_attn_backend() { return std::make_unique<FlashAttnBackend>(); }

}  // namespace pagoda
