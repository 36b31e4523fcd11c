#include "pagoda/model/cuda/cuda_model_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <cstring>

#include "pagoda/core/error.h"
#include "pagoda/core/logging.h"
#include "pagoda/core/strings.h"
#include "pagoda/model/cuda/cuda_kv_cache.h"
#include "pagoda/model/cuda/cuda_linear.h"
#include "pagoda/model/cuda/cuda_weights.h"
#include "pagoda/ops/cuda/activation.h"
#include "pagoda/ops/cuda/convert.h"
#include "pagoda/ops/cuda/device_buffer.h"
#include "pagoda/ops/cuda/embedding.h"
#include "pagoda/ops/cuda/gemm.h"
#include "pagoda/ops/cuda/quant_dequant.h"
#include "pagoda/ops/cuda/sampling.h"
#include "pagoda/ops/cuda/rmsnorm.h"
#include "pagoda/ops/cuda/rope_kv.h"

namespace pagoda {
namespace {

constexpr size_t kAlign = 256;
size_t align_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

}  // namespace


namespace {
void finish_step(CudaModelRunner::Impl& m);
}  // namespace

struct CudaModelRunner::Impl {
  using Runners = std::vector<std::unique_ptr<AttentionRunner>>;  // one per layer group
  CudaRunnerOptions opt;
  ModelConfig cfg;
  cudaStream_t stream = nullptr;
  GemmRunner gemm;
  CudaWeights w;
  DeviceBuffer wscratch;  // quantized weights dequantized for a GEMM (cuda_linear.h)
  LinearContext lin;
  CudaKvCache kv;  // each layer's paged cache in its group's format
  DeviceBuffer rope_cos, rope_sin;
  int rope_max_pos = 0;
  // Activations for max_num_tokens tokens.
  DeviceBuffer h, xn, qkv, attn, o, gu, act, xsel, logits, logits_f32;
  // Step metadata: one device buffer filled by one copy from a pinned staging buffer.
  DeviceBuffer meta;
  PinnedBuffer meta_host;
  PinnedBuffer logits_host;
  size_t off_ids = 0, off_pos = 0, off_slot = 0, off_qsl = 0, off_sl = 0, off_bt = 0, off_li = 0, off_err = 0, off_tokens = 0;
  // The step metadata's arrays at the offsets above, in the pinned host copy or the device one.
  struct MetaArrays {
    int32_t* ids;
    int64_t* pos;
    int64_t* slot;
    int32_t* qsl;
    int32_t* sl;
    int32_t* bt;
    int32_t* li;
  };
  MetaArrays meta_arrays(void* base) const {
    uint8_t* b = static_cast<uint8_t*>(base);
    return {reinterpret_cast<int32_t*>(b + off_ids), reinterpret_cast<int64_t*>(b + off_pos),
            reinterpret_cast<int64_t*>(b + off_slot), reinterpret_cast<int32_t*>(b + off_qsl),
            reinterpret_cast<int32_t*>(b + off_sl), reinterpret_cast<int32_t*>(b + off_bt),
            reinterpret_cast<int32_t*>(b + off_li)};
  }
  PinnedBuffer err_host;
  int max_blocks_cap = 0;
  Runners runners;               // eager steps
  std::vector<int> layer_group;  // [num_layers] -> index into a Runners
  int num_sms = 132;
  // Decode CUDA graphs by padded batch size.
  struct Graph {
    Runners runners;  // one fixed decode work list per group
    cudaGraphExec_t exec = nullptr;
    ~Graph() {
      if (exec) cudaGraphExecDestroy(exec);
    }
  };
  std::vector<int> graph_sizes;
  std::map<int, std::unique_ptr<Graph>> graphs;

  // Profiling (set_profiling): the step being recorded, events around it and after each op of an eager step.
  struct Profile {
    bool on = false;
    bool ops = false;  // record op events in enqueue_step (eager steps, never while capturing)
    CudaStepProfile step;
    std::chrono::steady_clock::time_point t0;
    cudaEvent_t start = nullptr, end = nullptr;
    std::vector<cudaEvent_t> op_events;  // op_events[0] at the step's first op, op_events[i] after op i
    std::vector<int> op_kinds;           // the StepOp of op i (op_kinds[0] unused)
    int num_op_events = 0;
    std::vector<CudaStepProfile> steps;
    ~Profile() {
      for (cudaEvent_t e : op_events) cudaEventDestroy(e);
      if (start) cudaEventDestroy(start);
      if (end) cudaEventDestroy(end);
    }
  } prof;

