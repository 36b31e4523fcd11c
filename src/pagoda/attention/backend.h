// The attention backend interface: declared capabilities (data, default "no"), the validation that
// returns reasons (spec §3.1), required KV layout, KV cache shape and construction checks.
#pragma once

#include <climits>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pagoda/attention/runner.h"
#include "pagoda/attention/selector_config.h"
#include "pagoda/config/attention_config.h"
#include "pagoda/config/env.h"
#include "pagoda/platform/device.h"

namespace pagoda {

// A kernel block size: `size` exactly, or any multiple of it. For support both behave as "multiple of"
// (§3.1); the distinction matters only for the preferred block size (§6.3).
struct BlockSizeRule {
  int size = 16;
  bool multiple_of = true;
};

struct HeadSizeRule {
  std::vector<int> exact;  // empty: no list
  int multiple_of = 1;
  int min = 1;
  int max = INT_MAX;
  bool supports(int h) const;
};

struct CcRule {
  bool cuda = true;  // false: no CUDA compute capability is supported (CPU_ATTN)
  ComputeCapability min{0, 0};
  std::optional<ComputeCapability> max;
  bool supports(ComputeCapability cc) const;
};

struct Capabilities {
  std::vector<DType> dtypes;
  std::vector<std::string> kv_cache_dtypes;
  std::vector<BlockSizeRule> block_sizes;  // empty: any block size
  HeadSizeRule head_sizes;
  CcRule compute_capability;
  std::vector<AttnType> attn_types;
  bool sinks = false;
  bool per_head_quant_scales = false;
  bool sliding_window = false;
  bool non_causal = false;
  bool batch_invariant = false;
};

// What a backend's checks may depend on beyond the layer: the device and the attention settings.
struct SelectionEnv {
  ComputeCapability cc;              // CUDA capability (CPU selection never validates)
  const AttentionConfig* attention;  // resolved attention config
  bool batch_invariant = false;
};

// What construction checks see (§6.4).
struct ConstructionEnv {
  DeviceKind device = DeviceKind::kCuda;
  ComputeCapability cc;
  std::string device_name;  // "NVIDIA L4", or "CUDA device" in the explain command
  const AttentionConfig* attention = nullptr;
  bool batch_invariant = false;
};

struct KvCacheShape {
  std::vector<int64_t> logical;   // spec §10
  std::vector<int64_t> physical;  // the order in memory for the layout
  int64_t element_bytes = 0;      // bytes per element (1 for byte-packed formats)
};

class AttentionBackend {
 public:
  virtual ~AttentionBackend() = default;
  virtual BackendName name() const = 0;
  virtual Capabilities capabilities(const SelectorConfig& cfg, const SelectionEnv& env) const = 0;
  // Check 12: the backend's combination rule (at most one text).
  virtual std::optional<std::string> combination_rule(const SelectorConfig& cfg, const SelectionEnv& env) const {
    return std::nullopt;
  }
  virtual std::optional<KvLayout> required_kv_layout(ComputeCapability cc) const { return std::nullopt; }
  // Construction checks (§6.4): throws pagoda::Error (runtime) on failure.
  virtual void check_construction(const SelectorConfig& cfg, const ConstructionEnv& env) const {}
  // What pagoda's kernels for this backend run beyond the declaration, which follows vLLM's rules (the spec)
  // so that selection picks what vLLM picks; shown by `backends list`. Empty: the declaration is all.
  virtual std::vector<std::string> beyond_selection(ComputeCapability cc) const { return {}; }
  // Whether this binary holds the backend's kernels: a backend that is not built is rejected by the
  // selector with `not built in this binary`, and make_runner() throws the same.
  virtual bool kernels_built() const { return false; }
  // Whether the runners attend shared prefixes once (attention_config.use_cascade_attention): the setting is
  // refused when a selected backend does not.
  virtual bool serves_cascade() const { return false; }
  // A runner for layers of `shape` (runner.h). The selector validated the configuration against this
  // backend's declaration; the runner serves every configuration the declaration accepts.
  virtual std::unique_ptr<AttentionRunner> make_runner(const LayerShape& shape, const RunnerOptions& options) const;
  virtual KvCacheShape kv_cache_shape(int64_t num_blocks, int64_t block_size, int64_t num_kv_heads, int64_t head_size,
                                      const std::string& kv_cache_dtype, DType model_dtype, KvLayout layout) const;

  // §3.1: every check in order, one reason per failed check; empty == valid.
  std::vector<std::string> why_not(const SelectorConfig& cfg, const SelectionEnv& env) const;
  // §6.3: 16 when the declared list is empty or accepts 16, else the smallest declared size.
  int preferred_block_size(const SelectorConfig& cfg, const SelectionEnv& env, int default_size = 16) const;
};

// Element type of a KV cache dtype string for a model dtype ("auto" = the model's).
DType kv_cache_element_dtype(const std::string& kv_cache_dtype, DType model_dtype);

}  // namespace pagoda
