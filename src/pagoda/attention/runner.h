// What runs attention: a backend's runner for one group of layers of the same shape, with FlashInfer's
// plan/run split.
//
//   auto runner = backend.make_runner(shape, options);  // throws when the kernels are not in this binary
//   runner->reserve(limits);                             // once: every allocation the runner will need
//   per step:  runner->plan(batch, stream);              // host metadata of the step, uploaded async
//              per layer of the group: runner->run(params, stream);   // launches only: graph-safe
//
// A runner is built from the same declaration the selector validated (AttentionBackend), so what the
// selector accepts is what runs; the model runners hold runners and never name a backend.
// No CUDA headers here: `stream` is a cudaStream_t on CUDA runners and unused on the CPU.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pagoda/core/dtype.h"
#include "pagoda/core/kv_layout.h"
#include "pagoda/core/strings.h"

namespace pagoda {

// The static shape of the layers a runner serves. Layers that differ in any field get their own runner.
struct LayerShape {
  int num_q_heads = 0;
  int num_kv_heads = 0;  // divides num_q_heads
  int head_size = 0;
  DType dtype = DType::kBF16;     // q and out: the compute dtype
  DType kv_dtype = DType::kBF16;  // cache elements: the compute dtype or an fp8 format; kU8 for kv_preset
  std::string kv_preset;          // "" or a turboquant_* preset: the cache holds packed slots (core/turboquant.h)
  KvLayout layout = KvLayout::kNHD;
  int block_size = 16;     // tokens per cache block
  int sliding_window = 0;  // 0: none; else a query at position p sees keys at positions > p - window
  float softcap = 0.0f;    // 0: none
  float scale = 0.0f;      // softmax scale; 0: 1 / sqrt(head_size)
  bool causal = true;      // false: every query sees every key of its sequence

