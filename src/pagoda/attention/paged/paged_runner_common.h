// PRIVATE to attention/: what the runners over the paged kernel family (TRITON_ATTN, FLASH_ATTN's FA2 path)
// share: the call's parameters in the kernels' terms and the KV split counts of eager and captured steps.
#pragma once

#include "pagoda/attention/paged/paged_attention.h"
#include "pagoda/attention/runner.h"

namespace pagoda {

// The largest head size of the paged kernels (the CUDA-core kernel's; the tensor-core kernels take up to 256).
constexpr int kPagedMaxHeadSize = 512;

// Most KV splits of an eager step: the eager workspace is reserved for this many.
constexpr int kMaxEagerSplits = 64;

// The fixed KV split count of a captured decode step of `batch` sequences: the eager planner's choice
// (decode_kv_splits: one decode CTA per SM, three with fp8 KV) at any context, capped by max_splits and by
// kMaxEagerSplits (with fp8 KV max_splits replaces the eager rule's own cap of 32). Batch 1 with 8 KV heads on 132 SMs takes 16 with a cap of 32 (fp8: 32); batch 16 and up
// take 1 (tests/model/cuda_runner_host_test.cc).
int graph_decode_splits(int batch, int num_kv_heads, int num_sms, bool fp8_kv, int max_splits);

// The most KV splits a runner's workspace holds: one with batch invariance; for a captured decode step of
// graph_batch > 0 sequences its fixed count (graph_decode_splits, capped by options.max_graph_splits); else
// kMaxEagerSplits.
int runner_max_splits(const LayerShape& shape, const RunnerOptions& options, int num_sms, int graph_batch);

// The planner's view of a captured decode step: graph_batch sequences of one new token (any context).
AttentionBatchInfo graph_decode_batch(int graph_batch);

// The kernels' parameters of one layer's call.
PagedAttentionParams paged_params(const LayerShape& shape, const AttentionParams& p);

// The runner's SM count: the option, or the current device's.
int runner_num_sms(const RunnerOptions& options);

}  // namespace pagoda
