// KV cache page layouts (spec §6.2): NHD pages are [block_size, num_kv_heads, ...], HND pages
// [num_kv_heads, block_size, ...].
#pragma once

namespace pagoda {

enum class KvLayout { kNHD, kHND };
inline const char* kv_layout_str(KvLayout l) { return l == KvLayout::kNHD ? "NHD" : "HND"; }

}  // namespace pagoda
