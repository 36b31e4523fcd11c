#include "pagoda/model/model_weights.h"

#include <unistd.h>

#include <cmath>
#include <cstring>

#include "pagoda/core/error.h"
#include "pagoda/model/architecture.h"
#include "pagoda/model/safetensors.h"

namespace pagoda {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "(";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + (s.size() == 1 ? ",)" : ")");
}

bool is_weight_dtype(DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16; }

// Where a tensor goes in ModelWeights.
struct Slot {
  WeightMatrix* matrix = nullptr;
  std::vector<float>* vec = nullptr;
};

Slot slot_for(ModelWeights& w, const TensorSpec& t) {
  LayerWeights* l = t.layer >= 0 ? &w.layers[size_t(t.layer)] : nullptr;
  switch (t.role) {
    case WeightRole::kEmbed: return {&w.embed, nullptr};
    case WeightRole::kFinalNorm: return {nullptr, &w.final_norm};
    case WeightRole::kLmHead: return {&w.lm_head, nullptr};
    case WeightRole::kInputNorm: return {nullptr, &l->input_norm};
    case WeightRole::kPostAttnNorm: return {nullptr, &l->post_attn_norm};
    case WeightRole::kQ: return {&l->q, nullptr};
    case WeightRole::kK: return {&l->k, nullptr};
    case WeightRole::kV: return {&l->v, nullptr};
    case WeightRole::kO: return {&l->o, nullptr};
    case WeightRole::kQBias: return {nullptr, &l->q_bias};
    case WeightRole::kKBias: return {nullptr, &l->k_bias};
    case WeightRole::kVBias: return {nullptr, &l->v_bias};
    case WeightRole::kOBias: return {nullptr, &l->o_bias};
    case WeightRole::kQNorm: return {nullptr, &l->q_norm};
    case WeightRole::kKNorm: return {nullptr, &l->k_norm};
    case WeightRole::kGate: return {&l->gate, nullptr};
    case WeightRole::kUp: return {&l->up, nullptr};
    case WeightRole::kDown: return {&l->down, nullptr};
  }
  return {};
}

// Converts n elements into a new owned buffer of dtype `to`.
const void* convert_owned(ModelWeights& w, const void* src, DType from, DType to, int64_t n) {
  w.owned.emplace_back(size_t(n) * dtype_size(to));
  void* dst = w.owned.back().data();
  if (from == to) {
    std::memcpy(dst, src, size_t(n) * dtype_size(to));
  } else {
    for (int64_t i = 0; i < n; ++i) store_from_f32(dst, to, size_t(i), load_as_f32(src, from, size_t(i)));
  }
  return dst;
}

void finish(ModelWeights& w, const ModelConfig& c) {
  if (c.tie_word_embeddings) w.lm_head = w.embed;
}

// splitmix64: a fast, well-mixed stream for random init (std::normal_distribution is far slower).
struct SplitMix {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return (double(next() >> 11) + 0.5) * 0x1p-53; }  // (0, 1)
  double normal() { return std::sqrt(-2.0 * std::log(uniform())) * std::cos(2.0 * M_PI * uniform()); }
};

uint64_t hash_name(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

}  // namespace

