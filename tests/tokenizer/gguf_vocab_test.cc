// The tokenizer built from GGUF vocabulary metadata (tokenizer_from_gguf_vocab) against the Hugging Face
// tokenizer of the same model. Each shipped tokenizer folder is turned into the GgufVocab llama.cpp's
// convert_hf_to_gguf.py would write for it (tokens by id with their types, merges, pre-tokenizer name,
// special ids and add-BOS flags as gguf-py's SpecialVocab reads them), and the GGUF-built tokenizer must
// encode and decode like the folder's tokenizer.json: llama.cpp's vector strings, the chat renderings.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "pagoda/core/error.h"
#include "pagoda/core/strings.h"
#include "pagoda/tokenizer/gguf_vocab.h"
#include "test_data.h"

namespace pagoda {
namespace {

using nlohmann::json;
using testing_data::data_dir;
using testing_data::load_vectors;
using testing_data::read_file;
using testing_data::shared_tokenizer;

std::string ids_str(const std::vector<int>& ids) {
  std::vector<std::string> parts;
  for (int id : ids) parts.push_back(std::to_string(id));
  return "[" + join(parts, ", ") + "]";
}

// ---- The converter's side -------------------------------------------------------------------------------

// convert_hf_to_gguf.py's does_token_look_special: added tokens it marks control although not special.
bool looks_special(const std::string& t) {
  auto wrapped = [&](std::string_view open, std::string_view close) {
    return t.size() >= open.size() + close.size() && t.compare(0, open.size(), open) == 0 &&
           t.compare(t.size() - close.size(), close.size(), close) == 0;
  };
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" || wrapped("<|", "|>") ||
         wrapped("<\xEF\xBD\x9C", "\xEF\xBD\x9C>") || wrapped("<unused", ">");
}

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
  return s;
}

// gguf-py SpecialVocab: the special ids named in tokenizer_config.json (looked up among tokenizer.json's
// added tokens), add_bos/add_eos from the post-processor (TemplateProcessing's leading / trailing special
// token, ByteLevel: neither) and else from the config, and the chat template.
void read_special_vocab(const std::filesystem::path& dir, const json& tj, GgufVocab* v) {
  const json config = json::parse(read_file(dir / "tokenizer_config.json"));
  auto token_text = [&](const char* key) -> std::optional<std::string> {
    if (!config.contains(key)) return std::nullopt;
    const json& e = config[key];
    if (e.is_string()) return e.get<std::string>();
    if (e.is_object() && e.contains("content")) return e["content"].get<std::string>();
    return std::nullopt;
  };
  auto id_of = [&](const char* key) -> std::optional<int> {
    const auto text = token_text(key);
    if (!text) return std::nullopt;
    for (const json& a : tj["added_tokens"]) {
      if (a["content"] == *text) return a["id"].get<int>();
    }
    return std::nullopt;
  };
  v->bos_id = id_of("bos_token");
  v->eos_id = id_of("eos_token");
  v->unk_id = id_of("unk_token");
  v->pad_id = id_of("pad_token");
  const json& post = tj["post_processor"];
  if (post.is_object()) {
    const json processors = post.contains("processors") ? post["processors"] : json::array({post});
    for (const json& p : processors) {
      if (p["type"] == "ByteLevel") {
        if (!v->add_bos) v->add_bos = false;
        if (!v->add_eos) v->add_eos = false;
      } else if (p["type"] == "TemplateProcessing" && p["single"].size() > 1) {
        const json& first = p["single"].front();
        const json& last = p["single"].back();
        if (first.contains("SpecialToken")) v->add_bos = first["SpecialToken"]["id"] == token_text("bos_token");
        if (last.contains("SpecialToken")) v->add_eos = last["SpecialToken"]["id"] == token_text("eos_token");
      }
    }
  }
  if (!v->add_bos && config.contains("add_bos_token") && config["add_bos_token"].is_boolean())
    v->add_bos = config["add_bos_token"].get<bool>();
  if (!v->add_eos && config.contains("add_eos_token") && config["add_eos_token"].is_boolean())
    v->add_eos = config["add_eos_token"].get<bool>();
  if (config.contains("chat_template") && config["chat_template"].is_string()) {
    v->chat_template = config["chat_template"].get<std::string>();
  } else if (std::filesystem::exists(dir / "chat_template.jinja")) {
    v->chat_template = read_file(dir / "chat_template.jinja");
  }
}

// convert_hf_to_gguf.py's _set_vocab_gpt2 (get_vocab_base + SpecialVocab with merges) for a folder with a
// byte-level tokenizer.json. `padded_size` plays config.json's vocab_size: ids without a token become
// "[PAD<id>]" of the unused type. Not emulated: the encode/decode round trip the converter puts
// non-normalized added tokens through (the identity for every added token of these files).
GgufVocab convert_bpe_folder(const std::string& folder, const std::string& pre, size_t padded_size = 0) {
  const auto dir = data_dir() / "tokenizers" / folder;
  const json tj = json::parse(read_file(dir / "tokenizer.json"));
  std::map<int, std::string> by_id;
  for (const auto& [token, id] : tj["model"]["vocab"].items()) by_id[id.get<int>()] = token;
  std::map<int, const json*> added;
  for (const json& a : tj["added_tokens"]) {
    by_id[a["id"].get<int>()] = a["content"].get<std::string>();
    added[a["id"].get<int>()] = &a;
  }
  const size_t size = std::max(padded_size, static_cast<size_t>(by_id.rbegin()->first + 1));
  GgufVocab v;
  v.model = "gpt2";
  v.pre = pre;
  v.label = folder + ".gguf";
  for (size_t i = 0; i < size; ++i) {
    auto it = by_id.find(static_cast<int>(i));
    if (it == by_id.end()) {
      v.tokens.push_back("[PAD" + std::to_string(i) + "]");
      v.token_types.push_back(5);
    } else if (auto a = added.find(static_cast<int>(i)); a != added.end()) {
      const bool control = (*a->second)["special"].get<bool>() || looks_special(it->second);
      v.tokens.push_back(control ? it->second : replace_all(it->second, "\xE2\x96\x81", " "));
      v.token_types.push_back(control ? 3 : 4);
    } else {
      v.tokens.push_back(it->second);
      v.token_types.push_back(1);
    }
  }
  // Pairs are written "a b", a space inside a token as U+0120 (none of these files has one).
  for (const json& m : tj["model"]["merges"]) {
    if (m.is_string()) {
      v.merges.push_back(m.get<std::string>());
    } else {
      v.merges.push_back(replace_all(m[0].get<std::string>(), " ", "\xC4\xA0") + " " +
                         replace_all(m[1].get<std::string>(), " ", "\xC4\xA0"));
    }
  }
  read_special_vocab(dir, tj, &v);
  return v;
}

// A SentencePiece model file (sentencepiece_model.proto): ModelProto field 1 holds the pieces, each with
// piece = 1 (string), score = 2 (float), type = 3 (enum: 1 normal, 2 unknown, 3 control, 4 user-defined,
// 5 unused, 6 byte; the same numbers as GGUF's token types).
struct SentencePiece {
  std::string piece;
  float score = 0;
  int type = 1;
};

class ProtoReader {
 public:
  explicit ProtoReader(std::string_view b) : b_(b) {}
  bool done() const { return i_ >= b_.size(); }
  uint64_t varint() {
    uint64_t r = 0;
    for (int shift = 0;; shift += 7) {
      if (i_ >= b_.size() || shift > 63) throw std::runtime_error("truncated protobuf varint");
      const auto c = static_cast<unsigned char>(b_[i_++]);
      r |= static_cast<uint64_t>(c & 0x7F) << shift;
      if (c < 0x80) return r;
    }
  }
  // Reads one field: its number, and its payload as bytes (varints as their value in `value`).
  int field(std::string_view* bytes, uint64_t* value) {
    const uint64_t key = varint();
    switch (key & 7) {
      case 0: *value = varint(); break;
      case 1: *bytes = take(8); break;
      case 2: *bytes = take(varint()); break;
      case 5: *bytes = take(4); break;
      default: throw std::runtime_error("unsupported protobuf wire type");
    }
    return static_cast<int>(key >> 3);
  }

