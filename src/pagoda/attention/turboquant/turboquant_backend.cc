// TURBOQUANT declaration (spec §3.7): attention over a compressed low-bit KV cache.
#include "pagoda/attention/backends.h"
#include "pagoda/core/error.h"

namespace pagoda {
namespace {

struct Preset {
  const char* name;
  int key_bits, value_bits;
};
constexpr Preset kPresets[] = {{"turboquant_k8v4", 8, 4}, {"turboquant_4bit_nc", 4, 4},
                               {"turboquant_k3v4_nc", 3, 4}, {"turboquant_3bit_nc", 3, 3}};

class TurboQuantBackend final : public AttentionBackend {
 public:
  BackendName name() const override { return BackendName::kTurboQuant; }

  Capabilities capabilities(const SelectorConfig&, const SelectionEnv&) const override {
    Capabilities c;
    c.dtypes = {DType::kF16, DType::kBF16};
    for (const auto& p : kPresets) c.kv_cache_dtypes.emplace_back(p.name);
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
  for (const auto& p : kPresets) {
    if (kv != p.name) continue;
    int key = p.key_bits == 8 ? head_size : (head_size * p.key_bits + 7) / 8 + 2;  // codes + fp16 norm
    int value = (head_size * p.value_bits + 7) / 8 + 4;                            // codes + fp16 scale + zero
    return (key + value + 1) / 2 * 2;
  }
  throw_runtime_error("not a TurboQuant KV cache dtype: ", kv);
}

std::unique_ptr<AttentionBackend> make_turboquant_backend() { return std::make_unique<TurboQuantBackend>(); }

}  // namespace pagoda
