// `pagoda bench attention`'s measurement (attention_bench.h): each candidate's runners over every layer's own
// cache, filled once, checked against a float64 dense attention, then timed in interleaved rounds.
//
// Inputs are functions of (sequence slot, position) only, the same for every layer and candidate: the cache of
// a slot is written once up to the longest context any step reads from it, and a step rewrites its new tokens'
// keys and values with the same numbers, so every step of every round reads a cache in the same state and the
// reference of a step needs only those functions.
#include "pagoda/cli/attention_bench.h"
#include "pagoda/cli/attention_bench_data.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>

#include "pagoda/attention/registry.h"
#include "pagoda/core/error.h"
#include "pagoda/core/strings.h"
#include "pagoda/model/model_runner.h"
#include "pagoda/ops/thread_pool.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define BENCH_MULTIVERSION __attribute__((target_clones("avx2", "default")))
#else
#define BENCH_MULTIVERSION
#endif

namespace pagoda {
namespace {

using namespace bench_detail;
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A candidate's runners and caches.
struct Built {
  std::vector<AttentionGroup> groups;
  std::vector<std::unique_ptr<AttentionRunner>> runners;
  std::vector<int> layer_group;
  std::vector<std::unique_ptr<uint8_t, void (*)(void*)>> caches;  // per layer
  int block_size = 0, blocks_per_slot = 0;
  int64_t num_blocks = 0;
  int acc_layer = 0;
  std::vector<std::vector<int32_t>> block_tables;  // per step, [seqs, blocks_per_slot]
  std::vector<std::vector<int64_t>> slot_mapping;  // per step, [tokens]
};

AttentionParams step_params(const Built& b, const StepData& s, size_t step, int layer, float* out) {
  AttentionParams p;
  p.layer = layer;
  p.q = s.q.data();
  p.out = out;
  p.kv_cache = b.caches[size_t(layer)].get();
  p.num_blocks = b.num_blocks;
  p.k = s.k.data();
  p.v = s.v.data();
  p.slot_mapping = b.slot_mapping[step].data();
  p.query_start_loc = s.qsl.data();
  p.seq_lens = s.seq_lens.data();
  p.block_tables = b.block_tables[step].data();
  p.block_table_stride = b.blocks_per_slot;
  p.num_tokens = s.tokens;
  p.num_seqs = s.seqs;
  return p;
}

// Writes every slot's keys and values up to its fill length into every layer's cache, through the runners'
// own cache write: a step of one-token "sequences" whose slot_mapping names the positions to write (their
// attention reads one cached token and is discarded).
void fill_caches(Built& b, const SlotData& sd, const Dims& dm, uint64_t seed) {
  constexpr int kChunk = 2048;
  std::vector<float> q(size_t(kChunk) * size_t(dm.q_row())), out(q.size()), k, v;
  for (size_t i = 0; i < q.size(); ++i) q[i] = input_value(seed, kFillQ, i);
  std::vector<int32_t> qsl, lens, tables;
  std::vector<int64_t> slots;
  std::vector<std::pair<int, int>> todo;  // (slot, pos)
  for (size_t s = 0; s < sd.fill_len.size(); ++s)
    for (int p = 0; p < sd.fill_len[s]; ++p) todo.emplace_back(int(s), p);
  for (size_t at = 0; at < todo.size(); at += kChunk) {
    const int n = int(std::min<size_t>(kChunk, todo.size() - at));
    k.resize(size_t(n) * size_t(dm.kv_row()));
    v.resize(k.size());
    qsl.assign(size_t(n) + 1, 0);
    lens.assign(size_t(n), 1);
    tables.resize(size_t(n));
    slots.resize(size_t(n));
    for (int i = 0; i < n; ++i) {
      const auto [slot, pos] = todo[at + size_t(i)];
      std::copy_n(sd.k[size_t(slot)].data() + size_t(pos) * size_t(dm.kv_row()), dm.kv_row(), k.data() + size_t(i) * size_t(dm.kv_row()));
      std::copy_n(sd.v[size_t(slot)].data() + size_t(pos) * size_t(dm.kv_row()), dm.kv_row(), v.data() + size_t(i) * size_t(dm.kv_row()));
      qsl[size_t(i) + 1] = i + 1;
      const int block = slot * b.blocks_per_slot + pos / b.block_size;
      tables[size_t(i)] = block;
      slots[size_t(i)] = int64_t(block) * b.block_size + pos % b.block_size;
    }
    AttentionBatch batch{std::vector<int>(size_t(n), 1), std::vector<int>(size_t(n), 1)};
    for (auto& r : b.runners) r->plan(batch, nullptr);
    for (size_t l = 0; l < b.caches.size(); ++l) {
      AttentionParams p;
      p.layer = int(l);
      p.q = q.data();
      p.out = out.data();
      p.kv_cache = b.caches[l].get();
      p.num_blocks = b.num_blocks;
      p.k = k.data();
      p.v = v.data();
      p.slot_mapping = slots.data();
      p.query_start_loc = qsl.data();
      p.seq_lens = lens.data();
      p.block_tables = tables.data();
      p.block_table_stride = 1;
      p.num_tokens = n;
      p.num_seqs = n;
      b.runners[size_t(b.layer_group[l])]->run(p, nullptr);
    }
  }
}

// Read bandwidth: sums over a 256 MiB buffer split between the threads, best of 3 (bytes/s).
BENCH_MULTIVERSION double sum_floats(const float* x, int64_t n) {
  typedef float v8f __attribute__((vector_size(32)));
  v8f a0 = {}, a1 = {}, a2 = {}, a3 = {};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    v8f x0, x1, x2, x3;
    std::memcpy(&x0, x + i, 32);
    std::memcpy(&x1, x + i + 8, 32);
    std::memcpy(&x2, x + i + 16, 32);
    std::memcpy(&x3, x + i + 24, 32);
    a0 += x0, a1 += x1, a2 += x2, a3 += x3;
  }
  v8f a = (a0 + a1) + (a2 + a3);
  double s = 0;
  for (int j = 0; j < 8; ++j) s += double(a[j]);
  for (; i < n; ++i) s += double(x[i]);
  return s;
}

// Multiply-adds on 8-wide float vectors, 8 independent chains (the kernels' instruction set: AVX2 where the
// CPU has it, without FMA contraction like them). Returns float operations per second of one thread.
BENCH_MULTIVERSION double mul_add_loop(int64_t iters, float m, float c, float* sink) {
  typedef float v8f __attribute__((vector_size(32)));
  v8f acc[8];
  for (int j = 0; j < 8; ++j) acc[j] = v8f{} + float(j) * 1e-3f;
  const v8f vm = v8f{} + m, vc = v8f{} + c;
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < 8; ++j) acc[j] = acc[j] * vm + vc;
  float s = 0;
  for (int j = 0; j < 8; ++j) s += acc[j][0];
  *sink = s;
  return double(iters) * 8 * 8 * 2;
}

