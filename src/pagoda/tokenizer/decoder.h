// Decoders of tokenizer.json ("decoder"): ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip,
// Sequence. Internal to pagoda_tokenizer.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "pagoda/tokenizer/json_util.h"

namespace pagoda::tokenizer_detail {

// What the byte-producing decoders (ByteLevel, ByteFallback) do with bytes that are not valid UTF-8.
enum class InvalidBytes {
  kReplace,  // U+FFFD, exactly as Hugging Face (the text decode() returns)
  kKeep,     // pass them through (the incremental detokenizer finds character boundaries in raw bytes)
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Hugging Face's decode_chain: rewrites the list of token strings; the text is their concatenation.
  virtual void decode_chain(std::vector<std::string>* tokens, InvalidBytes invalid) const = 0;
};

// `spec` is the "decoder" object; null gives nullptr (tokens are then joined with spaces).
std::unique_ptr<Decoder> parse_decoder(const Json& spec, const std::string& where);

}  // namespace pagoda::tokenizer_detail
