#include "pagoda/attention/registry.h"

#include "pagoda/attention/backends.h"
#include "pagoda/core/error.h"

namespace pagoda {

namespace {
std::unique_ptr<AttentionBackend> make_backend(BackendName b) {
  switch (b) {
    case BackendName::kFlashAttn: return make_flash_attn_backend();
    case BackendName::kFlashInfer: return make_flashinfer_backend();
    case BackendName::kTritonAttn: return make_triton_attn_backend();
    case BackendName::kFlexAttention: return make_flex_attention_backend();
    case BackendName::kTurboQuant: return make_turboquant_backend();
    case BackendName::kCpuAttn: return make_cpu_attn_backend();
  }
  PAGODA_CHECK(false, "unknown backend");
}
}  // namespace

bool backend_kernels_built(BackendName b) { return make_backend(b)->kernels_built(); }

std::shared_ptr<const AttentionBackend> cpu_attention_backend() {
  static const std::shared_ptr<const AttentionBackend> b = make_backend(BackendName::kCpuAttn);
  return b;
}

BackendRegistry BackendRegistry::builtin(bool all_built) {
  BackendRegistry r;
  for (BackendName b : {BackendName::kFlashAttn, BackendName::kFlashInfer, BackendName::kTritonAttn,
                        BackendName::kFlexAttention, BackendName::kTurboQuant, BackendName::kCpuAttn}) {
    std::unique_ptr<AttentionBackend> backend = make_backend(b);
    const bool built = all_built || backend->kernels_built();
    r.set(std::move(backend), built);
  }
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

std::shared_ptr<const AttentionBackend> BackendRegistry::shared(BackendName b) const {
  for (const auto& [name, e] : entries_) if (name == b) return e.backend;
  PAGODA_CHECK(false, "backend ", backend_name_str(b), " is not registered");
}

bool BackendRegistry::built(BackendName b) const {
  for (const auto& [name, e] : entries_) if (name == b) return e.built;
  return false;
}

}  // namespace pagoda
