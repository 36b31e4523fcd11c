#include "pagoda/attention/flash_attn/flash_attn_runner.h"

#include <algorithm>

#include "pagoda/attention/flash_attn/flash_attn.h"
#include "pagoda/attention/paged/paged_runner_common.h"
#include "pagoda/core/error.h"
#include "pagoda/core/logging.h"

namespace pagoda {
namespace {

// FA3 KV staging (flash_attn.h): a step's new tokens plus one full-length cached context, at most this
// many tokens; larger steps gather 16-token pages (fp8 KV: FA2).
constexpr int kMaxStageTokens = 65536;

class FlashAttnRunner final : public AttentionRunner {
 public:
  FlashAttnRunner(const LayerShape& shape, const RunnerOptions& options)
      : shape_(shape), options_(options), num_sms_(runner_num_sms(options)) {}

  void reserve(const RunnerLimits& limits) override {
    graph_batch_ = limits.graph_batch;
    max_splits_ = runner_max_splits(shape_, options_, num_sms_, graph_batch_);
    if (graph_batch_ > 0) {
      ws_.reserve(graph_batch_, graph_batch_, shape_.num_q_heads, shape_.head_size, max_splits_);
      return;
    }
    ws_.reserve(limits.max_tokens, limits.max_seqs, shape_.num_q_heads, shape_.head_size, max_splits_);
    // Without the FA3 kernel (a version-3 runner on another device runs FA2) nothing would read the buffer.
    if (options_.flash_attn_version == 3 && flash_attn_fa3_supported() &&
        flash_attn_fa3_serves(shape_.head_size, shape_.dtype, shape_.kv_dtype, /*alibi=*/false)) {
      const int tokens = int(std::min<int64_t>(int64_t(limits.max_tokens) + limits.max_model_len, kMaxStageTokens));
      ws_.reserve_kv_stage(tokens, limits.max_seqs, shape_.num_kv_heads, shape_.head_size, shape_.dtype);
      const double gib = double(ws_.kv_stage_blocks) * 128 * shape_.num_kv_heads * 2 * shape_.head_size *
                         double(dtype_size(shape_.dtype)) / double(1ull << 30);
      PAGODA_LOG_INFO("FA3 KV staging buffer: ", ws_.kv_stage_blocks * 128, " tokens (", gib,
                      " GiB), reserved before the KV cache");
    }
  }

  void plan(const AttentionBatch& batch, void* stream) override {
    FlashAttnOptions o;
    o.version = options_.flash_attn_version;
    o.num_sms = num_sms_;
    o.max_splits = max_splits_;
    o.batch_invariant = options_.batch_invariant;
    AttentionBatchInfo info{batch.query_lens, batch.seq_lens};
    if (graph_batch_ > 0) {
      o.force_splits = true;
      info = graph_decode_batch(graph_batch_);
    }
    plan_flash_attention(info, shape_.num_q_heads, shape_.num_kv_heads, shape_.head_size, shape_.dtype,
                         shape_.kv_dtype, /*alibi=*/false, o, ws_, static_cast<cudaStream_t>(stream));
  }

  void run(const AttentionParams& params, void* stream) const override {
    ws_.cache_blocks = int(params.num_blocks);  // the FA3 kernel's tensor map bound: the layer's cache
    run_flash_attention(paged_params(shape_, params), ws_, static_cast<cudaStream_t>(stream));
  }

  std::string describe() const override {
    return options_.flash_attn_version == 3 && flash_attn_fa3_supported() ? "FLASH_ATTN (FA3 prefill, FA2 decode)"
                                                                          : "FLASH_ATTN (FA2)";
  }

 private:
  LayerShape shape_;
  RunnerOptions options_;
  int num_sms_;
  int graph_batch_ = 0;
  int max_splits_ = 1;
  mutable FlashAttnWorkspace ws_;  // run() records the cache size it reads (cache_blocks)
};

}  // namespace

std::unique_ptr<AttentionRunner> make_flash_attn_runner(const LayerShape& shape, const RunnerOptions& options) {
  if (shape.num_kv_heads <= 0 || shape.num_q_heads % shape.num_kv_heads != 0)
    throw_config_error("FLASH_ATTN: ", shape.num_q_heads, " query heads are not a multiple of ", shape.num_kv_heads, " KV heads");
  if (shape.head_size % 8 != 0 || shape.head_size > 256)
    throw_config_error("FLASH_ATTN: head size ", shape.head_size, " is not a multiple of 8 up to 256");
  if (shape.dtype != DType::kBF16 && shape.dtype != DType::kF16)
    throw_config_error("FLASH_ATTN computes in bfloat16 or float16, not ", dtype_name(shape.dtype));
  if (shape.kv_dtype != DType::kBF16 && shape.kv_dtype != DType::kF16 && !dtype_is_fp8(shape.kv_dtype))
    throw_config_error("FLASH_ATTN: KV cache dtype ", dtype_name(shape.kv_dtype), " is not supported");
  if (options.flash_attn_version != 2 && options.flash_attn_version != 3)
    throw_config_error("FLASH_ATTN: FlashAttention version ", options.flash_attn_version, " is not built");
  return std::make_unique<FlashAttnRunner>(shape, options);
}

}  // namespace pagoda
