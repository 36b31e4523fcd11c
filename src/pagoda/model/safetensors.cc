#include "pagoda/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "pagoda/core/error.h"
#include "pagoda/core/json_checks.h"
#include "pagoda/core/json_depth.h"
#include "pagoda/core/read_file.h"
#include "pagoda/core/tensor.h"

namespace pagoda {
namespace {

using nlohmann::json;

struct StDType {
  const char* name;
  size_t size;
  std::optional<DType> dtype;
};

// The safetensors format's dtypes (pagoda computes with F32/BF16/F16; the rest parse and are rejected when used).
constexpr StDType kStDTypes[] = {
    {"BOOL", 1, std::nullopt},  {"U8", 1, DType::kU8},    {"I8", 1, std::nullopt},
    {"F8_E5M2", 1, DType::kF8E5M2}, {"F8_E4M3", 1, DType::kF8E4M3}, {"I16", 2, std::nullopt},
    {"U16", 2, std::nullopt},   {"F16", 2, DType::kF16},  {"BF16", 2, DType::kBF16},
    {"I32", 4, DType::kI32},    {"U32", 4, std::nullopt}, {"F32", 4, DType::kF32},
    {"F64", 8, std::nullopt},   {"I64", 8, DType::kI64},  {"U64", 8, std::nullopt},
};

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "(";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + (s.size() == 1 ? ",)" : ")");
}

[[noreturn]] void bad(const std::string& file, const std::string& what) {
  throw_config_error("invalid safetensors file '", file, "': ", what);
}

[[noreturn]] void bad_tensor(const std::string& file, const std::string& tensor, const std::string& what) {
  throw_config_error("invalid safetensors file '", file, "': tensor '", text_preview(tensor), "': ", what);
}

// data_offsets as written, for messages: the two numbers when they are numbers, else the value's type.
std::string offsets_str(const json& off) {
  if (off.is_array() && off.size() == 2 && off[0].is_number() && off[1].is_number())
    return "[" + off[0].dump() + ", " + off[1].dump() + "]";
  return json_preview(off);
}

// Deepest nesting of [ and { outside strings (so a hostile header cannot exhaust the stack later).
int json_depth(const char* s, size_t n) {
  int depth = 0, max_depth = 0;
  bool in_string = false, escape = false;
  for (size_t i = 0; i < n; ++i) {
    const char c = s[i];
    if (in_string) {
      if (escape) escape = false;
      else if (c == '\\') escape = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      max_depth = std::max(max_depth, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return max_depth;
}

bool get_u64(const json& v, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer()) {
    const int64_t x = v.get<int64_t>();
    if (x < 0) return false;
    *out = uint64_t(x);
    return true;
  }
  return false;
}

SafetensorsTensorInfo parse_entry(const std::string& file, const std::string& name, const json& v,
                                  uint64_t data_size) {
  if (name.empty()) bad(file, "a tensor has an empty name");
  if (!v.is_object()) bad_tensor(file, name, "entry is not a JSON object");
  SafetensorsTensorInfo t;
  t.name = name;
  auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string()) bad_tensor(file, name, "missing string field 'dtype'");
  t.dtype_name = dt->get<std::string>();
  const StDType* known = nullptr;
  for (const auto& d : kStDTypes)
    if (t.dtype_name == d.name) known = &d;
  if (!known) bad_tensor(file, name, "unknown dtype '" + text_preview(t.dtype_name) + "'");
  t.dtype = known->dtype;
  t.element_size = known->size;

  auto sh = v.find("shape");
  if (sh == v.end() || !sh->is_array()) bad_tensor(file, name, "missing array field 'shape'");
  if (sh->size() > size_t(kMaxTensorRank))
    bad_tensor(file, name, "rank " + std::to_string(sh->size()) + " is above the supported " +
                               std::to_string(kMaxTensorRank));
  uint64_t numel = 1;
  bool overflow = false;
  for (const auto& d : *sh) {
    uint64_t x;
    if (!get_u64(d, &x) || x > uint64_t(INT64_MAX))
      bad_tensor(file, name, "shape has " + json_preview(d) + ", not a list of non-negative integers");
    t.shape.push_back(int64_t(x));
    if (__builtin_mul_overflow(numel, x, &numel)) overflow = true;
  }
  auto off = v.find("data_offsets");
  if (off == v.end() || !off->is_array() || off->size() != 2)
    bad_tensor(file, name, "missing field 'data_offsets' of two integers");
  if (!get_u64((*off)[0], &t.begin) || !get_u64((*off)[1], &t.end))
    bad_tensor(file, name, "data_offsets " + offsets_str(*off) + " are not non-negative integers");
  if (t.begin > t.end) bad_tensor(file, name, "data_offsets " + offsets_str(*off) + " end before they begin");
  if (t.end > data_size)
    bad_tensor(file, name, "data_offsets " + offsets_str(*off) + " reach past the end of the data section (" +
                               std::to_string(data_size) + " bytes); the file may be truncated");
  uint64_t nbytes = 0;
  if (overflow || __builtin_mul_overflow(numel, uint64_t(t.element_size), &nbytes) || nbytes != t.end - t.begin)
    bad_tensor(file, name, "data_offsets " + offsets_str(*off) + " hold " + std::to_string(t.end - t.begin) +
                               " bytes but shape " + shape_str(t.shape) + " of " + t.dtype_name + " needs " +
                               (overflow ? std::string("more than 2^64") : std::to_string(nbytes)));
  return t;
}

}  // namespace

SafetensorsHeader parse_safetensors_header(const uint8_t* data, size_t size, const std::string& file) {
  if (size < 8)
    bad(file, "file is truncated: " + std::to_string(size) + " bytes, less than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];
  if (n > kSafetensorsMaxHeaderBytes)
    bad(file, "header length " + std::to_string(n) + " is above the " + std::to_string(kSafetensorsMaxHeaderBytes) +
                  "-byte limit (not a safetensors file?)");
  if (n > size - 8)
    bad(file, "file is truncated: the header claims " + std::to_string(n) + " bytes but only " +
                  std::to_string(size - 8) + " follow");
  const char* text = reinterpret_cast<const char*>(data + 8);
  size_t first = 0;
  while (first < n && (text[first] == ' ' || text[first] == '\n' || text[first] == '\t' || text[first] == '\r')) ++first;
  if (first == n || text[first] != '{') bad(file, "header is not a JSON object");
  if (json_depth(text, size_t(n)) > kSafetensorsMaxJsonDepth)
    bad(file, "header nests deeper than " + std::to_string(kSafetensorsMaxJsonDepth) + " levels");
  json j = json::parse(text, text + n, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) bad(file, "header is not valid JSON");

  SafetensorsHeader h;
  h.data_offset = 8 + n;
  const uint64_t data_size = uint64_t(size) - h.data_offset;
  try {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.key() == "__metadata__") {
        if (!it->is_object()) bad(file, "__metadata__ is not an object");
        for (auto m = it->begin(); m != it->end(); ++m) {
          if (!m->is_string()) bad(file, "__metadata__ value of '" + text_preview(m.key()) + "' is not a string");
          h.metadata[m.key()] = m->get<std::string>();
        }
        continue;
      }
      h.tensors.push_back(parse_entry(file, it.key(), *it, data_size));
    }
  } catch (const json::exception& e) {  // a type this parser did not anticipate: still a clear error
    bad(file, "malformed header: " + text_preview(e.what(), 200));
  }
  // Overlaps: sort by begin; each non-empty tensor must start at or after the previous one's end.
  std::vector<const SafetensorsTensorInfo*> by_offset;
  for (const auto& t : h.tensors)
    if (t.end > t.begin) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i]->begin < by_offset[i - 1]->end)
      bad(file, "tensors '" + text_preview(by_offset[i - 1]->name) + "' and '" + text_preview(by_offset[i]->name) + "' overlap (bytes " +
                    std::to_string(by_offset[i]->begin) + " < " + std::to_string(by_offset[i - 1]->end) + ")");
  std::sort(h.tensors.begin(), h.tensors.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return h;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_runtime_error("cannot open safetensors file '", path, "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw_runtime_error("cannot read safetensors file '", path, "': not a regular file");
  }
  size_ = size_t(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw_runtime_error("cannot map safetensors file '", path, "': ", std::strerror(err));
    }
    base_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  static const uint8_t kEmpty[1] = {0};
  try {
    header_ = parse_safetensors_header(base_ ? base_ : kEmpty, size_, path);
  } catch (...) {
    if (base_) ::munmap(const_cast<uint8_t*>(base_), size_);
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (base_) ::munmap(const_cast<uint8_t*>(base_), size_);
}

const SafetensorsTensorInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = std::lower_bound(header_.tensors.begin(), header_.tensors.end(), name,
                             [](const SafetensorsTensorInfo& t, const std::string& n) { return t.name < n; });
  return it != header_.tensors.end() && it->name == name ? &*it : nullptr;
}

