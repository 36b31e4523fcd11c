// Safetensors reading: a strict header parser, memory-mapped files, and checkpoints that are one file or
// shards listed by model.safetensors.index.json.
//
// Every malformed input gives a pagoda::Error (config kind, exit status 2) whose message names the file
// and, where there is one, the tensor; nothing in a file can make the reader crash or read out of bounds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pagoda/core/dtype.h"

namespace pagoda {

struct SafetensorsTensorInfo {
  std::string name;
  std::string dtype_name;       // as written in the header: "BF16", "F32", "I64", ...
  std::optional<DType> dtype;   // pagoda's type when it has one (F32, BF16, F16, F8_*, U8, I32, I64)
  size_t element_size = 0;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range inside the data section
};

struct SafetensorsHeader {
  std::vector<SafetensorsTensorInfo> tensors;  // sorted by name
  std::map<std::string, std::string> metadata;  // "__metadata__"
  uint64_t data_offset = 0;  // 8 + header length: where the data section starts in the file
};

// Limits that keep a hostile header cheap to reject.
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100u << 20;  // as the reference implementation
inline constexpr int kSafetensorsMaxJsonDepth = 16;

// Parses and validates the header of a whole file image `data[0, size)`: 8-byte little-endian header length,
// JSON object header, then the data section. Checks: the length fits in the file and the limit; the JSON is an
// object; each tensor has a known dtype, a shape of non-negative integers (rank <= 6) and two data_offsets
// with begin <= end <= data size; end - begin == numel * element size (no overflow); tensors do not
// overlap. `file_label` names the file in errors.
SafetensorsHeader parse_safetensors_header(const uint8_t* data, size_t size, const std::string& file_label);

// One memory-mapped .safetensors file.
class SafetensorsFile {
 public:
  // Throws a runtime error when the file cannot be opened, a config error when it is malformed.
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  const SafetensorsTensorInfo* find(const std::string& name) const;  // null when absent
  // May be misaligned for the dtype: the format does not pad the header.
  const uint8_t* tensor_data(const SafetensorsTensorInfo& t) const { return base_ + header_.data_offset + t.begin; }

 private:
  std::string path_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  SafetensorsHeader header_;
};

// A tensor found in a checkpoint.
struct SafetensorsTensorRef {
  const SafetensorsFile* file = nullptr;
  const SafetensorsTensorInfo* info = nullptr;
  const void* data() const { return file->tensor_data(*info); }
};

// All tensors of a model folder: model.safetensors, else the shards named by model.safetensors.index.json.
class SafetensorsCheckpoint {
 public:
  // `path` is a model folder or a single .safetensors file. Throws pagoda::Error naming what is wrong.
  static std::shared_ptr<SafetensorsCheckpoint> open(const std::string& path);

  std::optional<SafetensorsTensorRef> find(const std::string& name) const;
  std::vector<std::string> tensor_names() const;
  const std::string& source() const { return source_; }  // the folder or file opened

 private:
  std::string source_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, SafetensorsTensorRef> tensors_;
};

}  // namespace pagoda
