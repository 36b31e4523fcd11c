// Hugging Face tokenizers for pagoda: load a tokenizer.json, encode text to token ids, decode ids to text,
// and decode a stream of generated ids incrementally.
//
// Supported: BPE models, both byte-level (GPT-2, Llama 3, Qwen 2/2.5/3) and SentencePiece-style with
// byte fallback (Llama 2, Mistral, llama2.c models), and WordPiece models (BERT family), with the
// components those files use:
//   normalizers      NFC, NFD, NFKC, NFKD, Prepend, Replace, BertNormalizer, Sequence
//   pre-tokenizers   ByteLevel, Split (String or Regex pattern), Metaspace, Digits, BertPreTokenizer, Sequence
//   decoders         ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, WordPiece, Sequence
//   post-processors  TemplateProcessing, ByteLevel, BertProcessing, RobertaProcessing, Sequence
// Anything else (Unigram/WordLevel models, other components) is rejected when loading, with a
// pagoda::Error naming the file and the component. tokenizer.json's truncation and padding are not
// applied (callers truncate: the embedder at the model's max_seq_length).
//
// Results match the Rust `tokenizers` library (0.23.2; checked on the llama.cpp vectors, the chat-template
// cases and ~30k random strings over the five shipped files and 38 variants of their components): added
// and special tokens are split off first (lstrip/rstrip/single_word/normalized as there), then each piece
// is normalized, pre-tokenized and run through BPE. Known differences:
//  * Unicode version: regex classes come from PCRE2 10.42 (Unicode 14), so characters assigned since
//    (e.g. the Garay script, CJK extension H) are not \p{L} here and may split differently.
//  * Added token ids are taken from the file; tokenizers re-numbers added tokens on load when a file's ids
//    disagree with its own numbering (never the case for files it saved itself).
//
// Speed: tokenizer_test's EncodeThroughput logs it. BPE runs per pre-tokenized word with a word cache, so
// vocabularies without a pre-tokenizer (Llama 2's) run BPE over the whole text at once and encode a few
// times slower; loading is dominated by JSON parsing. Encoding and decoding are thread-safe.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda {

struct GgufVocab;

class Tokenizer {
 public:
  // `path` is a tokenizer.json or the folder that holds one. From the same folder, when present:
  // tokenizer_config.json (bos/eos tokens, add_bos_token/add_eos_token, added_tokens_decoder,
  // chat_template), special_tokens_map.json (special tokens the config does not name),
  // chat_template.jinja (when the config has no template) and generation_config.json (its eos_token_id
  // joins eos_ids()). Throws pagoda::Error for a missing file, malformed JSON or an unsupported component.
  static Tokenizer from_file(const std::filesystem::path& path);
  // Same, with the tokenizer_config.json given explicitly (e.g. Qwen2.5's config over Qwen2's
  // tokenizer.json); the other optional files are still looked up beside `tokenizer_config`.
  static Tokenizer from_files(const std::filesystem::path& tokenizer_json,
                              const std::filesystem::path& tokenizer_config);
  // The same from the text of tokenizer.json and of tokenizer_config.json ("" = no such file), with no
  // file I/O (tests and the fuzz entry point); errors name the inputs "tokenizer.json" and
  // "tokenizer_config.json". Every loader above also refuses JSON nested deeper than kMaxJsonDepth and
  // files larger than kMaxTokenizerFileBytes / kMaxConfigFileBytes (core/read_file.h).
  static Tokenizer from_json_text(std::string_view tokenizer_json, std::string_view tokenizer_config_json = {});

  // Text -> ids. add_special_tokens: add what the tokenizer adds around a sequence (Llama's BOS): the
  // post_processor's template, overridden by tokenizer_config's add_bos_token / add_eos_token when set.
  // parse_special: special tokens written in the text ("<|im_start|>") become their ids; pass false for
  // untrusted text so it cannot forge control tokens (non-special added tokens are still matched, as in
  // Hugging Face's split_special_tokens). Invalid UTF-8 in `text` is first replaced by U+FFFD.
  std::vector<int> encode(std::string_view text, bool add_special_tokens, bool parse_special = true) const;

