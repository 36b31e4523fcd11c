#include "pagoda/attention/flashinfer/flashinfer_cpu_runner.h"

#include <algorithm>

#include "pagoda/attention/flashinfer/flashinfer_cpu.h"
#include "pagoda/attention/flashinfer/flashinfer_plan.h"
#include "pagoda/core/error.h"

namespace pagoda {
namespace {

// Work chunks per CPU thread the planner aims for: splits of a long context give every thread work.
constexpr int kChunksPerThread = 4;

class FlashInferCpuRunner final : public AttentionRunner {
 public:
  FlashInferCpuRunner(const LayerShape& shape, const RunnerOptions& options) : shape_(shape), options_(options) {
    pshape_.num_q_heads = shape.num_q_heads;
    pshape_.num_kv_heads = shape.num_kv_heads;
    pshape_.block_size = shape.block_size;
    pshape_.sliding_window = shape.sliding_window;
    pshape_.causal = shape.causal;
  }

  // Limits of zero (the CPU model runner's reserve({}): CPU runners allocate nothing ahead) let plan() grow the
  // plan and the slabs to each step: a host allocation outside run(), on a device no graph captures.
  void reserve(const RunnerLimits& limits) override {
    grow_ = limits.max_tokens == 0 && limits.max_seqs == 0 && limits.max_model_len == 0;
    limits_.max_tokens = limits.max_tokens;
    limits_.max_seqs = limits.max_seqs;
    limits_.max_model_len = limits.max_model_len;
    limits_.target_ctas = std::max(1, options_.num_threads) * kChunksPerThread;
    limits_.cascade = options_.cascade;
    reserve_plan();
    reserved_ = true;
  }

  void plan(const AttentionBatch& batch, void*) override {
    PAGODA_CHECK(reserved_, "FLASHINFER: plan() before reserve()");
    PAGODA_CHECK(batch.query_lens.size() == batch.seq_lens.size(), "FLASHINFER: query and context lengths differ in count");
    if (options_.cascade && !batch.seq_lens.empty() && !batch.block_tables)
      throw_runtime_error("FLASHINFER: cascade attention needs the step's block tables in plan()");
    static_assert(sizeof(int) == sizeof(int32_t));
    const int n = int(batch.seq_lens.size());
    if (grow_) {
      int tokens = 0, ctx = 0;
      for (int i = 0; i < n; ++i) tokens += batch.query_lens[size_t(i)], ctx = std::max(ctx, batch.seq_lens[size_t(i)]);
      if (tokens > limits_.max_tokens || n > limits_.max_seqs || ctx > limits_.max_model_len) {
        // Twice what is needed, so that a growing context does not reallocate at every step.
        limits_.max_tokens = std::max(limits_.max_tokens, 2 * tokens);
        limits_.max_seqs = std::max(limits_.max_seqs, 2 * n);
        limits_.max_model_len = std::max(limits_.max_model_len, 2 * ctx);
        reserve_plan();
      }
    }
    FiStep st;
    st.query_lens = reinterpret_cast<const int32_t*>(batch.query_lens.data());
    st.seq_lens = reinterpret_cast<const int32_t*>(batch.seq_lens.data());
    st.block_tables = batch.block_tables;
    st.block_table_stride = batch.block_table_stride;
    st.num_seqs = n;
    plan_.build(st);
    planned_seqs_ = n;
    // As CPU_ATTN: below ~1M multiply-adds one thread does it all.
    serial_ = plan_.total_cost() * shape_.num_kv_heads * plan_.group_size() * shape_.head_size * 2 < (int64_t(1) << 20);
  }

