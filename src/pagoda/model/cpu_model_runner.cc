#include "pagoda/model/cpu_model_runner.h"

#include <cstdlib>

#include <algorithm>

#include "pagoda/attention/registry.h"
#include "pagoda/core/error.h"
#include "pagoda/ops/act.h"
#include "pagoda/ops/embedding.h"
#include "pagoda/ops/gemm.h"
#include "pagoda/ops/rmsnorm.h"

namespace pagoda {
namespace {

RopeFrequencyParams rope_params(const ModelConfig& c) {
  RopeFrequencyParams r;
  r.rotary_dim = c.head_dim;
  r.theta = c.rope_theta;
  const RopeScaling& s = c.rope_scaling;
  r.kind = s.type == "llama3" ? RopeKind::kLlama3 : s.type == "linear" ? RopeKind::kLinear : RopeKind::kDefault;
  r.factor = s.factor;
  r.low_freq_factor = s.low_freq_factor;
  r.high_freq_factor = s.high_freq_factor;
  r.original_max_position_embeddings = s.original_max_position_embeddings;
  r.freq_factors = s.freq_factors.empty() ? nullptr : s.freq_factors.data();
  return r;
}

void linear(const float* x, int64_t ldx, const WeightMatrix& w, const std::vector<float>& bias, float* y, int64_t ldy,
            int64_t m, ThreadPool* pool) {
  MatmulParams p;
  p.x = x;
  p.ldx = ldx;
  p.w = w.data;
  p.w_dtype = w.dtype;
  p.w_quant = w.quant;
  p.bias = bias.empty() ? nullptr : bias.data();
  p.y = y;
  p.ldy = ldy;
  p.m = m;
  p.n = w.rows;
  p.k = w.cols;
  matmul(p, pool);
}

}  // namespace

CpuModelRunner::CpuModelRunner(const LoadedModel& model, const KvCacheOptions& cache, int num_threads)
    : CpuModelRunner(model, cache,
                     group_attention_layers(model.config,
                                            std::vector<std::shared_ptr<const AttentionBackend>>(
                                                size_t(model.config.num_layers), cpu_attention_backend()),
                                            DType::kF32, cache.dtype, KvLayout::kHND, cache.block_size, true, {}),
                     num_threads) {}

CpuModelRunner::CpuModelRunner(const LoadedModel& model, const KvCacheOptions& cache, std::vector<AttentionGroup> groups,
                               int num_threads)
    : config_(model.config), weights_(model.weights), cache_(cache), pool_(num_threads), groups_(std::move(groups)) {
  const ModelConfig& c = config_;
  if (cache_.block_size <= 0) throw_config_error("KV cache block size must be positive, got ", cache_.block_size);
  if (cache_.num_blocks <= 0) throw_config_error("KV cache needs at least one block, got ", cache_.num_blocks);
  layer_group_.assign(size_t(c.num_layers), -1);
  std::vector<size_t> layer_bytes(size_t(c.num_layers));
  for (size_t g = 0; g < groups_.size(); ++g) {
    AttentionGroup& group = groups_[g];
    RunnerOptions options = group.options;
    options.cpu = true;
    options.num_threads = pool_.num_threads();
    options.parallel_for = [this](int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body) {
      pool_.parallel_for(n, grain, body);
    };
    if (group.shape.block_size != cache_.block_size)
      throw_config_error("attention layers of ", group.shape.str(), " do not match the KV cache's block size ",
                         cache_.block_size);
    // The runner refuses a cache format its kernels do not read (make_runner throws a config error).
    runners_.push_back(group.backend->make_runner(group.shape, options));
    runners_.back()->reserve({});  // the CPU runners allocate nothing ahead
    const size_t block_bytes = size_t(kv_block_bytes(group));
    for (int l : group.layers) {
      PAGODA_CHECK(l >= 0 && l < c.num_layers && layer_group_[size_t(l)] < 0, "layer ", l, " in no or two groups");
      layer_group_[size_t(l)] = int(g);
      layer_bytes[size_t(l)] = block_bytes;
    }
  }
  for (int l = 0; l < c.num_layers; ++l) PAGODA_CHECK(layer_group_[size_t(l)] >= 0, "layer ", l, " has no attention runner");
  inv_freq_ = rope_inv_freq(rope_params(c));
  // Each layer's cache in its group's format (layers of one model may differ: TurboQuant boundary layers keep
  // an uncompressed cache). calloc: large zeroed blocks come from fresh mmap pages, touched only when written
  // (a 4 GiB cache costs nothing until used, where value-initialising a vector would fault in every page up
  // front).
  kv_cache_.clear();
  for (int l = 0; l < c.num_layers; ++l) {
    const size_t bytes = size_t(cache_.num_blocks) * layer_bytes[size_t(l)];
    void* p = std::calloc(bytes, 1);
    if (!p) throw_runtime_error("cannot allocate the CPU KV cache: ", bytes, " bytes for layer ", l);
    kv_cache_.emplace_back(static_cast<uint8_t*>(p), &std::free);
  }
}

size_t CpuModelRunner::kv_cache_block_bytes(int layer) const {
  PAGODA_CHECK(layer >= 0 && layer < config_.num_layers, "layer ", layer, " of ", config_.num_layers);
  return size_t(kv_block_bytes(groups_[size_t(layer_group_[size_t(layer)])]));
}

void CpuModelRunner::check_batch(const ForwardBatch& b) const {
  const int S = b.num_seqs();
  const int64_t T = b.num_tokens();
  if (int(b.query_start_loc.size()) != S + 1)
    throw_runtime_error("forward batch: query_start_loc has ", b.query_start_loc.size(), " entries, expected num_seqs + 1 = ", S + 1);
  if (b.query_start_loc[0] != 0 || b.query_start_loc[size_t(S)] != T)
    throw_runtime_error("forward batch: query_start_loc must run from 0 to num_tokens (", T, ")");
  if (b.max_blocks_per_seq < 0 || int64_t(b.block_tables.size()) != int64_t(S) * b.max_blocks_per_seq)
    throw_runtime_error("forward batch: block_tables has ", b.block_tables.size(), " entries, expected ", S, " x ",
                        b.max_blocks_per_seq);
  for (int s = 0; s < S; ++s) {
    const int32_t q_len = b.query_start_loc[size_t(s + 1)] - b.query_start_loc[size_t(s)];
    if (q_len < 0) throw_runtime_error("forward batch: query_start_loc decreases at sequence ", s);
    if (b.seq_lens[size_t(s)] < q_len)
      throw_runtime_error("forward batch: sequence ", s, " has ", q_len, " new tokens but seq_len ", b.seq_lens[size_t(s)]);
    const int64_t need = (int64_t(b.seq_lens[size_t(s)]) + cache_.block_size - 1) / cache_.block_size;
    if (need > b.max_blocks_per_seq)
      throw_runtime_error("forward batch: sequence ", s, " needs ", need, " blocks, its table has ", b.max_blocks_per_seq);
    for (int64_t i = 0; i < need; ++i) {
      const int32_t id = b.block_tables[size_t(int64_t(s) * b.max_blocks_per_seq + i)];
      if (id < 0 || id >= cache_.num_blocks)
        throw_runtime_error("forward batch: sequence ", s, " block ", i, " is ", id, ", outside the KV cache (",
                            cache_.num_blocks, " blocks)");
    }
  }
  for (int32_t i : b.logits_indices)
    if (i < 0 || i >= T) throw_runtime_error("forward batch: logits index ", i, " is outside [0, ", T, ")");
}

std::vector<float> CpuModelRunner::forward(const ForwardBatch& b) {
  check_batch(b);
  const ModelConfig& c = config_;
  const ModelWeights& w = *weights_;
  const int64_t T = b.num_tokens();
  const int64_t H = c.hidden_size, F = c.intermediate_size, hd = c.head_dim;
  const int64_t Q = int64_t(c.num_heads) * hd, KV = int64_t(c.num_kv_heads) * hd;

  // Plan: positions and cache slots of the new tokens.
  positions_.resize(size_t(T));
  slots_.resize(size_t(T));
  for (int s = 0; s < b.num_seqs(); ++s) {
    const int32_t q0 = b.query_start_loc[size_t(s)], q1 = b.query_start_loc[size_t(s + 1)];
    for (int32_t t = q0; t < q1; ++t) {
      const int32_t pos = b.seq_lens[size_t(s)] - (q1 - q0) + (t - q0);
      positions_[size_t(t)] = pos;
      const int64_t block = b.block_tables[size_t(int64_t(s) * b.max_blocks_per_seq + pos / cache_.block_size)];
      slots_[size_t(t)] = block * cache_.block_size + pos % cache_.block_size;
    }
  }
  AttentionBatch ab;
  for (int s = 0; s < b.num_seqs(); ++s) {
    ab.query_lens.push_back(b.query_start_loc[size_t(s + 1)] - b.query_start_loc[size_t(s)]);
    ab.seq_lens.push_back(b.seq_lens[size_t(s)]);
  }
  ab.block_tables = b.block_tables.data();
  ab.block_table_stride = b.max_blocks_per_seq;
  for (auto& r : runners_) r->plan(ab, nullptr);
  h_.resize(size_t(T * H));
  xn_.resize(size_t(T * H));
  qkv_.resize(size_t(T * (Q + 2 * KV)));
  attn_.resize(size_t(T * Q));
  tmp_.resize(size_t(T * H));
  gu_.resize(size_t(T * 2 * F));
  act_.resize(size_t(T * F));

  EmbeddingParams e;
  e.table = w.embed.data;
  e.dtype = w.embed.dtype;
  e.quant = w.embed.quant;
  e.vocab = w.embed.rows;
  e.hidden = H;
  e.ids = b.token_ids.data();
  e.num_tokens = T;
  e.out = h_.data();
  embedding_lookup(e, &pool_);

  for (int l = 0; l < c.num_layers; ++l) layer(l, b, T);

  // Logits for the requested rows only: gather, final norm, lm_head.
  const int64_t R = int64_t(b.logits_indices.size());
  std::vector<float> sel(size_t(R * H));
  for (int64_t r = 0; r < R; ++r)
    std::copy_n(h_.data() + int64_t(b.logits_indices[size_t(r)]) * H, H, sel.data() + r * H);
  rmsnorm({.x = sel.data(), .w = w.final_norm.data(), .y = sel.data(), .rows = R, .cols = H, .eps = float(c.rms_norm_eps)}, &pool_);
  std::vector<float> logits(size_t(R * c.vocab_size));
  linear(sel.data(), H, w.lm_head, {}, logits.data(), c.vocab_size, R, &pool_);
  return logits;
}

void CpuModelRunner::layer(int l, const ForwardBatch& b, int64_t T) {
  const ModelConfig& c = config_;
  const LayerWeights& lw = weights_->layers[size_t(l)];
  const int64_t H = c.hidden_size, F = c.intermediate_size, hd = c.head_dim;
  const int64_t Q = int64_t(c.num_heads) * hd, KV = int64_t(c.num_kv_heads) * hd, W = Q + 2 * KV;
  const float eps = float(c.rms_norm_eps);
  float* q = qkv_.data();
  float* k = q + Q;
  float* v = q + Q + KV;

  // Attention block.
  rmsnorm({.x = h_.data(), .w = lw.input_norm.data(), .y = xn_.data(), .rows = T, .cols = H, .eps = eps}, &pool_);
  linear(xn_.data(), H, lw.q, lw.q_bias, q, W, T, &pool_);
  linear(xn_.data(), H, lw.k, lw.k_bias, k, W, T, &pool_);
  linear(xn_.data(), H, lw.v, lw.v_bias, v, W, T, &pool_);
  if (c.qk_norm) {
    parallel_for(&pool_, T, 16, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        rmsnorm({.x = q + t * W, .w = lw.q_norm.data(), .y = q + t * W, .rows = c.num_heads, .cols = hd, .eps = eps}, nullptr);
        rmsnorm({.x = k + t * W, .w = lw.k_norm.data(), .y = k + t * W, .rows = c.num_kv_heads, .cols = hd, .eps = eps}, nullptr);
      }
    });
  }
  rope_apply({.x = q, .num_tokens = T, .num_heads = c.num_heads, .head_dim = int(hd), .token_stride = W,
              .positions = positions_.data(), .inv_freq = inv_freq_.data()}, &pool_);
  rope_apply({.x = k, .num_tokens = T, .num_heads = c.num_kv_heads, .head_dim = int(hd), .token_stride = W,
              .positions = positions_.data(), .inv_freq = inv_freq_.data()}, &pool_);

  AttentionParams ap;
  ap.q = q;
  ap.q_stride = W;
  ap.out = attn_.data();
  ap.layer = l;
  ap.kv_cache = kv_cache_[size_t(l)].get();
  ap.num_blocks = cache_.num_blocks;
  ap.k = k;
  ap.v = v;
  ap.kv_stride = W;
  ap.slot_mapping = slots_.data();
  ap.query_start_loc = b.query_start_loc.data();
  ap.seq_lens = b.seq_lens.data();
  ap.block_tables = b.block_tables.data();
  ap.block_table_stride = b.max_blocks_per_seq;
  ap.num_tokens = int(T);
  ap.num_seqs = b.num_seqs();
  ap.k_scale = cache_.layer_k_scale(l);
  ap.v_scale = cache_.layer_v_scale(l);
  runners_[size_t(layer_group_[size_t(l)])]->run(ap, nullptr);

  linear(attn_.data(), Q, lw.o, lw.o_bias, tmp_.data(), H, T, &pool_);
  add_inplace(h_.data(), tmp_.data(), T * H, &pool_);

  // MLP block: down(silu(gate(x)) * up(x)).
  rmsnorm({.x = h_.data(), .w = lw.post_attn_norm.data(), .y = xn_.data(), .rows = T, .cols = H, .eps = eps}, &pool_);
  linear(xn_.data(), H, lw.gate, {}, gu_.data(), 2 * F, T, &pool_);
  linear(xn_.data(), H, lw.up, {}, gu_.data() + F, 2 * F, T, &pool_);
  swiglu({.gate = gu_.data(), .up = gu_.data() + F, .out = act_.data(), .rows = T, .cols = F, .ld_in = 2 * F}, &pool_);
  linear(act_.data(), F, lw.down, {}, tmp_.data(), H, T, &pool_);
  add_inplace(h_.data(), tmp_.data(), T * H, &pool_);
}

}  // namespace pagoda
