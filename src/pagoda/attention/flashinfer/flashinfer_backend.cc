// FLASHINFER declaration (spec §3.3): paged attention over pages of any size, HND on SM 10.x.
#include "pagoda/attention/backends.h"

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
};

}  // namespace

std::unique_ptr<AttentionBackend> make_flashinfer_backend() { return std::make_unique<FlashInferBackend>(); }

}  // namespace pagoda
