#include "pagoda/attention/turboquant/turboquant_cpu_runner.h"

#include "pagoda/attention/turboquant/turboquant_cpu.h"
#include "pagoda/core/error.h"

namespace pagoda {
namespace {

class TurboQuantCpuRunner final : public AttentionRunner {
 public:
  TurboQuantCpuRunner(const LayerShape& shape, const RunnerOptions& options)
      : shape_(shape),
        options_(options),
        tq_(turboquant_cpu_shape(shape.kv_preset, shape.head_size, shape.num_q_heads, shape.num_kv_heads,
                                 shape.block_size, shape.scale)),
        // Every buffer a step needs, sized by the head, block and group sizes and the thread count.
        workspace_(std::make_unique<TurboQuantCpuWorkspace>(tq_, options.parallel_for ? options.num_threads : 1)) {}

  void reserve(const RunnerLimits&) override {}

  void plan(const AttentionBatch& batch, void*) override {
    turboquant_cpu_plan(tq_, *workspace_, batch.query_lens, batch.seq_lens, &plan_);
  }

  void run(const AttentionParams& p, void*) const override {
    TurboQuantCpuParallelFor pf;
    if (options_.parallel_for) {
      const ParallelFor* f = &options_.parallel_for;
      pf = [f](int64_t n, const std::function<void(int64_t, int64_t)>& body) { (*f)(n, 1, body); };
    }
    if (p.k) {
      TurboQuantCpuWriteKvParams w;
      w.key = static_cast<const float*>(p.k);
      w.value = static_cast<const float*>(p.v);
      w.key_stride = w.value_stride = p.kv_stride;
      w.slot_mapping = p.slot_mapping;
      w.num_tokens = p.num_tokens;
      w.kv_cache = p.kv_cache;
      w.num_blocks = p.num_blocks;
      w.layer = p.layer;
      w.parallel_for = pf;
      turboquant_cpu_write_kv(tq_, w, *workspace_);
    }
    TurboQuantCpuParams a;
    a.query = static_cast<const float*>(p.q);
    a.query_stride = p.q_stride;
    a.out = static_cast<float*>(p.out);
    a.kv_cache = p.kv_cache;
    a.num_blocks = p.num_blocks;
    a.query_start_loc = p.query_start_loc;
    a.seq_lens = p.seq_lens;
    a.block_tables = p.block_tables;
    a.max_blocks_per_seq = p.block_table_stride;
    a.num_seqs = p.num_seqs;
    a.layer = p.layer;
    a.parallel_for = pf;
    turboquant_cpu_forward(tq_, plan_, a, *workspace_);
  }

  std::string describe() const override { return "TURBOQUANT (CPU, " + shape_.kv_preset + ")"; }

 private:
  LayerShape shape_;
  RunnerOptions options_;
  TurboQuantCpuShape tq_;
  std::unique_ptr<TurboQuantCpuWorkspace> workspace_;  // scratch of run(), which is const
  TurboQuantCpuPlan plan_;
};

}  // namespace

std::unique_ptr<AttentionRunner> make_turboquant_cpu_runner(const LayerShape& shape, const RunnerOptions& options) {
  if (shape.dtype != DType::kF32)
    throw_config_error("TURBOQUANT on the CPU computes in float32; got queries of ", dtype_name(shape.dtype));
  if (!turboquant_preset(shape.kv_preset))
    throw_config_error("TURBOQUANT needs a turboquant_* KV cache dtype, got '",
                       shape.kv_preset.empty() ? std::string(dtype_name(shape.kv_dtype)) : shape.kv_preset, "'");
  if (shape.kv_dtype != DType::kU8)
    throw_config_error("a ", shape.kv_preset, " KV cache holds packed bytes (uint8), not ", dtype_name(shape.kv_dtype));
  if (shape.head_size <= 0 || shape.block_size <= 0 || shape.num_kv_heads <= 0 || shape.num_q_heads <= 0 ||
      shape.num_q_heads % shape.num_kv_heads != 0)
    throw_config_error("TURBOQUANT: bad layer shape (", shape.str(), ")");
  if (!shape.causal) throw_config_error("TURBOQUANT serves causal decoder attention only (", shape.str(), ")");
  if (shape.sliding_window > 0) throw_config_error("TURBOQUANT has no sliding window (", shape.str(), ")");
  if (shape.softcap > 0) throw_config_error("TURBOQUANT has no logit soft-capping (", shape.str(), ")");
  if (options.num_threads <= 0) throw_config_error("TURBOQUANT: thread count must be positive, got ", options.num_threads);
  return std::make_unique<TurboQuantCpuRunner>(shape, options);
}

}  // namespace pagoda
