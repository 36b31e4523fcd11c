// A non-owning view of a strided, typed array in host or device memory.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "pagoda/core/dtype.h"
#include "pagoda/core/error.h"

namespace pagoda {

enum class MemoryKind : uint8_t { kHost, kDevice };

inline constexpr int kMaxTensorRank = 6;

struct Shape {
  std::array<int64_t, kMaxTensorRank> dims{};
  int rank = 0;

  Shape() = default;
  Shape(std::initializer_list<int64_t> d) {
    PAGODA_CHECK(d.size() <= size_t(kMaxTensorRank), "rank ", d.size(), " > ", kMaxTensorRank);
    for (int64_t x : d) dims[rank++] = x;
  }
  int64_t operator[](int i) const { return dims[i < 0 ? rank + i : i]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= dims[i];
    return n;
  }
  bool operator==(const Shape& o) const {
    if (rank != o.rank) return false;
    for (int i = 0; i < rank; ++i) if (dims[i] != o.dims[i]) return false;
    return true;
  }
  std::string str() const {
    std::string s = "(";
    for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
    return s + (rank == 1 ? ",)" : ")");
  }
};

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  Shape shape;
  std::array<int64_t, kMaxTensorRank> strides{};  // in elements
  MemoryKind memory = MemoryKind::kHost;

  // A contiguous (row-major) view.
  static TensorView contiguous(void* data, DType dtype, Shape shape, MemoryKind memory = MemoryKind::kHost) {
    TensorView t;
    t.data = data;
    t.dtype = dtype;
    t.shape = shape;
    t.memory = memory;
    int64_t s = 1;
    for (int i = shape.rank - 1; i >= 0; --i) {
      t.strides[i] = s;
      s *= shape.dims[i];
    }
    return t;
  }

  int rank() const { return shape.rank; }
  int64_t numel() const { return shape.numel(); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype); }
  bool is_contiguous() const {
    int64_t s = 1;
    for (int i = shape.rank - 1; i >= 0; --i) {
      if (shape.dims[i] != 1 && strides[i] != s) return false;
      s *= shape.dims[i];
    }
    return true;
  }
  template <typename T>
  T* ptr() const { return static_cast<T*>(data); }
  // Element offset of a multi-index.
  int64_t offset(std::initializer_list<int64_t> idx) const {
    PAGODA_CHECK(int(idx.size()) == shape.rank, "index rank ", idx.size(), " != tensor rank ", shape.rank);
    int64_t off = 0;
    int i = 0;
    for (int64_t x : idx) off += x * strides[i++];
    return off;
  }
};

}  // namespace pagoda
