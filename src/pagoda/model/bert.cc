#include "pagoda/model/bert.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <nlohmann/json.hpp>

#include "pagoda/attention/registry.h"
#include "pagoda/attention/runner.h"
#include "pagoda/attention/selector.h"
#include "pagoda/attention/startup.h"
#include "pagoda/core/error.h"
#include "pagoda/core/logging.h"
#include "pagoda/core/read_file.h"
#include "pagoda/model/safetensors.h"
#include "pagoda/ops/convert.h"
#include "pagoda/ops/dense_gemm.h"
#include "pagoda/ops/thread_pool.h"

namespace pagoda {

namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

int positive_int(const Json& j, const char* key, const std::string& label) {
  if (!j.contains(key) || !j[key].is_number_integer() || j[key].get<int64_t>() <= 0 || j[key].get<int64_t>() > (1 << 20))
    throw_config_error(label, ": '", key, "' must be a positive integer");
  return j[key].get<int>();
}

Json read_json(const fs::path& p) {
  const std::string text = read_user_file(p.string(), kMaxConfigFileBytes);
  try {
    return Json::parse(text);
  } catch (const Json::exception& e) {
    throw_config_error(p.string(), " is not valid JSON (", e.what(), ")");
  }
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

struct Layer {
  DenseWeights qkv;  // query, key and value stacked: [3 * hidden, hidden]
  DenseWeights attn_out, inter, out;
  std::vector<float> ln1_w, ln1_b, ln2_w, ln2_b;
};

void layer_norm(float* x, int64_t rows, int64_t h, const std::vector<float>& w, const std::vector<float>& b, float eps,
                ThreadPool* pool) {
  parallel_for(pool, rows, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* v = x + r * h;
      double mean = 0, var = 0;
      for (int64_t i = 0; i < h; ++i) mean += v[i];
      mean /= double(h);
      for (int64_t i = 0; i < h; ++i) var += (v[i] - mean) * (v[i] - mean);
      const float inv = float(1.0 / std::sqrt(var / double(h) + eps));
      const float m = float(mean);
      for (int64_t i = 0; i < h; ++i) v[i] = (v[i] - m) * inv * w[size_t(i)] + b[size_t(i)];
    }
  });
}

constexpr int64_t kFfnRows = 128;  // rows per feed-forward chunk: [128, intermediate] floats (768 KiB for 1536)

// y = epilogue(residual + x @ W^T + b) for m rows (x, y, residual contiguous).
void linear(const float* x, const DenseWeights& w, float* y, int64_t m, ThreadPool* pool,
            const float* residual = nullptr, DenseEpilogue epilogue = DenseEpilogue::kNone) {
  DenseMatmulParams p;
  p.x = x;
  p.w = &w;
  p.residual = residual;
  p.epilogue = epilogue;
  p.y = y;
  p.m = m;
  dense_matmul(p, pool);
}

}  // namespace

bool is_bert_config(const Json& j) {
  if (!j.is_object()) return false;
  if (j.contains("architectures") && j["architectures"].is_array()) {
    for (const Json& a : j["architectures"]) {
      if (a.is_string() && (a == "BertModel" || a == "BertForMaskedLM" || a == "BertForPreTraining")) return true;
    }
  }
  return j.contains("model_type") && j["model_type"] == "bert";
}

BertConfig parse_bert_config(const Json& j, const std::string& label) {
  if (!is_bert_config(j)) throw_config_error(label, ": not a BERT config (architectures BertModel or model_type bert)");
  BertConfig c;
  c.vocab_size = positive_int(j, "vocab_size", label);
  c.hidden_size = positive_int(j, "hidden_size", label);
  c.num_layers = positive_int(j, "num_hidden_layers", label);
  c.num_heads = positive_int(j, "num_attention_heads", label);
  c.intermediate_size = positive_int(j, "intermediate_size", label);
  c.max_position_embeddings = positive_int(j, "max_position_embeddings", label);
  c.type_vocab_size = positive_int(j, "type_vocab_size", label);
  if (c.hidden_size % c.num_heads != 0)
    throw_config_error(label, ": hidden_size ", c.hidden_size, " is not a multiple of num_attention_heads ", c.num_heads);
  if (j.contains("layer_norm_eps")) {
    if (!j["layer_norm_eps"].is_number()) throw_config_error(label, ": 'layer_norm_eps' must be a number");
    c.layer_norm_eps = j["layer_norm_eps"].get<float>();
  }
  const std::string act = j.value("hidden_act", std::string("gelu"));
  if (act != "gelu")
    throw_config_error(label, ": hidden_act '", act, "' is not supported (BERT encoders: gelu, the erf form)");
  const std::string pos = j.value("position_embedding_type", std::string("absolute"));
  if (pos != "absolute") throw_config_error(label, ": position_embedding_type '", pos, "' is not supported (absolute)");
  return c;
}

