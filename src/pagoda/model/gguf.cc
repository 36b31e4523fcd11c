#include "pagoda/model/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "pagoda/core/error.h"

namespace pagoda {

static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

namespace {

// GGML tensor-type names by id, for messages about the ones pagoda does not read ("" = removed ids).
constexpr std::string_view kGgmlTypeNames[] = {
    "F32",  "F16",     "Q4_0",   "Q4_1",    "",      "",       "Q5_0",   "Q5_1",  "Q8_0",    "Q8_1",  "Q2_K",
    "Q3_K", "Q4_K",    "Q5_K",   "Q6_K",    "Q8_K",  "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S",
    "IQ2_S", "IQ4_XS", "I8",     "I16",     "I32",   "I64",    "F64",    "IQ1_M", "BF16",    "",      "",
    "",     "TQ1_0",   "TQ2_0",  "",        "",      "",       "MXFP4",  "NVFP4", "Q1_0",    "Q2_0"};

std::string_view ggml_type_name(uint32_t id) {
  return id < std::size(kGgmlTypeNames) ? kGgmlTypeNames[id] : std::string_view();
}

constexpr uint32_t kGgmlF32 = 0, kGgmlF16 = 1, kGgmlBF16 = 30;

[[noreturn]] void bad(const std::string& file, const std::string& what) {
  throw_config_error("invalid GGUF file '", file, "': ", what);
}

// Bytes of one element of a scalar type; 0 for strings and arrays (variable size).
size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::kU8: case GgufType::kI8: case GgufType::kBool: return 1;
    case GgufType::kU16: case GgufType::kI16: return 2;
    case GgufType::kU32: case GgufType::kI32: case GgufType::kF32: return 4;
    case GgufType::kU64: case GgufType::kI64: case GgufType::kF64: return 8;
    case GgufType::kString: case GgufType::kArray: return 0;
  }
  return 0;
}

bool known_type(uint32_t t) { return t <= uint32_t(GgufType::kF64); }

// A read position in the image; every read is bounds-checked and names what it was reading.
struct Cursor {
  const uint8_t* data;
  size_t size;
  size_t pos;
  const std::string& file;

  size_t left() const { return size - pos; }

  [[noreturn]] void truncated(uint64_t need, std::string_view what) const {
    bad(file, str_cat("file is truncated: ", what, " needs ", need, " bytes at offset ", pos, " but only ", left(),
                      " remain"));
  }
  void need(uint64_t n, std::string_view what) const {
    if (n > left()) truncated(n, what);
  }
  template <typename T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  std::string_view read_string(std::string_view what) {
    const uint64_t n = read<uint64_t>(what);
    need(n, what);
    std::string_view s(reinterpret_cast<const char*>(data + pos), size_t(n));
    pos += size_t(n);
    return s;
  }
};

std::string key_ref(std::string_view key) { return str_cat("key '", text_preview(key), "'"); }

