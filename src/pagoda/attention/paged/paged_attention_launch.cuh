// PRIVATE to paged/: the host launch code of the general and decode-only kernels for one element type
// T, included by paged_attention_{bf16,f16}.cu (one element type per translation unit, so the variants
// compile in parallel). Head dims 32, 64, 128, 256 (others padded up); KV in T, fp8 e4m3 or fp8 e5m2.
#pragma once

#include <algorithm>

#include "pagoda/attention/cuda_ok.h"
#include "pagoda/attention/device_caps.h"
#include "pagoda/attention/paged/paged_attention_kernel.cuh"
#include "pagoda/core/error.h"

namespace pagoda::paged_detail {
namespace {

using attention_host::programmatic_serialization;

// How a decode-only kernel of `ctas_per_sm` CTAs per SM is launched (SM 9.0): programmatically behind the
// stream's previous kernel -- its CTAs are placed and read the step's metadata while that kernel finishes
// (within a captured decode step, the previous call's merge or decode kernel), then wait for it in
// attention_tile -- where early placement cannot crowd SMs. A grid of one CTA per SM or less then asks for
// all of a block's shared memory so that each CTA still gets an SM of its own (placed early, the CTAs would
// take whichever slots are free, two to some SMs, and the step would run as slow as those SMs). A grid
// between one CTA per SM and `ctas_per_sm` waves is launched without the attribute: there early placement
// would crowd SMs.
struct DecodeLaunch {
  bool programmatic = false;
  bool sm_each = false;  // all of a block's shared memory: one CTA per SM
};
inline DecodeLaunch decode_launch(long ctas, int ctas_per_sm) {
  const attention_host::ComputeCapability& cc = attention_host::device_compute_capability();
  DecodeLaunch d;
  if (!attention_host::pdl_supported() || cc.sm_count <= 0) return d;
  d.sm_each = ctas <= cc.sm_count;
  d.programmatic = d.sm_each || ctas > long(ctas_per_sm) * cc.sm_count;
  return d;
}

template <typename Kernel>
void launch_with_smem(Kernel kernel, size_t bytes, bool& configured, const KernelArgs& args, int num_items,
                      cudaStream_t stream, DecodeLaunch how = {}) {
  const int optin = attention_host::device_compute_capability().smem_block_optin;
  if (!configured) {  // raising the dynamic shared-memory limit once per kernel (to all of it: sm_each)
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         int(std::max(bytes, size_t(optin))));
    PAGODA_CHECK(e == cudaSuccess, "cudaFuncSetAttribute: ", cudaGetErrorString(e));
    configured = true;
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(num_items, args.p.num_kv_heads);
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = how.sm_each ? std::max(bytes, size_t(optin)) : bytes;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1] = {programmatic_serialization()};
  cfg.attrs = attr;
  cfg.numAttrs = how.programmatic ? 1 : 0;
  PAGODA_CUDA_OK(cudaLaunchKernelEx(&cfg, kernel, args));
}

// The device of the calling thread has thread-block clusters (SM 9.0; the sm_90a build).
inline bool clusters_supported() { return attention_host::device_compute_capability().major == 9; }

// What launch_clustered learns about one kernel, kept by its caller per kernel.
struct ClusterLaunchState {
  size_t launch_bytes = 0;                     // dynamic shared memory per CTA; 0: the kernel is not configured yet
  int max_active[kMaxClusterSplits + 1] = {};  // clusters resident at once, per size; 0: not asked yet
};

// Launches `kernel` in clusters of `cluster` CTAs along x (a row group's KV splits) when every cluster of the
// grid fits on the GPU at once; false, launching nothing, when they do not. Each CTA asks for all the shared
// memory a block may have, so that a cluster spreads over as many SMs as it has CTAs: the split planner
// gives 16-bit KV one CTA per SM, and clusters packed two to an SM (the decode kernel's occupancy) would
// leave half the SMs idle.
template <typename Kernel>
bool launch_clustered(Kernel kernel, size_t bytes, ClusterLaunchState& state, const KernelArgs& args, int num_items,
                      int cluster, cudaStream_t stream) {
  if (cluster < 2 || cluster > kMaxClusterSplits || num_items % cluster != 0) return false;
  if (state.launch_bytes == 0) {
    const int optin = attention_host::device_compute_capability().smem_block_optin;
    const size_t launch_bytes = std::max(bytes, size_t(optin));
    PAGODA_CUDA_OK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(launch_bytes)));
    PAGODA_CUDA_OK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    state.launch_bytes = launch_bytes;
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(num_items, args.p.num_kv_heads);
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = state.launch_bytes;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = unsigned(cluster);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  int& max_active = state.max_active[cluster];
  if (max_active == 0) {
    int clusters = 0;
    const cudaError_t e = cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg);
    if (e != cudaSuccess) (void)cudaGetLastError();  // an unsupported size is an answer, not an error
    max_active = e == cudaSuccess && clusters > 0 ? clusters : -1;
  }
  if (long(num_items / cluster) * args.p.num_kv_heads > max_active) return false;
  // Programmatic (decode_launch): one CTA per SM, and clusters are placed whole.
  attr[1] = programmatic_serialization();
  cfg.numAttrs = attention_host::pdl_supported() ? 2 : 1;
  PAGODA_CUDA_OK(cudaLaunchKernelEx(&cfg, kernel, args));
  return true;
}