  void run(const AttentionParams& p, void*) const override {
    const LayerShape& sh = shape_;
    PAGODA_CHECK(p.num_seqs == planned_seqs_, "FLASHINFER: run() of ", p.num_seqs, " sequences, planned ", planned_seqs_);
    FiCacheView view;
    view.data = p.kv_cache;
    view.dtype = sh.kv_dtype;
    view.layout = sh.layout;
    view.num_blocks = p.num_blocks;
    view.num_kv_heads = sh.num_kv_heads;
    view.head_size = sh.head_size;
    view.block_size = sh.block_size;
    view.k_scale = p.k_scale;
    view.v_scale = p.v_scale;
    if (p.k) {
      FiCpuWriteKvParams w;
      w.key = static_cast<const float*>(p.k);
      w.value = static_cast<const float*>(p.v);
      w.kv_stride = p.kv_stride;
      w.slot_mapping = p.slot_mapping;
      w.num_tokens = p.num_tokens;
      w.cache = p.kv_cache;
      w.view = view;
      fi_cpu_write_kv(w);
    }
    FiCpuParams<float> a;
    a.query = static_cast<const float*>(p.q);
    a.query_stride = p.q_stride;
    a.out = static_cast<float*>(p.out);
    a.cache = view;
    a.query_start_loc = p.query_start_loc;
    a.seq_lens = p.seq_lens;
    a.block_tables = p.block_tables;
    a.block_table_stride = p.block_table_stride;
    a.num_seqs = p.num_seqs;
    a.num_q_heads = sh.num_q_heads;
    a.scale = sh.scale;
    a.softcap = sh.softcap;
    a.plan = &plan_;
    a.slab_o = slab_o_.data();
    a.slab_lse = slab_lse_.data();
    if (options_.parallel_for) {
      const ParallelFor& pf = options_.parallel_for;
      const bool serial = serial_;
      a.parallel_for = [&pf, serial](int64_t n, const std::function<void(int64_t, int64_t)>& body) { pf(n, serial ? n : 1, body); };
    }
    fi_cpu_run(a);
  }

  std::string describe() const override {
    return str_cat("FLASHINFER (CPU reference, ", kv_layout_str(shape_.layout), options_.cascade ? ", cascade)" : ")");
  }

 private:
  void reserve_plan() {
    plan_.reserve(pshape_, limits_);
    slab_o_.assign(size_t(plan_.max_slabs()) * shape_.num_q_heads * shape_.head_size, 0.0f);
    slab_lse_.assign(size_t(plan_.max_slabs()) * shape_.num_q_heads, 0.0f);
  }

  LayerShape shape_;
  RunnerOptions options_;
  FiPlanShape pshape_;
  FiPlanLimits limits_;
  FiPlan plan_;
  // Partials of the step's split and cascade tokens: scratch that run() overwrites before it reads (a CPU
  // runner's layers run one after another).
  mutable std::vector<float> slab_o_, slab_lse_;
  bool reserved_ = false, grow_ = false, serial_ = true;
  int planned_seqs_ = 0;
};

}  // namespace

std::unique_ptr<AttentionRunner> make_flashinfer_cpu_runner(const LayerShape& shape, const RunnerOptions& options) {
  if (shape.dtype != DType::kF32)
    throw_config_error("FLASHINFER on the CPU computes in float32; got queries of ", dtype_name(shape.dtype));
  switch (shape.kv_dtype) {
    case DType::kF32: case DType::kBF16: case DType::kF16: case DType::kF8E4M3: case DType::kF8E5M2: break;
    case DType::kU8: case DType::kI32: case DType::kI64:
      throw_config_error("KV cache dtype ", dtype_name(shape.kv_dtype), " is not supported by FLASHINFER");
  }
  if (!shape.kv_preset.empty()) throw_config_error("FLASHINFER does not support ", shape.kv_preset, " kv-cache.");
  if (shape.head_size <= 0 || shape.block_size <= 0 || shape.num_kv_heads <= 0 || shape.num_q_heads % shape.num_kv_heads != 0)
    throw_config_error("FLASHINFER: bad layer shape (", shape.str(), ")");
  return std::make_unique<FlashInferCpuRunner>(shape, options);
}

}  // namespace pagoda
