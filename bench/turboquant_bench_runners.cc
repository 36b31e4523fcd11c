#include "turboquant_bench_runners.h"

#include <vector>

#include "pagoda/attention/flash_attn/flash_attn_runner.h"
#include "pagoda/attention/runner.h"
#include "pagoda/attention/triton_attn/triton_attn_runner.h"
#include "pagoda/attention/turboquant/turboquant_cuda_runner.h"

namespace pagoda::bench {

struct BenchRunner {
  std::unique_ptr<AttentionRunner> runner;
};

std::shared_ptr<BenchRunner> bench_make_runner(const std::string& backend, const std::string& kv, int num_q_heads,
                                               int num_kv_heads, int head_size, int block, int num_sms, int batch,
                                               int ctx, int split_cap) {
  LayerShape s;
  s.num_q_heads = num_q_heads;
  s.num_kv_heads = num_kv_heads;
  s.head_size = head_size;
  s.dtype = DType::kBF16;
  s.block_size = block;
  s.layout = KvLayout::kNHD;
  s.kv_dtype = kv == "fp8" ? DType::kF8E4M3 : DType::kBF16;
  if (backend == "TURBOQUANT") {
    s.kv_dtype = DType::kU8;
    s.kv_preset = kv;
    s.layout = KvLayout::kHND;
  }
  RunnerOptions o;
  o.num_sms = num_sms;
  if (split_cap > 0) o.tq_split_cap = split_cap;
  auto r = std::make_shared<BenchRunner>();
  if (backend == "TRITON_ATTN") r->runner = make_triton_attn_runner(s, o);
  else if (backend == "FLASH_ATTN") r->runner = make_flash_attn_runner(s, o);
  else r->runner = make_turboquant_cuda_runner(s, o);
  r->runner->reserve({.max_tokens = batch, .max_seqs = batch, .max_model_len = ctx});
  return r;
}

void bench_plan(BenchRunner& r, int batch, int ctx, cudaStream_t stream) {
  r.runner->plan(AttentionBatch{std::vector<int>(size_t(batch), 1), std::vector<int>(size_t(batch), ctx)}, stream);
}

void bench_run(const BenchRunner& r, const BenchCall& c, cudaStream_t stream) {
  AttentionParams a;
  a.layer = c.layer;
  a.q = c.q;
  a.out = c.out;
  a.kv_cache = c.kv_cache;
  a.num_blocks = c.num_blocks;
  a.query_start_loc = c.query_start_loc;
  a.seq_lens = c.seq_lens;
  a.block_tables = c.block_tables;
  a.block_table_stride = c.block_table_stride;
  a.num_tokens = c.batch;
  a.num_seqs = c.batch;
  r.runner->run(a, stream);
}

}  // namespace pagoda::bench
