#include "pagoda/model/cuda/cuda_weights.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "pagoda/ops/cuda/random_fill.h"

namespace pagoda {
namespace {

constexpr size_t kAlign = 256;
size_t align_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// Converts `n` elements of `src` (dtype `from`) into `dst` (dtype `to`).
void convert_host(const void* src, DType from, void* dst, DType to, size_t n) {
  if (from == to) {
    std::memcpy(dst, src, n * dtype_size(to));
    return;
  }
  for (size_t i = 0; i < n; ++i) store_from_f32(dst, to, i, load_as_f32(src, from, i));
}

}  // namespace

CudaWeights upload_weights(const LoadedModel& model, DType dt, cudaStream_t stream) {
  CudaWeights m;
  const ModelConfig& c = model.config;
  const size_t es = dtype_size(dt);
  const int H = c.hidden_size, D = c.head_dim, F = c.intermediate_size, V = c.vocab_size;
  struct Piece {
    void** dst;
    size_t elems;
    std::function<void(void*)> fill;  // writes `elems` elements of dt into the host staging
    bool is_norm = false;             // dummy init: 1.0 instead of N(0, 0.02^2)
  };
  std::vector<Piece> pieces;
  const ModelWeights* w = model.weights.get();
  auto matrix = [&](void** dst, std::vector<const WeightMatrix*> parts, size_t elems) {
    pieces.push_back({dst, elems, w ? std::function<void(void*)>([parts, dt](void* out) {
                        size_t at = 0;
                        for (auto* p : parts) {
                          size_t k = size_t(p->rows * p->cols);
                          convert_host(p->data, p->dtype, static_cast<uint8_t*>(out) + at * dtype_size(dt), dt, k);
                          at += k;
                        }
                      }) : nullptr, false});
  };
  auto vec = [&](void** dst, std::vector<const std::vector<float>*> parts, size_t elems, bool is_norm) {
    pieces.push_back({dst, elems, w ? std::function<void(void*)>([parts, dt](void* out) {
                        size_t at = 0;
                        for (auto* p : parts) {
                          convert_host(p->data(), DType::kF32, static_cast<uint8_t*>(out) + at * dtype_size(dt), dt, p->size());
                          at += p->size();
                        }
                      }) : nullptr, is_norm});
  };
  const size_t HQ = size_t(c.num_heads) * D, HK = size_t(c.num_kv_heads) * D;
  m.layers.resize(size_t(c.num_layers));
  matrix(&m.embed, {w ? &w->embed : nullptr}, size_t(V) * H);
  if (w ? w->lm_head.data != w->embed.data : !c.tie_word_embeddings) matrix(&m.lm_head, {w ? &w->lm_head : nullptr}, size_t(V) * H);
  vec(&m.final_norm, {w ? &w->final_norm : nullptr}, size_t(H), true);
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights* lw = w ? &w->layers[size_t(l)] : nullptr;
    CudaLayerWeights& lp = m.layers[size_t(l)];
    vec(&lp.input_norm, {lw ? &lw->input_norm : nullptr}, size_t(H), true);
    vec(&lp.post_norm, {lw ? &lw->post_attn_norm : nullptr}, size_t(H), true);
    if (c.qk_norm) {
      vec(&lp.q_norm, {lw ? &lw->q_norm : nullptr}, size_t(D), true);
      vec(&lp.k_norm, {lw ? &lw->k_norm : nullptr}, size_t(D), true);
    }
    if (lw ? !lw->q_bias.empty() : c.attention_bias)
      vec(&lp.qkv_bias, {lw ? &lw->q_bias : nullptr, lw ? &lw->k_bias : nullptr, lw ? &lw->v_bias : nullptr}, HQ + 2 * HK, false);
    if (lw && !lw->o_bias.empty()) vec(&lp.o_bias, {&lw->o_bias}, size_t(H), false);
    matrix(&lp.w_qkv, {lw ? &lw->q : nullptr, lw ? &lw->k : nullptr, lw ? &lw->v : nullptr}, (HQ + 2 * HK) * H);
    matrix(&lp.w_o, {lw ? &lw->o : nullptr}, size_t(H) * HQ);
    matrix(&lp.w_gate_up, {lw ? &lw->gate : nullptr, lw ? &lw->up : nullptr}, 2 * size_t(F) * H);
    matrix(&lp.w_down, {lw ? &lw->down : nullptr}, size_t(H) * F);
  }
  size_t total = 0;
  std::vector<size_t> offsets;
  for (const auto& p : pieces) {
    offsets.push_back(total);
    total += align_up(p.elems * es);
  }
  m.buffer = DeviceBuffer(total);
  {
    size_t staging_bytes = 0;
    if (w)
      for (const auto& p : pieces) staging_bytes = std::max(staging_bytes, p.elems * es);
    std::vector<uint8_t> staging(staging_bytes);
    for (size_t i = 0; i < pieces.size(); ++i) {
      void* dst = static_cast<uint8_t*>(m.buffer.data()) + offsets[i];
      *pieces[i].dst = dst;
      if (w) {
        pieces[i].fill(staging.data());
        m.buffer.upload(staging.data(), pieces[i].elems * es, offsets[i]);
      } else {
        RandomFillParams rf;
        rf.data = dst;
        rf.n = int64_t(pieces[i].elems);
        rf.dtype = dt;
        rf.seed = uint64_t(i) + 1;
        rf.mean = pieces[i].is_norm ? 1.0f : 0.0f;
        rf.std = pieces[i].is_norm ? 0.0f : 0.02f;
        random_fill(rf, stream);
      }
    }
    PAGODA_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  if (!m.lm_head) m.lm_head = m.embed;
  return m;
}

}  // namespace pagoda
