// Owning device and pinned host allocations, and the check every CUDA runtime call goes through.
//
//   PAGODA_CUDA_CHECK(cudaMemcpyAsync(...));   // throws pagoda::Error naming file:line and the CUDA error
//   DeviceBuffer buf(n * sizeof(float));       // cudaMalloc'd, cudaFree'd when it goes out of scope
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "pagoda/core/error.h"

namespace pagoda {

// Throws pagoda::Error (runtime kind): "CUDA error cudaErrorX (message) at file:line: expr".
[[noreturn]] void cuda_check_failed(cudaError_t err, const char* expr, const char* file, int line);

}  // namespace pagoda

#define PAGODA_CUDA_CHECK(expr)                                                        \
  do {                                                                                 \
    cudaError_t pagoda_cuda_err_ = (expr);                                             \
    if (pagoda_cuda_err_ != cudaSuccess)                                               \
      ::pagoda::cuda_check_failed(pagoda_cuda_err_, #expr, __FILE__, __LINE__);        \
  } while (0)

// After a kernel launch: reports a bad launch configuration at the launch site.
#define PAGODA_CUDA_CHECK_LAUNCH() PAGODA_CUDA_CHECK(cudaGetLastError())

namespace pagoda {

// Device memory from cudaMalloc (256-byte aligned). Move-only; a zero-byte buffer holds nullptr.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  template <typename T>
  T* as() const { return static_cast<T*>(data_); }

  // Synchronous copies (cudaMemcpy), for setup code and tests; bytes + offset must fit the buffer.
  void upload(const void* src, size_t bytes, size_t offset = 0);
  void download(void* dst, size_t bytes, size_t offset = 0) const;
  // Every byte set to `value` (cudaMemset, synchronous).
  void fill_bytes(int value);
  void reset();

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Page-locked host memory from cudaMallocHost, for asynchronous copies. Move-only.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& o) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  template <typename T>
  T* as() const { return static_cast<T*>(data_); }
  void reset();

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace pagoda
