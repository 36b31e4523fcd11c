// The GPU forward pass shared by every architecture, the same function as CpuModelRunner: embedding ->
// layers (fused residual-add RMSNorm, one fused QKV GEMM (+bias), Qwen3 q/k norm, RoPE fused with the paged
// KV-cache write, the layer group's attention runner over the cache, o projection, fused gate_up GEMM,
// SiLU-and-mul, down projection) -> final norm -> logits of the requested rows. Compute dtype bf16/fp16 (fp32
// accumulate in every GEMM and reduction) or fp32. Weights are uploaded once into one device allocation;
// block-quantized ones (GGUF) stay quantized there (cuda_linear.h: quantized GEMV for decode, dequantize +
// GEMM for prefill).
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <memory>
#include <optional>
#include <vector>

#include "pagoda/core/dtype.h"
#include "pagoda/core/kv_layout.h"
#include "pagoda/model/load_model.h"
#include "pagoda/model/model_runner.h"

namespace pagoda {

struct CudaRunnerOptions {
  DType dtype = DType::kBF16;          // compute dtype: kBF16, kF16 or kF32
  DType kv_dtype = DType::kBF16;       // == dtype, or kF8E4M3 / kF8E5M2 (TurboQuant groups: their own slots)
  std::vector<KvScales> layer_kv_scales;  // fp8 caches: [num_layers] from the checkpoint, or empty (1.0)
  int block_size = 16;
  KvLayout layout = KvLayout::kNHD;
  // The attention of every layer: one group per (backend, shape), each layer in exactly one group, with the
  // dtype, kv_dtype, layout and block size above; a group whose shape has a TurboQuant kv_preset keeps its
  // layers' caches in packed slots (cuda_kv_cache.h).
  std::vector<AttentionGroup> attention;
  bool batch_invariant = false;         // GEMMs: one algorithm per (n, k) whatever the step's row count
  double gpu_memory_utilization = 0.9;  // fraction of the device's memory the process may use in all
  std::optional<int64_t> num_blocks_override;  // this many KV blocks
  int max_num_tokens = 8192;            // activations are sized for this many tokens per step
  int max_num_seqs = 256;
  int max_model_len = 4096;
  bool enforce_eager = false;  // no CUDA graphs for decode steps
};

// The op kinds of a step whose GPU time a profile separates (StepOp order; kStepOpNames names them).
enum class StepOp { kNorm, kQkvGemm, kRopeKv, kAttention, kOGemm, kGateUpGemm, kAct, kDownGemm, kLogits };
inline constexpr int kNumStepOps = 9;
inline constexpr const char* kStepOpNames[kNumStepOps] = {"norms+embed", "qkv gemm", "rope+kv write", "attention",
                                                          "o gemm",      "gate_up gemm", "silu*mul", "down gemm",
                                                          "logits+argmax"};

// Where one step's time went (recorded while profiling is on): host phases on the wall clock, GPU time
// between CUDA events on the runner's stream. Events between the ops of an eager step add a few us of host
// time per op, so a profiled run is a little slower than a plain one.
struct CudaStepProfile {
  int tokens = 0, seqs = 0, rows = 0;
  bool graph = false;    // a captured decode step replayed
  bool capture = false;  // this step captured a new decode graph (eager run + capture + instantiate)
  double prep_s = 0;     // host: positions, slots, block tables into pinned memory, and their upload
  double plan_s = 0;     // host: attention work lists
  double launch_s = 0;   // host: kernel launches (or the graph launch)
  double wait_s = 0;     // host: the result copy and the wait for the GPU at the step's end
  double gpu_s = 0;      // GPU: from the metadata upload to the result copy
  std::array<double, kNumStepOps> op_s{};  // GPU time per StepOp (eager steps only)
};

class CudaModelRunner final : public ModelRunner {
 public:
  CudaModelRunner(const LoadedModel& model, const CudaRunnerOptions& options);
  ~CudaModelRunner() override;

  std::vector<float> forward(const ForwardBatch& batch) override;
  std::optional<std::vector<int32_t>> forward_greedy(const ForwardBatch& batch) override;
  const ModelConfig& config() const override { return config_; }
  const KvCacheOptions& cache_options() const override { return cache_; }
  uint64_t weight_bytes() const;
  uint64_t kv_cache_bytes() const;

  // Captures the CUDA graph of every decode batch size now (at start, as vLLM does) rather than at the first
  // step of each size; no-op with enforce_eager.
  void capture_decode_graphs();

  // Profiling: while on, every step appends a CudaStepProfile (and syncs at its end, also when it samples
  // no row).
  void set_profiling(bool on);
  const std::vector<CudaStepProfile>& step_profiles() const;

 public:
  struct Impl;  // public so the step helpers in the .cc can name it; defined there only

 private:
  ModelConfig config_;
  KvCacheOptions cache_;
  std::unique_ptr<Impl> impl_;
  // Runs the layers and the logits GEMM of the batch's rows into device memory (fp32); returns the rows.
  int run_to_logits(const ForwardBatch& batch);
  void enqueue_step(int tokens, int seqs, int rows, const std::vector<std::unique_ptr<AttentionRunner>>& runners);
  void capture_graph(int padded_batch);
};

}  // namespace pagoda
