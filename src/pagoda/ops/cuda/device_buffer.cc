#include "pagoda/ops/cuda/device_buffer.h"

#include <cstring>
#include <utility>

#include "pagoda/core/logging.h"

namespace pagoda {

void cuda_check_failed(cudaError_t err, const char* expr, const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  base = base ? base + 1 : file;
  throw Error(ErrorKind::kRuntime, str_cat("CUDA error ", cudaGetErrorName(err), " (", cudaGetErrorString(err),
                                           ") at ", base, ":", line, ": ", expr));
}

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0) PAGODA_CUDA_CHECK(cudaMalloc(&data_, bytes));
}

DeviceBuffer::~DeviceBuffer() { reset(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::reset() {
  if (data_) {
    // A destructor cannot throw: a failing cudaFree (a sticky error from an earlier fault) is logged.
    cudaError_t err = cudaFree(data_);
    if (err != cudaSuccess) PAGODA_LOG_ERROR("cudaFree failed: ", cudaGetErrorString(err));
  }
  data_ = nullptr;
  bytes_ = 0;
}

void DeviceBuffer::upload(const void* src, size_t bytes, size_t offset) {
  PAGODA_CHECK(offset + bytes <= bytes_, "upload of ", bytes, " bytes at offset ", offset, " into a buffer of ", bytes_);
  if (bytes > 0) PAGODA_CUDA_CHECK(cudaMemcpy(static_cast<char*>(data_) + offset, src, bytes, cudaMemcpyHostToDevice));
}

void DeviceBuffer::download(void* dst, size_t bytes, size_t offset) const {
  PAGODA_CHECK(offset + bytes <= bytes_, "download of ", bytes, " bytes at offset ", offset, " from a buffer of ", bytes_);
  if (bytes > 0)
    PAGODA_CUDA_CHECK(cudaMemcpy(dst, static_cast<const char*>(data_) + offset, bytes, cudaMemcpyDeviceToHost));
}

void DeviceBuffer::fill_bytes(int value) {
  if (bytes_ > 0) PAGODA_CUDA_CHECK(cudaMemset(data_, value, bytes_));
}

PinnedBuffer::PinnedBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0) PAGODA_CUDA_CHECK(cudaMallocHost(&data_, bytes));
}

PinnedBuffer::~PinnedBuffer() { reset(); }

PinnedBuffer::PinnedBuffer(PinnedBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void PinnedBuffer::reset() {
  if (data_) {
    cudaError_t err = cudaFreeHost(data_);
    if (err != cudaSuccess) PAGODA_LOG_ERROR("cudaFreeHost failed: ", cudaGetErrorString(err));
  }
  data_ = nullptr;
  bytes_ = 0;
}

}  // namespace pagoda
