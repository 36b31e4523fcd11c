// PRIVATE to flash_attn/: the KV staging of FA3 prefill steps. The context of the step's prefill sequences
// is copied out of the paged cache (any block size, NHD or HND, KV in the model dtype or fp8) into one
// contiguous buffer in the model dtype, laid out as a cache of kStageBlock-token blocks with each sequence in
// consecutive blocks; the FA3 kernel then reads whole tiles by TMA (its fast path) instead of gathering
// 16-token pages, and fp8 KV reaches it already widened (exactly: every e4m3/e5m2 value is a bf16 and an
// fp16 value; k_scale/v_scale are applied by the kernel). The copy moves each context byte twice more (a
// read and a write, small beside a causal prefill's compute); steps whose context does not fit the buffer
// are not staged.
#pragma once

#include <cuda_runtime_api.h>

#include "pagoda/attention/paged/paged_attention.h"

namespace pagoda::flash_attn_detail {

constexpr int kStageBlock = 128;  // tokens per staged block (FA3 tiles may straddle a sequence's consecutive blocks)

struct KvStage {
  void* base = nullptr;               // [num_blocks * kStageBlock][num_kv_heads][2][head_size], model dtype
  int num_blocks = 0;                 // capacity
  const int* first_block = nullptr;   // device [num_seqs]: staged block of the sequence's token 0, -1 if none
  const int2* blocks = nullptr;       // device [count]: {seq, block index within the sequence}
  int count = 0;                      // staged blocks this step
};

// Copies the step's staged blocks (tokens past a sequence's context are written as zeros, so masked keys
// are finite) on `stream`. One CTA per (staged block, KV head).
void launch_kv_stage(const PagedAttentionParams& p, const KvStage& stage, cudaStream_t stream);

}  // namespace pagoda::flash_attn_detail
