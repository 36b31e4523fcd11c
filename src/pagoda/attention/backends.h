// Factories of the six backends' declarations; each lives in its backend's folder.
#pragma once

#include <memory>

#include "pagoda/attention/backend.h"

namespace pagoda {

std::unique_ptr<AttentionBackend> make_flash_attn_backend();
std::unique_ptr<AttentionBackend> make_flashinfer_backend();
std::unique_ptr<AttentionBackend> make_triton_attn_backend();
std::unique_ptr<AttentionBackend> make_flex_attention_backend();
std::unique_ptr<AttentionBackend> make_turboquant_backend();
std::unique_ptr<AttentionBackend> make_cpu_attn_backend();

// TurboQuant slot layout (§3.7): bytes per head and token of the packed key + value, rounded up to even.
int turboquant_slot_size(const std::string& kv_cache_dtype, int head_size);

}  // namespace pagoda
