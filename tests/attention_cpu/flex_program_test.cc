// FLEX_ATTENTION's device form of a mask (flex_program.h), run on the CPU: the flattened program's evaluator
// (the __host__ __device__ function the CUDA kernels call) equals FlexMask::allows on every pair of a grid,
// for every primitive and compositions of them, sequences with and without spans included; the score
// modifiers' evaluator equals the formulas of FlexScoreMod computed in double.
#include <algorithm>
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "pagoda/attention/flex_attention/flex_mask.h"
#include "pagoda/attention/flex_attention/flex_program.h"
#include "pagoda/core/error.h"

namespace pagoda {
namespace {

std::vector<FlexMask> program_masks() {
  const FlexMask c = FlexMask::causal();
  // Sequence 1 of the spans has three spans (two adjacent), sequence 2 none; documents: sequence 1 one document.
  const FlexMask sp = FlexMask::spans({{{0, 40}}, {{5, 9}, {9, 30}, {70, 130}}, {}});
  const FlexMask docs = FlexMask::documents({{17, 60, 61}, {}, {100}});
  return {FlexMask::full(),
          c,
          FlexMask::sliding_window(1),
          FlexMask::sliding_window(24),
          FlexMask::chunked_local(1),
          FlexMask::chunked_local(32),
          sp,
          docs,
          ~c,
          c & FlexMask::sliding_window(24),
          c & FlexMask::chunked_local(32),
          c | sp,
          c & docs,
          c & docs & FlexMask::sliding_window(40),
          (c & FlexMask::sliding_window(8)) | ~FlexMask::chunked_local(16),
          c & ~c,
          c | ~c,
          ~(sp | docs) & (FlexMask::chunked_local(7) | ~FlexMask::sliding_window(3)),
          // Two span tables in one program.
          (c | FlexMask::spans({{{3, 11}}, {{0, 2}}, {{50, 90}}})) & docs};
}

TEST(FlexProgram, EvaluatesAsAllows) {
  std::mt19937 rng(11);
  for (const FlexMask& m : program_masks()) {
    SCOPED_TRACE(m.str());
    const FlexProgram prog = m.program();
    const FlexProgramView v = prog.view();
    ASSERT_LE(v.len, kFlexMaxProgram);
    // Sequences 0-2 have their own spans, 3 is past every table.
    for (int seq = 0; seq < 4; ++seq) {
      for (int32_t q = 0; q < 140; ++q)
        for (int32_t k = 0; k < 140; ++k)
          ASSERT_EQ(flex_eval(v, seq, q, k), m.allows(seq, q, k)) << "seq " << seq << " q " << q << " k " << k;
      // Far positions (documents end at INT32_MAX; windows and chunks across large distances).
      for (int i = 0; i < 2000; ++i) {
        const int32_t q = int32_t(rng() % 1000000), k = int32_t(rng() % 1000000);
        ASSERT_EQ(flex_eval(v, seq, q, k), m.allows(seq, q, k)) << "seq " << seq << " q " << q << " k " << k;
      }
    }
  }
}

TEST(FlexProgram, DeepCompositionsAndLimit) {
  // A left-deep chain and a right-deep chain of 16 primitives: stack depth 2 and 16.
  FlexMask left = FlexMask::sliding_window(1), right = FlexMask::sliding_window(1);
  for (int w = 2; w <= 16; ++w) {
    left = (w % 2 ? left & FlexMask::sliding_window(200 - w) : left | FlexMask::chunked_local(w));
    right = (w % 2 ? FlexMask::sliding_window(200 - w) & right : FlexMask::chunked_local(w) | right);
  }
  for (const FlexMask& m : {left, right}) {
    const FlexProgram prog = m.program();
    EXPECT_EQ(prog.code.size(), 31u);
    for (int32_t q = 0; q < 120; ++q)
      for (int32_t k = 0; k < 120; ++k) ASSERT_EQ(flex_eval(prog.view(), 0, q, k), m.allows(0, q, k)) << q << " " << k;
  }
  // 33 instructions: refused with the mask named.
  EXPECT_THROW((left & FlexMask::causal()).program(), Error);
}

TEST(FlexProgram, ScoreModifiersAsFormulas) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int heads = 3, R = 5;
  std::vector<float> slopes(heads), bias(size_t(heads * (2 * R + 1)));
  for (auto& x : slopes) x = u(rng);
  for (auto& x : bias) x = u(rng);
  for (float softcap : {0.0f, 7.5f})
    for (bool alibi : {false, true})
      for (bool rel : {false, true}) {
        FlexScoreModView v;
        v.softcap = softcap;
        v.alibi = alibi ? slopes.data() : nullptr;
        v.rel_bias = rel ? bias.data() : nullptr;
        v.rel_bias_max = R;
        EXPECT_EQ(v.empty(), softcap == 0.0f && !alibi && !rel);
        for (int i = 0; i < 500; ++i) {
          const int h = int(rng() % heads);
          const float s = 20.0f * u(rng);
          const int32_t d = int32_t(rng() % 41) - 20;
          double want = s;
          if (softcap > 0) want = softcap * std::tanh(want / softcap);
          if (alibi) want += double(slopes[size_t(h)]) * d;
          if (rel) want += bias[size_t(h * (2 * R + 1) + std::clamp(d, -R, R) + R)];
          // float32 evaluation of at most three terms: a few units of 2^-24 of the magnitudes involved.
          const double tol = 8 * 0x1p-24 * (std::fabs(s) + 20.0 + 1.0);
          ASSERT_NEAR(flex_modify(v, h, s, d), want, tol) << softcap << " " << alibi << " " << rel;
        }
      }
}

}  // namespace
}  // namespace pagoda
