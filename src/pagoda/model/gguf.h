// GGUF reading (llama.cpp's model file format, versions 2 and 3): a strict parser of the header, the
// metadata and the tensor table, typed metadata accessors, and memory-mapped files.
//
// Layout (all little-endian): "GGUF", u32 version, u64 tensor count, u64 metadata count; the metadata as
// (string key, u32 type, value); the tensor infos as (string name, u32 n_dims, u64 dims[n_dims], u32 ggml
// type, u64 offset); padding to general.alignment (default 32); the data section, which the offsets index.
// A string is a u64 length and that many bytes; an array is a u32 element type, a u64 count and the elements.
//
// Every malformed input gives a pagoda::Error (config kind, exit status 2) whose message names the file and
// the field. Every count and length is checked against the bytes left before anything is allocated for it,
// so nothing in a file can make the reader crash, read out of bounds or allocate more than about ten times
// the file's size (the worst case: an array of empty arrays, 12 bytes each in the file).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pagoda/core/dtype.h"
#include "pagoda/core/quant_type.h"

namespace pagoda {

// Metadata value types, with their ids in the file.
enum class GgufType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};
std::string_view gguf_type_name(GgufType t);  // "uint32", "string", "array", ...

inline constexpr uint32_t kGgufDefaultAlignment = 32;
inline constexpr int kGgufMaxDims = 4;              // GGML_MAX_DIMS
inline constexpr size_t kGgufMaxTensorName = 64;    // bytes, as the format specifies
inline constexpr size_t kGgufMaxKeyLength = 65535;  // bytes, as the format specifies

// One metadata value. Strings and arrays are views into the file image, which must outlive the value.
struct GgufValue {
  GgufType type = GgufType::kU8;
  // Scalars: signed integers in `i`, unsigned integers and bool in `u`, floats in `f`, strings in `str`.
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0.0;
  std::string_view str;
  // Arrays: the element type and count; numeric and bool elements stay raw (little-endian, unaligned) in
  // `raw`; string elements are in `strings`; array elements (one level of nesting at most) in `items`.
  GgufType elem_type = GgufType::kU8;
  uint64_t count = 0;
  const uint8_t* raw = nullptr;
  std::vector<std::string_view> strings;
  std::vector<GgufValue> items;

  bool is_integer() const;  // a scalar of one of the eight integer types
  bool is_number() const;   // an integer or a float scalar
  // Scalar integer as int64 (nullopt for a u64 above INT64_MAX, or a non-integer).
  std::optional<int64_t> as_int() const;
  std::optional<double> as_number() const;
  // Element k of a numeric array. PRECOND: type == kArray, elem_type numeric, k < count.
  std::optional<int64_t> int_at(uint64_t k) const;  // nullopt as as_int
  double number_at(uint64_t k) const;
};

struct GgufKv {
  std::string key;
  GgufValue value;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> dims;    // ne[0] first: the contiguous dimension. A [rows, cols] matrix is {cols, rows}.
  uint32_t ggml_type = 0;       // the file's type id
  std::optional<DType> dtype;   // kF32, kF16 or kBF16 for the plain types
  QuantType quant = QuantType::kNone;  // the block format of the quantized types
  uint64_t offset = 0;          // inside the data section; a multiple of the alignment
  uint64_t nbytes = 0;
  int64_t numel = 0;

  std::string_view type_name() const;  // "F32", "Q4_1", ...
};

// The parsed header of a file image. Metadata values view the image.
struct GgufHeader {
  std::string label;     // the file, for messages
  uint32_t version = 0;  // 2 or 3
  uint64_t alignment = kGgufDefaultAlignment;
  std::vector<GgufKv> metadata;          // in file order
  std::vector<GgufTensorInfo> tensors;   // in file order
  uint64_t data_offset = 0;  // where the data section starts in the file
  uint64_t data_size = 0;    // bytes from data_offset to the end of the file

  const GgufValue* find(std::string_view key) const;  // null when absent
  const GgufTensorInfo* find_tensor(std::string_view name) const;

  // Typed reads: nullopt when the key is absent; a config error naming the file and the key when it holds
  // another type, or (integers) a value outside [lo, hi]. Integer reads accept every integer type, number
  // reads every integer and float type (and refuse NaN and infinities).
  std::optional<int64_t> get_int(std::string_view key, int64_t lo = INT64_MIN, int64_t hi = INT64_MAX) const;
  std::optional<double> get_number(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string> get_string(std::string_view key) const;
  std::optional<std::vector<std::string>> get_string_array(std::string_view key) const;
  std::optional<std::vector<float>> get_float_array(std::string_view key) const;  // number elements
  std::optional<std::vector<int64_t>> get_int_array(std::string_view key, int64_t lo = INT64_MIN,
                                                    int64_t hi = INT64_MAX) const;  // integer elements
  std::optional<uint64_t> get_array_length(std::string_view key) const;           // any element type

  // Lookup tables filled by the parser: key -> index into metadata, name -> index into tensors.
  std::map<std::string, size_t, std::less<>> key_index, tensor_index;
};

// True when the first four bytes are the GGUF magic.
bool has_gguf_magic(const uint8_t* data, size_t size);

// Parses and validates the header of a whole file image `data[0, size)`. Checks: the magic; version 2 or 3
// (v1 and big-endian files are refused by name); every count and length fits in the bytes left; metadata
// types are known and arrays nest at most one level; bools are 0 or 1; keys are unique and non-empty;
// general.alignment is a uint32 power of two; tensor names are unique, non-empty and at most 64 bytes;
// 1 to 4 dims whose product fits in int64; a type pagoda reads (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0, Q4_K, Q5_K, Q6_K; others are named); rows a whole number of blocks; the byte size computed without
// overflow; the data aligned, inside the file and not overlapping another tensor.
GgufHeader parse_gguf_header(const uint8_t* data, size_t size, const std::string& file_label);

// A GGUF file image: memory-mapped from a path, or a view of caller-owned memory.
class GgufFile {
 public:
  // Throws a runtime error when the file cannot be opened, a config error when it is malformed.
  static std::shared_ptr<const GgufFile> open(const std::string& path);
  // `data` must outlive the returned file (tests and fuzzing).
  static std::shared_ptr<const GgufFile> view(const uint8_t* data, size_t size, const std::string& label);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return header_.label; }
  const GgufHeader& header() const { return header_; }
  const GgufTensorInfo* find(std::string_view name) const { return header_.find_tensor(name); }
  // Aligned to min(alignment, page size) for a mapped file; a view keeps the caller's alignment.
  const uint8_t* tensor_data(const GgufTensorInfo& t) const { return base_ + header_.data_offset + t.offset; }

 private:
  GgufFile() = default;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
  GgufHeader header_;
};

}  // namespace pagoda