SentenceEmbeddingConfig read_sentence_embedding_config(const fs::path& folder) {
  SentenceEmbeddingConfig s;
  std::error_code ec;
  const fs::path modules = folder / "modules.json";
  if (!fs::exists(modules, ec)) return s;
  const Json m = read_json(modules);
  if (!m.is_array()) throw_config_error(modules.string(), ": expected a list of modules");
  s.normalize = false;
  bool pooled = false;
  for (const Json& mod : m) {
    const std::string type = mod.is_object() ? mod.value("type", std::string()) : std::string();
    const std::string path = mod.is_object() ? mod.value("path", std::string()) : std::string();
    if (type == "sentence_transformers.models.Transformer") continue;
    if (type == "sentence_transformers.models.Normalize") {
      s.normalize = true;
    } else if (type == "sentence_transformers.models.Pooling") {
      const fs::path pc = folder / path / "config.json";
      const Json p = read_json(pc);
      auto on = [&](const char* k) { return p.is_object() && p.value(k, false); };
      const int modes = int(on("pooling_mode_cls_token")) + int(on("pooling_mode_mean_tokens")) +
                        int(on("pooling_mode_max_tokens")) + int(on("pooling_mode_mean_sqrt_len_tokens"));
      if (modes != 1 || on("pooling_mode_weightedmean_tokens") || on("pooling_mode_lasttoken"))
        throw_config_error(pc.string(), ": exactly one of pooling_mode_cls_token, _mean_tokens, _max_tokens, "
                                        "_mean_sqrt_len_tokens must be true (other modes are not supported)");
      s.pooling = on("pooling_mode_cls_token")    ? PoolingMode::kCls
                  : on("pooling_mode_max_tokens") ? PoolingMode::kMax
                  : on("pooling_mode_mean_tokens") ? PoolingMode::kMean
                                                   : PoolingMode::kMeanSqrtLen;
      pooled = true;
    } else {
      throw_config_error(modules.string(), ": module type '", type,
                         "' is not supported (Transformer, Pooling, Normalize)");
    }
  }
  if (!pooled) throw_config_error(modules.string(), ": no sentence_transformers.models.Pooling module");
  const fs::path sb = folder / "sentence_bert_config.json";
  if (fs::exists(sb, ec)) {
    const Json j = read_json(sb);
    if (j.is_object() && j.contains("max_seq_length") && j["max_seq_length"].is_number_integer())
      s.max_seq_length = std::max(0, j["max_seq_length"].get<int>());
  }
  return s;
}

struct BertEncoder::Impl {
  BertConfig cfg;
  SentenceEmbeddingConfig sentence;
  std::vector<float> word, pos, type, ln_w, ln_b;
  std::vector<Layer> layers;
  mutable ThreadPool pool;
  std::string backend_name;
  LayerShape shape;
  std::unique_ptr<AttentionRunner> runner;

  explicit Impl(int threads) : pool(threads) {}
  void forward(const std::vector<std::vector<int>>& seqs, const EncoderStepBlocks* blocks, std::vector<float>* x) const;
  int64_t kv_block_floats() const { return int64_t(cfg.num_heads) * shape.block_size * 2 * cfg.head_size(); }
};