 private:
  std::string_view take(uint64_t n) {
    if (n > b_.size() - i_) throw std::runtime_error("truncated protobuf field");
    const std::string_view s = b_.substr(i_, n);
    i_ += n;
    return s;
  }
  std::string_view b_;
  size_t i_ = 0;
};

std::vector<SentencePiece> read_sentencepiece_model(const std::filesystem::path& path) {
  const std::string bytes = read_file(path);
  std::vector<SentencePiece> pieces;
  ProtoReader model(bytes);
  while (!model.done()) {
    std::string_view payload;
    uint64_t value = 0;
    if (model.field(&payload, &value) != 1) continue;
    SentencePiece p;
    ProtoReader piece(payload);
    while (!piece.done()) {
      std::string_view f;
      uint64_t v = 0;
      switch (piece.field(&f, &v)) {
        case 1: p.piece = std::string(f); break;
        case 2: std::memcpy(&p.score, f.data(), 4); break;  // little-endian float
        case 3: p.type = static_cast<int>(v); break;
        default: break;
      }
    }
    pieces.push_back(std::move(p));
  }
  return pieces;
}

// convert_hf_to_gguf.py's _set_vocab_sentencepiece: pieces, scores and types as the sentencepiece library
// reports them from tokenizer.model (read here from the file directly), model "llama", pre "default",
// then SpecialVocab as above (this folder has no added_tokens.json and no added_tokens_decoder).
GgufVocab convert_spm_folder(const std::string& folder) {
  const auto dir = data_dir() / "tokenizers" / folder;
  GgufVocab v;
  v.model = "llama";
  v.pre = "default";
  v.label = folder + ".gguf";
  for (const SentencePiece& p : read_sentencepiece_model(dir / "tokenizer.model")) {
    v.tokens.push_back(p.piece);
    v.scores.push_back(p.score);
    v.token_types.push_back(p.type);
  }
  read_special_vocab(dir, json::parse(read_file(dir / "tokenizer.json")), &v);
  return v;
}

// ---- The tests ------------------------------------------------------------------------------------------

struct Family {
  const char* folder;   // under tokenizers/
  const char* vectors;  // ggml-vocab-<name>.gguf.{inp,out}
  const char* pre;      // tokenizer.ggml.pre the converter writes for it ("" for SentencePiece)
  size_t padded_size;   // config.json's vocab_size, 0 for none
};

void PrintTo(const Family& f, std::ostream* os) { *os << f.folder; }

// Converted once per process (reading the large tokenizer.json files takes a while).
const GgufVocab& convert(const Family& f) {
  static std::map<std::string, GgufVocab> cache;
  auto it = cache.find(f.folder);
  if (it == cache.end()) {
    GgufVocab v = std::string(f.pre).empty() ? convert_spm_folder(f.folder)
                                             : convert_bpe_folder(f.folder, f.pre, f.padded_size);
    it = cache.emplace(f.folder, std::move(v)).first;
  }
  return it->second;
}

const Tokenizer& gguf_tokenizer(const Family& f) {
  static std::map<std::string, Tokenizer> cache;
  auto it = cache.find(f.folder);
  if (it == cache.end()) {
    const GgufVocab& v = convert(f);
    const auto start = std::chrono::steady_clock::now();
    Tokenizer t = tokenizer_from_gguf_vocab(v);
    std::printf("%s: built from %zu tokens and %zu merges in %.0f ms\n", f.folder, v.tokens.size(), v.merges.size(),
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    it = cache.emplace(f.folder, std::move(t)).first;
  }
  return it->second;
}

class GgufVocabTest : public ::testing::TestWithParam<Family> {};

TEST_P(GgufVocabTest, EncodesTheVectorsAsTheHuggingFaceTokenizer) {
  const Tokenizer& hf = shared_tokenizer(std::string("tokenizers/") + GetParam().folder);
  const Tokenizer& gguf = gguf_tokenizer(GetParam());
  const auto cases = load_vectors(GetParam().vectors);
  ASSERT_EQ(cases.size(), 47u);
  int exact = 0;
  for (const auto& c : cases) {
    const std::vector<int> ids = gguf.encode(c.text, /*add_special_tokens=*/false);
    EXPECT_EQ(ids_str(ids), ids_str(c.ids)) << "text: '" << c.text << "'";
    EXPECT_EQ(ids_str(ids), ids_str(hf.encode(c.text, false))) << "text: '" << c.text << "'";
    EXPECT_EQ(ids_str(gguf.encode(c.text, true)), ids_str(hf.encode(c.text, true))) << "text: '" << c.text << "'";
    for (bool skip : {false, true}) {
      EXPECT_EQ(gguf.decode(c.ids, skip), hf.decode(c.ids, skip)) << "text: '" << c.text << "'";
    }
    exact += ids == c.ids;
  }
  std::printf("%s: %d/%zu vectors encode exactly from the GGUF vocabulary\n", GetParam().folder, exact, cases.size());
}

TEST_P(GgufVocabTest, SpecialTokensAndSettingsMatch) {
  const Tokenizer& hf = shared_tokenizer(std::string("tokenizers/") + GetParam().folder);
  const Tokenizer& gguf = gguf_tokenizer(GetParam());
  const GgufVocab& v = convert(GetParam());
  EXPECT_EQ(gguf.vocab_size(), static_cast<int>(v.tokens.size()));
  EXPECT_EQ(gguf.bos_id(), hf.bos_id());
  EXPECT_EQ(gguf.bos_token(), hf.bos_token());
  EXPECT_EQ(gguf.eos_token(), hf.eos_token());
  ASSERT_FALSE(gguf.eos_ids().empty());
  EXPECT_EQ(gguf.eos_ids().front(), hf.eos_ids().front());
  EXPECT_EQ(gguf.special_prefix_ids(), hf.special_prefix_ids());
  EXPECT_EQ(gguf.special_suffix_ids(), hf.special_suffix_ids());
  EXPECT_EQ(gguf.chat_template(), hf.chat_template());
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    const int t = v.token_types[id];
    // Control and unknown tokens are special; so are the converter's "looks special" tokens (Qwen's
    // <|fim_prefix|>, ...), which Hugging Face keeps non-special: llama.cpp treats them as control.
    ASSERT_EQ(gguf.is_special(static_cast<int>(id)), t == 2 || t == 3) << "id " << id << " '" << v.tokens[id] << "'";
    if (t == 1 || t == 6) {
      ASSERT_EQ(gguf.id_to_token(static_cast<int>(id)), v.tokens[id]);
    }
    if (t != 5 && t != 4) {
      ASSERT_EQ(gguf.token_to_id(v.tokens[id]), static_cast<int>(id)) << v.tokens[id];
    }
  }
}

TEST_P(GgufVocabTest, AddedTokensInTextAsTheHuggingFaceTokenizer) {
  // Every added token alone and inside text, with and without parse_special (user-defined tokens are
  // matched either way). Skipped: the converter's extra control tokens, whose parse_special=false
  // encoding differs from Hugging Face's by design.
  const Tokenizer& hf = shared_tokenizer(std::string("tokenizers/") + GetParam().folder);
  const Tokenizer& gguf = gguf_tokenizer(GetParam());
  const GgufVocab& v = convert(GetParam());
  int checked = 0;
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    const int t = v.token_types[id];
    if (t != 2 && t != 3 && t != 4) continue;
    const bool as_hf = hf.is_special(static_cast<int>(id)) == gguf.is_special(static_cast<int>(id));
    const std::string text = "x " + v.tokens[id] + "\nHello" + v.tokens[id];
    for (bool parse : {true, false}) {
      if (!parse && !as_hf) continue;
      EXPECT_EQ(ids_str(gguf.encode(text, false, parse)), ids_str(hf.encode(text, false, parse)))
          << "'" << text << "' parse_special=" << parse;
    }
    const std::vector<int> ids = hf.encode(text, false);
    EXPECT_EQ(gguf.decode(ids, false), hf.decode(ids, false));
    if (as_hf) {
      EXPECT_EQ(gguf.decode(ids, true), hf.decode(ids, true));
    }
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, GgufVocabTest,
                         ::testing::Values(Family{"gpt2", "gpt-2", "gpt-2", 0},
                                           Family{"llama3", "llama-bpe", "llama-bpe", 0},
                                           // Qwen3's config.json pads the vocabulary to 151936 ids.
                                           Family{"qwen2", "qwen2", "qwen2", 151936},
                                           Family{"llama-spm", "llama-spm", "", 0}),
                         [](const auto& info) {
                           std::string n = info.param.folder;
                           for (char& ch : n) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return n;
                         });

TEST(GgufVocabChat, RenderedConversationsEncodeToTheReferenceIds) {
  // chat-template-cases.json: Qwen3 / Qwen2.5 renderings over Qwen2's vocabulary, Llama 3.1's over Llama 3's.
  const json file = json::parse(read_file(data_dir() / "tokenizers/chat-template-cases.json"));
  const Tokenizer& qwen = gguf_tokenizer(Family{"qwen2", "qwen2", "qwen2", 151936});
  const Tokenizer& llama = gguf_tokenizer(Family{"llama3", "llama-bpe", "llama-bpe", 0});
  int n = 0;
  for (const json& c : file["cases"]) {
    const Tokenizer& tok = c["template"] == "llama3.1" ? llama : qwen;
    EXPECT_EQ(ids_str(tok.encode(c["rendered"].get<std::string>(), false)),
              ids_str(c["token_ids"].get<std::vector<int>>()))
        << c["id"];
    ++n;
  }
  EXPECT_EQ(n, 24);
}

TEST(GgufVocabSentencePiece, MergesFromScoresEqualTheConvertedTokenizerJson) {
  const GgufVocab v = convert_spm_folder("llama-spm");
  const auto merges = sentencepiece_merges(v.tokens, v.scores);
  const json tj = json::parse(read_file(data_dir() / "tokenizers/llama-spm/tokenizer.json"));
  const json& expected = tj["model"]["merges"];
  ASSERT_EQ(merges.size(), expected.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& e = expected[i];
    const std::pair<std::string, std::string> want =
        e.is_string() ? std::pair{e.get<std::string>().substr(0, e.get<std::string>().find(' ')),
                                  e.get<std::string>().substr(e.get<std::string>().find(' ') + 1)}
                      : std::pair{e[0].get<std::string>(), e[1].get<std::string>()};
    ASSERT_EQ(merges[i], want) << "merge #" << i;
  }
}

// The llama-spm tokenizer.json with its "▁" prefix taken out (normalizer Prepend, decoder Strip): what
// add_space_prefix = false means.
TEST(GgufVocabSentencePiece, WithoutSpacePrefix) {
  json tj = json::parse(read_file(data_dir() / "tokenizers/llama-spm/tokenizer.json"));
  tj["normalizer"]["normalizers"].erase(0);
  ASSERT_EQ(tj["normalizer"]["normalizers"][0]["type"], "Replace");
  tj["decoder"]["decoders"].erase(3);
  const Tokenizer hf = Tokenizer::from_json_text(tj.dump(), read_file(data_dir() / "tokenizers/llama-spm/tokenizer_config.json"));
  GgufVocab v = convert_spm_folder("llama-spm");
  v.add_space_prefix = false;
  const Tokenizer gguf = tokenizer_from_gguf_vocab(v);
  for (const auto& c : load_vectors("llama-spm")) {
    const std::vector<int> ids = gguf.encode(c.text, true);
    EXPECT_EQ(ids_str(ids), ids_str(hf.encode(c.text, true))) << "'" << c.text << "'";
    EXPECT_EQ(gguf.decode(ids, true), c.text);
  }
  EXPECT_EQ(gguf.encode("Hello", false), std::vector<int>{*gguf.token_to_id("Hello")});
}

TEST(GgufVocabSentencePiece, UserDefinedTokensAndDefaults) {
  // A user-defined piece is matched in the raw text (and decodes as itself); ids absent from the file
  // default to llama.cpp's (unk 0, bos 1, eos 2); BOS is added unless the file says otherwise.
  GgufVocab v = convert_spm_folder("llama-spm");
  v.bos_id.reset();
  v.eos_id.reset();
  v.unk_id.reset();
  v.add_bos.reset();
  v.tokens.push_back("<tool>");
  v.scores.push_back(-1000);
  v.token_types.push_back(4);
  const int tool = static_cast<int>(v.tokens.size()) - 1;
  const Tokenizer t = tokenizer_from_gguf_vocab(v);
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(t.eos_ids(), std::vector<int>{2});
  const std::vector<int> ids = t.encode("a<tool>b", true, /*parse_special=*/false);
  const std::vector<int> a = t.encode("a", true), b = t.encode("b", false);
  std::vector<int> want = a;
  want.push_back(tool);
  want.insert(want.end(), b.begin(), b.end());  // "▁b": a prefix follows every added token
  EXPECT_EQ(ids_str(ids), ids_str(want));
  EXPECT_FALSE(t.is_special(tool));
  EXPECT_EQ(t.decode(ids, true), "a<tool> b");
  v.add_bos = false;
  EXPECT_EQ(tokenizer_from_gguf_vocab(v).encode("a", true), t.encode("a", false));
}

// The gpt2 vocabulary under other pre-tokenizer names: what llama.cpp's regexes for the name split the text
// into, each piece then BPE-encoded alone (the GPT-2 tokenizer gives a piece's ids, as its own regex keeps
// each of these pieces whole).
std::vector<int> encode_pieces(const std::vector<std::string>& pieces) {
  const Tokenizer& gpt2 = shared_tokenizer("tokenizers/gpt2");
  std::vector<int> ids;
  for (const std::string& p : pieces) {
    const std::vector<int> part = gpt2.encode(p, false);
    ids.insert(ids.end(), part.begin(), part.end());
  }
  return ids;
}

TEST(GgufVocabPreTokenizers, SmollmSplitsEveryDigit) {
  GgufVocab v = convert_bpe_folder("gpt2", "smollm");
  const Tokenizer t = tokenizer_from_gguf_vocab(v);
  EXPECT_EQ(ids_str(t.encode(" 12 apples, 2024!", false)),
            ids_str(encode_pieces({" ", "1", "2", " apples", ",", " ", "2", "0", "2", "4", "!"})));
  // And as SmolLM's tokenizer.json: Digits(individual_digits) then GPT-2's ByteLevel, on every vector.
  json tj = json::parse(read_file(data_dir() / "tokenizers/gpt2/tokenizer.json"));
  tj["pre_tokenizer"] = json::parse(R"({"type": "Sequence", "pretokenizers": [
      {"type": "Digits", "individual_digits": true},
      {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}]})");
  const Tokenizer hf = Tokenizer::from_json_text(tj.dump());
  for (const auto& c : load_vectors("gpt-2")) EXPECT_EQ(t.encode(c.text, false), hf.encode(c.text, false)) << c.text;
}

