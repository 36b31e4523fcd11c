#include "pagoda/cli/attention_bench_data.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "pagoda/core/dtype.h"
#include "pagoda/core/strings.h"

namespace pagoda::bench_detail {

float input_value(uint64_t seed, uint64_t stream, uint64_t index) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + stream * 0xD1B54A32D192ED03ull + index + 1;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return float((double(z >> 11) * 0x1.0p-53 * 2.0 - 1.0) * std::sqrt(3.0));
}
// Key or value row (all KV heads) of `slot` at `pos`.
static void kv_row(uint64_t seed, Stream st, int slot, int pos, const Dims& dm, float* out) {
  const uint64_t base = (uint64_t(slot) << 32 | uint64_t(pos)) * uint64_t(dm.kv_row());
  for (int64_t i = 0; i < dm.kv_row(); ++i) out[i] = input_value(seed, st, base + uint64_t(i));
}
static void q_row(uint64_t seed, int slot, int pos, const Dims& dm, float* out) {
  const uint64_t base = (uint64_t(slot) << 32 | uint64_t(pos)) * uint64_t(dm.q_row());
  for (int64_t i = 0; i < dm.q_row(); ++i) out[i] = input_value(seed, kQ, base + uint64_t(i));
}

StepWork step_work(const StepData& s, int window, bool causal) {
  StepWork w;
  for (int i = 0; i < s.seqs; ++i) {
    const int ql = s.qsl[size_t(i) + 1] - s.qsl[size_t(i)], len = s.seq_lens[size_t(i)];
    for (int p = len - ql; p < len; ++p) w.pairs += double(causal ? p - first_key(p, window) + 1 : len);
    w.kv_tokens_read += double(len - (causal ? first_key(len - ql, window) : 0));
  }
  return w;
}

double layer_scale(const LayerShape& sh) { return sh.scale > 0 ? double(sh.scale) : 1.0 / std::sqrt(double(sh.head_size)); }

const Reference& reference(StepData& s, const SlotData& sd, const Dims& dm, const LayerShape& sh) {
  const int window = sh.sliding_window;
  const bool causal = sh.causal;
  const double scale = layer_scale(sh);
  const float softcap = sh.softcap;
  auto [it, fresh] = s.refs.try_emplace({window, causal});
  Reference& r = it->second;
  if (!fresh) return r;
  r.out.assign(size_t(s.tokens) * size_t(dm.q_row()), 0.0);
  r.rows.assign(size_t(s.tokens) * size_t(dm.hq), RowFacts{});
  const int group = dm.hq / dm.hkv;
  std::vector<double> logits;
  for (int i = 0; i < s.seqs; ++i) {
    const int slot = s.slots[size_t(i)], len = s.seq_lens[size_t(i)];
    const int q0 = s.qsl[size_t(i)], ql = s.qsl[size_t(i) + 1] - q0;
    for (int t = 0; t < ql; ++t) {
      const int p = len - ql + t;
      const int lo = causal ? first_key(p, window) : 0, hi = causal ? p : len - 1;
      for (int h = 0; h < dm.hq; ++h) {
        const float* q = s.q.data() + size_t(q0 + t) * size_t(dm.q_row()) + size_t(h) * size_t(dm.d);
        const int g = h / group;
        logits.assign(size_t(hi - lo + 1), 0.0);
        double m = -std::numeric_limits<double>::infinity();
        RowFacts& f = r.rows[size_t(q0 + t) * size_t(dm.hq) + size_t(h)];
        double q_l1 = 0, q_l2 = 0;
        for (int e = 0; e < dm.d; ++e) q_l1 += std::abs(double(q[e])), q_l2 += double(q[e]) * q[e];
        f.q_l1 = scale * q_l1;
        f.q_l1_any_basis = scale * std::sqrt(double(dm.d) * q_l2);
        f.context = hi - lo + 1;
        for (int j = lo; j <= hi; ++j) {
          const float* k = sd.k[size_t(slot)].data() + size_t(j) * size_t(dm.kv_row()) + size_t(g) * size_t(dm.d);
          const float* v = sd.v[size_t(slot)].data() + size_t(j) * size_t(dm.kv_row()) + size_t(g) * size_t(dm.d);
          double dot = 0, abs_dot = 0, k_l2 = 0;
          for (int e = 0; e < dm.d; ++e) {
            dot += double(q[e]) * double(k[e]);
            abs_dot += std::abs(double(q[e]) * double(k[e]));
            k_l2 += double(k[e]) * k[e];
            f.max_abs_v = std::max(f.max_abs_v, std::abs(double(v[e])));
          }
          f.logit_abs = std::max(f.logit_abs, scale * abs_dot);
          f.logit_any_basis = std::max(f.logit_any_basis, scale * std::sqrt(q_l2 * k_l2));
          dot *= scale;
          if (softcap > 0) dot = double(softcap) * std::tanh(dot / double(softcap));
          logits[size_t(j - lo)] = dot;
          m = std::max(m, dot);
        }
        double sum = 0;
        for (double& x : logits) sum += (x = std::exp(x - m));
        double* out = r.out.data() + size_t(q0 + t) * size_t(dm.q_row()) + size_t(h) * size_t(dm.d);
        for (int j = lo; j <= hi; ++j) {
          const float* v = sd.v[size_t(slot)].data() + size_t(j) * size_t(dm.kv_row()) + size_t(g) * size_t(dm.d);
          const double w = logits[size_t(j - lo)] / sum;
          for (int e = 0; e < dm.d; ++e) out[e] += w * double(v[e]);
        }
      }
    }
  }
  return r;
}

