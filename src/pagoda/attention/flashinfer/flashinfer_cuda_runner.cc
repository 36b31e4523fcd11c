#include "pagoda/attention/flashinfer/flashinfer_cuda_runner.h"

#include <algorithm>

#include "pagoda/attention/device_caps.h"
#include "pagoda/attention/flashinfer/flashinfer_cuda.h"
#include "pagoda/attention/flashinfer/flashinfer_plan.h"
#include "pagoda/core/error.h"

namespace pagoda {
namespace {

class FlashInferCudaRunner final : public AttentionRunner {
 public:
  FlashInferCudaRunner(const LayerShape& shape, const RunnerOptions& options) : shape_(shape), options_(options) {
    int sms = options.num_sms;
    if (sms <= 0) sms = attention_host::device_compute_capability().sm_count;
    num_sms_ = sms > 0 ? sms : 132;
    // Spec §6.5: FP8 queries over e4m3 KV on SM 8.9+ unless disable_flashinfer_q_quantization; e5m2 KV and
    // older devices keep the query in the model dtype. fi_fp8_mma_available() asks the device (SM 8.9+) and
    // this binary's kernel image for it (an sm_80 image on an SM 8.9 device has no FP8 MMA).
    quantize_q_ = options.flashinfer_q_quantization && shape.kv_dtype == DType::kF8E4M3 && fi_fp8_mma_available();
    pshape_ = {shape.num_q_heads, shape.num_kv_heads, shape.block_size, shape.sliding_window, shape.causal};
  }
  ~FlashInferCudaRunner() override { fi_cuda_plan_free(&dplan_); }

  void reserve(const RunnerLimits& limits) override {
    graph_batch_ = limits.graph_batch;
    FiPlanLimits pl;
    pl.max_tokens = graph_batch_ > 0 ? graph_batch_ : limits.max_tokens;
    pl.max_seqs = graph_batch_ > 0 ? graph_batch_ : limits.max_seqs;
    pl.max_model_len = limits.max_model_len;
    // The planner fills SMs x the attend CTAs of this layer's kernel that fit on one (its shared memory and
    // registers decide: 2-4 for the tensor-core kernel).
    pl.target_ctas = num_sms_ * fi_cuda_resident_ctas(shape_.dtype, shape_.kv_dtype, shape_.head_size, quantize_q_);
    // A captured step replays one plan: no cascade groups (they follow the step's tables), fixed splits.
    pl.cascade = options_.cascade && graph_batch_ == 0;
    if (graph_batch_ > 0) {
      const int ctas = graph_batch_ * shape_.num_kv_heads;
      graph_splits_ = std::clamp((pl.target_ctas + ctas - 1) / ctas, 1, std::max(1, options_.max_graph_splits));
      pl.graph_splits = graph_splits_;
    }
    plan_.reserve(pshape_, pl);
    if (pl.cascade) {  // wants_eager()'s grouping allocates nothing per step
      const size_t seqs = size_t(std::max(0, limits.max_seqs));
      eager_groups_.groups.reserve(seqs / 2);
      eager_groups_.members.reserve(seqs);
      eager_order_.reserve(seqs);
    }
    fi_cuda_plan_alloc(plan_, shape_.num_q_heads, shape_.head_size, &dplan_);
  }

  void plan(const AttentionBatch& batch, void* stream) override {
    auto s = static_cast<cudaStream_t>(stream);
    if (graph_batch_ > 0) {
      plan_.build_graph_decode(graph_batch_, graph_splits_);
    } else {
      if (options_.cascade && !batch.seq_lens.empty() && !batch.block_tables)
        throw_runtime_error("FLASHINFER: cascade attention needs the step's block tables in plan()");
      plan_.build(step_of(batch));
    }
    fi_cuda_plan_upload(plan_, &dplan_, s);
  }

