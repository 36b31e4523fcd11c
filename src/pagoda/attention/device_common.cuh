// PRIVATE to attention/: device helpers the paged (paged/) and FLASH_ATTN kernels share (shared-memory
// addresses, 16-byte cp.async, programmatic dependent launch). Element conversions are in
// core/cuda_convert.cuh, shared with ops/.
#pragma once

#include <cstdint>

namespace pagoda::attention_device {

// Shared-memory address of a generic pointer into shared memory (for PTX operands).
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// 16-byte asynchronous copy global -> shared (L2 only).
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(smem)), "l"(gmem));
}
// The same, copying only the first src_bytes (0 or 16) and zero-filling the rest: rows past the end of a
// sequence land as zeros without a branch.
__device__ __forceinline__ void cp_async_16_zfill(uint32_t smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem), "r"(src_bytes) : "memory");
}

// Programmatic dependent launch (SM 9.0; no-ops elsewhere). A kernel calls pdl_launch_dependents() to let
// the next kernel of the stream, when that one is launched with programmatic stream serialization, place
// its CTAs before this grid ends; that kernel calls pdl_wait_for_prior_grid() before reading what this grid
// wrote (it returns once this grid has completed and its memory is visible).
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait_for_prior_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

}  // namespace pagoda::attention_device
