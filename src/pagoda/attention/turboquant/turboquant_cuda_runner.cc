#include "pagoda/attention/turboquant/turboquant_cuda_runner.h"

#include <algorithm>
#include <cmath>

#include "pagoda/attention/paged/paged_runner_common.h"
#include "pagoda/attention/turboquant/turboquant_cuda_attention.h"
#include "pagoda/core/error.h"
#include "pagoda/core/turboquant.h"

namespace pagoda {
namespace {

class TurboQuantCudaRunner final : public AttentionRunner {
 public:
  TurboQuantCudaRunner(const LayerShape& shape, const RunnerOptions& options, const TurboQuantPreset& preset)
      : shape_(shape), options_(options), preset_(preset), num_sms_(planner_sms(shape, options, preset)) {
    if (preset.key_bits != 8) {
      const std::vector<float> c = turboquant_codebook(preset.key_bits, shape.head_size);
      for (size_t i = 0; i < c.size(); ++i) centroids_[i] = c[i];
    }
  }

  // The SM count the paged planner is told. The kernel's throughput is its CTAs' (the codes are decoded in
  // them), as with fp8 KV, so the planner's fp8 rule chooses the split counts (paged_attention.h,
  // decode_kv_splits); that rule fills kDecodeCtasPerSm CTAs per SM, so it is given the SM count at which that
  // many CTAs are the resident CTAs of this kernel (its occupancy: 2 per SM at head size 128 on SM 9.0).
  static int planner_sms(const LayerShape& shape, const RunnerOptions& options, const TurboQuantPreset& p) {
    const int sms = runner_num_sms(options);
    // Decode steps, whose splits the planner chooses, run the decode body when GQA <= 8.
    const bool decode8 = shape.num_q_heads / shape.num_kv_heads <= 8;
    const int ctas =
        turboquant_attention_ctas_per_sm(p.key_bits, p.value_bits, p.norm_correction, shape.head_size, decode8);
    return ctas > 0 ? std::max(1, sms * ctas / kDecodeCtasPerSm) : sms;
  }

  void reserve(const RunnerLimits& limits) override {
    graph_batch_ = limits.graph_batch;
    max_splits_ = graph_batch_ > 0 ? graph_decode_splits(graph_batch_, shape_.num_kv_heads, num_sms_, /*fp8_kv=*/true,
                                                         options_.tq_max_graph_splits)
                                   : kMaxEagerSplits;
    if (graph_batch_ > 0) ws_.reserve(graph_batch_, graph_batch_, shape_.num_q_heads, shape_.head_size, max_splits_);
    else ws_.reserve(limits.max_tokens, limits.max_seqs, shape_.num_q_heads, shape_.head_size, max_splits_);
  }

  void plan(const AttentionBatch& batch, void* stream) override {
    auto s = static_cast<cudaStream_t>(stream);
    PagedAttentionOptions o;
    o.num_sms = num_sms_;
    o.max_splits = max_splits_;
    o.fp8_kv = true;
    o.fp8_split_cap = options_.tq_split_cap;
    o.cluster_merge = false;  // the TurboQuant kernel merges its splits in the merge kernel
    if (graph_batch_ > 0) {
      // The captured grid: graph_batch_ decode sequences, exactly max_splits_ splits whatever their context.
      o.force_splits = true;
      max_query_len_ = 1;
      plan_paged_attention(graph_decode_batch(graph_batch_), shape_.num_q_heads, shape_.num_kv_heads,
                           shape_.head_size, shape_.dtype, o, ws_, s);
      return;
    }
    max_query_len_ = batch.query_lens.empty() ? 0 : *std::max_element(batch.query_lens.begin(), batch.query_lens.end());
    plan_paged_attention(AttentionBatchInfo{batch.query_lens, batch.seq_lens}, shape_.num_q_heads,
                         shape_.num_kv_heads, shape_.head_size, shape_.dtype, o, ws_, s);
  }

  void run(const AttentionParams& params, void* stream) const override {
    TurboQuantAttentionParams p;
    p.q = params.q;
    p.q_stride = params.q_stride;
    p.out = params.out;
    p.kv_cache = params.kv_cache;
    p.dtype = shape_.dtype;
    p.key_bits = preset_.key_bits;
    p.value_bits = preset_.value_bits;
    p.norm_correction = preset_.norm_correction;
    p.num_tokens = params.num_tokens;
    p.num_seqs = params.num_seqs;
    p.num_q_heads = shape_.num_q_heads;
    p.num_kv_heads = shape_.num_kv_heads;
    p.head_size = shape_.head_size;
    p.block_size = shape_.block_size;
    p.max_blocks_per_seq = params.block_table_stride;
    p.query_start_loc = params.query_start_loc;
    p.seq_lens = params.seq_lens;
    p.block_tables = params.block_tables;
    p.scale = shape_.scale > 0 ? shape_.scale : 1.0f / std::sqrt(float(shape_.head_size));
    p.layer = params.layer;
    for (int i = 0; i < 16; ++i) p.centroids[i] = centroids_[i];
    p.max_query_len = max_query_len_;
    turboquant_attention(p, ws_, static_cast<cudaStream_t>(stream));
  }

  std::string describe() const override {
    return turboquant_attention_uses_tensor_cores(shape_.head_size) ? "TURBOQUANT (tensor-core kernel)"
                                                                    : "TURBOQUANT (CUDA-core kernel)";
  }

 private:
  LayerShape shape_;
  RunnerOptions options_;
  TurboQuantPreset preset_;
  int num_sms_;
  float centroids_[16] = {};
  int graph_batch_ = 0;
  int max_splits_ = 1;
  int max_query_len_ = 0;  // of the planned step
  PagedAttentionWorkspace ws_;
};

}  // namespace

std::unique_ptr<AttentionRunner> make_turboquant_cuda_runner(const LayerShape& shape, const RunnerOptions& options) {
  const std::optional<TurboQuantPreset> preset = turboquant_preset(shape.kv_preset);
  if (!preset) throw_config_error("TURBOQUANT: the KV cache of ", shape.str(), " is not a turboquant_* preset");
  if (shape.dtype != DType::kBF16 && shape.dtype != DType::kF16)
    throw_config_error("TURBOQUANT: compute dtype ", dtype_name(shape.dtype), " is not supported (bfloat16, float16)");
  if (shape.num_kv_heads <= 0 || shape.num_q_heads % shape.num_kv_heads != 0)
    throw_config_error("TURBOQUANT: ", shape.num_q_heads, " query heads are not a multiple of ", shape.num_kv_heads,
                       " KV heads");
  if (shape.head_size <= 0 || shape.head_size > kTurboQuantMaxHeadSize)
    throw_config_error("TURBOQUANT: head size ", shape.head_size, " outside [1, ", kTurboQuantMaxHeadSize, "]");
  if (shape.block_size <= 0 || shape.block_size % 16 != 0)
    throw_config_error("TURBOQUANT: block size ", shape.block_size, " is not a multiple of 16");
  if (!shape.causal || shape.sliding_window > 0 || shape.softcap > 0)
    throw_config_error("TURBOQUANT: ", shape.str(), ": only causal attention without window or soft-cap");
  return std::make_unique<TurboQuantCudaRunner>(shape, options, *preset);
}

}  // namespace pagoda