  void run(const AttentionParams& a, void* stream) const override {
    FiCudaParams p;
    p.q = a.q;
    p.q_stride = a.q_stride;
    p.out = a.out;
    p.dtype = shape_.dtype;
    p.kv_cache = a.kv_cache;
    p.kv_dtype = shape_.kv_dtype;
    p.layout = shape_.layout;
    p.num_q_heads = shape_.num_q_heads;
    p.num_kv_heads = shape_.num_kv_heads;
    p.head_size = shape_.head_size;
    p.block_size = shape_.block_size;
    p.sliding_window = shape_.sliding_window;
    p.causal = shape_.causal;
    p.scale = shape_.scale;
    p.softcap = shape_.softcap;
    p.k_scale = a.k_scale;
    p.v_scale = a.v_scale;
    p.query_start_loc = a.query_start_loc;
    p.seq_lens = a.seq_lens;
    p.block_tables = a.block_tables;
    p.block_table_stride = a.block_table_stride;
    p.quantize_q = quantize_q_;
    p.plan = dplan_;
    fi_cuda_run(p, static_cast<cudaStream_t>(stream));
  }

  // A step with a cascade group needs its own plan; a captured decode grid has none. Cascade off: false at once.
  bool wants_eager(const AttentionBatch& batch) const override {
    if (!options_.cascade || graph_batch_ > 0) return false;
    return fi_step_has_cascade(pshape_, step_of(batch), &eager_groups_, &eager_order_);
  }

  // FP8 queries only where the tensor-core kernel runs them: head sizes 64/128/256 (flashinfer_cuda_mma.h;
  // the SIMT kernel of the other head sizes dequantizes K/V).
  std::string describe() const override {
    const bool mma = shape_.head_size == 64 || shape_.head_size == 128 || shape_.head_size == 256;
    return str_cat("FLASHINFER (plan/run", quantize_q_ && mma ? ", FP8 queries" : "", options_.cascade ? ", cascade)" : ")");
  }

 private:
  static FiStep step_of(const AttentionBatch& batch) {
    static_assert(sizeof(int) == sizeof(int32_t));
    FiStep st;
    st.query_lens = reinterpret_cast<const int32_t*>(batch.query_lens.data());
    st.seq_lens = reinterpret_cast<const int32_t*>(batch.seq_lens.data());
    st.block_tables = batch.block_tables;
    st.block_table_stride = batch.block_table_stride;
    st.num_seqs = int(batch.seq_lens.size());
    return st;
  }

  LayerShape shape_;
  RunnerOptions options_;
  FiPlanShape pshape_;
  int num_sms_ = 132;
  bool quantize_q_ = false;
  int graph_batch_ = 0, graph_splits_ = 1;
  FiPlan plan_;
  // wants_eager()'s grouping: scratch on the host, overwritten by every call.
  mutable FiCascade eager_groups_;
  mutable std::vector<int32_t> eager_order_;
  FiDevicePlan dplan_;
};

}  // namespace

std::unique_ptr<AttentionRunner> make_flashinfer_cuda_runner(const LayerShape& shape, const RunnerOptions& options) {
  if (shape.dtype != DType::kBF16 && shape.dtype != DType::kF16)
    throw_config_error("FLASHINFER computes in bfloat16 or float16; got ", dtype_name(shape.dtype));
  // The query's dtype or fp8 (tensor cores for head sizes 64/128/256), or the other 16-bit dtype (spec §3.3
  // declares float16 and bfloat16 caches; the SIMT kernel reads it in float32).
  const bool kv_ok = shape.kv_dtype == DType::kF16 || shape.kv_dtype == DType::kBF16 || dtype_is_fp8(shape.kv_dtype);
  if (!kv_ok) throw_config_error("KV cache dtype ", dtype_name(shape.kv_dtype), " is not supported by FLASHINFER");
  if (!shape.kv_preset.empty()) throw_config_error("FLASHINFER does not support ", shape.kv_preset, " kv-cache.");
  if (shape.head_size % 32 != 0 || shape.head_size > 512 || shape.num_kv_heads <= 0 ||
      shape.num_q_heads % shape.num_kv_heads != 0)
    throw_config_error("FLASHINFER: bad layer shape (", shape.str(), ")");
  return std::make_unique<FlashInferCudaRunner>(shape, options);
}

}  // namespace pagoda
