#include "pagoda/attention/paged/paged_runner_common.h"

#include <algorithm>
#include <cmath>

#include "pagoda/attention/device_caps.h"

namespace pagoda {

int graph_decode_splits(int batch, int num_kv_heads, int num_sms, bool fp8_kv, int max_splits) {
  // The eager planner's rule (decode_kv_splits) for a context of unknown length; the cap wins. It is the
  // user's (flash_attn_max_num_splits_for_cuda_graph, tq_max_kv_splits_for_cuda_graph), also past the eager
  // fp8 rule's own cap of 32, up to the workspace's 64.
  const int cap = std::max(1, std::min(max_splits, kMaxEagerSplits));
  return decode_kv_splits(std::max(1, batch * num_kv_heads), 2 * cap, num_sms, fp8_kv, cap, /*fp8_cap=*/cap);
}

int runner_max_splits(const LayerShape& shape, const RunnerOptions& options, int num_sms, int graph_batch) {
  if (options.batch_invariant) return 1;
  if (graph_batch > 0)
    return graph_decode_splits(graph_batch, shape.num_kv_heads, num_sms, dtype_is_fp8(shape.kv_dtype),
                               options.max_graph_splits);
  return kMaxEagerSplits;
}

AttentionBatchInfo graph_decode_batch(int graph_batch) {
  return {std::vector<int>(size_t(graph_batch), 1), std::vector<int>(size_t(graph_batch), 1)};
}

PagedAttentionParams paged_params(const LayerShape& s, const AttentionParams& p) {
  PagedAttentionParams a;
  a.q = p.q;
  a.q_token_stride = p.q_stride;
  a.out = p.out;
  a.kv_cache = p.kv_cache;
  a.dtype = s.dtype;
  a.kv_dtype = s.kv_dtype;
  a.layout = s.layout;
  a.num_tokens = p.num_tokens;
  a.num_seqs = p.num_seqs;
  a.num_q_heads = s.num_q_heads;
  a.num_kv_heads = s.num_kv_heads;
  a.head_size = s.head_size;
  a.block_size = s.block_size;
  a.max_blocks_per_seq = p.block_table_stride;
  a.query_start_loc = p.query_start_loc;
  a.seq_lens = p.seq_lens;
  a.block_tables = p.block_tables;
  a.scale = s.scale > 0 ? s.scale : 1.0f / std::sqrt(float(s.head_size));
  a.k_scale = p.k_scale;
  a.v_scale = p.v_scale;
  a.sliding_window = s.sliding_window;
  a.softcap = s.softcap;
  a.causal = s.causal;
  return a;
}

int runner_num_sms(const RunnerOptions& options) {
  if (options.num_sms > 0) return options.num_sms;
  const int sms = attention_host::device_compute_capability().sm_count;
  return sms > 0 ? sms : 132;
}

}  // namespace pagoda
