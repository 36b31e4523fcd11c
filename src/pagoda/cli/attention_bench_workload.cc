// The workloads of `pagoda bench attention` and the accuracy bound of each KV cache format (attention_bench.h).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "pagoda/cli/attention_bench.h"
#include "pagoda/core/error.h"
#include "pagoda/core/strings.h"
#include "pagoda/core/turboquant.h"

namespace pagoda {
namespace {

std::string format_fixed(double x, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}

}  // namespace

BenchWorkload decode_workload(int batch, int context) {
  BenchWorkload w{"decode", str_cat(batch, " sequences decoding one token each at context ", context), {}};
  BenchStep s;
  s.label = w.describe;
  for (int i = 0; i < batch; ++i) {
    s.batch.query_lens.push_back(1);
    s.batch.seq_lens.push_back(context);
  }
  w.steps.push_back(s);
  return w;
}

BenchWorkload prefill_workload(int batch, int prompt) {
  BenchWorkload w{"prefill", str_cat(batch, " sequences prefilling ", prompt, " tokens each (empty cache)"), {}};
  BenchStep s;
  s.label = w.describe;
  for (int i = 0; i < batch; ++i) {
    s.batch.query_lens.push_back(prompt);
    s.batch.seq_lens.push_back(prompt);
  }
  w.steps.push_back(s);
  return w;
}

BenchWorkload mixed_workload(int batch, int context, int prompt) {
  BenchWorkload w{"mixed", str_cat("one chunk of ", prompt, " prompt tokens after ", prompt, " of context, beside ", batch,
                                   " sequences decoding at context ", context), {}};
  BenchStep s;
  s.label = w.describe;
  s.batch.query_lens.push_back(prompt);
  s.batch.seq_lens.push_back(2 * prompt);
  for (int i = 0; i < batch; ++i) {
    s.batch.query_lens.push_back(1);
    s.batch.seq_lens.push_back(context);
  }
  w.steps.push_back(s);
  return w;
}

BenchWorkload trace_workload(const std::vector<TraceRequest>& trace, int num_steps) {
  if (trace.empty()) throw_config_error("the serve trace holds no request");
  double t0 = trace.front().arrival_s, t1 = t0;
  for (const TraceRequest& r : trace) {
    t0 = std::min(t0, r.arrival_s);
    t1 = std::max(t1, r.arrival_s + r.e2e_s);
  }
  BenchWorkload w{"serve-trace", "", {}};
  int64_t tokens = 0;
  for (int k = 0; k < num_steps; ++k) {
    const double t = t0 + (t1 - t0) * (double(k) + 0.5) / double(num_steps);
    BenchStep s;
    int prefills = 0, decodes = 0;
    for (const TraceRequest& r : trace) {
      const double first = r.arrival_s + r.ttft_s, end = r.arrival_s + r.e2e_s;
      if (t < r.arrival_s || t >= end) continue;
      if (t < first) {  // prefilling its prompt
        s.batch.query_lens.push_back(r.prompt_tokens);
        s.batch.seq_lens.push_back(r.prompt_tokens);
        ++prefills;
      } else {  // decoding: the first token came with the prefill, the rest at an even rate until `end`
        const double f = end > first ? (t - first) / (end - first) : 1.0;
        const int produced = std::clamp(1 + int(f * double(std::max(0, r.output_tokens - 1))), 1, std::max(1, r.output_tokens));
        s.batch.query_lens.push_back(1);
        s.batch.seq_lens.push_back(r.prompt_tokens + produced);
        ++decodes;
      }
      s.slots.push_back(int(&r - trace.data()));
    }
    if (s.batch.query_lens.empty()) continue;
    for (int q : s.batch.query_lens) tokens += q;
    s.label = str_cat("t=", format_fixed(t - t0, 2), " s: ", prefills, " prefill + ", decodes, " decode");
    w.steps.push_back(std::move(s));
  }
  if (w.steps.empty()) throw_config_error("the serve trace has no instant with a request in flight");
  w.describe = str_cat(w.steps.size(), " steps reconstructed from ", trace.size(), " requests over ",
                       format_fixed(t1 - t0, 2), " s (", tokens / int64_t(w.steps.size()), " new tokens a step on average)");
  return w;
}

KvErrorModel kv_error_model(const std::string& kv_cache_dtype, DType element) {
  KvErrorModel m;
  if (auto p = turboquant_preset(kv_cache_dtype)) {
    // Values: min-max b-bit codes, |v - v^| <= scale / 2 = range / (2 (2^b - 1)) <= max|v| / (2^b - 1), plus the
    // fp16 rounding of zero (2^-11 max|v|) and of scale (2^-11 range <= 2^-10 max|v|).
    m.u_v = 1.0 / double((1 << p->value_bits) - 1) + 3.0 * std::ldexp(1.0, -11);
    if (p->key_bits == 8) {  // FP8 E4M3 of the rotated key: relative 2^-4, absolute 2^-10 (half the subnormal step)
      m.u_k = std::ldexp(1.0, -4);
      m.a_k = std::ldexp(1.0, -10);
      m.rotated = true;
      m.text = str_cat(kv_cache_dtype, ": keys FP8 E4M3 (u = 2^-4), values ", p->value_bits, "-bit min-max (u_v = 1/",
                       (1 << p->value_bits) - 1, ")");
    } else {  // a Lloyd-Max code of a rotated coordinate has no worst case below the trivial one
      m.trivial = true;
      m.text = str_cat(kv_cache_dtype, ": ", p->key_bits, "-bit keys have no worst-case bound; trivial bound "
                       "2 + u_v (catches only gross errors)");
    }
    return m;
  }
  const DType d = element;
  double u = 0, a = 0;
  std::string name(dtype_name(d));
  switch (d) {
    case DType::kF32: u = std::ldexp(1.0, -24); break;
    case DType::kBF16: u = std::ldexp(1.0, -8); break;
    case DType::kF16: u = std::ldexp(1.0, -11); a = std::ldexp(1.0, -25); break;
    case DType::kF8E4M3: u = std::ldexp(1.0, -4); a = std::ldexp(1.0, -10); break;
    case DType::kF8E5M2: u = std::ldexp(1.0, -3); a = std::ldexp(1.0, -17); break;
    case DType::kU8: case DType::kI32: case DType::kI64:
      m.trivial = true;
      m.text = str_cat(kv_cache_dtype, ": no error model; trivial bound");
      return m;
  }
  m.u_k = m.u_v = u;
  m.a_k = m.a_v = a;
  const int e = -int(std::lround(std::log2(u)));
  m.text = str_cat(kv_cache_dtype == name ? name : kv_cache_dtype + " (" + name + ")", " keys and values: u = 2^-", e);
  return m;
}

double kv_error_bound(const KvErrorModel& m, const RowFacts& r, int head_size) {
  const double v_term = m.u_v + (r.max_abs_v > 0 ? m.a_v / r.max_abs_v : 0.0) + 2.0 * m.u_compute;
  if (m.trivial) return 2.0 + v_term;
  const double L = m.rotated ? r.logit_any_basis : r.logit_abs, Q = m.rotated ? r.q_l1_any_basis : r.q_l1;
  const double d = m.u_k * L + m.a_k * Q + double(head_size + 8) * std::ldexp(1.0, -24) * L + std::ldexp(1.0, -21);
  return std::expm1(2.0 * d) + v_term + double(r.context + head_size + 16) * std::ldexp(1.0, -23);
}

std::string BenchCandidate::name() const {
  std::string s = str_cat(backend_name_str(backend), " kv=", kv_cache_dtype);
  if (block_size) s += str_cat(" block=", *block_size);
  if (flash_attn_version) s += str_cat(" fa=", *flash_attn_version);
  return s;
}

int recommended_candidate(const std::vector<BenchCandidate>& cs) {
  int best = -1;
  for (size_t i = 0; i < cs.size(); ++i) {
    const BenchCandidate& c = cs[i];
    if (!c.timed() || !c.accurate || c.median_s <= 0) continue;
    if (best < 0 || c.median_s < cs[size_t(best)].median_s) best = int(i);
  }
  // Engine start's choice, when accurate and not told apart from the fastest by the rounds (its first quartile
  // at or below the fastest's third), needs no flag: it is the recommendation then.
  for (size_t i = 0; best >= 0 && i < cs.size(); ++i)
    if (cs[i].automatic && cs[i].timed() && cs[i].accurate && cs[i].q1_s <= cs[size_t(best)].q3_s) return int(i);
  return best;
}

}  // namespace pagoda
