// Test helper: writes GGUF files (versions 2 and 3) with any metadata and raw tensor bytes, and records where
// each field landed so that tests can corrupt one field of a valid image.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace pagoda::test {

// GGUF metadata type ids.
enum : uint32_t {
  kGgufU8 = 0, kGgufI8 = 1, kGgufU16 = 2, kGgufI16 = 3, kGgufU32 = 4, kGgufI32 = 5, kGgufF32 = 6, kGgufBool = 7,
  kGgufString = 8, kGgufArray = 9, kGgufU64 = 10, kGgufI64 = 11, kGgufF64 = 12,
};
// GGML tensor type ids.
enum : uint32_t { kGgmlF32 = 0, kGgmlF16 = 1, kGgmlQ4_0 = 2, kGgmlQ4_1 = 3, kGgmlQ8_0 = 8, kGgmlQ4_K = 12, kGgmlBF16 = 30 };

inline void put_bytes(std::vector<uint8_t>& out, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  out.insert(out.end(), b, b + n);
}
template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  put_bytes(out, &v, sizeof(T));
}
inline void put_string(std::vector<uint8_t>& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  put_bytes(out, s.data(), s.size());
}

// An encoded metadata value: its type id and the bytes that follow the type in the file.
struct GgufVal {
  uint32_t type = kGgufU8;
  std::vector<uint8_t> bytes;
};

namespace gv {
template <typename T>
GgufVal scalar(uint32_t type, T v) {
  GgufVal r{type, {}};
  put(r.bytes, v);
  return r;
}
inline GgufVal u8(uint8_t v) { return scalar(kGgufU8, v); }
inline GgufVal i8(int8_t v) { return scalar(kGgufI8, v); }
inline GgufVal u16(uint16_t v) { return scalar(kGgufU16, v); }
inline GgufVal i16(int16_t v) { return scalar(kGgufI16, v); }
inline GgufVal u32(uint32_t v) { return scalar(kGgufU32, v); }
inline GgufVal i32(int32_t v) { return scalar(kGgufI32, v); }
inline GgufVal u64(uint64_t v) { return scalar(kGgufU64, v); }
inline GgufVal i64(int64_t v) { return scalar(kGgufI64, v); }
inline GgufVal f32(float v) { return scalar(kGgufF32, v); }
inline GgufVal f64(double v) { return scalar(kGgufF64, v); }
inline GgufVal boolean(bool v) { return scalar(kGgufBool, uint8_t(v)); }
inline GgufVal str(const std::string& s) {
  GgufVal r{kGgufString, {}};
  put_string(r.bytes, s);
  return r;
}
// An array of elements of one type (each element's bytes as encoded by the functions above).
inline GgufVal array(uint32_t elem_type, const std::vector<GgufVal>& elems) {
  GgufVal r{kGgufArray, {}};
  put(r.bytes, elem_type);
  put<uint64_t>(r.bytes, elems.size());
  // An element is its bytes without its type id (a nested array's bytes are its element type, count, elements).
  for (const auto& e : elems) r.bytes.insert(r.bytes.end(), e.bytes.begin(), e.bytes.end());
  return r;
}
inline GgufVal strings(const std::vector<std::string>& v) {
  std::vector<GgufVal> e;
  for (const auto& s : v) e.push_back(str(s));
  return array(kGgufString, e);
}
inline GgufVal f32s(const std::vector<float>& v) {
  std::vector<GgufVal> e;
  for (float x : v) e.push_back(f32(x));
  return array(kGgufF32, e);
}
inline GgufVal i32s(const std::vector<int32_t>& v) {
  std::vector<GgufVal> e;
  for (int32_t x : v) e.push_back(i32(x));
  return array(kGgufI32, e);
}
}  // namespace gv

struct GgufTensorSpec {
  std::string name;
  std::vector<uint64_t> dims;  // ne[0] first
  uint32_t type = kGgmlF32;
  std::vector<uint8_t> bytes;
};

// Where the fields of a written image are (byte offsets into it).
struct GgufLayout {
  size_t version = 4, tensor_count = 8, kv_count = 16;
  std::vector<size_t> kv_key, kv_type;  // each metadata entry's key length and type id
  std::vector<size_t> t_name, t_ndims, t_dims, t_type, t_offset;  // each tensor info's fields
  size_t data = 0;                      // the data section
  std::vector<size_t> t_data;           // each tensor's bytes
};

class GgufWriter {
 public:
  explicit GgufWriter(uint32_t version = 3) : version_(version) {}

  GgufWriter& kv(const std::string& key, GgufVal v) {
    kvs_.push_back({key, std::move(v)});
    return *this;
  }
  // Tensors are placed in order, each at the next multiple of the alignment (general.alignment when the
  // metadata has it as a u32, else 32).
  GgufWriter& tensor(GgufTensorSpec t) {
    tensors_.push_back(std::move(t));
    return *this;
  }
  GgufWriter& tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type, std::vector<uint8_t> bytes) {
    return tensor(GgufTensorSpec{name, std::move(dims), type, std::move(bytes)});
  }

  std::vector<uint8_t> image(GgufLayout* layout = nullptr) const {
    GgufLayout l;
    uint64_t align = 32;
    for (const auto& [k, v] : kvs_)
      if (k == "general.alignment" && v.type == kGgufU32) {
        uint32_t a;
        std::memcpy(&a, v.bytes.data(), 4);
        if (a) align = a;
      }
    std::vector<uint8_t> out = {'G', 'G', 'U', 'F'};
    put(out, version_);
    put<uint64_t>(out, tensors_.size());
    put<uint64_t>(out, kvs_.size());
    for (const auto& [k, v] : kvs_) {
      l.kv_key.push_back(out.size());
      put_string(out, k);
      l.kv_type.push_back(out.size());
      put(out, v.type);
      out.insert(out.end(), v.bytes.begin(), v.bytes.end());
    }
    uint64_t offset = 0;
    std::vector<uint64_t> offsets;
    for (const auto& t : tensors_) {
      offsets.push_back(offset);
      offset = (offset + t.bytes.size() + align - 1) / align * align;
    }
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const auto& t = tensors_[i];
      l.t_name.push_back(out.size());
      put_string(out, t.name);
      l.t_ndims.push_back(out.size());
      put<uint32_t>(out, uint32_t(t.dims.size()));
      l.t_dims.push_back(out.size());
      for (uint64_t d : t.dims) put(out, d);
      l.t_type.push_back(out.size());
      put(out, t.type);
      l.t_offset.push_back(out.size());
      put(out, offsets[i]);
    }
    if (!tensors_.empty()) out.resize((out.size() + align - 1) / align * align, 0);
    l.data = out.size();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      out.resize(l.data + offsets[i], 0);
      l.t_data.push_back(out.size());
      out.insert(out.end(), tensors_[i].bytes.begin(), tensors_[i].bytes.end());
    }
    if (layout) *layout = l;
    return out;
  }

 private:
  struct Kv {
    std::string key;
    GgufVal value;
  };
  uint32_t version_;
  std::vector<Kv> kvs_;
  std::vector<GgufTensorSpec> tensors_;
};

// Overwrites the bytes of a T at `at`.
template <typename T>
void patch(std::vector<uint8_t>& img, size_t at, T v) {
  std::memcpy(img.data() + at, &v, sizeof(T));
}

inline std::vector<uint8_t> f32_le(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

}  // namespace pagoda::test