BertEncoder::BertEncoder(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
BertEncoder::~BertEncoder() = default;
const BertConfig& BertEncoder::config() const { return impl_->cfg; }
const SentenceEmbeddingConfig& BertEncoder::sentence_config() const { return impl_->sentence; }
std::string BertEncoder::attention_backend() const { return impl_->backend_name; }
int BertEncoder::block_size() const { return impl_->shape.block_size; }
int64_t BertEncoder::kv_block_floats() const { return impl_->kv_block_floats(); }
int BertEncoder::max_tokens_per_sequence() const {
  const int m = impl_->cfg.max_position_embeddings;
  return impl_->sentence.max_seq_length > 0 ? std::min(m, impl_->sentence.max_seq_length) : m;
}

std::unique_ptr<BertEncoder> BertEncoder::load(const fs::path& folder, const BertLoadOptions& options) {
  if (options.num_threads < 0) throw_config_error("the encoder's thread count must be >= 0 (0: one per core), got ", options.num_threads);
  auto impl = std::make_unique<Impl>(options.num_threads);
  const fs::path cfg_path = folder / "config.json";
  impl->cfg = parse_bert_config(read_json(cfg_path), cfg_path.string());
  impl->sentence = read_sentence_embedding_config(folder);
  const BertConfig& c = impl->cfg;
  auto ckpt = SafetensorsCheckpoint::open(folder.string());
  // A tensor by its BertModel name, with or without the "bert." prefix of the task heads' checkpoints.
  auto tensor = [&](const std::string& name, std::vector<int64_t> shape) {
    std::optional<SafetensorsTensorRef> t = ckpt->find(name);
    if (!t) t = ckpt->find("bert." + name);
    if (!t) throw_config_error(ckpt->source(), ": tensor '", name, "' is missing");
    if (t->info->shape != shape)
      throw_config_error(ckpt->source(), ": tensor '", name, "' has shape ", shape_str(t->info->shape), ", expected ",
                         shape_str(shape));
    const DType d = t->info->dtype.value_or(DType::kU8);
    if (d != DType::kF32 && d != DType::kBF16 && d != DType::kF16)
      throw_config_error(ckpt->source(), ": tensor '", name, "' is ", t->info->dtype_name, "; BERT weights must be F32, BF16 or F16");
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    std::vector<float> out(static_cast<size_t>(n));
    convert_to_f32(t->data(), d, 0, n, out.data());
    return out;
  };
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  impl->word = tensor("embeddings.word_embeddings.weight", {c.vocab_size, H});
  impl->pos = tensor("embeddings.position_embeddings.weight", {c.max_position_embeddings, H});
  impl->type = tensor("embeddings.token_type_embeddings.weight", {c.type_vocab_size, H});
  impl->ln_w = tensor("embeddings.LayerNorm.weight", {H});
  impl->ln_b = tensor("embeddings.LayerNorm.bias", {H});
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = "encoder.layer." + std::to_string(l) + ".";
    Layer L;
    std::vector<float> qkv_w, qkv_b;
    for (const char* part : {"query", "key", "value"}) {
      std::vector<float> w = tensor(p + "attention.self." + part + ".weight", {H, H});
      std::vector<float> b = tensor(p + "attention.self." + part + ".bias", {H});
      qkv_w.insert(qkv_w.end(), w.begin(), w.end());
      qkv_b.insert(qkv_b.end(), b.begin(), b.end());
    }
    L.qkv = dense_pack(qkv_w.data(), qkv_b.data(), 3 * H, H);
    auto lin = [&](const std::string& name, int64_t n, int64_t k) {
      const std::vector<float> w = tensor(name + ".weight", {n, k}), b = tensor(name + ".bias", {n});
      return dense_pack(w.data(), b.data(), n, k);
    };
    L.attn_out = lin(p + "attention.output.dense", H, H);
    L.ln1_w = tensor(p + "attention.output.LayerNorm.weight", {H});
    L.ln1_b = tensor(p + "attention.output.LayerNorm.bias", {H});
    L.inter = lin(p + "intermediate.dense", I, H);
    L.out = lin(p + "output.dense", H, I);
    L.ln2_w = tensor(p + "output.LayerNorm.weight", {H});
    L.ln2_b = tensor(p + "output.LayerNorm.bias", {H});
    impl->layers.push_back(std::move(L));
  }

  // Attention as the selector picks it, on the user's settings, for an encoder-only, non-causal float32 layer
  // on the CPU.
  AttentionConfig attention = options.attention;
  attention.use_non_causal = true;
  BackendRegistry registry = BackendRegistry::builtin(false);
  AttentionSelector selector(registry, SelectionTarget{DeviceKind::kCpu, {0, 0}, "CPU"}, attention,
                             options.batch_invariant, options.env_layout);
  SelectorConfig sc;
  sc.head_size = c.head_size();
  sc.dtype = DType::kF32;
  sc.block_size = options.block_size;
  sc.attn_type = AttnType::kEncoderOnly;
  sc.use_non_causal = true;
  sc.use_batch_invariant = options.batch_invariant;
  LayerSelection sel = select_attention(selector, {sc}, options.block_size);
  impl->backend_name = std::string(backend_name_str(sel.per_layer.at(0)));
  impl->shape.num_q_heads = c.num_heads;
  impl->shape.num_kv_heads = c.num_heads;
  impl->shape.head_size = c.head_size();
  impl->shape.dtype = DType::kF32;
  impl->shape.kv_dtype = DType::kF32;
  impl->shape.layout = sel.plan.kv_layout;
  impl->shape.block_size = sel.plan.block_size;
  impl->shape.causal = false;
  RunnerOptions ro;
  ro.cpu = true;
  ro.batch_invariant = options.batch_invariant;
  ro.flex_block_m = attention.flex_attn_block_m.value_or(0);
  ro.flex_block_n = attention.flex_attn_block_n.value_or(0);
  ro.num_threads = impl->pool.num_threads();
  Impl* raw = impl.get();
  ro.parallel_for = [raw](int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body) {
    raw->pool.parallel_for(n, grain, body);
  };
  impl->runner = registry.shared(sel.per_layer.at(0))->make_runner(impl->shape, ro);
  impl->runner->reserve({});
  PAGODA_LOG_INFO("BERT encoder ", folder.string(), ": ", c.num_layers, " layers, hidden ", c.hidden_size,
                  ", attention ", impl->backend_name, " (", impl->shape.str(), ")");
  return std::unique_ptr<BertEncoder>(new BertEncoder(std::move(impl)));
}

