#include "pagoda/attention/flex_attention/flex_attention_cuda_runner.h"

#include <cuda_runtime_api.h>

#include "pagoda/attention/flex_attention/flex_cuda.h"
#include "pagoda/attention/flex_attention/flex_layer.h"
#include "pagoda/core/error.h"

namespace pagoda {
namespace {

class FlexAttentionCudaRunner final : public AttentionRunner {
 public:
  FlexAttentionCudaRunner(const LayerShape& shape, const RunnerOptions& options)
      : shape_(shape), mask_(flex_layer_mask(shape)), tiles_(flex_layer_tiles(options)) {
    mod_.softcap = shape.softcap;
  }

  void reserve(const RunnerLimits& limits) override {
    FlexCudaLimits l;
    l.max_tokens = limits.max_tokens;
    l.max_seqs = limits.max_seqs;
    l.max_model_len = limits.max_model_len;
    l.block_m = tiles_.block_m;
    l.block_n = tiles_.block_n;
    l.num_q_heads = shape_.num_q_heads;
    l.num_kv_heads = shape_.num_kv_heads;
    l.graph_batch = limits.graph_batch;
    ws_.reserve(l);
  }

  // A graph runner (reserved with graph_batch > 0) plans no blocks: plan({}) uploads the mask alone.
  void plan(const AttentionBatch& batch, void* stream) override {
    PAGODA_CHECK(batch.query_lens.size() == batch.seq_lens.size(), "FLEX_ATTENTION: query and context lengths differ in count");
    static_assert(sizeof(int) == sizeof(int32_t));
    ws_.plan(mask_, mod_, reinterpret_cast<const int32_t*>(batch.query_lens.data()),
             reinterpret_cast<const int32_t*>(batch.seq_lens.data()), int(batch.seq_lens.size()),
             static_cast<cudaStream_t>(stream));
  }

  void run(const AttentionParams& params, void* stream) const override {
    FlexCudaParams p;
    p.q = params.q;
    p.q_stride = params.q_stride;
    p.out = params.out;
    p.kv_cache = params.kv_cache;
    p.dtype = shape_.dtype;
    p.kv_dtype = shape_.kv_dtype;
    p.num_q_heads = shape_.num_q_heads;
    p.num_kv_heads = shape_.num_kv_heads;
    p.head_size = shape_.head_size;
    p.block_size = shape_.block_size;
    p.max_blocks_per_seq = params.block_table_stride;
    p.num_seqs = params.num_seqs;
    p.query_start_loc = params.query_start_loc;
    p.seq_lens = params.seq_lens;
    p.block_tables = params.block_tables;
    p.scale = shape_.scale;
    flex_cuda_forward(p, ws_, static_cast<cudaStream_t>(stream));
  }

  std::string describe() const override {
    const bool tc = flex_cuda_uses_tensor_cores(shape_.dtype, shape_.kv_dtype, shape_.head_size);
    return str_cat("FLEX_ATTENTION (", tc ? "tensor-core" : "CUDA-core", " kernel, ", mask_.str(), ", tiles ",
                   tiles_.block_m, "x", tiles_.block_n, ")");
  }

 private:
  LayerShape shape_;
  FlexMask mask_;
  FlexScoreMod mod_;
  FlexTiles tiles_;
  FlexCudaWorkspace ws_;
};

}  // namespace

std::unique_ptr<AttentionRunner> make_flex_attention_cuda_runner(const LayerShape& shape, const RunnerOptions& options) {
  auto supported = [](DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; };
  if (!supported(shape.dtype))
    throw_config_error("FLEX_ATTENTION: compute dtype ", dtype_name(shape.dtype), " is not supported (float32, float16, bfloat16)");
  if (!shape.kv_preset.empty()) throw_config_error("FLEX_ATTENTION does not support ", shape.kv_preset, " kv-cache.");
  if (!supported(shape.kv_dtype))
    throw_config_error("KV cache dtype ", dtype_name(shape.kv_dtype), " is not supported by FLEX_ATTENTION");
  if (shape.num_kv_heads <= 0 || shape.num_q_heads % shape.num_kv_heads != 0)
    throw_config_error("FLEX_ATTENTION: ", shape.num_q_heads, " query heads are not a multiple of ", shape.num_kv_heads,
                       " KV heads");
  if (shape.head_size <= 0) throw_config_error("FLEX_ATTENTION: head size ", shape.head_size);
  if (shape.block_size <= 0) throw_config_error("FLEX_ATTENTION: block size ", shape.block_size);
  const FlexTiles t = flex_layer_tiles(options);
  if (t.block_n != 16 && t.block_n != 32 && t.block_n != 64 && t.block_n != 128)
    throw_config_error("flex_attn_block_n must be one of 16, 32, 64, 128, got ", t.block_n, ".");
  if (t.block_m <= 0) throw_config_error("flex_attn_block_m must be positive, got ", t.block_m, ".");
  return std::make_unique<FlexAttentionCudaRunner>(shape, options);
}

}  // namespace pagoda
