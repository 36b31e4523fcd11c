#include "pagoda/attention/cpu_attn/cpu_attn_runner.h"

#include "pagoda/attention/cpu_attn/cpu_attn.h"
#include "pagoda/core/error.h"

namespace pagoda {
namespace {

class CpuAttnRunner final : public AttentionRunner {
 public:
  CpuAttnRunner(const LayerShape& shape, const RunnerOptions& options) : shape_(shape), options_(options) {}

  void reserve(const RunnerLimits&) override {}

  void plan(const AttentionBatch& batch, void*) override {
    // Work ~ new tokens x context x heads x head size; below ~1M multiply-adds one thread does it all
    // (handing out chunks costs more than it saves; the matmul grain follows the same reasoning).
    int64_t work = 0;
    for (size_t s = 0; s < batch.query_lens.size(); ++s) work += int64_t(batch.query_lens[s]) * batch.seq_lens[s];
    work *= int64_t(shape_.num_q_heads) * shape_.head_size * 2;
    serial_ = work < (int64_t(1) << 20);
  }

  void run(const AttentionParams& p, void*) const override {
    const LayerShape& sh = shape_;
    if (p.k) cpu_attn_write_step_kv(sh, p);
    CpuAttnParams a;
    a.query = static_cast<const float*>(p.q);
    a.query_stride = p.q_stride;
    a.out = static_cast<float*>(p.out);
    a.kv_cache = p.kv_cache;
    a.cache_dtype = sh.kv_dtype;
    a.num_blocks = p.num_blocks;
    a.k_scale = p.k_scale;
    a.v_scale = p.v_scale;
    a.query_start_loc = p.query_start_loc;
    a.seq_lens = p.seq_lens;
    a.block_tables = p.block_tables;
    a.max_blocks_per_seq = p.block_table_stride;
    a.num_seqs = p.num_seqs;
    a.num_q_heads = sh.num_q_heads;
    a.num_kv_heads = sh.num_kv_heads;
    a.head_size = sh.head_size;
    a.block_size = sh.block_size;
    a.scale = sh.scale;
    a.sliding_window = sh.sliding_window;
    a.causal = sh.causal;
    a.parallel_for = cpu_attn_parallel_for(options_, serial_);
    cpu_attn_forward(a);
  }

  std::string describe() const override { return "CPU_ATTN"; }

 private:
  LayerShape shape_;
  RunnerOptions options_;
  bool serial_ = true;
};

}  // namespace

void cpu_attn_write_step_kv(const LayerShape& sh, const AttentionParams& p) {
  CpuAttnWriteKvParams w;
  w.key = static_cast<const float*>(p.k);
  w.value = static_cast<const float*>(p.v);
  w.key_stride = w.value_stride = p.kv_stride;
  w.slot_mapping = p.slot_mapping;
  w.num_tokens = p.num_tokens;
  w.kv_cache = p.kv_cache;
  w.cache_dtype = sh.kv_dtype;
  w.num_blocks = p.num_blocks;
  w.num_kv_heads = sh.num_kv_heads;
  w.head_size = sh.head_size;
  w.block_size = sh.block_size;
  w.k_scale = p.k_scale;
  w.v_scale = p.v_scale;
  cpu_attn_write_kv(w);
}

CpuAttnParallelFor cpu_attn_parallel_for(const RunnerOptions& options, bool serial) {
  if (!options.parallel_for) return nullptr;
  const ParallelFor& pf = options.parallel_for;
  return [&pf, serial](int64_t n, const std::function<void(int64_t, int64_t)>& body) { pf(n, serial ? n : 1, body); };
}

std::unique_ptr<AttentionRunner> make_cpu_attn_runner(const LayerShape& shape, const RunnerOptions& options) {
  if (shape.dtype != DType::kF32)
    throw_config_error("CPU_ATTN computes in float32; got queries of ", dtype_name(shape.dtype));
  switch (shape.kv_dtype) {
    case DType::kF32: case DType::kBF16: case DType::kF16: case DType::kF8E4M3: case DType::kF8E5M2: break;
    case DType::kU8: case DType::kI32: case DType::kI64:
      throw_config_error("KV cache dtype ", dtype_name(shape.kv_dtype), " is not supported by CPU_ATTN");
  }
  if (shape.head_size <= 0 || shape.block_size <= 0 || shape.num_kv_heads <= 0 ||
      shape.num_q_heads % shape.num_kv_heads != 0)
    throw_config_error("CPU_ATTN: bad layer shape (", shape.str(), ")");
  if (shape.softcap > 0) throw_config_error("CPU_ATTN has no logit soft-capping (", shape.str(), ")");
  if (shape.layout != KvLayout::kHND) throw_config_error("CPU_ATTN keeps its cache in the HND layout, not ", kv_layout_str(shape.layout));
  return std::make_unique<CpuAttnRunner>(shape, options);
}

}  // namespace pagoda
