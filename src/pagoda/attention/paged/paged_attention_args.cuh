// PRIVATE to paged/: what the paged-attention kernels (tensor-core, CUDA-core, split merge) receive, and
// the decoding of a CTA's work item.
#pragma once

#include <cuda_runtime.h>

#include "pagoda/attention/paged/paged_attention.h"

namespace pagoda::paged_detail {

constexpr int kBlockM = 64;
constexpr int kThreads = 128;
constexpr float kLog2e = 1.4426950408889634f;

struct KernelArgs {
  PagedAttentionParams p;
  const int4* work;  // {seq, row_start, split, num_splits}
  float* partial_out;
  float* partial_ml;
  int partial_tokens;  // leading dimension of the partials (workspace split_tokens)
  bool write_partial;
  bool all_decode;     // every work item is decode-shaped (<= 16 query rows): the decode-only kernel runs
  int* split_counters;  // per row group (split-0 item x KV head): CTAs done, for the in-kernel merge; 0 between launches
  bool merge_in_kernel;  // the decode-only kernel merges its splits (SM 9.0: in clusters; else the last CTA of each row group)
  bool merge_in_cluster;  // SM 9.0: the decode-only kernel merges its splits in clusters where they fit
  // The work list is {i, 0, 0, 1} for CTA i (an unsplit decode step, one row group per sequence, every
  // sequence of the batch): the kernels compute their item instead of loading it, so the sequence's
  // metadata and block table are read at entry (one dependent load less before the first KV bytes).
  bool work_is_seq;
};

// This CTA's work item {seq, row_start, split, num_splits}.
__device__ __forceinline__ int4 cta_work(const KernelArgs& args) {
  return args.work_is_seq ? make_int4(int(blockIdx.x), 0, 0, 1) : args.work[blockIdx.x];
}

// The work item of this CTA (blockIdx.x: {seq, row_start, split, num_splits}; blockIdx.y: KV head) and the
// geometry of its sequence: query tokens q_begin.., context ctx, the first query token's position, and the
// rows (query token x query head of the KV head's group) to cover.
struct WorkItem {
  int seq, row_start, split, nsplit, kvh, G, q_begin, q_len, ctx, first_pos, rows_total;
};
__device__ __forceinline__ WorkItem work_item(const KernelArgs& args) {
  const PagedAttentionParams& p = args.p;
  const int4 w = cta_work(args);
  WorkItem wi;
  wi.seq = w.x;
  wi.row_start = w.y;
  wi.split = w.z;
  wi.nsplit = w.w;
  wi.kvh = blockIdx.y;
  wi.G = p.num_q_heads / p.num_kv_heads;
  wi.q_begin = p.query_start_loc[wi.seq];
  wi.q_len = p.query_start_loc[wi.seq + 1] - wi.q_begin;
  wi.ctx = p.seq_lens[wi.seq];
  wi.first_pos = wi.ctx - wi.q_len;
  wi.rows_total = wi.q_len * wi.G;
  return wi;
}

}  // namespace pagoda::paged_detail
