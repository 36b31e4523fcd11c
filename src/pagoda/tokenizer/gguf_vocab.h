// A tokenizer described by a GGUF file's tokenizer.ggml.* metadata (llama.cpp's vocabulary keys), handed
// over by the GGUF reader in model/ so that tokenizer/ needs no knowledge of the file format.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pagoda/tokenizer/tokenizer.h"

namespace pagoda {

struct GgufVocab {
  std::string model;                   // tokenizer.ggml.model: "gpt2" (byte-level BPE) or "llama" (SentencePiece)
  std::string pre;                     // tokenizer.ggml.pre: "llama-bpe", "qwen2", "smollm", "gpt-2", "default", ...
  std::vector<std::string> tokens;     // tokenizer.ggml.tokens
  std::vector<float> scores;           // tokenizer.ggml.scores (SentencePiece), may be empty
  std::vector<int32_t> token_types;    // tokenizer.ggml.token_type: 1 normal, 2 unknown, 3 control,
                                       // 4 user-defined, 5 unused, 6 byte; may be empty
  std::vector<std::string> merges;     // tokenizer.ggml.merges ("a b"), BPE only
  std::optional<int> bos_id, eos_id, unk_id, pad_id, eot_id;
  std::optional<bool> add_bos, add_eos, add_space_prefix;
  std::string chat_template;           // tokenizer.chat_template, "" when absent
  std::string label;                   // the file, for error messages
};

// Builds the tokenizer the metadata describes. Throws a config pagoda::Error naming `label` and the key
// for an unknown model or pre-tokenizer name, an id out of range, or inconsistent array lengths.
Tokenizer tokenizer_from_gguf_vocab(const GgufVocab& vocab);

}  // namespace pagoda
