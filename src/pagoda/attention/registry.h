// The registry of attention backends: the six declarations, and whether each one's kernels are built
// into this binary (a backend that is not built is rejected with `not built in this binary`).
#pragma once

#include <memory>
#include <vector>

#include "pagoda/attention/backend.h"

namespace pagoda {

// Whether this binary contains the backend's kernels (CPU_ATTN always).
bool backend_kernels_built(BackendName b);

class BackendRegistry {
 public:
  // The six backends. all_built: treat every backend as built (the explain command's simulated device).
  static BackendRegistry builtin(bool all_built);

  // Adds or replaces a backend (tests use synthetic declarations).
  void set(std::unique_ptr<AttentionBackend> backend, bool built);
  const AttentionBackend& get(BackendName b) const;
  bool built(BackendName b) const;

 private:
  struct Entry {
    std::shared_ptr<const AttentionBackend> backend;
    bool built = false;
  };
  std::vector<std::pair<BackendName, Entry>> entries_;
};

}  // namespace pagoda
