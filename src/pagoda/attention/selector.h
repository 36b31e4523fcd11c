// Attention backend selection (spec §5), and what follows it (§6): KV layout, block size, FlashAttention
// version and construction checks. One selector serves one engine start: it caches one result per
// distinct (forced backend, layer configuration) and logs each "once" line once.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "pagoda/attention/backend.h"
#include "pagoda/attention/registry.h"

namespace pagoda {

struct SelectionTarget {
  DeviceKind kind = DeviceKind::kCuda;
  ComputeCapability cc{9, 0};            // CUDA only
  std::string device_name = "CUDA device";  // for construction errors
};

// What the last uncached selection saw, for the explain command.
struct SelectionTrace {
  std::vector<BackendName> potential;
  std::vector<std::pair<BackendName, std::vector<std::string>>> rejected;
};

struct AttentionPlan {
  KvLayout kv_layout = KvLayout::kNHD;
  int block_size = 16;
  std::optional<int> flash_attn_version;  // when FLASH_ATTN layers exist
};

// CUDA priority list (§4).
std::vector<BackendName> cuda_priority_list(ComputeCapability cc, bool use_non_causal);

class AttentionSelector {
 public:
  AttentionSelector(const BackendRegistry& registry, SelectionTarget target, const AttentionConfig& attention,
                    bool batch_invariant, std::optional<KvLayout> env_layout);

  // §5.1 for one layer. Throws pagoda::Error (runtime) with the exact selection errors.
  BackendName select(const SelectorConfig& cfg);
  const SelectionTrace& last_trace() const { return trace_; }
  // The layout once a backend required one (§6.2 step 1), else nullopt.
  std::optional<KvLayout> layout_so_far() const { return layout_; }

  // After every layer was selected: block size (§6.3), construction (§6.1, §6.4), KV layout (§6.2).
  // Throws the construction errors.
  AttentionPlan finalize(std::optional<int> user_block_size);

 private:
  BackendName select_cuda(const SelectorConfig& cfg, std::optional<BackendName> forced);
  BackendName select_cpu(const SelectorConfig& cfg, std::optional<BackendName> forced);
  std::vector<std::string> validate(BackendName b, const SelectorConfig& cfg) const;
  void after_selection(BackendName b);
  bool first_time(const std::string& text) { return once_.insert(text).second; }

  const BackendRegistry& registry_;
  SelectionTarget target_;
  AttentionConfig attention_;
  bool batch_invariant_;
  std::optional<KvLayout> env_layout_;
  std::optional<KvLayout> layout_;
  std::map<std::pair<std::optional<BackendName>, SelectorConfig>, BackendName> cache_;
  std::vector<std::pair<BackendName, SelectorConfig>> selected_;  // distinct, in order
  std::set<std::string> once_;
  SelectionTrace trace_;
};

}  // namespace pagoda