BenchCeilings measure_ceilings(ThreadPool& pool) {
  BenchCeilings c;
  const int64_t n = (int64_t(256) << 20) / 4;
  std::unique_ptr<float[]> buf(new float[size_t(n)]);
  pool.parallel_for(n, 1 << 20, [&](int64_t a, int64_t b) { std::fill(buf.get() + a, buf.get() + b, 1.0f); });
  const int T = pool.num_threads();
  double best = 0;
  for (int r = 0; r < 3; ++r) {
    std::vector<double> part(static_cast<size_t>(T));
    const Clock::time_point t0 = Clock::now();
    pool.parallel_for(T, 1, [&](int64_t a, int64_t b) {
      for (int64_t t = a; t < b; ++t) part[size_t(t)] = sum_floats(buf.get() + t * (n / T), n / T);
    });
    best = std::max(best, double(n / T * T) * 4 / seconds_since(t0));
  }
  c.bytes_per_s = best;
  best = 0;
  std::vector<float> sink(static_cast<size_t>(T));
  for (int r = 0; r < 3; ++r) {
    const Clock::time_point t0 = Clock::now();
    double flops = 0;
    std::vector<double> part(static_cast<size_t>(T));
    pool.parallel_for(T, 1, [&](int64_t a, int64_t b) {
      for (int64_t t = a; t < b; ++t) part[size_t(t)] = mul_add_loop(int64_t(1) << 22, 0.999f, 1e-3f, &sink[size_t(t)]);
    });
    for (double f : part) flops += f;
    best = std::max(best, flops / seconds_since(t0));
  }
  c.flops_per_s = best;
  char text[160];
  std::snprintf(text, sizeof text, "read bandwidth %.1f GB/s, float multiply-add %.1f GFLOP/s (%d threads, measured in this run)",
                c.bytes_per_s / 1e9, c.flops_per_s / 1e9, T);
  c.describe = text;
  return c;
}

}  // namespace

