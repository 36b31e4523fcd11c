// TRITON_ATTN benchmark: decode (paged KV, batch x context) in TB/s and causal prefill in TFLOP/s, with
// the device-to-device copy bandwidth measured in the same run as the ceiling. Peers (PyTorch SDPA
// flash/cuDNN, FlexAttention) are measured by bench/peers/attention_peers.py in the same device call.
//
// Output: one line per shape, `kind shape ... ms TB/s` or `TFLOP/s`, and a CSV under $OUT if set.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "pagoda/attention/triton_attn/triton_attn.h"

#define CK(x)                                                                                   \
  do {                                                                                          \
    cudaError_t e = (x);                                                                        \
    if (e != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e));    \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

using namespace pagoda;

__global__ void fill_random(uint16_t* p, size_t n, uint32_t seed, bool fp8) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t x = uint32_t(i) * 2654435761u ^ seed;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    float f = (float(x & 0xffff) / 65536.f - 0.5f) * 2.f;
    if (fp8) {
      reinterpret_cast<uint8_t*>(p)[i] = uint8_t((x >> 16) & 0x77);  // finite e4m3 codes, |v| < 2
    } else {
      __nv_bfloat16 b = __float2bfloat16(f);
      p[i] = *reinterpret_cast<uint16_t*>(&b);
    }
  }
}

template <typename F>
float time_ms(F&& f, int iters) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) f();
  CK(cudaDeviceSynchronize());
  std::vector<float> t;
  for (int i = 0; i < iters; ++i) {
    CK(cudaEventRecord(a));
    f();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];  // median
}

struct Setup {
  int batch, ctx, q_len;
  int hq = 32, hk = 8, d = 128, bs = 16;
  DType kv = DType::kBF16;
};