  // Ids -> text, through the tokenizer's decoder. Ids that name no token are skipped; skip_special_tokens
  // also drops special tokens. Always returns valid UTF-8 (invalid byte sequences become U+FFFD).
  // tokenizer_config's clean_up_tokenization_spaces is not applied (it is lossy and breaks streaming).
  std::string decode(std::span<const int> ids, bool skip_special_tokens) const;
  std::string decode(const std::vector<int>& ids, bool skip_special_tokens) const {
    return decode(std::span<const int>(ids), skip_special_tokens);
  }

  // Largest token id + 1, over the model vocabulary and the added tokens.
  int vocab_size() const;
  std::optional<int> token_to_id(std::string_view token) const;
  // The token's string as stored in tokenizer.json (byte-level or "▁" form); "" for an id with no token.
  std::string id_to_token(int id) const;
  std::optional<int> bos_id() const;
  // The tokenizer's eos token, then generation_config.json's eos_token_id entries; no duplicates.
  std::vector<int> eos_ids() const;
  // True for added tokens marked special and for the tokens the config names (bos, eos, unk, pad, ...).
  bool is_special(int id) const;
  // The Jinja chat template ("" when the tokenizer has none).
  const std::string& chat_template() const;
  // The bos / eos token strings tokenizer_config.json (or special_tokens_map.json) names, as chat
  // templates see them; "" when it names none.
  const std::string& bos_token() const;
  const std::string& eos_token() const;
  // Ids encode(..., add_special_tokens = true) puts before / after the text.
  const std::vector<int>& special_prefix_ids() const;
  const std::vector<int>& special_suffix_ids() const;

 private:
  friend class IncrementalDetokenizer;  // decodes windows with invalid bytes kept
  friend Tokenizer tokenizer_from_gguf_vocab(const GgufVocab& vocab);  // gguf_vocab.h: builds an Impl directly
  struct Impl;
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;  // immutable and shared by copies (copying a Tokenizer is cheap)
};

// Streaming detokenizer for generation: feed ids one at a time, get the text they complete. Chunks are
// always valid UTF-8: a character split over several tokens (byte-level pieces, <0xNN> byte-fallback
// tokens) is held back until it is whole. Like vLLM it decodes a sliding window of ids (prefix and read
// offsets), so SentencePiece's leading-space stripping comes out as in decode() of the whole sequence, and
// a step costs a few ids, not the whole sequence. When the ids' bytes are valid UTF-8 (always the case for
// ids from encode() and for normal generations) the chunks concatenate to exactly decode(all ids); invalid
// bytes become U+FFFD in both, but decode() follows Hugging Face in replacing a whole run of byte-fallback
// tokens, the stream only the invalid bytes.
class IncrementalDetokenizer {
 public:
  // `prompt_ids` give left context (the first generated token is decoded after them, as in the full
  // text); their own text is not emitted.
  explicit IncrementalDetokenizer(Tokenizer tokenizer, bool skip_special_tokens = true,
                                  std::span<const int> prompt_ids = {});

  // Adds one id; returns the newly completed text (often "", e.g. mid-character).
  std::string add(int id);
  // Returns the text still held back (an incomplete character at the very end becomes U+FFFD). Adding
  // more ids afterwards continues the stream.
  std::string finish();
  // For logprobs, instead of add(): the raw bytes `id` adds to the text, held back never, so a piece may be
  // part of a UTF-8 character (a byte-fallback or byte-level token) or "" (a skipped special token). The
  // pieces of a stream concatenate to the bytes whose lossy form add() emits. Do not mix with add().
  std::string add_piece(int id);
  // The bytes add_piece(id) would return, without adding it (the text of a top-logprobs alternative).
  std::string peek_piece(int id) const;
  const std::vector<int>& ids() const { return ids_; }

 private:
  std::string advance(bool final);
  // Decode of ids_[prefix_offset_:end] with invalid bytes kept.
  std::string window_bytes(size_t end) const;

  Tokenizer tokenizer_;
  bool skip_special_tokens_;
  std::vector<int> ids_;
  size_t prefix_offset_ = 0;  // start of the decoding window
  size_t read_offset_ = 0;    // ids before this are emitted
};

}  // namespace pagoda