TEST(GgufVocabPreTokenizers, DefaultSplitsPunctuationAndNumbersLikeLlamaCpp) {
  // llama.cpp's "default": punctuation runs, then GPT-2, then digit runs, then groups of three digits.
  const Tokenizer t = tokenizer_from_gguf_vocab(convert_bpe_folder("gpt2", "default"));
  EXPECT_EQ(ids_str(t.encode(" (hi) 1234567", false)),
            ids_str(encode_pieces({" ", "(", "hi", ")", " ", "123", "456", "7"})));
  // GPT-2's regex keeps " (" together and "1234567" whole.
  const Tokenizer gpt2 = tokenizer_from_gguf_vocab(convert_bpe_folder("gpt2", "gpt-2"));
  EXPECT_EQ(ids_str(gpt2.encode(" (hi) 1234567", false)), ids_str(encode_pieces({" (", "hi", ")", " 1234567"})));
}

TEST(GgufVocabPreTokenizers, RegexFamiliesSplitAsLlamaCpp) {
  // Llama 3: digits in threes, a lone space before them; Qwen2: single digits; both keep " (" together.
  const std::string text = " (hi) 1234567 it's";
  const Tokenizer llama3 = tokenizer_from_gguf_vocab(convert_bpe_folder("gpt2", "llama-bpe"));
  EXPECT_EQ(ids_str(llama3.encode(text, false)),
            ids_str(encode_pieces({" (", "hi", ")", " ", "123", "456", "7", " it", "'s"})));
  const Tokenizer qwen2 = tokenizer_from_gguf_vocab(convert_bpe_folder("gpt2", "qwen2"));
  EXPECT_EQ(ids_str(qwen2.encode(text, false)),
            ids_str(encode_pieces({" (", "hi", ")", " ", "1", "2", "3", "4", "5", "6", "7", " it", "'s"})));
}