float run_shape(const Setup& s, double* bytes_out, double* flops_out, int num_sms) {
  int T = s.batch * s.q_len;
  int blocks_per_seq = (s.ctx + s.bs - 1) / s.bs;
  size_t num_blocks = size_t(s.batch) * blocks_per_seq;
  size_t kvsz = s.kv == DType::kBF16 ? 2 : 1;
  size_t cache_elems = num_blocks * s.bs * s.hk * 2 * s.d;
  void *q, *out, *cache;
  int *qsl, *sl, *bt;
  CK(cudaMalloc(&q, size_t(T) * s.hq * s.d * 2));
  CK(cudaMalloc(&out, size_t(T) * s.hq * s.d * 2));
  CK(cudaMalloc(&cache, cache_elems * kvsz));
  fill_random<<<1024, 256>>>((uint16_t*)q, size_t(T) * s.hq * s.d, 1, false);
  fill_random<<<4096, 256>>>((uint16_t*)cache, cache_elems, 2, s.kv != DType::kBF16);
  std::vector<int> h_qsl(s.batch + 1), h_sl(s.batch, s.ctx), h_bt(num_blocks);
  for (int i = 0; i <= s.batch; ++i) h_qsl[i] = i * s.q_len;
  // Scatter blocks: sequence i uses blocks i, batch + i, 2*batch + i, ... (not contiguous).
  for (int i = 0; i < s.batch; ++i)
    for (int b = 0; b < blocks_per_seq; ++b) h_bt[size_t(i) * blocks_per_seq + b] = b * s.batch + i;
  CK(cudaMalloc(&qsl, sizeof(int) * h_qsl.size()));
  CK(cudaMalloc(&sl, sizeof(int) * h_sl.size()));
  CK(cudaMalloc(&bt, sizeof(int) * h_bt.size()));
  CK(cudaMemcpy(qsl, h_qsl.data(), sizeof(int) * h_qsl.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(sl, h_sl.data(), sizeof(int) * h_sl.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(bt, h_bt.data(), sizeof(int) * h_bt.size(), cudaMemcpyHostToDevice));
  PagedAttentionParams p;
  p.q = q;
  p.out = out;
  p.kv_cache = cache;
  p.dtype = DType::kBF16;
  p.kv_dtype = s.kv;
  p.num_tokens = T;
  p.num_seqs = s.batch;
  p.num_q_heads = s.hq;
  p.num_kv_heads = s.hk;
  p.head_size = s.d;
  p.block_size = s.bs;
  p.max_blocks_per_seq = blocks_per_seq;
  p.query_start_loc = qsl;
  p.seq_lens = sl;
  p.block_tables = bt;
  p.scale = 0.0883883f;
  PagedAttentionWorkspace ws;
  PagedAttentionOptions opt;
  opt.num_sms = num_sms;
  ws.reserve(T, s.batch, s.hq, s.d, opt.max_splits);
  AttentionBatchInfo info{std::vector<int>(s.batch, s.q_len), h_sl};
  plan_paged_attention(info, s.hq, s.hk, s.d, DType::kBF16, opt, ws, nullptr);
  CK(cudaDeviceSynchronize());
  float ms = time_ms([&] { run_paged_attention(p, ws, nullptr); }, s.q_len > 1 ? 10 : 50);
  CK(cudaGetLastError());
  *bytes_out = double(s.batch) * s.ctx * s.hk * 2 * s.d * kvsz + 2.0 * T * s.hq * s.d * 2;
  // Causal: each query attends its prefix: sum over positions of (pos+1) keys, 4*D FLOPs per (q, key).
  double pairs = 0;
  for (int t = 0; t < s.q_len; ++t) pairs += s.ctx - s.q_len + t + 1;
  *flops_out = 4.0 * s.d * s.hq * s.batch * pairs;
  for (void* x : {q, out, cache, (void*)qsl, (void*)sl, (void*)bt}) cudaFree(x);
  return ms;
}

int main(int argc, char** argv) {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  if (argc == 4 && std::string(argv[1]) == "--decode") {  // one shape, for profilers
    Setup s{std::atoi(argv[2]), std::atoi(argv[3]), 1};
    double bytes, flops;
    float ms = run_shape(s, &bytes, &flops, prop.multiProcessorCount);
    std::printf("decode batch=%s ctx=%s %.3f ms %.2f TB/s\n", argv[2], argv[3], ms, bytes / (ms * 1e-3) / 1e12);
    return 0;
  }
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  // Ceiling: device-to-device copy of 4 GiB (bytes read + written).
  size_t n = size_t(4) << 30;
  void *a, *b;
  CK(cudaMalloc(&a, n));
  CK(cudaMalloc(&b, n));
  CK(cudaMemset(a, 1, n));
  float copy_ms = time_ms([&] { CK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice)); }, 10);
  double copy_tbs = 2.0 * n / (copy_ms * 1e-3) / 1e12;
  std::printf("ceiling: device copy %.2f TB/s\n", copy_tbs);
  CK(cudaFree(a));
  CK(cudaFree(b));

  const char* out_dir = std::getenv("OUT");
  FILE* csv = out_dir ? std::fopen((std::string(out_dir) + "/attention_bench.csv").c_str(), "w") : nullptr;
  if (csv) std::fprintf(csv, "kind,kv,batch,ctx,q_len,ms,tbs,tflops,copy_tbs\n");
  std::vector<std::pair<int, int>> decode = {{1, 1024}, {1, 8192}, {1, 32768}, {16, 4096}, {64, 2048},
                                             {128, 4096}, {256, 1024}, {32, 8192}};
  for (DType kv : {DType::kBF16, DType::kF8E4M3}) {
    for (auto [bsz, ctx] : decode) {
      Setup s{bsz, ctx, 1};
      s.kv = kv;
      double bytes, flops;
      float ms = run_shape(s, &bytes, &flops, prop.multiProcessorCount);
      double tbs = bytes / (ms * 1e-3) / 1e12;
      std::printf("decode  kv=%-6s batch=%4d ctx=%6d  %8.3f ms  %6.2f TB/s (%.0f%% of copy)\n",
                  kv == DType::kBF16 ? "bf16" : "fp8", bsz, ctx, ms, tbs, 100 * tbs / copy_tbs);
      if (csv) std::fprintf(csv, "decode,%s,%d,%d,1,%.4f,%.3f,,%.3f\n", kv == DType::kBF16 ? "bf16" : "fp8", bsz, ctx, ms, tbs, copy_tbs);
    }
  }
  for (auto [bsz, len] : std::vector<std::pair<int, int>>{{4, 8192}, {1, 4096}}) {
    Setup s{bsz, len, len};
    double bytes, flops;
    float ms = run_shape(s, &bytes, &flops, prop.multiProcessorCount);
    double tf = flops / (ms * 1e-3) / 1e12;
    std::printf("prefill causal batch=%d len=%d  %8.3f ms  %6.1f TFLOP/s\n", bsz, len, ms, tf);
    if (csv) std::fprintf(csv, "prefill,bf16,%d,%d,%d,%.4f,,%.2f,%.3f\n", bsz, len, len, ms, tf, copy_tbs);
  }
  if (csv) std::fclose(csv);
  return 0;
}