  int qkv_width() const { return (cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_dim; }
};

namespace {
double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Profiling: the step's GPU time (total and per op) once it has finished.
void collect_profile(CudaModelRunner::Impl& m) {
  auto& p = m.prof;
  float ms = 0;
  PAGODA_CUDA_CHECK(cudaEventElapsedTime(&ms, p.start, p.end));
  p.step.gpu_s = ms * 1e-3;
  for (int i = 1; i < p.num_op_events; ++i) {
    PAGODA_CUDA_CHECK(cudaEventElapsedTime(&ms, p.op_events[size_t(i) - 1], p.op_events[size_t(i)]));
    p.step.op_s[size_t(p.op_kinds[size_t(i)])] += ms * 1e-3;
  }
  p.num_op_events = 0;
  p.steps.push_back(p.step);
}

// Waits for the step and turns a kernel's out-of-range flag into an error (then clears it). The caller has
// enqueued the step's result copy.
void finish_step(CudaModelRunner::Impl& m) {
  const auto t_wait = std::chrono::steady_clock::now();
  if (m.prof.on) PAGODA_CUDA_CHECK(cudaEventRecord(m.prof.end, m.stream));
  int* d_err = reinterpret_cast<int*>(static_cast<uint8_t*>(m.meta.data()) + m.off_err);
  PAGODA_CUDA_CHECK(cudaMemcpyAsync(m.err_host.data(), d_err, 4, cudaMemcpyDeviceToHost, m.stream));
  PAGODA_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  if (m.prof.on) {
    m.prof.step.wait_s = since(t_wait);
    collect_profile(m);
  }
  if (*m.err_host.as<int>() != 0) {
    PAGODA_CUDA_CHECK(cudaMemset(d_err, 0, 4));
    throw_runtime_error("a token id, position or KV slot of this step was out of range");
  }
}
}  // namespace


namespace {

// The RoPE cos/sin tables for every position a step may reach.
void build_rope_tables(CudaModelRunner::Impl& m) {
  const ModelConfig& c = m.cfg;
  m.rope_max_pos = std::max(m.opt.max_model_len, c.max_position_embeddings);
  Llama3RopeScaling l3;
  const Llama3RopeScaling* l3p = nullptr;
  if (c.rope_scaling.type == "llama3") {
    l3.factor = c.rope_scaling.factor;
    l3.low_freq_factor = c.rope_scaling.low_freq_factor;
    l3.high_freq_factor = c.rope_scaling.high_freq_factor;
    l3.original_max_position = c.rope_scaling.original_max_position_embeddings;
    l3p = &l3;
  }
  const std::vector<float>& factors = c.rope_scaling.freq_factors;  // GGUF rope_freqs
  RopeTable table = build_rope_table(m.rope_max_pos, c.head_dim, c.rope_theta, l3p, factors.empty() ? nullptr : factors.data());
  m.rope_cos = DeviceBuffer(table.cos.size() * sizeof(float));
  m.rope_sin = DeviceBuffer(table.sin.size() * sizeof(float));
  m.rope_cos.upload(table.cos.data(), table.cos.size() * sizeof(float));
  m.rope_sin.upload(table.sin.data(), table.sin.size() * sizeof(float));
}

// Activations for max_num_tokens tokens, logits for max_num_seqs rows, and the step metadata: one device
// buffer filled by one copy from a pinned staging buffer.
void allocate_step_buffers(CudaModelRunner::Impl& m) {
  const ModelConfig& c = m.cfg;
  const size_t es = dtype_size(m.opt.dtype);
  const size_t H = size_t(c.hidden_size), D = size_t(c.head_dim), F = size_t(c.intermediate_size), V = size_t(c.vocab_size);
  const size_t T = size_t(std::max(1, m.opt.max_num_tokens));
  const size_t S = size_t(std::max(1, m.opt.max_num_seqs));
  m.h = DeviceBuffer(T * H * es);
  m.xn = DeviceBuffer(T * H * es);
  m.qkv = DeviceBuffer(T * size_t(m.qkv_width()) * es);
  m.attn = DeviceBuffer(T * size_t(c.num_heads) * D * es);
  m.o = DeviceBuffer(T * H * es);
  m.gu = DeviceBuffer(T * 2 * F * es);
  m.act = DeviceBuffer(T * F * es);
  m.xsel = DeviceBuffer(S * H * es);
  m.logits = DeviceBuffer(S * V * es);
  m.logits_f32 = DeviceBuffer(S * V * sizeof(float));
  m.logits_host = PinnedBuffer(S * V * sizeof(float));
  m.max_blocks_cap = (m.opt.max_model_len + m.opt.block_size - 1) / m.opt.block_size;
  size_t at = 0;
  auto place = [&](size_t bytes) {
    size_t o = at;
    at += align_up(bytes);
    return o;
  };
  m.off_ids = place(T * 4);
  m.off_pos = place(T * 8);
  m.off_slot = place(T * 8);
  m.off_qsl = place((S + 1) * 4);
  m.off_sl = place(S * 4);
  m.off_bt = place(S * size_t(m.max_blocks_cap) * 4);
  m.off_li = place(S * 4);
  m.off_err = place(4);
  m.off_tokens = place(S * 4);
  m.meta = DeviceBuffer(at);
  m.meta_host = PinnedBuffer(at);
  m.err_host = PinnedBuffer(4);
  PAGODA_CUDA_CHECK(cudaMemset(m.meta.data(), 0, at));
}

// The linear layers' context, and its scratch for the largest quantized matrix that can be dequantized (the
// lm_head never is, except in fp32 compute).
void allocate_linear_scratch(CudaModelRunner::Impl& m) {
  const DType dt = m.opt.dtype;
  size_t bytes = dt == DType::kF32 ? linear_scratch_bytes(m.w.lm_head, dt) : 0;
  for (const CudaLayerWeights& l : m.w.layers)
    for (const CudaMatrix* w : {&l.w_qkv, &l.w_o, &l.w_gate_up, &l.w_down}) bytes = std::max(bytes, linear_scratch_bytes(*w, dt));
  if (bytes > 0) m.wscratch = DeviceBuffer(bytes);
  m.lin = {&m.gemm, dt, m.opt.batch_invariant, m.wscratch.data(), bytes, m.stream};
}

// One runner per layer group, reserved for `limits`.
CudaModelRunner::Impl::Runners make_runners(const CudaModelRunner::Impl& m, const RunnerLimits& limits) {
  CudaModelRunner::Impl::Runners runners;
  for (const AttentionGroup& g : m.opt.attention) {
    RunnerOptions o = g.options;
    o.num_sms = m.num_sms;
    runners.push_back(g.backend->make_runner(g.shape, o));
    runners.back()->reserve(limits);
  }
  return runners;
}

// The eager runners (their workspaces, FA3's staging buffer, are reserved before the KV cache takes what
// memory is left) and the decode batch sizes that get a CUDA graph.
void make_attention(CudaModelRunner::Impl& m) {
  const ModelConfig& c = m.cfg;
  m.layer_group.assign(size_t(c.num_layers), -1);
  for (size_t g = 0; g < m.opt.attention.size(); ++g) {
    const AttentionGroup& group = m.opt.attention[g];
    // A TurboQuant group's cache holds packed slots (kv_dtype kU8); every other group's, opt.kv_dtype.
    const bool kv_ok = group.shape.kv_dtype == m.opt.kv_dtype || !group.shape.kv_preset.empty();
    if (group.shape.dtype != m.opt.dtype || !kv_ok || group.shape.block_size != m.opt.block_size ||
        group.shape.layout != m.opt.layout)
      throw_config_error("attention layers of ", group.shape.str(), " do not match the model (",
                         dtype_name(m.opt.dtype), ") or the KV cache (", dtype_name(m.opt.kv_dtype), " ",
                         kv_layout_str(m.opt.layout), ", block ", m.opt.block_size, ")");
    for (int l : group.layers) {
      PAGODA_CHECK(l >= 0 && l < c.num_layers && m.layer_group[size_t(l)] < 0, "layer ", l, " in no or two groups");
      m.layer_group[size_t(l)] = int(g);
    }
  }
  for (int l = 0; l < c.num_layers; ++l) PAGODA_CHECK(m.layer_group[size_t(l)] >= 0, "layer ", l, " has no attention runner");
  const int T = std::max(1, m.opt.max_num_tokens), S = std::max(1, m.opt.max_num_seqs);
  m.runners = make_runners(m, {.max_tokens = T, .max_seqs = S, .max_model_len = m.opt.max_model_len});
  for (size_t g = 0; g < m.runners.size(); ++g)
    PAGODA_LOG_INFO("attention layers ", m.opt.attention[g].layers.front(), "-", m.opt.attention[g].layers.back(), " (",
                    m.opt.attention[g].layers.size(), "): ", m.runners[g]->describe(), ", ", m.opt.attention[g].shape.str());
  if (!m.opt.enforce_eager)
    for (int size : {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 448, 512})
      if (size <= S && size <= T) m.graph_sizes.push_back(size);
}

}  // namespace

CudaModelRunner::CudaModelRunner(const LoadedModel& model, const CudaRunnerOptions& options)
    : config_(model.config), impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.opt = options;
  m.cfg = model.config;
  const DType dt = options.dtype;
  PAGODA_CHECK(dt == DType::kBF16 || dt == DType::kF16 || dt == DType::kF32, "CUDA runner dtype ", dtype_name(dt));
  PAGODA_CHECK(options.layer_kv_scales.empty() || int(options.layer_kv_scales.size()) == m.cfg.num_layers,
               "KV scales for ", options.layer_kv_scales.size(), " of ", m.cfg.num_layers, " layers");
  PAGODA_CUDA_CHECK(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
  int dev = 0;
  PAGODA_CUDA_CHECK(cudaGetDevice(&dev));
  PAGODA_CUDA_CHECK(cudaDeviceGetAttribute(&m.num_sms, cudaDevAttrMultiProcessorCount, dev));
  m.gemm.set_batch_invariant(options.batch_invariant);
  m.w = upload_weights(model, dt, m.stream);
  allocate_linear_scratch(m);
  build_rope_tables(m);
  allocate_step_buffers(m);
  make_attention(m);
  m.kv = allocate_cuda_kv_cache(m.cfg, m.opt, m.layer_group, cache_);
}

CudaModelRunner::~CudaModelRunner() {
  if (impl_ && impl_->stream) cudaStreamDestroy(impl_->stream);
}

void CudaModelRunner::set_profiling(bool on) {
  Impl& m = *impl_;
  auto& p = m.prof;
  if (on && !p.start) {
    PAGODA_CUDA_CHECK(cudaEventCreate(&p.start));
    PAGODA_CUDA_CHECK(cudaEventCreate(&p.end));
    const size_t n = size_t(m.cfg.num_layers) * 12 + 8;  // at most 11 ops a layer
    p.op_events.resize(n);
    for (auto& e : p.op_events) PAGODA_CUDA_CHECK(cudaEventCreate(&e));
    p.op_kinds.assign(n, 0);
  }
  p.on = on;
}

const std::vector<CudaStepProfile>& CudaModelRunner::step_profiles() const { return impl_->prof.steps; }

uint64_t CudaModelRunner::weight_bytes() const { return impl_->w.buffer.bytes(); }
uint64_t CudaModelRunner::kv_cache_bytes() const { return impl_->kv.data.bytes(); }

std::vector<float> CudaModelRunner::forward(const ForwardBatch& b) {
  Impl& m = *impl_;
  const int R = run_to_logits(b);
  if (R == 0) {
    if (m.prof.on && b.num_tokens() > 0) finish_step(m);
    return {};
  }
  const int V = m.cfg.vocab_size;
  PAGODA_CUDA_CHECK(cudaMemcpyAsync(m.logits_host.data(), m.logits_f32.data(), size_t(R) * V * 4, cudaMemcpyDeviceToHost, m.stream));
  finish_step(m);
  const float* lh = m.logits_host.as<float>();
  return std::vector<float>(lh, lh + size_t(R) * V);
}

std::optional<std::vector<int32_t>> CudaModelRunner::forward_greedy(const ForwardBatch& b) {
  Impl& m = *impl_;
  const int R = run_to_logits(b);
  if (R == 0) {
    if (m.prof.on && b.num_tokens() > 0) finish_step(m);
    return std::vector<int32_t>{};
  }
  int32_t* d_tokens = reinterpret_cast<int32_t*>(static_cast<uint8_t*>(m.meta.data()) + m.off_tokens);
  std::vector<int32_t> tokens(static_cast<size_t>(R));
  PAGODA_CUDA_CHECK(cudaMemcpyAsync(m.logits_host.data(), d_tokens, size_t(R) * 4, cudaMemcpyDeviceToHost, m.stream));
  finish_step(m);
  std::memcpy(tokens.data(), m.logits_host.data(), size_t(R) * 4);
  return tokens;
}

// Enqueues one step of T tokens / S sequences / R logits rows over the metadata already in m.meta, with the
// planned attention work lists of `runners`. Everything here is a kernel launch on m.stream (no
// allocation, no sync), so a decode step can be captured in a CUDA graph.
void CudaModelRunner::enqueue_step(int T, int S, int R, const Impl::Runners& runners) {
  Impl& m = *impl_;
  const ModelConfig& c = m.cfg;
  const DType dt = m.opt.dtype;
  const int H = c.hidden_size, D = c.head_dim, F = c.intermediate_size, V = c.vocab_size, QKV = m.qkv_width();
  const int bs = m.opt.block_size;
  uint8_t* dm = static_cast<uint8_t*>(m.meta.data());
  const auto [d_ids, d_pos, d_slot, d_qsl, d_sl, d_bt, d_li] = m.meta_arrays(dm);
  auto* d_err = reinterpret_cast<int*>(dm + m.off_err);
  auto* d_tokens = reinterpret_cast<int32_t*>(dm + m.off_tokens);

  const float eps = float(c.rms_norm_eps);
  auto mark = [&](StepOp op) {  // profiling: an event after each op of an eager step
    auto& p = m.prof;
    if (!p.ops) return;
    PAGODA_CUDA_CHECK(cudaEventRecord(p.op_events[size_t(p.num_op_events)], m.stream));
    p.op_kinds[size_t(p.num_op_events++)] = int(op);
  };
  mark(StepOp::kNorm);  // the first event only starts the clock
  if (m.w.embed.quantized()) {  // a GGUF token_embd: its rows dequantized (the id check as embedding()'s)
    QuantDequantParams e;
    e.w = m.w.embed.parts.front().data;
    e.type = m.w.embed.parts.front().quant;
    e.rows = V;
    e.cols = H;
    e.row_ids = d_ids;
    e.error_flag = d_err;
    e.out_rows = T;
    e.out = m.h.data();
    e.dtype = dt;
    quant_dequant(e, m.stream);
  } else {
    embedding({d_ids, m.w.embed.parts.front().data, m.h.data(), T, H, V, dt, d_err}, m.stream);
  }
  for (int l = 0; l < c.num_layers; ++l) {
    const CudaLayerWeights& lp = m.w.layers[size_t(l)];
    if (l == 0) {
      RmsNormParams rp;
      rp.x = m.h.data();
      rp.w = lp.input_norm;
      rp.y = m.xn.data();
      rp.rows = T;
      rp.cols = H;
      rp.eps = eps;
      rp.dtype = dt;
      rmsnorm(rp, m.stream);
    } else {
      fused_add_rmsnorm({m.o.data(), m.h.data(), lp.input_norm, m.xn.data(), T, H, eps, dt}, m.stream);
    }
    mark(StepOp::kNorm);
    linear(m.lin, lp.w_qkv, m.xn.data(), lp.qkv_bias, m.qkv.data(), T);
    mark(StepOp::kQkvGemm);
    uint8_t* qkv = static_cast<uint8_t*>(m.qkv.data());
    const size_t es = dtype_size(dt);
    void* q = qkv;
    void* k = qkv + size_t(c.num_heads) * D * es;
    void* v = qkv + size_t(c.num_heads + c.num_kv_heads) * D * es;
    if (lp.q_norm) {
      rmsnorm_heads({q, lp.q_norm, q, T, c.num_heads, D, QKV, QKV, eps, dt}, m.stream);
      rmsnorm_heads({k, lp.k_norm, k, T, c.num_kv_heads, D, QKV, QKV, eps, dt}, m.stream);
      mark(StepOp::kNorm);
    }
    RopeKvParams rk;
    rk.q = q;
    rk.k = k;
    rk.v = v;
    rk.q_stride = rk.k_stride = rk.v_stride = QKV;
    rk.positions = d_pos;
    rk.cos = m.rope_cos.as<float>();
    rk.sin = m.rope_sin.as<float>();
    rk.max_position = m.rope_max_pos;
    rk.num_tokens = T;
    rk.num_q_heads = c.num_heads;
    rk.num_kv_heads = c.num_kv_heads;
    rk.head_dim = D;
    rk.dtype = dt;
    rk.kv_cache = static_cast<uint8_t*>(m.kv.data.data()) + m.kv.layer_offset[size_t(l)];
    rk.slot_mapping = d_slot;
    rk.num_blocks = int(cache_.num_blocks);
    rk.block_size = bs;
    rk.layout = m.opt.layout;
    rk.cache_dtype = m.kv.layer_dtype[size_t(l)];
    rk.turboquant = m.kv.layer_turboquant[size_t(l)];
    rk.k_scale = m.kv.k_scale.as<float>() + l;
    rk.v_scale = m.kv.v_scale.as<float>() + l;
    rk.error_flag = d_err;
    rope_kv(rk, m.stream);
    mark(StepOp::kRopeKv);
    AttentionParams ap;
    ap.q = q;
    ap.q_stride = QKV;
    ap.out = m.attn.data();
    ap.layer = l;
    ap.kv_cache = rk.kv_cache;
    ap.num_blocks = cache_.num_blocks;
    ap.query_start_loc = d_qsl;
    ap.seq_lens = d_sl;
    ap.block_tables = d_bt;
    ap.block_table_stride = m.max_blocks_cap;  // block tables are uploaded with this row stride
    ap.num_tokens = T;
    ap.num_seqs = S;
    ap.k_scale = cache_.layer_k_scale(l);
    ap.v_scale = cache_.layer_v_scale(l);
    runners[size_t(m.layer_group[size_t(l)])]->run(ap, m.stream);
    mark(StepOp::kAttention);
    linear(m.lin, lp.w_o, m.attn.data(), lp.o_bias, m.o.data(), T);
    mark(StepOp::kOGemm);
    fused_add_rmsnorm({m.o.data(), m.h.data(), lp.post_norm, m.xn.data(), T, H, eps, dt}, m.stream);
    mark(StepOp::kNorm);
    linear(m.lin, lp.w_gate_up, m.xn.data(), nullptr, m.gu.data(), T);
    mark(StepOp::kGateUpGemm);
    silu_and_mul({m.gu.data(), m.act.data(), T, F, dt}, m.stream);
    mark(StepOp::kAct);
    linear(m.lin, lp.w_down, m.act.data(), nullptr, m.o.data(), T);
    mark(StepOp::kDownGemm);
  }
  fused_add_rmsnorm({m.o.data(), m.h.data(), m.w.final_norm, m.xn.data(), T, H, eps, dt}, m.stream);
  mark(StepOp::kNorm);
  if (R == 0) return;
  embedding({d_li, m.xn.data(), m.xsel.data(), R, H, T, dt, d_err}, m.stream);  // gather the rows to sample
  linear(m.lin, m.w.lm_head, m.xsel.data(), nullptr, m.logits.data(), R, /*may_dequantize=*/false);
  convert({m.logits.data(), dt, m.logits_f32.data(), DType::kF32, int64_t(R) * V}, m.stream);
  argmax({m.logits_f32.as<float>(), 0, R, V, d_tokens}, m.stream);
  mark(StepOp::kLogits);
}

// Plans a fixed work list for bp decode sequences with a fixed number of KV splits, runs the step once eagerly
// over the metadata in m.meta (cuBLASLt plans, kernel attributes), then captures it as m.graphs[bp].
void CudaModelRunner::capture_graph(int bp) {
  Impl& m = *impl_;
  auto& g = m.graphs[bp];
  g = std::make_unique<Impl::Graph>();
  g->runners = make_runners(m, {.max_tokens = bp, .max_seqs = bp, .max_model_len = m.opt.max_model_len, .graph_batch = bp});
  for (auto& r : g->runners) r->plan({}, m.stream);  // the fixed grid of bp decode sequences
  enqueue_step(bp, bp, bp, g->runners);
  PAGODA_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  cudaGraph_t graph = nullptr;
  PAGODA_CUDA_CHECK(cudaStreamBeginCapture(m.stream, cudaStreamCaptureModeThreadLocal));
  enqueue_step(bp, bp, bp, g->runners);
  PAGODA_CUDA_CHECK(cudaStreamEndCapture(m.stream, &graph));
  PAGODA_CUDA_CHECK(cudaGraphInstantiate(&g->exec, graph, 0));
  PAGODA_CUDA_CHECK(cudaGraphDestroy(graph));
  PAGODA_LOG_DEBUG("captured a CUDA graph for decode batch size ", bp);
}

namespace {
// Sequences [first, last) of a captured decode step's host metadata as padding: empty (query_start_loc stays
// at `tokens`), context 0, one token slot each that writes nothing to the cache (slot -1), its own logits row.
// PRECOND: a decode step, so sequence s and its token share index s.
void write_padding_sequences(CudaModelRunner::Impl& m, int first, int last, int tokens) {
  const auto [ids, pos, slot, qsl, sl, bt, li] = m.meta_arrays(m.meta_host.data());
  for (int s = first; s < last; ++s) {
    ids[s] = 0;
    pos[s] = 0;
    slot[s] = -1;
    qsl[s + 1] = tokens;
    sl[s] = 0;
    li[s] = s;
  }
}
}  // namespace

void CudaModelRunner::capture_decode_graphs() {
  Impl& m = *impl_;
  const auto t0 = std::chrono::steady_clock::now();
  int n = 0;
  for (int bp : m.graph_sizes) {
    if (m.graphs.count(bp) && m.graphs[bp]) continue;
    m.meta_arrays(m.meta_host.data()).qsl[0] = 0;
    write_padding_sequences(m, 0, bp, 0);  // bp padding sequences
    PAGODA_CUDA_CHECK(cudaMemcpyAsync(m.meta.data(), m.meta_host.data(), m.off_err, cudaMemcpyHostToDevice, m.stream));
    capture_graph(bp);  // syncs after its eager run, before meta_host is written again
    ++n;
  }
  finish_step(m);
  if (n > 0)
    PAGODA_LOG_INFO("captured ", n, " decode CUDA graphs (batch sizes up to ", m.graph_sizes.back(), ") in ",
                    since(t0), " s");
}

int CudaModelRunner::run_to_logits(const ForwardBatch& b) {
  Impl& m = *impl_;
  const int T = b.num_tokens(), S = b.num_seqs(), R = int(b.logits_indices.size());
  const int bs = m.opt.block_size;
  if (T == 0) return 0;
  if (T > m.opt.max_num_tokens) throw_runtime_error("step of ", T, " tokens exceeds max_num_tokens ", m.opt.max_num_tokens);
  if (S > m.opt.max_num_seqs || R > m.opt.max_num_seqs)
    throw_runtime_error("step of ", S, " sequences exceeds max_num_seqs ", m.opt.max_num_seqs);
  if (b.max_blocks_per_seq > m.max_blocks_cap)
    throw_runtime_error("block table of ", b.max_blocks_per_seq, " blocks exceeds ", m.max_blocks_cap, " (max_model_len)");
  PAGODA_CHECK(int(b.query_start_loc.size()) == S + 1, "query_start_loc size");

  // A pure decode step (one token per sequence, every row sampled in order) replays a CUDA graph captured
  // for the next captured batch size; padding sequences have no tokens.
  bool decode = !m.opt.enforce_eager && T == S && R == S;
  for (int s = 0; decode && s < S; ++s) decode = b.query_start_loc[size_t(s) + 1] - b.query_start_loc[size_t(s)] == 1 && b.logits_indices[size_t(s)] == s;
  auto& prof = m.prof;
  if (prof.on) {
    prof.step = CudaStepProfile{};
    prof.step.tokens = T;
    prof.step.seqs = S;
    prof.step.rows = R;
    prof.t0 = std::chrono::steady_clock::now();
    PAGODA_CUDA_CHECK(cudaEventRecord(prof.start, m.stream));
  }

  // ---- host metadata: positions and slots derived from the batch, exactly as the CPU runner does ----
  const auto [ids, pos, slot, qsl, sl, bt, li] = m.meta_arrays(m.meta_host.data());
  std::memcpy(ids, b.token_ids.data(), size_t(T) * 4);
  AttentionBatch info;
  for (int s = 0; s < S; ++s) {
    int q0 = b.query_start_loc[size_t(s)], q1 = b.query_start_loc[size_t(s) + 1];
    int ql = q1 - q0, ctx = b.seq_lens[size_t(s)];
    if (ql < 0 || ql > ctx) throw_runtime_error("sequence ", s, ": ", ql, " new tokens but a context of ", ctx);
    info.query_lens.push_back(ql);
    info.seq_lens.push_back(ctx);
    for (int t = 0; t < ql; ++t) {
      int p = ctx - ql + t;
      if (p >= m.rope_max_pos) throw_runtime_error("position ", p, " beyond the RoPE table (", m.rope_max_pos, ")");
      int blk = b.block_tables[size_t(s) * b.max_blocks_per_seq + p / bs];
      if (blk < 0 || blk >= cache_.num_blocks) throw_runtime_error("block id ", blk, " outside the KV cache");
      pos[q0 + t] = p;
      slot[q0 + t] = int64_t(blk) * bs + p % bs;
    }
    qsl[s] = q0;
    sl[s] = ctx;
    std::memcpy(bt + size_t(s) * m.max_blocks_cap, b.block_tables.data() + size_t(s) * b.max_blocks_per_seq,
                size_t(b.max_blocks_per_seq) * 4);
  }
  qsl[S] = T;
  info.block_tables = b.block_tables.data();
  info.block_table_stride = b.max_blocks_per_seq;
  std::memcpy(li, b.logits_indices.data(), size_t(R) * 4);
  int bp = 0;
  if (decode)
    for (int size : m.graph_sizes)
      if (size >= S) {
        bp = size;
        break;
      }
  // A runner that cannot serve this step from a captured plan (FLASHINFER's cascade groups) runs it eagerly.
  for (size_t g = 0; bp > 0 && g < m.runners.size(); ++g)
    if (m.runners[g]->wants_eager(info)) bp = 0;
  const int Sp = bp > 0 ? bp : S;
  if (prof.on) prof.step.graph = bp > 0;
  write_padding_sequences(m, S, Sp, T);  // up to the captured batch size
  PAGODA_CUDA_CHECK(cudaMemcpyAsync(m.meta.data(), m.meta_host.data(), m.off_err, cudaMemcpyHostToDevice, m.stream));
  if (prof.on) prof.step.prep_s = since(prof.t0);

  if (bp > 0) {
    auto& g = m.graphs[bp];
    if (!g) {
      capture_graph(bp);  // runs this step eagerly, then captures it
      if (prof.on) {
        prof.step.capture = true;
        prof.step.launch_s = since(prof.t0) - prof.step.prep_s;
      }
      return R;  // this step already ran eagerly
    }
    PAGODA_CUDA_CHECK(cudaGraphLaunch(g->exec, m.stream));
    if (prof.on) prof.step.launch_s = since(prof.t0) - prof.step.prep_s;
    return R;
  }

  for (auto& r : m.runners) r->plan(info, m.stream);
  if (prof.on) {
    prof.step.plan_s = since(prof.t0) - prof.step.prep_s;
    prof.ops = true;
  }
  enqueue_step(T, S, R, m.runners);
  if (prof.on) {
    prof.ops = false;
    prof.step.launch_s = since(prof.t0) - prof.step.prep_s - prof.step.plan_s;
  }
  return R;
}

}  // namespace pagoda