std::shared_ptr<SafetensorsCheckpoint> SafetensorsCheckpoint::open(const std::string& path) {
  namespace fs = std::filesystem;
  auto ck = std::shared_ptr<SafetensorsCheckpoint>(new SafetensorsCheckpoint());
  ck->source_ = path;
  std::error_code ec;
  auto add_file = [&](const std::string& file) -> SafetensorsFile* {
    ck->files_.push_back(std::make_unique<SafetensorsFile>(file));
    return ck->files_.back().get();
  };
  if (fs::is_regular_file(path, ec)) {
    SafetensorsFile* f = add_file(path);
    for (const auto& t : f->header().tensors) ck->tensors_[t.name] = {f, &t};
    return ck;
  }
  if (!fs::is_directory(path, ec)) throw_runtime_error("model path '", path, "' does not exist");
  const fs::path dir(path);
  if (fs::is_regular_file(dir / "model.safetensors", ec)) {
    SafetensorsFile* f = add_file((dir / "model.safetensors").string());
    for (const auto& t : f->header().tensors) ck->tensors_[t.name] = {f, &t};
    return ck;
  }
  const fs::path index_path = dir / "model.safetensors.index.json";
  if (!fs::is_regular_file(index_path, ec))
    throw_runtime_error("no weights in '", path, "': expected model.safetensors or model.safetensors.index.json");
  const std::string index = index_path.string();
  const std::string text = read_user_file(index, kMaxConfigFileBytes);
  check_json_depth(text, "invalid index '" + index + "'", kSafetensorsMaxJsonDepth);
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw_config_error("invalid index '", index, "': not a JSON object");
  auto wm = j.find("weight_map");
  if (wm == j.end() || !wm->is_object() || wm->empty())
    throw_config_error("invalid index '", index, "': missing or empty object 'weight_map'");
  std::map<std::string, SafetensorsFile*> shards;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it->is_string())
      throw_config_error("invalid index '", index, "': weight_map entry '", text_preview(it.key()), "' is ", json_preview(*it),
                         ", not a file name");
    const std::string shard = it->get<std::string>();
    if (shard.empty() || shard.find('/') != std::string::npos || shard.find('\\') != std::string::npos || shard == "." || shard == "..")
      throw_config_error("invalid index '", index, "': shard name '", text_preview(shard), "' of tensor '", text_preview(it.key()),
                         "' is not a plain file name");
    auto [sit, inserted] = shards.emplace(shard, nullptr);
    if (inserted) {
      const fs::path shard_path = dir / shard;
      if (!fs::is_regular_file(shard_path, ec))
        throw_runtime_error("shard '", text_preview(shard), "' listed in '", index, "' (tensor '", text_preview(it.key()), "') does not exist");
      sit->second = add_file(shard_path.string());
    }
    const SafetensorsTensorInfo* t = sit->second->find(it.key());
    if (!t)
      throw_config_error("invalid index '", index, "': tensor '", text_preview(it.key()), "' is listed in shard '", text_preview(shard),
                         "' but that file does not contain it");
    ck->tensors_[it.key()] = {sit->second, t};
  }
  return ck;
}

std::optional<SafetensorsTensorRef> SafetensorsCheckpoint::find(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> SafetensorsCheckpoint::tensor_names() const {
  std::vector<std::string> out;
  for (const auto& [n, r] : tensors_) out.push_back(n);
  return out;
}

}  // namespace pagoda
