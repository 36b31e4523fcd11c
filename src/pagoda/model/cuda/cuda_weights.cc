#include "pagoda/model/cuda/cuda_weights.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "pagoda/ops/cuda/quant_quantize.h"
#include "pagoda/ops/cuda/random_fill.h"

namespace pagoda {
namespace {

constexpr size_t kAlign = 256;
size_t align_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// Random quantized weights are drawn as float32 into a scratch buffer of at most this many elements, a
// few rows at a time, and quantized from there.
constexpr size_t kScratchElems = size_t(1) << 25;

// Converts `n` elements of `src` (dtype `from`) into `dst` (dtype `to`).
void convert_host(const void* src, DType from, void* dst, DType to, size_t n) {
  if (from == to) {
    std::memcpy(dst, src, n * dtype_size(to));
    return;
  }
  for (size_t i = 0; i < n; ++i) store_from_f32(dst, to, i, load_as_f32(src, from, i));
}

// A region of the allocation: its size, how its bytes are made (from host weights, or at random on the
// device), and where its address goes.
struct Piece {
  size_t bytes = 0;
  std::function<void(void*)> fill;   // host weights: writes `bytes` bytes into the staging buffer
  enum class Random { kNorm, kDense, kQuant } random = Random::kDense;
  QuantType quant = QuantType::kNone;  // Random::kQuant: the format, of rows x cols weights
  int64_t rows = 0;
  int cols = 0;
  std::function<void(void*)> place;  // records the piece's device address
};

}  // namespace

CudaWeights upload_weights(const LoadedModel& model, DType dt, cudaStream_t stream) {
  CudaWeights m;
  const ModelConfig& c = model.config;
  const size_t es = dtype_size(dt);
  const int H = c.hidden_size, D = c.head_dim, F = c.intermediate_size, V = c.vocab_size;
  const ModelWeights* w = model.weights.get();
  std::vector<Piece> pieces;

  // A matrix of `parts` (host weights, or nullptr each for random ones of `part_rows` rows) joined by rows.
  // Consecutive parts stored alike share a piece (and a CudaMatrix part); a change of format starts a new,
  // aligned one. Random matrices are quantized to `random_quant` (kNone: dense).
  auto matrix = [&](CudaMatrix* M, std::vector<const WeightMatrix*> parts, std::vector<int> part_rows, int cols,
                    QuantType random_quant) {
    M->cols = cols;
    M->rows = 0;
    for (int r : part_rows) M->rows += r;
    size_t i = 0;
    while (i < parts.size()) {
      const QuantType q = w ? parts[i]->quant : random_quant;
      size_t j = i;
      int rows = 0;
      std::vector<const WeightMatrix*> group;
      while (j < parts.size() && (w ? parts[j]->quant : random_quant) == q) {
        rows += part_rows[j];
        group.push_back(parts[j]);
        ++j;
      }
      const size_t row_bytes = q == QuantType::kNone ? size_t(cols) * es : quant_row_bytes(q, cols);
      Piece p;
      p.bytes = size_t(rows) * row_bytes;
      if (w)
        p.fill = [group, dt, row_bytes](void* out) {
          uint8_t* dst = static_cast<uint8_t*>(out);
          for (const WeightMatrix* g : group) {
            const size_t n = size_t(g->rows) * size_t(g->cols);
            if (g->quant != QuantType::kNone) std::memcpy(dst, g->data, size_t(g->rows) * row_bytes);
            else convert_host(g->data, g->dtype, dst, dt, n);
            dst += size_t(g->rows) * row_bytes;
          }
        };
      p.random = q == QuantType::kNone ? Piece::Random::kDense : Piece::Random::kQuant;
      p.quant = q;
      p.rows = rows;
      p.cols = cols;
      p.place = [M, q, rows](void* ptr) { M->parts.push_back({ptr, q, rows}); };
      pieces.push_back(std::move(p));
      i = j;
    }
  };
  auto vec = [&](void** dst, std::vector<const std::vector<float>*> parts, size_t elems, bool is_norm) {
    Piece p;
    p.bytes = elems * es;
    if (w)
      p.fill = [parts, dt](void* out) {
        size_t at = 0;
        for (auto* v : parts) {
          convert_host(v->data(), DType::kF32, static_cast<uint8_t*>(out) + at * dtype_size(dt), dt, v->size());
          at += v->size();
        }
      };
    p.random = is_norm ? Piece::Random::kNorm : Piece::Random::kDense;
    p.rows = 1;
    p.cols = int(elems);
    p.place = [dst](void* ptr) { *dst = ptr; };
    pieces.push_back(std::move(p));
  };

  const QuantType rq = model.random_weight_quant;
  const int HQ = c.num_heads * D, HK = c.num_kv_heads * D;
  m.layers.resize(size_t(c.num_layers));
  matrix(&m.embed, {w ? &w->embed : nullptr}, {V}, H, QuantType::kNone);  // random embeddings stay dense
  const bool tied = w ? w->lm_head.data == w->embed.data : c.tie_word_embeddings;
  if (!tied) matrix(&m.lm_head, {w ? &w->lm_head : nullptr}, {V}, H, rq);
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
      vec(&lp.qkv_bias, {lw ? &lw->q_bias : nullptr, lw ? &lw->k_bias : nullptr, lw ? &lw->v_bias : nullptr},
          size_t(HQ + 2 * HK), false);
    if (lw && !lw->o_bias.empty()) vec(&lp.o_bias, {&lw->o_bias}, size_t(H), false);
    matrix(&lp.w_qkv, {lw ? &lw->q : nullptr, lw ? &lw->k : nullptr, lw ? &lw->v : nullptr}, {HQ, HK, HK}, H, rq);
    matrix(&lp.w_o, {lw ? &lw->o : nullptr}, {H}, HQ, rq);
    matrix(&lp.w_gate_up, {lw ? &lw->gate : nullptr, lw ? &lw->up : nullptr}, {F, F}, H, rq);
    matrix(&lp.w_down, {lw ? &lw->down : nullptr}, {H}, F, rq);
  }