BenchCeilings run_attention_bench(const BenchAttentionRequest& req, std::vector<BenchCandidate>& cands,
                                  const SelectCandidate& select, const BenchProgress& progress,
                                  const BenchAttentionHooks* hooks) {
  if (req.device.kind != DeviceKind::kCpu) {
#ifdef PAGODA_WITH_CUDA_MODEL
    return run_attention_bench_cuda(req, cands, select, progress, hooks);
#else
    throw_runtime_error("pagoda bench attention: this binary has no GPU model path; run it with --device cpu");
#endif
  }
  const ModelConfig& cfg = *req.model;
  const Dims dm{cfg.num_heads, cfg.num_kv_heads, cfg.head_dim};
  ThreadPool pool(req.threads);

  std::vector<StepData> steps;
  SlotData sd;
  make_inputs(req.workload, dm, req.seed, DType::kF32, steps, sd);
  const BenchWorkload& w = req.workload;

  int64_t done = 0, total = int64_t(cands.size()) * 2 + 2;
  progress(++done, total, "ceilings");
  BenchCeilings ceilings = measure_ceilings(pool);

  // Select and build every candidate; check its accuracy.
  std::vector<Built> built(cands.size());
  for (size_t ci = 0; ci < cands.size(); ++ci) {
    BenchCandidate& c = cands[ci];
    Built& b = built[ci];
    try {
      const CandidateSelection sel = select(c);
      c.plan_block_size = sel.block_size;
      c.layout = sel.layout;
      c.num_layers = cfg.num_layers;
      const std::vector<bool> main = candidate_layers(c, sel, req.device.kind == DeviceKind::kCpu);
      if (!c.reasons.empty()) {
        progress(done += 2, total, c.name() + " (not valid)");
        continue;
      }
      BackendRegistry registry = BackendRegistry::builtin(false);
      std::vector<std::shared_ptr<const AttentionBackend>> backends;
      for (BackendName x : sel.layer_backends) backends.push_back(registry.shared(x));
      RunnerOptions ro;
      ro.cpu = true;
      ro.batch_invariant = sel.batch_invariant;
      ro.flash_attn_version = sel.flash_attn_version.value_or(2);
      ro.flex_block_m = sel.attention.flex_attn_block_m.value_or(0);
      ro.flex_block_n = sel.attention.flex_attn_block_n.value_or(0);
      ro.num_threads = pool.num_threads();
      ro.parallel_for = [&pool](int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body) {
        pool.parallel_for(n, grain, body);
      };
      b.groups = group_attention_layers(cfg, backends, DType::kF32, sel.layer_kv_cache_dtypes, sel.model_dtype, sel.layout,
                                        sel.block_size, sel.causal, ro);
      b.layer_group.assign(size_t(cfg.num_layers), 0);
      std::vector<std::string> others;
      for (size_t g = 0; g < b.groups.size(); ++g) {
        b.runners.push_back(b.groups[g].backend->make_runner(b.groups[g].shape, ro));
        for (int l : b.groups[g].layers) b.layer_group[size_t(l)] = int(g);
        if (b.groups[g].backend->name() != c.backend)
          others.push_back(str_cat(b.groups[g].layers.size(), " layers ", b.runners.back()->describe()));
      }
      b.acc_layer = -1;
      for (int l = 0; l < cfg.num_layers && b.acc_layer < 0; ++l)
        if (main[size_t(l)]) b.acc_layer = l;
      c.runner = b.runners[size_t(b.layer_group[size_t(b.acc_layer)])]->describe();
      if (!others.empty()) c.runner += " (" + join(others, ", ") + ")";
      // Caches: one region of blocks per slot.
      b.block_size = sel.block_size;
      int longest = 1;
      for (int f : sd.fill_len) longest = std::max(longest, f);
      b.blocks_per_slot = (longest + b.block_size - 1) / b.block_size;
      b.num_blocks = int64_t(b.blocks_per_slot) * int64_t(sd.fill_len.size());
      int64_t block_bytes_all = 0;
      for (int l = 0; l < cfg.num_layers; ++l) {
        const int64_t bb = kv_block_bytes(b.groups[size_t(b.layer_group[size_t(l)])]);
        block_bytes_all += bb;
        void* p = std::calloc(size_t(b.num_blocks) * size_t(bb), 1);
        if (!p) throw_runtime_error("cannot allocate the KV cache of layer ", l, " for ", c.name());
        b.caches.emplace_back(static_cast<uint8_t*>(p), &std::free);
      }
      c.kv_bytes_per_token = block_bytes_all / b.block_size;
      c.capacity_tokens = block_bytes_all > 0 ? int64_t(req.kv_budget_bytes / double(block_bytes_all)) * b.block_size : 0;
      int max_tokens = 1, max_seqs = 1, max_len = 1;
      for (const StepData& s : steps) {
        max_tokens = std::max(max_tokens, s.tokens);
        max_seqs = std::max(max_seqs, s.seqs);
        max_len = std::max(max_len, s.max_context);
      }
      for (auto& r : b.runners) r->reserve({std::max(max_tokens, 2048), std::max(max_seqs, 2048), max_len, 0});
      for (const StepData& s : steps) {
        std::vector<int32_t> table(size_t(s.seqs) * size_t(b.blocks_per_slot));
        for (int i = 0; i < s.seqs; ++i)
          for (int j = 0; j < b.blocks_per_slot; ++j)
            table[size_t(i) * size_t(b.blocks_per_slot) + size_t(j)] = s.slots[size_t(i)] * b.blocks_per_slot + j;
        std::vector<int64_t> slots;
        for (int i = 0; i < s.seqs; ++i) {
          const int ql = s.qsl[size_t(i) + 1] - s.qsl[size_t(i)], len = s.seq_lens[size_t(i)];
          for (int p = len - ql; p < len; ++p)
            slots.push_back(int64_t(s.slots[size_t(i)] * b.blocks_per_slot + p / b.block_size) * b.block_size + p % b.block_size);
        }
        b.block_tables.push_back(std::move(table));
        b.slot_mapping.push_back(std::move(slots));
      }
      fill_caches(b, sd, dm, req.seed);
      // Accuracy: the candidate's first own layer on every step, output poisoned first.
      const LayerShape& ash = b.groups[size_t(b.layer_group[size_t(b.acc_layer)])].shape;
      const KvErrorModel em = kv_error_model(sel.layer_kv_cache_dtypes[size_t(b.acc_layer)], ash.kv_dtype);
      c.bound_text = em.text;
      AccuracyTally acc;
      for (size_t k = 0; k < steps.size(); ++k) {
        StepData& s = steps[k];
        const Reference& ref = reference(s, sd, dm, ash);
        std::vector<float> out(size_t(s.tokens) * size_t(dm.q_row()), std::numeric_limits<float>::quiet_NaN());
        AttentionBatch batch{w.steps[k].batch.query_lens, w.steps[k].batch.seq_lens};
        for (auto& r : b.runners) r->plan(batch, nullptr);
        b.runners[size_t(b.layer_group[size_t(b.acc_layer)])]->run(step_params(b, s, k, b.acc_layer, out.data()), nullptr);
        if (hooks && hooks->corrupt_output) hooks->corrupt_output(c, out.data(), int64_t(out.size()));
        compare_rows(c, em, ref, out.data(), dm.d, acc);
      }
      finish_accuracy(c, acc);
      step_costs(c, steps, b.groups, b.layer_group, b.block_size, dm, 4);
    } catch (const Error& e) {
      c.reasons.push_back(e.what());
      b = Built();
    }
    progress(done += 2, total, c.name());
  }

  // Timed rounds, interleaved, after one untimed round.
  std::vector<size_t> live;
  for (size_t ci = 0; ci < cands.size(); ++ci)
    if (cands[ci].timed()) live.push_back(ci);
  std::vector<float> out;
  auto one_round = [&](size_t ci) {
    Built& b = built[ci];
    double total_s = 0;
    for (size_t k = 0; k < steps.size(); ++k) {
      const StepData& s = steps[k];
      out.resize(size_t(s.tokens) * size_t(dm.q_row()));
      AttentionBatch batch{w.steps[k].batch.query_lens, w.steps[k].batch.seq_lens};
      const Clock::time_point t0 = Clock::now();
      for (auto& r : b.runners) r->plan(batch, nullptr);
      for (int l = 0; l < cfg.num_layers; ++l)
        b.runners[size_t(b.layer_group[size_t(l)])]->run(step_params(b, s, k, l, out.data()), nullptr);
      total_s += seconds_since(t0);
    }
    return total_s / double(steps.size());
  };
  timed_rounds(req, cands, live, one_round, progress, done, total);
  return ceilings;
}

}  // namespace pagoda
