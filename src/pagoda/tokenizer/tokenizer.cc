#include "pagoda/tokenizer/tokenizer.h"

#include "pagoda/tokenizer/tokenizer_impl.h"
#include "pagoda/tokenizer/unicode.h"

namespace pagoda {

using namespace tokenizer_detail;

std::vector<int> Tokenizer::Impl::encode(std::string_view text, bool add_special_tokens, bool parse_special) const {
  std::string sanitized;
  if (!utf8_is_valid(text)) {
    sanitized = utf8_lossy(text);
    text = sanitized;
  }
  std::vector<int> ids;
  ids.reserve(text.size() / 3 + prefix_ids.size() + suffix_ids.size() + 1);
  if (add_special_tokens) ids.insert(ids.end(), prefix_ids.begin(), prefix_ids.end());
  std::vector<Segment> segments;
  added.split(text, /*normalized_set=*/false, parse_special, &segments);
  for (const Segment& s : segments) {
    if (s.id >= 0) {
      ids.push_back(s.id);
    } else {
      encode_segment(s.text, s.offset == 0, parse_special, &ids);
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), suffix_ids.begin(), suffix_ids.end());
  return ids;
}

void Tokenizer::Impl::encode_segment(std::string_view text, bool at_start, bool parse_special,
                                     std::vector<int>* ids) const {
  std::string normalized = normalizer ? normalizer->normalize(text) : std::string(text);
  if (!added.has_normalized_tokens()) {
    encode_normalized(std::move(normalized), at_start, ids);
    return;
  }
  std::vector<Segment> segments;
  added.split(normalized, /*normalized_set=*/true, parse_special, &segments);
  for (const Segment& s : segments) {
    if (s.id >= 0) {
      ids->push_back(s.id);
    } else {
      encode_normalized(std::string(s.text), at_start && s.offset == 0, ids);
    }
  }
}

void Tokenizer::Impl::encode_normalized(std::string text, bool at_start, std::vector<int>* ids) const {
  std::vector<Piece> pieces;
  pieces.push_back({std::move(text), at_start});
  if (pre_tokenizer) pre_tokenizer->pre_tokenize(&pieces);
  for (const Piece& p : pieces) model->encode(p.text, ids);
}

std::string Tokenizer::Impl::decode(std::span<const int> ids, bool skip_special_tokens, InvalidBytes invalid) const {
  // As Hugging Face: added tokens go through the decoder like any other token.
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int id : ids) {
    if (const AddedToken* a = added.find_by_id(id)) {
      if (!(skip_special_tokens && a->special)) tokens.push_back(a->content);
    } else if (const std::string* t = model->id_to_token(id)) {
      tokens.push_back(*t);
    }
  }
  std::string text;
  if (decoder) {
    decoder->decode_chain(&tokens, invalid);
    for (const std::string& t : tokens) text += t;
  } else {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) text += ' ';
      text += tokens[i];
    }
  }
  return invalid == InvalidBytes::kKeep || utf8_is_valid(text) ? text : utf8_lossy(text);
}

Tokenizer Tokenizer::from_file(const std::filesystem::path& path) {
  std::filesystem::path json = path;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) json = path / "tokenizer.json";
  return from_files(json, json.parent_path() / "tokenizer_config.json");
}

Tokenizer Tokenizer::from_files(const std::filesystem::path& tokenizer_json,
                                const std::filesystem::path& tokenizer_config) {
  auto impl = std::make_shared<Impl>();
  impl->load(tokenizer_json, tokenizer_config);
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_json_text(std::string_view tokenizer_json, std::string_view tokenizer_config_json) {
  TokenizerSources src;
  src.tokenizer_json = std::string(tokenizer_json);
  if (!tokenizer_config_json.empty()) src.config = std::string(tokenizer_config_json);
  auto impl = std::make_shared<Impl>();
  impl->load(src);
  return Tokenizer(std::move(impl));
}

std::vector<int> Tokenizer::encode(std::string_view text, bool add_special_tokens, bool parse_special) const {
  return impl_->encode(text, add_special_tokens, parse_special);
}

std::string Tokenizer::decode(std::span<const int> ids, bool skip_special_tokens) const {
  return impl_->decode(ids, skip_special_tokens);
}

int Tokenizer::vocab_size() const { return impl_->vocab_size; }

std::optional<int> Tokenizer::token_to_id(std::string_view token) const {
  if (const AddedToken* a = impl_->added.find_by_content(token)) return a->id;
  return impl_->model->token_to_id(token);
}

std::string Tokenizer::id_to_token(int id) const {
  if (const AddedToken* a = impl_->added.find_by_id(id)) return a->content;
  if (const std::string* t = impl_->model->id_to_token(id)) return *t;
  return {};
}

std::optional<int> Tokenizer::bos_id() const { return impl_->bos_id; }
std::vector<int> Tokenizer::eos_ids() const { return impl_->eos_ids; }

bool Tokenizer::is_special(int id) const {
  const AddedToken* a = impl_->added.find_by_id(id);
  return a != nullptr && a->special;
}

const std::string& Tokenizer::chat_template() const { return impl_->chat_template; }
const std::string& Tokenizer::bos_token() const { return impl_->bos_token; }
const std::string& Tokenizer::eos_token() const { return impl_->eos_token; }
const std::vector<int>& Tokenizer::special_prefix_ids() const { return impl_->prefix_ids; }
const std::vector<int>& Tokenizer::special_suffix_ids() const { return impl_->suffix_ids; }

}  // namespace pagoda
