#include "pagoda/attention/triton_attn/triton_attn_runner.h"

#include <algorithm>

#include "pagoda/attention/paged/paged_runner_common.h"
#include "pagoda/core/error.h"

namespace pagoda {
namespace {

class TritonAttnRunner final : public AttentionRunner {
 public:
  TritonAttnRunner(const LayerShape& shape, const RunnerOptions& options)
      : shape_(shape), options_(options), num_sms_(runner_num_sms(options)) {}

  void reserve(const RunnerLimits& limits) override {
    graph_batch_ = limits.graph_batch;
    max_splits_ = runner_max_splits(shape_, options_, num_sms_, graph_batch_);
    if (graph_batch_ > 0) {
      // One fixed decode work list; separate prefill/decode launches change nothing for a decode-only step.
      all_.reserve(graph_batch_, graph_batch_, shape_.num_q_heads, shape_.head_size, max_splits_);
      return;
    }
    separate_ = options_.use_prefill_decode_attention;
    all_.reserve(limits.max_tokens, limits.max_seqs, shape_.num_q_heads, shape_.head_size, max_splits_);
    if (separate_) decode_.reserve(limits.max_tokens, limits.max_seqs, shape_.num_q_heads, shape_.head_size, max_splits_);
  }

  void plan(const AttentionBatch& batch, void* stream) override {
    auto s = static_cast<cudaStream_t>(stream);
    PagedAttentionOptions o;
    o.num_sms = num_sms_;
    o.max_splits = max_splits_;
    o.fp8_kv = dtype_is_fp8(shape_.kv_dtype);
    o.batch_invariant = options_.batch_invariant;
    if (graph_batch_ > 0) {
      // The captured grid: graph_batch_ decode sequences, exactly max_splits_ splits whatever their context.
      o.force_splits = true;
      plan_paged_attention(graph_decode_batch(graph_batch_), shape_.num_q_heads, shape_.num_kv_heads, shape_.head_size, shape_.dtype, o, all_, s);
      return;
    }
    const AttentionBatchInfo info{batch.query_lens, batch.seq_lens};
    if (!separate_) {
      plan_paged_attention(info, shape_.num_q_heads, shape_.num_kv_heads, shape_.head_size, shape_.dtype, o, all_, s);
      return;
    }
    PagedAttentionOptions pre = o, dec = o;
    pre.sequences = SeqFilter::kPrefill;
    dec.sequences = SeqFilter::kDecode;
    plan_paged_attention(info, shape_.num_q_heads, shape_.num_kv_heads, shape_.head_size, shape_.dtype, pre, all_, s);
    plan_paged_attention(info, shape_.num_q_heads, shape_.num_kv_heads, shape_.head_size, shape_.dtype, dec, decode_, s);
  }

  void run(const AttentionParams& params, void* stream) const override {
    auto s = static_cast<cudaStream_t>(stream);
    const PagedAttentionParams p = paged_params(shape_, params);
    run_paged_attention(p, all_, s);
    if (separate_) run_paged_attention(p, decode_, s);
  }

  std::string describe() const override {
    return separate_ ? "TRITON_ATTN (prefill and decode launches)" : "TRITON_ATTN (unified launch)";
  }

 private:
  LayerShape shape_;
  RunnerOptions options_;
  int num_sms_;
  int graph_batch_ = 0;
  int max_splits_ = 1;
  bool separate_ = false;
  PagedAttentionWorkspace all_;     // every sequence, or the prefill sequences when separate_
  PagedAttentionWorkspace decode_;  // the decode sequences when separate_
};

}  // namespace

std::unique_ptr<AttentionRunner> make_triton_attn_runner(const LayerShape& shape, const RunnerOptions& options) {
  if (shape.num_kv_heads <= 0 || shape.num_q_heads % shape.num_kv_heads != 0)
    throw_config_error("TRITON_ATTN: ", shape.num_q_heads, " query heads are not a multiple of ", shape.num_kv_heads, " KV heads");
  if (shape.head_size < 32 || shape.head_size > kPagedMaxHeadSize)
    throw_config_error("TRITON_ATTN: head size ", shape.head_size, " outside [32, ", kPagedMaxHeadSize, "]");
  switch (shape.dtype) {
    case DType::kBF16: case DType::kF16: case DType::kF32: break;
    case DType::kF8E4M3: case DType::kF8E5M2: case DType::kU8: case DType::kI32: case DType::kI64:
      throw_config_error("TRITON_ATTN: compute dtype ", dtype_name(shape.dtype), " is not supported");
  }
  if (!dtype_is_fp8(shape.kv_dtype) && dtype_size(shape.kv_dtype) != 2 && shape.kv_dtype != DType::kF32)
    throw_config_error("TRITON_ATTN: KV cache dtype ", dtype_name(shape.kv_dtype), " is not supported");
  return std::make_unique<TritonAttnRunner>(shape, options);
}

}  // namespace pagoda
