// The weights of a GGUF model: llama.cpp's tensor names mapped onto the architecture's roles.
#include <cstring>
#include <set>

#include "pagoda/core/error.h"
#include "pagoda/model/architecture.h"
#include "pagoda/model/gguf_model.h"
#include "pagoda/ops/quant/quant.h"

namespace pagoda {
namespace {

// llama.cpp's name of the tensor of a role (blk.N.* for layer tensors).
std::string gguf_name(const TensorSpec& t) {
  const std::string b = "blk." + std::to_string(t.layer) + ".";
  switch (t.role) {
    case WeightRole::kEmbed: return "token_embd.weight";
    case WeightRole::kFinalNorm: return "output_norm.weight";
    case WeightRole::kLmHead: return "output.weight";
    case WeightRole::kInputNorm: return b + "attn_norm.weight";
    case WeightRole::kPostAttnNorm: return b + "ffn_norm.weight";
    case WeightRole::kQ: return b + "attn_q.weight";
    case WeightRole::kK: return b + "attn_k.weight";
    case WeightRole::kV: return b + "attn_v.weight";
    case WeightRole::kO: return b + "attn_output.weight";
    case WeightRole::kQBias: return b + "attn_q.bias";
    case WeightRole::kKBias: return b + "attn_k.bias";
    case WeightRole::kVBias: return b + "attn_v.bias";
    case WeightRole::kOBias: return b + "attn_output.bias";
    case WeightRole::kQNorm: return b + "attn_q_norm.weight";
    case WeightRole::kKNorm: return b + "attn_k_norm.weight";
    case WeightRole::kGate: return b + "ffn_gate.weight";
    case WeightRole::kUp: return b + "ffn_up.weight";
    case WeightRole::kDown: return b + "ffn_down.weight";
  }
  return "";
}

std::string dims_str(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

// The heads whose rows llama.cpp's converter permuted: q by the head count, k by the KV head count.
int permuted_heads(const ModelConfig& c, WeightRole role) {
  if (c.arch != Architecture::kLlama) return 0;
  if (role == WeightRole::kQ || role == WeightRole::kQBias) return c.num_heads;
  if (role == WeightRole::kK || role == WeightRole::kKBias) return c.num_kv_heads;
  return 0;
}

// Undoes convert_hf_to_gguf.py's LlamaModel.permute, which reorders the rows of each head as
// w.reshape(n_head, 2, hd / 2, cols).swapaxes(1, 2): GGUF row h*hd + 2j + t holds Hugging Face row
// h*hd + t*hd/2 + j. `rows` rows of `row_bytes` each; rows % n_head == 0 and (rows / n_head) even.
void unpermute_rows(const uint8_t* src, uint8_t* dst, int64_t rows, size_t row_bytes, int n_head) {
  const int64_t hd = rows / n_head, half = hd / 2;
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t j = 0; j < half; ++j)
      for (int64_t t = 0; t < 2; ++t)
        std::memcpy(dst + size_t(h * hd + t * half + j) * row_bytes, src + size_t(h * hd + 2 * j + t) * row_bytes, row_bytes);
}

float load_element(const uint8_t* p, DType t, int64_t i) {
  uint32_t bits = 0;
  std::memcpy(&bits, p + size_t(i) * dtype_size(t), dtype_size(t));  // may be misaligned
  return t == DType::kF32 ? bits_to_f32(bits) : t == DType::kBF16 ? bf16_to_f32(uint16_t(bits)) : f16_to_f32(uint16_t(bits));
}

// A norm or bias as float32, in Hugging Face row order.
std::vector<float> load_vector(const GgufFile& f, const GgufTensorInfo& t, int n_head) {
  std::vector<float> v(size_t(t.numel));
  const uint8_t* p = f.tensor_data(t);
  if (t.quant != QuantType::kNone) dequantize_row(t.quant, p, v.data(), t.numel);
  else
    for (int64_t i = 0; i < t.numel; ++i) v[size_t(i)] = load_element(p, *t.dtype, i);
  if (n_head == 0) return v;
  std::vector<float> out(v.size());
  unpermute_rows(reinterpret_cast<const uint8_t*>(v.data()), reinterpret_cast<uint8_t*>(out.data()), t.numel, sizeof(float), n_head);
  return out;
}

// A [rows, cols] matrix: a view of the file when it can be one, else owned memory.
WeightMatrix load_matrix(ModelWeights& w, const GgufFile& f, const GgufTensorInfo& t, int n_head, std::optional<DType> dtype) {
  WeightMatrix m;
  m.rows = t.dims[1];
  m.cols = t.dims[0];
  m.quant = t.quant;
  const uint8_t* src = f.tensor_data(t);
  if (n_head > 0) {  // rows back in Hugging Face order
    w.owned.emplace_back(size_t(t.nbytes));
    unpermute_rows(src, w.owned.back().data(), m.rows, size_t(t.nbytes / uint64_t(m.rows)), n_head);
    src = w.owned.back().data();
  }
  if (t.quant != QuantType::kNone) {  // quantized weights stay quantized, whatever `dtype` asks
    m.data = src;
    return m;
  }
  const DType from = *t.dtype, to = dtype.value_or(from);
  m.dtype = to;
  if (to == from && reinterpret_cast<uintptr_t>(src) % dtype_size(from) == 0) {
    m.data = src;
    return m;
  }
  std::vector<uint8_t> out(size_t(t.numel) * dtype_size(to));
  for (int64_t i = 0; i < t.numel; ++i) store_from_f32(out.data(), to, size_t(i), load_element(src, from, i));
  w.owned.push_back(std::move(out));
  m.data = w.owned.back().data();
  return m;
}

}  // namespace

ModelWeights load_gguf_weights(const ModelConfig& c, std::shared_ptr<const GgufFile> file, std::optional<DType> dtype) {
  if (dtype && *dtype != DType::kF32 && *dtype != DType::kBF16 && *dtype != DType::kF16)
    throw_config_error("weight dtype ", dtype_name(*dtype), " is not supported (float32, bfloat16, float16)");
  const std::string& path = file->path();
  // Every tensor is checked before anything is copied: a file whose sizes disagree with its metadata fails
  // here, not after allocating what the metadata claims.
  const std::vector<TensorSpec> specs = architecture_spec(c.arch).tensor_specs(c);
  std::vector<const GgufTensorInfo*> infos;
  std::set<std::string> used = {"rope_freqs.weight"};  // read by gguf_model_config
  for (const TensorSpec& spec : specs) {
    const std::string name = gguf_name(spec);
    const GgufTensorInfo* t = file->find(name);
    if (!t)
      throw_config_error("missing tensor '", name, "' in GGUF file '", path, "' (", c.architecture_name,
                         spec.layer >= 0 ? str_cat(", layer ", spec.layer) : std::string(), ")");
    // GGUF lists dims innermost first: a [rows, cols] matrix is [cols, rows].
    const std::vector<int64_t> want(spec.shape.rbegin(), spec.shape.rend());
    if (t->dims != want)
      throw_config_error("tensor '", name, "' in GGUF file '", path, "' has dims ", dims_str(t->dims), " but the metadata implies ",
                         dims_str(want), " (embedding ", c.hidden_size, ", heads ", c.num_heads, "/", c.num_kv_heads, " x ",
                         c.head_dim, ", feed-forward ", c.intermediate_size, ", vocab ", c.vocab_size, ")");
    infos.push_back(t);
    used.insert(name);
  }
  for (const GgufTensorInfo& t : file->header().tensors)
    if (!used.count(t.name))
      throw_config_error("tensor '", text_preview(t.name), "' in GGUF file '", path, "' is not part of pagoda's ", c.architecture_name,
                         " (an unsupported feature such as an MLP bias or a fused qkv); refusing to run a different model");

  ModelWeights w;
  w.gguf = file;
  w.layers.resize(size_t(c.num_layers));
  for (size_t k = 0; k < specs.size(); ++k) {
    const int n_head = permuted_heads(c, specs[k].role);
    const WeightSlot s = weight_slot(w, specs[k]);
    if (s.vec) *s.vec = load_vector(*file, *infos[k], n_head);
    else *s.matrix = load_matrix(w, *file, *infos[k], n_head, dtype);
  }
  if (c.tie_word_embeddings) w.lm_head = w.embed;
  return w;
}

}  // namespace pagoda
