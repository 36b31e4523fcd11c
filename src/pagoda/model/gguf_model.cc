// The config and the vocabulary of a GGUF model (the weights are in gguf_weights.cc).
#include "pagoda/model/gguf_model.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "pagoda/core/error.h"
#include "pagoda/core/strings.h"
#include "pagoda/ops/quant/quant.h"

namespace pagoda {

bool is_gguf_path(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  if (ends_with(path, ".gguf")) return true;
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in.gcount() == 4 && has_gguf_magic(reinterpret_cast<const uint8_t*>(magic), 4);
}

namespace {

struct Reader {
  const GgufFile& file;
  const GgufHeader& h;
  std::string prefix;  // "llama."

  [[noreturn]] void fail(const std::string& what) const { throw_config_error("GGUF file '", h.label, "': ", what); }

  // {arch}.key in [lo, hi]; a per-layer array is accepted when all its entries are equal.
  std::optional<int> size(const std::string& key, int64_t lo, int64_t hi, std::string_view note) const {
    const std::string k = prefix + key;
    const GgufValue* v = h.find(k);
    if (!v) return std::nullopt;
    std::optional<int64_t> x;
    if (v->type == GgufType::kArray) {
      const std::vector<int64_t> a = *h.get_int_array(k);
      if (a.empty()) fail(str_cat("key '", k, "' is an empty array"));
      for (int64_t e : a)
        if (e != a[0]) fail(str_cat("key '", k, "' differs between layers; per-layer sizes are not supported"));
      x = a[0];
    } else {
      x = h.get_int(k);
    }
    if (*x < lo || *x > hi) fail(str_cat("key '", k, "' is ", *x, ", outside [", lo, ", ", hi, "] (", note, ")"));
    return int(*x);
  }
  int required_size(const std::string& key, int64_t lo, int64_t hi, std::string_view note) const {
    auto x = size(key, lo, hi, note);
    if (!x) fail(str_cat("missing key '", prefix, key, "'"));
    return *x;
  }
  // A token id key: nullopt when absent; in [0, vocab).
  std::optional<int> token_id(const std::string& key, int vocab) const {
    auto x = h.get_int(key);
    if (!x) return std::nullopt;
    if (*x < 0 || *x >= vocab)
      fail(str_cat("key '", key, "' is ", *x, ", not a token id of this model (vocab size ", vocab, ")"));
    return int(*x);
  }
};

// A 1-D tensor's values as float32 (for rope_freqs.weight).
std::vector<float> tensor_floats(const GgufFile& f, const GgufTensorInfo& t) {
  std::vector<float> out(size_t(t.numel));
  const uint8_t* p = f.tensor_data(t);
  if (t.quant != QuantType::kNone) {
    dequantize_row(t.quant, p, out.data(), t.numel);
    return out;
  }
  const size_t es = dtype_size(*t.dtype);
  for (int64_t i = 0; i < t.numel; ++i) {
    uint32_t bits = 0;
    std::memcpy(&bits, p + size_t(i) * es, es);  // may be misaligned: the file chooses the alignment
    out[size_t(i)] = *t.dtype == DType::kF32 ? bits_to_f32(bits) : *t.dtype == DType::kBF16 ? bf16_to_f32(uint16_t(bits))
                                                                                            : f16_to_f32(uint16_t(bits));
  }
  return out;
}

void read_rope(const Reader& r, ModelConfig& c) {
  const GgufHeader& h = r.h;
  c.rope_theta = h.get_number(r.prefix + "rope.freq_base").value_or(10000.0);
  if (!(c.rope_theta > 0)) r.fail(str_cat("key '", r.prefix, "rope.freq_base' must be positive, got ", c.rope_theta));
  // llama.cpp: the type defaults to linear, and a factor of 0 (or none) means no scaling.
  const std::string type = h.get_string(r.prefix + "rope.scaling.type").value_or("linear");
  std::optional<double> factor = h.get_number(r.prefix + "rope.scaling.factor");
  if (!factor) factor = h.get_number(r.prefix + "rope.scale_linear");
  if (type == "none" || (type == "linear" && (!factor || *factor == 0.0 || *factor == 1.0))) {
    c.rope_scaling.type = "default";
  } else if (type == "linear") {
    if (*factor < 0) r.fail(str_cat("key '", r.prefix, "rope.scaling.factor' must be positive, got ", *factor));
    c.rope_scaling.type = "linear";
    c.rope_scaling.factor = *factor;
  } else {
    r.fail(str_cat("RoPE scaling '", text_preview(type), "' (key '", r.prefix,
                   "rope.scaling.type') is not supported (supported: none, linear)"));
  }
  if (const GgufTensorInfo* t = r.file.find("rope_freqs.weight")) {
    const int half = c.head_dim / 2;
    if (t->dims != std::vector<int64_t>{half})
      r.fail(str_cat("tensor 'rope_freqs.weight' has ", t->dims.size(), " dims (ne[0] ", t->dims[0], "), expected [", half,
                     "] (head size ", c.head_dim, " / 2)"));
    c.rope_scaling.freq_factors = tensor_floats(r.file, *t);
    for (int i = 0; i < half; ++i) {
      const float x = c.rope_scaling.freq_factors[size_t(i)];
      if (!std::isfinite(x) || !(x > 0)) r.fail(str_cat("tensor 'rope_freqs.weight' [", i, "] is ", x, ", not a positive number"));
    }
  }
}

// Sliding window: {arch}.attention.sliding_window on every layer, or on those sliding_window_pattern marks.
void read_sliding_window(const Reader& r, ModelConfig& c) {
  c.layer_uses_sliding_window.assign(size_t(c.num_layers), false);
  const auto window = r.h.get_int(r.prefix + "attention.sliding_window", 0, INT32_MAX);
  if (!window || *window == 0) return;
  c.sliding_window = int(*window);
  const std::string pk = r.prefix + "attention.sliding_window_pattern";
  const GgufValue* pattern = r.h.find(pk);
  if (!pattern) {
    c.layer_uses_sliding_window.assign(size_t(c.num_layers), true);
    return;
  }
  if (pattern->type != GgufType::kArray || pattern->elem_type != GgufType::kBool || pattern->count != uint64_t(c.num_layers))
    r.fail(str_cat("key '", pk, "' must be an array of one bool per layer (", c.num_layers, "); other forms are not supported"));
  for (int l = 0; l < c.num_layers; ++l) c.layer_uses_sliding_window[size_t(l)] = pattern->raw[l] != 0;
}

// The plain dtype every block matrix shares, else nullopt (quantized or mixed files).
std::optional<DType> common_matrix_dtype(const GgufHeader& h) {
  std::optional<DType> d;
  for (const GgufTensorInfo& t : h.tensors) {
    if (!starts_with(t.name, "blk.") || t.dims.size() != 2) continue;
    if (!t.dtype || (d && *d != *t.dtype)) return std::nullopt;
    d = t.dtype;
  }
  return d;
}

}  // namespace

ModelConfig gguf_model_config(const GgufFile& file) {
  const GgufHeader& h = file.header();
  const std::optional<std::string> arch = h.get_string("general.architecture");
  if (!arch) throw_config_error("GGUF file '", h.label, "': missing key 'general.architecture'");
  ModelConfig c;
  if (*arch == "llama") c.arch = Architecture::kLlama;
  else if (*arch == "qwen2") c.arch = Architecture::kQwen2;
  else if (*arch == "qwen3") c.arch = Architecture::kQwen3;
  else
    throw_config_error("GGUF file '", h.label, "': architecture '", text_preview(*arch),
                       "' (general.architecture) is not supported (supported: llama, qwen2, qwen3)");
  c.architecture_name = std::string(architecture_name(c.arch));
  const Reader r{file, h, *arch + "."};

  if (auto experts = h.get_int(r.prefix + "expert_count"); experts && *experts > 0)
    r.fail(str_cat("mixture-of-experts models are not supported (", r.prefix, "expert_count is ", *experts, ")"));
  c.num_layers = r.required_size("block_count", 1, kMaxNumLayers, "pagoda's limit");
  c.hidden_size = r.required_size("embedding_length", 1, kMaxHiddenSize, "pagoda's limit");
  c.intermediate_size = r.required_size("feed_forward_length", 1, kMaxIntermediateSize, "pagoda's limit");
  c.num_heads = r.required_size("attention.head_count", 1, kMaxNumHeads, "pagoda's limit");
  c.num_kv_heads = r.size("attention.head_count_kv", 1, c.num_heads, "at least 1 and at most the head count").value_or(c.num_heads);
  if (c.num_heads % c.num_kv_heads != 0)
    r.fail(str_cat("the head count ", c.num_heads, " is not a multiple of the KV head count ", c.num_kv_heads));
  if (auto hd = r.size("attention.key_length", 1, kMaxHeadDim, "pagoda's limit")) {
    c.head_dim = *hd;
  } else {
    if (c.hidden_size % c.num_heads != 0)
      r.fail(str_cat("no ", r.prefix, "attention.key_length and the embedding length ", c.hidden_size,
                     " is not a multiple of the head count ", c.num_heads));
    c.head_dim = c.hidden_size / c.num_heads;
    if (c.head_dim > kMaxHeadDim) r.fail(str_cat("the head size ", c.head_dim, " is above pagoda's limit ", kMaxHeadDim));
  }
  if (c.head_dim % 2 != 0) r.fail(str_cat("the head size must be even (RoPE), got ", c.head_dim));
  if (auto v = r.size("attention.value_length", 1, kMaxHeadDim, "pagoda's limit"); v && *v != c.head_dim)
    r.fail(str_cat(r.prefix, "attention.value_length ", *v, " differs from the key length ", c.head_dim, "; not supported"));
  if (auto rot = r.size("rope.dimension_count", 1, kMaxHeadDim, "pagoda's limit"); rot && *rot != c.head_dim)
    r.fail(str_cat(r.prefix, "rope.dimension_count ", *rot, " differs from the head size ", c.head_dim,
                   "; partial rotary embeddings are not supported"));
  c.max_position_embeddings = r.required_size("context_length", 1, kMaxPositionEmbeddings, "pagoda's limit");
  const std::optional<double> eps = h.get_number(r.prefix + "attention.layer_norm_rms_epsilon");
  if (!eps) r.fail(str_cat("missing key '", r.prefix, "attention.layer_norm_rms_epsilon'"));
  if (!(*eps > 0)) r.fail(str_cat("key '", r.prefix, "attention.layer_norm_rms_epsilon' must be positive, got ", *eps));
  c.rms_norm_eps = *eps;

  if (auto v = r.size("vocab_size", 1, kMaxVocabSize, "pagoda's vocabulary limit")) {
    c.vocab_size = *v;
  } else if (auto n = h.get_array_length("tokenizer.ggml.tokens")) {
    if (*n < 1 || *n > uint64_t(kMaxVocabSize))
      r.fail(str_cat("tokenizer.ggml.tokens has ", *n, " tokens, outside [1, ", kMaxVocabSize, "]"));
    c.vocab_size = int(*n);
  } else if (const GgufTensorInfo* e = file.find("token_embd.weight"); e && e->dims.size() == 2 && e->dims[1] >= 1 &&
                                                                       e->dims[1] <= kMaxVocabSize) {
    c.vocab_size = int(e->dims[1]);
  } else {
    r.fail(str_cat("no vocabulary size: neither ", r.prefix, "vocab_size, tokenizer.ggml.tokens nor a token_embd.weight of [",
                   c.hidden_size, ", 1..", kMaxVocabSize, "]"));
  }
  read_rope(r, c);
  read_sliding_window(r, c);

  c.tie_word_embeddings = file.find("output.weight") == nullptr;
  c.attention_bias = file.find("blk.0.attn_q.bias") != nullptr;
  c.o_proj_bias = file.find("blk.0.attn_output.bias") != nullptr;
  c.qk_norm = c.arch == Architecture::kQwen3;
  c.checkpoint_dtype = common_matrix_dtype(h);

  c.bos_token_id = r.token_id("tokenizer.ggml.bos_token_id", c.vocab_size).value_or(-1);
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"})
    if (auto id = r.token_id(key, c.vocab_size); id && (c.eos_token_ids.empty() || c.eos_token_ids[0] != *id))
      c.eos_token_ids.push_back(*id);
  return c;
}

std::optional<GgufVocab> read_gguf_vocab(const GgufFile& file) {
  const GgufHeader& h = file.header();
  if (!h.find("tokenizer.ggml.tokens")) return std::nullopt;
  GgufVocab v;
  v.label = h.label;
  v.model = h.get_string("tokenizer.ggml.model").value_or("");
  v.pre = h.get_string("tokenizer.ggml.pre").value_or("");
  v.tokens = *h.get_string_array("tokenizer.ggml.tokens");
  v.scores = h.get_float_array("tokenizer.ggml.scores").value_or(std::vector<float>());
  for (int64_t t : h.get_int_array("tokenizer.ggml.token_type", INT32_MIN, INT32_MAX).value_or(std::vector<int64_t>()))
    v.token_types.push_back(int32_t(t));
  v.merges = h.get_string_array("tokenizer.ggml.merges").value_or(std::vector<std::string>());
  auto id = [&](const char* key) -> std::optional<int> {
    auto x = h.get_int(key, 0, INT32_MAX);
    return x ? std::optional<int>(int(*x)) : std::nullopt;
  };
  v.bos_id = id("tokenizer.ggml.bos_token_id");
  v.eos_id = id("tokenizer.ggml.eos_token_id");
  v.unk_id = id("tokenizer.ggml.unknown_token_id");
  v.pad_id = id("tokenizer.ggml.padding_token_id");
  v.eot_id = id("tokenizer.ggml.eot_token_id");
  v.add_bos = h.get_bool("tokenizer.ggml.add_bos_token");
  v.add_eos = h.get_bool("tokenizer.ggml.add_eos_token");
  v.add_space_prefix = h.get_bool("tokenizer.ggml.add_space_prefix");
  v.chat_template = h.get_string("tokenizer.chat_template").value_or("");
  return v;
}

}  // namespace pagoda