template <typename T, typename Kv, int D>
bool launch_d(const KernelArgs& args, int num_items, int num_splits, cudaStream_t stream) {
  constexpr int BN = D >= 256 ? 32 : 64;
  if constexpr (Smem<T, Kv, D, BN>::kCanWarpSplit) {
    if (args.all_decode) {
      constexpr size_t kBytes = Smem<T, Kv, D, BN, true>::kBytes;
      if (args.merge_in_kernel || args.merge_in_cluster) {
        // SM 9.0: the splits merge in clusters; when the GPU cannot hold the clusters, the merge kernel runs.
        if (clusters_supported()) {
          static ClusterLaunchState state;
          if (launch_clustered(decode_attention_kernel<T, Kv, D, BN, true>, kBytes, state, args, num_items, num_splits,
                               stream))
            return true;
        } else if (args.merge_in_kernel) {
          static bool configured = false;
          launch_with_smem(decode_attention_kernel<T, Kv, D, BN, true>, kBytes, configured, args, num_items, stream);
          return true;
        }
      }
      static bool configured = false;
      launch_with_smem(decode_attention_kernel<T, Kv, D, BN, false>, kBytes, configured, args, num_items, stream,
                       decode_launch(long(num_items) * args.p.num_kv_heads, Smem<T, Kv, D, BN, true>::kDecodeCtasPerSm));
      return false;
    }
  }
  static bool configured = false;
  launch_with_smem(paged_attention_kernel<T, Kv, D, BN>, Smem<T, Kv, D, BN>::kBytes, configured, args, num_items,
                   stream);
  return false;
}

template <typename T, typename Kv>
bool launch_kv(const KernelArgs& args, int num_items, int num_splits, cudaStream_t stream) {
  int hs = args.p.head_size;
  if (hs <= 32) return launch_d<T, Kv, 32>(args, num_items, num_splits, stream);
  if (hs <= 64) return launch_d<T, Kv, 64>(args, num_items, num_splits, stream);
  if (hs <= 128) return launch_d<T, Kv, 128>(args, num_items, num_splits, stream);
  return launch_d<T, Kv, 256>(args, num_items, num_splits, stream);
}

template <typename T>
bool launch_paged_impl(const KernelArgs& args, int num_items, int num_splits, cudaStream_t stream) {
  if (args.p.kv_dtype == DType::kF8E4M3) return launch_kv<T, KvE4M3>(args, num_items, num_splits, stream);
  if (args.p.kv_dtype == DType::kF8E5M2) return launch_kv<T, KvE5M2>(args, num_items, num_splits, stream);
  return launch_kv<T, KvSame>(args, num_items, num_splits, stream);
}

}  // namespace
}  // namespace pagoda::paged_detail
