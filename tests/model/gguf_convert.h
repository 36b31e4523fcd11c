// Test helper: a Hugging Face Llama/Qwen2/Qwen3 folder written as a GGUF image the way llama.cpp's
// convert_hf_to_gguf.py does it (LlamaModel / Qwen2Model / Qwen3Model, outtype f32 or f16): its keys, its
// tensor names, F32 norms and biases, the q/k row permutation of "llama" files and, for Llama-3 RoPE
// scaling, the rope_freqs.weight tensor instead of scaling keys. Independent of pagoda's GGUF reader.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gguf_writer.h"
#include "model_test_util.h"
#include "pagoda/core/dtype.h"
#include "pagoda/model/safetensors.h"

namespace pagoda::test {

struct HfToGgufOptions {
  uint32_t outtype = kGgmlF32;      // kGgmlF32 or kGgmlF16: the type of every matrix
  uint32_t version = 3;
  bool write_rope_freqs = true;     // false: drop Llama-3 scaling (for a comparison with a config without it)
};

// LlamaModel.permute: w.reshape(n_head, 2, rows / n_head / 2, cols).swapaxes(1, 2).reshape(rows, cols),
// on `rows` rows of `cols` floats.
inline std::vector<float> llama_permute(const std::vector<float>& w, int64_t rows, int64_t cols, int n_head) {
  std::vector<float> out(w.size());
  const int64_t hd = rows / n_head, half = hd / 2;
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t a = 0; a < 2; ++a)     // reshaped index (h, a, j) ...
      for (int64_t j = 0; j < half; ++j)  // ... is read at (h, j, a) after the swap
        for (int64_t c = 0; c < cols; ++c)
          out[size_t(((h * half + j) * 2 + a) * cols + c)] = w[size_t(((h * 2 + a) * half + j) * cols + c)];
  return out;
}

// LlamaModel.generate_extra_tensors for rope_type llama3: factor per frequency, frequencies in float32.
inline std::vector<float> llama3_rope_factors(const nlohmann::json& rp, int dim) {
  const double base = rp.value("rope_theta", 10000.0), factor = rp.value("factor", 8.0);
  const double low = rp.value("low_freq_factor", 1.0), high = rp.value("high_freq_factor", 4.0);
  const double old_ctx = rp.value("original_max_position_embeddings", 8192.0);
  std::vector<float> out;
  for (int i = 0; i < dim; i += 2) {
    const float freq = 1.0f / std::pow(float(base), float(i) / float(dim));
    const double wavelen = 2 * M_PI / double(freq);
    if (wavelen < old_ctx / high) out.push_back(1.0f);
    else if (wavelen > old_ctx / low) out.push_back(float(factor));
    else {
      const double smooth = (old_ctx / wavelen - low) / (high - low);
      out.push_back(float(1.0 / ((1 - smooth) / factor + smooth)));
    }
  }
  return out;
}

