// Quantizing a model's linear layers in host memory (the CPU side of the quantized built-ins such as
// dummy:llama3-8b-q4_k): every layer matrix and an untied lm_head into GGML blocks with ops/quant's
// quantize_row; the embedding, norms and biases stay as they are.
#pragma once

#include "pagoda/core/quant_type.h"
#include "pagoda/model/model_weights.h"

namespace pagoda {

// Replaces each matrix by its quantized rows (owned by `w`) and frees the dense copy when `w` owned it.
// Threads over rows. Throws a config pagoda::Error when a matrix's columns are not whole blocks of `q`.
void quantize_matrices(ModelWeights& w, QuantType q);

}  // namespace pagoda
