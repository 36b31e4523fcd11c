// FLEX_ATTENTION's CUDA host side (flex_cuda.h): the workspace (reserve, plan and its upload) and the dispatch
// to the tensor-core or CUDA-core kernel.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "pagoda/attention/cuda_ok.h"
#include "pagoda/attention/flex_attention/flex_cuda.h"
#include "pagoda/attention/flex_attention/flex_cuda_kernel.cuh"
#include "pagoda/core/error.h"

namespace pagoda {

using flex_detail::kRows;

namespace {
static_assert(sizeof(FlexPlanTile) == 6 * sizeof(int32_t), "tiles are uploaded as plain int32 words");
static_assert(sizeof(FlexInstr) == 2 * sizeof(int32_t), "instructions are uploaded as plain int32 words");

int ceil_div(int64_t a, int64_t b) { return int((a + b - 1) / b); }
}  // namespace

FlexCudaWorkspace::~FlexCudaWorkspace() {
  if (uploaded_) cudaEventDestroy(uploaded_);
  cudaFree(buf_);
  cudaFreeHost(staging_);
}

void FlexCudaWorkspace::reserve(const FlexCudaLimits& limits) {
  PAGODA_CHECK(limits.block_n == 16 || limits.block_n == 32 || limits.block_n == 64 || limits.block_n == 128,
               "flex_cuda: block_n ", limits.block_n);
  PAGODA_CHECK(limits.num_kv_heads > 0 && limits.num_q_heads % limits.num_kv_heads == 0, "flex_cuda: heads ",
               limits.num_q_heads, "/", limits.num_kv_heads);
  if (upload_pending_) PAGODA_CUDA_OK(cudaEventSynchronize(uploaded_));
  upload_pending_ = false;
  cudaFree(buf_);
  cudaFreeHost(staging_);
  buf_ = staging_ = nullptr;
  limits_ = limits;
  dev_ = {};
  const int G = limits.num_q_heads / limits.num_kv_heads;
  if (limits.graph_batch > 0) {
    items_capacity_ = 0;
    plan_ = FlexBlockPlan();
  } else {
    plan_.reserve(limits.max_tokens, limits.max_seqs, limits.max_model_len, limits.block_m, limits.block_n);
    // A tile of t tokens takes ceil(t G / 64) CTAs: at most one per tile beyond the tokens' share.
    items_capacity_ = plan_.capacity_tiles() + size_t(ceil_div(int64_t(limits.max_tokens) * G, kRows));
  }
  capacity_words_ = 2 * items_capacity_ + 6 * plan_.capacity_tiles() + plan_.capacity_entries() +
                    size_t(std::max(0, limits.max_mask_words));
  PAGODA_CUDA_OK(cudaMalloc(&buf_, capacity_words_ * sizeof(int32_t)));
  PAGODA_CUDA_OK(cudaMallocHost(&staging_, capacity_words_ * sizeof(int32_t)));
  if (!uploaded_) PAGODA_CUDA_OK(cudaEventCreateWithFlags(&uploaded_, cudaEventDisableTiming));
}

void FlexCudaWorkspace::plan(const FlexMask& mask, const FlexScoreMod& mod, const int32_t* query_lens,
                             const int32_t* seq_lens, int num_seqs, cudaStream_t stream) {
  PAGODA_CHECK(buf_, "flex_cuda: plan() before reserve()");
  const int nq = limits_.num_q_heads, G = nq / limits_.num_kv_heads;
  if (!mod.alibi_slopes.empty() && mod.alibi_slopes.size() != size_t(nq))
    throw_config_error("FLEX_ATTENTION: ", mod.alibi_slopes.size(), " ALiBi slopes for ", nq, " heads");
  const size_t rel_words = size_t(nq) * size_t(2 * std::max(0, mod.rel_bias_max) + 1);
  if (!mod.rel_bias.empty() && (mod.rel_bias_max < 0 || mod.rel_bias.size() != rel_words))
    throw_config_error("FLEX_ATTENTION: relative bias table of ", mod.rel_bias.size(), " entries, expected ", rel_words);
  const FlexProgram prog = mask.program();
  const size_t mask_words = prog.words() + mod.alibi_slopes.size() + mod.rel_bias.size();
  if (mask_words > size_t(limits_.max_mask_words))
    throw_runtime_error("FLEX_ATTENTION: mask ", mask.str(), " and score modifiers take ", mask_words,
                        " words, reserved ", limits_.max_mask_words);

  if (limits_.graph_batch == 0) plan_.build(mask, query_lens, seq_lens, num_seqs);
  // The previous plan's copy reads the staging until it completes.
  if (upload_pending_) PAGODA_CUDA_OK(cudaEventSynchronize(uploaded_));

  // Staging: [items (int2)] [tiles] [entries] [code] [span data] [ALiBi slopes] [relative bias].
  size_t w = 0;
  int num_items = 0;
  if (limits_.graph_batch == 0) {
    int2* items = reinterpret_cast<int2*>(staging_);
    for (int t = 0; t < plan_.num_tiles(); ++t) {
      const FlexPlanTile& tile = plan_.tile(t);
      const int rows = (tile.t_end - tile.t_begin) * G;
      for (int r = 0; r < rows; r += kRows) {
        PAGODA_CHECK(size_t(num_items) < items_capacity_, "flex_cuda: more CTAs than reserved");
        items[num_items++] = make_int2(t, r);
      }
    }
  }
  w += 2 * size_t(num_items);
  const size_t tiles_at = w;
  if (plan_.num_tiles() > 0) std::memcpy(staging_ + w, plan_.tiles(), sizeof(FlexPlanTile) * size_t(plan_.num_tiles()));
  w += 6 * size_t(plan_.num_tiles());
  const size_t entries_at = w;
  if (plan_.num_entries() > 0) std::memcpy(staging_ + w, plan_.entries(), sizeof(int32_t) * size_t(plan_.num_entries()));
  w += size_t(plan_.num_entries());
  const size_t code_at = w;
  std::memcpy(staging_ + w, prog.code.data(), sizeof(FlexInstr) * prog.code.size());
  w += 2 * prog.code.size();
  const size_t data_at = w;
  if (!prog.data.empty()) std::memcpy(staging_ + w, prog.data.data(), sizeof(int32_t) * prog.data.size());
  w += prog.data.size();
  const size_t alibi_at = w;
  if (!mod.alibi_slopes.empty()) std::memcpy(staging_ + w, mod.alibi_slopes.data(), sizeof(float) * mod.alibi_slopes.size());
  w += mod.alibi_slopes.size();
  const size_t rel_at = w;
  if (!mod.rel_bias.empty()) std::memcpy(staging_ + w, mod.rel_bias.data(), sizeof(float) * mod.rel_bias.size());
  w += mod.rel_bias.size();
  PAGODA_CHECK(w <= capacity_words_, "flex_cuda: staging overflow");
  PAGODA_CUDA_OK(cudaMemcpyAsync(buf_, staging_, w * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
  PAGODA_CUDA_OK(cudaEventRecord(uploaded_, stream));
  upload_pending_ = true;

  dev_.items = reinterpret_cast<const int2*>(buf_);
  dev_.tiles = reinterpret_cast<const FlexPlanTile*>(buf_ + tiles_at);
  dev_.entries = buf_ + entries_at;
  dev_.mask = {reinterpret_cast<const FlexInstr*>(buf_ + code_at), int32_t(prog.code.size()), buf_ + data_at};
  dev_.mod.softcap = mod.softcap;
  dev_.mod.alibi = mod.alibi_slopes.empty() ? nullptr : reinterpret_cast<const float*>(buf_ + alibi_at);
  dev_.mod.rel_bias = mod.rel_bias.empty() ? nullptr : reinterpret_cast<const float*>(buf_ + rel_at);
  dev_.mod.rel_bias_max = mod.rel_bias_max;
  dev_.num_items = num_items;
  dev_.graph_ctas_per_seq = limits_.graph_batch > 0 ? ceil_div(G, kRows) : 0;
}

bool flex_cuda_uses_tensor_cores(DType dtype, DType kv_dtype, int head_size) {
  return (dtype == DType::kF16 || dtype == DType::kBF16) && kv_dtype == dtype &&
         (head_size == 64 || head_size == 128 || head_size == 256);
}

void flex_cuda_forward(const FlexCudaParams& p, const FlexCudaWorkspace& ws, cudaStream_t stream) {
  const FlexCudaWorkspace::Device& d = ws.device();
  PAGODA_CHECK(d.mask.code, "flex_cuda_forward before plan()");
  PAGODA_CHECK(p.num_q_heads == ws.limits().num_q_heads && p.num_kv_heads == ws.limits().num_kv_heads,
               "flex_cuda_forward: heads differ from the workspace's");
  PAGODA_CHECK(p.head_size > 0, "flex_cuda: head size ", p.head_size);
  flex_detail::KernelArgs a;
  a.p = p;
  a.d = d;
  a.block_n = ws.limits().block_n;
  a.scale = p.scale != 0.0f ? p.scale : 1.0f / std::sqrt(float(p.head_size));
  const int ctas = d.graph_ctas_per_seq > 0 ? ws.limits().graph_batch * d.graph_ctas_per_seq : d.num_items;
  if (ctas == 0 || p.num_seqs == 0) return;
  const dim3 grid(unsigned(ctas), unsigned(p.num_kv_heads));
  if (flex_cuda_uses_tensor_cores(p.dtype, p.kv_dtype, p.head_size)) {
    PAGODA_CHECK(p.q_stride % 8 == 0, "flex_cuda: the tensor-core kernel loads 16-byte query chunks; stride ", p.q_stride);
    if (p.dtype == DType::kF16) flex_detail::launch_mma<__half>(a, grid, stream);
    else flex_detail::launch_mma<__nv_bfloat16>(a, grid, stream);
  } else {
    flex_detail::launch_simt(a, grid, stream);
  }
}

}  // namespace pagoda
