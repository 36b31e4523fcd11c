// Instantiations of the tensor-core unified attention kernel for __half (one element type per file so the
// variants compile in parallel): KV cache in __half, fp8 e4m3 or fp8 e5m2; head dims 32, 64, 128, 256.
#include "pagoda/attention/triton_attn/unified_attention_kernel.cuh"
#include "pagoda/core/error.h"

namespace pagoda::triton_attn_detail {
namespace {

template <typename Kernel>
void launch_with_smem(Kernel kernel, size_t bytes, bool& configured, const KernelArgs& args, int num_items,
                      cudaStream_t stream) {
  if (!configured) {  // raising the dynamic shared-memory limit once per kernel
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
    PAGODA_CHECK(e == cudaSuccess, "cudaFuncSetAttribute: ", cudaGetErrorString(e));
    configured = true;
  }
  dim3 grid(num_items, args.p.num_kv_heads);
  kernel<<<grid, kThreads, bytes, stream>>>(args);
}

template <typename Kv, int D>
void launch_d(const KernelArgs& args, int num_items, cudaStream_t stream) {
  constexpr int BN = D >= 256 ? 32 : 64;
  if constexpr (Smem<__half, Kv, D, BN>::kCanWarpSplit) {
    if (args.all_decode) {
      static bool configured = false;
      launch_with_smem(decode_attention_kernel<__half, Kv, D, BN>, Smem<__half, Kv, D, BN, true>::kBytes, configured, args,
                       num_items, stream);
      return;
    }
  }
  static bool configured = false;
  launch_with_smem(unified_attention_kernel<__half, Kv, D, BN>, Smem<__half, Kv, D, BN>::kBytes, configured, args, num_items,
                   stream);
}

template <typename Kv>
void launch_kv(const KernelArgs& args, int num_items, cudaStream_t stream) {
  int hs = args.p.head_size;
  if (hs <= 32) launch_d<Kv, 32>(args, num_items, stream);
  else if (hs <= 64) launch_d<Kv, 64>(args, num_items, stream);
  else if (hs <= 128) launch_d<Kv, 128>(args, num_items, stream);
  else launch_d<Kv, 256>(args, num_items, stream);
}

}  // namespace

template <>
void launch_unified<__half>(const KernelArgs& args, int num_items, cudaStream_t stream) {
  if (args.p.kv_dtype == DType::kF8E4M3) launch_kv<KvE4M3>(args, num_items, stream);
  else if (args.p.kv_dtype == DType::kF8E5M2) launch_kv<KvE5M2>(args, num_items, stream);
  else launch_kv<KvSame>(args, num_items, stream);
}

}  // namespace pagoda::triton_attn_detail
