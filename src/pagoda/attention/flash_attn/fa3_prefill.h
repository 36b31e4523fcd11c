// PRIVATE to flash_attn/: the FA3 prefill kernel's launch (fa3_prefill.cu, kernels compiled for sm_90a).
#pragma once

#include <cuda_runtime_api.h>

#include "pagoda/attention/flash_attn/kv_stage.h"
#include "pagoda/attention/paged/paged_attention.h"

namespace pagoda::flash_attn_detail {

constexpr int kFa3MinBlockM = 128;  // the fewest query rows (tokens of one query head) of a CTA

// True when the binary holds the sm_90a image of the FA3 kernel.
bool fa3_kernel_built();

// The FA3 kernel's tile at this head size: block_m query rows per CTA (192 at head 64, else 128) and
// block_n K/V rows per tile (128; 80 at head 256) -- cache blocks that hold whole tiles are read by TMA.
struct Fa3Tile {
  int block_m, block_n;
};
Fa3Tile fa3_tile(int head_size);

// One CTA per (work item, query head); work[i] = {seq, m_block, q_start, q_len}. stage: null to read the
// paged cache of p (KV in the model dtype; cache_blocks blocks, 0: unknown), or the staged copy of this
// step's context (kv_stage.h).
void launch_fa3_prefill(const PagedAttentionParams& p, int cache_blocks, const int4* work, int num_items,
                        const KvStage* stage, cudaStream_t stream);

}  // namespace pagoda::flash_attn_detail
