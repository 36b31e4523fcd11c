#include "pagoda/attention/flex_attention/flex_mask.h"

#include <algorithm>

#include "pagoda/core/error.h"
#include "pagoda/core/strings.h"

namespace pagoda {

struct FlexMask::Node {
  enum class Kind { kFull, kCausal, kWindow, kChunk, kSpans, kAnd, kOr, kNot } kind;
  int param = 0;                                 // window or chunk
  std::vector<std::vector<FlexSpan>> spans;      // kSpans: per sequence
  bool documents = false;                        // kSpans built by documents() (for str())
  std::shared_ptr<const Node> a, b;              // kAnd, kOr: both; kNot: a
};

namespace {

using Node = FlexMask::Node;
using Kind = Node::Kind;

int32_t floor_div(int32_t x, int32_t d) { return x >= 0 ? x / d : -((-x + d - 1) / d); }

// The span of `spans` holding position p, or -1.
int span_of(const std::vector<FlexSpan>& spans, int32_t p) {
  auto it = std::upper_bound(spans.begin(), spans.end(), p, [](int32_t x, const FlexSpan& s) { return x < s.begin; });
  if (it == spans.begin()) return -1;
  --it;
  return p < it->end ? int(it - spans.begin()) : -1;
}

const std::vector<FlexSpan>* seq_spans(const Node& n, int seq) {
  return size_t(seq) < n.spans.size() ? &n.spans[size_t(seq)] : nullptr;
}

bool allows(const Node& n, int seq, int32_t q, int32_t k) {
  switch (n.kind) {
    case Kind::kFull: return true;
    case Kind::kCausal: return k <= q;
    case Kind::kWindow: return k > q - n.param;
    case Kind::kChunk: return floor_div(q, n.param) == floor_div(k, n.param);
    case Kind::kSpans: {
      const auto* s = seq_spans(n, seq);
      if (!s) return false;
      const int a = span_of(*s, q);
      return a >= 0 && a == span_of(*s, k);
    }
    case Kind::kAnd: return allows(*n.a, seq, q, k) && allows(*n.b, seq, q, k);
    case Kind::kOr: return allows(*n.a, seq, q, k) || allows(*n.b, seq, q, k);
    case Kind::kNot: return !allows(*n.a, seq, q, k);
  }
  return false;
}

void eval_row(const Node& n, int seq, int32_t q, int32_t k0, int len, uint8_t* out) {
  switch (n.kind) {
    case Kind::kFull: std::fill(out, out + len, uint8_t(1)); return;
    case Kind::kCausal:
      for (int j = 0; j < len; ++j) out[j] = k0 + j <= q;
      return;
    case Kind::kWindow:
      for (int j = 0; j < len; ++j) out[j] = k0 + j > q - n.param;
      return;
    case Kind::kChunk: {
      const int32_t c = floor_div(q, n.param);
      for (int j = 0; j < len; ++j) out[j] = floor_div(k0 + j, n.param) == c;
      return;
    }
    case Kind::kSpans: {
      std::fill(out, out + len, uint8_t(0));
      const auto* s = seq_spans(n, seq);
      const int a = s ? span_of(*s, q) : -1;
      if (a < 0) return;
      const FlexSpan& sp = (*s)[size_t(a)];
      for (int32_t k = std::max(k0, sp.begin); k < std::min(k0 + len, sp.end); ++k) out[k - k0] = 1;
      return;
    }
    case Kind::kAnd:
    case Kind::kOr: {
      uint8_t tmp[kFlexMaxRow];
      eval_row(*n.a, seq, q, k0, len, out);
      eval_row(*n.b, seq, q, k0, len, tmp);
      if (n.kind == Kind::kAnd)
        for (int j = 0; j < len; ++j) out[j] &= tmp[j];
      else
        for (int j = 0; j < len; ++j) out[j] |= tmp[j];
      return;
    }
    case Kind::kNot:
      eval_row(*n.a, seq, q, k0, len, out);
      for (int j = 0; j < len; ++j) out[j] ^= 1;
      return;
  }
}

FlexTile of(bool full, bool empty) { return full ? FlexTile::kFull : empty ? FlexTile::kEmpty : FlexTile::kPartial; }

FlexTile classify(const Node& n, int seq, int32_t q0, int32_t q1, int32_t k0, int32_t k1);

// Both children of an & or | are partial on the rectangle: split it along its longer side and combine the
// halves' exact classes. Terminates: a 1 x 1 rectangle is never partial for exact children.
FlexTile split(const Node& n, int seq, int32_t q0, int32_t q1, int32_t k0, int32_t k1) {
  FlexTile x, y;
  if (q1 - q0 >= k1 - k0) {
    const int32_t qm = q0 + (q1 - q0) / 2;
    x = classify(n, seq, q0, qm, k0, k1);
    if (x == FlexTile::kPartial) return x;
    y = classify(n, seq, qm, q1, k0, k1);
  } else {
    const int32_t km = k0 + (k1 - k0) / 2;
    x = classify(n, seq, q0, q1, k0, km);
    if (x == FlexTile::kPartial) return x;
    y = classify(n, seq, q0, q1, km, k1);
  }
  return x == y ? x : FlexTile::kPartial;
}

FlexTile classify(const Node& n, int seq, int32_t q0, int32_t q1, int32_t k0, int32_t k1) {
  const int32_t qn = q1 - 1, kn = k1 - 1;  // inclusive ends
  switch (n.kind) {
    case Kind::kFull: return FlexTile::kFull;
    case Kind::kCausal: return of(kn <= q0, k0 > qn);
    case Kind::kWindow: return of(k0 > qn - n.param, kn <= q0 - n.param);
    case Kind::kChunk: {
      const int32_t qa = floor_div(q0, n.param), qb = floor_div(qn, n.param);
      const int32_t ka = floor_div(k0, n.param), kb = floor_div(kn, n.param);
      return of(qa == qb && ka == kb && qa == ka, qb < ka || kb < qa);
    }
    case Kind::kSpans: {
      const auto* s = seq_spans(n, seq);
      if (!s) return FlexTile::kEmpty;
      // Full: one span holds both intervals. Empty: no span meets both (a span meeting both holds a pair).
      const int a = span_of(*s, q0);
      if (a >= 0 && a == span_of(*s, k0) && (*s)[size_t(a)].end > std::max(qn, kn)) return FlexTile::kFull;
      for (const FlexSpan& sp : *s)
        if (sp.begin <= std::min(qn, kn) && sp.end > std::max(q0, k0)) return FlexTile::kPartial;
      return FlexTile::kEmpty;
    }
    case Kind::kAnd: {
      const FlexTile a = classify(*n.a, seq, q0, q1, k0, k1);
      if (a == FlexTile::kEmpty) return a;
      const FlexTile b = classify(*n.b, seq, q0, q1, k0, k1);
      if (b == FlexTile::kEmpty || a == FlexTile::kFull) return b;
      if (b == FlexTile::kFull) return a;
      return split(n, seq, q0, q1, k0, k1);
    }
    case Kind::kOr: {
      const FlexTile a = classify(*n.a, seq, q0, q1, k0, k1);
      if (a == FlexTile::kFull) return a;
      const FlexTile b = classify(*n.b, seq, q0, q1, k0, k1);
      if (b == FlexTile::kFull || a == FlexTile::kEmpty) return b;
      if (b == FlexTile::kEmpty) return a;
      return split(n, seq, q0, q1, k0, k1);
    }
    case Kind::kNot: {
      const FlexTile a = classify(*n.a, seq, q0, q1, k0, k1);
      return a == FlexTile::kFull ? FlexTile::kEmpty : a == FlexTile::kEmpty ? FlexTile::kFull : a;
    }
  }
  return FlexTile::kPartial;
}

void compile(const Node& n, FlexProgram& p) {
  switch (n.kind) {
    case Kind::kFull: p.code.push_back({FlexOp::kFull, 0}); return;
    case Kind::kCausal: p.code.push_back({FlexOp::kCausal, 0}); return;
    case Kind::kWindow: p.code.push_back({FlexOp::kWindow, n.param}); return;
    case Kind::kChunk: p.code.push_back({FlexOp::kChunk, n.param}); return;
    case Kind::kSpans: {
      const int32_t o = int32_t(p.data.size()), nseq = int32_t(n.spans.size());
      p.data.push_back(nseq);
      p.data.resize(p.data.size() + size_t(nseq) + 1);
      for (int32_t s = 0; s <= nseq; ++s) {
        p.data[size_t(o + 1 + s)] = int32_t(p.data.size());
        if (s == nseq) break;
        for (const FlexSpan& sp : n.spans[size_t(s)]) {
          p.data.push_back(sp.begin);
          p.data.push_back(sp.end);
        }
      }
      p.code.push_back({FlexOp::kSpans, o});
      return;
    }
    case Kind::kAnd:
    case Kind::kOr:
      compile(*n.a, p);
      compile(*n.b, p);
      p.code.push_back({n.kind == Kind::kAnd ? FlexOp::kAnd : FlexOp::kOr, 0});
      return;
    case Kind::kNot:
      compile(*n.a, p);
      p.code.push_back({FlexOp::kNot, 0});
      return;
  }
}

std::string str(const Node& n) {
  switch (n.kind) {
    case Kind::kFull: return "full";
    case Kind::kCausal: return "causal";
    case Kind::kWindow: return str_cat("window(", n.param, ")");
    case Kind::kChunk: return str_cat("chunk(", n.param, ")");
    case Kind::kSpans: return n.documents ? "documents" : "spans";
    case Kind::kAnd: return str_cat("(", str(*n.a), " & ", str(*n.b), ")");
    case Kind::kOr: return str_cat("(", str(*n.a), " | ", str(*n.b), ")");
    case Kind::kNot: return str_cat("~", str(*n.a));
  }
  return "?";
}

std::shared_ptr<Node> make(Kind k, int param = 0) {
  auto n = std::make_shared<Node>();
  n->kind = k;
  n->param = param;
  return n;
}

}  // namespace

FlexMask FlexMask::full() { return FlexMask(make(Kind::kFull)); }
FlexMask FlexMask::causal() { return FlexMask(make(Kind::kCausal)); }

FlexMask FlexMask::sliding_window(int window) {
  PAGODA_CHECK(window >= 1, "flex mask: sliding window ", window, " < 1");
  return FlexMask(make(Kind::kWindow, window));
}

FlexMask FlexMask::chunked_local(int chunk) {
  PAGODA_CHECK(chunk >= 1, "flex mask: chunk ", chunk, " < 1");
  return FlexMask(make(Kind::kChunk, chunk));
}

namespace {
void check_spans(const std::vector<std::vector<FlexSpan>>& per_seq) {
  for (size_t s = 0; s < per_seq.size(); ++s)
    for (size_t i = 0; i < per_seq[s].size(); ++i) {
      const FlexSpan& sp = per_seq[s][i];
      PAGODA_CHECK(sp.begin >= 0 && sp.begin < sp.end, "flex mask: sequence ", s, " span ", i, " is empty or negative");
      PAGODA_CHECK(i == 0 || per_seq[s][i - 1].end <= sp.begin, "flex mask: sequence ", s, " spans overlap or are unsorted");
    }
}
}  // namespace

FlexMask FlexMask::spans(std::vector<std::vector<FlexSpan>> per_seq) {
  check_spans(per_seq);
  auto n = make(Kind::kSpans);
  n->spans = std::move(per_seq);
  return FlexMask(n);
}

FlexMask FlexMask::documents(const std::vector<std::vector<int32_t>>& starts_per_seq) {
  // Documents tile the sequence: [0, s1), [s1, s2), ..., [sn, inf).
  std::vector<std::vector<FlexSpan>> per_seq(starts_per_seq.size());
  for (size_t s = 0; s < starts_per_seq.size(); ++s) {
    int32_t begin = 0;
    for (int32_t start : starts_per_seq[s]) {
      PAGODA_CHECK(start > begin, "flex mask: sequence ", s, " document starts must be positive and increasing");
      per_seq[s].push_back({begin, start});
      begin = start;
    }
    per_seq[s].push_back({begin, INT32_MAX});
  }
  check_spans(per_seq);
  auto n = make(Kind::kSpans);
  n->spans = std::move(per_seq);
  n->documents = true;
  return FlexMask(n);
}

FlexMask FlexMask::operator&(const FlexMask& o) const {
  auto n = make(Kind::kAnd);
  n->a = node_;
  n->b = o.node_;
  return FlexMask(n);
}

FlexMask FlexMask::operator|(const FlexMask& o) const {
  auto n = make(Kind::kOr);
  n->a = node_;
  n->b = o.node_;
  return FlexMask(n);
}

FlexMask FlexMask::operator~() const {
  auto n = make(Kind::kNot);
  n->a = node_;
  return FlexMask(n);
}

bool FlexMask::allows(int seq, int32_t q, int32_t k) const { return pagoda::allows(*node_, seq, q, k); }

void FlexMask::eval_row(int seq, int32_t q, int32_t k0, int n, uint8_t* out) const {
  PAGODA_CHECK(n > 0 && n <= kFlexMaxRow, "flex mask: eval_row of ", n, " keys");
  pagoda::eval_row(*node_, seq, q, k0, n, out);
}

FlexTile FlexMask::classify(int seq, int32_t q0, int32_t q1, int32_t k0, int32_t k1) const {
  PAGODA_CHECK(q0 < q1 && k0 < k1, "flex mask: empty rectangle");
  return pagoda::classify(*node_, seq, q0, q1, k0, k1);
}

FlexProgram FlexMask::program() const {
  FlexProgram p;
  compile(*node_, p);
  if (p.code.size() > size_t(kFlexMaxProgram))
    throw_config_error("flex mask ", str(), ": ", p.code.size(), " operations, at most ", kFlexMaxProgram);
  return p;
}

std::string FlexMask::str() const { return pagoda::str(*node_); }

}  // namespace pagoda
