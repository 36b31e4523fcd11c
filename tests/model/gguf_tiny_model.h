// Test helper: small GGUF models written by the test (hidden 64, 4 q / 2 kv heads of 16, ffn 96, vocab 40,
// 2 layers) whose every tensor value is known, with knobs to drop, add or replace keys and tensors.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gguf_convert.h"
#include "gguf_writer.h"
#include "pagoda/core/error.h"
#include "pagoda/model/gguf_model.h"

namespace pagoda::test {

struct Tiny {
  std::string arch = "llama";
  uint32_t type = kGgmlF32;  // of the matrices: kGgmlF32, kGgmlF16 or kGgmlQ8_0
  bool biases = false;       // q/k/v biases
  bool tied = true;
  std::set<std::string> drop;  // keys and tensors left out
  std::vector<std::pair<std::string, GgufVal>> kv;  // added or replacing
  std::vector<GgufTensorSpec> tensors;               // added
  uint32_t alignment = 0;    // general.alignment when non-zero
};

inline constexpr int kH = 64, kHeads = 4, kKv = 2, kHd = 16, kF = 96, kV = 40, kL = 2;

// Deterministic row-distinct values: element (r, c) of tensor `seed`.
inline float value(int seed, int64_t r, int64_t c) { return float(seed) + 0.01f * float(r) + 0.0001f * float(c); }

inline std::vector<float> matrix(int seed, int64_t rows, int64_t cols) {
  std::vector<float> m(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) m[size_t(r * cols + c)] = value(seed, r, c);
  return m;
}

// Row r of a Q8_0 "matrix": every byte r's pattern, so rows are told apart after permutation.
inline std::vector<uint8_t> q8_rows(int seed, int64_t rows, int64_t cols) {
  const size_t row_bytes = size_t(cols / 32 * 34);
  std::vector<uint8_t> b(size_t(rows) * row_bytes);
  for (int64_t r = 0; r < rows; ++r)
    for (size_t i = 0; i < row_bytes; ++i) b[size_t(r) * row_bytes + i] = uint8_t(seed * 31 + r * 7 + int(i));
  return b;
}

inline std::vector<uint8_t> encode(const std::vector<float>& v, uint32_t type) {
  if (type == kGgmlF32) return f32_le(v);
  std::vector<uint8_t> b(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) store_from_f32(b.data(), DType::kF16, i, v[i]);
  return b;
}

// Tensor seeds by name, so tests can recompute what a tensor holds.
inline int seed_of(const std::string& name) {
  int s = 0;
  for (char ch : name) s = (s * 131 + ch) % 97;
  return s + 1;
}

inline GgufWriter tiny_writer(const Tiny& t) {
  GgufWriter w;
  std::map<std::string, GgufVal> kv;
  const std::string a = t.arch + ".";
  kv["general.architecture"] = gv::str(t.arch);
  kv[a + "block_count"] = gv::u32(kL);
  kv[a + "context_length"] = gv::u32(512);
  kv[a + "embedding_length"] = gv::u32(kH);
  kv[a + "feed_forward_length"] = gv::u32(kF);
  kv[a + "attention.head_count"] = gv::u32(kHeads);
  kv[a + "attention.head_count_kv"] = gv::u32(kKv);
  kv[a + "rope.freq_base"] = gv::f32(10000.0f);
  kv[a + "attention.layer_norm_rms_epsilon"] = gv::f32(1e-5f);
  if (t.arch == "llama") kv[a + "vocab_size"] = gv::u32(kV);
  kv["tokenizer.ggml.model"] = gv::str("gpt2");
  std::vector<std::string> toks;
  for (int i = 0; i < kV; ++i) toks.push_back(std::string("t").append(std::to_string(i)));  // GCC 12 -Wrestrict: not "t" + string
  kv["tokenizer.ggml.tokens"] = gv::strings(toks);
  kv["tokenizer.ggml.bos_token_id"] = gv::u32(1);
  kv["tokenizer.ggml.eos_token_id"] = gv::u32(2);
  if (t.alignment) kv["general.alignment"] = gv::u32(t.alignment);
  for (const auto& [k, v] : t.kv) kv[k] = v;
  for (const auto& [k, v] : kv)
    if (!t.drop.count(k)) w.kv(k, v);

  auto add_matrix = [&](const std::string& name, int64_t rows, int64_t cols, int permute_heads) {
    if (t.drop.count(name)) return;
    if (t.type == kGgmlQ8_0) {
      std::vector<uint8_t> b = q8_rows(seed_of(name), rows, cols);
      if (permute_heads) {  // permute rows of bytes: via float row indices
        std::vector<float> idx(static_cast<size_t>(rows));
        for (int64_t r = 0; r < rows; ++r) idx[size_t(r)] = float(r);
        idx = llama_permute(idx, rows, 1, permute_heads);
        const size_t rb = b.size() / size_t(rows);
        std::vector<uint8_t> p(b.size());
        for (int64_t r = 0; r < rows; ++r) std::memcpy(&p[size_t(r) * rb], &b[size_t(idx[size_t(r)]) * rb], rb);
        b = p;
      }
      w.tensor(name, {uint64_t(cols), uint64_t(rows)}, kGgmlQ8_0, b);
      return;
    }
    std::vector<float> m = matrix(seed_of(name), rows, cols);
    if (permute_heads) m = llama_permute(m, rows, cols, permute_heads);
    w.tensor(name, {uint64_t(cols), uint64_t(rows)}, t.type, encode(m, t.type));
  };
  auto add_vector = [&](const std::string& name, int64_t n, int permute_heads) {
    if (t.drop.count(name)) return;
    std::vector<float> v = matrix(seed_of(name), n, 1);
    if (permute_heads) v = llama_permute(v, n, 1, permute_heads);
    w.tensor(name, {uint64_t(n)}, kGgmlF32, f32_le(v));
  };
  const bool llama = t.arch == "llama";
  add_matrix("token_embd.weight", kV, kH, 0);
  add_vector("output_norm.weight", kH, 0);
  if (!t.tied) add_matrix("output.weight", kV, kH, 0);
  for (int l = 0; l < kL; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    add_vector(b + "attn_norm.weight", kH, 0);
    add_vector(b + "ffn_norm.weight", kH, 0);
    add_matrix(b + "attn_q.weight", kHeads * kHd, kH, llama ? kHeads : 0);
    add_matrix(b + "attn_k.weight", kKv * kHd, kH, llama ? kKv : 0);
    add_matrix(b + "attn_v.weight", kKv * kHd, kH, 0);
    add_matrix(b + "attn_output.weight", kH, kHeads * kHd, 0);
    if (t.biases) {
      add_vector(b + "attn_q.bias", kHeads * kHd, llama ? kHeads : 0);
      add_vector(b + "attn_k.bias", kKv * kHd, llama ? kKv : 0);
      add_vector(b + "attn_v.bias", kKv * kHd, 0);
    }
    if (t.arch == "qwen3") {
      add_vector(b + "attn_q_norm.weight", kHd, 0);
      add_vector(b + "attn_k_norm.weight", kHd, 0);
    }
    add_matrix(b + "ffn_gate.weight", kF, kH, 0);
    add_matrix(b + "ffn_up.weight", kF, kH, 0);
    add_matrix(b + "ffn_down.weight", kH, kF, 0);
  }
  for (const auto& s : t.tensors) w.tensor(s);
  return w;
}

// The image must outlive the file: tests keep both.
struct Image {
  std::vector<uint8_t> bytes;
  std::shared_ptr<const GgufFile> file;
};
inline Image open_tiny(const Tiny& t) {
  Image im{tiny_writer(t).image(), nullptr};
  im.file = GgufFile::view(im.bytes.data(), im.bytes.size(), "tiny.gguf");
  return im;
}
inline ModelConfig config_of(const Tiny& t) { return gguf_model_config(*open_tiny(t).file); }

template <typename F>
void expect_config_error(F&& f, const std::string& what, const std::string& file = "tiny.gguf") {
  try {
    f();
    ADD_FAILURE() << "no error; expected " << what;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig) << e.what();
    EXPECT_THAT(e.what(), ::testing::AllOf(::testing::HasSubstr(file), ::testing::HasSubstr(what)));
  }
}

}  // namespace pagoda::test