  bool operator==(const LayerShape&) const = default;
  // For logs and errors: "heads 32/8 x 128, bf16, kv bf16 NHD, block 16, causal".
  std::string str() const {
    std::string s = str_cat("heads ", num_q_heads, "/", num_kv_heads, " x ", head_size, ", ", dtype_name(dtype),
                            ", kv ", kv_preset.empty() ? std::string(dtype_name(kv_dtype)) : kv_preset, " ",
                            kv_layout_str(layout), ", block ", block_size);
    if (sliding_window > 0) s += str_cat(", window ", sliding_window);
    if (softcap > 0) s += str_cat(", softcap ", softcap);
    return s + (causal ? ", causal" : ", non-causal");
  }
};

// Runs body(begin, end) over disjoint chunks of [0, n) of at least `grain` items each, possibly in parallel.
using ParallelFor = std::function<void(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body)>;

// Settings that are not the layer's shape: the device and the resolved attention configuration.
struct RunnerOptions {
  bool cpu = false;                  // the runner serves the CPU model runner (float32 q/k/v, host memory)
  int num_sms = 0;                   // CUDA multiprocessors (0: ask the current device)
  bool batch_invariant = false;      // a sequence's output must not depend on the rest of its batch
  int flash_attn_version = 2;        // FLASH_ATTN: the version the selector resolved
  bool use_prefill_decode_attention = false;  // TRITON_ATTN: separate prefill and decode launches
  int max_graph_splits = 16;         // most KV splits of a captured decode step
  int tq_max_graph_splits = 32;      // TURBOQUANT: the same (attention_config.tq_max_kv_splits_for_cuda_graph)
  // TURBOQUANT: most KV splits of an eager decode step (the fp8 split rule's cap, decode_kv_splits). Not a user
  // setting: turboquant_bench --split-cap measures other values against it.
  int tq_split_cap = 32;
  int flex_block_m = 0, flex_block_n = 0;  // FLEX_ATTENTION: query / KV tile sizes (0: spec §6.5's default)
  bool cascade = false;              // FLASHINFER: attend shared prefixes once per group (use_cascade_attention)
  bool flashinfer_q_quantization = true;  // FLASHINFER: FP8 queries over e4m3 KV on SM 8.9+ (spec §6.5)
  ParallelFor parallel_for;          // CPU runners: the model runner's thread pool (null: serial)
  int num_threads = 1;               // CPU runners: most bodies parallel_for runs at once (per-thread scratch)
};

// The most a runner must serve, for reserve().
struct RunnerLimits {
  int max_tokens = 0;      // new tokens of a step
  int max_seqs = 0;        // sequences of a step
  int max_model_len = 0;   // context of a sequence
  // > 0: the runner serves exactly one captured decode step of this many sequences (a CUDA graph): its
  // plan is fixed at capture and replayed for every step of that batch size.
  int graph_batch = 0;
};

// The host view of one step, for plan(). Sequence s adds query_lens[s] tokens and has seq_lens[s] tokens in
// the cache once they are written (its context).
struct AttentionBatch {
  std::vector<int> query_lens;
  std::vector<int> seq_lens;
  // The step's block tables on the host, [num_seqs, block_table_stride], as run() will see them; null where
  // the caller has none (runners that plan on them, FLASHINFER's cascade grouping, then refuse the step).
  const int32_t* block_tables = nullptr;
  int block_table_stride = 0;
};

// One layer's call. Tokens and sequences as in ForwardBatch: sequence s owns query rows
// [query_start_loc[s], query_start_loc[s+1]); its i-th new token sits at position seq_lens[s] - q_len + i.
struct AttentionParams {
  int layer = 0;             // the model's layer index (TURBOQUANT seeds its key rotation with it)
  const void* q = nullptr;   // [num_tokens, num_q_heads, head_size] of shape.dtype, token stride q_stride
  int64_t q_stride = 0;      // elements; 0 = num_q_heads * head_size
  void* out = nullptr;       // [num_tokens, num_q_heads, head_size] of shape.dtype, contiguous
  void* kv_cache = nullptr;  // this layer's cache, the backend's layout
  int64_t num_blocks = 0;    // blocks in kv_cache
  // The step's new keys and values (token stride kv_stride) and their cache slots, for runners that write
  // the cache themselves (CPU); null where the model already wrote them (CUDA: RoPE and the write are one
  // kernel over the paged layout).
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t kv_stride = 0;
  const int64_t* slot_mapping = nullptr;  // [num_tokens]; a negative slot writes nothing
  const int32_t* query_start_loc = nullptr;  // [num_seqs + 1]
  const int32_t* seq_lens = nullptr;         // [num_seqs]
  const int32_t* block_tables = nullptr;     // [num_seqs, block_table_stride]
  int block_table_stride = 0;
  int num_tokens = 0;
  int num_seqs = 0;
  float k_scale = 1.0f, v_scale = 1.0f;  // fp8 caches: stored value = x / scale (this layer's)
};

class AttentionRunner {
 public:
  virtual ~AttentionRunner() = default;
  // Every allocation the runner needs for steps within `limits`. Called once, before the first plan().
  virtual void reserve(const RunnerLimits& limits) = 0;
  // This step's metadata (work lists, split counts), built on the host and uploaded async on `stream`.
  virtual void plan(const AttentionBatch& batch, void* stream) = 0;
  // One layer of the planned step: launches only (no allocation, no synchronisation).
  virtual void run(const AttentionParams& params, void* stream) const = 0;
  // Whether this step must not replay a captured CUDA graph (its fixed decode plan cannot serve it): FLASHINFER
  // with cascade, for a step whose sequences share prefix blocks. Asked of the eager runners before plan(),
  // on the host, for every step that would replay a graph; cheap, no allocation once warm.
  virtual bool wants_eager(const AttentionBatch&) const { return false; }
  // For the startup log: "TRITON_ATTN (unified)", "FLASH_ATTN (FA3 prefill + FA2)".
  virtual std::string describe() const = 0;
};

}  // namespace pagoda
