// A tokenizer described by a GGUF file's tokenizer.ggml.* metadata (llama.cpp's vocabulary keys), handed
// over by the GGUF reader in model/ so that tokenizer/ needs no knowledge of the file format.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
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

// Builds the tokenizer the metadata describes, as llama.cpp reads the same keys:
//  * "gpt2": byte-level BPE over `tokens` and `merges`, split first by the pre-tokenizer `pre` names
//    (gpt2_pre_tokenizer_names() lists those known; "" means "default", with a warning, as in llama.cpp).
//    Each name gets the pre-tokenizer of the Hugging Face tokenizer.json of that model family, which splits
//    text as llama.cpp's regexes for the name do. The llama3 names take a pre-token that is a whole token
//    as is (llama.cpp's ignore_merges). Deliberate difference: "qwen2" also gets the NFC normalizer of
//    Qwen's tokenizer.json, which llama.cpp omits (the two differ only on text not already in NFC).
//  * "llama": SentencePiece BPE: text with spaces as "▁" (and one "▁" before the text and after each
//    special token when add_space_prefix, the default), merges ranked by `scores` (sentencepiece_merges()),
//    characters outside the vocabulary as the byte tokens <0xNN> (type 6).
//  * Token types: 2 (unknown) and 3 (control) become special added tokens, 4 (user-defined) non-special
//    ones; both are matched in the raw text before the model runs, and decode to their text.
//  * BOS/EOS/UNK/PAD ids name the special tokens; add_bos / add_eos default as in llama.cpp: BOS for
//    "llama" and for the llama3 pre-tokenizer names, nothing otherwise. eos_ids() holds the EOS token, the
//    EOT token and the control tokens llama.cpp treats as end of generation by their text ("<|im_end|>",
//    "<|eot_id|>", "<|endoftext|>", ...). The chat template is passed through.
// Throws a config pagoda::Error naming `label` and the key for an unknown model or pre-tokenizer name, an
// id out of range, inconsistent array lengths, a duplicate token, or a merge of tokens not in the list.
Tokenizer tokenizer_from_gguf_vocab(const GgufVocab& vocab);

// The names tokenizer.ggml.pre may hold for a "gpt2" vocabulary, comma-separated (for messages).
std::string gpt2_pre_tokenizer_names();

// The BPE merges, best first, under which BPE over `tokens` gives what SentencePiece's BPE gives with these
// scores: each pair of tokens that concatenate to a token, ranked by that token's score (highest first),
// equal scores by the ids of the left, then the right token (the order of the Hugging Face tokenizer.json
// converted from the same SentencePiece model). PRECOND: scores.size() == tokens.size(), no NaN.
std::vector<std::pair<std::string, std::string>> sentencepiece_merges(const std::vector<std::string>& tokens,
                                                                       const std::vector<float>& scores);

}  // namespace pagoda
