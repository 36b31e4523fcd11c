#include "pagoda/model/quantize_weights.h"

#include <algorithm>
#include <thread>
#include <vector>

#include "pagoda/core/error.h"
#include "pagoda/ops/quant/quant.h"

namespace pagoda {
namespace {

void quantize_matrix(ModelWeights& w, WeightMatrix& m, QuantType q) {
  const QuantTraits tr = quant_traits(q);
  if (m.cols % tr.block_elems != 0)
    throw_config_error("cannot store a ", m.rows, " x ", m.cols, " matrix as ", tr.name, ": rows of ", m.cols,
                       " weights are not whole blocks of ", tr.block_elems);
  const size_t row_bytes = quant_row_bytes(q, m.cols);
  std::vector<uint8_t> out(size_t(m.rows) * row_bytes);
  const unsigned threads = std::max(1u, std::min(std::thread::hardware_concurrency(), 64u));
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      std::vector<float> row(static_cast<size_t>(m.cols));
      for (int64_t r = t; r < m.rows; r += threads) {
        for (int64_t i = 0; i < m.cols; ++i) row[size_t(i)] = load_as_f32(m.data, m.dtype, size_t(r * m.cols + i));
        quantize_row(q, row.data(), out.data() + size_t(r) * row_bytes, m.cols);
      }
    });
  for (auto& th : pool) th.join();
  // Free the dense copy if it is ours (random weights, converted checkpoints).
  for (auto& buf : w.owned)
    if (buf.data() == m.data) std::vector<uint8_t>().swap(buf);
  w.owned.push_back(std::move(out));
  m.data = w.owned.back().data();
  m.quant = q;
}

}  // namespace

void quantize_matrices(ModelWeights& w, QuantType q) {
  PAGODA_CHECK(q != QuantType::kNone, "quantize_matrices: no block format");
  for (LayerWeights& l : w.layers)
    for (WeightMatrix* m : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down}) quantize_matrix(w, *m, q);
  if (w.lm_head.data != w.embed.data) quantize_matrix(w, w.lm_head, q);
}

}  // namespace pagoda
