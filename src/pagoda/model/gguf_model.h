// Models from GGUF files: the config from the `{arch}.*` keys and the tensor table, the weights from
// llama.cpp's tensor names, and the tokenizer.ggml.* metadata handed to tokenizer/ as a GgufVocab.
//
// Architectures: general.architecture "llama" (Llama, Mistral and SmolLM files: llama.cpp converts
// MistralForCausalLM to "llama" too), "qwen2" and "qwen3".
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "pagoda/core/dtype.h"
#include "pagoda/model/gguf.h"
#include "pagoda/model/model_config.h"
#include "pagoda/model/model_weights.h"
#include "pagoda/tokenizer/gguf_vocab.h"

namespace pagoda {

// True when `path` is a regular file that starts with the GGUF magic or whose name ends in ".gguf".
bool is_gguf_path(const std::string& path);

// The config of a GGUF model. Keys ({arch} = general.architecture): block_count, embedding_length,
// feed_forward_length, attention.head_count, attention.head_count_kv, attention.key_length (else
// embedding_length / head_count), attention.value_length and rope.dimension_count (both must equal the head
// size), attention.layer_norm_rms_epsilon, rope.freq_base, context_length, vocab_size (else the length of
// tokenizer.ggml.tokens, else token_embd.weight's rows), rope.scaling.type / rope.scaling.factor /
// rope.scale_linear (none or linear), attention.sliding_window (with attention.sliding_window_pattern);
// tokenizer.ggml.bos_token_id, eos_token_id and eot_token_id (both end a sequence). From the tensors: tied
// embeddings when output.weight is absent, q/k/v and output biases when blk.0 has them, Qwen3's q/k norms, and
// the per-frequency RoPE divisors of rope_freqs.weight (llama.cpp's form of Llama-3 RoPE scaling).
// Throws a config pagoda::Error naming the file and the key: a missing or mistyped key, a size outside
// model_config.h's bounds or inconsistent with the others, an unsupported feature (mixture of experts,
// partial rotary, YaRN/LongRoPE scaling, per-layer sizes that differ).
ModelConfig gguf_model_config(const GgufFile& file);

// Loads every tensor the config needs: token_embd, output_norm, output (unless tied), and per block
// blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, attn_q.bias, attn_k.bias, attn_v.bias,
// attn_output.bias, attn_q_norm, attn_k_norm, ffn_norm, ffn_gate, ffn_up, ffn_down}. Matrices stay views
// into the mapped file: F32/F16/BF16 as dtype views (converted into owned memory when `dtype` differs, or
// when the file's alignment leaves them misaligned), quantized ones as WeightMatrix::quant rows, never
// converted. Norms and biases become float32 (dequantized when stored quantized).
// llama.cpp's converter permutes the rows of q and k (and their biases) of "llama" files so that its
// interleaved RoPE applies; pagoda's RoPE is Hugging Face's rotate-half, so those rows are put back in
// Hugging Face order, in owned memory. qwen2/qwen3 files are stored unpermuted.
// Throws a config pagoda::Error naming the tensor and file: missing, wrong dims, or a tensor pagoda would
// not use (an MLP bias, a fused qkv, ...): ignoring it would compute a different model.
ModelWeights load_gguf_weights(const ModelConfig& config, std::shared_ptr<const GgufFile> file, std::optional<DType> dtype);

// The tokenizer.ggml.* metadata and tokenizer.chat_template; nullopt when the file has no
// tokenizer.ggml.tokens. Throws a config pagoda::Error naming the key when one has the wrong type or a token
// id is not in [0, 2^31).
std::optional<GgufVocab> read_gguf_vocab(const GgufFile& file);

}  // namespace pagoda