  size_t total = 0;
  std::vector<size_t> offsets;
  for (const auto& p : pieces) {
    offsets.push_back(total);
    total += align_up(p.bytes);
  }
  m.buffer = DeviceBuffer(total);
  size_t staging_bytes = 0, scratch_elems = 0;
  for (const auto& p : pieces) {
    if (w) staging_bytes = std::max(staging_bytes, p.bytes);
    else if (p.random == Piece::Random::kQuant)
      scratch_elems = std::max(scratch_elems, std::min(kScratchElems, size_t(p.rows) * size_t(p.cols)));
  }
  std::vector<uint8_t> staging(staging_bytes);
  DeviceBuffer scratch(scratch_elems * sizeof(float));
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece& p = pieces[i];
    uint8_t* dst = static_cast<uint8_t*>(m.buffer.data()) + offsets[i];
    p.place(dst);
    if (w) {
      p.fill(staging.data());
      m.buffer.upload(staging.data(), p.bytes, offsets[i]);
      continue;
    }
    RandomFillParams rf;
    rf.seed = uint64_t(i) + 1;
    if (p.random != Piece::Random::kQuant) {
      rf.data = dst;
      rf.n = int64_t(p.bytes / es);
      rf.dtype = dt;
      rf.mean = p.random == Piece::Random::kNorm ? 1.0f : 0.0f;
      rf.std = p.random == Piece::Random::kNorm ? 0.0f : 0.02f;
      random_fill(rf, stream);
      continue;
    }
    // N(0, 0.02^2) floats, quantized a chunk of rows at a time.
    const int64_t chunk_rows = std::max<int64_t>(1, int64_t(scratch_elems) / p.cols);
    const size_t row_bytes = quant_row_bytes(p.quant, p.cols);
    for (int64_t r0 = 0; r0 < p.rows; r0 += chunk_rows) {
      const int64_t rows = std::min(chunk_rows, p.rows - r0);
      rf.data = scratch.data();
      rf.n = rows * p.cols;
      rf.dtype = DType::kF32;
      rf.seed = (uint64_t(i) + 1) * 0x9E3779B97F4A7C15ull + uint64_t(r0);
      rf.mean = 0.0f;
      rf.std = 0.02f;
      random_fill(rf, stream);
      quant_quantize({.x = scratch.as<float>(), .out = dst + size_t(r0) * row_bytes, .type = p.quant, .rows = rows,
                      .cols = p.cols},
                     stream);
    }
  }
  PAGODA_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (tied) m.lm_head = m.embed;
  return m;
}

}  // namespace pagoda