GgufValue read_value(Cursor& c, GgufType type, int depth, std::string_view key) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case GgufType::kU8: v.u = c.read<uint8_t>(key); break;
    case GgufType::kI8: v.i = c.read<int8_t>(key); break;
    case GgufType::kU16: v.u = c.read<uint16_t>(key); break;
    case GgufType::kI16: v.i = c.read<int16_t>(key); break;
    case GgufType::kU32: v.u = c.read<uint32_t>(key); break;
    case GgufType::kI32: v.i = c.read<int32_t>(key); break;
    case GgufType::kU64: v.u = c.read<uint64_t>(key); break;
    case GgufType::kI64: v.i = c.read<int64_t>(key); break;
    case GgufType::kF32: v.f = c.read<float>(key); break;
    case GgufType::kF64: v.f = c.read<double>(key); break;
    case GgufType::kBool: {
      const uint8_t b = c.read<uint8_t>(key);
      if (b > 1) bad(c.file, str_cat(key_ref(key), ": bool value ", int(b), " is neither 0 nor 1"));
      v.u = b;
      break;
    }
    case GgufType::kString: v.str = c.read_string(key); break;
    case GgufType::kArray: {
      const uint32_t et = c.read<uint32_t>(key);
      if (!known_type(et)) bad(c.file, str_cat(key_ref(key), ": array element type ", et, " is not a GGUF type"));
      v.elem_type = GgufType(et);
      if (v.elem_type == GgufType::kArray && depth >= 1)
        bad(c.file, str_cat(key_ref(key), ": arrays nest deeper than one level"));
      v.count = c.read<uint64_t>(key);
      // The smallest encoding of one element: its bytes, a string's length, an array's type and count.
      const size_t elem = v.elem_type == GgufType::kString ? 8 : v.elem_type == GgufType::kArray ? 12 : scalar_size(v.elem_type);
      if (v.count > c.left() / elem)
        bad(c.file, str_cat("file is truncated: ", key_ref(key), " is an array of ", v.count, " ", gguf_type_name(v.elem_type),
                            " elements, which need at least ", v.count > UINT64_MAX / elem ? std::string("2^64") : std::to_string(v.count * elem),
                            " bytes, but only ", c.left(), " remain"));
      if (v.elem_type == GgufType::kString) {
        v.strings.reserve(size_t(v.count));
        for (uint64_t k = 0; k < v.count; ++k) v.strings.push_back(c.read_string(key));
      } else if (v.elem_type == GgufType::kArray) {
        v.items.reserve(size_t(v.count));
        for (uint64_t k = 0; k < v.count; ++k) v.items.push_back(read_value(c, GgufType::kArray, depth + 1, key));
      } else {
        v.raw = c.data + c.pos;
        if (v.elem_type == GgufType::kBool)
          for (uint64_t k = 0; k < v.count; ++k)
            if (v.raw[k] > 1) bad(c.file, str_cat(key_ref(key), ": element ", k, " is the bool value ", int(v.raw[k]), ", neither 0 nor 1"));
        c.pos += size_t(v.count * elem);
      }
      break;
    }
  }
  return v;
}

// The tensor type of a file's id, or a message saying why pagoda cannot read it.
void classify_type(GgufTensorInfo& t, const std::string& file) {
  if (t.ggml_type == kGgmlF32) t.dtype = DType::kF32;
  else if (t.ggml_type == kGgmlF16) t.dtype = DType::kF16;
  else if (t.ggml_type == kGgmlBF16) t.dtype = DType::kBF16;
  else if (auto q = quant_type_from_ggml(t.ggml_type)) t.quant = *q;
  else {
    const std::string_view name = ggml_type_name(t.ggml_type);
    bad(file, str_cat("tensor '", text_preview(t.name), "': ",
                      name.empty() ? str_cat("type ", t.ggml_type, " is not a GGML tensor type")
                                   : str_cat(name, " (type ", t.ggml_type, ") is not supported"),
                      " (pagoda reads F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K)"));
  }
}

