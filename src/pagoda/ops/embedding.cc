#include "pagoda/ops/embedding.h"

#include "pagoda/core/error.h"
#include "pagoda/ops/convert.h"
#include "pagoda/ops/quant/quant.h"

namespace pagoda {

void embedding_lookup(const EmbeddingParams& p, ThreadPool* pool) {
  for (int64_t t = 0; t < p.num_tokens; ++t)
    if (p.ids[t] < 0 || p.ids[t] >= p.vocab)
      throw_runtime_error("token id ", p.ids[t], " at position ", t, " is outside the vocabulary [0, ", p.vocab, ")");
  if (p.quant != QuantType::kNone) {
    PAGODA_CHECK(p.hidden % quant_traits(p.quant).block_elems == 0, "embedding: hidden ", p.hidden, " is not whole ",
                 quant_traits(p.quant).name, " blocks");
    const size_t row_bytes = quant_row_bytes(p.quant, p.hidden);
    parallel_for(pool, p.num_tokens, 64, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t)
        dequantize_row(p.quant, static_cast<const uint8_t*>(p.table) + size_t(p.ids[t]) * row_bytes, p.out + t * p.hidden,
                       p.hidden);
    });
    return;
  }
  parallel_for(pool, p.num_tokens, 64, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) convert_to_f32(p.table, p.dtype, int64_t(p.ids[t]) * p.hidden, p.hidden, p.out + t * p.hidden);
  });
}

}  // namespace pagoda
