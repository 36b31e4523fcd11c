// Streaming detokenization with vLLM's prefix/read offsets, over raw bytes.
//
// Each step decodes the window ids_[prefix_offset_:] twice, without and with the unread ids
// ids_[read_offset_:], and emits the difference. Both decodes start at the same id, so a decoder that treats
// its first token specially (SentencePiece's leading-space Strip, Metaspace) does so identically in both, and
// the difference is exactly what the unread ids add to the full text. The windows are decoded with invalid
// bytes kept (InvalidBytes::kKeep), so the shorter decode is a byte prefix of the longer one and a character
// cut at the end is seen as such, instead of guessing from a trailing U+FFFD as vLLM does.
#include "pagoda/tokenizer/tokenizer.h"
#include "pagoda/tokenizer/tokenizer_impl.h"
#include "pagoda/tokenizer/unicode.h"

namespace pagoda {

using namespace tokenizer_detail;

namespace {

// vLLM's INITIAL_INCREMENTAL_DETOKENIZATION_OFFSET: prompt ids kept as left context of the first window.
constexpr size_t kPromptContextIds = 5;
// How far the first window may be widened to start on a character.
constexpr size_t kMaxPromptContextIds = 16;

bool starts_inside_character(std::string_view bytes) {
  return !bytes.empty() && (static_cast<unsigned char>(bytes[0]) & 0xC0) == 0x80;
}

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(Tokenizer tokenizer, bool skip_special_tokens,
                                               std::span<const int> prompt_ids)
    : tokenizer_(std::move(tokenizer)),
      skip_special_tokens_(skip_special_tokens),
      ids_(prompt_ids.begin(), prompt_ids.end()),
      prefix_offset_(ids_.size() > kPromptContextIds ? ids_.size() - kPromptContextIds : 0),
      read_offset_(ids_.size()) {
  if (read_offset_ == 0) return;
  // The first window must start on a character and contain some text (a window of skipped special tokens
  // would make the first generated token the decoder's "first" token and lose its leading space).
  const size_t limit = read_offset_ > kMaxPromptContextIds ? read_offset_ - kMaxPromptContextIds : 0;
  while (prefix_offset_ > limit) {
    const std::string window = window_bytes(read_offset_);
    if (!window.empty() && !starts_inside_character(window)) break;
    --prefix_offset_;
  }
  // A prompt that ends inside a character: its last ids count as unread, so the character is emitted
  // whole once the generated ids complete it.
  for (int k = 0; k < 4 && read_offset_ > prefix_offset_; ++k) {
    const std::string window = window_bytes(read_offset_);
    if (utf8_incomplete_tail(window) == 0) break;
    --read_offset_;
  }
}

std::string IncrementalDetokenizer::window_bytes(size_t end) const {
  const std::span<const int> window(ids_.data() + prefix_offset_, end - prefix_offset_);
  return tokenizer_.impl_->decode(window, skip_special_tokens_, InvalidBytes::kKeep);
}

std::string IncrementalDetokenizer::add(int id) {
  ids_.push_back(id);
  return advance(/*final=*/false);
}

std::string IncrementalDetokenizer::finish() { return advance(/*final=*/true); }

std::string IncrementalDetokenizer::add_piece(int id) {
  ids_.push_back(id);
  const std::string prefix_bytes = window_bytes(read_offset_);
  const std::string new_bytes = window_bytes(ids_.size());
  const size_t start = read_offset_;
  read_offset_ = ids_.size();
  if (new_bytes.size() <= prefix_bytes.size()) return {};
  // The next window starts at this step's first unread id, whose text is not empty, so a decoder's
  // first-token rule (SentencePiece's leading-space strip) treats it the same in both decodes.
  prefix_offset_ = start;
  return new_bytes.substr(prefix_bytes.size());
}

std::string IncrementalDetokenizer::peek_piece(int id) const {
  std::vector<int> window(ids_.begin() + long(prefix_offset_), ids_.end());
  const std::string prefix_bytes =
      tokenizer_.impl_->decode(std::span<const int>(window.data(), read_offset_ - prefix_offset_), skip_special_tokens_,
                               InvalidBytes::kKeep);
  window.push_back(id);
  const std::string new_bytes = tokenizer_.impl_->decode(window, skip_special_tokens_, InvalidBytes::kKeep);
  if (new_bytes.size() <= prefix_bytes.size()) return {};
  return new_bytes.substr(prefix_bytes.size());
}

std::string IncrementalDetokenizer::advance(bool final) {
  if (read_offset_ == ids_.size()) return {};
  const std::string prefix_bytes = window_bytes(read_offset_);
  const std::string new_bytes = window_bytes(ids_.size());
  // Hold everything back while the text ends inside a character (vLLM holds on a trailing U+FFFD).
  if (!final && utf8_incomplete_tail(new_bytes) > 0) return {};
  if (new_bytes.size() <= prefix_bytes.size()) return {};  // nothing new yet (e.g. a skipped special token)
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  return utf8_lossy(std::string_view(new_bytes).substr(prefix_bytes.size()));
}

}  // namespace pagoda
