// FLEX_ATTENTION's masks and score modifiers: the attention pattern as a small program, not a kernel.
//
// A mask is a predicate over (sequence, query position, key position), built from primitives and composed
// with &, | and ~:
//
//   causal()                 k <= q
//   sliding_window(w)        k > q - w               (with causal(): the last w keys up to the query)
//   chunked_local(c)         q / c == k / c          (Llama 4's local layers: with causal())
//   full()                   always                  (encoder, non-causal)
//   spans(per_seq)           q and k in the same span [begin, end) of their sequence's list
//                            (prefix-LM or multimodal placeholders: causal() | spans(...))
//   documents(per_seq)       q and k in the same document of a packed sequence (documents start at the
//                            listed positions; the first starts at 0)
//
// Positions are those of the sequence (its i-th new token of q_len sits at seq_len - q_len + i), so a mask
// means the same in a prefill, a chunk and a decode step.
//
// Besides evaluating a pair, every mask classifies a rectangle (one sequence, query positions [q0, q1), key
// positions [k0, k1)) as full (every pair allowed), empty (none) or partial. The classification is exact:
// primitives by interval arithmetic, compositions from their children's exact answers, splitting the
// rectangle only where both children of an & or | are partial. The block-mask planner (flex_plan.h) is built
// on it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pagoda/attention/flex_attention/flex_program.h"

namespace pagoda {

enum class FlexTile : uint8_t { kEmpty, kPartial, kFull };

struct FlexSpan {
  int32_t begin = 0, end = 0;  // positions [begin, end)
};

// A mask flattened for the kernels (flex_program.h): instructions and span tables, owned.
struct FlexProgram {
  std::vector<FlexInstr> code;
  std::vector<int32_t> data;
  FlexProgramView view() const { return {code.data(), int32_t(code.size()), data.data()}; }
  // 32-bit words of code and data (the device staging unit).
  size_t words() const { return 2 * code.size() + data.size(); }
};

// Most keys eval_row() takes at once.
constexpr int kFlexMaxRow = 256;

class FlexMask {
 public:
  static FlexMask full();
  static FlexMask causal();
  static FlexMask sliding_window(int window);  // window >= 1
  static FlexMask chunked_local(int chunk);    // chunk >= 1
  // per_seq[s]: sequence s's spans, sorted and disjoint (checked); a sequence past the list has none.
  static FlexMask spans(std::vector<std::vector<FlexSpan>> per_seq);
  // per_seq[s]: sorted start positions of sequence s's documents after the first (which starts at 0).
  static FlexMask documents(const std::vector<std::vector<int32_t>>& starts_per_seq);

  FlexMask operator&(const FlexMask& o) const;
  FlexMask operator|(const FlexMask& o) const;
  FlexMask operator~() const;

  bool allows(int seq, int32_t q, int32_t k) const;
  // out[j] = allows(seq, q, k0 + j) for j < n; PRECOND: 0 < n <= kFlexMaxRow.
  void eval_row(int seq, int32_t q, int32_t k0, int n, uint8_t* out) const;
  // Exact class of the rectangle; PRECOND: q0 < q1, k0 < k1.
  FlexTile classify(int seq, int32_t q0, int32_t q1, int32_t k0, int32_t k1) const;
  // The mask as a postfix program whose flex_eval equals allows(); throws a config pagoda::Error past
  // kFlexMaxProgram instructions.
  FlexProgram program() const;
  // For tests and errors: "(causal & window(8)) | spans".
  std::string str() const;

  struct Node;

 private:
  explicit FlexMask(std::shared_ptr<const Node> n) : node_(std::move(n)) {}
  std::shared_ptr<const Node> node_;
};

// Score modifiers, applied to s = scale * q.k in this order: soft-cap, then ALiBi, then the relative bias.
struct FlexScoreMod {
  float softcap = 0.0f;             // > 0: s = softcap * tanh(s / softcap)
  std::vector<float> alibi_slopes;  // [num_q_heads] or empty: s += slope[h] * (k - q)
  // [num_q_heads, 2 * rel_bias_max + 1] or empty: s += rel_bias[h][clamp(k - q, -max, max) + max]
  std::vector<float> rel_bias;
  int rel_bias_max = 0;

  bool empty() const { return softcap <= 0 && alibi_slopes.empty() && rel_bias.empty(); }
};

}  // namespace pagoda