TEST(GgufVocabPreTokenizers, AliasesAndMissingName) {
  const Tokenizer a = tokenizer_from_gguf_vocab(convert_bpe_folder("llama3", "llama3"));
  const Tokenizer& b = gguf_tokenizer(Family{"llama3", "llama-bpe", "llama-bpe", 0});
  for (const auto& c : load_vectors("llama-bpe")) EXPECT_EQ(a.encode(c.text, true), b.encode(c.text, true));
  // No tokenizer.ggml.pre: llama.cpp's "default" (with a warning).
  const Tokenizer none = tokenizer_from_gguf_vocab(convert_bpe_folder("gpt2", ""));
  const Tokenizer dflt = tokenizer_from_gguf_vocab(convert_bpe_folder("gpt2", "default"));
  for (const auto& c : load_vectors("gpt-2")) EXPECT_EQ(none.encode(c.text, false), dflt.encode(c.text, false));
}

TEST(GgufVocabEos, EndOfGenerationTokens) {
  // Qwen: EOS <|im_end|>, and <|endoftext|> also ends generation (llama.cpp's EOG list); an EOT id joins.
  GgufVocab v = convert_bpe_folder("qwen2", "qwen2");
  const int im_end = 151645, endoftext = 151643;
  ASSERT_EQ(v.tokens[im_end], "<|im_end|>");
  ASSERT_EQ(v.tokens[endoftext], "<|endoftext|>");
  std::vector<int> eos = tokenizer_from_gguf_vocab(v).eos_ids();
  EXPECT_EQ(eos.front(), im_end);
  EXPECT_EQ(std::set<int>(eos.begin(), eos.end()), (std::set<int>{im_end, endoftext}));
  v.eot_id = 151644;
  eos = tokenizer_from_gguf_vocab(v).eos_ids();
  EXPECT_EQ(std::set<int>(eos.begin(), eos.end()), (std::set<int>{im_end, endoftext, 151644}));
}