void make_inputs(const BenchWorkload& w, const Dims& dm, uint64_t seed, DType round_to, std::vector<StepData>& steps,
                 SlotData& sd) {
  steps.assign(w.steps.size(), StepData{});
  sd = SlotData{};
  for (size_t k = 0; k < w.steps.size(); ++k) {
    const BenchStep& bs = w.steps[k];
    StepData& s = steps[k];
    s.seqs = int(bs.batch.query_lens.size());
    s.slots = bs.slots;
    if (s.slots.empty())
      for (int i = 0; i < s.seqs; ++i) s.slots.push_back(i);
    s.qsl.push_back(0);
    for (int i = 0; i < s.seqs; ++i) {
      s.qsl.push_back(s.qsl.back() + bs.batch.query_lens[size_t(i)]);
      s.seq_lens.push_back(bs.batch.seq_lens[size_t(i)]);
      const int slot = s.slots[size_t(i)];
      if (size_t(slot) >= sd.fill_len.size()) sd.fill_len.resize(size_t(slot) + 1, 0);
      sd.fill_len[size_t(slot)] = std::max(sd.fill_len[size_t(slot)], s.seq_lens.back());
      s.max_context = std::max(s.max_context, s.seq_lens.back());
    }
    s.tokens = s.qsl.back();
  }
  sd.k.resize(sd.fill_len.size());
  sd.v.resize(sd.fill_len.size());
  for (size_t slot = 0; slot < sd.fill_len.size(); ++slot) {
    sd.k[slot].resize(size_t(sd.fill_len[slot]) * size_t(dm.kv_row()));
    sd.v[slot].resize(sd.k[slot].size());
    for (int p = 0; p < sd.fill_len[slot]; ++p) {
      kv_row(seed, kK, int(slot), p, dm, sd.k[slot].data() + size_t(p) * size_t(dm.kv_row()));
      kv_row(seed, kV, int(slot), p, dm, sd.v[slot].data() + size_t(p) * size_t(dm.kv_row()));
    }
  }
  for (size_t k = 0; k < steps.size(); ++k) {
    StepData& s = steps[k];
    s.q.resize(size_t(s.tokens) * size_t(dm.q_row()));
    s.k.resize(size_t(s.tokens) * size_t(dm.kv_row()));
    s.v.resize(s.k.size());
    for (int i = 0; i < s.seqs; ++i) {
      const int q0 = s.qsl[size_t(i)], ql = s.qsl[size_t(i) + 1] - q0, len = s.seq_lens[size_t(i)];
      for (int t = 0; t < ql; ++t) {
        const int p = len - ql + t, slot = s.slots[size_t(i)];
        float* q = s.q.data() + size_t(q0 + t) * size_t(dm.q_row());
        q_row(seed, slot, p, dm, q);
        std::copy_n(sd.k[size_t(slot)].data() + size_t(p) * size_t(dm.kv_row()), dm.kv_row(), s.k.data() + size_t(q0 + t) * size_t(dm.kv_row()));
        std::copy_n(sd.v[size_t(slot)].data() + size_t(p) * size_t(dm.kv_row()), dm.kv_row(), s.v.data() + size_t(q0 + t) * size_t(dm.kv_row()));
      }
    }
  }
  // The inputs in the compute dtype: rounded once, here, for the kernels and the reference alike.
  auto round_all = [&](std::vector<float>& x) {
    if (round_to == DType::kF32) return;
    uint8_t buf[4];
    for (float& f : x) {
      store_from_f32(buf, round_to, 0, f);
      f = load_as_f32(buf, round_to, 0);
    }
  };
  for (auto& x : sd.k) round_all(x);
  for (auto& x : sd.v) round_all(x);
  for (StepData& s : steps) round_all(s.q), round_all(s.k), round_all(s.v);
}

