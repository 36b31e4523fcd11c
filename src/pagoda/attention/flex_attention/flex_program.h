// FLEX_ATTENTION's mask and score modifiers in the form a kernel reads: a FlexMask flattened into a postfix
// program over the primitives (FlexMask::program(), flex_mask.h) and the modifiers as a view of device arrays.
// One evaluator, __host__ __device__, serves the CUDA kernels and the CPU test that checks it against
// FlexMask::allows. PRIVATE to flex_attention/. Plain data and inline functions only: no CUDA header, so the
// CPU build includes it too.
//
// Program: code[0 .. len) in postfix order; each primitive pushes its value for (seq, q, k) on a stack of
// bits, & and | pop two and push one, ~ pops one and pushes one; the answer is the one bit left.
// Span tables (spans() and documents()) live in `data`, a table at offset o being
//   data[o] = nseq, data[o + 1 + s] for s in [0, nseq] = the offset in data of sequence s's spans,
//   sequence s's spans = the pairs (begin, end) at data[data[o + 1 + s] .. data[o + 2 + s]), sorted, disjoint;
// a sequence past nseq has no span.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define PAGODA_FLEX_HD __host__ __device__ __forceinline__
#else
#define PAGODA_FLEX_HD inline
#endif

namespace pagoda {

enum class FlexOp : int32_t { kFull, kCausal, kWindow, kChunk, kSpans, kAnd, kOr, kNot };

struct FlexInstr {
  FlexOp op = FlexOp::kFull;
  int32_t param = 0;  // kWindow, kChunk: the width (>= 1); kSpans: the offset of its table in data
};

// Most instructions of a program: the stack is one 32-bit word, and a program of n instructions is at most
// (n + 1) / 2 deep.
constexpr int kFlexMaxProgram = 32;

struct FlexProgramView {
  const FlexInstr* code = nullptr;  // [len]
  int32_t len = 0;
  const int32_t* data = nullptr;  // span tables
};

// Score modifiers (FlexScoreMod) as device arrays: soft-cap, then ALiBi, then the relative bias.
struct FlexScoreModView {
  float softcap = 0.0f;            // > 0: s = softcap * tanh(s / softcap)
  const float* alibi = nullptr;    // [num_q_heads] or null: s += alibi[h] * (k - q)
  const float* rel_bias = nullptr;  // [num_q_heads, 2 * rel_bias_max + 1] or null
  int32_t rel_bias_max = 0;
  PAGODA_FLEX_HD bool empty() const { return softcap <= 0.0f && !alibi && !rel_bias; }
};

namespace flex_detail {

PAGODA_FLEX_HD int32_t floor_div(int32_t x, int32_t d) { return x >= 0 ? x / d : -((-x + d - 1) / d); }

// The index of the span of sequence `seq` in the table at data[o] that holds position p, or -1.
PAGODA_FLEX_HD int32_t span_of(const int32_t* data, int32_t o, int seq, int32_t p) {
  if (seq < 0 || seq >= data[o]) return -1;
  const int32_t base = data[o + 1 + seq];
  int32_t lo = 0, hi = (data[o + 2 + seq] - base) / 2;  // the first span with begin > p is at hi
  while (lo < hi) {
    const int32_t mid = (lo + hi) / 2;
    if (data[base + 2 * mid] <= p) lo = mid + 1;
    else hi = mid;
  }
  if (lo == 0) return -1;
  return p < data[base + 2 * (lo - 1) + 1] ? lo - 1 : -1;
}

}  // namespace flex_detail

// Whether the mask allows key position k for query position q of sequence seq. PRECOND: a program of
// FlexMask::program() (well formed, at most kFlexMaxProgram instructions).
PAGODA_FLEX_HD bool flex_eval(const FlexProgramView& p, int seq, int32_t q, int32_t k) {
  uint32_t st = 0;
  int sp = 0;
  for (int i = 0; i < p.len; ++i) {
    const FlexInstr in = p.code[i];
    bool v = false;
    switch (in.op) {
      case FlexOp::kFull: v = true; break;
      case FlexOp::kCausal: v = k <= q; break;
      case FlexOp::kWindow: v = k > q - in.param; break;
      case FlexOp::kChunk: v = flex_detail::floor_div(q, in.param) == flex_detail::floor_div(k, in.param); break;
      case FlexOp::kSpans: {
        const int32_t a = flex_detail::span_of(p.data, in.param, seq, q);
        v = a >= 0 && a == flex_detail::span_of(p.data, in.param, seq, k);
        break;
      }
      case FlexOp::kAnd:
      case FlexOp::kOr: {
        const bool b = (st >> (sp - 1)) & 1u, a = (st >> (sp - 2)) & 1u;
        sp -= 2;
        v = in.op == FlexOp::kAnd ? (a && b) : (a || b);
        break;
      }
      case FlexOp::kNot:
        v = !((st >> (sp - 1)) & 1u);
        sp -= 1;
        break;
    }
    st = (st & ~(1u << sp)) | (uint32_t(v) << sp);
    ++sp;
  }
  return st & 1u;
}

// A score s = scale * q.k of query head h with rel = k - q, modified.
PAGODA_FLEX_HD float flex_modify(const FlexScoreModView& m, int h, float s, int32_t rel) {
  if (m.softcap > 0.0f) s = m.softcap * tanhf(s / m.softcap);
  if (m.alibi) s += m.alibi[h] * float(rel);
  if (m.rel_bias) {
    const int32_t R = m.rel_bias_max;
    const int32_t c = rel < -R ? -R : rel > R ? R : rel;
    s += m.rel_bias[h * (2 * R + 1) + c + R];
  }
  return s;
}

}  // namespace pagoda
