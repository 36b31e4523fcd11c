#include "pagoda/attention/flex_attention/flex_attention_cpu_runner.h"

#include <algorithm>

#include "pagoda/attention/cpu_attn/cpu_attn_runner.h"
#include "pagoda/attention/flex_attention/flex_cpu.h"
#include "pagoda/attention/flex_attention/flex_layer.h"
#include "pagoda/core/error.h"

namespace pagoda {
namespace {

class FlexAttentionCpuRunner final : public AttentionRunner {
 public:
  FlexAttentionCpuRunner(const LayerShape& shape, const RunnerOptions& options)
      : shape_(shape), options_(options), mask_(flex_layer_mask(shape)) {
    mod_.softcap = shape.softcap;
    const FlexTiles t = flex_layer_tiles(options);
    block_m_ = t.block_m;
    block_n_ = t.block_n;
  }

  // Limits of zero (the CPU model runner's reserve({}): CPU runners allocate nothing ahead) let plan() grow the
  // plan's buffers to each step: a host allocation outside run(), on a device no graph captures.
  void reserve(const RunnerLimits& limits) override {
    limits_ = limits;
    grow_ = limits.max_tokens == 0 && limits.max_seqs == 0 && limits.max_model_len == 0;
    plan_.reserve(limits.max_tokens, limits.max_seqs, limits.max_model_len, block_m_, block_n_);
    reserved_ = true;
  }

  void plan(const AttentionBatch& batch, void*) override {
    PAGODA_CHECK(reserved_, "FLEX_ATTENTION: plan() before reserve()");
    PAGODA_CHECK(batch.query_lens.size() == batch.seq_lens.size(), "FLEX_ATTENTION: query and context lengths differ in count");
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
        plan_.reserve(limits_.max_tokens, limits_.max_seqs, limits_.max_model_len, block_m_, block_n_);
      }
    }
    plan_.build(mask_, reinterpret_cast<const int32_t*>(batch.query_lens.data()),
                reinterpret_cast<const int32_t*>(batch.seq_lens.data()), n);
    planned_seqs_ = n;
    // As CPU_ATTN: below ~1M multiply-adds of listed blocks one thread does it all.
    const int64_t blocks = plan_.num_full() + plan_.num_partial();
    serial_ = blocks * block_m_ * block_n_ * int64_t(shape_.num_q_heads) * shape_.head_size * 2 < (int64_t(1) << 20);
  }

  void run(const AttentionParams& p, void*) const override {
    const LayerShape& sh = shape_;
    PAGODA_CHECK(p.num_seqs == planned_seqs_, "FLEX_ATTENTION: run() of ", p.num_seqs, " sequences, planned ", planned_seqs_);
    if (p.k) cpu_attn_write_step_kv(sh, p);
    FlexCpuParams a;
    a.query = static_cast<const float*>(p.q);
    a.query_stride = p.q_stride;
    a.out = static_cast<float*>(p.out);
    a.kv_cache = p.kv_cache;
    a.cache_dtype = sh.kv_dtype;
    a.num_blocks = p.num_blocks;
    a.seq_lens = p.seq_lens;
    a.block_tables = p.block_tables;
    a.max_blocks_per_seq = p.block_table_stride;
    a.num_seqs = p.num_seqs;
    a.num_q_heads = sh.num_q_heads;
    a.num_kv_heads = sh.num_kv_heads;
    a.head_size = sh.head_size;
    a.block_size = sh.block_size;
    a.scale = sh.scale;
    a.mask = &mask_;
    a.score_mod = &mod_;
    a.plan = &plan_;
    a.parallel_for = cpu_attn_parallel_for(options_, serial_);
    flex_cpu_forward(a);
  }

  std::string describe() const override { return str_cat("FLEX_ATTENTION (CPU, ", mask_.str(), ", tiles ", block_m_, "x", block_n_, ")"); }

 private:
  LayerShape shape_;
  RunnerOptions options_;
  FlexMask mask_;
  FlexScoreMod mod_;
  int block_m_ = 64, block_n_ = 64;  // query tile, KV block of the plan
  FlexBlockPlan plan_;
  bool reserved_ = false;
  RunnerLimits limits_;
  bool grow_ = false;
  int planned_seqs_ = 0;
  bool serial_ = true;
};

}  // namespace

std::unique_ptr<AttentionRunner> make_flex_attention_cpu_runner(const LayerShape& shape, const RunnerOptions& options) {
  if (shape.dtype != DType::kF32)
    throw_config_error("FLEX_ATTENTION on the CPU computes in float32; got queries of ", dtype_name(shape.dtype));
  switch (shape.kv_dtype) {
    case DType::kF32: case DType::kBF16: case DType::kF16: break;
    case DType::kF8E4M3: case DType::kF8E5M2: case DType::kU8: case DType::kI32: case DType::kI64:
      throw_config_error("KV cache dtype ", dtype_name(shape.kv_dtype), " is not supported by FLEX_ATTENTION");
  }
  if (!shape.kv_preset.empty()) throw_config_error("FLEX_ATTENTION does not support ", shape.kv_preset, " kv-cache.");
  if (shape.head_size <= 0 || shape.block_size <= 0 || shape.num_kv_heads <= 0 || shape.num_q_heads % shape.num_kv_heads != 0)
    throw_config_error("FLEX_ATTENTION: bad layer shape (", shape.str(), ")");
  return std::make_unique<FlexAttentionCpuRunner>(shape, options);
}

}  // namespace pagoda
