// The runners turboquant_bench.cu drives (TRITON_ATTN, FLASH_ATTN, TURBOQUANT), behind an interface free of
// attention/runner.h, which is C++20 while CUDA translation units are C++17.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

namespace pagoda::bench {

struct BenchRunner;  // a runner and its layer shape

// One decode call of `batch` sequences: device pointers as AttentionParams takes them.
struct BenchCall {
  int layer = 0;
  const void* q = nullptr;
  void* out = nullptr;
  void* kv_cache = nullptr;
  int64_t num_blocks = 0;
  const int* query_start_loc = nullptr;
  const int* seq_lens = nullptr;
  const int* block_tables = nullptr;
  int block_table_stride = 0;
  int batch = 0;
};

// backend: "TRITON_ATTN", "FLASH_ATTN" or "TURBOQUANT"; kv: "bf16", "fp8" or a turboquant_* preset. bf16 q and
// out, block size `block`, reserved for one decode step of `batch` sequences up to `ctx` tokens. split_cap > 0:
// TURBOQUANT's RunnerOptions::tq_split_cap.
std::shared_ptr<BenchRunner> bench_make_runner(const std::string& backend, const std::string& kv, int num_q_heads,
                                               int num_kv_heads, int head_size, int block, int num_sms, int batch,
                                               int ctx, int split_cap = 0);
// Plans a decode step of `batch` sequences of context `ctx` (uploads on `stream`).
void bench_plan(BenchRunner& r, int batch, int ctx, cudaStream_t stream);
void bench_run(const BenchRunner& r, const BenchCall& call, cudaStream_t stream);

}  // namespace pagoda::bench
