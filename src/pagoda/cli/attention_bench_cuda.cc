// `pagoda bench attention` on a CUDA device (CUDA builds with the GPU model path): each candidate's CUDA runners
// over every layer's own device cache, filled once by the model's own cache write (rope_kv, with an identity
// rotation table so that keys stay as generated), checked against the float64 attention of the inputs rounded to
// the model dtype, and timed with CUDA events in interleaved rounds. A decode step (every sequence adding one
// token) runs as the engine runs it: runners reserved for that batch's captured grid, the step's layers captured
// once into a CUDA graph and replayed; other steps run eagerly (plan, then every layer).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>

#include "pagoda/attention/registry.h"
#include "pagoda/cli/attention_bench.h"
#include "pagoda/cli/attention_bench_data.h"
#include "pagoda/core/error.h"
#include "pagoda/core/strings.h"
#include "pagoda/core/turboquant.h"
#include "pagoda/model/model_runner.h"
#include "pagoda/ops/cuda/device_buffer.h"
#include "pagoda/ops/cuda/rope_kv.h"

namespace pagoda {
namespace {

using namespace bench_detail;

struct CudaStream {
  cudaStream_t s = nullptr;
  CudaStream() { PAGODA_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~CudaStream() { cudaStreamDestroy(s); }
};
struct Event {
  cudaEvent_t e = nullptr;
  Event() { PAGODA_CUDA_CHECK(cudaEventCreate(&e)); }
  ~Event() { cudaEventDestroy(e); }
};

// Host floats to a device buffer of `dt` elements.
DeviceBuffer upload_as(const std::vector<float>& x, DType dt) {
  std::vector<uint8_t> host(x.size() * dtype_size(dt));
  for (size_t i = 0; i < x.size(); ++i) store_from_f32(host.data(), dt, i, x[i]);
  DeviceBuffer b(std::max<size_t>(host.size(), 16));
  if (!host.empty()) b.upload(host.data(), host.size());
  return b;
}
template <typename T>
DeviceBuffer upload_vec(const std::vector<T>& x) {
  DeviceBuffer b(std::max<size_t>(x.size() * sizeof(T), 16));
  if (!x.empty()) b.upload(x.data(), x.size() * sizeof(T));
  return b;
}

// One step's runners and device metadata for one candidate.
struct GpuStep {
  std::vector<std::unique_ptr<AttentionRunner>> runners;  // one per group
  DeviceBuffer tables;                                     // [seqs, blocks_per_slot] int32
  bool graph = false;                                      // a decode step replayed from exec
  cudaGraphExec_t exec = nullptr;
  ~GpuStep() {
    if (exec) cudaGraphExecDestroy(exec);
  }
};

struct GpuBuilt {
  std::vector<AttentionGroup> groups;
  std::vector<int> layer_group;
  std::vector<DeviceBuffer> caches;  // per layer
  int block_size = 0, blocks_per_slot = 0;
  int64_t num_blocks = 0;
  int acc_layer = 0;
  std::vector<std::unique_ptr<GpuStep>> steps;
};

// The device inputs of a step, shared by every candidate.
struct GpuStepData {
  DeviceBuffer q, out, qsl, seq_lens;
};

AttentionParams gpu_params(const GpuBuilt& b, const GpuStep& st, const GpuStepData& d, const StepData& s, int layer) {
  AttentionParams p;
  p.layer = layer;
  p.q = d.q.data();
  p.out = d.out.data();
  p.kv_cache = b.caches[size_t(layer)].data();
  p.num_blocks = b.num_blocks;
  p.query_start_loc = d.qsl.as<int32_t>();
  p.seq_lens = d.seq_lens.as<int32_t>();
  p.block_tables = st.tables.as<int32_t>();
  p.block_table_stride = b.blocks_per_slot;
  p.num_tokens = s.tokens;
  p.num_seqs = s.seqs;
  return p;
}

void enqueue_step(const GpuBuilt& b, const GpuStep& st, const GpuStepData& d, const StepData& s, cudaStream_t stream) {
  for (size_t l = 0; l < b.layer_group.size(); ++l)
    st.runners[size_t(b.layer_group[l])]->run(gpu_params(b, st, d, s, int(l)), stream);
}

// Every slot's keys and values into every layer's cache through rope_kv (the engine's cache write, every format
// including TurboQuant's packed slots), rotating by an identity table (cos 1, sin 0).
void fill_gpu_caches(GpuBuilt& b, const SlotData& sd, const Dims& dm, DType dt, cudaStream_t stream) {
  constexpr int kChunk = 8192;
  int longest = 1;
  for (int f : sd.fill_len) longest = std::max(longest, f);
  const std::vector<float> ones(size_t(longest) * size_t(dm.d / 2), 1.0f), zeros(ones.size(), 0.0f);
  DeviceBuffer cos = upload_vec(ones), sin = upload_vec(zeros);
  DeviceBuffer q(size_t(kChunk) * size_t(dm.q_row()) * dtype_size(dt));
  q.fill_bytes(0);
  std::vector<std::pair<int, int>> todo;  // (slot, pos)
  for (size_t s = 0; s < sd.fill_len.size(); ++s)
    for (int p = 0; p < sd.fill_len[s]; ++p) todo.emplace_back(int(s), p);
  for (size_t at = 0; at < todo.size(); at += kChunk) {
    const int n = int(std::min<size_t>(kChunk, todo.size() - at));
    std::vector<float> k(size_t(n) * size_t(dm.kv_row())), v(k.size());
    std::vector<int64_t> pos(static_cast<size_t>(n)), slots(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      const auto [slot, p] = todo[at + size_t(i)];
      std::copy_n(sd.k[size_t(slot)].data() + size_t(p) * size_t(dm.kv_row()), dm.kv_row(), k.data() + size_t(i) * size_t(dm.kv_row()));
      std::copy_n(sd.v[size_t(slot)].data() + size_t(p) * size_t(dm.kv_row()), dm.kv_row(), v.data() + size_t(i) * size_t(dm.kv_row()));
      pos[size_t(i)] = p;
      slots[size_t(i)] = int64_t(slot * b.blocks_per_slot + p / b.block_size) * b.block_size + p % b.block_size;
    }
    DeviceBuffer dk = upload_as(k, dt), dv = upload_as(v, dt), dpos = upload_vec(pos), dslots = upload_vec(slots);
    for (size_t l = 0; l < b.caches.size(); ++l) {
      const LayerShape& sh = b.groups[size_t(b.layer_group[l])].shape;
      RopeKvParams r;
      r.q = q.data();
      r.k = dk.data();  // rotated in place by the identity: unchanged
      r.v = dv.data();
      r.positions = dpos.as<int64_t>();
      r.cos = cos.as<float>();
      r.sin = sin.as<float>();
      r.max_position = longest;
      r.num_tokens = n;
      r.num_q_heads = dm.hq;
      r.num_kv_heads = dm.hkv;
      r.head_dim = dm.d;
      r.dtype = dt;
      r.kv_cache = b.caches[l].data();
      r.slot_mapping = dslots.as<int64_t>();
      r.num_blocks = int(b.num_blocks);
      r.block_size = b.block_size;
      r.layout = sh.layout;
      r.cache_dtype = sh.kv_dtype;
      if (const auto preset = turboquant_preset(sh.kv_preset)) {
        r.cache_dtype = DType::kU8;
        r.turboquant.key_bits = preset->key_bits;
        r.turboquant.value_bits = preset->value_bits;
        r.turboquant.norm_correction = preset->norm_correction;
        r.turboquant.layer = int(l);
        if (preset->key_bits != 8) {
          const std::vector<float> bounds = turboquant_boundaries(turboquant_codebook(preset->key_bits, dm.d));
          for (size_t i = 0; i < bounds.size(); ++i) r.turboquant.boundaries[i] = bounds[i];
        }
      }
      rope_kv(r, stream);
    }
    PAGODA_CUDA_CHECK(cudaStreamSynchronize(stream));  // before the chunk's buffers go
  }
}

// Device copy bandwidth: a 1 GiB device-to-device copy (read + write), best of 3, bytes/s.
BenchCeilings gpu_ceilings(const DeviceInfo& device, cudaStream_t stream) {
  const size_t n = size_t(1) << 30;
  DeviceBuffer a(n), b(n);
  a.fill_bytes(1);
  Event e0, e1;
  double best = 0;
  for (int r = 0; r < 3; ++r) {
    PAGODA_CUDA_CHECK(cudaEventRecord(e0.e, stream));
    PAGODA_CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), n, cudaMemcpyDeviceToDevice, stream));
    PAGODA_CUDA_CHECK(cudaEventRecord(e1.e, stream));
    PAGODA_CUDA_CHECK(cudaEventSynchronize(e1.e));
    float ms = 0;
    PAGODA_CUDA_CHECK(cudaEventElapsedTime(&ms, e0.e, e1.e));
    best = std::max(best, 2.0 * double(n) / (double(ms) * 1e-3));
  }
  BenchCeilings c;
  c.bytes_per_s = best;
  c.flops_per_s = 0;  // not measured on the GPU: % of ceiling is against the copy bandwidth
  c.describe = str_cat("device copy ", int64_t(best / 1e9), " GB/s (", device.name, ", measured in this run; no FLOP ceiling)");
  return c;
}

}  // namespace