void BertEncoder::Impl::forward(const std::vector<std::vector<int>>& seqs, const EncoderStepBlocks* blocks,
                                std::vector<float>* out) const {
  const int64_t H = cfg.hidden_size, I = cfg.intermediate_size;
  const int S = int(seqs.size());
  const int bs = shape.block_size;
  std::vector<int32_t> qsl(static_cast<size_t>(S) + 1, 0), lens(static_cast<size_t>(S));
  int max_blocks = 1;
  for (int s = 0; s < S; ++s) {
    const int n = int(seqs[size_t(s)].size());
    lens[size_t(s)] = n;
    qsl[size_t(s) + 1] = qsl[size_t(s)] + n;
    max_blocks = std::max(max_blocks, (n + bs - 1) / bs);
  }
  const int64_t T = qsl[size_t(S)];
  // The cache holds this step only and is rewritten by every layer before that layer reads it. Without the
  // caller's blocks, sequence s owns blocks [s * max_blocks, (s + 1) * max_blocks) of a cache of our own.
  std::vector<int32_t> own_tables;
  std::vector<float> own_cache;
  EncoderStepBlocks step;
  if (blocks) {
    step = *blocks;
    PAGODA_CHECK(step.cache && step.block_tables && step.block_table_stride >= max_blocks,
                 "encoder step: block tables of ", step.block_table_stride, " entries for sequences of up to ",
                 max_blocks, " blocks");
  } else {
    step.num_blocks = int64_t(S) * max_blocks;
    own_tables.resize(size_t(step.num_blocks));
    for (int64_t b = 0; b < step.num_blocks; ++b) own_tables[size_t(b)] = int32_t(b);
    own_cache.resize(size_t(step.num_blocks * kv_block_floats()));
    step.cache = own_cache.data();
    step.block_tables = own_tables.data();
    step.block_table_stride = max_blocks;
  }
  std::vector<int64_t> slots(static_cast<size_t>(T));
  for (int s = 0; s < S; ++s) {
    const int32_t* table = step.block_tables + int64_t(s) * step.block_table_stride;
    for (int i = 0; i < lens[size_t(s)]; ++i) {
      PAGODA_CHECK(table[i / bs] >= 0 && table[i / bs] < step.num_blocks, "encoder step: block ", table[i / bs],
                   " outside the cache of ", step.num_blocks);
      slots[size_t(qsl[size_t(s)] + i)] = int64_t(table[i / bs]) * bs + i % bs;
    }
  }

  std::vector<float>& x = *out;
  x.assign(size_t(T * H), 0.0f);
  for (int s = 0; s < S; ++s) {
    for (int i = 0; i < lens[size_t(s)]; ++i) {
      const int id = seqs[size_t(s)][size_t(i)];
      float* row = &x[size_t((qsl[size_t(s)] + i) * H)];
      for (int64_t h = 0; h < H; ++h)
        row[h] = word[size_t(id * H + h)] + pos[size_t(i * H + h)] + type[size_t(h)];
    }
  }
  layer_norm(x.data(), T, H, ln_w, ln_b, cfg.layer_norm_eps, &pool);

  runner->plan(AttentionBatch{std::vector<int>(lens.begin(), lens.end()), std::vector<int>(lens.begin(), lens.end())},
               nullptr);
  std::vector<float> qkv(size_t(T * 3 * H)), attn(size_t(T * H)), inter(size_t(std::min(T, kFfnRows) * I));
  for (size_t l = 0; l < layers.size(); ++l) {
    const Layer& L = layers[l];
    linear(x.data(), L.qkv, qkv.data(), T, &pool);
    AttentionParams ap;
    ap.layer = int(l);
    ap.q = qkv.data();
    ap.q_stride = 3 * H;
    ap.out = attn.data();
    ap.kv_cache = step.cache;
    ap.num_blocks = step.num_blocks;
    ap.k = qkv.data() + H;
    ap.v = qkv.data() + 2 * H;
    ap.kv_stride = 3 * H;
    ap.slot_mapping = slots.data();
    ap.query_start_loc = qsl.data();
    ap.seq_lens = lens.data();
    ap.block_tables = step.block_tables;
    ap.block_table_stride = step.block_table_stride;
    ap.num_tokens = int(T);
    ap.num_seqs = S;
    runner->run(ap, nullptr);
    linear(attn.data(), L.attn_out, x.data(), T, &pool, /*residual=*/x.data());
    layer_norm(x.data(), T, H, L.ln1_w, L.ln1_b, cfg.layer_norm_eps, &pool);
    // The feed-forward in chunks of rows, so a chunk's intermediate activations stay in cache between the
    // two products instead of a [T, intermediate] buffer going through memory.
    for (int64_t r0 = 0; r0 < T; r0 += kFfnRows) {
      const int64_t rows = std::min(kFfnRows, T - r0);
      float* xr = x.data() + r0 * H;
      linear(xr, L.inter, inter.data(), rows, &pool, nullptr, DenseEpilogue::kGeluErf);
      linear(inter.data(), L.out, xr, rows, &pool, /*residual=*/xr);
    }
    layer_norm(x.data(), T, H, L.ln2_w, L.ln2_b, cfg.layer_norm_eps, &pool);
  }
}