std::string dims_str(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

GgufTensorInfo read_tensor_info(Cursor& c, uint64_t index) {
  GgufTensorInfo t;
  const std::string which = str_cat("the name of tensor #", index);
  const std::string_view name = c.read_string(which);
  if (name.empty()) bad(c.file, str_cat("tensor #", index, " has an empty name"));
  if (name.size() > kGgufMaxTensorName)
    bad(c.file, str_cat("tensor #", index, " has a name of ", name.size(), " bytes ('", text_preview(name),
                        "'), above the format's limit of ", kGgufMaxTensorName));
  t.name = std::string(name);
  const std::string where = str_cat("tensor '", text_preview(t.name), "'");
  const uint32_t n_dims = c.read<uint32_t>(where);
  if (n_dims < 1 || n_dims > uint32_t(kGgufMaxDims))
    bad(c.file, str_cat(where, ": n_dims is ", n_dims, ", not 1 to ", kGgufMaxDims));
  int64_t numel = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    const uint64_t ne = c.read<uint64_t>(where);
    if (ne > uint64_t(INT64_MAX)) bad(c.file, str_cat(where, ": dimension ", d, " is ", ne, ", above 2^63 - 1"));
    t.dims.push_back(int64_t(ne));
  }
  for (int64_t ne : t.dims)
    if (__builtin_mul_overflow(numel, ne, &numel))
      bad(c.file, str_cat(where, ": dims ", dims_str(t.dims), " hold more than 2^63 elements"));
  t.numel = numel;
  t.ggml_type = c.read<uint32_t>(where);
  t.offset = c.read<uint64_t>(where);
  classify_type(t, c.file);
  if (t.dtype) {
    if (__builtin_mul_overflow(uint64_t(numel), uint64_t(dtype_size(*t.dtype)), &t.nbytes))
      bad(c.file, str_cat(where, ": ", dims_str(t.dims), " of ", t.type_name(), " is more than 2^64 bytes"));
  } else {
    const QuantTraits q = quant_traits(t.quant);
    if (t.dims[0] % q.block_elems != 0)
      bad(c.file, str_cat(where, ": row length (ne[0]) ", t.dims[0], " is not a multiple of the ", q.name, " block size ",
                          q.block_elems));
    if (__builtin_mul_overflow(uint64_t(numel / q.block_elems), uint64_t(q.block_bytes), &t.nbytes))
      bad(c.file, str_cat(where, ": ", dims_str(t.dims), " of ", q.name, " is more than 2^64 bytes"));
  }
  return t;
}

}  // namespace

std::string_view gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::kU8: return "uint8";
    case GgufType::kI8: return "int8";
    case GgufType::kU16: return "uint16";
    case GgufType::kI16: return "int16";
    case GgufType::kU32: return "uint32";
    case GgufType::kI32: return "int32";
    case GgufType::kF32: return "float32";
    case GgufType::kBool: return "bool";
    case GgufType::kString: return "string";
    case GgufType::kArray: return "array";
    case GgufType::kU64: return "uint64";
    case GgufType::kI64: return "int64";
    case GgufType::kF64: return "float64";
  }
  return "?";
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufType::kU8: case GgufType::kI8: case GgufType::kU16: case GgufType::kI16: case GgufType::kU32:
    case GgufType::kI32: case GgufType::kU64: case GgufType::kI64: return true;
    case GgufType::kF32: case GgufType::kF64: case GgufType::kBool: case GgufType::kString: case GgufType::kArray:
      return false;
  }
  return false;
}

bool GgufValue::is_number() const { return is_integer() || type == GgufType::kF32 || type == GgufType::kF64; }

std::optional<int64_t> GgufValue::as_int() const {
  if (!is_integer()) return std::nullopt;
  const bool is_unsigned = type == GgufType::kU8 || type == GgufType::kU16 || type == GgufType::kU32 || type == GgufType::kU64;
  if (!is_unsigned) return i;
  if (u > uint64_t(INT64_MAX)) return std::nullopt;
  return int64_t(u);
}

std::optional<double> GgufValue::as_number() const {
  if (type == GgufType::kF32 || type == GgufType::kF64) return f;
  if (type == GgufType::kU8 || type == GgufType::kU16 || type == GgufType::kU32 || type == GgufType::kU64) return double(u);
  if (is_integer()) return double(i);
  return std::nullopt;
}

std::optional<int64_t> GgufValue::int_at(uint64_t k) const {
  const uint8_t* p = raw + k * scalar_size(elem_type);
  auto ld = [p](auto v) { std::memcpy(&v, p, sizeof(v)); return v; };
  switch (elem_type) {
    case GgufType::kU8: return ld(uint8_t());
    case GgufType::kI8: return ld(int8_t());
    case GgufType::kU16: return ld(uint16_t());
    case GgufType::kI16: return ld(int16_t());
    case GgufType::kU32: return ld(uint32_t());
    case GgufType::kI32: return ld(int32_t());
    case GgufType::kI64: return ld(int64_t());
    case GgufType::kU64: {
      const uint64_t v = ld(uint64_t());
      if (v > uint64_t(INT64_MAX)) return std::nullopt;
      return int64_t(v);
    }
    case GgufType::kF32: case GgufType::kF64: case GgufType::kBool: case GgufType::kString: case GgufType::kArray:
      return std::nullopt;
  }
  return std::nullopt;
}

