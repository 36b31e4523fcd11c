#include "pagoda/model/kv_scales.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>

#include "pagoda/core/error.h"
#include "pagoda/core/logging.h"
#include "pagoda/model/safetensors.h"

namespace pagoda {
namespace {

// The names of a layer's k and v scale after "model.layers.{i}.self_attn.", in order of preference.
constexpr const char* kKScaleNames[] = {"k_scale", "k_proj.k_scale", "k_proj.output_scale", "kv_scale"};
constexpr const char* kVScaleNames[] = {"v_scale", "v_proj.v_scale", "v_proj.output_scale", "kv_scale"};

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "(";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + (s.size() == 1 ? ",)" : ")");
}

// "0-3, 7, 9-10"
std::string layer_list(const std::vector<int>& layers) {
  std::string r;
  for (size_t i = 0; i < layers.size();) {
    size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    if (!r.empty()) r += ", ";
    r += std::to_string(layers[i]);
    if (j > i) r += str_cat("-", layers[j]);
    i = j + 1;
  }
  return r;
}

struct ScaleTensor {
  std::string name;
  std::vector<float> values;  // [1] or [num_kv_heads]
};

// One scale tensor, validated; nullopt when the checkpoint has no tensor of that name.
std::optional<ScaleTensor> read_scale(const SafetensorsCheckpoint& ck, const std::string& name, int num_kv_heads) {
  auto ref = ck.find(name);
  if (!ref) return std::nullopt;
  const SafetensorsTensorInfo& info = *ref->info;
  const std::string where = str_cat("KV-cache scale '", name, "' in '", ref->file->path(), "'");
  if (!info.dtype || (*info.dtype != DType::kF32 && *info.dtype != DType::kBF16 && *info.dtype != DType::kF16))
    throw_config_error(where, " has dtype ", info.dtype_name, "; pagoda reads F32, BF16 or F16 scales");
  // The header parser has checked that numel * element size is the tensor's byte count: no overflow here.
  int64_t numel = 1;
  for (int64_t d : info.shape) numel *= d;
  const bool per_head = numel == num_kv_heads && !info.shape.empty() && info.shape[0] == num_kv_heads;
  if (numel != 1 && !per_head)
    throw_config_error(where, " has shape ", shape_str(info.shape), "; a KV-cache scale is one value or one per KV head (",
                       num_kv_heads, " in config.json)");
  // The data section is not aligned: copy before the typed loads.
  std::vector<uint8_t> bytes(size_t(info.end - info.begin));
  std::memcpy(bytes.data(), ref->data(), bytes.size());
  ScaleTensor s{name, std::vector<float>(size_t(numel))};
  for (size_t i = 0; i < s.values.size(); ++i) {
    const float x = load_as_f32(bytes.data(), *info.dtype, i);
    if (!std::isfinite(x) || !(x > 0.0f))
      throw_config_error(where, " holds ", x, numel > 1 ? str_cat(" for KV head ", i) : std::string(),
                         "; a KV-cache scale must be finite and positive (the checkpoint is corrupt)");
    s.values[i] = x;
  }
  return s;
}

// A layer's k (or v) scale: the first of `names` present. Every other name present must hold the same values,
// else which one vLLM would use depends on the order it reads the files in.
template <size_t N>
std::optional<ScaleTensor> read_layer_scale(const SafetensorsCheckpoint& ck, const std::string& prefix,
                                            const char* const (&names)[N], int num_kv_heads) {
  std::optional<ScaleTensor> first;
  for (const char* n : names) {
    auto s = read_scale(ck, prefix + n, num_kv_heads);
    if (!s) continue;
    if (!first) {
      first = std::move(s);
    } else if (s->values != first->values) {
      throw_config_error("'", ck.source(), "' holds two different KV-cache scales for one layer: '", first->name, "' and '",
                         s->name, "'; a checkpoint should carry only one of them");
    }
  }
  return first;
}

}  // namespace

std::vector<KvScales> load_kv_scales(const ModelConfig& c, const SafetensorsCheckpoint& ck, bool fp8_kv_cache) {
  const int heads = c.num_kv_heads;
  std::vector<KvScales> out(size_t(c.num_layers));
  std::vector<int> no_k, no_v;
  bool any = false, any_per_head = false;
  float lo = std::numeric_limits<float>::infinity(), hi = 0.0f;
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string prefix = str_cat("model.layers.", i, ".self_attn.");
    const auto k = read_layer_scale(ck, prefix, kKScaleNames, heads);
    const auto v = read_layer_scale(ck, prefix, kVScaleNames, heads);
    if (!k) no_k.push_back(i);
    if (!v) no_v.push_back(i);
    any = any || k || v;
    const std::vector<float> kv = k ? k->values : std::vector<float>{1.0f};
    const std::vector<float> vv = v ? v->values : std::vector<float>{1.0f};
    KvScales& s = out[size_t(i)];
    s.k = *std::max_element(kv.begin(), kv.end());
    s.v = *std::max_element(vv.begin(), vv.end());
    if (kv.size() > 1 || vv.size() > 1) {
      any_per_head = true;
      s.k_per_head = kv.size() > 1 ? kv : std::vector<float>(size_t(heads), kv[0]);
      s.v_per_head = vv.size() > 1 ? vv : std::vector<float>(size_t(heads), vv[0]);
    }
    for (const auto* t : {&k, &v})
      if (*t)
        for (float x : (*t)->values) lo = std::min(lo, x), hi = std::max(hi, x);
  }
  if (!any && !c.has_kv_cache_scheme) return {};
  if (!fp8_kv_cache) return out;
  if (!any) {
    PAGODA_LOG_WARNING("config.json declares a KV-cache quantization scheme (strategy '",
                       c.kv_cache_scheme_strategy.value_or("unspecified"), "') but '", ck.source(),
                       "' holds no KV-cache scales (model.layers.{i}.self_attn.k_scale / v_scale): every layer uses "
                       "k_scale = v_scale = 1.0, as vLLM does; the fp8 KV cache may lose accuracy.");
    return out;
  }
  if (!no_k.empty() || !no_v.empty()) {
    std::string what;
    if (!no_k.empty()) what = "no k scale for layers " + layer_list(no_k);
    if (!no_v.empty()) what += (what.empty() ? "" : " and ") + std::string("no v scale for layers ") + layer_list(no_v);
    PAGODA_LOG_WARNING("'", ck.source(), "' holds KV-cache scales but ", what, " (model.layers.{i}.self_attn.k_scale / v_scale): "
                       "those use 1.0, as vLLM does; the fp8 KV cache may lose accuracy there.");
  }
  PAGODA_LOG_INFO("KV-cache scales from the checkpoint: ", c.num_layers, " layers, ",
                  any_per_head ? "per KV head" : "per tensor", ", in [", lo, ", ", hi, "]");
  return out;
}

}  // namespace pagoda
