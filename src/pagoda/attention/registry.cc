#include "pagoda/attention/registry.h"

#include "pagoda/attention/backends.h"
#include "pagoda/core/error.h"

namespace pagoda {

bool backend_kernels_built(BackendName b) {
  switch (b) {
    case BackendName::kCpuAttn: return true;
    case BackendName::kTritonAttn:
#ifdef PAGODA_BUILT_TRITON_ATTN
      return true;
#else
      return false;
#endif
    case BackendName::kFlashAttn:
#ifdef PAGODA_BUILT_FLASH_ATTN
      return true;
#else
      return false;
#endif
    case BackendName::kFlashInfer:
    case BackendName::kFlexAttention:
    case BackendName::kTurboQuant: return false;
  }
  return false;
}

BackendRegistry BackendRegistry::builtin(bool all_built) {
  BackendRegistry r;
  r.set(make_flash_attn_backend(), all_built || backend_kernels_built(BackendName::kFlashAttn));
  r.set(make_flashinfer_backend(), all_built || backend_kernels_built(BackendName::kFlashInfer));
  r.set(make_triton_attn_backend(), all_built || backend_kernels_built(BackendName::kTritonAttn));
  r.set(make_flex_attention_backend(), all_built || backend_kernels_built(BackendName::kFlexAttention));
  r.set(make_turboquant_backend(), all_built || backend_kernels_built(BackendName::kTurboQuant));
  r.set(make_cpu_attn_backend(), true);
  return r;
}

void BackendRegistry::set(std::unique_ptr<AttentionBackend> backend, bool built) {
  BackendName n = backend->name();
  for (auto& [name, e] : entries_) {
    if (name == n) {
      e = {std::move(backend), built};
      return;
    }
  }
  entries_.push_back({n, {std::move(backend), built}});
}

const AttentionBackend& BackendRegistry::get(BackendName b) const {
  for (const auto& [name, e] : entries_) if (name == b) return *e.backend;
  PAGODA_CHECK(false, "backend ", backend_name_str(b), " is not registered");
}

bool BackendRegistry::built(BackendName b) const {
  for (const auto& [name, e] : entries_) if (name == b) return e.built;
  return false;
}

}  // namespace pagoda