double GgufValue::number_at(uint64_t k) const {
  const uint8_t* p = raw + k * scalar_size(elem_type);
  auto ld = [p](auto v) { std::memcpy(&v, p, sizeof(v)); return v; };
  switch (elem_type) {
    case GgufType::kF32: return ld(float());
    case GgufType::kF64: return ld(double());
    case GgufType::kU64: return double(ld(uint64_t()));
    case GgufType::kU8: case GgufType::kI8: case GgufType::kU16: case GgufType::kI16: case GgufType::kU32:
    case GgufType::kI32: case GgufType::kI64: return double(*int_at(k));
    case GgufType::kBool: case GgufType::kString: case GgufType::kArray: break;
  }
  PAGODA_CHECK(false, "number_at on an array of ", gguf_type_name(elem_type));
  return 0.0;
}

std::string_view GgufTensorInfo::type_name() const { return ggml_type_name(ggml_type); }

bool has_gguf_magic(const uint8_t* data, size_t size) {
  return size >= 4 && data[0] == 'G' && data[1] == 'G' && data[2] == 'U' && data[3] == 'F';
}

GgufHeader parse_gguf_header(const uint8_t* data, size_t size, const std::string& file) {
  GgufHeader h;
  h.label = file;
  if (!has_gguf_magic(data, size))
    bad(file, size < 4 ? str_cat("file is truncated: ", size, " bytes, less than the 4-byte magic")
                       : std::string("the file does not start with the magic \"GGUF\" (not a GGUF file?)"));
  Cursor c{data, size, 4, file};
  h.version = c.read<uint32_t>("the version");
  if (h.version != 0 && (h.version & 0xFFFF) == 0)
    bad(file, str_cat("the version reads as ", h.version, ": a big-endian file; pagoda reads little-endian GGUF only"));
  if (h.version == 1) bad(file, "GGUF version 1 is not supported (pagoda reads versions 2 and 3); convert the model again");
  if (h.version != 2 && h.version != 3)
    bad(file, str_cat("GGUF version ", h.version, " is not supported (pagoda reads versions 2 and 3)"));
  const uint64_t n_tensors = c.read<uint64_t>("the tensor count");
  const uint64_t n_kv = c.read<uint64_t>("the metadata count");
  // Smallest encodings: a key/value is a key length, a type and one value byte (13); a tensor info is a
  // name length, n_dims, one dim, a type and an offset (32). (Empty names are refused later, by name.)
  if (n_kv > c.left() / 13)
    bad(file, str_cat("file is truncated: the header claims ", n_kv, " metadata entries but only ", c.left(), " bytes follow"));
  if (n_tensors > c.left() / 32)
    bad(file, str_cat("file is truncated: the header claims ", n_tensors, " tensors but only ", c.left(), " bytes follow"));

  h.metadata.reserve(size_t(n_kv));
  for (uint64_t k = 0; k < n_kv; ++k) {
    const std::string_view key = c.read_string(str_cat("the key of metadata entry #", k));
    if (key.empty()) bad(file, str_cat("metadata entry #", k, " has an empty key"));
    if (key.size() > kGgufMaxKeyLength)
      bad(file, str_cat("metadata entry #", k, " has a key of ", key.size(), " bytes, above the format's limit of ", kGgufMaxKeyLength));
    const uint32_t type = c.read<uint32_t>(key);
    if (!known_type(type)) bad(file, str_cat(key_ref(key), ": value type ", type, " is not a GGUF type"));
    GgufValue v = read_value(c, GgufType(type), 0, key);
    if (!h.key_index.emplace(std::string(key), h.metadata.size()).second)
      bad(file, str_cat(key_ref(key), " appears twice"));
    h.metadata.push_back({std::string(key), std::move(v)});
  }

  if (const GgufValue* a = h.find("general.alignment")) {
    if (a->type != GgufType::kU32)
      bad(file, str_cat("key 'general.alignment' must be a uint32, not a ", gguf_type_name(a->type)));
    if (a->u == 0 || (a->u & (a->u - 1)) != 0)
      bad(file, str_cat("key 'general.alignment' is ", a->u, ", not a power of two"));
    h.alignment = a->u;
  }

  h.tensors.reserve(size_t(n_tensors));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensorInfo t = read_tensor_info(c, k);
    if (!h.tensor_index.emplace(t.name, h.tensors.size()).second)
      bad(file, str_cat("tensor '", text_preview(t.name), "' appears twice"));
    h.tensors.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment (pos + alignment - 1 cannot overflow:
  // pos <= size and alignment <= 2^31).
  h.data_offset = (uint64_t(c.pos) + h.alignment - 1) / h.alignment * h.alignment;
  if (!h.tensors.empty() && h.data_offset > size)
    bad(file, str_cat("file is truncated: the data section would start at byte ", h.data_offset, ", past the end (",
                      size, " bytes)"));
  h.data_size = h.data_offset <= size ? uint64_t(size) - h.data_offset : 0;
  for (const GgufTensorInfo& t : h.tensors) {
    const std::string where = str_cat("tensor '", text_preview(t.name), "'");
    if (t.offset % h.alignment != 0)
      bad(file, str_cat(where, ": data offset ", t.offset, " is not a multiple of the alignment ", h.alignment));
    if (t.offset > h.data_size || t.nbytes > h.data_size - t.offset)
      bad(file, str_cat(where, ": data [", t.offset, ", +", t.nbytes, ") of ", dims_str(t.dims), " ", t.type_name(),
                        " reaches past the end of the data section (", h.data_size, " bytes); the file may be truncated"));
  }
  // Overlaps: by start offset, each non-empty tensor must begin at or after the previous one's end.
  std::vector<const GgufTensorInfo*> by_offset;
  for (const GgufTensorInfo& t : h.tensors)
    if (t.nbytes > 0) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t k = 1; k < by_offset.size(); ++k)
    if (by_offset[k]->offset < by_offset[k - 1]->offset + by_offset[k - 1]->nbytes)
      bad(file, str_cat("tensors '", text_preview(by_offset[k - 1]->name), "' and '", text_preview(by_offset[k]->name),
                        "' overlap (data offset ", by_offset[k]->offset, " < ", by_offset[k - 1]->offset + by_offset[k - 1]->nbytes, ")"));
  return h;
}

