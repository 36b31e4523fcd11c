// TRITON_ATTN declaration (spec §3.4): the portable unified paged-attention kernel.
#include "pagoda/attention/backends.h"
#include "pagoda/attention/triton_attn/triton_attn_runner.h"
#include "pagoda/core/error.h"

namespace pagoda {
namespace {

class TritonAttnBackend final : public AttentionBackend {
 public:
  BackendName name() const override { return BackendName::kTritonAttn; }

  Capabilities capabilities(const SelectorConfig&, const SelectionEnv&) const override {
    Capabilities c;
    c.dtypes = {DType::kF16, DType::kBF16, DType::kF32};
    c.kv_cache_dtypes = {"auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"};
    c.block_sizes = {{16, true}};
    c.head_sizes = {.exact = {}, .multiple_of = 1, .min = 32};
    c.compute_capability = {.cuda = true, .min = {0, 0}, .max = std::nullopt};
    c.attn_types = {AttnType::kDecoder, AttnType::kEncoder, AttnType::kEncoderOnly, AttnType::kEncoderDecoder};
    c.sinks = c.sliding_window = c.non_causal = c.batch_invariant = true;
    return c;
  }

#ifdef PAGODA_BUILT_TRITON_ATTN
  bool kernels_built() const override { return true; }
  std::unique_ptr<AttentionRunner> make_runner(const LayerShape& shape, const RunnerOptions& options) const override {
    return make_triton_attn_runner(shape, options);
  }
#endif

  void check_construction(const SelectorConfig& cfg, const ConstructionEnv& env) const override {
    if (starts_with(cfg.kv_cache_dtype, "fp8") && env.cc < ComputeCapability{8, 9})
      throw_runtime_error("FP8 KV cache is not supported by the Triton attention backend on ", env.device_name,
                          " (compute capability ", env.cc.str(), "); native FP8 (fp8e4nv) requires SM89+. "
                          "Re-run with --kv-cache-dtype ", env.cc < ComputeCapability{8, 0} ? "float16" : "bfloat16", ".");
    if (cfg.kv_cache_dtype == "bfloat16" && env.cc < ComputeCapability{8, 0})
      throw_runtime_error("bfloat16 KV cache is not supported on ", env.device_name, " (compute capability ",
                          env.cc.str(), "); bfloat16 requires SM80+. Re-run with --kv-cache-dtype float16.");
  }
};

}  // namespace

std::unique_ptr<AttentionBackend> make_triton_attn_backend() { return std::make_unique<TritonAttnBackend>(); }

}  // namespace pagoda
