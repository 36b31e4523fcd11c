// FLEX_ATTENTION's CUDA kernels beside the paged FA2-class kernels (TRITON_ATTN's) on the same shapes in the same
// run: decode (paged bf16 KV, batch x context) in TB/s against the device-to-device copy bandwidth measured here,
// prefill in TFLOP/s (causal: half the QK^T and PV products counted) beside the paged kernel's, and masks the
// paged kernels cannot run (documents of a packed sequence, chunked-local) where the block plan skips blocks.
// 32 query / 8 KV heads, head size 128 (80: the CUDA-core kernel), blocks of 16 tokens.
//
//   flex_attention_bench [--repeat N]
//
// Output: one line per (kernel, shape): `flex|paged decode B C: ms TB/s (fraction of copy)` or
// `flex|paged prefill LEN MASK: ms TFLOP/s`. Each time is the median of N (default 20) event-timed calls after
// a warm-up call.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_cuda.cuh"
#include "pagoda/attention/flex_attention/flex_cuda.h"
#include "pagoda/attention/paged/paged_attention.h"

using namespace pagoda;
using namespace pagoda::bench;

namespace {

constexpr int kHq = 32, kHk = 8, kBs = 16;

// Random bf16 values in [-1, 1) (never zeros: an all-zero input can run faster than real data).
__global__ void fill_random(__nv_bfloat16* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t x = uint32_t(i) * 2654435761u ^ seed;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    p[i] = __float2bfloat16((float(x & 0xffff) / 65536.f - 0.5f) * 2.f + 1e-3f);
  }
}

template <typename F>
double median_ms(int repeat, F&& f) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  f();  // warm-up: module load, attributes
  CK(cudaDeviceSynchronize());
  std::vector<float> ms;
  for (int i = 0; i < repeat; ++i) {
    CK(cudaEventRecord(a));
    f();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float t = 0;
    CK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// One step's device data: query_lens[s] new tokens of seq_lens[s]; blocks laid out contiguously per sequence.
struct Step {
  std::vector<int> q_lens, ctx;
  int T = 0, S = 0, max_blocks = 0, head = 128;
  __nv_bfloat16 *q = nullptr, *out = nullptr, *cache = nullptr;
  int *qsl = nullptr, *sl = nullptr, *bt = nullptr;
  size_t kv_bytes_read = 0;  // every key and value of every context once
  Step(std::vector<int> ql, std::vector<int> c, int hd) : q_lens(std::move(ql)), ctx(std::move(c)), head(hd) {
    S = int(ctx.size());
    std::vector<int> h_qsl{0}, h_bt;
    int blocks = 0;
    for (int s = 0; s < S; ++s) {
      h_qsl.push_back(h_qsl.back() + q_lens[size_t(s)]);
      max_blocks = std::max(max_blocks, (ctx[size_t(s)] + kBs - 1) / kBs);
    }
    for (int s = 0; s < S; ++s)
      for (int b = 0; b < max_blocks; ++b) h_bt.push_back(b < (ctx[size_t(s)] + kBs - 1) / kBs ? blocks++ : 0);
    T = h_qsl.back();
    const size_t cache_elems = size_t(blocks) * kBs * kHk * 2 * head;
    for (int c2 : ctx) kv_bytes_read += size_t(c2) * kHk * 2 * head * 2;
    CK(cudaMalloc(&q, size_t(T) * kHq * head * 2));
    CK(cudaMalloc(&out, size_t(T) * kHq * head * 2));
    CK(cudaMalloc(&cache, cache_elems * 2));
    CK(cudaMalloc(&qsl, h_qsl.size() * 4));
    CK(cudaMalloc(&sl, ctx.size() * 4));
    CK(cudaMalloc(&bt, h_bt.size() * 4));
    fill_random<<<1024, 256>>>(q, size_t(T) * kHq * head, 1);
    fill_random<<<1024, 256>>>(cache, cache_elems, 2);
    CK(cudaGetLastError());
    CK(cudaMemcpy(qsl, h_qsl.data(), h_qsl.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(sl, ctx.data(), ctx.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(bt, h_bt.data(), h_bt.size() * 4, cudaMemcpyHostToDevice));
  }
  ~Step() {
    cudaFree(q), cudaFree(out), cudaFree(cache), cudaFree(qsl), cudaFree(sl), cudaFree(bt);
  }
};

double flex_ms(const Step& st, const FlexMask& mask, int repeat) {
  FlexCudaWorkspace ws;
  FlexCudaLimits l;
  l.max_tokens = st.T;
  l.max_seqs = st.S;
  l.max_model_len = *std::max_element(st.ctx.begin(), st.ctx.end());
  l.num_q_heads = kHq;
  l.num_kv_heads = kHk;
  ws.reserve(l);
  ws.plan(mask, {}, st.q_lens.data(), st.ctx.data(), st.S, nullptr);
  FlexCudaParams p;
  p.q = st.q;
  p.out = st.out;
  p.kv_cache = st.cache;
  p.dtype = p.kv_dtype = DType::kBF16;
  p.num_q_heads = kHq;
  p.num_kv_heads = kHk;
  p.head_size = st.head;
  p.block_size = kBs;
  p.max_blocks_per_seq = st.max_blocks;
  p.num_seqs = st.S;
  p.query_start_loc = st.qsl;
  p.seq_lens = st.sl;
  p.block_tables = st.bt;
  return median_ms(repeat, [&] { flex_cuda_forward(p, ws, nullptr); });
}

double paged_ms(const Step& st, int repeat) {
  PagedAttentionWorkspace ws;
  ws.reserve(st.T, st.S, kHq, st.head, 64);
  PagedAttentionOptions o;
  int dev = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&o.num_sms, cudaDevAttrMultiProcessorCount, dev));
  plan_paged_attention({st.q_lens, st.ctx}, kHq, kHk, st.head, DType::kBF16, o, ws, nullptr);
  PagedAttentionParams p;
  p.q = st.q;
  p.out = st.out;
  p.kv_cache = st.cache;
  p.num_tokens = st.T;
  p.num_seqs = st.S;
  p.num_q_heads = kHq;
  p.num_kv_heads = kHk;
  p.head_size = st.head;
  p.block_size = kBs;
  p.max_blocks_per_seq = st.max_blocks;
  p.query_start_loc = st.qsl;
  p.seq_lens = st.sl;
  p.block_tables = st.bt;
  p.scale = 1.0f / std::sqrt(float(st.head));
  return median_ms(repeat, [&] { run_paged_attention(p, ws, nullptr); });
}

}  // namespace