// ---- typed accessors ---------------------------------------------------------------------------------

const GgufValue* GgufHeader::find(std::string_view key) const {
  auto it = key_index.find(key);
  return it == key_index.end() ? nullptr : &metadata[it->second].value;
}

const GgufTensorInfo* GgufHeader::find_tensor(std::string_view name) const {
  auto it = tensor_index.find(name);
  return it == tensor_index.end() ? nullptr : &tensors[it->second];
}

namespace {

std::string value_kind(const GgufValue& v) {
  if (v.type == GgufType::kArray) return str_cat("an array of ", gguf_type_name(v.elem_type));
  return str_cat("a ", gguf_type_name(v.type));
}

[[noreturn]] void wrong_type(const GgufHeader& h, std::string_view key, const GgufValue& v, std::string_view want) {
  throw_config_error("GGUF file '", h.label, "': key '", key, "' must be ", want, ", not ", value_kind(v));
}

void check_range(const GgufHeader& h, std::string_view key, std::optional<int64_t> x, int64_t lo, int64_t hi,
                 std::string_view element = {}) {
  if (!x || *x < lo || *x > hi)
    throw_config_error("GGUF file '", h.label, "': key '", key, "'", element, " is ",
                       x ? std::to_string(*x) : std::string("above 2^63 - 1"), ", outside [", lo, ", ", hi, "]");
}

}  // namespace