ModelWeights load_model_weights(const ModelConfig& c, std::shared_ptr<const SafetensorsCheckpoint> ck,
                                std::optional<DType> dtype) {
  if (dtype && !is_weight_dtype(*dtype))
    throw_config_error("weight dtype ", dtype_name(*dtype), " is not supported (float32, bfloat16, float16)");
  // Every tensor is checked against config.json before anything is copied or converted: a config whose
  // sizes disagree with the files fails here, not after allocating what the config claims.
  const std::vector<TensorSpec> specs = architecture_spec(c.arch).tensor_specs(c);
  std::vector<SafetensorsTensorRef> refs;
  refs.reserve(specs.size());
  for (const TensorSpec& spec : specs) {
    auto ref = ck->find(spec.name);
    if (!ref)
      throw_config_error("missing tensor '", spec.name, "' in '", ck->source(), "' (", c.architecture_name,
                         spec.layer >= 0 ? str_cat(", layer ", spec.layer) : std::string(),
                         "); the checkpoint does not match config.json");
    const SafetensorsTensorInfo& info = *ref->info;
    const std::string where = str_cat("tensor '", spec.name, "' in '", ref->file->path(), "'");
    if (info.shape != spec.shape)
      throw_config_error(where, " has shape ", shape_str(info.shape), " but config.json implies ", shape_str(spec.shape),
                         " (hidden_size ", c.hidden_size, ", heads ", c.num_heads, "/", c.num_kv_heads, " x ", c.head_dim,
                         ", intermediate_size ", c.intermediate_size, ", vocab_size ", c.vocab_size, ")");
    if (!info.dtype || !is_weight_dtype(*info.dtype))
      throw_config_error(where, " has dtype ", info.dtype_name, "; pagoda loads F32, BF16 or F16 weights");
    refs.push_back(*ref);
  }
  ModelWeights w;
  w.checkpoint = ck;
  w.layers.resize(size_t(c.num_layers));
  for (size_t k = 0; k < specs.size(); ++k) {
    const TensorSpec& spec = specs[k];
    const SafetensorsTensorRef* ref = &refs[k];
    const SafetensorsTensorInfo& info = *ref->info;
    const DType from = *info.dtype;
    const int64_t numel = int64_t(info.end - info.begin) / int64_t(info.element_size);
    // The format does not align the data section; a misaligned tensor is copied once so every later
    // access is an aligned typed load.
    const void* src = ref->data();
    if (reinterpret_cast<uintptr_t>(src) % info.element_size != 0) src = convert_owned(w, src, from, from, numel);
    Slot s = slot_for(w, spec);
    if (s.vec) {
      s.vec->resize(size_t(numel));
      for (int64_t i = 0; i < numel; ++i) (*s.vec)[size_t(i)] = load_as_f32(src, from, size_t(i));
    } else {
      const DType to = dtype.value_or(from);
      s.matrix->dtype = to;
      s.matrix->rows = spec.shape[0];
      s.matrix->cols = spec.shape[1];
      s.matrix->data = to == from ? src : convert_owned(w, src, from, to, numel);
    }
  }
  finish(w, c);
  return w;
}

int64_t model_parameter_count(const ModelConfig& c) {
  int64_t total = 0;
  for (const TensorSpec& spec : architecture_spec(c.arch).tensor_specs(c)) {
    int64_t numel = 1;
    for (int64_t d : spec.shape)
      if (__builtin_mul_overflow(numel, d, &numel)) throw_config_error("config.json: tensor '", spec.name, "' is too large");
    if (__builtin_add_overflow(total, numel, &total)) throw_config_error("config.json: the model is too large");
  }
  return total;
}

ModelWeights make_random_weights(const ModelConfig& c, uint64_t seed, DType dtype) {
  if (!is_weight_dtype(dtype))
    throw_config_error("weight dtype ", dtype_name(dtype), " is not supported (float32, bfloat16, float16)");
  // The config's sizes are bounded but their product is not: check the bytes before allocating them.
  const int64_t params = model_parameter_count(c);
  const double bytes = double(params) * double(dtype_size(dtype));
  const long pages = ::sysconf(_SC_PHYS_PAGES), page_size = ::sysconf(_SC_PAGESIZE);
  const double memory = pages > 0 && page_size > 0 ? double(pages) * double(page_size) : 0.0;
  if (memory > 0 && bytes > memory)
    throw_config_error("random weights for ", c.architecture_name, " (", params, " parameters, ", format_bytes(bytes), " of ",
                       dtype_name(dtype), ") do not fit in this machine's ", format_bytes(memory),
                       " of memory; check config.json's sizes or use a smaller model");
  ModelWeights w;
  w.layers.resize(size_t(c.num_layers));
  for (const TensorSpec& spec : architecture_spec(c.arch).tensor_specs(c)) {
    int64_t numel = 1;
    for (int64_t d : spec.shape) numel *= d;
    SplitMix rng{seed ^ hash_name(spec.name)};
    Slot s = slot_for(w, spec);
    if (s.vec) {
      s.vec->resize(size_t(numel));
      const bool is_norm = spec.role == WeightRole::kFinalNorm || spec.role == WeightRole::kInputNorm ||
                           spec.role == WeightRole::kPostAttnNorm || spec.role == WeightRole::kQNorm ||
                           spec.role == WeightRole::kKNorm;
      for (auto& x : *s.vec) x = is_norm ? 1.0f : float(0.02 * rng.normal());
    } else {
      const double stddev = 0.02;  // transformers' initializer_range: after RMSNorm, activations stay O(1)
      w.owned.emplace_back(size_t(numel) * dtype_size(dtype));
      void* dst = w.owned.back().data();
      for (int64_t i = 0; i < numel; ++i) store_from_f32(dst, dtype, size_t(i), float(stddev * rng.normal()));
      *s.matrix = WeightMatrix{.data = dst, .dtype = dtype, .rows = spec.shape[0], .cols = spec.shape[1]};
    }
  }
  finish(w, c);
  return w;
}

}  // namespace pagoda