BenchCeilings run_attention_bench_cuda(const BenchAttentionRequest& req, std::vector<BenchCandidate>& cands,
                                       const SelectCandidate& select, const BenchProgress& progress,
                                       const BenchAttentionHooks* hooks) {
  const ModelConfig& cfg = *req.model;
  const Dims dm{cfg.num_heads, cfg.num_kv_heads, cfg.head_dim};
  CudaStream stream;
  int64_t done = 0, total = int64_t(cands.size()) * 2 + 2;
  progress(++done, total, "ceilings");
  const BenchCeilings ceilings = gpu_ceilings(req.device, stream.s);

  // The model dtype decides the inputs' rounding; every candidate shares it (one selection's).
  std::vector<StepData> steps;
  SlotData sd;
  std::optional<DType> input_dtype;
  std::vector<GpuStepData> dsteps;
  const BenchWorkload& w = req.workload;

  std::vector<GpuBuilt> built(cands.size());
  for (size_t ci = 0; ci < cands.size(); ++ci) {
    BenchCandidate& c = cands[ci];
    GpuBuilt& b = built[ci];
    try {
      const CandidateSelection sel = select(c);
      c.plan_block_size = sel.block_size;
      c.layout = sel.layout;
      const std::vector<bool> main = candidate_layers(c, sel, false);
      if (!c.reasons.empty()) {
        progress(done += 2, total, c.name() + " (not valid)");
        continue;
      }
      const DType dt = sel.model_dtype;
      if (!input_dtype) {
        input_dtype = dt;
        make_inputs(w, dm, req.seed, dt, steps, sd);
        for (const StepData& s : steps) {
          GpuStepData d;
          d.q = upload_as(s.q, dt);
          d.out = DeviceBuffer(std::max<size_t>(size_t(s.tokens) * size_t(dm.q_row()) * dtype_size(dt), 16));
          d.qsl = upload_vec(s.qsl);
          d.seq_lens = upload_vec(s.seq_lens);
          dsteps.push_back(std::move(d));
        }
      }
      PAGODA_CHECK(dt == *input_dtype, "candidates of one run share the model dtype");
      BackendRegistry registry = BackendRegistry::builtin(false);
      std::vector<std::shared_ptr<const AttentionBackend>> backends;
      for (BackendName x : sel.layer_backends) backends.push_back(registry.shared(x));
      RunnerOptions ro;
      ro.num_sms = req.device.sm_count;
      ro.batch_invariant = sel.batch_invariant;
      ro.flash_attn_version = sel.flash_attn_version.value_or(2);
      ro.use_prefill_decode_attention = sel.attention.use_prefill_decode_attention;
      ro.max_graph_splits = sel.attention.flash_attn_max_num_splits_for_cuda_graph;
      ro.tq_max_graph_splits = sel.attention.tq_max_kv_splits_for_cuda_graph;
      ro.flex_block_m = sel.attention.flex_attn_block_m.value_or(0);
      ro.flex_block_n = sel.attention.flex_attn_block_n.value_or(0);
      ro.flashinfer_q_quantization = !sel.attention.disable_flashinfer_q_quantization;
      b.groups = group_attention_layers(cfg, backends, dt, sel.layer_kv_cache_dtypes, dt, sel.layout, sel.block_size,
                                        sel.causal, ro);
      b.layer_group.assign(size_t(cfg.num_layers), 0);
      for (size_t g = 0; g < b.groups.size(); ++g)
        for (int l : b.groups[g].layers) b.layer_group[size_t(l)] = int(g);
      b.acc_layer = int(std::find(main.begin(), main.end(), true) - main.begin());
      b.block_size = sel.block_size;
      int longest = 1, max_tokens = 1, max_seqs = 1;
      for (int f : sd.fill_len) longest = std::max(longest, f);
      for (const StepData& s : steps) max_tokens = std::max(max_tokens, s.tokens), max_seqs = std::max(max_seqs, s.seqs);
      b.blocks_per_slot = (longest + b.block_size - 1) / b.block_size;
      b.num_blocks = int64_t(b.blocks_per_slot) * int64_t(sd.fill_len.size());
      int64_t block_bytes_all = 0;
      for (int l = 0; l < cfg.num_layers; ++l) {
        const int64_t bb = kv_block_bytes(b.groups[size_t(b.layer_group[size_t(l)])]);
        block_bytes_all += bb;
        b.caches.emplace_back(size_t(b.num_blocks) * size_t(bb));
        b.caches.back().fill_bytes(0);  // finite bytes past a sequence's end (kernels load whole pages)
      }
      c.kv_bytes_per_token = block_bytes_all / b.block_size;
      c.capacity_tokens = block_bytes_all > 0 ? int64_t(req.kv_budget_bytes / double(block_bytes_all)) * b.block_size : 0;
      fill_gpu_caches(b, sd, dm, dt, stream.s);

      // Per step: runners (a decode step's reserved for its captured grid), block tables, the graph.
      for (size_t k = 0; k < steps.size(); ++k) {
        const StepData& s = steps[k];
        auto st = std::make_unique<GpuStep>();
        st->graph = std::all_of(w.steps[k].batch.query_lens.begin(), w.steps[k].batch.query_lens.end(),
                                [](int q) { return q == 1; });
        const RunnerLimits limits{st->graph ? s.seqs : max_tokens, st->graph ? s.seqs : max_seqs, longest,
                                  st->graph ? s.seqs : 0};
        for (const AttentionGroup& g : b.groups) {
          st->runners.push_back(g.backend->make_runner(g.shape, ro));
          st->runners.back()->reserve(limits);
        }
        std::vector<int32_t> table(size_t(s.seqs) * size_t(b.blocks_per_slot));
        for (int i = 0; i < s.seqs; ++i)
          for (int j = 0; j < b.blocks_per_slot; ++j)
            table[size_t(i) * size_t(b.blocks_per_slot) + size_t(j)] = s.slots[size_t(i)] * b.blocks_per_slot + j;
        st->tables = upload_vec(table);
        const AttentionBatch batch{w.steps[k].batch.query_lens, w.steps[k].batch.seq_lens};
        for (auto& r : st->runners) r->plan(st->graph ? AttentionBatch{} : batch, stream.s);
        if (st->graph) {  // as the engine captures a decode batch: once eagerly, then captured
          enqueue_step(b, *st, dsteps[k], s, stream.s);
          PAGODA_CUDA_CHECK(cudaStreamSynchronize(stream.s));
          cudaGraph_t graph = nullptr;
          PAGODA_CUDA_CHECK(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeThreadLocal));
          enqueue_step(b, *st, dsteps[k], s, stream.s);
          PAGODA_CUDA_CHECK(cudaStreamEndCapture(stream.s, &graph));
          PAGODA_CUDA_CHECK(cudaGraphInstantiate(&st->exec, graph, 0));
          PAGODA_CUDA_CHECK(cudaGraphDestroy(graph));
        }
        b.steps.push_back(std::move(st));
      }
      c.runner = b.steps.front()->runners[size_t(b.layer_group[size_t(b.acc_layer)])]->describe();
      for (size_t g = 0; g < b.groups.size(); ++g)
        if (b.groups[g].backend->name() != c.backend)
          c.runner += str_cat(" (", b.groups[g].layers.size(), " layers ", b.steps.front()->runners[g]->describe(), ")");

      // Accuracy: the accuracy layer's output of every step, poisoned (0xFF bytes: NaN in bf16 and fp16) first.
      const LayerShape& ash = b.groups[size_t(b.layer_group[size_t(b.acc_layer)])].shape;
      KvErrorModel em = kv_error_model(sel.layer_kv_cache_dtypes[size_t(b.acc_layer)], ash.kv_dtype);
      em.u_compute = dt == DType::kF16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
      c.bound_text = em.text + str_cat("; ", dtype_name(dt), " compute: + 2 u");
      AccuracyTally acc;
      for (size_t k = 0; k < steps.size(); ++k) {
        StepData& s = steps[k];
        const GpuStep& st = *b.steps[k];
        const Reference& ref = reference(s, sd, dm, ash);
        PAGODA_CUDA_CHECK(cudaMemsetAsync(dsteps[k].out.data(), 0xFF, dsteps[k].out.bytes(), stream.s));
        if (!st.graph)
          for (auto& r : b.steps[k]->runners) r->plan(AttentionBatch{w.steps[k].batch.query_lens, w.steps[k].batch.seq_lens}, stream.s);
        st.runners[size_t(b.layer_group[size_t(b.acc_layer)])]->run(gpu_params(b, st, dsteps[k], s, b.acc_layer), stream.s);
        PAGODA_CUDA_CHECK(cudaStreamSynchronize(stream.s));
        std::vector<uint8_t> raw(size_t(s.tokens) * size_t(dm.q_row()) * dtype_size(dt));
        dsteps[k].out.download(raw.data(), raw.size());
        std::vector<float> out(size_t(s.tokens) * size_t(dm.q_row()));
        for (size_t i = 0; i < out.size(); ++i) out[i] = load_as_f32(raw.data(), dt, i);
        if (hooks && hooks->corrupt_output) hooks->corrupt_output(c, out.data(), int64_t(out.size()));
        compare_rows(c, em, ref, out.data(), dm.d, acc);
      }
      finish_accuracy(c, acc);
      step_costs(c, steps, b.groups, b.layer_group, b.block_size, dm, int(dtype_size(dt)));
    } catch (const Error& e) {
      c.reasons.push_back(e.what());
      b = GpuBuilt();
    }
    progress(done += 2, total, c.name());
  }

  std::vector<size_t> live;
  for (size_t ci = 0; ci < cands.size(); ++ci)
    if (cands[ci].timed()) live.push_back(ci);
  Event e0, e1;
  auto one_round = [&](size_t ci) {
    const GpuBuilt& b = built[ci];
    PAGODA_CUDA_CHECK(cudaEventRecord(e0.e, stream.s));
    for (size_t k = 0; k < steps.size(); ++k) {
      const GpuStep& st = *b.steps[k];
      if (st.graph) {
        PAGODA_CUDA_CHECK(cudaGraphLaunch(st.exec, stream.s));
      } else {
        for (auto& r : st.runners) r->plan(AttentionBatch{w.steps[k].batch.query_lens, w.steps[k].batch.seq_lens}, stream.s);
        enqueue_step(b, st, dsteps[k], steps[k], stream.s);
      }
    }
    PAGODA_CUDA_CHECK(cudaEventRecord(e1.e, stream.s));
    PAGODA_CUDA_CHECK(cudaEventSynchronize(e1.e));
    float ms = 0;
    PAGODA_CUDA_CHECK(cudaEventElapsedTime(&ms, e0.e, e1.e));
    return double(ms) * 1e-3 / double(steps.size());
  };
  timed_rounds(req, cands, live, one_round, progress, done, total);
  return ceilings;
}

}  // namespace pagoda