std::optional<int64_t> GgufHeader::get_int(std::string_view key, int64_t lo, int64_t hi) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_integer()) wrong_type(*this, key, *v, "an integer");
  check_range(*this, key, v->as_int(), lo, hi);
  return *v->as_int();
}

std::optional<double> GgufHeader::get_number(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_number()) wrong_type(*this, key, *v, "a number");
  const double x = *v->as_number();
  if (!std::isfinite(x)) throw_config_error("GGUF file '", label, "': key '", key, "' is ", x, ", not a finite number");
  return x;
}

std::optional<bool> GgufHeader::get_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::kBool) wrong_type(*this, key, *v, "a bool");
  return v->u != 0;
}

std::optional<std::string> GgufHeader::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::kString) wrong_type(*this, key, *v, "a string");
  return std::string(v->str);
}

std::optional<std::vector<std::string>> GgufHeader::get_string_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::kArray || v->elem_type != GgufType::kString) wrong_type(*this, key, *v, "an array of string");
  return std::vector<std::string>(v->strings.begin(), v->strings.end());
}

std::optional<std::vector<float>> GgufHeader::get_float_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  GgufValue probe;
  probe.type = v->elem_type;
  if (v->type != GgufType::kArray || !probe.is_number()) wrong_type(*this, key, *v, "an array of numbers");
  std::vector<float> out(size_t(v->count));
  for (uint64_t k = 0; k < v->count; ++k) out[size_t(k)] = float(v->number_at(k));
  return out;
}

std::optional<std::vector<int64_t>> GgufHeader::get_int_array(std::string_view key, int64_t lo, int64_t hi) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  GgufValue probe;
  probe.type = v->elem_type;
  if (v->type != GgufType::kArray || !probe.is_integer()) wrong_type(*this, key, *v, "an array of integers");
  std::vector<int64_t> out(size_t(v->count));
  for (uint64_t k = 0; k < v->count; ++k) {
    const std::optional<int64_t> x = v->int_at(k);
    check_range(*this, key, x, lo, hi, str_cat("[", k, "]"));
    out[size_t(k)] = *x;
  }
  return out;
}

std::optional<uint64_t> GgufHeader::get_array_length(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::kArray) wrong_type(*this, key, *v, "an array");
  return v->count;
}

// ---- files -------------------------------------------------------------------------------------------

std::shared_ptr<const GgufFile> GgufFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_runtime_error("cannot open GGUF file '", path, "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw_runtime_error("cannot read GGUF file '", path, "': not a regular file");
  }
  std::shared_ptr<GgufFile> f(new GgufFile());
  f->size_ = size_t(st.st_size);
  if (f->size_ > 0) {
    void* p = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw_runtime_error("cannot map GGUF file '", path, "': ", std::strerror(err));
    }
    f->base_ = static_cast<const uint8_t*>(p);
    f->mapped_ = true;
  }
  ::close(fd);
  static const uint8_t kEmpty[1] = {0};
  f->header_ = parse_gguf_header(f->base_ ? f->base_ : kEmpty, f->size_, path);  // on a throw ~GgufFile unmaps
  return f;
}

std::shared_ptr<const GgufFile> GgufFile::view(const uint8_t* data, size_t size, const std::string& label) {
  std::shared_ptr<GgufFile> f(new GgufFile());
  static const uint8_t kEmpty[1] = {0};
  f->base_ = data ? data : kEmpty;
  f->size_ = size;
  f->header_ = parse_gguf_header(f->base_, size, label);
  return f;
}

GgufFile::~GgufFile() {
  if (mapped_) ::munmap(const_cast<uint8_t*>(base_), size_);
}

}  // namespace pagoda