namespace {

void check_sequences(const std::vector<std::vector<int>>& seqs, const BertConfig& c, int max_len) {
  for (size_t s = 0; s < seqs.size(); ++s) {
    const size_t n = seqs[s].size();
    if (n == 0 || n > size_t(max_len))
      throw_runtime_error("embedding input ", s, " has ", n, " tokens; this model takes 1 to ", max_len);
    for (int id : seqs[s])
      if (id < 0 || id >= c.vocab_size)
        throw_runtime_error("embedding input ", s, " has token id ", id, ", outside 0..", c.vocab_size - 1);
  }
}

}  // namespace

std::vector<float> BertEncoder::hidden_states(const std::vector<std::vector<int>>& sequences,
                                              const EncoderStepBlocks* blocks) const {
  check_sequences(sequences, impl_->cfg, impl_->cfg.max_position_embeddings);
  std::vector<float> x;
  impl_->forward(sequences, blocks, &x);
  return x;
}

std::vector<std::vector<float>> BertEncoder::embed(const std::vector<std::vector<int>>& sequences,
                                                   const EncoderStepBlocks* blocks) const {
  const std::vector<float> x = hidden_states(sequences, blocks);
  const int64_t H = impl_->cfg.hidden_size;
  std::vector<std::vector<float>> out;
  int64_t row = 0;
  for (const std::vector<int>& seq : sequences) {
    const int64_t n = int64_t(seq.size());
    std::vector<double> acc(size_t(H), impl_->sentence.pooling == PoolingMode::kMax ? -INFINITY : 0.0);
    for (int64_t i = 0; i < n; ++i) {
      const float* v = &x[size_t((row + i) * H)];
      if (impl_->sentence.pooling == PoolingMode::kCls && i > 0) break;
      for (int64_t h = 0; h < H; ++h)
        acc[size_t(h)] = impl_->sentence.pooling == PoolingMode::kMax ? std::max(acc[size_t(h)], double(v[h]))
                                                                      : acc[size_t(h)] + v[h];
    }
    const double div = impl_->sentence.pooling == PoolingMode::kMean          ? double(n)
                       : impl_->sentence.pooling == PoolingMode::kMeanSqrtLen ? std::sqrt(double(n))
                                                                              : 1.0;
    double norm = 0;
    for (double& a : acc) {
      a /= div;
      norm += a * a;
    }
    // sentence-transformers' Normalize is F.normalize: x / max(||x||, 1e-12).
    const double scale = impl_->sentence.normalize ? 1.0 / std::max(std::sqrt(norm), 1e-12) : 1.0;
    std::vector<float> e(static_cast<size_t>(H));
    for (int64_t h = 0; h < H; ++h) e[size_t(h)] = float(acc[size_t(h)] * scale);
    out.push_back(std::move(e));
    row += n;
  }
  return out;
}

}  // namespace pagoda
