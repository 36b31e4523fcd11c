// PRIVATE to triton_attn/: the host launch code of the unified and decode-only kernels for one element type
// T, included by unified_attention_{bf16,f16}.cu (one element type per translation unit, so the variants
// compile in parallel). Head dims 32, 64, 128, 256 (others padded up); KV in T, fp8 e4m3 or fp8 e5m2.
#pragma once

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

template <typename T, typename Kv, int D>
bool launch_d(const KernelArgs& args, int num_items, cudaStream_t stream) {
  constexpr int BN = D >= 256 ? 32 : 64;
  if constexpr (Smem<T, Kv, D, BN>::kCanWarpSplit) {
    if (args.all_decode) {
      constexpr size_t kBytes = Smem<T, Kv, D, BN, true>::kBytes;
      if (args.merge_in_kernel) {
        static bool configured = false;
        launch_with_smem(decode_attention_kernel<T, Kv, D, BN, true>, kBytes, configured, args, num_items, stream);
        return true;
      }
      static bool configured = false;
      launch_with_smem(decode_attention_kernel<T, Kv, D, BN, false>, kBytes, configured, args, num_items, stream);
      return false;
    }
  }
  static bool configured = false;
  launch_with_smem(unified_attention_kernel<T, Kv, D, BN>, Smem<T, Kv, D, BN>::kBytes, configured, args, num_items,
                   stream);
  return false;
}

template <typename T, typename Kv>
bool launch_kv(const KernelArgs& args, int num_items, cudaStream_t stream) {
  int hs = args.p.head_size;
  if (hs <= 32) return launch_d<T, Kv, 32>(args, num_items, stream);
  if (hs <= 64) return launch_d<T, Kv, 64>(args, num_items, stream);
  if (hs <= 128) return launch_d<T, Kv, 128>(args, num_items, stream);
  return launch_d<T, Kv, 256>(args, num_items, stream);
}

template <typename T>
bool launch_unified_impl(const KernelArgs& args, int num_items, cudaStream_t stream) {
  if (args.p.kv_dtype == DType::kF8E4M3) return launch_kv<T, KvE4M3>(args, num_items, stream);
  if (args.p.kv_dtype == DType::kF8E5M2) return launch_kv<T, KvE5M2>(args, num_items, stream);
  return launch_kv<T, KvSame>(args, num_items, stream);
}

}  // namespace
}  // namespace pagoda::triton_attn_detail