int main(int argc, char** argv) {
  int repeat = 20;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = std::max(1, std::atoi(argv[++i]));
    else {
      std::printf("usage: flex_attention_bench [--repeat N]\n");
      return std::strcmp(argv[i], "--help") ? 2 : 0;
    }
  }
  int status = 0;
  try {
    const double copy = measure_copy_tbs(size_t(1) << 30);
    std::printf("device-to-device copy: %.2f TB/s (the decode ceiling)\n", copy);
    for (int batch : {1, 16, 64})
      for (int c : {1024, 8192}) {
        const Step st(std::vector<int>(size_t(batch), 1), std::vector<int>(size_t(batch), c), 128);
        const double f = flex_ms(st, FlexMask::causal(), repeat), g = paged_ms(st, repeat);
        const double fb = st.kv_bytes_read / (f * 1e-3) / 1e12, gb = st.kv_bytes_read / (g * 1e-3) / 1e12;
        std::printf("flex  decode %3d x %5d: %8.3f ms %6.2f TB/s (%.0f%% of copy)\n", batch, c, f, fb, 100 * fb / copy);
        std::printf("paged decode %3d x %5d: %8.3f ms %6.2f TB/s (%.0f%% of copy)\n", batch, c, g, gb, 100 * gb / copy);
      }
    for (int len : {1024, 4096}) {
      const Step st({len}, {len}, 128);
      const double flops = 4.0 * kHq * 128 * double(len) * len / 2;  // causal: half of QK^T and PV
      const double f = flex_ms(st, FlexMask::causal(), repeat), g = paged_ms(st, repeat);
      std::printf("flex  prefill %5d causal: %8.3f ms %6.1f TFLOP/s\n", len, f, flops / (f * 1e-3) / 1e12);
      std::printf("paged prefill %5d causal: %8.3f ms %6.1f TFLOP/s\n", len, g, flops / (g * 1e-3) / 1e12);
      // Eight packed documents: an eighth of the causal work; chunked-local 512: the same structure.
      std::vector<int32_t> starts;
      for (int d = 1; d < 8; ++d) starts.push_back(d * len / 8);
      const double fd = flex_ms(st, FlexMask::causal() & FlexMask::documents({starts}), repeat);
      const double fc = flex_ms(st, FlexMask::causal() & FlexMask::chunked_local(512), repeat);
      std::printf("flex  prefill %5d causal&documents(8): %8.3f ms (%.1fx the causal time)\n", len, fd, f / fd);
      std::printf("flex  prefill %5d causal&chunk(512):   %8.3f ms (%.1fx the causal time)\n", len, fc, f / fc);
      const Step st80({len}, {len}, 80);
      const double f80 = flex_ms(st80, FlexMask::causal(), repeat);
      std::printf("flex  prefill %5d causal head 80 (CUDA cores): %8.3f ms %6.1f TFLOP/s\n", len, f80,
                  4.0 * kHq * 80 * double(len) * len / 2 / (f80 * 1e-3) / 1e12);
    }
  } catch (const std::exception& e) {
    std::printf("FAILED: %s\n", e.what());
    status = 1;
  }
  return status;
}
