// PRIVATE to flex_attention/: what FLEX_ATTENTION's CUDA kernels share: their arguments, the decoding of a
// CTA's work (a tile of the plan, or in a graph workspace a sequence read from the device), the walk over the
// tile's key blocks in chunks, and the cache's addressing.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "pagoda/attention/flex_attention/flex_cuda.h"
#include "pagoda/attention/flex_attention/flex_program.h"

namespace pagoda::flex_detail {

constexpr int kRows = 64;      // rows (query token x GQA head) per CTA
constexpr int kThreads = 128;  // 4 warps

struct KernelArgs {
  FlexCudaParams p;
  FlexCudaWorkspace::Device d;
  int block_n = 64;
  float scale = 0.0f;  // resolved
};

// The CTA's rows and key list: tile `tile` of the plan (or sequence `seq` in a graph workspace), rows
// [row_start, row_start + rows) of its ntok * G, the tile's first token (global) and position, its entries.
struct Cta {
  int seq = 0, tok0 = 0, ntok = 0, pos0 = 0, first = 0, count = 0, ctx = 0, row_start = 0, rows = 0;
  bool dense = false;  // every key block of the context, each partial (graph workspace)
};

// False when the CTA has nothing to do (a graph workspace's sequence past the step, or without a token).
__device__ __forceinline__ bool flex_cta(const KernelArgs& a, Cta& c) {
  const int G = a.p.num_q_heads / a.p.num_kv_heads;
  if (a.d.graph_ctas_per_seq > 0) {
    c.seq = int(blockIdx.x) / a.d.graph_ctas_per_seq;
    c.row_start = (int(blockIdx.x) % a.d.graph_ctas_per_seq) * kRows;
    if (c.seq >= a.p.num_seqs) return false;
    const int q0 = a.p.query_start_loc[c.seq], q_len = a.p.query_start_loc[c.seq + 1] - q0;
    c.ctx = a.p.seq_lens[c.seq];
    c.tok0 = q0;
    c.ntok = min(q_len, 1);
    c.pos0 = c.ctx - q_len;
    c.first = 0;
    c.count = (c.ctx + a.block_n - 1) / a.block_n;
    c.dense = true;
  } else {
    const int2 it = a.d.items[blockIdx.x];
    const FlexPlanTile t = a.d.tiles[it.x];
    c.seq = t.seq;
    c.row_start = it.y;
    c.tok0 = t.t_begin;
    c.ntok = t.t_end - t.t_begin;
    c.pos0 = t.pos_begin;
    c.first = t.first;
    c.count = t.count;
    c.ctx = a.p.seq_lens[c.seq];
  }
  c.rows = min(kRows, c.ntok * G - c.row_start);
  return c.rows > 0;
}

// Chunk ci of the CTA's key list, chunks of at most KC keys inside one key block: keys [k0, k1) (empty when
// k1 <= k0: the tail of the context's last block), partial or not. Chunks per block: ceil(block_n / KC).
struct Chunk {
  int k0, k1;
  bool partial;
};
template <int KC>
__device__ __forceinline__ int chunks_per_block(int block_n) { return (block_n + KC - 1) / KC; }
template <int KC>
__device__ __forceinline__ Chunk flex_chunk(const KernelArgs& a, const Cta& c, int ci) {
  const int cpb = chunks_per_block<KC>(a.block_n);
  const int i = ci / cpb, sub = ci % cpb;
  int blk = i;
  bool partial = true;
  if (!c.dense) {
    const int32_t e = a.d.entries[c.first + i];
    blk = e >> 1;
    partial = e & 1;
  }
  const int b0 = blk * a.block_n;
  const int k0 = b0 + sub * KC;
  const int k1 = min(min(k0 + KC, b0 + a.block_n), c.ctx);
  return {k0, k1, partial};
}

// Element offset of key position `key`'s K row for KV head kvh (NHD; V follows at + head_size).
__device__ __forceinline__ size_t kv_slot(const FlexCudaParams& p, const int32_t* btab, int key, int kvh) {
  const int blk = btab[key / p.block_size], off = key % p.block_size;
  return ((size_t(blk) * p.block_size + off) * p.num_kv_heads + kvh) * size_t(2 * p.head_size);
}

// The mask program with its code copied to shared memory `code` (read by every thread of the CTA).
// PRECOND: blockDim.x >= kFlexMaxProgram; followed by a __syncthreads() before the first evaluation.
__device__ __forceinline__ FlexProgramView stage_mask(const KernelArgs& a, FlexInstr* code) {
  if (int(threadIdx.x) < a.d.mask.len) code[threadIdx.x] = a.d.mask.code[threadIdx.x];
  return {code, a.d.mask.len, a.d.mask.data};
}

// Launchers: the CUDA-core kernel (flex_cuda_simt.cu) and the tensor-core kernel per element type
// (flex_cuda_mma_{f16,bf16}.cu). grid = (d.num_items or graph_batch x graph_ctas_per_seq, num_kv_heads).
void launch_simt(const KernelArgs& a, dim3 grid, cudaStream_t stream);
template <typename T>
void launch_mma(const KernelArgs& a, dim3 grid, cudaStream_t stream);

}  // namespace pagoda::flex_detail