inline std::vector<uint8_t> hf_to_gguf(const std::string& dir, const HfToGgufOptions& o = {}) {
  using nlohmann::json;
  const json cfg = json::parse(read_file(dir + "/config.json"));
  const json gen = json::parse(read_file(dir + "/generation_config.json"));
  const std::string hf = cfg["architectures"][0];
  const std::string arch = hf == "Qwen2ForCausalLM" ? "qwen2" : hf == "Qwen3ForCausalLM" ? "qwen3" : "llama";
  const int n_head = cfg["num_attention_heads"], n_kv = cfg.value("num_key_value_heads", n_head);
  const int hidden = cfg["hidden_size"], vocab = cfg["vocab_size"];
  const int head_dim = cfg.contains("head_dim") ? int(cfg["head_dim"]) : hidden / n_head;
  json rp = cfg.contains("rope_parameters") ? cfg["rope_parameters"] : cfg.value("rope_scaling", json::object());
  if (rp.is_null()) rp = json::object();
  if (!rp.contains("rope_theta")) rp["rope_theta"] = cfg.value("rope_theta", 10000.0);

  GgufWriter w(o.version);
  const std::string a = arch + ".";
  w.kv("general.architecture", gv::str(arch));
  w.kv("general.name", gv::str("converted"));
  w.kv(a + "block_count", gv::u32(cfg["num_hidden_layers"]));
  w.kv(a + "context_length", gv::u32(cfg["max_position_embeddings"]));
  w.kv(a + "embedding_length", gv::u32(uint32_t(hidden)));
  w.kv(a + "feed_forward_length", gv::u32(cfg["intermediate_size"]));
  w.kv(a + "attention.head_count", gv::u32(uint32_t(n_head)));
  w.kv(a + "attention.head_count_kv", gv::u32(uint32_t(n_kv)));
  w.kv(a + "rope.freq_base", gv::f32(float(rp["rope_theta"].get<double>())));
  w.kv(a + "attention.layer_norm_rms_epsilon", gv::f32(float(cfg["rms_norm_eps"].get<double>())));
  if (cfg.contains("head_dim")) {
    w.kv(a + "attention.key_length", gv::u32(uint32_t(head_dim)));
    w.kv(a + "attention.value_length", gv::u32(uint32_t(head_dim)));
  }
  w.kv("general.file_type", gv::u32(o.outtype == kGgmlF32 ? 0 : 1));
  if (arch == "llama") {
    w.kv(a + "vocab_size", gv::u32(uint32_t(vocab)));
    w.kv(a + "rope.dimension_count", gv::u32(uint32_t(head_dim)));
  }
  // The tiny models have no tokenizer: a byte-level vocabulary of placeholder tokens.
  std::vector<std::string> tokens;
  for (int i = 0; i < vocab; ++i) tokens.push_back("<t" + std::to_string(i) + ">");
  w.kv("tokenizer.ggml.model", gv::str("gpt2"));
  w.kv("tokenizer.ggml.pre", gv::str("default"));
  w.kv("tokenizer.ggml.tokens", gv::strings(tokens));
  w.kv("tokenizer.ggml.token_type", gv::i32s(std::vector<int32_t>(size_t(vocab), 1)));
  w.kv("tokenizer.ggml.bos_token_id", gv::u32(gen["bos_token_id"]));
  w.kv("tokenizer.ggml.eos_token_id", gv::u32(gen["eos_token_id"]));

  auto ck = SafetensorsCheckpoint::open(dir);
  auto floats = [&](const SafetensorsTensorRef& r) {
    const int64_t n = int64_t(r.info->end - r.info->begin) / int64_t(r.info->element_size);
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = load_as_f32(r.data(), *r.info->dtype, size_t(i));
    return v;
  };
  auto gguf_name = [&](std::string n) {
    const std::pair<const char*, const char*> map[] = {
        {"model.embed_tokens.weight", "token_embd.weight"}, {"model.norm.weight", "output_norm.weight"},
        {"lm_head.weight", "output.weight"}, {"input_layernorm", "attn_norm"}, {"post_attention_layernorm", "ffn_norm"},
        {"self_attn.q_proj", "attn_q"}, {"self_attn.k_proj", "attn_k"}, {"self_attn.v_proj", "attn_v"},
        {"self_attn.o_proj", "attn_output"}, {"self_attn.q_norm", "attn_q_norm"}, {"self_attn.k_norm", "attn_k_norm"},
        {"mlp.gate_proj", "ffn_gate"}, {"mlp.up_proj", "ffn_up"}, {"mlp.down_proj", "ffn_down"}, {"model.layers.", "blk."}};
    for (const auto& [from, to] : map)
      if (auto p = n.find(from); p != std::string::npos) n.replace(p, std::string(from).size(), to);
    return n;
  };
  for (const std::string& name : ck->tensor_names()) {
    const SafetensorsTensorRef r = *ck->find(name);
    std::vector<float> v = floats(r);
    const std::vector<int64_t>& shape = r.info->shape;
    if (arch == "llama" && (name.find("q_proj.") != std::string::npos || name.find("k_proj.") != std::string::npos)) {
      const int heads = name.find("q_proj.") != std::string::npos ? n_head : n_kv;
      v = llama_permute(v, shape[0], shape.size() == 2 ? shape[1] : 1, heads);
    }
    std::vector<uint64_t> dims(shape.rbegin(), shape.rend());
    if (shape.size() == 1 || o.outtype == kGgmlF32) {
      w.tensor(gguf_name(name), dims, kGgmlF32, f32_le(v));
    } else {
      std::vector<uint8_t> b(v.size() * 2);
      for (size_t i = 0; i < v.size(); ++i) store_from_f32(b.data(), DType::kF16, i, v[i]);
      w.tensor(gguf_name(name), dims, kGgmlF16, b);
    }
  }
  if (arch == "llama" && rp.value("rope_type", std::string()) == "llama3" && o.write_rope_freqs)
    w.tensor("rope_freqs.weight", {uint64_t(head_dim / 2)}, kGgmlF32, f32_le(llama3_rope_factors(rp, head_dim)));
  return w.image();
}

}  // namespace pagoda::test