// ---- Errors --------------------------------------------------------------------------------------------

// A small valid byte-level vocabulary: "a", "b", "ab", "Ġ", and a control token.
GgufVocab small_vocab() {
  GgufVocab v;
  v.model = "gpt2";
  v.pre = "gpt-2";
  v.label = "/m/tiny.gguf";
  v.tokens = {"a", "b", "ab", "\xC4\xA0", "<|end|>"};
  v.token_types = {1, 1, 1, 1, 3};
  v.merges = {"a b"};
  v.eos_id = 4;
  return v;
}

TEST(GgufVocabErrors, SmallVocabularyWorks) {
  const Tokenizer t = tokenizer_from_gguf_vocab(small_vocab());
  EXPECT_EQ(t.encode("ab a<|end|>", true), (std::vector<int>{2, 3, 0, 4}));
  EXPECT_EQ(t.decode(std::vector<int>{2, 3, 0, 4}, true), "ab a");
  EXPECT_EQ(t.eos_ids(), std::vector<int>{4});
  EXPECT_FALSE(t.bos_id().has_value());
}

TEST(GgufVocabErrors, BadMetadataNamesTheFileAndTheKey) {
  struct Case {
    const char* what;
    void (*mutate)(GgufVocab*);
    std::vector<const char*> message;  // substrings after "/m/tiny.gguf: "
  };
  const std::vector<Case> cases = {
      {"unknown model", [](GgufVocab* v) { v->model = "bert"; }, {"tokenizer.ggml.model", "'bert'", "gpt2", "llama"}},
      {"unknown pre", [](GgufVocab* v) { v->pre = "tekken"; },
       {"tokenizer.ggml.pre", "'tekken'", "supported: default, llama3", "smollm", "qwen2", "gpt-2", "--tokenizer"}},
      {"no tokens", [](GgufVocab* v) { v->tokens.clear(); v->token_types.clear(); }, {"tokenizer.ggml.tokens", "empty"}},
      {"types length", [](GgufVocab* v) { v->token_types.pop_back(); }, {"tokenizer.ggml.token_type", "4 entries for 5 tokens"}},
      {"scores length", [](GgufVocab* v) { v->scores = {0, 0}; }, {"tokenizer.ggml.scores", "2 entries for 5 tokens"}},
      {"bad type", [](GgufVocab* v) { v->token_types[1] = 9; }, {"tokenizer.ggml.token_type", "token 1 has type 9"}},
      {"byte name", [](GgufVocab* v) { v->token_types[0] = 6; }, {"tokenizer.ggml.tokens", "token 0 'a'", "<0xNN>"}},
      {"duplicate", [](GgufVocab* v) { v->tokens[1] = v->tokens[0]; }, {"tokenizer.ggml.tokens", "tokens 0 and 1", "'a'"}},
      {"bos range", [](GgufVocab* v) { v->bos_id = 5; }, {"tokenizer.ggml.bos_token_id", "id 5", "0..4"}},
      {"eos range", [](GgufVocab* v) { v->eos_id = -1; }, {"tokenizer.ggml.eos_token_id", "id -1"}},
      {"eot range", [](GgufVocab* v) { v->eot_id = 99; }, {"tokenizer.ggml.eot_token_id", "id 99"}},
      {"no merges", [](GgufVocab* v) { v->merges.clear(); }, {"tokenizer.ggml.merges", "missing or empty"}},
      {"merge form", [](GgufVocab* v) { v->merges = {"ab"}; }, {"tokenizer.ggml.merges", "entry 0 'ab'", "two tokens"}},
      {"merge token", [](GgufVocab* v) { v->merges = {"a b", "b a"}; },
       {"tokenizer.ggml.merges", "entry 1 'b a'", "'ba'", "not in tokenizer.ggml.tokens"}},
      {"add_bos without bos", [](GgufVocab* v) { v->add_bos = true; }, {"tokenizer.ggml.add_bos_token", "bos_token_id"}},
      {"add_eos without eos", [](GgufVocab* v) { v->add_eos = true; v->eos_id.reset(); }, {"tokenizer.ggml.add_eos_token"}},
      {"spm without scores", [](GgufVocab* v) { v->model = "llama"; }, {"tokenizer.ggml.scores", "missing"}},
      {"NaN score", [](GgufVocab* v) { v->model = "llama"; v->scores = {0, 0, std::nanf(""), 0, 0}; },
       {"tokenizer.ggml.scores", "token 2 is NaN"}},
  };
  for (const Case& c : cases) {
    GgufVocab v = small_vocab();
    c.mutate(&v);
    try {
      tokenizer_from_gguf_vocab(v);
      ADD_FAILURE() << c.what << ": no error";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(e.kind(), ErrorKind::kConfig) << c.what;
      EXPECT_EQ(msg.rfind("/m/tiny.gguf: ", 0), 0u) << c.what << ": " << msg;
      for (const char* part : c.message) EXPECT_NE(msg.find(part), std::string::npos) << c.what << ": " << msg;
    }
  }
}

}  // namespace
}  // namespace pagoda