std::vector<bool> candidate_layers(BenchCandidate& c, const CandidateSelection& sel, bool cpu) {
  const int L = int(sel.layer_backends.size());
  c.num_layers = L;
  std::vector<bool> main(static_cast<size_t>(L));
  int num_main = 0;
  for (int l = 0; l < L; ++l) num_main += main[size_t(l)] = sel.layer_kv_cache_dtypes[size_t(l)] == sel.kv_cache_dtype;
  if (num_main == 0) main.assign(size_t(L), true), num_main = L;
  std::vector<std::string> chosen;
  for (int l = 0; l < L; ++l) {
    if (!main[size_t(l)]) continue;
    c.own_layers += sel.layer_backends[size_t(l)] == c.backend;
    const std::string n(backend_name_str(sel.layer_backends[size_t(l)]));
    if (std::find(chosen.begin(), chosen.end(), n) == chosen.end()) chosen.push_back(n);
  }
  if (c.own_layers < num_main)
    c.reasons.push_back(str_cat("with these flags engine start runs ", join(chosen, ", "), " for the layers with KV cache "
                                "dtype ", sel.kv_cache_dtype, cpu ? " (the CPU's rule: CPU_ATTN; FLEX_ATTENTION when "
                                "forced; TURBOQUANT for a turboquant_* cache)" : ""));
  return main;
}

void compare_rows(BenchCandidate& c, const KvErrorModel& m, const Reference& ref, const float* out, int d,
                  AccuracyTally& t) {
  for (size_t row = 0; row < ref.rows.size(); ++row) {
    const RowFacts& f = ref.rows[row];
    double err = 0;
    for (int e = 0; e < d; ++e) {
      const size_t i = row * size_t(d) + size_t(e);
      const double x = std::abs(double(out[i]) - ref.out[i]);
      err = std::isfinite(x) ? std::max(err, x) : std::numeric_limits<double>::infinity();
    }
    err /= f.max_abs_v;
    const double bound = kv_error_bound(m, f, d);
    t.worst_bound = std::max(t.worst_bound, bound);
    if (!(err / bound <= t.worst_ratio)) {
      t.worst_ratio = err / bound;
      c.error = err;
      c.bound = bound;
    }
  }
}

void finish_accuracy(BenchCandidate& c, const AccuracyTally& t) {
  // A bound of 2 or more says nothing (the trivial one): such a candidate is not checked, so not recommended.
  c.checked = t.worst_bound < 2.0;
  c.accurate = c.checked && t.worst_ratio <= 1.0;
}

void step_costs(BenchCandidate& c, const std::vector<StepData>& steps, const std::vector<AttentionGroup>& groups,
                const std::vector<int>& layer_group, int block_size, const Dims& dm, int io_bytes) {
  for (const StepData& s : steps) {
    for (size_t l = 0; l < layer_group.size(); ++l) {
      const AttentionGroup& g = groups[size_t(layer_group[l])];
      const double per_token = double(kv_block_bytes(g)) / block_size;
      const StepWork sw = step_work(s, g.shape.sliding_window, g.shape.causal);
      c.bytes_per_step += sw.kv_tokens_read * per_token + double(s.tokens) * per_token +
                          double(s.tokens) * double(io_bytes) * double(2 * dm.q_row() + 2 * dm.kv_row());
      c.flops_per_step += 4.0 * dm.d * dm.hq * sw.pairs;
    }
  }
  c.bytes_per_step /= double(steps.size());
  c.flops_per_step /= double(steps.size());
}

void timed_rounds(const BenchAttentionRequest& req, std::vector<BenchCandidate>& cands, const std::vector<size_t>& live,
                  const std::function<double(size_t)>& one_round, const BenchProgress& progress, int64_t& done,
                  int64_t& total) {
  const auto warm0 = std::chrono::steady_clock::now();
  for (size_t ci : live) one_round(ci);
  const double round_s =
      std::max(1e-6, std::chrono::duration<double>(std::chrono::steady_clock::now() - warm0).count());
  const int rounds =
      live.empty() ? 0 : int(std::clamp(req.time_budget_s / round_s, double(req.min_rounds), double(req.max_rounds)));
  total = done + int64_t(rounds);
  progress(++done, ++total, "warm-up");
  for (int r = 0; r < rounds; ++r) {
    for (size_t i = 0; i < live.size(); ++i) {
      const size_t ci = live[(i + size_t(r)) % live.size()];
      cands[ci].round_s.push_back(one_round(ci));
    }
    progress(++done, total, str_cat("round ", r + 1, "/", rounds));
  }
  for (size_t ci : live) {
    std::vector<double> v = cands[ci].round_s;
    std::sort(v.begin(), v.end());
    auto at = [&](double f) { return v[std::min(v.size() - 1, size_t(f * double(v.size() - 1) + 0.5))]; };
    cands[ci].median_s = at(0.5);
    cands[ci].q1_s = at(0.25);
    cands[ci].q3_s = at(0.75);
  }
}

}  // namespace pagoda::bench_detail
