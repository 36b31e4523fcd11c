// The registry of attention backends: the six declarations, and whether each one's kernels are built
// into this binary (a backend that is not built is rejected with `not built in this binary`).
#pragma once

#include <memory>
#include <vector>

#include "pagoda/attention/backend.h"

namespace pagoda {

// Whether this binary contains the backend's kernels (CPU_ATTN always): AttentionBackend::kernels_built().
bool backend_kernels_built(BackendName b);

// The backend that runs attention on the CPU (CPU_ATTN): what a CPU model runner uses for layers it was
// given no runner for.
std::shared_ptr<const AttentionBackend> cpu_attention_backend();

class BackendRegistry {
 public:
  // The six backends. all_built: treat every backend as built (the explain command's simulated device).
  static BackendRegistry builtin(bool all_built);

  // Adds or replaces a backend (tests use synthetic declarations).
  void set(std::unique_ptr<AttentionBackend> backend, bool built);
  const AttentionBackend& get(BackendName b) const;
  std::shared_ptr<const AttentionBackend> shared(BackendName b) const;
  bool built(BackendName b) const;

 private:
  struct Entry {
    std::shared_ptr<const AttentionBackend> backend;
    bool built = false;
  };
  std::vector<std::pair<BackendName, Entry>> entries_;
};

}  // namespace pagoda
